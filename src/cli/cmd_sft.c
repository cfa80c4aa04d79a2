// cmd_sft.c: still sft — flags (TRL SFTConfig / TrainingArguments names) -> SftConfig -> sft_run.
#include "../core/log.h"
#include "../train/sft.h"
#include "cli_common.h"
#include "cli_train.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "training data: a local JSONL or JSON file (TRL formats)"},
    {"eval_dataset", ARG_STR, NULL, "evaluation data (same formats)"},
    {"max_length", ARG_INT, "1024", "truncate (keep_start) / pack to this many tokens", "[1,inf)"},
    {"truncation_mode", ARG_STR, "keep_start", "keep_start (the only mode)"},
    {"packing", ARG_BOOL, "false", "pack examples into rows of max_length"},
    {"packing_strategy", ARG_STR, "bfd", "bfd | wrapped"},
    {"eval_packing", ARG_BOOL, NULL, "pack the eval set (default: as --packing, TRL's eval_packing None)"},
    {"padding", ARG_STR, "longest", "longest (rounded up to pad_to_multiple_of) | max_length (one shape)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round batch lengths up to this (static shapes; 0 or 1 = off)", "[0,inf)"},
    {"dataloader_drop_last", ARG_BOOL, "false", "drop the last incomplete batch (else padded with empty rows)"},
    {"completion_only_loss", ARG_BOOL, NULL, "loss on completion tokens only; default (TRL's None): on when the first "
                                             "row has \"prompt\" and \"completion\", else off. It masks the prompt of "
                                             "prompt/completion rows and applies a pre-tokenised \"completion_mask\"; "
                                             "\"assistant_masks\" always applies, a \"labels\" column is used as is "
                                             "(-100 = no loss) and the masks are then ignored"},
    {"assistant_only_loss", ARG_BOOL, "false", "loss on the chat template's {% generation %} tokens only"},
    {"dataset_text_field", ARG_STR, "text", "column of language-modeling text"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"eos_token", ARG_STR, NULL, "EOS token string (default: the tokenizer's)"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {"shuffle", ARG_BOOL, "true", "reshuffle rows every epoch (seeded, as the HF dataloader)"},
    {"per_device_eval_batch_size", ARG_INT, "8", "rows per eval batch", "[1,inf)"},
    CLI_MOE_FLAG,
    {NULL, 0, NULL, NULL},
};

// Shared training flags with SFTConfig's own default.
static const ArgSpec train_defaults[] = {
    {"learning_rate", ARG_FLOAT, "2e-5", "peak learning rate", "[0,inf)"},
    {"gradient_checkpointing", ARG_BOOL, "true", "recompute each layer's forward in the backward pass (SFTConfig: on)"},
    {NULL, 0, NULL, NULL},
};

static Status build(const Args *a, SftConfig *c, char **model_dir, Err *e) {
    memset(c, 0, sizeof *c);
    TRY(cli_model_dir(a, "model", model_dir, e));
    c->model_dir = *model_dir;
    c->dataset = args_str(a, "dataset");
    if (!c->dataset) return err_set(e, ST_EINVAL, "--dataset FILE.jsonl is required (also --dataset_name, --train_file)");
    c->eval_dataset = args_str(a, "eval_dataset");
    c->moe_capacity_factor = args_float(a, "moe_capacity_factor");
    c->ep_size = (int)args_int(a, "ep_size");
    CliTrain r;
    TRY(cli_train_config(a, CLI_TRAIN_EVAL, &c->train, &r, e));
    c->backend = r.backend, c->threads = r.threads, c->max_memory = r.max_memory, c->max_plans = r.max_plans;
    c->dtype = r.dtype, c->save_dtype = r.save_dtype;
    if (strcmp(args_str(a, "truncation_mode"), "keep_start"))
        return err_set(e, ST_EUNSUPPORTED, "--truncation_mode %s is not supported yet (keep_start only; TRL deprecated "
                                           "keep_end)", args_str(a, "truncation_mode"));
    DataConfig *d = &c->data;
    d->text_field = args_str(a, "dataset_text_field");
    d->max_length = (int)args_int(a, "max_length");
    d->completion_only_loss = args_is_set(a, "completion_only_loss") ? args_bool(a, "completion_only_loss") : -1;
    d->assistant_only_loss = args_bool(a, "assistant_only_loss");
    d->skip_bad_rows = args_bool(a, "skip_bad_rows");
    c->chat_template_kwargs = args_str(a, "chat_template_kwargs");
    c->eos_token = args_str(a, "eos_token");
    c->packing = args_bool(a, "packing");
    c->eval_packing = args_is_set(a, "eval_packing") ? args_bool(a, "eval_packing") : -1;
    if (c->train.eval_steps > 0 && !c->eval_dataset)
        return err_set(e, ST_EINVAL, "--eval_strategy steps needs --eval_dataset (as Trainer)");
    if (c->eval_dataset && c->train.eval_steps <= 0)
        log_warn("--eval_dataset is not evaluated with --eval_strategy no (the default); add --eval_strategy steps");
    TRY(batch_parse_packing(args_str(a, "packing_strategy"), &c->packing_strategy, e));
    if ((c->packing || c->eval_packing == 1) && d->max_length <= 0)
        return err_set(e, ST_EINVAL, "--packing and --eval_packing need --max_length > 0");
    const char *pad = args_str(a, "padding");
    if (!strcmp(pad, "max_length")) c->padding_max_length = 1;
    else if (strcmp(pad, "longest")) return err_set(e, ST_EINVAL, "--padding %s: expected longest or max_length", pad);
    if (c->padding_max_length && d->max_length <= 0) return err_set(e, ST_EINVAL, "--padding max_length needs --max_length");
    BatchConfig *b = &c->batch;
    b->B = r.batch_size;
    b->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    b->drop_last = args_bool(a, "dataloader_drop_last");
    b->shuffle = args_bool(a, "shuffle");
    b->seed = c->train.seed;
    c->eval_batch_size = (int)args_int(a, "per_device_eval_batch_size");
    if (c->eval_batch_size <= 0) return err_set(e, ST_EINVAL, "--per_device_eval_batch_size must be positive");
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
        cli_print_train_result(&res);
    free(dir);
    // several ranks: a failure aborts the job here (the others wait in a collective)
    if (st != ST_OK && d.world > 1) cli_dist_finish("sft", &d, st, e);
    dist_finalize(&d);
    return st;
}

int cmd_sft(int argc, char **argv) {
    ArgSpec *all = cli_train_specs(specs, train_defaults, CLI_TRAIN_EVAL);
    int rc = cli_run("sft", "Supervised fine-tuning with TRL SFTTrainer semantics on static shapes.", all, argc, argv,
                     run);
    free(all);
    return rc;
}
