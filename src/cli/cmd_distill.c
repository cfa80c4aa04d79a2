// cmd_distill.c: still distill — flags (TRL DistillationConfig / GKDConfig names) -> DistillConfig
// -> distill_run. Defaults are DistillationTrainer's; --gkd switches to GKDTrainer's.
#include "../train/distill.h"
#include "cli_common.h"
#include "cli_train.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "student: model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"teacher", ARG_STR, NULL, ARG_REQUIRED "teacher model directory or hub id, or self (self-distillation, OPSD)"},
    {"teacher_dtype", ARG_STR, NULL, "storage of the frozen teacher's weights: float32 | bfloat16 | q8_0 (default: its checkpoint's)"},
    {"teacher_adapter", ARG_STR, NULL, "PEFT LoRA adapter directory applied to the teacher (--teacher DIR)"},
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "prompts: a local JSONL or JSON file (prompt-only or conversational rows)"},
    {"eval_dataset", ARG_STR, NULL, "held-out prompts: eval_loss and eval_kl_student_teacher on student rollouts"},
    {"gkd", ARG_BOOL, "false", "GKDTrainer's defaults and behaviour (lmbda, seq_kd, beta 0.5, temperature 0.9 for sampling only)"},
    {"loss", ARG_STR, "jsd", "jsd (generalized JSD, --beta) | reverse_kl_sampled (sampled-token reverse KL) | "
                             "reverse_kl (= jsd, beta 1) | forward_kl (= jsd, beta 0)"},
    {"beta", ARG_FLOAT, NULL, "JSD interpolation: 0 forward KL(teacher||student), 1 reverse KL (default 1; GKD 0.5)", "[0,1]"},
    {"loss_top_k", ARG_INT, "0", "restrict the loss to the teacher's top-k tokens (0 = full vocabulary)", "[0,inf)"},
    {"temperature", ARG_FLOAT, NULL, "sampling temperature, also the loss temperature except with --gkd (default 1; GKD 0.9)", "(0,inf)"},
    {"top_p", ARG_FLOAT, NULL, "nucleus sampling of rollouts (default 0.95; GKD 1.0)", "(0,1]"},
    {"top_k", ARG_INT, "0", "top-k sampling of rollouts (0 = off)", "[0,inf)"},
    {"max_completion_length", ARG_INT, NULL, "tokens generated per rollout (default 512; GKD max_new_tokens 128)", "[1,inf)"},
    {"max_new_tokens", ARG_INT, NULL, "GKD's name for --max_completion_length (generation only: dataset completions stay whole)", "[1,inf)"},
    {"rollout_do_sample", ARG_BOOL, "true", "sample rollouts (false: greedy, deterministic)"},
    {"lmbda", ARG_FLOAT, NULL, "GKD: fraction of micro-batches with student rollouts (default 0.5)", "[0,1]"},
    {"seq_kd", ARG_BOOL, "false", "GKD: otherwise the teacher generates (sequence-level KD) instead of dataset completions"},
    {"max_length", ARG_INT, NULL, "GKD: a dataset prompt + completion longer than this keeps its last N tokens (the "
                                  "prompt loses its oldest; the completion stays whole) (default 1024)", "[1,inf)"},
    {"teacher_prompt_template", ARG_STR, NULL, "self-distillation: the teacher's prompt, {column} filled from the row "
                                               "(default: OPSD's, with {problem} and {solution})"},
    {"teacher_mode", ARG_STR, "fixed", "self-distillation teacher: fixed (initial weights) | ema | live"},
    {"teacher_ema_decay", ARG_FLOAT, "0.999", "--teacher_mode ema: teacher = decay * teacher + (1 - decay) * student", "[0,1]"},
    {"log_rollouts", ARG_STR, NULL, "write every rollout (prompt, teacher prompt, completion) to this JSONL file"},
    {"max_prompt_length", ARG_INT, "0", "keep the last N prompt tokens (0 = no truncation)", "[0,inf)"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"eos_token", ARG_STR, NULL, "EOS token string (default: the tokenizer's)"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {"shuffle", ARG_BOOL, "true", "reshuffle prompts every epoch (seeded)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round prompt regions and scoring rows up to this (static shapes)", "[0,inf)"},
    {"generation_batch_size", ARG_INT, NULL, "rows per generation batch (default: every rollout of the step; GKD: one micro-batch)", "[1,inf)"},
    {"prefill_chunk_size", ARG_INT, "512", "prefill chunk of rollouts (a multiple of pad_to_multiple_of)", "[1,inf)"},
    {"use_vllm", ARG_BOOL, "false", "accepted when false: rollouts use still's own generation engine"},
    {NULL, 0, NULL, NULL},
};

// Shared training flags with this trainer's default or help (the learning rate, when not given,
// follows --gkd: build).
static const ArgSpec train_defaults[] = {
    {"learning_rate", ARG_FLOAT, NULL, "peak learning rate (default 1e-6; GKD 2e-5)", "[0,inf)"},
    {"num_train_epochs", ARG_FLOAT, "3", "epochs over the prompts", "[0,inf)"},
    {"per_device_train_batch_size", ARG_INT, "8", "prompts per micro-batch", "[1,inf)"},
    {"max_plans", ARG_INT, "0", "fail instead of building more than N plans per model (0 = no limit)", "[0,inf)"},
    {NULL, 0, NULL, NULL},
};

static double fdef(const Args *a, const char *name, double def) { return args_is_set(a, name) ? args_float(a, name) : def; }

static Status build(const Args *a, DistillConfig *c, char **model_dir, char **teacher_dir, Err *e) {
    memset(c, 0, sizeof *c);
    TRY(cli_model_dir(a, "model", model_dir, e));
    c->model_dir = *model_dir;
    const char *teacher = args_str(a, "teacher");
    if (!teacher) return err_set(e, ST_EINVAL, "--teacher DIR (or --teacher self) is required (also --teacher_model_name_or_path)");
    if (strcmp(teacher, "self")) {
        TRY(cli_model_dir(a, "teacher", teacher_dir, e));
        c->teacher_dir = *teacher_dir;
    }
    c->dataset = args_str(a, "dataset");
    if (!c->dataset) return err_set(e, ST_EINVAL, "--dataset FILE.jsonl is required (also --dataset_name, --train_file)");
    c->eval_dataset = args_str(a, "eval_dataset");
    CliTrain r;
    TRY(cli_train_config(a, CLI_TRAIN_EVAL, &c->train, &r, e));
    if (c->train.eval_steps > 0 && !c->eval_dataset)
        return err_set(e, ST_EINVAL, "--eval_strategy steps needs --eval_dataset (as Trainer)");
    c->backend = r.backend, c->threads = r.threads, c->max_memory = r.max_memory, c->max_plans = r.max_plans;
    c->ep_size = (int)args_int(a, "ep_size");
    c->dtype = r.dtype, c->save_dtype = r.save_dtype, c->B = r.batch_size;
    if (args_bool(a, "use_vllm"))
        return err_set(e, ST_EUNSUPPORTED, "--use_vllm is not supported: rollouts run on still's own static-shape engine");
    int teacher_dtype;
    TRY(cli_dtype_flag(a, "teacher_dtype", &teacher_dtype, e));
    c->teacher_dtype = (DType)teacher_dtype;
    c->teacher_adapter = args_str(a, "teacher_adapter");
    if (c->teacher_adapter && !c->teacher_dir)
        return err_set(e, ST_EINVAL, "--teacher_adapter applies to a --teacher DIR model, not to --teacher self");
    // TRL's defaults: DistillationTrainer, or GKDTrainer with --gkd
    int gkd = c->gkd = args_bool(a, "gkd");
    DistillLoss *L = &c->loss;
    const char *loss = args_str(a, "loss");
    double beta = fdef(a, "beta", gkd ? 0.5 : 1.0);
    if (!strcmp(loss, "jsd")) L->kind = DISTILL_LOSS_JSD;
    else if (!strcmp(loss, "reverse_kl")) L->kind = DISTILL_LOSS_JSD, beta = 1;
    else if (!strcmp(loss, "forward_kl")) L->kind = DISTILL_LOSS_JSD, beta = 0;
    else if (!strcmp(loss, "reverse_kl_sampled")) L->kind = DISTILL_LOSS_SAMPLED;
    else return err_set(e, ST_EINVAL, "--loss %s: expected jsd, reverse_kl_sampled, reverse_kl or forward_kl", loss);
    if (!(beta >= 0 && beta <= 1)) return err_set(e, ST_EINVAL, "--beta %g: expected a value in [0, 1]", beta);
    L->beta = (float)beta;
    L->top_k = (int)args_int(a, "loss_top_k");
    if (L->top_k < 0) return err_set(e, ST_EINVAL, "--loss_top_k must be >= 0");
    if (L->kind == DISTILL_LOSS_SAMPLED && (L->top_k || args_is_set(a, "beta")))
        return err_set(e, ST_EINVAL, "--loss reverse_kl_sampled uses the sampled token only: --beta and --loss_top_k do "
                                     "not apply");
    double temp = fdef(a, "temperature", gkd ? 0.9 : 1.0);
    if (!(temp > 0)) return err_set(e, ST_EINVAL, "--temperature must be > 0");
    L->tau = gkd ? 1.0f : (float)temp;  // GKD's loss runs at temperature 1
    GenConfig *g = &c->gen;
    gen_config_default(g);
    g->do_sample = args_bool(a, "rollout_do_sample");
    g->temperature = (float)temp;
    g->top_p = fdef(a, "top_p", gkd ? 1.0 : 0.95);
    g->top_k = (int)args_int(a, "top_k");
    g->min_p = 0, g->repetition_penalty = 1, g->no_repeat_ngram_size = 0, g->min_new_tokens = 0;
    g->prefill_chunk_size = (int)args_int(a, "prefill_chunk_size");
    int mcl = args_is_set(a, "max_completion_length") ? (int)args_int(a, "max_completion_length")
              : args_is_set(a, "max_new_tokens")      ? (int)args_int(a, "max_new_tokens")
              : gkd                                    ? 128
                                                       : 512;
    if (mcl <= 0) return err_set(e, ST_EINVAL, "--max_completion_length must be positive");
    g->max_new_tokens = mcl;
    c->lmbda = fdef(a, "lmbda", 0.5);
    c->seq_kd = args_bool(a, "seq_kd");
    if (!gkd && (args_is_set(a, "lmbda") || c->seq_kd))
        return err_set(e, ST_EINVAL, "--lmbda and --seq_kd are GKD flags: add --gkd (DistillationTrainer is always "
                                     "on-policy)");
    if (!(c->lmbda >= 0 && c->lmbda <= 1)) return err_set(e, ST_EINVAL, "--lmbda %g: expected a value in [0, 1]", c->lmbda);
    if (!gkd && args_is_set(a, "max_length"))
        return err_set(e, ST_EINVAL, "--max_length is a GKD flag (dataset completions): add --gkd");
    c->max_length = gkd ? (args_is_set(a, "max_length") ? (int)args_int(a, "max_length") : 1024) : 0;
    if (gkd && c->max_length <= 0) return err_set(e, ST_EINVAL, "--max_length must be positive");
    // self-distillation
    c->teacher_prompt_template = args_str(a, "teacher_prompt_template");
    const char *tm = args_str(a, "teacher_mode");
    if (!strcmp(tm, "fixed")) c->teacher_mode = TEACHER_FIXED;
    else if (!strcmp(tm, "ema")) c->teacher_mode = TEACHER_EMA;
    else if (!strcmp(tm, "live")) c->teacher_mode = TEACHER_LIVE;
    else return err_set(e, ST_EINVAL, "--teacher_mode %s: expected fixed, ema or live", tm);
    c->teacher_ema_decay = args_float(a, "teacher_ema_decay");
    if (!(c->teacher_ema_decay >= 0 && c->teacher_ema_decay < 1))
        return err_set(e, ST_EINVAL, "--teacher_ema_decay %g: expected a value in [0, 1)", c->teacher_ema_decay);
    if (c->teacher_dir && (c->teacher_prompt_template || args_is_set(a, "teacher_mode")))
        return err_set(e, ST_EINVAL, "--teacher_prompt_template and --teacher_mode are for self-distillation "
                                     "(--teacher self)");
    if (!c->teacher_dir && c->teacher_mode == TEACHER_EMA &&
        (c->teacher_dtype == DT_BF16 || c->teacher_dtype == DT_Q8_0))
        return err_set(e, ST_EINVAL, "--teacher_mode ema keeps the teacher in float32 (it is updated every step)");
    c->log_rollouts = args_str(a, "log_rollouts");
    PromptConfig *pc = &c->prompts;
    pc->max_prompt_length = (int)args_int(a, "max_prompt_length");
    pc->skip_bad_rows = args_bool(a, "skip_bad_rows");
    c->chat_template_kwargs = args_str(a, "chat_template_kwargs");
    c->eos_token = args_str(a, "eos_token");
    c->shuffle = args_bool(a, "shuffle");
    c->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    c->generation_batch_size = args_is_set(a, "generation_batch_size") ? (int)args_int(a, "generation_batch_size") : 0;
    c->train.opt.lr = fdef(a, "learning_rate", gkd ? 2e-5 : 1e-6);
    return ST_OK;
}

int cmd_distill(int argc, char **argv) {
    Args a;
    int done;
    ArgSpec *all = cli_train_specs(specs, train_defaults, CLI_TRAIN_EVAL);
    int rc = cli_parse(&a, "distill", "On-policy distillation with TRL DistillationTrainer / GKDTrainer semantics, "
                                      "and on-policy self-distillation (OPSD), on static shapes.",
                       all, argc, argv, &done);
    if (rc || done) return free(all), rc;
    Err e = {0};
    DistillConfig c;
    char *dir = NULL, *tdir = NULL;
    Dist d;
    Status st = build(&a, &c, &dir, &tdir, &e);
    if (st == ST_OK) st = cli_dist(&a, &d, &c.train.zero_stage, &e);
    else dist_single(&d);
    c.dist = &d;
    TrainResult res;
    if (st == ST_OK) st = distill_run(&c, &res, &e);
    if (st == ST_OK && d.rank == 0)
        cli_print_train_result(&res);
    free(dir);
    free(tdir);
    args_free(&a);
    free(all);
    return cli_dist_finish("distill", &d, st, &e);
}
