// ops_bench.c: throughput of the backend ops at the bench shapes, on one backend.
//   build/bench/ops_bench [backend=cpu] [threads=all] [matmul|attention|elementwise|ce]
// Linear layer N=2048 x C=512 -> OC=1536 (fp32 and bf16 weights, forward and backward), the
// LM head 151936 x 512 inside ce_head (512 rows, chunk 256, forward and forward+backward),
// attention B=1 T=1024 NH=16 NKV=8 HD=128 (forward and backward) and the elementwise ops.
// One line per measurement: name, best time of the repeats, and GFLOP/s or GB/s.
#include "backend/backend.h"
#include "core/alloc.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *dev_random(Backend *be, size_t n, float scale, Rng *r) {
    float *h = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = scale * (rng_uniform(r) * 2 - 1);
    float *d = be->alloc(be, n * 4);
    be->upload(be, d, h, n * 4);
    free(h);
    return d;
}

static void *dev_bf16(Backend *be, size_t n, Rng *r) {
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(0.05f * (rng_uniform(r) * 2 - 1));
    void *d = be->alloc(be, n * 2);
    be->upload(be, d, h, n * 2);
    free(h);
    return d;
}

// Best of `reps` timed runs after one warm-up.
#define TIME_BEST(reps, best, stmt)                                                                \
    do {                                                                                           \
        stmt;                                                                                      \
        be->sync(be);                                                                              \
        best = 1e30;                                                                               \
        for (int rep_ = 0; rep_ < (reps); rep_++) {                                                \
            double t0_ = now();                                                                    \
            stmt;                                                                                  \
            be->sync(be);                                                                          \
            best = fmin(best, now() - t0_);                                                        \
        }                                                                                          \
    } while (0)

static void report(const char *name, double sec, double flops, double bytes) {
    printf("%-46s %9.2f ms", name, sec * 1e3);
    if (flops > 0) printf("  %8.1f GFLOP/s", flops / sec * 1e-9);
    if (bytes > 0) printf("  %8.1f GB/s", bytes / sec * 1e-9);
    printf("\n");
    fflush(stdout);
}

static void bench_matmul(Backend *be, Rng *r) {
    int N = 2048, C = 512, OC = 1536;
    double fl = 2.0 * N * C * OC, t;
    float *inp = dev_random(be, (size_t)N * C, 1, r), *w = dev_random(be, (size_t)OC * C, 0.05f, r);
    void *wb = dev_bf16(be, (size_t)OC * C, r);
    float *out = be->alloc(be, (size_t)N * OC * 4), *dinp = be->alloc(be, (size_t)N * C * 4);
    float *dw = be->alloc(be, (size_t)OC * C * 4);
    TIME_BEST(5, t, be->matmul_forward(be, out, inp, w, DT_F32, NULL, N, C, OC));
    report("matmul fwd 2048x512->1536 f32", t, fl, 0);
    TIME_BEST(5, t, be->matmul_forward(be, out, inp, wb, DT_BF16, NULL, N, C, OC));
    report("matmul fwd 2048x512->1536 bf16", t, fl, 0);
    TIME_BEST(5, t, be->matmul_backward(be, dinp, dw, NULL, out, inp, w, DT_F32, N, C, OC));
    report("matmul bwd (dinp+dw) 2048x512->1536 f32", t, 2 * fl, 0);
    TIME_BEST(20, t, be->matmul_forward(be, out, inp, wb, DT_BF16, NULL, 1, C, OC));
    report("matmul fwd 1x512->1536 bf16 (decode)", t, 2.0 * C * OC, (double)C * OC * 2);
    TIME_BEST(20, t, be->matmul_forward(be, out, inp, w, DT_F32, NULL, 1, C, OC));
    report("matmul fwd 1x512->1536 f32 (decode)", t, 2.0 * C * OC, (double)C * OC * 4);
    be->free(be, inp), be->free(be, w), be->free(be, wb), be->free(be, out), be->free(be, dinp), be->free(be, dw);
}

static void bench_ce(Backend *be, Rng *r) {
    int N = 512, C = 512, V = 151936, chunk = 256;
    double fl = 2.0 * N * C * V, t;
    float *h = dev_random(be, (size_t)N * C, 1, r), *W = dev_random(be, (size_t)V * C, 0.05f, r);
    void *Wb = dev_bf16(be, (size_t)V * C, r);
    float *scratch = be->alloc(be, (size_t)chunk * (V + C) * 4), *loss = be->alloc(be, (size_t)N * 4);
    float *dh = be->alloc(be, (size_t)N * C * 4), *dW = be->alloc(be, (size_t)V * C * 4);
    int32_t *tg = xmalloc((size_t)N * 4);
    for (int n = 0; n < N; n++) tg[n] = (int32_t)rng_below(r, V);
    int32_t *d_tg = be->alloc(be, (size_t)N * 4);
    be->upload(be, d_tg, tg, (size_t)N * 4);
    TIME_BEST(1, t, be->ce_head(be, loss, NULL, NULL, NULL, NULL, h, W, DT_F32, d_tg, NULL, 1, scratch, chunk, N, C, V));
    report("ce_head fwd 512 rows x 151936x512 f32", t, fl, 0);
    TIME_BEST(1, t, be->ce_head(be, loss, NULL, NULL, NULL, NULL, h, Wb, DT_BF16, d_tg, NULL, 1, scratch, chunk, N, C, V));
    report("ce_head fwd 512 rows x 151936x512 bf16", t, fl, 0);
    TIME_BEST(1, t, be->ce_head(be, loss, NULL, NULL, dh, dW, h, W, DT_F32, d_tg, NULL, 1, scratch, chunk, N, C, V));
    report("ce_head fwd+bwd 512 rows x 151936x512 f32", t, 3 * fl, 0);
    be->free(be, h), be->free(be, W), be->free(be, Wb), be->free(be, scratch), be->free(be, loss);
    be->free(be, dh), be->free(be, dW), be->free(be, d_tg);
    free(tg);
}

static void bench_attention(Backend *be, Rng *r) {
    int B = 1, T = 1024, NH = 16, NKV = 8, HD = 128;
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    // causal: T(T+1)/2 score pairs, 2 HD flops each for QK^T and for PV
    double pairs = (double)B * NH * T * (T + 1) / 2, fl_fwd = pairs * 4 * HD, fl_bwd = pairs * 10 * HD, t;
    float *q = dev_random(be, nq, 1, r), *k = dev_random(be, nk, 1, r), *v = dev_random(be, nk, 1, r);
    float *out = be->alloc(be, nq * 4), *lse = be->alloc(be, (size_t)B * NH * T * 4);
    float *dq = be->alloc(be, nq * 4), *dk = be->alloc(be, nk * 4), *dv = be->alloc(be, nk * 4);
    int32_t *seg = xmalloc((size_t)B * T * 4);
    for (int i = 0; i < B * T; i++) seg[i] = 1;
    int32_t *d_seg = be->alloc(be, (size_t)B * T * 4);
    be->upload(be, d_seg, seg, (size_t)B * T * 4);
    TIME_BEST(3, t, be->attention_forward(be, out, lse, q, k, v, d_seg, B, T, NH, NKV, HD));
    report("attention fwd B1 T1024 NH16 NKV8 HD128", t, fl_fwd, 0);
    TIME_BEST(3, t, be->attention_backward(be, dq, dk, dv, q, out, lse, q, k, v, d_seg, B, T, NH, NKV, HD));
    report("attention bwd B1 T1024 NH16 NKV8 HD128", t, fl_bwd, 0);
    // the same tokens as 4 packed documents: block-diagonal, about a quarter of the work
    for (int i = 0; i < B * T; i++) seg[i] = 1 + i / 256;
    be->upload(be, d_seg, seg, (size_t)B * T * 4);
    TIME_BEST(3, t, be->attention_forward(be, out, lse, q, k, v, d_seg, B, T, NH, NKV, HD));
    report("attention fwd T1024 as 4 packed docs", t, 0, 0);
    be->free(be, q), be->free(be, k), be->free(be, v), be->free(be, out), be->free(be, lse), be->free(be, dq);
    be->free(be, dk), be->free(be, dv), be->free(be, d_seg);
    free(seg);
}

static void bench_elementwise(Backend *be, Rng *r) {
    int N = 2048, C = 512, FF = 1536;
    size_t n = (size_t)N * FF, t_n = (size_t)N * C;
    double t;
    float *a = dev_random(be, n, 3, r), *b = dev_random(be, n, 1, r), *o = be->alloc(be, n * 4);
    float *ga = be->alloc(be, n * 4), *gb = be->alloc(be, n * 4), *w = dev_random(be, C, 1, r);
    float *rstd = be->alloc(be, (size_t)N * 4);
    TIME_BEST(10, t, be->swiglu_forward(be, o, a, b, n));
    report("swiglu fwd 2048x1536", t, 0, 12.0 * n);
    TIME_BEST(10, t, be->swiglu_backward(be, ga, gb, o, a, b, n));
    report("swiglu bwd 2048x1536", t, 0, 28.0 * n);
    TIME_BEST(10, t, be->rmsnorm_forward(be, o, rstd, a, w, N, C, 1e-6f));
    report("rmsnorm fwd 2048x512", t, 0, 8.0 * t_n);
    TIME_BEST(10, t, be->rmsnorm_backward(be, ga, gb, b, a, w, rstd, N, C));
    report("rmsnorm bwd 2048x512", t, 0, 16.0 * t_n);
    int32_t *pos = xmalloc((size_t)N * 4);
    for (int i = 0; i < N; i++) pos[i] = i;
    int32_t *d_pos = be->alloc(be, (size_t)N * 4);
    be->upload(be, d_pos, pos, (size_t)N * 4);
    float *inv = dev_random(be, 64, 1, r), *x = be->alloc(be, (size_t)N * 16 * 128 * 4);
    TIME_BEST(10, t, be->rope_forward(be, x, d_pos, inv, 1.0f, N, 16, 128, 128));
    report("rope fwd 2048 rows x 16 heads x 128", t, 0, 8.0 * N * 16 * 128);
    TIME_BEST(10, t, be->adamw(be, o, ga, gb, a, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3, 1.0f));
    report("adamw 3.1M params", t, 0, 28.0 * n);
    be->free(be, a), be->free(be, b), be->free(be, o), be->free(be, ga), be->free(be, gb), be->free(be, w);
    be->free(be, rstd), be->free(be, d_pos), be->free(be, inv), be->free(be, x);
    free(pos);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    Backend *be = NULL;
    Err e = {0};
    if (backend_create(name, threads, &be, &e) != ST_OK) {
        fprintf(stderr, "ops_bench: %s\n", e.msg);
        return 1;
    }
    printf("# ops_bench backend %s, %d threads\n", be->name, be->threads);
    Rng r;
    rng_init(&r, 7, 0);
    const char *only = argc > 3 ? argv[3] : NULL;
    if (!only || !strcmp(only, "matmul")) bench_matmul(be, &r);
    if (!only || !strcmp(only, "attention")) bench_attention(be, &r);
    if (!only || !strcmp(only, "elementwise")) bench_elementwise(be, &r);
    if (!only || !strcmp(only, "ce")) bench_ce(be, &r);
    backend_destroy(be);
    return 0;
}
