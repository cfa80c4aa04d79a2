// cmd_sft.c: still sft — flags (TRL SFTConfig / TrainingArguments names) -> SftConfig -> sft_run.
#include "../core/log.h"
#include "../train/sft.h"
#include "../core/meminfo.h"
#include "cli_common.h"
#include "commands.h"

#include <math.h>
#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, "model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"dataset", ARG_STR, NULL, "training data: a local JSONL or JSON file (TRL formats)"},
    {"eval_dataset", ARG_STR, NULL, "evaluation data (same formats)"},
    {"output_dir", ARG_STR, NULL, "directory for checkpoints, the final model and metrics.jsonl"},
    {"max_length", ARG_INT, "1024", "truncate (keep_start) / pack to this many tokens"},
    {"truncation_mode", ARG_STR, "keep_start", "keep_start (the only mode)"},
    {"packing", ARG_BOOL, "false", "pack examples into rows of max_length"},
    {"packing_strategy", ARG_STR, "bfd", "bfd | wrapped"},
    {"padding", ARG_STR, "longest", "longest (rounded up to pad_to_multiple_of) | max_length (one shape)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round batch lengths up to this (static shapes; 0 or 1 = off)"},
    {"dataloader_drop_last", ARG_BOOL, "false", "drop the last incomplete batch (else padded with empty rows)"},
    {"completion_only_loss", ARG_BOOL, NULL, "loss on completion tokens only (default: on for prompt-completion)"},
    {"assistant_only_loss", ARG_BOOL, "false", "loss on the chat template's {% generation %} tokens only"},
    {"dataset_text_field", ARG_STR, "text", "column of language-modeling text"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"eos_token", ARG_STR, NULL, "EOS token string (default: the tokenizer's)"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {"shuffle", ARG_BOOL, "true", "reshuffle rows every epoch (seeded, as the HF dataloader)"},
    {"learning_rate", ARG_FLOAT, "2e-5", "peak learning rate"},
    {"lr_scheduler_type", ARG_STR, "linear", "linear | cosine | constant | constant_with_warmup"},
    {"warmup_steps", ARG_FLOAT, "0", "warmup steps; below 1 a ratio of the total steps"},
    {"warmup_ratio", ARG_FLOAT, "0", "warmup as a ratio of the total steps"},
    {"weight_decay", ARG_FLOAT, "0", "AdamW weight decay (not on norms and biases)"},
    {"adam_beta1", ARG_FLOAT, "0.9", "AdamW beta1"},
    {"adam_beta2", ARG_FLOAT, "0.999", "AdamW beta2"},
    {"adam_epsilon", ARG_FLOAT, "1e-8", "AdamW epsilon"},
    {"optim", ARG_STR, "adamw_torch", "adamw_torch (the only optimizer)"},
    {"max_grad_norm", ARG_FLOAT, "1.0", "clip the global gradient norm (0 = off)"},
    {"num_train_epochs", ARG_FLOAT, "3", "epochs"},
    {"max_steps", ARG_INT, "-1", "optimizer steps (overrides num_train_epochs)"},
    {"per_device_train_batch_size", ARG_INT, "8", "rows per micro-batch"},
    {"per_device_eval_batch_size", ARG_INT, "8", "rows per eval batch"},
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
    {"torch_compile", ARG_BOOL, "false", "accepted: plans replace compilation"},
    {"max_plans", ARG_INT, "0", "fail instead of building more than N plans (0 = no limit)"},
    CLI_DIST_FLAGS,
    {"stop_after_steps", ARG_INT, "0", "stop after N steps of this invocation, as if interrupted (testing resume)"},
    {"skip_nonfinite", ARG_BOOL, "false", "skip the update of a step whose loss or gradient is NaN/Inf (default: stop)"},
    {NULL, 0, NULL, NULL},
};

static Status build(const Args *a, SftConfig *c, char **model_dir, Err *e) {
    memset(c, 0, sizeof *c);
    TRY(cli_model_dir(a, "model", model_dir, e));
    c->model_dir = *model_dir;
    c->dataset = args_str(a, "dataset");
    if (!c->dataset) return err_set(e, ST_EINVAL, "--dataset FILE.jsonl is required (also --dataset_name, --train_file)");
    c->eval_dataset = args_str(a, "eval_dataset");
    c->train.output_dir = args_str(a, "output_dir");
    if (!c->train.output_dir) return err_set(e, ST_EINVAL, "--output_dir DIR is required");
    c->backend = args_str(a, "device");
    c->threads = (int)args_int(a, "threads");
    const char *mm = args_str(a, "max_memory");
    if (mm && mem_parse_size(mm, &c->max_memory) != 0)
        return err_set(e, ST_EINVAL, "--max_memory %s: expected a size such as 8GiB, 512MiB or a number of bytes", mm);
    TRY(cli_dtype(a, &c->dtype, e));
    c->save_dtype = -1;
    if (args_str(a, "save_dtype")) {
        DType d;
        if (dtype_parse(args_str(a, "save_dtype"), &d) != 0 || d == DT_F16)
            return err_set(e, ST_EINVAL, "--save_dtype %s: expected float32 or bfloat16", args_str(a, "save_dtype"));
        c->save_dtype = (int)d;
    }
    if (strcmp(args_str(a, "truncation_mode"), "keep_start"))
        return err_set(e, ST_EUNSUPPORTED, "--truncation_mode %s is not supported yet (keep_start only; TRL deprecated "
                                           "keep_end)", args_str(a, "truncation_mode"));
    if (strcmp(args_str(a, "optim"), "adamw_torch") && strcmp(args_str(a, "optim"), "adamw_torch_fused"))
        return err_set(e, ST_EUNSUPPORTED, "--optim %s is not supported yet (adamw_torch only)", args_str(a, "optim"));
    DataConfig *d = &c->data;
    d->text_field = args_str(a, "dataset_text_field");
    d->max_length = (int)args_int(a, "max_length");
    d->completion_only_loss = args_is_set(a, "completion_only_loss") ? args_bool(a, "completion_only_loss") : -1;
    d->assistant_only_loss = args_bool(a, "assistant_only_loss");
    d->skip_bad_rows = args_bool(a, "skip_bad_rows");
    c->chat_template_kwargs = args_str(a, "chat_template_kwargs");
    c->eos_token = args_str(a, "eos_token");
    c->packing = args_bool(a, "packing");
    TRY(batch_parse_packing(args_str(a, "packing_strategy"), &c->packing_strategy, e));
    if (c->packing && d->max_length <= 0) return err_set(e, ST_EINVAL, "--packing needs --max_length > 0");
    const char *pad = args_str(a, "padding");
    if (!strcmp(pad, "max_length")) c->padding_max_length = 1;
    else if (strcmp(pad, "longest")) return err_set(e, ST_EINVAL, "--padding %s: expected longest or max_length", pad);
    if (c->padding_max_length && d->max_length <= 0) return err_set(e, ST_EINVAL, "--padding max_length needs --max_length");
    BatchConfig *b = &c->batch;
    b->B = (int)args_int(a, "per_device_train_batch_size");
    b->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    b->drop_last = args_bool(a, "dataloader_drop_last");
    b->shuffle = args_bool(a, "shuffle");
    b->seed = (uint64_t)args_int(a, "seed");
    c->eval_batch_size = (int)args_int(a, "per_device_eval_batch_size");
    if (b->B <= 0 || c->eval_batch_size <= 0) return err_set(e, ST_EINVAL, "batch sizes must be positive");
    c->max_plans = (int)args_int(a, "max_plans");
    TrainConfig *t = &c->train;
    t->grad_accum = (int)args_int(a, "gradient_accumulation_steps");
    if (t->grad_accum <= 0) return err_set(e, ST_EINVAL, "--gradient_accumulation_steps must be positive");
    t->num_train_epochs = args_float(a, "num_train_epochs");
    t->max_steps = (int)args_int(a, "max_steps");
    OptimConfig *o = &t->opt;
    o->lr = args_float(a, "learning_rate");
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
    t->seed = b->seed;
    t->stop_after_steps = (int)args_int(a, "stop_after_steps");
    t->skip_nonfinite = args_bool(a, "skip_nonfinite");
    if (args_bool(a, "torch_compile")) log_info("--torch_compile: plans replace compilation (one plan per shape)");
    return ST_OK;
}

static Status run(const Args *a, Err *e) {
    SftConfig c;
    char *dir = NULL;
    Dist d;
    Status st = build(a, &c, &dir, e);
    if (st == ST_OK) st = cli_dist(a, &d, &c.train.zero_stage, e);
    else dist_single(&d);
    c.dist = &d;
    TrainResult res;
    if (st == ST_OK) st = sft_run(&c, &res, e);
    if (st == ST_OK && d.rank == 0)
        printf("{\"steps\": %d, \"loss\": %.9g, \"train_seconds\": %.3f, \"tokens_per_second\": %.1f}\n", res.steps,
               res.last_loss, res.train_seconds, res.tokens_per_second);
    free(dir);
    if (st != ST_OK && d.world > 1) dist_abort(&d, cli_fail("sft", e));  // the other ranks wait in a collective
    dist_finalize(&d);
    return st;
}

int cmd_sft(int argc, char **argv) {
    return cli_run("sft", "Supervised fine-tuning with TRL SFTTrainer semantics on static shapes.", specs, argc, argv,
                   run);
}
