// cmd_grpo.c: still grpo and still rloo — flags (TRL GRPOConfig / RLOOConfig names) -> GrpoConfig
// -> grpo_run.
#include "../core/log.h"
#include "../train/grpo.h"
#include "cli_common.h"
#include "commands.h"

#include <math.h>
#include <string.h>

// Flags of both commands; the defaults that differ (num_generations, beta) are set from
// grpo_config_default when a flag is not given.
#define RL_COMMON_FLAGS                                                                                                \
    {"model", ARG_STR, NULL, "model directory or hub id in the local Hugging Face cache"},                             \
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},                                      \
    {"dataset", ARG_STR, NULL, "prompts: a local JSONL or JSON file with a \"prompt\" column (text or messages)"},    \
    {"output_dir", ARG_STR, NULL, "directory for checkpoints, the final model and metrics.jsonl"},                     \
    {"reward", ARG_LIST, NULL, "reward function (repeatable): exact_match:COLUMN | regex:PATTERN | length:TARGET | "    \
                               "format | cmd:PROGRAM"},                                                                \
    {"reward_funcs", ARG_LIST, NULL, "alias of --reward"},                                                             \
    {"reward_weights", ARG_LIST, NULL, "one weight per reward function (default 1 each)"},                             \
    {"reward_timeout", ARG_FLOAT, "60", "seconds a cmd: reward program may take to answer one completion"},            \
    {"num_generations", ARG_INT, NULL, "completions per prompt (GRPO 8, RLOO 2)"},                                     \
    {"max_completion_length", ARG_INT, "512", "tokens generated at most per completion"},                              \
    {"max_prompt_length", ARG_INT, "0", "keep the last N tokens of longer prompts (0 = no truncation)"},               \
    {"temperature", ARG_FLOAT, "1.0", "sampling temperature (the log-probs use logits / temperature too)"},            \
    {"top_p", ARG_FLOAT, "1.0", "nucleus sampling (1 = off)"},                                                         \
    {"top_k", ARG_INT, "0", "top-k sampling (0 = off)"},                                                               \
    {"min_p", ARG_FLOAT, "0", "min-p sampling (0 = off)"},                                                             \
    {"repetition_penalty", ARG_FLOAT, "1.0", "repetition penalty while sampling (1 = off)"},                           \
    {"beta", ARG_FLOAT, NULL, "KL coefficient against the initial weights (GRPO 0: no reference; RLOO 0.05)"},        \
    {"epsilon", ARG_FLOAT, "0.2", "clip the importance ratio below at 1 - epsilon"},                                   \
    {"epsilon_high", ARG_FLOAT, NULL, "clip above at 1 + epsilon_high (default: epsilon)"},                            \
    {"num_iterations", ARG_INT, "1", "optimizer steps per generation round (mu)"},                                     \
    {"mask_truncated_completions", ARG_BOOL, "false", "no loss on completions that end without EOS"},                 \
    {"steps_per_generation", ARG_INT, NULL, "accepted when equal to gradient_accumulation_steps"},                     \
    {"generation_batch_size", ARG_INT, NULL, "accepted when equal to per_device_train_batch_size x GA"},               \
    {"importance_sampling_level", ARG_STR, "token", "token (sequence-level GSPO is not supported yet)"},                \
    {"decode_batch_size", ARG_INT, "0", "rows decoded together (0 = the whole generation round)"},                    \
    {"pad_to_multiple_of", ARG_INT, "128", "pad prompts and scoring rows to a multiple of this (static shapes)"},      \
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},                          \
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},                          \
    {"shuffle_dataset", ARG_BOOL, "true", "reshuffle prompts every epoch (seeded)"},                                   \
    {"learning_rate", ARG_FLOAT, "1e-6", "peak learning rate"},                                                        \
    {"lr_scheduler_type", ARG_STR, "linear", "linear | cosine | constant | constant_with_warmup"},                     \
    {"warmup_steps", ARG_FLOAT, "0", "warmup steps; below 1 a ratio of the total steps"},                              \
    {"warmup_ratio", ARG_FLOAT, "0", "warmup as a ratio of the total steps"},                                          \
    {"weight_decay", ARG_FLOAT, "0", "AdamW weight decay (not on norms and biases)"},                                  \
    {"adam_beta1", ARG_FLOAT, "0.9", "AdamW beta1"},                                                                   \
    {"adam_beta2", ARG_FLOAT, "0.999", "AdamW beta2"},                                                                 \
    {"adam_epsilon", ARG_FLOAT, "1e-8", "AdamW epsilon"},                                                              \
    {"max_grad_norm", ARG_FLOAT, "1.0", "clip the global gradient norm (0 = off)"},                                    \
    {"num_train_epochs", ARG_FLOAT, "3", "epochs over the prompts"},                                                   \
    {"max_steps", ARG_INT, "-1", "optimizer steps (overrides num_train_epochs)"},                                      \
    {"per_device_train_batch_size", ARG_INT, "8", "completions per micro-batch (as TRL)"},                             \
    {"gradient_accumulation_steps", ARG_INT, "1", "micro-batches per optimizer step"},                                 \
    {"logging_steps", ARG_INT, "10", "one metrics.jsonl line every N steps"},                                          \
    {"logging_first_step", ARG_BOOL, "false", "also log step 1"},                                                      \
    {"save_strategy", ARG_STR, "steps", "steps | no"},                                                                 \
    {"save_steps", ARG_INT, "500", "checkpoint every N steps"},                                                        \
    {"save_total_limit", ARG_INT, NULL, "keep only the newest N checkpoints"},                                         \
    {"save_only_model", ARG_BOOL, "false", "checkpoints without optimizer state (cannot be resumed)"},                 \
    {"save_dtype", ARG_STR, NULL, "dtype of saved weights (default: --dtype, else the input checkpoint's)"},           \
    {"resume_from_checkpoint", ARG_STR, NULL, "checkpoint directory, or latest (in output_dir)"},                      \
    {"max_plans", ARG_INT, "0", "fail instead of building more than N plans (0 = no limit)"},                          \
    {"stop_after_steps", ARG_INT, "0", "stop after N steps of this invocation, as if interrupted (testing resume)"}, \
    {"log_completions", ARG_BOOL, "false", "write every round's completions, rewards and advantages to "           \
                                           "output_dir/completions.jsonl"},                                        \
    CLI_DIST_FLAGS

static const ArgSpec grpo_specs[] = {
    RL_COMMON_FLAGS,
    {"loss_type", ARG_STR, "dapo", "grpo | bnpo | dr_grpo | dapo"},
    {"scale_rewards", ARG_STR, "group", "group | batch | none (true = group, false = none)"},
    {NULL, 0, NULL, NULL},
};

static const ArgSpec rloo_specs[] = {
    RL_COMMON_FLAGS,
    {"normalize_advantages", ARG_BOOL, "false", "normalise advantages over the batch"},
    {"reward_clip_range", ARG_STR, NULL, "LO,HI: clamp the summed reward"},
    {NULL, 0, NULL, NULL},
};

// Values of a list flag, each also split at commas and spaces ("--reward_weights 1,0.5").
static Status parse_weights(const Args *a, double **out, int *n, Err *e) {
    char **v;
    int k = args_list(a, "reward_weights", &v), cap = 0;
    *out = NULL, *n = 0;
    for (int i = 0; i < k; i++) {
        const char *s = v[i];
        while (*s) {
            while (*s == ',' || *s == ' ') s++;
            if (!*s) break;
            char *end;
            double w = strtod(s, &end);
            if (end == s || !isfinite(w)) {
                free(*out);
                return err_set(e, ST_EINVAL, "--reward_weights %s: expected numbers", v[i]);
            }
            if (*n == cap) *out = realloc(*out, (size_t)(cap = cap * 2 + 4) * sizeof(double));
            (*out)[(*n)++] = w;
            s = end;
        }
    }
    return ST_OK;
}

static Status build(const Args *a, GrpoAlgo algo, GrpoConfig *c, char **model_dir, const char ***specs,
                    double **weights, Err *e) {
    grpo_config_default(c, algo);
    TRY(cli_model_dir(a, "model", model_dir, e));
    c->model_dir = *model_dir;
    c->dataset = args_str(a, "dataset");
    if (!c->dataset) return err_set(e, ST_EINVAL, "--dataset FILE.jsonl is required (prompts; also --dataset_name)");
    c->train.output_dir = args_str(a, "output_dir");
    if (!c->train.output_dir) return err_set(e, ST_EINVAL, "--output_dir DIR is required");
    char **r1, **r2;
    int n1 = args_list(a, "reward", &r1), n2 = args_list(a, "reward_funcs", &r2);
    if (n1 + n2 == 0)
        return err_set(e, ST_EINVAL, "--reward SPEC is required (exact_match:COLUMN, regex:PATTERN, length:TARGET, "
                                     "format or cmd:PROGRAM; repeatable)");
    *specs = calloc((size_t)(n1 + n2), sizeof(char *));
    for (int i = 0; i < n1; i++) (*specs)[i] = r1[i];
    for (int i = 0; i < n2; i++) (*specs)[n1 + i] = r2[i];
    c->reward_specs = *specs;
    c->n_rewards = n1 + n2;
    TRY(parse_weights(a, weights, &c->n_reward_weights, e));
    c->reward_weights = *weights;
    c->reward_timeout = args_float(a, "reward_timeout");
    c->backend = args_str(a, "device");
    c->threads = (int)args_int(a, "threads");
    TRY(cli_dtype(a, &c->dtype, e));
    if (args_str(a, "save_dtype")) {
        DType d;
        if (dtype_parse(args_str(a, "save_dtype"), &d) != 0 || d == DT_F16)
            return err_set(e, ST_EINVAL, "--save_dtype %s: expected float32 or bfloat16", args_str(a, "save_dtype"));
        c->save_dtype = (int)d;
    }
    if (args_is_set(a, "num_generations")) c->num_generations = (int)args_int(a, "num_generations");
    c->max_completion_length = (int)args_int(a, "max_completion_length");
    c->max_prompt_length = (int)args_int(a, "max_prompt_length");
    c->temperature = (float)args_float(a, "temperature");
    c->top_p = args_float(a, "top_p");
    c->top_k = (int)args_int(a, "top_k");
    c->min_p = (float)args_float(a, "min_p");
    c->repetition_penalty = (float)args_float(a, "repetition_penalty");
    if (args_is_set(a, "beta")) c->beta = args_float(a, "beta");
    c->epsilon = args_float(a, "epsilon");
    c->epsilon_high = args_is_set(a, "epsilon_high") ? args_float(a, "epsilon_high") : -1;
    c->num_iterations = (int)args_int(a, "num_iterations");
    c->mask_truncated_completions = args_bool(a, "mask_truncated_completions");
    c->decode_batch_size = (int)args_int(a, "decode_batch_size");
    c->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    c->chat_template_kwargs = args_str(a, "chat_template_kwargs");
    c->skip_bad_rows = args_bool(a, "skip_bad_rows");
    c->shuffle_dataset = args_bool(a, "shuffle_dataset");
    c->per_device_train_batch_size = (int)args_int(a, "per_device_train_batch_size");
    c->max_plans = (int)args_int(a, "max_plans");
    if (strcmp(args_str(a, "importance_sampling_level"), "token"))
        return err_set(e, ST_EUNSUPPORTED, "--importance_sampling_level %s is not supported yet (token only)",
                       args_str(a, "importance_sampling_level"));
    TrainConfig *t = &c->train;
    t->grad_accum = (int)args_int(a, "gradient_accumulation_steps");
    if (t->grad_accum <= 0) return err_set(e, ST_EINVAL, "--gradient_accumulation_steps must be positive");
    if (args_is_set(a, "steps_per_generation") && args_int(a, "steps_per_generation") != t->grad_accum)
        return err_set(e, ST_EUNSUPPORTED, "--steps_per_generation %lld is not supported yet (only the default, "
                                           "gradient_accumulation_steps = %d)", args_int(a, "steps_per_generation"),
                       t->grad_accum);
    if (args_is_set(a, "generation_batch_size") &&
        args_int(a, "generation_batch_size") != (long long)c->per_device_train_batch_size * t->grad_accum)
        return err_set(e, ST_EUNSUPPORTED, "--generation_batch_size %lld is not supported yet (only "
                                           "per_device_train_batch_size x gradient_accumulation_steps = %d)",
                       args_int(a, "generation_batch_size"), c->per_device_train_batch_size * t->grad_accum);
    if (algo == GRPO_ALGO_GRPO) {
        int lt = rl_loss_type_parse(args_str(a, "loss_type"));
        if (lt < 0) return err_set(e, ST_EINVAL, "--loss_type %s: expected grpo, bnpo, dr_grpo or dapo", args_str(a, "loss_type"));
        c->loss_type = (RlLossType)lt;
        const char *sr = args_str(a, "scale_rewards");
        int s = !strcmp(sr, "true") ? RL_SCALE_GROUP : !strcmp(sr, "false") ? RL_SCALE_NONE : rl_scale_rewards_parse(sr);
        if (s < 0) return err_set(e, ST_EINVAL, "--scale_rewards %s: expected group, batch or none", sr);
        c->scale_rewards = (RlScaleRewards)s;
    } else {
        c->normalize_advantages = args_bool(a, "normalize_advantages");
        const char *cr = args_str(a, "reward_clip_range");
        if (cr) {
            char *end;
            c->reward_clip_range[0] = strtod(cr, &end);
            if (*end != ',' || (c->reward_clip_range[1] = strtod(end + 1, &end), *end) ||
                !(c->reward_clip_range[0] <= c->reward_clip_range[1]))
                return err_set(e, ST_EINVAL, "--reward_clip_range %s: expected LO,HI with LO <= HI", cr);
            c->has_reward_clip_range = 1;
        }
    }
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
    t->resume = args_str(a, "resume_from_checkpoint");
    if (t->resume && !strcmp(t->resume, "false")) t->resume = NULL;
    t->seed = (uint64_t)args_int(a, "seed");
    t->stop_after_steps = (int)args_int(a, "stop_after_steps");
    c->log_completions = args_bool(a, "log_completions");
    return ST_OK;
}

static int run(int argc, char **argv, GrpoAlgo algo) {
    const char *name = algo == GRPO_ALGO_RLOO ? "rloo" : "grpo";
    Args a;
    int done;
    int rc = cli_parse(&a, name,
                       algo == GRPO_ALGO_RLOO ? "Online RL with RLOO (TRL RLOOTrainer semantics) and verifiable rewards."
                                              : "Online RL with GRPO (TRL GRPOTrainer semantics) and verifiable rewards.",
                       algo == GRPO_ALGO_RLOO ? rloo_specs : grpo_specs, argc, argv, &done);
    if (rc || done) return rc;
    Err e = {0};
    GrpoConfig c;
    char *dir = NULL;
    const char **specs = NULL;
    double *weights = NULL;
    Dist d;
    Status st = build(&a, algo, &c, &dir, &specs, &weights, &e);
    if (st == ST_OK) st = cli_dist(&a, &d, &c.train.zero_stage, &e);
    else dist_single(&d);
    c.dist = &d;
    TrainResult res;
    if (st == ST_OK) st = grpo_run(&c, &res, &e);
    if (st == ST_OK && d.rank == 0)
        printf("{\"steps\": %d, \"loss\": %.9g, \"train_seconds\": %.3f}\n", res.steps, res.last_loss, res.train_seconds);
    free(dir);
    free(specs);
    free(weights);
    args_free(&a);
    if (st == ST_OK) {
        dist_finalize(&d);
        return 0;
    }
    rc = cli_fail(name, &e);
    if (d.world > 1) dist_abort(&d, rc);  // the other ranks wait in a collective
    dist_finalize(&d);
    return rc;
}

int cmd_grpo(int argc, char **argv) { return run(argc, argv, GRPO_ALGO_GRPO); }
int cmd_rloo(int argc, char **argv) { return run(argc, argv, GRPO_ALGO_RLOO); }
