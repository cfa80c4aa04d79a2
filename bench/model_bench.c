// model_bench.c: forward tokens/s and forward+backward step time of a model config at B x T on
// the CPU backend, beside the OpenBLAS sgemm rate measured in the same process.
//   build/bench/model_bench CONFIG.json B T [repeats]
// Prints one JSON object on stdout.
#include "core/alloc.h"
#include "core/rng.h"
#include "model/qwen3.h"

#ifdef STILL_OPENBLAS
#include <cblas.h>
#endif
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// GFLOP/s of out (M,N) = A (M,K) B^T (N,K), the layout of every linear layer.
static double sgemm_rate(int M, int N, int K) {
#ifdef STILL_OPENBLAS
    float *a = xaligned((size_t)M * K * 4), *b = xaligned((size_t)N * K * 4), *c = xaligned((size_t)M * N * 4);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        best = fmin(best, now() - t0);
    }
    free(a), free(b), free(c);
    return 2.0 * M * N * K / best / 1e9;
#else
    (void)M, (void)N, (void)K;
    return 0;
#endif
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: model_bench CONFIG.json B T [repeats]\n");
        return 2;
    }
    int B = atoi(argv[2]), T = atoi(argv[3]), reps = argc > 4 ? atoi(argv[4]) : 3;
    Err e = {0};
    ModelConfig cfg;
    if (config_load(argv[1], &cfg, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    Backend *be;
    if (backend_create("cpu", 0, &be, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    Model *m;
    model_create_random(&cfg, be, 1, &m, &e);
    model_alloc_grads(m);
    int N = B * T;
    int32_t *ids = xmalloc(N * 4), *pos = xmalloc(N * 4), *seg = xmalloc(N * 4), *tgt = xmalloc(N * 4);
    Rng rng;
    rng_init(&rng, 7, 0);
    for (int i = 0; i < N; i++) ids[i] = (int32_t)rng_below(&rng, (uint64_t)cfg.vocab_size);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            pos[b * T + t] = t;
            seg[b * T + t] = 1;
            tgt[b * T + t] = t + 1 < T ? ids[b * T + t + 1] : IGNORE_INDEX;
        }
    Plan *ps, *pt;
    plan_get(m, PLAN_SCORE, B, T, &ps, &e);
    plan_get(m, PLAN_TRAIN, B, T, &pt, &e);
    qwen3_set_inputs(m, ps, ids, pos, seg, tgt, NULL);
    qwen3_set_inputs(m, pt, ids, pos, seg, tgt, NULL);
    // forward + loss head (no backward): the inference-side cost, logits over every position
    double fwd = 1e30, step = 1e30, body = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        double t0 = now();
        qwen3_forward(m, ps);
        be->sync(be);
        double t1 = now();
        qwen3_ce_loss(m, ps, 1.0f / N, 0);
        be->sync(be);
        if (r > 0) fwd = fmin(fwd, now() - t0), body = fmin(body, t1 - t0);
    }
    for (int r = 0; r < reps + 1; r++) {
        be->zero(be, m->grads, m->tt.n_params * 4);
        double t0 = now();
        qwen3_forward(m, pt);
        qwen3_ce_loss(m, pt, 1.0f / N, 1);
        be->sync(be);
        if (r > 0) step = fmin(step, now() - t0);
    }
    double flops = qwen3_forward_flops(&cfg, B, T);
    int C = cfg.hidden_size;
    double g_mlp = sgemm_rate(N, cfg.intermediate_size, C), g_head = sgemm_rate(256, cfg.vocab_size, C);
    printf("{\"params\": %zu, \"B\": %d, \"T\": %d, \"threads\": %d, \"forward_s\": %.4f, \"forward_tok_s\": %.1f, "
           "\"forward_body_s\": %.4f, \"step_s\": %.4f, \"step_tok_s\": %.1f, \"forward_gflops\": %.2f, \"step_gflops\": %.2f, "
           "\"sgemm_mlp_gflops\": %.2f, \"sgemm_head_gflops\": %.2f}\n",
           m->tt.n_params, B, T, omp_get_max_threads(), fwd, N / fwd, body, step, N / step, flops / fwd / 1e9,
           3 * flops / step / 1e9, g_mlp, g_head);
    free(ids), free(pos), free(seg), free(tgt);
    model_free(m);
    backend_destroy(be);
    return 0;
}
