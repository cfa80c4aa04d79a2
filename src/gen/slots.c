// slots.c: continuous batching on one decode plan (see slots.h).
#include "slots.h"

#include "../core/alloc.h"
#include "../core/rng.h"
#include "../model/qwen3.h"
#include "bans.h"

#include <string.h>

typedef struct Slot {
    int busy;
    GenConfig cfg;
    int seq_index;
    int len;          // real prompt tokens
    int32_t *hist;    // (len + max_new_tokens) prompt then generated ids (bans look at them)
    int first, end;   // the row's keys lie in cache slots [first, end) (none: first = end = 0)
    GenSeq *out;
} Slot;

struct GenSlots {
    Model *m;
    Plan *dp;
    int B, S, V;
    int cur;          // the cache slot the next decode step writes
    Slot *slots;      // (B) busy slots always lie in rows [0, bucket(busy)) before a decode step
    int32_t pad;
    int NKV, HD, L;
    GenSlotsStats st;
    float *swap;      // (S, HD) device scratch of swap_rows
    // host scratch
    int32_t *h_next, *h_feed, *h_pos, *h_mask, *h_ban;  // (B) x3, (S), (B * ban_cap)
    int *h_counts;    // (B)
    float *h_lp, *h_lpp;  // (B) raw and processed log-probs
    double *h_u;      // (B)
};

Status gen_slots_open(Model *m, int B, int S, GenSlots **out, Err *e) {
    *out = NULL;
    if (B < 1 || S < 2) return err_set(e, ST_EINVAL, "slots: %d slots of %d cache slots: need at least 1 and 2", B, S);
    Plan *dp;
    TRY(plan_get_shape(m, PLAN_DECODE, B, 1, S, &dp, e));
    GenSlots *g = xcalloc(1, sizeof *g);
    g->m = m;
    g->dp = dp;
    g->B = B;
    g->S = S;
    g->V = m->cfg.vocab_size;
    g->NKV = m->cfg.num_key_value_heads;
    g->HD = m->cfg.head_dim;
    g->L = m->cfg.num_hidden_layers;
    g->slots = xcalloc((size_t)B, sizeof(Slot));
    g->h_next = xmalloc((size_t)B * 3 * sizeof(int32_t));
    g->h_feed = g->h_next + B;
    g->h_pos = g->h_feed + B;
    g->h_mask = xcalloc((size_t)S, sizeof(int32_t));
    g->h_ban = xmalloc((size_t)B * dp->ban_cap * sizeof(int32_t));
    g->h_lp = xmalloc((size_t)B * 2 * sizeof(float));
    g->h_lpp = g->h_lp + B;
    g->h_counts = xcalloc((size_t)B, sizeof(int));
    g->h_u = xcalloc((size_t)B, sizeof(double));
    g->swap = m->be->alloc(m->be, (size_t)S * g->HD * sizeof(float));  // (S, HD) one head's row of a layer
    // every row masked: idle rows attend to nothing
    Backend *be = m->be;
    for (int b = 0; b < B; b++) be->upload(be, dp->kmask + (size_t)b * S, g->h_mask, (size_t)S * sizeof(int32_t));
    SampleParams sp = {.temperature = 1.0f, .repetition_penalty = 1.0f, .top_p = 1.0};
    for (int b = 0; b < B; b++) be->upload(be, dp->sparams + b, &sp, sizeof sp);
    *out = g;
    return ST_OK;
}

void gen_slots_close(GenSlots *g) {
    if (!g) return;
    for (int b = 0; b < g->B; b++) free(g->slots[b].hist);
    free(g->slots);
    free(g->h_next);
    free(g->h_mask);
    free(g->h_ban);
    free(g->h_lp);
    free(g->h_counts);
    free(g->h_u);
    g->m->be->free(g->m->be, g->swap);
    free(g);
}

int gen_slots_busy(const GenSlots *g) {
    int n = 0;
    for (int b = 0; b < g->B; b++) n += g->slots[b].busy;
    return n;
}

int gen_slots_size(const GenSlots *g) { return g->B; }

void gen_slots_stats(const GenSlots *g, GenSlotsStats *out) { *out = g->st; }

int gen_slots_bucket(int B, int busy) {
    int n = 1;
    while (n < busy) n *= 2;
    return MIN(n, B);
}

// The cache slot the sequence's first generated token would be written to if it joined now.
static int join_cur(const GenSlots *g, int P) { return gen_slots_busy(g) ? g->cur : P; }

int gen_slots_can_join(const GenSlots *g, const GenConfig *cfg, int len, int k) {
    if (g->B - gen_slots_busy(g) < k) return 0;
    int P = gen_padded_len(cfg, g->m->be, len), cur = join_cur(g, P);
    return cur >= P && cur + cfg->max_new_tokens - 1 <= g->S;
}

// The sampler's parameters of a slot (an idle one: greedy).
static SampleParams slot_params(const Slot *sl) {
    SampleParams sp = {.temperature = 1.0f, .repetition_penalty = 1.0f, .top_p = 1.0};
    if (sl->busy && sl->cfg.do_sample) {
        sp.do_sample = 1;
        sp.temperature = sl->cfg.temperature;
        sp.top_k = sl->cfg.top_k;
        sp.top_p = sl->cfg.top_p;
        sp.min_p = sl->cfg.min_p;
    }
    return sp;
}

static void set_mask(GenSlots *g, int b, int from) {
    for (int s = 0; s < g->S; s++) g->h_mask[s] = s >= from;
    g->m->be->upload(g->m->be, g->dp->kmask + (size_t)b * g->S, g->h_mask, (size_t)g->S * sizeof(int32_t));
}

// The row's padded prompt into cache slots [cur - P, cur) of row b, chunk by chunk as
// gen_generate's prefill; leaves the logits of its last token in row b.
static Status prefill_row(GenSlots *g, int b, const Slot *sl, Err *e) {
    Model *m = g->m;
    Backend *be = m->be;
    const GenConfig *c = &sl->cfg;
    int first, P = gen_prefill_schedule(c, be, sl->len, &first), base = g->cur - P, pad = P - sl->len;
    set_mask(g, b, base + pad);
    g->slots[b].first = base + pad;
    g->slots[b].end = g->cur;
    g->st.prefill_tokens += sl->len;
    g->st.prefill_slots += P;
    int chunk = MAX(c->prefill_chunk_size, first);
    int32_t *cids = xmalloc((size_t)MIN(chunk, P) * 2 * sizeof(int32_t)), *cpos = cids + MIN(chunk, P);
    Status st = ST_OK;
    for (int c0 = 0; c0 < P && st == ST_OK; c0 += c0 ? c->prefill_chunk_size : first) {
        int Tc = c0 ? c->prefill_chunk_size : first;
        Plan *p;
        st = plan_get_shape(m, PLAN_PREFILL, 1, Tc, 0, &p, e);
        if (st != ST_OK) break;
        for (int t = 0; t < Tc; t++) {
            int s = c0 + t, real = s >= pad;
            cids[t] = real ? sl->hist[s - pad] : g->pad;
            cpos[t] = real ? s - pad : 0;
        }
        be->upload(be, p->ids, cids, (size_t)Tc * sizeof(int32_t));
        be->upload(be, p->pos, cpos, (size_t)Tc * sizeof(int32_t));
        qwen3_cache_seek(m, g->dp, base + c0, Tc);
        qwen3_forward_cached_row(m, p, g->dp, b);
        if (c0 + Tc == P) qwen3_last_logits_row(m, p, g->dp, b);
    }
    free(cids);
    return st;
}

Status gen_slots_add(GenSlots *g, const GenConfig *cfg, int seq_index, const int32_t *prompt, int len, GenSeq *out,
                     Err *e) {
    TRY(gen_config_check(cfg, g->V, e));
    if (cfg->repetition_penalty != 1.0f)
        return err_set(e, ST_EUNSUPPORTED, "repetition_penalty %g: not served by continuous batching (1 = off)",
                       cfg->repetition_penalty);
    if (len < 1) return err_set(e, ST_EINVAL, "the prompt is empty");
    for (int t = 0; t < len; t++)
        if (prompt[t] < 0 || prompt[t] >= g->V)
            return err_set(e, ST_EINVAL, "token id %d at position %d is outside the vocabulary [0, %d)", prompt[t], t,
                           g->V);
    int P = gen_padded_len(cfg, g->m->be, len);
    if (P + cfg->max_new_tokens - 1 > g->S)
        return err_set(e, ST_EINVAL, "the prompt padded to %d + max_new_tokens %d - 1 needs %d cache slots; there are %d",
                       P, cfg->max_new_tokens, P + cfg->max_new_tokens - 1, g->S);
    if (!gen_slots_can_join(g, cfg, len, 1)) return err_set(e, ST_ERUNTIME, "no slot free for this sequence now");
    int b = 0;
    while (g->slots[b].busy) b++;
    if (!gen_slots_busy(g)) g->cur = P;
    Slot *sl = &g->slots[b];
    free(sl->hist);
    memset(sl, 0, sizeof *sl);
    sl->cfg = *cfg;
    sl->seq_index = seq_index;
    sl->len = len;
    sl->hist = xmalloc((size_t)(len + cfg->max_new_tokens) * sizeof(int32_t));
    memcpy(sl->hist, prompt, (size_t)len * sizeof(int32_t));
    g->pad = cfg->pad_token_id >= 0 ? cfg->pad_token_id : (cfg->n_eos ? cfg->eos[0] : 0);
    memset(out, 0, sizeof *out);
    out->seq_index = seq_index;
    out->ids = xmalloc((size_t)cfg->max_new_tokens * sizeof(int32_t));
    if (cfg->logprobs != GEN_LOGPROBS_NONE) out->logprobs = xmalloc((size_t)cfg->max_new_tokens * sizeof(float));
    sl->out = out;
    Status st = prefill_row(g, b, sl, e);
    if (st != ST_OK) {
        set_mask(g, b, g->S);
        return st;
    }
    sl->busy = 1;
    SampleParams sp = slot_params(sl);
    g->m->be->upload(g->m->be, g->dp->sparams + b, &sp, sizeof sp);
    return ST_OK;
}

// The slot's bans for this step (gen_generate's row_bans).
static int slot_bans(const Slot *sl, int32_t *out, int cap) {
    const GenConfig *c = &sl->cfg;
    int n = 0, cur = sl->len + sl->out->n;
    bans_no_repeat_ngram(out, cap, &n, sl->hist, cur, c->no_repeat_ngram_size);
    if (c->bad_words && c->n_bad_words)
        bans_bad_words(out, cap, &n, sl->hist, cur, c->bad_words, c->bad_words_off, c->n_bad_words, c->eos, c->n_eos);
    else if (!c->bad_words && c->n_cfg_bad_words)
        bans_bad_words(out, cap, &n, sl->hist, cur, c->cfg_bad_words, c->cfg_bad_words_off, c->n_cfg_bad_words, c->eos,
                       c->n_eos);
    bans_min_tokens(out, cap, &n, cur, sl->len, c->min_new_tokens > 0 ? 0 : c->min_length, c->min_new_tokens, c->eos,
                    c->n_eos);
    bans_suppress(out, cap, &n, c->suppress, c->n_suppress);
    if (sl->out->n == 0) bans_suppress(out, cap, &n, c->begin_suppress, c->n_begin_suppress);
    return MIN(n, cap);
}

// Swap rows a and b: their cache keys and values over the slots either uses, their key masks,
// sampler parameters and slot state (the decode step then runs over fewer rows).
static void swap_rows(GenSlots *g, int a, int b) {
    Backend *be = g->m->be;
    Plan *dp = g->dp;
    Slot *sa = &g->slots[a], *sb = &g->slots[b];
    int lo = g->S, hi = 0;
    if (sa->end > sa->first) lo = MIN(lo, sa->first), hi = MAX(hi, sa->end);
    if (sb->end > sb->first) lo = MIN(lo, sb->first), hi = MAX(hi, sb->end);
    if (hi > lo) {
        size_t head = (size_t)g->S * g->HD, n = (size_t)(hi - lo) * g->HD * sizeof(float);
        for (int kv = 0; kv < 2; kv++)
            for (int l = 0; l < g->L; l++)
                for (int h = 0; h < g->NKV; h++) {
                    float *c = kv ? dp->vcache : dp->kcache;
                    float *ra = c + (((size_t)l * g->B + a) * g->NKV + h) * head + (size_t)lo * g->HD;
                    float *rb = c + (((size_t)l * g->B + b) * g->NKV + h) * head + (size_t)lo * g->HD;
                    be->copy(be, g->swap, ra, n);
                    be->copy(be, ra, rb, n);
                    be->copy(be, rb, g->swap, n);
                }
        g->st.swapped_slots += hi - lo;
    }
    Slot t = *sa;
    *sa = *sb;
    *sb = t;
    for (int k = 0; k < 2; k++) {
        int r = k ? b : a;
        Slot *sl = &g->slots[r];
        set_mask(g, r, sl->busy ? sl->first : g->S);
        SampleParams sp = slot_params(sl);
        be->upload(be, dp->sparams + r, &sp, sizeof sp);
    }
}

// Busy rows into [0, bucket(busy)) (the lowest free rows take the highest busy ones).
static int compact(GenSlots *g, int busy) {
    int nb = gen_slots_bucket(g->B, busy);
    for (int hi = g->B - 1; hi >= nb; hi--) {
        if (!g->slots[hi].busy) continue;
        int lo = 0;
        while (g->slots[lo].busy) lo++;
        CHECK(lo < nb);
        swap_rows(g, lo, hi);
    }
    return nb;
}

int gen_slots_step(GenSlots *g) {
    Model *m = g->m;
    Backend *be = m->be;
    Plan *dp = g->dp;
    int cap = dp->ban_cap, K = 0, want_raw = 0, want_proc = 0, B = 0;
    if (!gen_slots_busy(g)) return 0;
    for (int b = 0; b < g->B; b++)
        if (g->slots[b].busy) B = b + 1;  // rows with logits to draw from: [0, B)
    int *counts = g->h_counts;
    for (int b = 0; b < B; b++) {
        Slot *sl = &g->slots[b];
        counts[b] = sl->busy ? slot_bans(sl, g->h_ban + (size_t)b * cap, cap) : 0;
        K = MAX(K, counts[b]);
        g->h_u[b] = sl->busy && sl->cfg.do_sample
                        ? rng_keyed_uniform(sl->cfg.seed, 0, (uint32_t)sl->seq_index, (uint32_t)sl->out->n, 0)
                        : 0.0;
        want_raw |= sl->busy && sl->cfg.logprobs == GEN_LOGPROBS_RAW;
        want_proc |= sl->busy && sl->cfg.logprobs == GEN_LOGPROBS_PROCESSED;
    }
    if (K > 0) {
        int32_t *packed = g->h_ban;
        for (int b = 0; b < B; b++) {
            memmove(packed + (size_t)b * K, g->h_ban + (size_t)b * cap, (size_t)counts[b] * sizeof(int32_t));
            for (int j = counts[b]; j < K; j++) packed[(size_t)b * K + j] = -1;
        }
        be->upload(be, dp->banned, packed, (size_t)B * K * sizeof(int32_t));
    }
    be->upload(be, dp->u, g->h_u, (size_t)B * sizeof(double));
    be->sample_logits(be, dp->ids, want_proc ? dp->logprob : NULL, want_raw ? dp->logprob_raw : NULL, dp->scores,
                      dp->logits, dp->sparams, dp->u, NULL, K ? dp->banned : NULL, K, B, g->V);
    be->download(be, g->h_next, dp->ids, (size_t)B * sizeof(int32_t));
    if (want_raw) be->download(be, g->h_lp, dp->logprob_raw, (size_t)B * sizeof(float));
    if (want_proc) be->download(be, g->h_lpp, dp->logprob, (size_t)B * sizeof(float));
    int busy = 0;
    for (int b = 0; b < B; b++) {
        Slot *sl = &g->slots[b];
        if (!sl->busy) continue;
        const GenConfig *c = &sl->cfg;
        GenSeq *s = sl->out;
        int32_t id = g->h_next[b];
        float lp = c->logprobs == GEN_LOGPROBS_RAW ? g->h_lp[b] : c->logprobs == GEN_LOGPROBS_PROCESSED ? g->h_lpp[b] : 0.0f;
        s->ids[s->n] = id;
        if (s->logprobs) s->logprobs[s->n] = lp;
        sl->hist[sl->len + s->n] = id;
        s->n++;
        int is_eos = 0;
        for (int i = 0; i < c->n_eos && !c->ignore_eos; i++) is_eos |= id == c->eos[i];
        int stop = c->on_token ? c->on_token(c->user, 0, sl->seq_index, id, lp) : 0;
        if (is_eos) s->finish = GEN_FINISH_EOS;
        else if (stop) s->finish = GEN_FINISH_STOP;
        else if (s->n >= c->max_new_tokens || (c->max_length > 0 && sl->len + s->n >= c->max_length))
            s->finish = GEN_FINISH_LENGTH;
        if (s->finish != GEN_FINISH_NONE) {
            sl->busy = 0;
            set_mask(g, b, g->S);  // nothing to attend: an idle row costs no attention
        }
        busy += sl->busy;
    }
    if (!busy) return 0;
    int nb = compact(g, busy);
    for (int b = 0; b < nb; b++) {
        Slot *sl = &g->slots[b];
        g->h_feed[b] = sl->busy ? sl->hist[sl->len + sl->out->n - 1] : g->pad;
        g->h_pos[b] = sl->busy ? sl->len + sl->out->n - 1 : 0;
        if (sl->busy) sl->end = g->cur + 1;
        else if (sl->end > g->cur) sl->end = MAX(sl->first, g->cur);  // the step writes slot cur of every row
    }
    be->upload(be, dp->ids, g->h_feed, (size_t)nb * sizeof(int32_t));
    be->upload(be, dp->pos, g->h_pos, (size_t)nb * sizeof(int32_t));
    qwen3_cache_seek(m, dp, g->cur, 1);
    qwen3_decode_step_rows(m, dp, nb);
    g->cur++;
    g->st.decode_steps++;
    g->st.decode_rows += nb;
    g->st.busy_rows += busy;
    return busy;
}
