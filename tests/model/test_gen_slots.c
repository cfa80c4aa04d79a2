// test_gen_slots.c: continuous batching (src/gen/slots.c) gives every sequence the tokens and
// log-probs gen_generate gives it alone — greedy and seeded sampling — while sequences of other
// lengths join and leave the other slots at other steps, across prefill-chunk boundaries and
// through slot reuse; the plan set stays bounded; can_join and add refuse what does not fit.
#include "test.h"

#include "core/alloc.h"
#include "core/rng.h"
#include "gen/slots.h"

#include <string.h>

static int32_t *make_prompt(int n, int V, uint64_t seed) {
    Rng r;
    rng_init(&r, seed, 7);
    int32_t *p = xmalloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) p[i] = 3 + (int32_t)rng_below(&r, (uint64_t)(V - 3));
    return p;
}

#define NSEQ 7

static void run(const char *backend, int do_sample, int B) {
    Err e = {0};
    Backend *be;
    EXPECT_MSG(backend_create(backend, 2, &be, &e) == ST_OK, "%s", e.msg);
    Model *m = NULL;
    EXPECT_MSG(model_load("tests/data/models/qwen3_untied", be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    int V = m->cfg.vocab_size;
    // lengths across bucket and chunk boundaries (chunk 32), new tokens of several lengths
    static const int lens[NSEQ] = {5, 40, 17, 1, 33, 9, 70}, news[NSEQ] = {12, 6, 20, 9, 3, 15, 8};
    int32_t *prompts[NSEQ];
    GenConfig cfg[NSEQ];
    GenSeq *ref[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        prompts[i] = make_prompt(lens[i], V, 100 + i);
        GenConfig *c = &cfg[i];
        gen_config_default(c);
        c->max_new_tokens = news[i];
        c->ignore_eos = 1;
        c->prefill_chunk_size = 32;
        c->do_sample = do_sample;
        c->temperature = 0.8f + 0.1f * i;
        c->top_k = i % 2 ? 0 : 40;
        c->top_p = i % 3 ? 1.0 : 0.9;
        c->seed = 1000 + (uint64_t)i;
        c->logprobs = GEN_LOGPROBS_RAW;
        c->batch_size = 1;
        c->max_cache_len = 256;
        // sequence index 1 for odd i: the draws are keyed by it
        c->num_return_sequences = 1 + (i & 1);
        GenSeq *all;
        EXPECT_MSG(gen_generate(m, c, (const int32_t *const *)&prompts[i], &lens[i], 1, &all, NULL, &e) == ST_OK, "%s",
                   e.msg);
        ref[i] = all;
        c->num_return_sequences = 1;
    }
    int plans_before = m->plans.n;
    GenSlots *g;
    EXPECT_MSG(gen_slots_open(m, B, 256, &g, &e) == ST_OK, "%s", e.msg);
    GenSeq out[NSEQ];
    memset(out, 0, sizeof out);
    int next = 0, steps = 0, max_busy = 0;
    long want_rows = 0;  // the rows the steps should have computed: the bucket of the busy slots
    while (next < NSEQ || gen_slots_busy(g)) {
        // join every other step, as many as fit
        while (next < NSEQ && steps % 2 == 0 && gen_slots_can_join(g, &cfg[next], lens[next], 1)) {
            EXPECT_MSG(gen_slots_add(g, &cfg[next], next & 1, prompts[next], lens[next], &out[next], &e) == ST_OK, "%s",
                       e.msg);
            next++;
        }
        max_busy = MAX(max_busy, gen_slots_busy(g));
        int left = gen_slots_step(g);
        if (left) want_rows += gen_slots_bucket(B, left);
        steps++;
        EXPECT(steps < 10000);
        if (steps >= 10000) break;
    }
    EXPECT_MSG(max_busy == B, "at most %d slots were busy together", max_busy);
    // decode cost follows the busy slots: each step computed the bucket of its busy rows, fewer
    // than B on some steps, and finished rows in the middle were compacted away
    GenSlotsStats st;
    gen_slots_stats(g, &st);
    EXPECT_MSG(st.decode_rows == want_rows && st.decode_rows < st.decode_steps * B && st.busy_rows <= st.decode_rows,
               "%s: %ld rows computed over %ld steps (%ld expected, %ld busy)", backend, st.decode_rows, st.decode_steps,
               want_rows, st.busy_rows);
    EXPECT_MSG(B < 4 || st.swapped_slots > 0, "%s: no row was compacted", backend);
    for (int i = 0; i < NSEQ; i++) {
        const GenSeq *r = &ref[i][i & 1];
        EXPECT_MSG(out[i].n == r->n && out[i].finish == GEN_FINISH_LENGTH, "%s seq %d: %d tokens vs %d", backend, i,
                   out[i].n, r->n);
        int same = out[i].n == r->n && !memcmp(out[i].ids, r->ids, (size_t)r->n * sizeof(int32_t));
        EXPECT_MSG(same, "%s %s: sequence %d (prompt %d tokens) differs from gen_generate alone", backend,
                   do_sample ? "sampling" : "greedy", i, lens[i]);
        if (same) {
            float worst = 0;
            for (int t = 0; t < r->n; t++) worst = MAX(worst, fabsf(out[i].logprobs[t] - r->logprobs[t]));
            EXPECT_MSG(worst == 0, "%s: sequence %d log-probs differ by %g from gen_generate alone", backend, i, worst);
        }
        free(out[i].ids);
        free(out[i].logprobs);
        gen_seqs_free(ref[i], 1 + (i & 1));
        free(prompts[i]);
    }
    // one decode plan and batch-1 prefill plans that gen_generate had already built (16, 32)
    EXPECT_MSG(m->plans.n - plans_before == 1, "%d plans built by the slots", m->plans.n - plans_before);
    gen_slots_close(g);
    model_free(m);
    backend_destroy(be);
}

static void test_greedy_cpu(void) { run("cpu", 0, 3); }
static void test_greedy_cpu_4(void) { run("cpu", 0, 4); }
static void test_sampling_cpu(void) { run("cpu", 1, 4); }
static void test_sampling_ref(void) { run("ref", 1, 4); }

static void test_refusals(void) {
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT(model_load("tests/data/models/qwen3_untied", be, DT_F32, &m, &e) == ST_OK);
    GenSlots *g;
    EXPECT(gen_slots_open(m, 1, 64, &g, &e) == ST_OK);
    GenConfig c;
    gen_config_default(&c);
    c.prefill_chunk_size = 32;
    c.max_new_tokens = 60;
    int32_t p[20] = {5, 6, 7};
    GenSeq s;
    EXPECT(!gen_slots_can_join(g, &c, 20, 1));  // 32 padded + 60 - 1 > 64
    EXPECT(gen_slots_add(g, &c, 0, p, 20, &s, &e) == ST_EINVAL && strstr(e.msg, "needs 91 cache slots"));
    c.max_new_tokens = 8;
    EXPECT(gen_slots_can_join(g, &c, 3, 1) && !gen_slots_can_join(g, &c, 3, 2));
    EXPECT(gen_slots_add(g, &c, 0, p, 3, &s, &e) == ST_OK);
    EXPECT(!gen_slots_can_join(g, &c, 3, 1));  // the one slot is busy
    EXPECT(gen_slots_add(g, &c, 0, p, 3, &s, &e) == ST_ERUNTIME);
    c.repetition_penalty = 1.3f;
    while (gen_slots_step(g)) {}
    EXPECT(s.n == 8 || s.finish == GEN_FINISH_EOS);
    EXPECT(gen_slots_add(g, &c, 0, p, 3, &s, &e) == ST_EUNSUPPORTED);
    free(s.ids);
    gen_slots_close(g);
    model_free(m);
    backend_destroy(be);
}


// gen_generate alone on one prompt (greedy or seeded sampling, raw log-probs).
static GenSeq *alone(Model *m, const GenConfig *c, const int32_t *p, int len) {
    Err e = {0};
    GenSeq *out = NULL;
    GenConfig one = *c;
    one.batch_size = 1;
    EXPECT_MSG(gen_generate(m, &one, &p, &len, 1, &out, NULL, &e) == ST_OK, "%s", e.msg);
    return out;
}

// Same tokens as alone; log-probs within 1e-4 (reused keys and values of generated tokens came
// from decode steps, not a prefill: another matmul kernel, other roundings).
static void expect_alone(Model *m, const GenConfig *c, const int32_t *p, int len, const GenSeq *got, const char *what) {
    GenSeq *r = alone(m, c, p, len);
    int same = r && got->n == r->n && !memcmp(got->ids, r->ids, (size_t)r->n * sizeof(int32_t));
    EXPECT_MSG(same, "%s: the tokens differ from gen_generate alone", what);
    if (same) {
        float worst = 0;
        for (int t = 0; t < r->n; t++) worst = MAX(worst, fabsf(got->logprobs[t] - r->logprobs[t]));
        EXPECT_MSG(worst < 1e-4f, "%s: log-probs differ by %g from gen_generate alone", what, worst);
    }
    gen_seqs_free(r, 1);
}

// Prefix reuse: a conversation's next turn (the earlier prompt, the reply, new tokens) joins the
// free row that still holds the earlier turn and prefills only what is new — while another
// sequence decodes in its own row, and again when nothing runs — with gen_generate's tokens.
static void reuse(int do_sample) {
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 2, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load("tests/data/models/qwen3_untied", be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    int V = m->cfg.vocab_size;
    GenConfig c;
    gen_config_default(&c);
    c.ignore_eos = 1;
    c.prefill_chunk_size = 32;
    c.max_cache_len = 256;
    c.logprobs = GEN_LOGPROBS_RAW;
    c.do_sample = do_sample;
    c.temperature = 0.9f;
    c.top_k = 0;
    c.seed = 77;
    GenSlots *g;
    EXPECT(gen_slots_open(m, 3, 256, &g, &e) == ST_OK);
    int32_t *pa = make_prompt(20, V, 1), *pc = make_prompt(5, V, 2), *extra = make_prompt(30, V, 3);
    GenConfig ca = c, cc = c;
    ca.max_new_tokens = 10;
    cc.max_new_tokens = 80;  // decodes through the next turn
    GenSeq sa, sb, sc, sd;
    EXPECT(gen_slots_add(g, &ca, 0, pa, 20, &sa, &e) == ST_OK);
    EXPECT(gen_slots_add(g, &cc, 0, pc, 5, &sc, &e) == ST_OK);
    while (sa.finish == GEN_FINISH_NONE) gen_slots_step(g);
    expect_alone(m, &ca, pa, 20, &sa, "turn 1");
    // turn 2: turn 1's prompt, its first 9 generated tokens (whose keys the row holds), 7 new ones
    int lb = 20 + 9 + 7;
    int32_t pb[64];
    memcpy(pb, pa, 20 * sizeof(int32_t));
    memcpy(pb + 20, sa.ids, 9 * sizeof(int32_t));
    memcpy(pb + 29, extra, 7 * sizeof(int32_t));
    GenConfig cb = c;
    cb.max_new_tokens = 12;
    for (int i = 0; i < 20; i++) gen_slots_step(g);  // room for the 16-slot rest before the shared slot
    GenSlotsStats st0, st1;
    gen_slots_stats(g, &st0);
    EXPECT(gen_slots_add(g, &cb, 0, pb, lb, &sb, &e) == ST_OK);
    gen_slots_stats(g, &st1);
    EXPECT_MSG(sb.cached == 29 && st1.prefill_tokens - st0.prefill_tokens == 7 && st1.reused_tokens - st0.reused_tokens == 29,
               "turn 2: %d tokens reused, %ld prefilled", sb.cached, st1.prefill_tokens - st0.prefill_tokens);
    EXPECT(sc.finish == GEN_FINISH_NONE);  // the other sequence was decoding meanwhile
    while (gen_slots_step(g)) {}
    expect_alone(m, &cb, pb, lb, &sb, "turn 2 (reused, another row busy)");
    expect_alone(m, &cc, pc, 5, &sc, "the other sequence");
    // turn 3 with nothing running: turn 2's prompt and reply, then 20 new tokens
    int ld = lb + 11 + 20;
    int32_t pd[128];
    memcpy(pd, pb, (size_t)lb * sizeof(int32_t));
    memcpy(pd + lb, sb.ids, 11 * sizeof(int32_t));
    memcpy(pd + lb + 11, extra + 7, 20 * sizeof(int32_t));
    GenConfig cd = c;
    cd.max_new_tokens = 9;
    gen_slots_stats(g, &st0);
    EXPECT(gen_slots_add(g, &cd, 0, pd, ld, &sd, &e) == ST_OK);
    gen_slots_stats(g, &st1);
    EXPECT_MSG(sd.cached == lb + 11 && st1.prefill_tokens - st0.prefill_tokens == 20,
               "turn 3: %d tokens reused, %ld prefilled", sd.cached, st1.prefill_tokens - st0.prefill_tokens);
    while (gen_slots_step(g)) {}
    expect_alone(m, &cd, pd, ld, &sd, "turn 3 (reused, idle)");
    // a prompt that shares nothing is prefilled whole
    GenSeq sx;
    gen_slots_stats(g, &st0);
    EXPECT(gen_slots_add(g, &cd, 0, extra, 30, &sx, &e) == ST_OK);
    gen_slots_stats(g, &st1);
    EXPECT(sx.cached == 0 && st1.prefill_tokens - st0.prefill_tokens == 30);
    while (gen_slots_step(g)) {}
    // reuse off: turn 3 again is prefilled whole, and gives gen_generate's tokens to the bit
    GenSeq sy;
    gen_slots_set_prefix_reuse(g, 0);
    EXPECT(gen_slots_add(g, &cd, 0, pd, ld, &sy, &e) == ST_OK && sy.cached == 0);
    while (gen_slots_step(g)) {}
    GenSeq *ry = alone(m, &cd, pd, ld);
    EXPECT(ry && sy.n == ry->n && !memcmp(sy.ids, ry->ids, (size_t)sy.n * sizeof(int32_t)) &&
           !memcmp(sy.logprobs, ry->logprobs, (size_t)sy.n * sizeof(float)));
    gen_seqs_free(ry, 1);
    free(sy.ids);
    free(sy.logprobs);
    GenSeq *all[] = {&sa, &sb, &sc, &sd, &sx};
    for (int i = 0; i < 5; i++) {
        free(all[i]->ids);
        free(all[i]->logprobs);
    }
    free(pa);
    free(pc);
    free(extra);
    gen_slots_close(g);
    model_free(m);
    backend_destroy(be);
}

static void test_prefix_reuse_greedy(void) { reuse(0); }
static void test_prefix_reuse_sampling(void) { reuse(1); }

int main(void) {
    RUN(test_greedy_cpu);
    RUN(test_greedy_cpu_4);
    RUN(test_sampling_cpu);
    RUN(test_sampling_ref);
    RUN(test_refusals);
    RUN(test_prefix_reuse_greedy);
    RUN(test_prefix_reuse_sampling);
    TEST_MAIN_END();
}
