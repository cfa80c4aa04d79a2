// slots.c: continuous batching on one decode plan (see slots.h).
#include "slots.h"

#include "../core/alloc.h"
#include "../core/rng.h"
#include "../model/qwen3.h"
#include "bans.h"

#include <math.h>
#include <string.h>

typedef struct Slot {
    int busy;
    GenConfig cfg;
    int seq_index;
    int len;          // real prompt tokens
    int32_t *hist;    // (len + max_new_tokens) prompt then generated ids (bans look at them)
    int *slot;        // (len + max_new_tokens) the cache slot of each id's keys and values
    int held;         // ids hist[0, held) have their keys in the row (busy or not): prefix reuse
    int32_t *mask;    // (S) the row's key mask while busy
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
    int no_reuse;     // prefix reuse off
    int ring;         // some layer keeps a ring of its last slots (a sliding window): no prefix reuse
    // host scratch
    int32_t *h_next, *h_feed, *h_pos, *h_zero, *h_ban;  // (B) x3, (S) zeros, (B * ban_cap)
    int *h_counts;    // (B)
    float *h_lp, *h_lpp;  // (B) raw and processed log-probs
    double *h_u;      // (B)
    float *h_logits;  // (V) one row's logits, for top_logprobs (allocated on first use)
};

Status gen_slots_open(Model *m, int B, int S, GenSlots **out, Err *e) {
    *out = NULL;
    if (B < 1 || S < 2) return err_set(e, ST_EINVAL, "slots: %d slots of %d cache slots: need at least 1 and 2", B, S);
    if (config_rope_long(&m->cfg, S))
        return err_set(e, ST_EUNSUPPORTED,
                       "a cache of %d slots is longer than this %s model's longrope original_max_position_embeddings "
                       "%g: beyond it transformers reruns the batch with long_factor, which continuous batching "
                       "cannot (use --max_cache_len %g or less; still generate follows it)",
                       S, m->cfg.model_type, m->cfg.rope_scaling.original_max_position_embeddings,
                       m->cfg.rope_scaling.original_max_position_embeddings);
    model_rope_select(m, 1);  // every call within the original context: the short table
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
    for (int l = 0; l < g->L; l++) g->ring |= plan_cache_slots(&m->cfg, l, S) < S;
    g->no_reuse = g->ring;
    g->slots = xcalloc((size_t)B, sizeof(Slot));
    g->h_next = xmalloc((size_t)B * 3 * sizeof(int32_t));
    g->h_feed = g->h_next + B;
    g->h_pos = g->h_feed + B;
    g->h_zero = xcalloc((size_t)S, sizeof(int32_t));
    for (int b = 0; b < B; b++) g->slots[b].mask = xcalloc((size_t)S, sizeof(int32_t));
    g->h_ban = xmalloc((size_t)B * dp->ban_cap * sizeof(int32_t));
    g->h_lp = xmalloc((size_t)B * 2 * sizeof(float));
    g->h_lpp = g->h_lp + B;
    g->h_counts = xcalloc((size_t)B, sizeof(int));
    g->h_u = xcalloc((size_t)B, sizeof(double));
    g->swap = m->be->alloc(m->be, (size_t)S * g->HD * sizeof(float));  // (S, HD) one head's row of a layer
    // every row masked: idle rows attend to nothing
    Backend *be = m->be;
    for (int b = 0; b < B; b++) be->upload(be, dp->kmask + (size_t)b * S, g->h_zero, (size_t)S * sizeof(int32_t));
    SampleParams sp = {.temperature = 1.0f, .repetition_penalty = 1.0f, .top_p = 1.0};
    for (int b = 0; b < B; b++) be->upload(be, dp->sparams + b, &sp, sizeof sp);
    *out = g;
    return ST_OK;
}

void gen_slots_close(GenSlots *g) {
    if (!g) return;
    for (int b = 0; b < g->B; b++) {
        free(g->slots[b].hist);
        free(g->slots[b].slot);
        free(g->slots[b].mask);
    }
    free(g->slots);
    free(g->h_next);
    free(g->h_zero);
    free(g->h_ban);
    free(g->h_lp);
    free(g->h_counts);
    free(g->h_u);
    free(g->h_logits);
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

void gen_slots_set_prefix_reuse(GenSlots *g, int on) { g->no_reuse = !on || g->ring; }

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

// Row b's key mask to the device: its own while busy, nothing to attend while free (an idle row
// costs no attention).
static void upload_mask(GenSlots *g, int b) {
    const Slot *sl = &g->slots[b];
    g->m->be->upload(g->m->be, g->dp->kmask + (size_t)b * g->S, sl->busy ? sl->mask : g->h_zero,
                     (size_t)g->S * sizeof(int32_t));
}

// The prompt of row b after its first k ids (whose keys the row holds) into cache slots
// [cur - P, cur), P the padded length of the rest, chunk by chunk as gen_generate's prefill, at
// positions k, k+1, ...; leaves the logits of its last token in row b. The mask: the slots of the
// ids, and every slot from cur on (the generated tokens).
static Status prefill_row(GenSlots *g, int b, int k, Err *e) {
    Model *m = g->m;
    Backend *be = m->be;
    Slot *sl = &g->slots[b];
    const GenConfig *c = &sl->cfg;
    int n = sl->len - k, first, P = gen_prefill_schedule(c, be, n, &first), base = g->cur - P, pad = P - n;
    for (int t = k; t < sl->len; t++) sl->slot[t] = base + pad + (t - k);
    memset(sl->mask, 0, (size_t)g->S * sizeof(int32_t));
    for (int t = 0; t < sl->len; t++) sl->mask[sl->slot[t]] = 1;
    for (int s = g->cur; s < g->S; s++) sl->mask[s] = 1;
    sl->held = k;  // until the prefill is through
    upload_mask(g, b);
    g->st.prefill_tokens += n;
    g->st.prefill_slots += P;
    g->st.reused_tokens += k;
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
            cids[t] = real ? sl->hist[k + s - pad] : g->pad;
            cpos[t] = real ? k + s - pad : 0;
        }
        be->upload(be, p->ids, cids, (size_t)Tc * sizeof(int32_t));
        be->upload(be, p->pos, cpos, (size_t)Tc * sizeof(int32_t));
        qwen3_cache_seek(m, g->dp, base + c0, Tc);
        qwen3_forward_cached_row(m, p, g->dp, b);
        if (c0 + Tc == P) qwen3_last_logits_row(m, p, g->dp, b);
    }
    free(cids);
    if (st == ST_OK) sl->held = sl->len;
    return st;
}

// Ids of a prompt whose keys free row b holds: the common prefix of the prompt and what the row
// holds, at most len - 1 (the last prompt token is always prefilled: its logits start the reply).
static int common_prefix(const Slot *sl, const int32_t *prompt, int len) {
    int k = 0;
    while (k < sl->held && k < len - 1 && sl->hist[k] == prompt[k]) k++;
    return k;
}

// Where the sequence's first generated token would go if it joined free row b reusing k ids
// (k = 0: afresh), or -1 when it cannot: the rest of the prompt, padded to P', must fit between
// the reused ids and cur, and max_new_tokens behind cur.
static int join_at(const GenSlots *g, const GenConfig *cfg, const Slot *sl, int len, int k) {
    int Pfull = gen_padded_len(cfg, g->m->be, len);
    int lo = k ? sl->slot[k - 1] + 1 + gen_padded_len(cfg, g->m->be, len - k) : Pfull;
    int cur = gen_slots_busy(g) ? g->cur : MAX(lo, Pfull);
    return cur >= lo && cur + cfg->max_new_tokens - 1 <= g->S ? cur : -1;
}

Status gen_slots_add(GenSlots *g, const GenConfig *cfg, int seq_index, const int32_t *prompt, int len, GenSeq *out,
                     Err *e) {
    TRY(gen_config_check(cfg, g->V, e));
    if (cfg->top_logprobs < 0 || cfg->top_logprobs > GEN_MAX_TOP_LOGPROBS || cfg->top_logprobs > g->V)
        return err_set(e, ST_EINVAL, "top_logprobs %d: expected 0..%d", cfg->top_logprobs, GEN_MAX_TOP_LOGPROBS);
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
    // the free row holding the longest prefix of the prompt, if it can take it; else a free row
    // holding nothing (rows holding something are kept for later), else the first free row
    int b = -1, k = 0, at = -1;
    for (int r = 0; r < g->B; r++) {
        const Slot *sl = &g->slots[r];
        if (sl->busy || !sl->held || g->no_reuse) continue;
        int kr = common_prefix(sl, prompt, len), cr = kr ? join_at(g, cfg, sl, len, kr) : -1;
        if (kr > k && cr >= 0) b = r, k = kr, at = cr;
    }
    for (int r = 0; r < g->B && b < 0; r++)
        if (!g->slots[r].busy && !g->slots[r].held) b = r;
    for (int r = 0; r < g->B && b < 0; r++)
        if (!g->slots[r].busy) b = r;
    if (at < 0) at = join_at(g, cfg, &g->slots[b], len, 0);
    CHECK(at >= 0);  // gen_slots_can_join said so
    g->cur = at;
    Slot *sl = &g->slots[b];
    int32_t *hist = xmalloc((size_t)(len + cfg->max_new_tokens) * sizeof(int32_t));
    int *slot = xmalloc((size_t)(len + cfg->max_new_tokens) * sizeof(int));
    memcpy(hist, prompt, (size_t)len * sizeof(int32_t));
    if (k > 0) memcpy(slot, sl->slot, (size_t)k * sizeof(int));  // the reused prefix's slots (none on a fresh slot)
    free(sl->hist);
    free(sl->slot);
    int32_t *mask = sl->mask;
    memset(sl, 0, sizeof *sl);
    sl->mask = mask;
    sl->cfg = *cfg;
    sl->seq_index = seq_index;
    sl->len = len;
    sl->hist = hist;
    sl->slot = slot;
    g->pad = cfg->pad_token_id >= 0 ? cfg->pad_token_id : (cfg->n_eos ? cfg->eos[0] : 0);
    memset(out, 0, sizeof *out);
    out->seq_index = seq_index;
    out->cached = k;
    out->ids = xmalloc((size_t)cfg->max_new_tokens * sizeof(int32_t));
    if (cfg->logprobs != GEN_LOGPROBS_NONE) out->logprobs = xmalloc((size_t)cfg->max_new_tokens * sizeof(float));
    if (cfg->top_logprobs > 0) {
        out->top_ids = xmalloc((size_t)cfg->max_new_tokens * cfg->top_logprobs * sizeof(int32_t));
        out->top_logprobs = xmalloc((size_t)cfg->max_new_tokens * cfg->top_logprobs * sizeof(float));
    }
    sl->out = out;
    sl->busy = 1;
    Status st = prefill_row(g, b, k, e);
    if (st != ST_OK) {
        sl->busy = 0;
        sl->held = 0;
        upload_mask(g, b);
        return st;
    }
    SampleParams sp = slot_params(sl);
    g->m->be->upload(g->m->be, g->dp->sparams + b, &sp, sizeof sp);
    return ST_OK;
}

// The `k` likeliest ids of row b's logits under log_softmax(logits / T) (T: the sampling
// temperature, 1 for greedy rows), most likely first (ties: the lower id), into ids / lps.
static void top_logprobs(GenSlots *g, int b, const Slot *sl, int k, int32_t *ids, float *lps) {
    Backend *be = g->m->be;
    int V = g->V;
    if (!g->h_logits) g->h_logits = xmalloc((size_t)V * sizeof(float));
    be->download(be, g->h_logits, g->dp->logits + (size_t)b * V, (size_t)V * sizeof(float));
    double T = sl->cfg.do_sample ? sl->cfg.temperature : 1.0, mx = -INFINITY, sum = 0;
    int n = 0;
    for (int v = 0; v < V; v++) {
        float x = g->h_logits[v];
        mx = MAX(mx, x / T);
        if (n < k || x > g->h_logits[ids[n - 1]]) {  // insert, keeping the k largest in order
            int at = n < k ? n++ : k - 1;
            while (at > 0 && g->h_logits[ids[at - 1]] < x) ids[at] = ids[at - 1], at--;
            ids[at] = v;
        }
    }
    for (int v = 0; v < V; v++) sum += exp(g->h_logits[v] / T - mx);
    double lse = mx + log(sum);
    for (int j = 0; j < k; j++) lps[j] = (float)(g->h_logits[ids[j]] / T - lse);
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
    for (int k = 0; k < 2; k++) {
        const Slot *sl = k ? sb : sa;
        if (sl->held) lo = MIN(lo, sl->slot[0]), hi = MAX(hi, sl->slot[sl->held - 1] + 1);
    }
    if (hi > lo) {
        const ModelConfig *cfg = &g->m->cfg;
        for (int l = 0; l < g->L; l++) {
            // layer l's cache: (B, NKV, slots, HD) at its offset; a ring of slots < S is swapped whole
            int slots = plan_cache_slots(cfg, l, g->S), s0 = slots < g->S ? 0 : lo, s1 = slots < g->S ? slots : hi;
            size_t head = (size_t)slots * g->HD, n = (size_t)(s1 - s0) * g->HD * sizeof(float);
            size_t off = plan_cache_offset(cfg, l, g->B, g->S);
            for (int kv = 0; kv < 2; kv++)
                for (int h = 0; h < g->NKV; h++) {
                    float *c = (kv ? dp->vcache : dp->kcache) + off;
                    float *ra = c + ((size_t)a * g->NKV + h) * head + (size_t)s0 * g->HD;
                    float *rb = c + ((size_t)b * g->NKV + h) * head + (size_t)s0 * g->HD;
                    be->copy(be, g->swap, ra, n);
                    be->copy(be, ra, rb, n);
                    be->copy(be, rb, g->swap, n);
                }
        }
        g->st.swapped_slots += hi - lo;
    }
    Slot t = *sa;
    *sa = *sb;
    *sb = t;
    for (int k = 0; k < 2; k++) {
        int r = k ? b : a;
        Slot *sl = &g->slots[r];
        upload_mask(g, r);
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
        if (s->top_ids)
            top_logprobs(g, b, sl, c->top_logprobs, s->top_ids + (size_t)s->n * c->top_logprobs,
                         s->top_logprobs + (size_t)s->n * c->top_logprobs);
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
            sl->busy = 0;  // the row keeps holding the keys of hist[0, held) for a later prompt
            upload_mask(g, b);
        }
        busy += sl->busy;
    }
    if (!busy) return 0;
    int nb = compact(g, busy);
    for (int b = 0; b < nb; b++) {
        Slot *sl = &g->slots[b];
        g->h_feed[b] = sl->busy ? sl->hist[sl->len + sl->out->n - 1] : g->pad;
        g->h_pos[b] = sl->busy ? sl->len + sl->out->n - 1 : 0;
        if (sl->busy) {
            sl->slot[sl->held++] = g->cur;
        } else {  // the step writes slot cur of every row it computes: what lies there and after is lost
            int h = 0;
            while (h < sl->held && sl->slot[h] < g->cur) h++;
            sl->held = h;
        }
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
