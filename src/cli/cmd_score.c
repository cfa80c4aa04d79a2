// cmd_score.c: still score — one reward per dataset row from a sequence-classification model.
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../tokenizer/chat.h"
#include "../train/codec.h"
#include "../train/reward_data.h"
#include "../train/reward_model.h"
#include "cli_common.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "reward model directory (a *ForSequenceClassification checkpoint)"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "rows to score: text, prompt/completion, messages, input_ids, or "
                                            "preference pairs (chosen/rejected, chosen_ids/rejected_ids)"},
    {"output", ARG_STR, NULL, "write the rewards here (JSONL, one line per row; default: stdout)"},
    {"batch_size", ARG_INT, "8", "rows per forward pass", "[1,inf)"},
    {"pad_to_multiple_of", ARG_INT, "128", "round batch lengths up to this (static shapes; 0 or 1 = off)", "[0,inf)"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"eos_token", ARG_STR, NULL, "EOS token appended to text rows that lack it (default: the tokenizer's)"},
    {"max_memory", ARG_STR, NULL, "memory budget, e.g. 8GiB (default: what the machine has available)"},
    {NULL, 0, NULL, NULL},
};

typedef struct Seqs {
    int32_t **ids;  // (n) borrowed
    int *lens;      // (n)
    int n;
} Seqs;

static void seqs_add(Seqs *s, int32_t *ids, int len, int cap) {
    CHECK(s->n < cap);
    s->ids[s->n] = ids;
    s->lens[s->n++] = len;
}

// The sequences of the file, in row order: one per row, or chosen then rejected per pair.
static Status load_rows(const Args *a, const char *dir, const char *path, int vocab, const cJSON *kwargs, int *pairs,
                        Dataset *d, RewardPairs *rp, Seqs *s, Err *e) {
    int ids_only;
    TRY(reward_data_detect(path, pairs, &ids_only, e));
    DataFormat fmt = FMT_IDS;
    DataConfig dc = {.text_field = "text", .vocab_size = vocab, .chat_template_kwargs = kwargs};
    if (!*pairs) TRY(data_detect(path, &dc, &fmt, NULL, e));
    ModelCodec mc = {0};
    int need_codec = *pairs ? !ids_only : fmt != FMT_IDS;
    if (need_codec) TRY(model_codec_load(&mc, dir, args_str(a, "eos_token"), e));
    Status st;
    if (*pairs) {
        RewardDataConfig rc = {.chat_template_kwargs = kwargs, .vocab_size = vocab};
        st = reward_data_load(path, &rc, need_codec ? &mc.codec : NULL, rp, e);
        if (st == ST_OK) {
            s->ids = xmalloc((size_t)2 * rp->n * sizeof(int32_t *));
            s->lens = xmalloc((size_t)2 * rp->n * sizeof(int));
            for (int i = 0; i < rp->n; i++) {
                seqs_add(s, rp->p[i].chosen, rp->p[i].n_chosen, 2 * rp->n);
                seqs_add(s, rp->p[i].rejected, rp->p[i].n_rejected, 2 * rp->n);
            }
        }
    } else {
        st = data_load(path, &dc, need_codec ? &mc.codec : NULL, d, e);
        if (st == ST_OK) {
            s->ids = xmalloc((size_t)d->n * sizeof(int32_t *));
            s->lens = xmalloc((size_t)d->n * sizeof(int));
            for (int i = 0; i < d->n; i++) seqs_add(s, d->ex[i].ids, d->ex[i].n, d->n);
        }
    }
    if (need_codec) model_codec_free(&mc);
    return st;
}

// One JSON line per row: {"reward": r} ({"logits": [...]} too with several labels), or
// {"reward_chosen", "reward_rejected"} for pairs.
static char *format_rows(const float *sc, int n_seq, int NL, int pairs) {
    StrBuf sb = {0};
    for (int i = 0; i < n_seq; i += pairs ? 2 : 1) {
        cJSON *o = cJSON_CreateObject();
        if (pairs) {
            cJSON_AddNumberToObject(o, "reward_chosen", sc[(size_t)i * NL]);
            cJSON_AddNumberToObject(o, "reward_rejected", sc[(size_t)(i + 1) * NL]);
        } else {
            cJSON_AddNumberToObject(o, "reward", sc[(size_t)i * NL]);
            if (NL > 1) {
                cJSON *l = cJSON_AddArrayToObject(o, "logits");
                for (int k = 0; k < NL; k++) cJSON_AddItemToArray(l, cJSON_CreateNumber(sc[(size_t)i * NL + k]));
            }
        }
        char *line = cJSON_PrintUnformatted(o);
        sb_puts(&sb, line);
        sb_putc(&sb, '\n');
        free(line);
        cJSON_Delete(o);
    }
    return sb.data ? sb_take(&sb) : xstrdup("");
}

static Status run(const Args *a, Err *e) {
    const char *path = args_str(a, "dataset"), *outp = args_str(a, "output");
    int B = (int)args_int(a, "batch_size"), pad = (int)args_int(a, "pad_to_multiple_of");
    if (!path) return err_set(e, ST_EINVAL, "--dataset FILE.jsonl is required");
    if (B <= 0) return err_set(e, ST_EINVAL, "--batch_size must be positive");
    char *dir;
    TRY(cli_model_dir(a, "model", &dir, e));
    cJSON *kwargs = NULL;
    Status st = chat_kwargs_parse(args_str(a, "chat_template_kwargs"), &kwargs, e);
    ModelConfig cfg = {0};
    char *cp = path_join(dir, "config.json");
    if (st == ST_OK) st = config_load(cp, &cfg, e);
    free(cp);
    if (st == ST_OK && cfg.num_labels <= 0)
        st = err_set(e, ST_EINVAL, "%s is a causal LM, not a sequence classifier; make one with: still init --model %s "
                                   "--num_labels 1 --output_dir DIR", dir, dir);
    int pairs = 0;
    Dataset d = {0};
    RewardPairs rp = {0};
    Seqs s = {0};
    if (st == ST_OK) st = load_rows(a, dir, path, cfg.vocab_size, kwargs, &pairs, &d, &rp, &s, e);
    Backend *be = NULL;
    Model *m = NULL;
    int dt = -1;
    size_t mm = 0;
    if (st == ST_OK) st = cli_dtype(a, &dt, e);
    if (st == ST_OK) st = cli_max_memory(a, &mm, e);
    if (st == ST_OK) st = cli_backend(a, &be, e);
    if (st == ST_OK) be->max_memory = mm;
    ModelLoadOpts lo = {.frozen = 1, .classifier = 1};
    if (st == ST_OK) st = model_load_opts(dir, be, dt, &lo, &m, e);
    float *sc = NULL;
    if (st == ST_OK) {
        log_info("scoring %d %s of %s with %s (%d label%s, pad_token_id %d)", pairs ? rp.n : s.n, pairs ? "pairs" : "rows",
                 path, dir, m->cfg.num_labels, m->cfg.num_labels == 1 ? "" : "s", m->cfg.pad_token_id);
        sc = xmalloc((size_t)s.n * m->cfg.num_labels * sizeof(float));
        st = reward_model_score(m, (const int32_t *const *)s.ids, s.lens, s.n, B, pad, m->cfg.pad_token_id, sc, e);
    }
    if (st == ST_OK) {
        char *text = format_rows(sc, s.n, m->cfg.num_labels, pairs);
        if (outp) st = file_write_atomic(outp, text, strlen(text), e);
        else fputs(text, stdout);
        free(text);
        if (st == ST_OK && outp) log_info("wrote %s", outp);
    }
    free(sc);
    free(s.ids), free(s.lens);
    data_free(&d);
    reward_pairs_free(&rp);
    model_free(m);
    if (be) backend_destroy(be);
    config_free(&cfg);
    cJSON_Delete(kwargs);
    free(dir);
    return st;
}

int cmd_score(int argc, char **argv) {
    return cli_run("score", "One reward per dataset row from a sequence-classification (reward) model.", specs, argc,
                   argv, run);
}
