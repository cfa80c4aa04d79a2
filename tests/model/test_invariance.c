// test_invariance.c: logits of a sequence do not depend on left padding in a batch, nor on being
// packed with other documents in one row (segment ids, positions reset per document).
#include "test.h"

#include "core/alloc.h"
#include "model/qwen3.h"

static Model *load(Backend **be) {
    Err e = {0};
    EXPECT(backend_create("cpu", 2, be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load("tests/data/models/qwen3_untied", *be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    return m;
}

// Logits (n, V) of one unpadded sequence.
static float *solo(Model *m, const int32_t *ids, int n) {
    Err e = {0};
    Plan *p;
    EXPECT(plan_get(m, PLAN_SCORE, 1, n, &p, &e) == ST_OK);
    int32_t pos[64], seg[64];
    for (int t = 0; t < n; t++) pos[t] = t, seg[t] = 1;
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    int V = m->cfg.vocab_size;
    float *dev = m->be->alloc(m->be, (size_t)n * V * 4), *out = xmalloc((size_t)n * V * 4);
    qwen3_logits(m, p, 0, n, dev);
    m->be->download(m->be, out, dev, (size_t)n * V * 4);
    m->be->free(m->be, dev);
    return out;
}

// Norm-wise relative difference: padding or packing may change the summation order of the
// fp32 kernels (a different GEMM blocking), never the result beyond rounding.
static double max_rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / fmax(den, 1e-30));
}

static const int32_t A[] = {5, 17, 300, 42, 42, 7, 250, 99, 1};             // 9 tokens
static const int32_t Bseq[] = {383, 64, 128, 12, 77, 200, 3, 150, 260, 31, 8, 9, 10, 11};  // 14 tokens

static void test_left_padding(void) {
    Backend *be;
    Model *m = load(&be);
    if (!m) return;
    int V = m->cfg.vocab_size, na = 9, nb = 14, T = 16;
    float *la = solo(m, A, na), *lb = solo(m, Bseq, nb);
    Err e = {0};
    Plan *p;
    EXPECT(plan_get(m, PLAN_SCORE, 2, T, &p, &e) == ST_OK);
    int32_t ids[32] = {0}, pos[32] = {0}, seg[32] = {0};
    for (int t = 0; t < T; t++) {  // row 0: A left-padded; row 1: B left-padded
        int ra = t - (T - na), rb = t - (T - nb);
        ids[t] = ra >= 0 ? A[ra] : 151 % V, pos[t] = ra >= 0 ? ra : 1, seg[t] = ra >= 0;
        ids[T + t] = rb >= 0 ? Bseq[rb] : 0, pos[T + t] = rb >= 0 ? rb : 1, seg[T + t] = rb >= 0;
    }
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    float *dev = be->alloc(be, (size_t)2 * T * V * 4), *out = xmalloc((size_t)2 * T * V * 4);
    qwen3_logits(m, p, 0, 2 * T, dev);
    be->download(be, out, dev, (size_t)2 * T * V * 4);
    double ea = max_rel(out + (size_t)(T - na) * V, la, (size_t)na * V);
    double eb = max_rel(out + (size_t)(2 * T - nb) * V, lb, (size_t)nb * V);
    EXPECT_MSG(ea < 1e-5 && eb < 1e-5, "left padding changed logits: %.3g %.3g", ea, eb);
    free(la), free(lb), free(out);
    be->free(be, dev);
    model_free(m);
    backend_destroy(be);
}

static void test_packing(void) {
    Backend *be;
    Model *m = load(&be);
    if (!m) return;
    int V = m->cfg.vocab_size, na = 9, nb = 14, T = 24;
    float *la = solo(m, A, na), *lb = solo(m, Bseq, nb);
    Err e = {0};
    Plan *p;
    EXPECT(plan_get(m, PLAN_SCORE, 1, T, &p, &e) == ST_OK);
    int32_t ids[24] = {0}, pos[24] = {0}, seg[24] = {0};
    for (int t = 0; t < na; t++) ids[t] = A[t], pos[t] = t, seg[t] = 1;
    for (int t = 0; t < nb; t++) ids[na + t] = Bseq[t], pos[na + t] = t, seg[na + t] = 2;
    // the last slot is padding
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    float *dev = be->alloc(be, (size_t)T * V * 4), *out = xmalloc((size_t)T * V * 4);
    qwen3_logits(m, p, 0, T, dev);
    be->download(be, out, dev, (size_t)T * V * 4);
    double ea = max_rel(out, la, (size_t)na * V), eb = max_rel(out + (size_t)na * V, lb, (size_t)nb * V);
    EXPECT_MSG(ea < 1e-5 && eb < 1e-5, "packing changed logits: %.3g %.3g", ea, eb);
    // and the documents really do interact when not separated (the mask is what keeps them apart)
    for (int t = 0; t < na + nb; t++) seg[t] = 1;
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    qwen3_logits(m, p, 0, T, dev);
    be->download(be, out, dev, (size_t)T * V * 4);
    EXPECT(max_rel(out + (size_t)na * V, lb, (size_t)nb * V) > 1e-2);
    free(la), free(lb), free(out);
    be->free(be, dev);
    model_free(m);
    backend_destroy(be);
}

int main(void) {
    RUN(test_left_padding);
    RUN(test_packing);
    TEST_MAIN_END();
}
