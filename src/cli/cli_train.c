// cli_train.c: the training flags every trainer shares, and TrainConfig from them.
#include "cli_train.h"

#include "../core/alloc.h"
#include "../core/interrupt.h"
#include "../core/log.h"
#include "cli_common.h"

#include <string.h>
#include <strings.h>

// Optimizer, schedule, batch, steps, logging and checkpoints. Defaults are the ones TRL's trainer
// configs agree on (the learning rate: TrainingArguments'); a trainer whose config differs, or
// whose help says more, passes its own entry (cli_train_specs).
static const ArgSpec train_specs[] = {
    {"output_dir", ARG_STR, NULL, ARG_REQUIRED "directory for checkpoints, the final model and metrics.jsonl"},
    {"learning_rate", ARG_FLOAT, "5e-5", "peak learning rate", "[0,inf)"},
    {"lr_scheduler_type", ARG_STR, "linear", "linear | cosine | constant | constant_with_warmup"},
    {"warmup_steps", ARG_FLOAT, "0", "warmup steps; below 1 a ratio of the total steps", "[0,inf)"},
    {"warmup_ratio", ARG_FLOAT, "0", "warmup as a ratio of the total steps", "[0,1]"},
    {"weight_decay", ARG_FLOAT, "0", "AdamW weight decay (not on norms and biases)", "[0,inf)"},
    {"adam_beta1", ARG_FLOAT, "0.9", "AdamW beta1", "[0,1)"},
    {"adam_beta2", ARG_FLOAT, "0.999", "AdamW beta2", "[0,1)"},
    {"adam_epsilon", ARG_FLOAT, "1e-8", "AdamW epsilon", "[0,inf)"},
    {"optim", ARG_STR, "adamw_torch", "adamw_torch (the only optimizer)"},
    {"max_grad_norm", ARG_FLOAT, "1.0", "clip the global gradient norm (0 = off)", "[0,inf)"},
    {"num_train_epochs", ARG_FLOAT, "3", "epochs", "[0,inf)"},
    {"max_steps", ARG_INT, "-1", "optimizer steps (overrides num_train_epochs)", "[-1,inf)"},
    {"per_device_train_batch_size", ARG_INT, "8", "rows per micro-batch", "[1,inf)"},
    {"gradient_accumulation_steps", ARG_INT, "1", "micro-batches per optimizer step", "[1,inf)"},
    {"logging_steps", ARG_INT, "10", "one metrics.jsonl line every N steps", "[1,inf)"},
    {"logging_first_step", ARG_BOOL, "false", "also log step 1"},
    {"save_strategy", ARG_STR, "steps", "steps | epoch | no"},
    {"save_steps", ARG_INT, "500", "checkpoint every N steps", "[1,inf)"},
    {"save_total_limit", ARG_INT, NULL, "keep only the newest N checkpoints (older ones are removed after each save)", "[0,inf)"},
    {"save_only_model", ARG_BOOL, "false", "checkpoints without optimizer state (cannot be resumed)"},
    {"save_dtype", ARG_STR, NULL, "dtype of saved weights (default: --dtype, else the input checkpoint's)"},
    {"gradient_checkpointing", ARG_BOOL, "false", "recompute each layer's forward in the backward pass (less memory)"},
    // TRL's ModelConfig PEFT flags (docs/lora.md)
    {"use_peft", ARG_BOOL, "false", "train a LoRA adapter on the frozen model (PEFT format)"},
    {"lora_r", ARG_INT, "16", "LoRA rank", "[1,inf)"},
    {"lora_alpha", ARG_FLOAT, "32", "LoRA alpha (scale alpha / r, or alpha / sqrt(r) with --use_rslora)", "[0,inf)"},
    {"lora_dropout", ARG_FLOAT, "0.05", "dropout on the adapter's input while training", "[0,1)"},
    {"lora_target_modules", ARG_LIST, NULL, "modules with adapters: names (q_proj v_proj ...) or all-linear "
                                            "(default: PEFT's for the architecture, q_proj v_proj)"},
    {"lora_modules_to_save", ARG_LIST, NULL, "modules trained in full and saved with the adapter (e.g. lm_head)"},
    {"use_rslora", ARG_BOOL, "false", "rank-stabilised scale alpha / sqrt(r)"},
    {"lora_task_type", ARG_STR, "CAUSAL_LM", "CAUSAL_LM (the only task type)"},
    {"adapter", ARG_STR, NULL, "with --use_peft: continue training this PEFT adapter directory"},
    {NULL, 0, NULL, NULL},
};

// CLI_TRAIN_EVAL
static const ArgSpec eval_specs[] = {
    {"eval_strategy", ARG_STR, "no", "no | steps: evaluate --eval_dataset every --eval_steps steps (no extra evaluation "
                                     "after the last step, as Trainer)"},
    {"eval_steps", ARG_INT, NULL, "with --eval_strategy steps: evaluate every N steps (default: logging_steps); alone it "
                                  "turns nothing on", "[1,inf)"},
    {NULL, 0, NULL, NULL},
};

// Resuming, failure handling, plans, testing and the ranks.
static const ArgSpec run_specs[] = {
    {"resume_from_checkpoint", ARG_STR, NULL, "checkpoint directory, or latest (in output_dir)"},
    {"skip_nonfinite", ARG_BOOL, "false", "skip the update of a step whose loss or gradient is NaN/Inf instead of stopping"},
    {"torch_compile", ARG_BOOL, "false", "accepted: plans replace compilation"},
    {"max_plans", ARG_INT, "0", "fail instead of building more than N plans (0 = no limit)", "[0,inf)"},
    {"stop_after_steps", ARG_INT, "0", "stop after N steps of this invocation, as if interrupted (testing resume)", "[0,inf)"},
    CLI_DIST_FLAGS,
    // accelerate's fsdp_config names (fsdp_forward_prefetch, fsdp_backward_prefetch); both on here
    {"fsdp_forward_prefetch", ARG_BOOL, "true", "ZeRO-3 / FSDP: gather the next layer while a layer's forward runs (2 "
                                                "working layers per rank)"},
    {"fsdp_backward_prefetch", ARG_STR, "backward_pre", "ZeRO-3 / FSDP: backward_pre (gather the next layer and reduce-"
                                                        "scatter a layer's gradient while the backward runs) | no_prefetch"},
    {NULL, 0, NULL, NULL},
};

static const ArgSpec *find_spec(const ArgSpec *specs, const char *name) {
    for (const ArgSpec *s = specs; s && s->name; s++)
        if (!strcmp(s->name, name)) return s;
    return NULL;
}

ArgSpec *cli_train_specs(const ArgSpec *own, const ArgSpec *defaults, int groups) {
    const ArgSpec *shared[] = {train_specs, groups & CLI_TRAIN_EVAL ? eval_specs : NULL, run_specs};
    size_t n = 1;
    for (const ArgSpec *s = own; s && s->name; s++) n++;
    for (size_t p = 0; p < ARRAY_LEN(shared); p++)
        for (const ArgSpec *s = shared[p]; s && s->name; s++) n++;
    ArgSpec *out = xmalloc(n * sizeof *out), *o = out;
    for (const ArgSpec *s = own; s && s->name; s++) *o++ = *s;
    int replaced = 0, n_defaults = 0;
    for (size_t p = 0; p < ARRAY_LEN(shared); p++)
        for (const ArgSpec *s = shared[p]; s && s->name; s++) {
            CHECK_MSG(!find_spec(own, s->name), "--%s is a shared training flag: pass it in defaults", s->name);
            const ArgSpec *d = find_spec(defaults, s->name);
            CHECK_MSG(!d || d->type == s->type, "--%s: its replacement has another type", s->name);
            *o++ = d ? *d : *s;
            replaced += d != NULL;
        }
    *o = (ArgSpec){NULL, 0, NULL, NULL};
    for (const ArgSpec *d = defaults; d && d->name; d++) n_defaults++;
    CHECK_MSG(replaced == n_defaults, "a trainer's default names no shared training flag of its groups");
    return out;
}

// --device, --threads, --max_memory, --dtype, --save_dtype.
static Status read_run(const Args *a, CliTrain *r, Err *e) {
    r->backend = args_str(a, "device");
    r->threads = (int)args_int(a, "threads");
    TRY(cli_max_memory(a, &r->max_memory, e));
    TRY(cli_dtype(a, &r->dtype, e));
    return cli_save_dtype_flag(a, "save_dtype", &r->save_dtype, e);
}

static Status read_optim(const Args *a, OptimConfig *o, Err *e) {
    const char *optim = args_str(a, "optim");
    if (strcmp(optim, "adamw_torch") && strcmp(optim, "adamw_torch_fused"))
        return err_set(e, ST_EUNSUPPORTED, "--optim %s is not supported yet (adamw_torch only)", optim);
    o->lr = args_float(a, "learning_rate");
    o->beta1 = args_float(a, "adam_beta1");
    o->beta2 = args_float(a, "adam_beta2");
    o->eps = args_float(a, "adam_epsilon");
    o->weight_decay = args_float(a, "weight_decay");
    o->max_grad_norm = args_float(a, "max_grad_norm");
    return optim_parse_schedule(args_str(a, "lr_scheduler_type"), &o->sched, e);
}

// --save_strategy / --eval_strategy: steps or no.
static Status read_strategy(const Args *a, const char *flag, int *steps, Err *e) {
    const char *s = args_str(a, flag);
    if (strcmp(s, "steps") && strcmp(s, "no"))
        return err_set(e, ST_EUNSUPPORTED, "--%s %s is not supported yet (steps or no)", flag, s);
    *steps = !strcmp(s, "steps");
    return ST_OK;
}

// A list flag's values joined by spaces (NULL when not given). Caller frees.
static char *list_text(const Args *a, const char *name) {
    char **vals;
    int n = args_list(a, name, &vals);
    if (n <= 0) return NULL;
    StrBuf sb = {0};
    for (int i = 0; i < n; i++) {
        if (i) sb_putc(&sb, ' ');
        sb_puts(&sb, vals[i]);
    }
    return sb_take(&sb);
}

static Status read_peft(const Args *a, PeftConfig *p, Err *e) {
    memset(p, 0, sizeof *p);
    p->use_peft = args_bool(a, "use_peft");
    p->adapter = args_str(a, "adapter");
    LoraConfig *c = &p->lora;
    c->r = (int)args_int(a, "lora_r");
    c->alpha = args_float(a, "lora_alpha");
    c->dropout = args_float(a, "lora_dropout");
    c->use_rslora = args_bool(a, "use_rslora");
    if (c->r <= 0) return err_set(e, ST_EINVAL, "--lora_r must be positive (got %d)", c->r);
    if (!(c->dropout >= 0 && c->dropout < 1)) return err_set(e, ST_EINVAL, "--lora_dropout must be in [0, 1)");
    if (strcmp(args_str(a, "lora_task_type"), "CAUSAL_LM"))
        return err_set(e, ST_EUNSUPPORTED, "--lora_task_type %s is not supported (CAUSAL_LM only)",
                       args_str(a, "lora_task_type"));
    char *t = list_text(a, "lora_target_modules"), *s = list_text(a, "lora_modules_to_save");
    Status st = lora_parse_targets(t, c, e);
    if (st == ST_OK) st = lora_parse_modules_to_save(s, c, e);
    free(t);
    free(s);
    return st;
}

Status cli_train_config(const Args *a, int groups, TrainConfig *t, CliTrain *r, Err *e) {
    t->output_dir = args_str(a, "output_dir");
    if (!t->output_dir) return err_set(e, ST_EINVAL, "--output_dir DIR is required");
    TRY(read_run(a, r, e));
    TRY(read_optim(a, &t->opt, e));
    r->max_plans = (int)args_int(a, "max_plans");
    r->batch_size = (int)args_int(a, "per_device_train_batch_size");
    if (r->batch_size <= 0) return err_set(e, ST_EUSAGE, "--per_device_train_batch_size must be positive");
    t->grad_accum = (int)args_int(a, "gradient_accumulation_steps");
    if (t->grad_accum <= 0) return err_set(e, ST_EUSAGE, "--gradient_accumulation_steps must be positive");
    t->num_train_epochs = args_float(a, "num_train_epochs");
    t->max_steps = (int)args_int(a, "max_steps");
    t->warmup_steps = args_float(a, "warmup_steps");
    t->warmup_ratio = args_float(a, "warmup_ratio");
    if (t->warmup_steps < 0 || t->warmup_ratio < 0 || t->warmup_ratio > 1)
        return err_set(e, ST_EUSAGE, "--warmup_steps must be >= 0 and --warmup_ratio in [0, 1]");
    t->logging_steps = (int)args_int(a, "logging_steps");
    t->logging_first_step = args_bool(a, "logging_first_step");
    const char *save = args_str(a, "save_strategy");
    if (strcmp(save, "steps") && strcmp(save, "epoch") && strcmp(save, "no"))
        return err_set(e, ST_EINVAL, "--save_strategy %s: expected steps, epoch or no", save);
    t->save_steps = !strcmp(save, "steps") ? (int)args_int(a, "save_steps") : 0;
    t->save_per_epoch = !strcmp(save, "epoch");
    t->save_total_limit = (int)args_int(a, "save_total_limit");
    t->save_only_model = args_bool(a, "save_only_model");
    t->eval_steps = 0;
    if (groups & CLI_TRAIN_EVAL) {
        int eval;
        TRY(read_strategy(a, "eval_strategy", &eval, e));
        // --eval_strategy steps turns evaluation on (every eval_steps, default logging_steps); --eval_steps
        // alone does not (TrainingArguments)
        if (eval) t->eval_steps = args_str(a, "eval_steps") ? (int)args_int(a, "eval_steps") : t->logging_steps;
        if (eval && t->eval_steps <= 0) return err_set(e, ST_EUSAGE, "--eval_steps must be positive");
    }
    t->resume = args_str(a, "resume_from_checkpoint");
    if (t->resume && !strcmp(t->resume, "false")) t->resume = NULL;
    t->seed = (uint64_t)args_int(a, "seed");
    t->stop_after_steps = (int)args_int(a, "stop_after_steps");
    t->skip_nonfinite = args_bool(a, "skip_nonfinite");
    t->gradient_checkpointing = args_bool(a, "gradient_checkpointing");
    t->opt.fsdp_forward_prefetch = args_bool(a, "fsdp_forward_prefetch");
    const char *bp = args_str(a, "fsdp_backward_prefetch");
    if (strcasecmp(bp, "backward_pre") && strcasecmp(bp, "no_prefetch"))
        return err_set(e, ST_EUSAGE, "--fsdp_backward_prefetch %s: expected backward_pre or no_prefetch (backward_post "
                                     "is not supported)", bp);
    t->opt.fsdp_backward_prefetch = !strcasecmp(bp, "backward_pre");
    TRY(read_peft(a, &t->peft, e));
    if (r->dtype == DT_Q8_0 && !t->peft.use_peft && !(groups & CLI_TRAIN_DTYPE_REF))
        return err_set(e, ST_EINVAL, "--dtype q8_0: 8-bit weights cannot be trained (a trainer's weights are float32 "
                       "masters); q8_0 is for a frozen model: the base of --use_peft, a teacher (--teacher_dtype), a "
                       "GRPO reference, or generate / chat / eval / logits");
    // SIGINT / SIGTERM: the first ends the run after its step with a checkpoint, the second at once
    interrupt_install(INTERRUPT_ESCALATE);
    t->stop = interrupt_flag();
    if (args_bool(a, "torch_compile")) log_info("--torch_compile: plans replace compilation (one plan per shape)");
    return ST_OK;
}
