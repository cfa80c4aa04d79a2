// cmd_kto.c: still kto — flags (TRL KTOConfig / TrainingArguments names) -> KtoConfig -> kto_run.
#include "../train/kto.h"
#include "cli_common.h"
#include "cli_train.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "policy model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"ref_model", ARG_STR, NULL, "reference model directory (default: a frozen copy of --model's initial weights; "
                                 "with --use_peft the base with the adapter off)"},
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "unpaired rows: prompt/completion/label (text or messages), "
                               "prompt_ids/completion_ids/label, or preference pairs (unpaired as TRL does)"},
    {"loss_type", ARG_STR, "kto", "kto | apo_zero_unpaired"},
    {"beta", ARG_FLOAT, "0.1", "deviation from the reference", "(0,inf)"},
    {"desirable_weight", ARG_FLOAT, "1.0", "weight of the desirable rows' losses", "[0,inf)"},
    {"undesirable_weight", ARG_FLOAT, "1.0", "weight of the undesirable rows' losses", "[0,inf)"},
    {"precompute_ref_log_probs", ARG_BOOL, "false", "reference log-probs once over the dataset before training (or "
                                                    "the dataset's ref_logps / ref_KL_logps columns)"},
    {"max_length", ARG_INT, "1024", "tokens kept of prompt + completion (0 = no truncation)", "[0,inf)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round batch lengths up to this (static shapes; 0 or 1 = off)", "[0,inf)"},
    {"train_sampling_strategy", ARG_STR, "sequential", "sequential (the KL pairs need it; the only one supported)"},
    {"disable_dropout", ARG_BOOL, "true", "accepted when true (still has no dropout outside LoRA)"},
    {"sync_ref_model", ARG_BOOL, "false", "TR-DPO reference syncing (not supported yet)"},
    {"dataloader_drop_last", ARG_BOOL, "false", "drop the last incomplete batch"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {NULL, 0, NULL, NULL},
};

static const ArgSpec train_defaults[] = {
    {"learning_rate", ARG_FLOAT, "1e-6", "peak learning rate (KTOConfig: 1e-6)", "[0,inf)"},
    {"per_device_train_batch_size", ARG_INT, "8", "rows per micro-batch (> 1 for the kto loss's KL term)", "[1,inf)"},
    {NULL, 0, NULL, NULL},
};

static Status build(const Args *a, KtoConfig *c, char **model_dir, char **ref_dir, Err *e) {
    kto_config_default(c);
    TRY(cli_model_dir(a, "model", model_dir, e));
    c->model_dir = *model_dir;
    if (args_str(a, "ref_model")) {
        TRY(cli_model_dir(a, "ref_model", ref_dir, e));
        c->ref_model_dir = *ref_dir;
    }
    c->dataset = args_str(a, "dataset");
    if (!c->dataset) return err_set(e, ST_EINVAL, "--dataset FILE.jsonl is required (also --dataset_name, --train_file)");
    CliTrain r;
    TRY(cli_train_config(a, 0, &c->train, &r, e));
    c->backend = r.backend, c->threads = r.threads, c->max_memory = r.max_memory, c->max_plans = r.max_plans;
    c->ep_size = (int)args_int(a, "ep_size");
    c->dtype = r.dtype, c->save_dtype = r.save_dtype, c->per_device_train_batch_size = r.batch_size;
    if (kto_parse_loss_type(args_str(a, "loss_type"), &c->loss.type, e) != ST_OK) return e->code = ST_EUSAGE;
    c->loss.beta = args_float(a, "beta");
    c->loss.desirable_weight = args_float(a, "desirable_weight");
    c->loss.undesirable_weight = args_float(a, "undesirable_weight");
    c->precompute_ref_log_probs = args_bool(a, "precompute_ref_log_probs");
    c->data.max_length = (int)args_int(a, "max_length");
    c->data.skip_bad_rows = args_bool(a, "skip_bad_rows");
    c->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    if (strcmp(args_str(a, "train_sampling_strategy"), "sequential"))
        return err_set(e, ST_EUNSUPPORTED, "--train_sampling_strategy %s is not supported (sequential only: the KL "
                                           "completions pair neighbouring rows)", args_str(a, "train_sampling_strategy"));
    if (!args_bool(a, "disable_dropout"))
        return err_set(e, ST_EUNSUPPORTED, "--disable_dropout false is not supported (the models have no dropout)");
    if (args_bool(a, "sync_ref_model")) return err_set(e, ST_EUNSUPPORTED, "--sync_ref_model is not supported yet");
    c->drop_last = args_bool(a, "dataloader_drop_last");
    c->chat_template_kwargs = args_str(a, "chat_template_kwargs");
    if (c->loss.type == KTO_LOSS_KTO && c->per_device_train_batch_size <= 1)
        return err_set(e, ST_EUSAGE, "--per_device_train_batch_size must be > 1 for the kto loss: its KL term pairs each "
                                     "prompt with another row's completion of the same batch (as TRL)");
    return ST_OK;
}

static Status run(const Args *a, Err *e) {
    KtoConfig c;
    char *dir = NULL, *ref = NULL;
    Dist d;
    Status st = build(a, &c, &dir, &ref, e);
    if (st == ST_OK) st = cli_dist(a, &d, &c.train.zero_stage, e);
    else dist_single(&d);
    c.dist = &d;
    TrainResult res;
    if (st == ST_OK) st = kto_run(&c, &res, e);
    free(dir);
    free(ref);
    return cli_train_done("kto", &d, st, &res, e);
}

int cmd_kto(int argc, char **argv) {
    ArgSpec *all = cli_train_specs(specs, train_defaults, 0);
    int rc = cli_run("kto", "Unpaired preference optimisation with TRL KTOTrainer semantics.", all, argc, argv, run);
    free(all);
    return rc;
}
