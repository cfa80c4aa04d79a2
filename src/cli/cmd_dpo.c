// cmd_dpo.c: still dpo — flags (TRL DPOConfig / TrainingArguments names) -> DpoConfig -> dpo_run.
#include "../train/dpo.h"
#include "cli_common.h"
#include "cli_train.h"
#include "commands.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "policy model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"ref_model", ARG_STR, NULL, "reference model directory (default: a frozen copy of --model's initial weights; "
                                 "with --use_peft the base with the adapter off)"},
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "preference pairs: a local JSONL or JSON file (prompt/chosen/rejected as "
                               "text or messages, implicit-prompt chosen/rejected, or prompt_ids/chosen_ids/rejected_ids)"},
    {"beta", ARG_FLOAT, "0.1", "deviation from the reference (IPO: its tau)", "(0,inf)"},
    {"loss_type", ARG_LIST, "sigmoid", "loss type(s), repeatable or comma-separated: sigmoid hinge ipo exo_pair nca_pair "
                                       "robust bco_pair sppo_hard aot aot_unpaired apo_zero apo_down discopop sft "
                                       "sigmoid_norm"},
    {"loss_weights", ARG_LIST, NULL, "one weight per loss type (default 1 each)"},
    {"label_smoothing", ARG_FLOAT, "0", "robust: flip probability in [0, 0.5); exo_pair: its epsilon; aot: smoothing", "[0,1)"},
    {"f_divergence_type", ARG_STR, "reverse_kl", "reverse_kl | forward_kl | js_divergence | alpha_divergence"},
    {"f_alpha_divergence_coef", ARG_FLOAT, "0.5", "alpha of alpha_divergence", "[0,inf)"},
    {"ld_alpha", ARG_FLOAT, NULL, "LD-DPO: weight of completion tokens past the shorter completion (default: none)", "[0,1]"},
    {"use_weighting", ARG_BOOL, "false", "WPO weights from the policy's length-normalised probabilities"},
    {"discopop_tau", ARG_FLOAT, "0.05", "temperature of the discopop loss", "(0,inf)"},
    {"precompute_ref_log_probs", ARG_BOOL, "false", "reference log-probs once over the dataset before training (or "
                                                    "the dataset's ref_chosen_logps / ref_rejected_logps columns)"},
    {"precompute_ref_batch_size", ARG_INT, NULL, "pairs per batch while precomputing (default: "
                                                 "per_device_train_batch_size)", "[1,inf)"},
    {"max_length", ARG_INT, "1024", "tokens kept of prompt + completion (0 = no truncation)", "[0,inf)"},
    {"truncation_mode", ARG_STR, "keep_start", "keep_start | keep_end (deprecated in TRL)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round batch lengths up to this (static shapes; 0 or 1 = off)", "[0,inf)"},
    {"padding_free", ARG_BOOL, "false", "accepted when false (TRL disables it for DPO too)"},
    {"disable_dropout", ARG_BOOL, "true", "accepted when true (still has no dropout outside LoRA)"},
    {"sync_ref_model", ARG_BOOL, "false", "TR-DPO reference syncing (not supported yet)"},
    {"dataloader_drop_last", ARG_BOOL, "false", "drop the last incomplete batch"},
    {"shuffle", ARG_BOOL, "true", "reshuffle pairs every epoch (seeded); false = TRL's sequential order"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {NULL, 0, NULL, NULL},
};

static const ArgSpec train_defaults[] = {
    {"learning_rate", ARG_FLOAT, "1e-6", "peak learning rate (DPOConfig: 1e-6)", "[0,inf)"},
    {"per_device_train_batch_size", ARG_INT, "8", "preference pairs per micro-batch", "[1,inf)"},
    {NULL, 0, NULL, NULL},
};

// Every value of a list flag, each also split at commas and spaces.
static int split_list(const Args *a, const char *name, char ***out) {
    char **v;
    int k = args_list(a, name, &v), n = 0, cap = 0;
    *out = NULL;
    for (int i = 0; i < k; i++)
        for (const char *s = v[i]; *s;) {
            while (*s == ',' || *s == ' ') s++;
            if (!*s) break;
            size_t l = strcspn(s, ", ");
            if (n == cap) *out = realloc(*out, (size_t)(cap = cap * 2 + 4) * sizeof(char *));
            (*out)[n++] = strndup(s, l);
            s += l;
        }
    return n;
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static Status parse_losses(const Args *a, DpoLossConfig *l, Err *e) {
    char **t, **w;
    int nt = split_list(a, "loss_type", &t), nw = split_list(a, "loss_weights", &w);
    if (nt == 0) {  // DPOConfig's default
        t = realloc(t, sizeof(char *));
        t[nt++] = strdup("sigmoid");
    }
    Status st = ST_OK;
    if (nt < 1 || nt > DPO_MAX_LOSSES) st = err_set(e, ST_EINVAL, "--loss_type: 1 to %d loss types", DPO_MAX_LOSSES);
    if (st == ST_OK && nw && nw != nt)
        st = err_set(e, ST_EINVAL, "--loss_weights has %d values for %d loss types (TRL: they must match)", nw, nt);
    for (int i = 0; st == ST_OK && i < nt; i++) {
        st = dpo_parse_loss_type(t[i], &l->type[i], e);
        l->weight[i] = 1.0;
        if (st == ST_OK && nw) {
            char *end;
            l->weight[i] = strtod(w[i], &end);
            if (*end || !isfinite(l->weight[i])) st = err_set(e, ST_EINVAL, "--loss_weights %s: expected a number", w[i]);
        }
    }
    l->n_types = nt;
    free_list(t, nt), free_list(w, nw);
    return st;
}

static Status build(const Args *a, DpoConfig *c, char **model_dir, char **ref_dir, Err *e) {
    dpo_config_default(c);
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
    DpoLossConfig *l = &c->loss;
    if (parse_losses(a, l, e) != ST_OK) return e->code = ST_EUSAGE;
    l->beta = args_float(a, "beta");
    l->label_smoothing = args_float(a, "label_smoothing");
    l->discopop_tau = args_float(a, "discopop_tau");
    l->f_alpha = args_float(a, "f_alpha_divergence_coef");
    l->use_weighting = args_bool(a, "use_weighting");
    if (dpo_parse_fdiv(args_str(a, "f_divergence_type"), &l->fdiv, e) != ST_OK) return e->code = ST_EUSAGE;
    c->has_ld_alpha = args_is_set(a, "ld_alpha");
    if (c->has_ld_alpha) c->ld_alpha = args_float(a, "ld_alpha");
    c->precompute_ref_log_probs = args_bool(a, "precompute_ref_log_probs");
    c->precompute_ref_batch_size = args_is_set(a, "precompute_ref_batch_size") ? (int)args_int(a, "precompute_ref_batch_size") : 0;
    c->data.max_length = (int)args_int(a, "max_length");
    const char *tm = args_str(a, "truncation_mode");
    if (!strcmp(tm, "keep_end")) c->data.keep_end = 1;
    else if (strcmp(tm, "keep_start")) return err_set(e, ST_EUSAGE, "--truncation_mode %s: expected keep_start or keep_end", tm);
    c->data.skip_bad_rows = args_bool(a, "skip_bad_rows");
    c->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    if (args_bool(a, "padding_free"))
        return err_set(e, ST_EUNSUPPORTED, "--padding_free is not supported (TRL's DPOTrainer currently turns it off too)");
    if (!args_bool(a, "disable_dropout"))
        return err_set(e, ST_EUNSUPPORTED, "--disable_dropout false is not supported (the models have no dropout)");
    if (args_bool(a, "sync_ref_model"))
        return err_set(e, ST_EUNSUPPORTED, "--sync_ref_model (TR-DPO) is not supported yet");
    c->drop_last = args_bool(a, "dataloader_drop_last");
    c->shuffle = args_bool(a, "shuffle");
    c->chat_template_kwargs = args_str(a, "chat_template_kwargs");
    if (dpo_check_config(l, e) != ST_OK) return e->code = ST_EUSAGE;  // TRL's checks between flags
    return ST_OK;
}

static Status run(const Args *a, Err *e) {
    DpoConfig c;
    char *dir = NULL, *ref = NULL;
    Dist d;
    Status st = build(a, &c, &dir, &ref, e);
    if (st == ST_OK) st = cli_dist(a, &d, &c.train.zero_stage, e);
    else dist_single(&d);
    c.dist = &d;
    TrainResult res;
    if (st == ST_OK) st = dpo_run(&c, &res, e);
    free(dir);
    free(ref);
    return cli_train_done("dpo", &d, st, &res, e);
}

int cmd_dpo(int argc, char **argv) {
    ArgSpec *all = cli_train_specs(specs, train_defaults, 0);
    int rc = cli_run("dpo", "Preference optimisation with TRL DPOTrainer semantics (every DPO loss type).", all, argc,
                     argv, run);
    free(all);
    return rc;
}
