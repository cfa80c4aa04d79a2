// cmd_distill.c: still distill — flags (TRL DistillationConfig / GKDConfig names) -> DistillConfig
// -> distill_run. Defaults are DistillationTrainer's; --gkd switches to GKDTrainer's.
#include "../core/log.h"
#include "../train/distill.h"
#include "cli_common.h"
#include "commands.h"

#include <math.h>
#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, "student: model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"teacher", ARG_STR, NULL, "teacher model directory or hub id, or self (self-distillation, OPSD)"},
    {"teacher_dtype", ARG_STR, NULL, "storage of the frozen teacher's weights: float32 | bfloat16 (default: its checkpoint's)"},
    {"dataset", ARG_STR, NULL, "prompts: a local JSONL or JSON file (prompt-only or conversational rows)"},
    {"eval_dataset", ARG_STR, NULL, "held-out prompts: eval_loss and eval_kl_student_teacher on student rollouts"},
    {"output_dir", ARG_STR, NULL, "directory for checkpoints, the final model and metrics.jsonl"},
    {"gkd", ARG_BOOL, "false", "GKDTrainer's defaults and behaviour (lmbda, seq_kd, beta 0.5, temperature 0.9 for sampling only)"},
    {"loss", ARG_STR, "jsd", "jsd (generalized JSD, --beta) | reverse_kl_sampled (sampled-token reverse KL) | "
                             "reverse_kl (= jsd, beta 1) | forward_kl (= jsd, beta 0)"},
    {"beta", ARG_FLOAT, NULL, "JSD interpolation: 0 forward KL(teacher||student), 1 reverse KL (default 1; GKD 0.5)"},
    {"loss_top_k", ARG_INT, "0", "restrict the loss to the teacher's top-k tokens (0 = full vocabulary)"},
    {"temperature", ARG_FLOAT, NULL, "sampling temperature, also the loss temperature except with --gkd (default 1; GKD 0.9)"},
    {"top_p", ARG_FLOAT, NULL, "nucleus sampling of rollouts (default 0.95; GKD 1.0)"},
    {"top_k", ARG_INT, "0", "top-k sampling of rollouts (0 = off)"},
    {"max_completion_length", ARG_INT, NULL, "tokens generated per rollout (default 512; GKD max_new_tokens 128)"},
    {"max_new_tokens", ARG_INT, NULL, "GKD's name for --max_completion_length"},
    {"rollout_do_sample", ARG_BOOL, "true", "sample rollouts (false: greedy, deterministic)"},
    {"lmbda", ARG_FLOAT, NULL, "GKD: fraction of micro-batches with student rollouts (default 0.5)"},
    {"seq_kd", ARG_BOOL, "false", "GKD: otherwise the teacher generates (sequence-level KD) instead of dataset completions"},
    {"teacher_prompt_template", ARG_STR, NULL, "self-distillation: the teacher's prompt, {column} filled from the row "
                                               "(default: OPSD's, with {problem} and {solution})"},
    {"teacher_mode", ARG_STR, "fixed", "self-distillation teacher: fixed (initial weights) | ema | live"},
    {"teacher_ema_decay", ARG_FLOAT, "0.999", "--teacher_mode ema: teacher = decay * teacher + (1 - decay) * student"},
    {"log_rollouts", ARG_STR, NULL, "write every rollout (prompt, teacher prompt, completion) to this JSONL file"},
    {"max_prompt_length", ARG_INT, "0", "keep the last N prompt tokens (0 = no truncation)"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"eos_token", ARG_STR, NULL, "EOS token string (default: the tokenizer's)"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {"shuffle", ARG_BOOL, "true", "reshuffle prompts every epoch (seeded)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round prompt regions and scoring rows up to this (static shapes)"},
    {"generation_batch_size", ARG_INT, NULL, "rows per generation batch (default: every rollout of the step; GKD: one micro-batch)"},
    {"prefill_chunk_size", ARG_INT, "512", "prefill chunk of rollouts (a multiple of pad_to_multiple_of)"},
    {"learning_rate", ARG_FLOAT, NULL, "peak learning rate (default 1e-6; GKD 2e-5)"},
    {"lr_scheduler_type", ARG_STR, "linear", "linear | cosine | constant | constant_with_warmup"},
    {"warmup_steps", ARG_FLOAT, "0", "warmup steps; below 1 a ratio of the total steps"},
    {"warmup_ratio", ARG_FLOAT, "0", "warmup as a ratio of the total steps"},
    {"weight_decay", ARG_FLOAT, "0", "AdamW weight decay (not on norms and biases)"},
    {"adam_beta1", ARG_FLOAT, "0.9", "AdamW beta1"},
    {"adam_beta2", ARG_FLOAT, "0.999", "AdamW beta2"},
    {"adam_epsilon", ARG_FLOAT, "1e-8", "AdamW epsilon"},
    {"max_grad_norm", ARG_FLOAT, "1.0", "clip the global gradient norm (0 = off)"},
    {"num_train_epochs", ARG_FLOAT, "3", "epochs over the prompts"},
    {"max_steps", ARG_INT, "-1", "optimizer steps (overrides num_train_epochs)"},
    {"per_device_train_batch_size", ARG_INT, "8", "prompts per micro-batch"},
    {"gradient_accumulation_steps", ARG_INT, "1", "micro-batches per optimizer step"},
    {"logging_steps", ARG_INT, "10", "one metrics.jsonl line every N steps"},
    {"logging_first_step", ARG_BOOL, "false", "also log step 1"},
    {"save_strategy", ARG_STR, "steps", "steps | no"},
    {"save_steps", ARG_INT, "500", "checkpoint every N steps"},
    {"save_total_limit", ARG_INT, NULL, "keep only the newest N checkpoints"},
    {"save_only_model", ARG_BOOL, "false", "checkpoints without optimizer state (cannot be resumed)"},
    {"save_dtype", ARG_STR, NULL, "dtype of saved weights (default: --dtype, else the input checkpoint's)"},
    {"eval_strategy", ARG_STR, "no", "no | steps (with --eval_dataset, also evaluated at the end)"},
    {"eval_steps", ARG_INT, NULL, "evaluate every N steps (default: logging_steps)"},
    {"resume_from_checkpoint", ARG_STR, NULL, "checkpoint directory, or latest (in output_dir)"},
    {"max_plans", ARG_INT, "0", "fail instead of building more than N plans per model (0 = no limit)"},
    {"stop_after_steps", ARG_INT, "0", "stop after N steps of this invocation, as if interrupted (testing resume)"},
    {"use_vllm", ARG_BOOL, "false", "accepted when false: rollouts use still's own generation engine"},
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
    TrainConfig *t = &c->train;
    t->output_dir = args_str(a, "output_dir");
    if (!t->output_dir) return err_set(e, ST_EINVAL, "--output_dir DIR is required");
    if (args_bool(a, "use_vllm"))
        return err_set(e, ST_EUNSUPPORTED, "--use_vllm is not supported: rollouts run on still's own static-shape engine");
    c->backend = args_str(a, "device");
    c->threads = (int)args_int(a, "threads");
    TRY(cli_dtype(a, &c->dtype, e));
    c->save_dtype = -1;
    if (args_str(a, "save_dtype")) {
        DType d;
        if (dtype_parse(args_str(a, "save_dtype"), &d) != 0 || d == DT_F16)
            return err_set(e, ST_EINVAL, "--save_dtype %s: expected float32 or bfloat16", args_str(a, "save_dtype"));
        c->save_dtype = (int)d;
    }
    c->teacher_dtype = (DType)-1;
    if (args_str(a, "teacher_dtype")) {
        DType d;
        if (dtype_parse(args_str(a, "teacher_dtype"), &d) != 0 || d == DT_F16)
            return err_set(e, ST_EINVAL, "--teacher_dtype %s: expected float32 or bfloat16", args_str(a, "teacher_dtype"));
        c->teacher_dtype = d;
    }
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
    if (!c->teacher_dir && c->teacher_mode == TEACHER_EMA && c->teacher_dtype == DT_BF16)
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
    c->max_plans = (int)args_int(a, "max_plans");
    c->B = (int)args_int(a, "per_device_train_batch_size");
    if (c->B <= 0) return err_set(e, ST_EINVAL, "--per_device_train_batch_size must be positive");
    t->grad_accum = (int)args_int(a, "gradient_accumulation_steps");
    if (t->grad_accum <= 0) return err_set(e, ST_EINVAL, "--gradient_accumulation_steps must be positive");
    t->num_train_epochs = args_float(a, "num_train_epochs");
    t->max_steps = (int)args_int(a, "max_steps");
    OptimConfig *o = &t->opt;
    o->lr = fdef(a, "learning_rate", gkd ? 2e-5 : 1e-6);
    o->beta1 = args_float(a, "adam_beta1");
    o->beta2 = args_float(a, "adam_beta2");
    o->eps = args_float(a, "adam_epsilon");
    o->weight_decay = args_float(a, "weight_decay");
    o->max_grad_norm = args_float(a, "max_grad_norm");
    TRY(optim_parse_schedule(args_str(a, "lr_scheduler_type"), &o->sched, e));
    t->warmup_steps = args_float(a, "warmup_steps");
    t->warmup_ratio = args_float(a, "warmup_ratio");
    if (t->warmup_steps < 0 || t->warmup_ratio < 0 || t->warmup_ratio > 1)
        return err_set(e, ST_EINVAL, "--warmup_steps must be >= 0 and --warmup_ratio in [0, 1]");
    t->logging_steps = (int)args_int(a, "logging_steps");
    t->logging_first_step = args_bool(a, "logging_first_step");
    const char *ss = args_str(a, "save_strategy");
    if (strcmp(ss, "steps") && strcmp(ss, "no"))
        return err_set(e, ST_EUNSUPPORTED, "--save_strategy %s is not supported yet (steps or no)", ss);
    t->save_steps = strcmp(ss, "no") ? (int)args_int(a, "save_steps") : 0;
    t->save_total_limit = args_str(a, "save_total_limit") ? (int)args_int(a, "save_total_limit") : 0;
    t->save_only_model = args_bool(a, "save_only_model");
    const char *es = args_str(a, "eval_strategy");
    if (strcmp(es, "no") && strcmp(es, "steps"))
        return err_set(e, ST_EUNSUPPORTED, "--eval_strategy %s is not supported yet (steps or no)", es);
    t->eval_steps = !strcmp(es, "steps") || args_str(a, "eval_steps")
                        ? (args_str(a, "eval_steps") ? (int)args_int(a, "eval_steps") : t->logging_steps)
                        : 0;
    t->resume = args_str(a, "resume_from_checkpoint");
    if (t->resume && !strcmp(t->resume, "false")) t->resume = NULL;
    t->seed = (uint64_t)args_int(a, "seed");
    t->stop_after_steps = (int)args_int(a, "stop_after_steps");
    return ST_OK;
}

int cmd_distill(int argc, char **argv) {
    Args a;
    int done;
    int rc = cli_parse(&a, "distill", "On-policy distillation with TRL DistillationTrainer / GKDTrainer semantics, "
                                      "and on-policy self-distillation (OPSD), on static shapes.",
                       specs, argc, argv, &done);
    if (rc || done) return rc;
    Err e = {0};
    DistillConfig c;
    char *dir = NULL, *tdir = NULL;
    Status st = build(&a, &c, &dir, &tdir, &e);
    TrainResult res;
    if (st == ST_OK) st = distill_run(&c, &res, &e);
    if (st == ST_OK)
        printf("{\"steps\": %d, \"loss\": %.9g, \"train_seconds\": %.3f, \"tokens_per_second\": %.1f}\n", res.steps,
               res.last_loss, res.train_seconds, res.tokens_per_second);
    free(dir);
    free(tdir);
    args_free(&a);
    return st == ST_OK ? 0 : cli_fail("distill", &e);
}
