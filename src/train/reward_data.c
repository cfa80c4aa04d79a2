// reward_data.c: preference rows in TRL's formats -> (chosen, rejected) token sequences.
#include "reward_data.h"

#include "../core/alloc.h"

#include <math.h>
#include <string.h>

typedef struct PairCtx {
    const RewardDataConfig *cfg;
    const TextCodec *codec;
    RewardPairs *rp;
    int cap;
    int detect_only, is_pairs;
} PairCtx;

static const cJSON *col(const cJSON *row, const char *key) { return cJSON_GetObjectItemCaseSensitive(row, key); }

// The ids column pair of a row: chosen_ids / rejected_ids, else the legacy names; NULL if neither.
static const char *ids_key(const cJSON *row, int chosen) {
    if (col(row, "chosen_ids") && col(row, "rejected_ids")) return chosen ? "chosen_ids" : "rejected_ids";
    if (col(row, "chosen_input_ids") && col(row, "rejected_input_ids"))
        return chosen ? "chosen_input_ids" : "rejected_input_ids";
    return NULL;
}

// Text: [prompt +] completion [+ EOS when it lacks it], tokenised with special tokens.
static Status text_side(const PairCtx *c, const cJSON *row, const char *key, I32Vec *out, Err *e) {
    const cJSON *v = col(row, key), *p = col(row, "prompt");
    if (!cJSON_IsString(v)) return err_set(e, ST_EINVAL, "\"%s\" must be a string (the first row's format)", key);
    if (p && !cJSON_IsString(p)) return err_set(e, ST_EINVAL, "\"prompt\" must be a string like \"%s\"", key);
    const char *eos = c->codec->eos_token, *s = v->valuestring;
    size_t n = strlen(s), k = eos ? strlen(eos) : 0;
    int add_eos = eos && !(n >= k && !memcmp(s + n - k, eos, k));
    StrBuf sb = {0};
    if (p) sb_puts(&sb, p->valuestring);
    sb_puts(&sb, s);
    if (add_eos) sb_puts(&sb, eos);
    Status st = c->codec->encode(c->codec->ctx, sb.data ? sb.data : "", sb.len, 1, out, e);
    sb_free(&sb);
    return st;
}

// Messages: the chat template over [prompt messages +] the completion's messages.
static Status chat_side(const PairCtx *c, const cJSON *row, const char *key, I32Vec *out, Err *e) {
    if (!c->codec->render) return err_set(e, ST_EINVAL, "conversational rows need a chat template (the model has none)");
    cJSON *all = cJSON_CreateArray(), *msgs = NULL;
    Status st = ST_OK;
    const cJSON *p = col(row, "prompt");
    if (p) {
        st = data_messages(p, "prompt", &msgs, e);
        for (cJSON *m = msgs ? msgs->child : NULL; st == ST_OK && m; m = m->next)
            cJSON_AddItemToArray(all, cJSON_Duplicate(m, 1));
        cJSON_Delete(msgs);
        msgs = NULL;
    }
    if (st == ST_OK) st = data_messages(col(row, key), key, &msgs, e);
    for (cJSON *m = msgs ? msgs->child : NULL; st == ST_OK && m; m = m->next)
        cJSON_AddItemToArray(all, cJSON_Duplicate(m, 1));
    cJSON_Delete(msgs);
    cJSON *tools = NULL, *vars = NULL;
    char *text = NULL;
    if (st == ST_OK) st = data_template_vars(row, c->cfg->chat_template_kwargs, &tools, &vars, e);
    if (st == ST_OK) st = c->codec->render(c->codec->ctx, all, tools, 0, vars, &text, NULL, NULL, e);
    if (st == ST_OK) st = c->codec->encode(c->codec->ctx, text, strlen(text), 0, out, e);
    free(text);
    cJSON_Delete(tools);
    cJSON_Delete(vars);
    cJSON_Delete(all);
    return st;
}

static Status first_row(PairCtx *c, const cJSON *row, Err *e) {
    RewardPairs *rp = c->rp;
    c->is_pairs = ids_key(row, 1) || (col(row, "chosen") && col(row, "rejected"));
    rp->pretokenised = ids_key(row, 1) != NULL;
    if (c->detect_only) return ST_OK;
    if (!c->is_pairs)
        return err_set(e, ST_EINVAL, "a preference row needs \"chosen\" and \"rejected\" (text or messages) or "
                                     "\"chosen_ids\" and \"rejected_ids\"");
    rp->conversational = !rp->pretokenised && cJSON_IsArray(col(row, "chosen"));
    rp->has_margin = col(row, "margin") != NULL;
    if (!rp->pretokenised && !c->codec)
        return err_set(e, ST_EINVAL, "text rows need a tokenizer (the model directory has no tokenizer.json)");
    return ST_OK;
}

static Status one_pair(PairCtx *c, const cJSON *row, RewardPair *out, Err *e) {
    const RewardPairs *rp = c->rp;
    I32Vec ch = {0}, rj = {0};
    Status st = ST_OK;
    if (rp->pretokenised) {
        const char *kc = ids_key(row, 1), *kr = ids_key(row, 0);
        if (!kc) st = err_set(e, ST_EINVAL, "missing \"chosen_ids\" / \"rejected_ids\" (the first row's format)");
        if (st == ST_OK) st = data_int_list(row, kc, c->cfg->vocab_size, &ch, e);
        if (st == ST_OK) st = data_int_list(row, kr, c->cfg->vocab_size, &rj, e);
    } else {
        Status (*side)(const PairCtx *, const cJSON *, const char *, I32Vec *, Err *) =
            rp->conversational ? chat_side : text_side;
        st = side(c, row, "chosen", &ch, e);
        if (st == ST_OK) st = side(c, row, "rejected", &rj, e);
    }
    if (st == ST_OK && (ch.n == 0 || rj.n == 0)) st = err_set(e, ST_EINVAL, "an empty chosen or rejected sequence");
    double margin = 0;
    if (st == ST_OK && rp->has_margin) {
        const cJSON *m = col(row, "margin");
        if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble))
            st = err_set(e, ST_EINVAL, "\"margin\" must be a finite number (the first row has one)");
        else margin = m->valuedouble;
    }
    if (st != ST_OK) {
        i32vec_free(&ch);
        i32vec_free(&rj);
        return st;
    }
    *out = (RewardPair){ch.v, rj.v, (int)ch.n, (int)rj.n, margin};
    return ST_OK;
}

static Status pair_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    PairCtx *c = ctx;
    RewardPairs *rp = c->rp;
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "%s: a row must be a JSON object", where);
    if (first && first_row(c, row, e) != ST_OK) return err_prefix(e, "%s: ", where);
    if (c->detect_only) return ST_OK;
    RewardPair pr;
    if (one_pair(c, row, &pr, e) != ST_OK) {
        if (!c->cfg->skip_bad_rows || first) return err_prefix(e, "%s: ", where);
        if (!rp->n_bad) snprintf(rp->first_bad, sizeof rp->first_bad, "%s: %s", where, e->msg);
        rp->n_bad++;
        err_clear(e);
        return ST_OK;
    }
    int L = c->cfg->max_length;
    if (L > 0 && (pr.n_chosen > L || pr.n_rejected > L)) {
        rp->n_dropped++;
        free(pr.chosen);
        free(pr.rejected);
        return ST_OK;
    }
    if (rp->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 256;
        rp->p = xrealloc(rp->p, (size_t)c->cap * sizeof(RewardPair));
    }
    rp->p[rp->n++] = pr;
    return ST_OK;
}

Status reward_data_detect(const char *path, int *is_pairs, int *ids, Err *e) {
    RewardPairs rp = {0};
    RewardDataConfig cfg = {0};
    PairCtx c = {.cfg = &cfg, .rp = &rp, .detect_only = 1};
    int n_bad = 0;
    TRY(data_foreach_row(path, 0, pair_row, &c, &n_bad, NULL, 0, e));  // the first row decides
    *is_pairs = c.is_pairs;
    if (ids) *ids = rp.pretokenised;
    return ST_OK;
}

Status reward_data_load(const char *path, const RewardDataConfig *cfg, const TextCodec *codec, RewardPairs *out,
                        Err *e) {
    memset(out, 0, sizeof *out);
    PairCtx c = {.cfg = cfg, .codec = codec, .rp = out};
    Status st = data_foreach_row(path, cfg->skip_bad_rows, pair_row, &c, &out->n_bad, out->first_bad,
                                 sizeof out->first_bad, e);
    if (st == ST_OK && out->n == 0)
        st = err_set(e, ST_EINVAL, "%s: no usable pair (%d rows skipped as bad, %d longer than max_length %d)", path,
                     out->n_bad, out->n_dropped, cfg->max_length);
    if (st != ST_OK) reward_pairs_free(out);
    return st;
}

void reward_pairs_free(RewardPairs *rp) {
    for (int i = 0; i < rp->n; i++) {
        free(rp->p[i].chosen);
        free(rp->p[i].rejected);
    }
    free(rp->p);
    memset(rp, 0, sizeof *rp);
}
