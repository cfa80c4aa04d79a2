// cmd_reward.c: still reward — flags (TRL RewardConfig / TrainingArguments names) -> RewardConfig
// -> reward_run.
#include "../core/log.h"
#include "../train/reward.h"
#include "cli_common.h"
#include "cli_train.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "a reward model (*ForSequenceClassification, 1 label) or a causal LM, which "
                                          "gets a new score head (normal(0, initializer_range), seeded)"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "preference pairs: chosen / rejected (text or messages, optional prompt) "
                                            "or chosen_ids / rejected_ids; optional margin (TRL formats)"},
    {"eval_dataset", ARG_STR, NULL, "evaluation pairs (same formats), evaluated with --eval_strategy steps"},
    {"per_device_eval_batch_size", ARG_INT, "8", "pairs per eval batch", "[1,inf)"},
    {"max_length", ARG_INT, "1024", "drop pairs whose chosen or rejected sequence is longer (TRL filters; 0 = off)", "[0,inf)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round batch lengths up to this (static shapes; 0 or 1 = off)", "[0,inf)"},
    {"center_rewards_coefficient", ARG_FLOAT, NULL, "add coef * mean((r_chosen + r_rejected)^2) to the loss "
                                                    "(TRL's None: off; 0.01 recommended)", "[0,inf)"},
    {"dataloader_drop_last", ARG_BOOL, "false", "drop the last incomplete batch"},
    {"shuffle", ARG_BOOL, "true", "reshuffle pairs every epoch (seeded); false: the file's order"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"eos_token", ARG_STR, NULL, "EOS token appended to text completions (default: the tokenizer's)"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {NULL, 0, NULL, NULL},
};

// Shared training flags with RewardConfig's own defaults.
static const ArgSpec train_defaults[] = {
    {"learning_rate", ARG_FLOAT, "1e-4", "peak learning rate (RewardConfig: 1e-4)", "[0,inf)"},
    {"gradient_checkpointing", ARG_BOOL, "true", "recompute each layer's forward in the backward pass (RewardConfig: "
                                                 "on)"},
    {NULL, 0, NULL, NULL},
};

static Status build(const Args *a, RewardConfig *c, char **model_dir, Err *e) {
    memset(c, 0, sizeof *c);
    TRY(cli_model_dir(a, "model", model_dir, e));
    c->model_dir = *model_dir;
    c->dataset = args_str(a, "dataset");
    if (!c->dataset) return err_set(e, ST_EINVAL, "--dataset FILE.jsonl is required");
    CliTrain r;
    TRY(cli_train_config(a, CLI_TRAIN_EVAL, &c->train, &r, e));
    c->eval_dataset = args_str(a, "eval_dataset");
    c->eval_batch_size = (int)args_int(a, "per_device_eval_batch_size");
    if (c->eval_batch_size <= 0) return err_set(e, ST_EINVAL, "--per_device_eval_batch_size must be positive");
    if (c->train.eval_steps > 0 && !c->eval_dataset)
        return err_set(e, ST_EINVAL, "--eval_strategy steps needs --eval_dataset (as Trainer)");
    if (c->eval_dataset && c->train.eval_steps <= 0)
        log_warn("--eval_dataset is not evaluated with --eval_strategy no (the default); add --eval_strategy steps");
    c->backend = r.backend, c->threads = r.threads, c->max_memory = r.max_memory, c->max_plans = r.max_plans;
    c->dtype = r.dtype, c->save_dtype = r.save_dtype;
    c->batch_size = r.batch_size;
    c->data.max_length = (int)args_int(a, "max_length");
    c->data.skip_bad_rows = args_bool(a, "skip_bad_rows");
    c->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    c->drop_last = args_bool(a, "dataloader_drop_last");
    c->shuffle = args_bool(a, "shuffle");
    c->chat_template_kwargs = args_str(a, "chat_template_kwargs");
    c->eos_token = args_str(a, "eos_token");
    c->has_center = args_is_set(a, "center_rewards_coefficient");
    if (c->has_center) c->center_rewards_coefficient = args_float(a, "center_rewards_coefficient");
    return ST_OK;
}

static Status run(const Args *a, Err *e) {
    RewardConfig c;
    char *dir = NULL;
    Dist d;
    Status st = build(a, &c, &dir, e);
    if (st == ST_OK) st = cli_dist_no_ep(a, "reward", "it trains sequence classifiers, and no family with experts "
                                                                 "(qwen3_moe, mixtral, gpt_oss) has one", e);
    if (st == ST_OK) st = cli_dist(a, &d, &c.train.zero_stage, e);
    else dist_single(&d);
    c.dist = &d;
    TrainResult res;
    if (st == ST_OK) st = reward_run(&c, &res, e);
    free(dir);
    return cli_train_done("reward", &d, st, &res, e);
}

int cmd_reward(int argc, char **argv) {
    ArgSpec *all = cli_train_specs(specs, train_defaults, CLI_TRAIN_EVAL);
    int rc = cli_run("reward", "Train a reward model (sequence classifier) with TRL RewardTrainer semantics.", all,
                     argc, argv, run);
    free(all);
    return rc;
}
