// test_generate.c: the generation engine on the static KV cache.
//  - greedy tokens equal the argmax of a full recomputation without a cache (the score path),
//    token for token, across prefill-chunk boundaries and with left padding in a batch;
//  - log-probs equal log_softmax of the recomputed logits;
//  - a row's output does not depend on the other rows of its batch (greedy and sampling);
//  - the plan bound (chunk / granule prefill plans + one decode plan) holds and max_plans trips;
//  - prefill buckets (pad_to_multiple_of 0): a short prompt computes one small chunk, the same
//    greedy tokens as recomputation, and one plan per bucket at most;
//  - EOS, min_new_tokens, the stop callback, ignore_eos and pad filling.
#include "test.h"

#include "core/alloc.h"
#include "core/rng.h"
#include "gen/generate.h"
#include "model/qwen3.h"

static Model *load(const char *backend, Backend **be) {
    Err e = {0};
    EXPECT_MSG(backend_create(backend, 2, be, &e) == ST_OK, "%s", e.msg);
    Model *m = NULL;
    EXPECT_MSG(model_load("tests/data/models/qwen3_untied", *be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    return m;
}

static void unload(Model *m, Backend *be) {
    model_free(m);
    backend_destroy(be);
}

// n pseudo-random prompt ids in [3, V) from a seed.
static int32_t *make_prompt(int n, int V, uint64_t seed) {
    Rng r;
    rng_init(&r, seed, 7);
    int32_t *p = xmalloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) p[i] = 3 + (int32_t)rng_below(&r, (uint64_t)(V - 3));
    return p;
}

// Logits (n, V) of one unpadded sequence through the score path (no cache).
static float *recompute(Model *m, const int32_t *ids, int n) {
    Err e = {0};
    Plan *p;
    int saved = m->plans.max_plans;
    m->plans.max_plans = 0;
    EXPECT(plan_get(m, PLAN_SCORE, 1, n, &p, &e) == ST_OK);
    m->plans.max_plans = saved;
    int32_t *pos = xmalloc((size_t)n * 4), *seg = xmalloc((size_t)n * 4);
    for (int t = 0; t < n; t++) pos[t] = t, seg[t] = 1;
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    int V = m->cfg.vocab_size;
    float *dev = m->be->alloc(m->be, (size_t)n * V * 4), *out = xmalloc((size_t)n * V * 4);
    qwen3_logits(m, p, 0, n, dev);
    m->be->download(m->be, out, dev, (size_t)n * V * 4);
    m->be->free(m->be, dev);
    free(pos), free(seg);
    return out;
}

// Check a greedy completion against recomputation: every token is the argmax of the recomputed
// logits at its position (a disagreement is allowed only on a near-tie, < 1e-4 apart), and
// raw log-probs (when given) match log_softmax of the recomputed logits.
static void check_against_recompute(Model *m, const int32_t *prompt, int len, const GenSeq *s, const char *what) {
    int V = m->cfg.vocab_size, n = len + s->n - 1;
    int32_t *full = xmalloc((size_t)(len + s->n) * 4);
    memcpy(full, prompt, (size_t)len * 4);
    memcpy(full + len, s->ids, (size_t)s->n * 4);
    float *lg = recompute(m, full, n);
    int bad = 0, first_bad = -1;
    double worst_lp = 0;
    for (int i = 0; i < s->n; i++) {
        const float *row = lg + (size_t)(len - 1 + i) * V;
        int am = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[am]) am = v;
        if (am != s->ids[i] && row[am] - row[s->ids[i]] > 1e-4) {
            bad++;
            if (first_bad < 0) first_bad = i;
        }
        if (s->logprobs) {
            double mx = row[am], z = 0;
            for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
            double lp = row[s->ids[i]] - mx - log(z);
            worst_lp = fmax(worst_lp, fabs(lp - s->logprobs[i]));
        }
    }
    EXPECT_MSG(bad == 0, "%s: %d of %d greedy tokens differ from the recomputed argmax (first at %d)", what, bad, s->n,
               first_bad);
    EXPECT_MSG(worst_lp < 1e-4, "%s: log-probs differ from recomputed log_softmax by %.3g", what, worst_lp);
    free(full), free(lg);
}

static void greedy_config(GenConfig *c, int max_new, int pad, int chunk) {
    gen_config_default(c);
    c->max_new_tokens = max_new;
    c->pad_to_multiple_of = pad;
    c->prefill_chunk_size = chunk;
    c->ignore_eos = 1;
    c->logprobs = GEN_LOGPROBS_RAW;
}

// Greedy on the cache == argmax of recomputation, for a left-padded batch whose prompts cross
// several prefill chunks, with two padding granules.
static void test_greedy_matches_recompute(void) {
    Backend *be;
    Model *m = load("cpu", &be);
    if (!m) return;
    int V = m->cfg.vocab_size;
    int lens[4] = {5, 131, 300, 64};
    int32_t *prompts[4];
    for (int i = 0; i < 4; i++) prompts[i] = make_prompt(lens[i], V, 100 + i);
    int grid[2][2] = {{128, 128}, {8, 24}};  // (pad_to_multiple_of, prefill_chunk_size)
    for (int g = 0; g < 2; g++) {
        GenConfig c;
        greedy_config(&c, 40, grid[g][0], grid[g][1]);
        c.batch_size = 4;
        GenSeq *out;
        GenStats st;
        Err e = {0};
        EXPECT_MSG(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 4, &out, &st, &e) == ST_OK, "%s", e.msg);
        if (!out) continue;
        for (int i = 0; i < 4; i++) {
            char what[64];
            snprintf(what, sizeof what, "pad %d chunk %d prompt %d (len %d)", grid[g][0], grid[g][1], i, lens[i]);
            EXPECT_MSG(out[i].n == 40 && out[i].finish == GEN_FINISH_LENGTH, "%s: %d tokens, finish %s", what, out[i].n,
                       gen_finish_name(out[i].finish));
            check_against_recompute(m, prompts[i], lens[i], &out[i], what);
        }
        EXPECT(st.prefill_slots == 4L * (g == 0 ? 384 : 304));
        gen_seqs_free(out, 4);
    }
    for (int i = 0; i < 4; i++) free(prompts[i]);
    unload(m, be);
}

// Where row b (of another batch size) first parts from row a (batch size 1), or -1; the log-probs
// along the shared prefix differ by at most *lp_diff.
static int first_divergence(const GenSeq *a, const GenSeq *b, double *lp_diff) {
    int n = a->n < b->n ? a->n : b->n, i = 0;
    *lp_diff = 0;
    for (; i < n && a->ids[i] == b->ids[i]; i++) *lp_diff = fmax(*lp_diff, fabs((double)a->logprobs[i] - b->logprobs[i]));
    return i == n && a->n == b->n ? -1 : i;
}

// The gap between the logits of the two tokens rows a and b chose at position i, recomputed
// after a's first i tokens.
static double choice_gap(Model *m, const int32_t *prompt, int len, const GenSeq *a, const GenSeq *b, int i) {
    int V = m->cfg.vocab_size;
    int32_t *full = xmalloc((size_t)(len + i) * 4);
    memcpy(full, prompt, (size_t)len * 4);
    memcpy(full + len, a->ids, (size_t)i * 4);
    float *lg = recompute(m, full, len + i);
    const float *row = lg + (size_t)(len + i - 1) * V;
    double gap = i < a->n && i < b->n ? fabs((double)row[a->ids[i]] - row[b->ids[i]]) : INFINITY;
    free(full), free(lg);
    return gap;
}

// The same prompts with batch_size 1, 2 and 3 (so other neighbours and other padding): every
// completion is the same. On ref (double accumulation in a fixed order) tokens and log-probs are
// bit-identical. On cpu another batch shape may change the GEMM's blocking and kernel (OpenBLAS
// picks them by shape, differently per -march), so the logits move by rounding (~1e-6): the
// log-probs must agree to 1e-4 along the shared prefix, a greedy row may part from batch_size 1's
// only where the two choices' recomputed logits are within 1e-4 (a near-tie rounding can flip),
// and a sampled row only where its draw fell within rounding of the boundary between two tokens'
// masses (~1e-6 per draw): at most one of the ten rows. A row that saw another row's data, or a
// draw keyed by the row's place in the batch, changes from its first tokens in most rows.
static void independence(const char *backend, int do_sample) {
    Backend *be;
    Model *m = load(backend, &be);
    if (!m) return;
    int V = m->cfg.vocab_size;
    int lens[5] = {7, 40, 19, 3, 26};
    int32_t *prompts[5];
    for (int i = 0; i < 5; i++) prompts[i] = make_prompt(lens[i], V, 200 + i);
    GenSeq *outs[3] = {0};
    int nrs = do_sample ? 2 : 1, sizes[3] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        GenConfig c;
        greedy_config(&c, 12, 16, 16);
        c.batch_size = sizes[k];
        c.num_return_sequences = nrs;
        if (do_sample) {
            c.do_sample = 1;
            c.temperature = 1.3f;
            c.top_k = 40;
            c.top_p = 0.9;
            c.seed = 5;
            c.repetition_penalty = 1.2f;
            c.no_repeat_ngram_size = 2;
        }
        Err e = {0};
        EXPECT_MSG(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 5, &outs[k], NULL, &e) == ST_OK, "%s",
                   e.msg);
    }
    int exact = !strcmp(backend, "ref");
    const char *mode = do_sample ? "sampling" : "greedy";
    int differ_seq = 0;
    for (int k = 1; k < 3 && outs[0] && outs[k]; k++) {
        int parted = 0;
        for (int r = 0; r < 5 * nrs; r++) {
            GenSeq *a = &outs[0][r], *b = &outs[k][r];
            if (exact) {
                EXPECT_MSG(a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * 4) &&
                               !memcmp(a->logprobs, b->logprobs, (size_t)a->n * 4),
                           "%s %s: row %d not bit-identical between batch_size 1 and %d", backend, mode, r, sizes[k]);
                continue;
            }
            double lp_diff;
            int i = first_divergence(a, b, &lp_diff);
            EXPECT_MSG(lp_diff <= 1e-4, "%s %s: row %d log-probs differ by %.3g between batch_size 1 and %d", backend,
                       mode, r, lp_diff, sizes[k]);
            if (i < 0) continue;
            parted++;
            if (!do_sample) {
                double gap = choice_gap(m, prompts[r / nrs], lens[r / nrs], a, b, i);
                EXPECT_MSG(gap <= 1e-4, "%s greedy: row %d parts at token %d between batch_size 1 and %d, logit gap %.3g "
                           "(not a near-tie)", backend, r, i, sizes[k], gap);
            }
        }
        if (do_sample)
            EXPECT_MSG(parted <= 1, "%s sampling: %d of %d rows differ between batch_size 1 and %d", backend, parted,
                       5 * nrs, sizes[k]);
    }
    if (do_sample && outs[0])  // sequences of one prompt are different draws
        for (int i = 0; i < 5; i++) differ_seq += memcmp(outs[0][2 * i].ids, outs[0][2 * i + 1].ids, 12 * 4) != 0;
    if (do_sample) EXPECT_MSG(differ_seq >= 3, "only %d of 5 prompts got two different samples", differ_seq);
    for (int k = 0; k < 3; k++) gen_seqs_free(outs[k], 5 * nrs);
    for (int i = 0; i < 5; i++) free(prompts[i]);
    unload(m, be);
}

static void test_independent_of_batch_greedy_cpu(void) { independence("cpu", 0); }
static void test_independent_of_batch_sampling_cpu(void) { independence("cpu", 1); }
static void test_independent_of_batch_ref_exact(void) { independence("ref", 1); }

// Prompts of four padded lengths at batch size 1: prefill plans for 128, 256, 384, 512 and one
// decode plan: chunk/granule + 1 = 5. The same run under max_plans 4 fails naming the limit.
static void test_plan_bound_and_max_plans(void) {
    Backend *be;
    Model *m = load("cpu", &be);
    if (!m) return;
    int V = m->cfg.vocab_size;
    int lens[4] = {100, 300, 700, 1000};
    int32_t *prompts[4];
    for (int i = 0; i < 4; i++) prompts[i] = make_prompt(lens[i], V, 300 + i);
    GenConfig c;
    greedy_config(&c, 3, 128, 512);
    c.batch_size = 1;
    GenSeq *out = NULL;
    GenStats st;
    Err e = {0};
    EXPECT_MSG(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 4, &out, &st, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(st.plans_built == 5 && st.plans_built <= 512 / 128 + 1, "built %d plans", st.plans_built);
    EXPECT(st.max_cache_len == 1152 && st.batches == 4);
    gen_seqs_free(out, 4);
    // a second call with the same shapes builds nothing
    EXPECT(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 4, &out, &st, &e) == ST_OK);
    EXPECT_MSG(st.plans_built == 0, "second call built %d plans", st.plans_built);
    gen_seqs_free(out, 4);
    unload(m, be);

    m = load("cpu", &be);
    if (!m) return;
    m->plans.max_plans = 4;
    out = NULL;
    Status s = gen_generate(m, &c, (const int32_t *const *)prompts, lens, 4, &out, &st, &e);
    EXPECT(s != ST_OK && out == NULL);
    EXPECT_STR_CONTAINS(e.msg, "max_plans is 4");
    for (int i = 0; i < 4; i++) free(prompts[i]);
    unload(m, be);
}


// Prefill buckets: the same left-padded batch under the cpu backend's buckets (16, 32, 64, 128
// at chunk 128) gives the recomputed greedy tokens; the batch is padded to the bucket that holds
// what the full chunks leave (longest 300 = 2 x 128 + 44 -> 64 + 256 slots).
static void test_buckets_match_recompute(void) {
    Backend *be;
    Model *m = load("cpu", &be);
    if (!m) return;
    int V = m->cfg.vocab_size;
    int lens[4] = {5, 131, 300, 64};
    int32_t *prompts[4];
    for (int i = 0; i < 4; i++) prompts[i] = make_prompt(lens[i], V, 100 + i);
    EXPECT(be->prefill_bucket == 16);
    for (int bs = 1; bs <= 4; bs += 3) {
        GenConfig c;
        greedy_config(&c, 30, 0, 128);
        c.batch_size = bs;
        GenSeq *out;
        GenStats st;
        Err e = {0};
        EXPECT_MSG(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 4, &out, &st, &e) == ST_OK, "%s", e.msg);
        if (!out) continue;
        for (int i = 0; i < 4; i++) {
            char what[64];
            snprintf(what, sizeof what, "buckets, batch %d, prompt %d (len %d)", bs, i, lens[i]);
            check_against_recompute(m, prompts[i], lens[i], &out[i], what);
        }
        // batch 1: 5 -> 16, 131 -> 16 + 128, 300 -> 64 + 256, 64 -> 64; batch 4: 4 x (64 + 256)
        long want = bs == 1 ? 16 + 144 + 320 + 64 : 4L * 320;
        EXPECT_MSG(st.prefill_slots == want, "batch %d: %ld prefill slots, expected %ld", bs, st.prefill_slots, want);
        gen_seqs_free(out, 4);
    }
    for (int i = 0; i < 4; i++) free(prompts[i]);
    unload(m, be);
}

// A 5-token prompt computes 16 slots; prompts of many lengths at batch size 1 build at most
// one prefill plan per bucket (16 .. 512: 6) plus the decode plan, and max_plans still trips;
// pad_to_multiple_of 128 forces one 128-slot shape instead.
static void test_bucket_plans(void) {
    Backend *be;
    Model *m = load("cpu", &be);
    if (!m) return;
    int V = m->cfg.vocab_size;
    enum { NP = 9 };
    int lens[NP] = {5, 16, 17, 40, 100, 300, 700, 1000, 9};
    int32_t *prompts[NP];
    for (int i = 0; i < NP; i++) prompts[i] = make_prompt(lens[i], V, 400 + i);
    GenConfig c;
    greedy_config(&c, 3, 0, 512);
    c.batch_size = 1;
    GenSeq *out = NULL;
    GenStats st;
    Err e = {0};
    EXPECT_MSG(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 1, &out, &st, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(st.prefill_slots == 16, "a 5-token prompt ran %ld prefill slots", st.prefill_slots);
    gen_seqs_free(out, 1);
    EXPECT_MSG(gen_generate(m, &c, (const int32_t *const *)prompts, lens, NP, &out, &st, &e) == ST_OK, "%s", e.msg);
    // 16 16 32 64 128 512 256+512 512+512 16 -> prefill shapes 16 32 64 128 256 512
    long want = 16 + 16 + 32 + 64 + 128 + 512 + 768 + 1024 + 16;
    EXPECT_MSG(st.prefill_slots == want, "%ld prefill slots, expected %ld", st.prefill_slots, want);
    EXPECT_MSG(m->plans.n <= 6 + 2, "%d plans after two calls", m->plans.n);
    int prefill = 0;
    for (int i = 0; i < m->plans.n; i++) prefill += m->plans.plans[i]->mode == PLAN_PREFILL;
    EXPECT_MSG(prefill == 6, "%d prefill plans, expected one per bucket (6)", prefill);
    gen_seqs_free(out, NP);
    unload(m, be);

    m = load("cpu", &be);
    if (!m) return;
    m->plans.max_plans = 4;
    out = NULL;
    Status s = gen_generate(m, &c, (const int32_t *const *)prompts, lens, NP, &out, &st, &e);
    EXPECT(s != ST_OK && out == NULL);
    EXPECT_STR_CONTAINS(e.msg, "max_plans is 4");
    m->plans.max_plans = 0;
    greedy_config(&c, 3, 128, 512);
    c.batch_size = 1;
    EXPECT_MSG(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 1, &out, &st, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(st.prefill_slots == 128, "pad_to_multiple_of 128: %ld prefill slots", st.prefill_slots);
    gen_seqs_free(out, 1);
    for (int i = 0; i < NP; i++) free(prompts[i]);
    unload(m, be);
}

typedef struct {
    int32_t stop_id;
    int calls;
} StopCtx;

static int stop_at(void *user, int prompt_index, int seq_index, int32_t id, float lp) {
    StopCtx *s = user;
    s->calls++;
    return prompt_index == 1 && id == s->stop_id;
}

// EOS ends a row (EOS included), the others go on; min_new_tokens delays it; ignore_eos ignores
// it; the callback stops a row.
static void test_eos_min_new_tokens_and_stop(void) {
    Backend *be;
    Model *m = load("cpu", &be);
    if (!m) return;
    int V = m->cfg.vocab_size;
    int lens[2] = {9, 30};
    int32_t *prompts[2] = {make_prompt(9, V, 400), make_prompt(30, V, 401)};
    GenConfig c;
    greedy_config(&c, 16, 16, 32);
    GenSeq *ref = NULL, *out = NULL;
    Err e = {0};
    EXPECT(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 2, &ref, NULL, &e) == ST_OK);
    if (!ref) return;
    // EOS = row 0's 6th token; it first appears at k <= 5
    int32_t eos = ref[0].ids[5];
    int k = 0;
    while (ref[0].ids[k] != eos) k++;
    c.ignore_eos = 0;
    c.n_eos = 0;
    gen_config_add_eos(&c, 1, &e);  // never produced here
    gen_config_add_eos(&c, eos, &e);
    EXPECT(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 2, &out, NULL, &e) == ST_OK);
    if (out) {
        EXPECT_MSG(out[0].n == k + 1 && out[0].finish == GEN_FINISH_EOS && out[0].ids[k] == eos,
                   "row 0: %d tokens, finish %s (EOS expected at %d)", out[0].n, gen_finish_name(out[0].finish), k);
        int n1 = 0;  // row 1 is unaffected until its own EOS
        while (n1 < 16 && ref[1].ids[n1] != eos) n1++;
        EXPECT(out[1].n == MIN(n1 + 1, 16) && !memcmp(out[1].ids, ref[1].ids, (size_t)out[1].n * 4));
        gen_seqs_free(out, 2);
    }
    // min_new_tokens past the EOS: EOS banned until then
    c.min_new_tokens = k + 3;
    EXPECT(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 2, &out, NULL, &e) == ST_OK);
    if (out) {
        int early = 0;
        for (int i = 0; i < out[0].n && i < k + 3; i++) early |= out[0].ids[i] == eos;
        EXPECT_MSG(!early && out[0].n >= k + 3, "min_new_tokens: EOS within the first %d tokens (n=%d)", k + 3,
                   out[0].n);
        gen_seqs_free(out, 2);
    }
    // stop callback on row 1 at its 4th token
    c.min_new_tokens = 0;
    c.n_eos = 0;
    StopCtx sc = {.stop_id = ref[1].ids[3]};
    int first = 0;
    while (ref[1].ids[first] != sc.stop_id) first++;
    c.on_token = stop_at;
    c.user = &sc;
    EXPECT(gen_generate(m, &c, (const int32_t *const *)prompts, lens, 2, &out, NULL, &e) == ST_OK);
    if (out) {
        EXPECT(out[1].finish == GEN_FINISH_STOP && out[1].n == first + 1);
        EXPECT(out[0].finish == GEN_FINISH_LENGTH && out[0].n == 16);
        EXPECT(sc.calls == 16 + first + 1);
        gen_seqs_free(out, 2);
    }
    gen_seqs_free(ref, 2);
    free(prompts[0]), free(prompts[1]);
    unload(m, be);
}

// Errors name what is wrong.
static void test_errors(void) {
    Backend *be;
    Model *m = load("ref", &be);
    if (!m) return;
    int32_t p[3] = {1, 2, 999};
    const int32_t *pp[1] = {p};
    int len = 3;
    GenConfig c;
    greedy_config(&c, 4, 128, 512);
    GenSeq *out;
    Err e = {0};
    EXPECT(gen_generate(m, &c, pp, &len, 1, &out, NULL, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "token id 999 at position 2");
    p[2] = 3;
    c.max_cache_len = 130;
    c.max_new_tokens = 10;
    EXPECT(gen_generate(m, &c, pp, &len, 1, &out, NULL, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "max_cache_len is 130");
    c.max_cache_len = 0;
    c.prefill_chunk_size = 200;
    EXPECT(gen_generate(m, &c, pp, &len, 1, &out, NULL, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "multiple of pad_to_multiple_of 128");
    c.prefill_chunk_size = 128;
    c.do_sample = 1;
    c.temperature = 0;
    EXPECT(gen_generate(m, &c, pp, &len, 1, &out, NULL, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "temperature");
    unload(m, be);
}

int main(void) {
    RUN(test_greedy_matches_recompute);
    RUN(test_independent_of_batch_greedy_cpu);
    RUN(test_independent_of_batch_sampling_cpu);
    RUN(test_independent_of_batch_ref_exact);
    RUN(test_plan_bound_and_max_plans);
    RUN(test_buckets_match_recompute);
    RUN(test_bucket_plans);
    RUN(test_eos_min_new_tokens_and_stop);
    RUN(test_errors);
    TEST_MAIN_END();
}
