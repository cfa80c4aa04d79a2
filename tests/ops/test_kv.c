// test_kv.c: the KV cache / decode ops. The reference cached attention is held to the reference
// training attention (a whole left-padded prompt at start 0 is the same computation) and to
// itself chunk by chunk; every other backend is held to the reference on awkward shapes (GQA,
// HD not a multiple of a vector, T = 1 decode, chunks that start mid-cache, holes in the key
// mask, rows that are all padding, head dims above and off any tile), with guard words after every
// output. The cuda backend takes part when the build has it and the machine has a GPU (skipped
// with the reason otherwise); the KV ops use no GEMM, so one run covers both STILL_CUDA_GEMM modes.
#include "ops_util.h"

#define GUARD 16
#define GUARD_VAL 12345.678f

static const char *other_backends[] = {"cpu", "cuda"};

// Host buffer of n floats plus guards: contents are copied to a device buffer with guards.
static float *dev_with_guard(Backend *be, const float *host, size_t n) {
    float *d = be->alloc(be, (n + GUARD) * sizeof(float));
    float *tmp = xmalloc((n + GUARD) * sizeof(float));
    if (host) memcpy(tmp, host, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++) tmp[i] = NAN;
    for (int g = 0; g < GUARD; g++) tmp[n + g] = GUARD_VAL;
    be->upload(be, d, tmp, (n + GUARD) * sizeof(float));
    free(tmp);
    return d;
}

// Download n floats and check the guards.
static float *fetch(Backend *be, const float *d, size_t n, const char *what) {
    float *h = xmalloc((n + GUARD) * sizeof(float));
    be->download(be, h, d, (n + GUARD) * sizeof(float));
    int ok = 1;
    for (int g = 0; g < GUARD; g++) ok &= h[n + g] == GUARD_VAL;
    EXPECT_MSG(ok, "%s on %s wrote past its output", what, be->name);
    return h;
}

static double max_err(const float *a, const float *b, size_t n, double *maxref) {
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        e = fmax(e, fabs((double)a[i] - b[i]));
        r = fmax(r, fabs((double)b[i]));
    }
    if (maxref) *maxref = r;
    return e;
}

// Cached attention over a whole left-padded prompt at start 0 equals the training attention with
// segment ids 1 for real tokens and 0 for pads.
static void test_ref_cached_equals_training_attention(void) {
    Backend *be = backend_ref_create(1);
    int B = 3, T = 11, NH = 4, NKV = 2, HD = 6, S = 16;
    int32_t zero_slot = 0;
    int pads[3] = {0, 4, 10};
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD, nc = (size_t)B * NKV * S * HD;
    float *q = new_normal(nq, 1), *k = new_normal(nk, 1), *v = new_normal(nk, 1);
    float *kc = xcalloc(nc, 4), *vc = xcalloc(nc, 4), *o1 = xmalloc(nq * 4), *o2 = xmalloc(nq * 4);
    float *lse = xmalloc((size_t)B * NH * T * 4);
    int32_t seg[3 * 11], kmask[3 * 16];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) seg[b * T + t] = t >= pads[b];
        for (int s = 0; s < S; s++) kmask[b * S + s] = s >= pads[b];
    }
    be->attention_forward(be, o1, lse, q, k, v, seg, B, T, NH, NKV, HD);
    be->kv_cache_write(be, kc, vc, k, v, &zero_slot, B, T, NKV, HD, S);
    be->attention_cached(be, o2, q, kc, vc, kmask, &zero_slot, B, T, NH, NKV, HD, S);
    double err = max_err(o2, o1, nq, NULL);
    EXPECT_MSG(err < 1e-6, "cached vs training attention: max error %.3g", err);
    free(q), free(k), free(v), free(kc), free(vc), free(o1), free(o2), free(lse);
    backend_destroy(be);
}

// Chunk by chunk (write, then attend at start) equals one pass; decode steps (T = 1) included.
// Slots never written hold NaN: a correct op never reads them.
static void test_ref_chunks_equal_one_pass(void) {
    Backend *be = backend_ref_create(1);
    int B = 2, T = 13, NH = 6, NKV = 3, HD = 5, S = 20;
    int32_t zero_slot = 0;
    int pads[2] = {3, 0};
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD, nc = (size_t)B * NKV * S * HD;
    float *q = new_normal(nq, 1), *k = new_normal(nk, 1), *v = new_normal(nk, 1);
    float *kc = xmalloc(nc * 4), *vc = xmalloc(nc * 4), *o1 = xmalloc(nq * 4), *o2 = xmalloc(nq * 4);
    int32_t kmask[2 * 20];
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) kmask[b * S + s] = s >= pads[b];
    for (size_t i = 0; i < nc; i++) kc[i] = vc[i] = NAN;
    be->kv_cache_write(be, kc, vc, k, v, &zero_slot, B, T, NKV, HD, S);
    be->attention_cached(be, o1, q, kc, vc, kmask, &zero_slot, B, T, NH, NKV, HD, S);
    for (size_t i = 0; i < nc; i++) kc[i] = vc[i] = NAN;
    int cuts[] = {0, 5, 9, 12, 13};  // chunks of 5, 4, 3 then one decode step
    for (int c = 0; c + 1 < 5; c++) {
        int32_t t0 = cuts[c];
        int tn = cuts[c + 1] - t0;
        size_t qs = (size_t)NH * HD, ks = (size_t)NKV * HD;
        float *qc = xmalloc((size_t)B * tn * qs * 4), *kk = xmalloc((size_t)B * tn * ks * 4),
              *vv = xmalloc((size_t)B * tn * ks * 4), *oc = xmalloc((size_t)B * tn * qs * 4);
        for (int b = 0; b < B; b++) {
            memcpy(qc + (size_t)b * tn * qs, q + ((size_t)b * T + t0) * qs, (size_t)tn * qs * 4);
            memcpy(kk + (size_t)b * tn * ks, k + ((size_t)b * T + t0) * ks, (size_t)tn * ks * 4);
            memcpy(vv + (size_t)b * tn * ks, v + ((size_t)b * T + t0) * ks, (size_t)tn * ks * 4);
        }
        be->kv_cache_write(be, kc, vc, kk, vv, &t0, B, tn, NKV, HD, S);
        be->attention_cached(be, oc, qc, kc, vc, kmask, &t0, B, tn, NH, NKV, HD, S);
        for (int b = 0; b < B; b++) memcpy(o2 + ((size_t)b * T + t0) * qs, oc + (size_t)b * tn * qs, (size_t)tn * qs * 4);
        free(qc), free(kk), free(vv), free(oc);
    }
    double err = max_err(o2, o1, nq, NULL);
    EXPECT_MSG(err == 0, "chunked vs one pass: max error %.3g (the same double sums expected)", err);
    // padding queries are exactly 0
    int zero = 1;
    for (int t = 0; t < pads[0]; t++)
        for (int i = 0; i < NH * HD; i++) zero &= o1[(size_t)t * NH * HD + i] == 0.0f;
    EXPECT_MSG(zero, "padding queries must give 0");
    free(q), free(k), free(v), free(kc), free(vc), free(o1), free(o2);
    backend_destroy(be);
}

typedef struct {
    int B, T, NH, NKV, HD, S, start;
    int mask_kind;  // 0: left padding per row, 1: random holes, 2: a row with every key masked
} KvCase;

static void check_case(Backend *R, Backend *X, const KvCase *c) {
    int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD, S = c->S;
    int32_t start = c->start;
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD, nc = (size_t)B * NKV * S * HD;
    float *q = new_normal(nq, 1.5f), *k = new_normal(nk, 1.5f), *v = new_normal(nk, 1);
    float *kc0 = new_normal(nc, 1), *vc0 = new_normal(nc, 1);  // earlier cache contents
    int32_t *kmask = xmalloc((size_t)B * S * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        int pad = (int)rng_below(&ops_rng, (uint64_t)(start + T));
        for (int s = 0; s < S; s++) {
            int on = s >= pad;
            if (c->mask_kind == 1) on = rng_uniform(&ops_rng) < 0.7f;
            if (c->mask_kind == 2 && b == B - 1) on = 0;
            kmask[(size_t)b * S + s] = on;
        }
    }
    // reference
    float *rkc = new_copy(kc0, nc), *rvc = new_copy(vc0, nc), *ro = xmalloc(nq * 4);
    R->kv_cache_write(R, rkc, rvc, k, v, &start, B, T, NKV, HD, S);
    R->attention_cached(R, ro, q, rkc, rvc, kmask, &start, B, T, NH, NKV, HD, S);
    // backend under test
    float *dq = dev_with_guard(X, q, nq), *dk = dev_with_guard(X, k, nk), *dv = dev_with_guard(X, v, nk);
    float *dkc = dev_with_guard(X, kc0, nc), *dvc = dev_with_guard(X, vc0, nc), *dout = dev_with_guard(X, NULL, nq);
    int32_t *dmask = X->alloc(X, (size_t)B * S * sizeof(int32_t));
    X->upload(X, dmask, kmask, (size_t)B * S * sizeof(int32_t));
    int32_t *dstart = X->alloc(X, sizeof(int32_t));
    X->upload(X, dstart, &start, sizeof(int32_t));
    X->kv_cache_write(X, dkc, dvc, dk, dv, dstart, B, T, NKV, HD, S);
    X->attention_cached(X, dout, dq, dkc, dvc, dmask, dstart, B, T, NH, NKV, HD, S);
    char what[160];
    snprintf(what, sizeof what, "B=%d T=%d NH=%d NKV=%d HD=%d S=%d start=%d mask=%d", B, T, NH, NKV, HD, S, start,
             c->mask_kind);
    float *xkc = fetch(X, dkc, nc, "kv_cache_write"), *xvc = fetch(X, dvc, nc, "kv_cache_write");
    EXPECT_MSG(!memcmp(xkc, rkc, nc * 4) && !memcmp(xvc, rvc, nc * 4), "kv_cache_write differs from ref: %s", what);
    float *xo = fetch(X, dout, nq, "attention_cached");
    double maxref = 0, err = max_err(xo, ro, nq, &maxref);
    EXPECT_MSG(err <= 2e-5 * fmax(maxref, 1e-3), "attention_cached on %s: %s: error %.3g (max |ref| %.3g)", X->name,
               what, err, maxref);
    if (c->mask_kind == 2) {  // the fully masked row is exactly 0
        int zero = 1;
        for (size_t i = (size_t)(B - 1) * T * NH * HD; i < nq; i++) zero &= xo[i] == 0.0f;
        EXPECT_MSG(zero, "a row with every key masked must give 0: %s", what);
    }
    free(q), free(k), free(v), free(kc0), free(vc0), free(kmask), free(rkc), free(rvc), free(ro);
    free(xkc), free(xvc), free(xo);
    X->free(X, dq), X->free(X, dk), X->free(X, dv), X->free(X, dkc), X->free(X, dvc), X->free(X, dout);
    X->free(X, dmask), X->free(X, dstart);
}

static void test_backends_against_ref(void) {
    static const KvCase cases[] = {
        {1, 1, 4, 2, 8, 9, 8, 0},       // decode at the last slot
        {3, 1, 6, 2, 10, 40, 17, 0},    // decode, batch, GQA 3
        {2, 7, 4, 4, 16, 30, 0, 0},     // prefill from 0
        {2, 70, 8, 2, 12, 200, 64, 0},  // a chunk mid-cache, more than one query block
        {2, 5, 4, 1, 7, 12, 3, 1},      // holes in the mask, MQA
        {3, 130, 2, 1, 16, 300, 100, 2},  // a fully masked row
        {1, 1, 2, 2, 128, 1024, 1000, 0},  // Qwen3 head size, long cache
        {2, 3, 4, 2, 200, 300, 150, 1},    // head dim above one block of threads, holes
    };
    Backend *R = backend_ref_create(1);
    for (size_t bi = 0; bi < sizeof other_backends / sizeof *other_backends; bi++) {
        Backend *X;
        Err e = {0};
        if (backend_create(other_backends[bi], 2, &X, &e) != ST_OK) {
            printf("skip kv_%s: %s\n", other_backends[bi], e.msg);
            continue;
        }
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(R, X, &cases[i]);
        backend_destroy(X);
    }
    backend_destroy(R);
}

int main(void) {
    rng_init(&ops_rng, 11, 0);
    RUN(test_ref_cached_equals_training_attention);
    RUN(test_ref_chunks_equal_one_pass);
    RUN(test_backends_against_ref);
    TEST_MAIN_END();
}
