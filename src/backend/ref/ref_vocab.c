// ref_vocab.c: the vocabulary-shard ops (backend.h) as the spec: the masked embedding in plain
// loops, the row statistics and gradients of vocab_math.h one row at a time.
#include "../vocab_math.h"
#include "ref.h"

// ids (N), wte (V,C) rows [lo, lo + V) -> out (N,C)
static void ref_embedding_forward_part(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N,
                                       int C, int lo, int V) {
    (void)be;
    for (int n = 0; n < N; n++) {
        int64_t r = (int64_t)ids[n] - lo;
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = r >= 0 && r < V ? ref_wload(wte, wdt, (size_t)r * C + c) : 0.0f;
    }
}

static void ref_embedding_backward_part(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C,
                                        int lo, int V) {
    (void)be;
    for (int n = 0; n < N; n++) {
        int64_t r = (int64_t)ids[n] - lo;
        if (r < 0 || r >= V) continue;
        float *d = dwte + (size_t)r * C;
        for (int c = 0; c < C; c++) d[c] = (float)((double)d[c] + dout[(size_t)n * C + c]);
    }
}

static int row_target(const int32_t *targets, int r, int lo) { return targets ? targets[r] - lo : -1; }

static void ref_vocab_stats(Backend *be, float *stats, const float *z, const int32_t *targets, float tau, int lo, int M,
                            int V) {
    (void)be;
    for (int r = 0; r < M; r++)
        vocab_row_stats(stats + (size_t)r * VOCAB_STATS, z + (size_t)r * V, V, row_target(targets, r, lo), tau, lo);
}

static void ref_vocab_grad(Backend *be, float *z, const int32_t *targets, const float *rows, float tau, float softcap,
                           int lo, int M, int V) {
    (void)be;
    for (int r = 0; r < M; r++) {
        const float *w = rows + (size_t)r * VOCAB_ROW;
        vocab_row_grad(z + (size_t)r * V, V, row_target(targets, r, lo), tau, w[VR_LSE], w[VR_COEF], softcap);
    }
}

static void ref_vocab_jsd(Backend *be, float *part, const float *zs, const float *zt, const float *rows, float tau,
                          float beta, int M, int V) {
    (void)be;
    for (int r = 0; r < M; r++) {
        const float *w = rows + (size_t)r * VOCAB_ROW;
        double L = 0, K = 0;
        vocab_row_jsd(&L, &K, zs + (size_t)r * V, zt + (size_t)r * V, V, tau, beta, w[VR_LSE], w[VR_LSE_T]);
        part[2 * (size_t)r] = (float)L;
        part[2 * (size_t)r + 1] = (float)K;
    }
}

static void ref_vocab_jsd_grad(Backend *be, float *zs, const float *zt, const float *rows, float tau, float beta,
                               float softcap, int M, int V) {
    (void)be;
    for (int r = 0; r < M; r++) {
        const float *w = rows + (size_t)r * VOCAB_ROW;
        vocab_row_jsd_grad(zs + (size_t)r * V, zt + (size_t)r * V, V, tau, beta, w[VR_LSE], w[VR_LSE_T], w[VR_L],
                           w[VR_K], w[VR_COEF], softcap);
    }
}

void backend_ref_install_vocab(Backend *be) {
    be->embedding_forward_part = ref_embedding_forward_part;
    be->embedding_backward_part = ref_embedding_backward_part;
    be->vocab_stats = ref_vocab_stats;
    be->vocab_grad = ref_vocab_grad;
    be->vocab_jsd = ref_vocab_jsd;
    be->vocab_jsd_grad = ref_vocab_jsd_grad;
}
