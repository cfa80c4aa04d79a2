// cmd_grpo.c: still grpo and still rloo — flags (TRL GRPOConfig / RLOOConfig names) -> GrpoConfig
// -> grpo_run.
#include "../train/grpo.h"
#include "cli_common.h"
#include "cli_train.h"
#include "commands.h"

#include <math.h>
#include <string.h>

// Flags of both commands; the defaults that differ (num_generations, beta) are set from
// grpo_config_default when a flag is not given.
#define RL_COMMON_FLAGS                                                                                                \
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},                             \
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},                                      \
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "prompts: a local JSONL or JSON file with a \"prompt\" column (text or messages)"},    \
    {"reward", ARG_LIST, NULL, ARG_REQUIRED "reward function (repeatable): exact_match:COLUMN | regex:PATTERN | length:TARGET | "    \
                               "format | cmd:PROGRAM"},                                                                \
    {"reward_funcs", ARG_LIST, NULL, "alias of --reward"},                                                             \
    {"reward_weights", ARG_LIST, NULL, "one weight per reward function (default 1 each)"},                             \
    {"reward_timeout", ARG_FLOAT, "60", "seconds a cmd: reward program may take to answer one completion", "(0,inf)"},            \
    {"num_generations", ARG_INT, NULL, "completions per prompt (GRPO 8, RLOO 2)", "[2,inf)"},                                     \
    {"max_completion_length", ARG_INT, "512", "tokens generated at most per completion", "[1,inf)"},                              \
    {"max_prompt_length", ARG_INT, "0", "keep the last N tokens of longer prompts (0 = no truncation)", "[0,inf)"},               \
    {"temperature", ARG_FLOAT, "1.0", "sampling temperature (the log-probs use logits / temperature too)", "(0,inf)"},            \
    {"top_p", ARG_FLOAT, "1.0", "nucleus sampling (1 = off)", "(0,1]"},                                                         \
    {"top_k", ARG_INT, "0", "top-k sampling (0 = off)", "[0,inf)"},                                                               \
    {"min_p", ARG_FLOAT, "0", "min-p sampling (0 = off)", "[0,1]"},                                                             \
    {"repetition_penalty", ARG_FLOAT, "1.0", "repetition penalty while sampling (1 = off)", "(0,inf)"},                           \
    {"beta", ARG_FLOAT, NULL, "KL coefficient against the initial weights (GRPO 0: no reference; RLOO 0.05)", "[0,inf)"},        \
    {"epsilon", ARG_FLOAT, "0.2", "clip the importance ratio below at 1 - epsilon", "[0,inf)"},                                   \
    {"epsilon_high", ARG_FLOAT, NULL, "clip above at 1 + epsilon_high (default: epsilon)", "[0,inf)"},                            \
    {"num_iterations", ARG_INT, "1", "optimizer steps per generation round (mu)", "[1,inf)"},                                     \
    {"mask_truncated_completions", ARG_BOOL, "false", "no loss on completions that end without EOS"},                 \
    {"steps_per_generation", ARG_INT, NULL, "accepted when equal to gradient_accumulation_steps", "[1,inf)"},                     \
    {"generation_batch_size", ARG_INT, NULL, "accepted when equal to per_device_train_batch_size x GA", "[1,inf)"},               \
    {"importance_sampling_level", ARG_STR, "token", "token (sequence-level GSPO is not supported yet)"},                \
    {"decode_batch_size", ARG_INT, "0", "rows decoded together (0 = the whole generation round)", "[0,inf)"},                    \
    {"pad_to_multiple_of", ARG_INT, "128", "pad prompts and scoring rows to a multiple of this (static shapes)", "[0,inf)"},      \
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},                          \
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},                          \
    {"shuffle_dataset", ARG_BOOL, "true", "reshuffle prompts every epoch (seeded)"},                                   \
    {"log_completions", ARG_BOOL, "false", "write every round's completions, rewards and advantages to "           \
                                           "output_dir/completions.jsonl"}

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

// Shared training flags with GRPOConfig / RLOOConfig's default or this trainer's help.
static const ArgSpec train_defaults[] = {
    {"learning_rate", ARG_FLOAT, "1e-6", "peak learning rate", "[0,inf)"},
    {"num_train_epochs", ARG_FLOAT, "3", "epochs over the prompts", "[0,inf)"},
    {"per_device_train_batch_size", ARG_INT, "8", "completions per micro-batch (as TRL)", "[1,inf)"},
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
    CliTrain r;
    TRY(cli_train_config(a, CLI_TRAIN_DTYPE_REF, &c->train, &r, e));
    c->backend = r.backend, c->threads = r.threads, c->max_memory = r.max_memory, c->max_plans = r.max_plans;
    c->ep_size = (int)args_int(a, "ep_size");
    c->dtype = r.dtype, c->save_dtype = r.save_dtype, c->per_device_train_batch_size = r.batch_size;
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
    if (strcmp(args_str(a, "importance_sampling_level"), "token"))
        return err_set(e, ST_EUNSUPPORTED, "--importance_sampling_level %s is not supported yet (token only)",
                       args_str(a, "importance_sampling_level"));
    TrainConfig *t = &c->train;
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
    c->log_completions = args_bool(a, "log_completions");
    return ST_OK;
}

static int run(int argc, char **argv, GrpoAlgo algo) {
    const char *name = algo == GRPO_ALGO_RLOO ? "rloo" : "grpo";
    Args a;
    int done;
    ArgSpec *all = cli_train_specs(algo == GRPO_ALGO_RLOO ? rloo_specs : grpo_specs, train_defaults, 0);
    int rc = cli_parse(&a, name,
                       algo == GRPO_ALGO_RLOO ? "Online RL with RLOO (TRL RLOOTrainer semantics) and verifiable rewards."
                                              : "Online RL with GRPO (TRL GRPOTrainer semantics) and verifiable rewards.",
                       all, argc, argv, &done);
    if (rc || done) return free(all), rc;
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
    if (st == ST_OK) st = grpo_check_config(&c, &e);  // TRL's checks, before anything is loaded
    TrainResult res;
    if (st == ST_OK) st = grpo_run(&c, &res, &e);
    if (st == ST_OK && d.rank == 0)
        cli_print_train_result(&res);
    free(dir);
    free(specs);
    free(weights);
    args_free(&a);
    free(all);
    return cli_dist_finish(name, &d, st, &e);
}

int cmd_grpo(int argc, char **argv) { return run(argc, argv, GRPO_ALGO_GRPO); }
int cmd_rloo(int argc, char **argv) { return run(argc, argv, GRPO_ALGO_RLOO); }
