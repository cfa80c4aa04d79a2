// pref_data.c: paired preference rows in TRL's formats -> prompt / chosen / rejected ids.
#include "pref_data.h"

#include "../core/alloc.h"
#include "../core/log.h"

#include <math.h>
#include <string.h>

// ---- TRL's extract_prompt ----------------------------------------------------------------------

static int is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

// Byte offsets of the code points of s: off[k] for k < n, off[n] = strlen(s). Returns n.
static size_t code_points(const char *s, size_t **off) {
    size_t len = strlen(s), n = 0;
    *off = xmalloc((len + 1) * sizeof(size_t));
    for (size_t i = 0; i < len; i++)
        if (!is_cont((unsigned char)s[i])) (*off)[n++] = i;
    (*off)[n] = len;
    return n;
}

Status pref_extract_prompt_text(const char *chosen, const char *rejected, size_t *prompt_len, size_t *c0, size_t *r0,
                                Err *e) {
    size_t *oc, *orj;
    size_t nc = code_points(chosen, &oc), nr = code_points(rejected, &orj), n = MIN(nc, nr);
    if (n == 0) {
        free(oc), free(orj);
        return err_set(e, ST_EINVAL, "implicit prompt: \"chosen\" and \"rejected\" must both be non-empty");
    }
    // for idx in range(n): first differing character; a space before it stays with the
    // completions; no difference: idx ends at n - 1 (the loop variable's last value)
    long idx = (long)n - 1;
    for (size_t k = 0; k < n; k++) {
        size_t lc = oc[k + 1] - oc[k], lr = orj[k + 1] - orj[k];
        if (lc != lr || memcmp(chosen + oc[k], rejected + orj[k], lc)) {
            idx = (long)k;
            long prev = idx - 1 < 0 ? (long)nc - 1 : idx - 1;  // chosen[-1] is the last character
            if (oc[prev + 1] - oc[prev] == 1 && chosen[oc[prev]] == ' ') idx--;
            break;
        }
    }
    // Python slices: [:idx] and [idx:] with idx = -1 meaning the last character
    *c0 = idx >= 0 ? oc[idx] : oc[nc - 1];
    *r0 = idx >= 0 ? orj[idx] : orj[nr - 1];
    *prompt_len = *c0;
    free(oc), free(orj);
    return ST_OK;
}

// The same on message lists: messages compared whole.
static Status extract_prompt_msgs(const cJSON *chosen, const cJSON *rejected, int *idx_out, Err *e) {
    int nc = cJSON_GetArraySize(chosen), nr = cJSON_GetArraySize(rejected), n = MIN(nc, nr);
    if (n == 0) return err_set(e, ST_EINVAL, "implicit prompt: \"chosen\" and \"rejected\" must both be non-empty");
    int idx = n - 1;
    for (int k = 0; k < n; k++)
        if (!cJSON_Compare(cJSON_GetArrayItem(chosen, k), cJSON_GetArrayItem(rejected, k), 1)) {
            idx = k;  // a message is never equal to " ": no shift
            break;
        }
    if (idx == 0) return err_set(e, ST_EINVAL, "implicit prompt: \"chosen\" and \"rejected\" share no first message, so "
                                               "the prompt would be empty");
    *idx_out = idx;
    return ST_OK;
}

// ---- rows ----------------------------------------------------------------------------------------

typedef struct PrefCtx {
    const PrefConfig *cfg;
    const TextCodec *codec;
    PrefSet *s;
    int cap;
    int warned_prefix;
} PrefCtx;

static Status ids_column(const cJSON *row, const char *key, int vocab, I32Vec *out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    if (!cJSON_IsArray(v)) return err_set(e, ST_EINVAL, "\"%s\" must be a list of token ids", key);
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble > INT32_MAX)
            return err_set(e, ST_EINVAL, "\"%s\"[%d] is not a token id", key, i);
        if (vocab > 0 && x->valuedouble >= vocab)
            return err_set(e, ST_EINVAL, "\"%s\"[%d] = %.0f is outside the vocabulary [0, %d)", key, i, x->valuedouble,
                           vocab);
        i32vec_push(out, (int32_t)x->valuedouble);
    }
    return ST_OK;
}

static Status encode_text(const PrefCtx *c, const char *text, I32Vec *out, Err *e) {
    return c->codec->encode(c->codec->ctx, text, strlen(text), 1, out, e);
}

static Status render_ids(const PrefCtx *c, const cJSON *row, const cJSON *msgs, int add_gen, I32Vec *out, Err *e) {
    if (!c->codec->render)
        return err_set(e, ST_EINVAL, "conversational rows need a chat template (the model has no chat_template)");
    cJSON *tools, *vars;
    TRY(data_template_vars(row, c->cfg->chat_template_kwargs, &tools, &vars, e));
    char *text = NULL;
    Status st = c->codec->render(c->codec->ctx, msgs, tools, add_gen, vars, &text, NULL, NULL, e);
    cJSON_Delete(tools);
    cJSON_Delete(vars);
    if (st == ST_OK) st = c->codec->encode(c->codec->ctx, text, strlen(text), 0, out, e);
    free(text);
    return st;
}

static char *concat3(const char *a, size_t na, const char *b, const char *eos) {
    size_t nb = strlen(b), ne = eos ? strlen(eos) : 0;
    int add = eos && !(nb >= ne && !memcmp(b + nb - ne, eos, ne));
    char *s = xmalloc(na + nb + (add ? ne : 0) + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb);
    if (add) memcpy(s + na + nb, eos, ne);
    s[na + nb + (add ? ne : 0)] = 0;
    return s;
}

// Text rows: prompt_ids = ids(prompt); full = ids(prompt + completion + EOS if missing).
static Status text_pair(PrefCtx *c, const char *prompt, size_t np, const char *chosen, const char *rejected, I32Vec *p,
                        I32Vec *fc, I32Vec *fr, Err *e) {
    char *ps = xstrndup(prompt, np);
    char *sc = concat3(prompt, np, chosen, c->codec->eos_token), *sr = concat3(prompt, np, rejected, c->codec->eos_token);
    Status st = encode_text(c, ps, p, e);
    if (st == ST_OK) st = encode_text(c, sc, fc, e);
    if (st == ST_OK) st = encode_text(c, sr, fr, e);
    free(ps), free(sc), free(sr);
    return st;
}

static Status msgs_pair(PrefCtx *c, const cJSON *row, const cJSON *prompt, const cJSON *chosen, const cJSON *rejected,
                        I32Vec *p, I32Vec *fc, I32Vec *fr, Err *e) {
    cJSON *pm = NULL, *cm = NULL, *rm = NULL;
    Status st = data_messages(prompt, "prompt", &pm, e);
    if (st == ST_OK) st = data_messages(chosen, "chosen", &cm, e);
    if (st == ST_OK) st = data_messages(rejected, "rejected", &rm, e);
    if (st == ST_OK) st = render_ids(c, row, pm, 1, p, e);
    for (int k = 0; k < 2 && st == ST_OK; k++) {
        cJSON *all = cJSON_Duplicate(pm, 1);
        for (cJSON *m = (k ? rm : cm)->child; m; m = m->next) cJSON_AddItemToArray(all, cJSON_Duplicate(m, 1));
        st = render_ids(c, row, all, 0, k ? fr : fc, e);
        cJSON_Delete(all);
    }
    cJSON_Delete(pm), cJSON_Delete(cm), cJSON_Delete(rm);
    return st;
}

// A sub-array of messages [from, to) (to < 0: the end).
static cJSON *slice_msgs(const cJSON *a, int from, int to) {
    cJSON *r = cJSON_CreateArray();
    int k = 0;
    for (const cJSON *m = a->child; m; m = m->next, k++)
        if (k >= from && (to < 0 || k < to)) cJSON_AddItemToArray(r, cJSON_Duplicate(m, 1));
    return r;
}

static int32_t *take(const I32Vec *v, size_t from, int *n) {
    *n = (int)(v->n - MIN(from, v->n));
    int32_t *r = xmalloc((size_t)(*n ? *n : 1) * sizeof(int32_t));
    if (*n) memcpy(r, v->v + from, (size_t)*n * sizeof(int32_t));
    return r;
}

static void warn_prefix(PrefCtx *c, const I32Vec *p, const I32Vec *full, const char *which) {
    if (c->warned_prefix) return;
    if (p->n > full->n || (p->n && memcmp(p->v, full->v, p->n * sizeof(int32_t)))) {
        log_warn("the prompt's tokens are not a prefix of the prompt+%s tokens; the completion starts after %zu "
                 "tokens anyway (as TRL)", which, p->n);
        c->warned_prefix = 1;
    }
}

static double ref_column(const cJSON *row, const char *key, int *present) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    if (!cJSON_IsNumber(v)) {
        *present = 0;
        return NAN;
    }
    return v->valuedouble;
}

static Status pref_row(PrefCtx *c, const cJSON *row, Err *e) {
    PrefSet *s = c->s;
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "a row must be a JSON object");
    I32Vec p = {0}, fc = {0}, fr = {0};
    Status st = ST_OK;
    int tokenised = s->tokenised;
    if (tokenised) {
        int vocab = c->cfg->vocab_size;
        st = ids_column(row, "prompt_ids", vocab, &p, e);
        if (st == ST_OK) st = ids_column(row, "chosen_ids", vocab, &fc, e);
        if (st == ST_OK) st = ids_column(row, "rejected_ids", vocab, &fr, e);
    } else {
        if (!c->codec) return err_set(e, ST_EINVAL, "text rows need a tokenizer (the model directory has no tokenizer.json)");
        const cJSON *pj = cJSON_GetObjectItemCaseSensitive(row, "prompt");
        const cJSON *cj = cJSON_GetObjectItemCaseSensitive(row, "chosen");
        const cJSON *rj = cJSON_GetObjectItemCaseSensitive(row, "rejected");
        if (!cj || !rj) return err_set(e, ST_EINVAL, "missing \"%s\"", cj ? "rejected" : "chosen");
        int conv = s->conversational;
        if (conv ? !(cJSON_IsArray(cj) && cJSON_IsArray(rj)) : !(cJSON_IsString(cj) && cJSON_IsString(rj)))
            return err_set(e, ST_EINVAL, "\"chosen\" and \"rejected\" must both be %s, as in the first row",
                           conv ? "lists of messages" : "strings");
        if (!s->implicit_prompt && !pj) return err_set(e, ST_EINVAL, "missing \"prompt\" (the first row has one)");
        if (!s->implicit_prompt && (conv ? !cJSON_IsArray(pj) : !cJSON_IsString(pj)))
            return err_set(e, ST_EINVAL, "\"prompt\" must be %s, as \"chosen\"", conv ? "a list of messages" : "a string");
        if (!conv && s->implicit_prompt) {
            size_t np, c0, r0;
            st = pref_extract_prompt_text(cj->valuestring, rj->valuestring, &np, &c0, &r0, e);
            if (st == ST_OK)
                st = text_pair(c, cj->valuestring, np, cj->valuestring + c0, rj->valuestring + r0, &p, &fc, &fr, e);
        } else if (!conv) {
            st = text_pair(c, pj->valuestring, strlen(pj->valuestring), cj->valuestring, rj->valuestring, &p, &fc, &fr, e);
        } else if (s->implicit_prompt) {
            int idx = 0;
            st = extract_prompt_msgs(cj, rj, &idx, e);
            if (st == ST_OK) {
                cJSON *pm = slice_msgs(cj, 0, idx), *cm = slice_msgs(cj, idx, -1), *rm = slice_msgs(rj, idx, -1);
                st = msgs_pair(c, row, pm, cm, rm, &p, &fc, &fr, e);
                cJSON_Delete(pm), cJSON_Delete(cm), cJSON_Delete(rm);
            }
        } else {
            st = msgs_pair(c, row, pj, cj, rj, &p, &fc, &fr, e);
        }
        if (st == ST_OK) warn_prefix(c, &p, &fc, "chosen"), warn_prefix(c, &p, &fr, "rejected");
    }
    if (st == ST_OK && !c->cfg->keep_end && c->cfg->max_length > 0 && p.n >= (size_t)c->cfg->max_length) {
        s->n_dropped++;  // TRL drops rows whose prompt alone fills max_length (keep_start)
    } else if (st == ST_OK) {
        if (s->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 256;
            s->ex = xrealloc(s->ex, (size_t)c->cap * sizeof(PrefExample));
        }
        PrefExample *x = &s->ex[s->n++];
        memset(x, 0, sizeof *x);
        size_t np = p.n;
        x->prompt = take(&p, 0, &x->np);
        x->chosen = take(&fc, tokenised ? 0 : np, &x->nc);
        x->rejected = take(&fr, tokenised ? 0 : np, &x->nr);
        int present = 1;
        x->ref_chosen = ref_column(row, "ref_chosen_logps", &present);
        x->ref_rejected = ref_column(row, "ref_rejected_logps", &present);
        if (!present) s->has_ref = 0;
    }
    i32vec_free(&p), i32vec_free(&fc), i32vec_free(&fr);
    return st;
}

static Status detect_first(PrefSet *s, const cJSON *row, Err *e) {
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "a row must be a JSON object");
    s->tokenised = cJSON_GetObjectItemCaseSensitive(row, "prompt_ids") != NULL;
    if (s->tokenised) return ST_OK;
    const cJSON *cj = cJSON_GetObjectItemCaseSensitive(row, "chosen");
    if (!cj || !cJSON_GetObjectItemCaseSensitive(row, "rejected"))
        return err_set(e, ST_EINVAL, "not a preference row: expected \"chosen\" and \"rejected\" (with or without "
                                     "\"prompt\"), or \"prompt_ids\", \"chosen_ids\" and \"rejected_ids\"");
    s->implicit_prompt = cJSON_GetObjectItemCaseSensitive(row, "prompt") == NULL;
    s->conversational = cJSON_IsArray(cj);
    return ST_OK;
}

static Status load_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    PrefCtx *c = ctx;
    if (first && detect_first(c->s, row, e) != ST_OK) return err_prefix(e, "%s: ", where);
    Status st = pref_row(c, row, e);
    if (st == ST_OK) return ST_OK;
    err_prefix(e, "%s: ", where);
    if (!c->cfg->skip_bad_rows || first) return st;
    if (!c->s->n_bad) snprintf(c->s->first_bad, sizeof c->s->first_bad, "%s", e->msg);
    c->s->n_bad++;
    err_clear(e);
    return ST_OK;
}

static Status detect_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    if (first && detect_first(ctx, row, e) != ST_OK) return err_prefix(e, "%s: ", where);
    return ST_OK;
}

Status pref_detect(const char *path, int *needs_codec, Err *e) {
    PrefSet s = {0};
    int n_bad = 0;
    Status st = data_foreach_row(path, 1, detect_row, &s, &n_bad, NULL, 0, e);
    *needs_codec = !s.tokenised;
    return st;
}

Status pref_load(const char *path, const PrefConfig *cfg, const TextCodec *codec, PrefSet *out, Err *e) {
    memset(out, 0, sizeof *out);
    out->has_ref = 1;
    PrefCtx c = {.cfg = cfg, .codec = codec, .s = out};
    int n_bad = 0;
    Status st = data_foreach_row(path, cfg->skip_bad_rows, load_row, &c, &n_bad, out->first_bad, sizeof out->first_bad, e);
    out->n_bad += n_bad;
    if (st == ST_OK && out->n == 0)
        st = err_set(e, ST_EINVAL, "%s: no usable preference pair (%d rows skipped as bad, %d dropped because the prompt "
                                   "alone reaches max_length %d)", path, out->n_bad, out->n_dropped, cfg->max_length);
    if (st != ST_OK) pref_free(out);
    if (st == ST_OK && !out->n) out->has_ref = 0;
    return st;
}

void pref_free(PrefSet *s) {
    for (int i = 0; i < s->n; i++) free(s->ex[i].prompt), free(s->ex[i].chosen), free(s->ex[i].rejected);
    free(s->ex);
    memset(s, 0, sizeof *s);
}

// ---- unpaired rows (KTO) -------------------------------------------------------------------------

typedef struct UnpCtx {
    PrefCtx pc;
    UnpairedSet *u;
    int cap;
    int tokenised, conversational;
} UnpCtx;

static void unp_push(UnpairedSet *u, int *cap, int32_t *p, int np, int32_t *c, int nc, int label, double ref,
                     double ref_kl) {
    if (u->n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        u->ex = xrealloc(u->ex, (size_t)*cap * sizeof(UnpairedExample));
    }
    u->ex[u->n++] = (UnpairedExample){.prompt = p, .completion = c, .np = np, .nc = nc, .label = label, .kl_src = -1,
                                      .ref_logp = ref, .ref_kl_logp = ref_kl};
}

static Status label_of(const cJSON *row, int *label, Err *e) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(row, "label");
    if (cJSON_IsBool(l)) *label = cJSON_IsTrue(l);
    else if (cJSON_IsNumber(l) && (l->valuedouble == 0 || l->valuedouble == 1)) *label = l->valuedouble == 1;
    else return err_set(e, ST_EINVAL, "\"label\" must be true (desirable) or false (undesirable)");
    return ST_OK;
}

static Status unp_row(UnpCtx *c, const cJSON *row, Err *e) {
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "a row must be a JSON object");
    int label = 0;
    TRY(label_of(row, &label, e));
    I32Vec p = {0}, f = {0};
    Status st = ST_OK;
    if (c->tokenised) {
        st = ids_column(row, "prompt_ids", c->pc.cfg->vocab_size, &p, e);
        if (st == ST_OK) st = ids_column(row, "completion_ids", c->pc.cfg->vocab_size, &f, e);
    } else {
        const TextCodec *tc = c->pc.codec;
        if (!tc) return err_set(e, ST_EINVAL, "text rows need a tokenizer (the model directory has no tokenizer.json)");
        const cJSON *pj = cJSON_GetObjectItemCaseSensitive(row, "prompt");
        const cJSON *cj = cJSON_GetObjectItemCaseSensitive(row, "completion");
        if (!pj || !cj) return err_set(e, ST_EINVAL, "missing \"%s\"", pj ? "completion" : "prompt");
        if (c->conversational) {
            cJSON *pm = NULL, *cm = NULL;
            st = data_messages(pj, "prompt", &pm, e);
            if (st == ST_OK) st = data_messages(cj, "completion", &cm, e);
            if (st == ST_OK) st = render_ids(&c->pc, row, pm, 1, &p, e);
            if (st == ST_OK) {
                cJSON *all = cJSON_Duplicate(pm, 1);
                for (cJSON *m = cm->child; m; m = m->next) cJSON_AddItemToArray(all, cJSON_Duplicate(m, 1));
                st = render_ids(&c->pc, row, all, 0, &f, e);
                cJSON_Delete(all);
            }
            cJSON_Delete(pm), cJSON_Delete(cm);
        } else {
            if (!cJSON_IsString(pj) || !cJSON_IsString(cj))
                return err_set(e, ST_EINVAL, "\"prompt\" and \"completion\" must both be strings, as in the first row");
            char *full = concat3(pj->valuestring, strlen(pj->valuestring), cj->valuestring, tc->eos_token);
            st = encode_text(&c->pc, pj->valuestring, &p, e);
            if (st == ST_OK) st = encode_text(&c->pc, full, &f, e);
            free(full);
        }
        if (st == ST_OK) warn_prefix(&c->pc, &p, &f, "completion");
    }
    if (st == ST_OK) {
        int np, nc;
        int32_t *pp = take(&p, 0, &np), *cc = take(&f, c->tokenised ? 0 : p.n, &nc);
        int present = 1;
        double r = ref_column(row, "ref_logps", &present), rk = ref_column(row, "ref_KL_logps", &present);
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "ref_logps"))) c->u->has_ref = 0;
        (void)present;
        unp_push(c->u, &c->cap, pp, np, cc, nc, label, r, rk);
    }
    i32vec_free(&p), i32vec_free(&f);
    return st;
}

static Status unp_load_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    UnpCtx *c = ctx;
    if (first) {
        if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "%s: a row must be a JSON object", where);
        c->tokenised = cJSON_GetObjectItemCaseSensitive(row, "prompt_ids") != NULL;
        c->conversational = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(row, "prompt"));
    }
    Status st = unp_row(c, row, e);
    if (st == ST_OK) return ST_OK;
    err_prefix(e, "%s: ", where);
    if (!c->pc.cfg->skip_bad_rows || first) return st;
    if (!c->u->n_bad) snprintf(c->u->first_bad, sizeof c->u->first_bad, "%s", e->msg);
    c->u->n_bad++;
    err_clear(e);
    return ST_OK;
}

typedef struct UnpDetect {
    int pairs, tokenised, first_seen;
} UnpDetect;

static Status unp_detect_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    UnpDetect *d = ctx;
    if (!first) return ST_OK;
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "%s: a row must be a JSON object", where);
    d->first_seen = 1;
    d->pairs = cJSON_GetObjectItemCaseSensitive(row, "chosen") && cJSON_GetObjectItemCaseSensitive(row, "rejected");
    d->pairs |= cJSON_GetObjectItemCaseSensitive(row, "chosen_ids") != NULL;
    d->tokenised = cJSON_GetObjectItemCaseSensitive(row, "prompt_ids") != NULL;
    if (!d->pairs && !cJSON_GetObjectItemCaseSensitive(row, "label"))
        return err_set(e, ST_EINVAL, "%s: not an unpaired preference row: expected \"prompt\", \"completion\" and "
                                     "\"label\" (or \"prompt_ids\", \"completion_ids\", \"label\"; or paired "
                                     "\"chosen\"/\"rejected\" rows, which are unpaired)", where);
    return ST_OK;
}

Status unpaired_detect(const char *path, int *needs_codec, Err *e) {
    UnpDetect d = {0};
    int n_bad = 0;
    TRY(data_foreach_row(path, 1, unp_detect_row, &d, &n_bad, NULL, 0, e));
    *needs_codec = !d.tokenised;
    return ST_OK;
}

// Paired rows -> unpaired: per block of 1000 pairs (datasets.map's batch), chosen rows then rejected.
static Status unpair(const char *path, const PrefConfig *cfg, const TextCodec *codec, UnpairedSet *u, int *cap, Err *e) {
    PrefConfig pc = *cfg;
    pc.max_length = 0;  // the prompt-length filter runs after unpairing
    PrefSet ps;
    TRY(pref_load(path, &pc, codec, &ps, e));
    u->from_pairs = 1;
    u->n_bad = ps.n_bad;
    snprintf(u->first_bad, sizeof u->first_bad, "%s", ps.first_bad);
    for (int b0 = 0; b0 < ps.n; b0 += 1000)
        for (int h = 0; h < 2; h++)
            for (int i = b0; i < MIN(ps.n, b0 + 1000); i++) {
                PrefExample *x = &ps.ex[i];
                int np = x->np, nc = h ? x->nr : x->nc;
                int32_t *p = xmalloc((size_t)(np ? np : 1) * sizeof(int32_t)), *c = h ? x->rejected : x->chosen;
                if (np) memcpy(p, x->prompt, (size_t)np * sizeof(int32_t));
                if (h) x->rejected = NULL;
                else x->chosen = NULL;
                unp_push(u, cap, p, np, c, nc, !h, NAN, NAN);
            }
    u->has_ref = 0;
    pref_free(&ps);
    return ST_OK;
}

Status unpaired_load(const char *path, const PrefConfig *cfg, const TextCodec *codec, int kl_batch, UnpairedSet *out,
                     Err *e) {
    memset(out, 0, sizeof *out);
    UnpDetect d = {0};
    int n_bad = 0, cap = 0;
    Status st = data_foreach_row(path, 1, unp_detect_row, &d, &n_bad, NULL, 0, e);
    if (st == ST_OK && d.pairs) {
        st = unpair(path, cfg, codec, out, &cap, e);
    } else if (st == ST_OK) {
        out->has_ref = 1;
        UnpCtx c = {.pc = {.cfg = cfg, .codec = codec}, .u = out};
        st = data_foreach_row(path, cfg->skip_bad_rows, unp_load_row, &c, &out->n_bad, out->first_bad,
                              sizeof out->first_bad, e);
        cap = c.cap;
    }
    // TRL drops rows whose prompt alone fills max_length, then rotates completions per batch
    int k = 0;
    for (int i = 0; st == ST_OK && i < out->n; i++) {
        UnpairedExample *x = &out->ex[i];
        if (cfg->max_length > 0 && x->np >= cfg->max_length) {
            free(x->prompt), free(x->completion);
            out->n_dropped++;
            continue;
        }
        out->ex[k++] = *x;
    }
    if (st == ST_OK) out->n = k;
    for (int c0 = 0; st == ST_OK && kl_batch > 0 && c0 < out->n; c0 += kl_batch) {
        int c1 = MIN(out->n, c0 + kl_batch);
        for (int i = c0; i < c1; i++) out->ex[i].kl_src = i == c0 ? c1 - 1 : i - 1;
    }
    for (int i = 0; st == ST_OK && i < out->n; i++) {
        out->n_desirable += out->ex[i].label;
        if (kl_batch > 0 && isnan(out->ex[i].ref_kl_logp)) out->has_ref = 0;
    }
    if (st == ST_OK && out->n == 0)
        st = err_set(e, ST_EINVAL, "%s: no usable example (%d rows skipped as bad, %d dropped because the prompt alone "
                                   "reaches max_length %d)", path, out->n_bad, out->n_dropped, cfg->max_length);
    if (st != ST_OK) unpaired_free(out);
    return st;
}

void unpaired_free(UnpairedSet *s) {
    for (int i = 0; i < s->n; i++) free(s->ex[i].prompt), free(s->ex[i].completion);
    free(s->ex);
    memset(s, 0, sizeof *s);
}
