// cpu_vocab.c: the vocabulary-shard ops (backend.h) on the CPU: rows in parallel over the
// threads with the arithmetic of vocab_math.h (the same as backend/ref); the embedding's
// backward by column ranges, rows in order (repeated ids add in a fixed order).
#include "../vocab_math.h"
#include "cpu.h"

#define PAR_MIN 16384  // below this many elements a parallel region costs more than it saves

static void cpu_embedding_forward_part(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N,
                                       int C, int lo, int V) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        int64_t r = (int64_t)ids[n] - lo;
        if (r >= 0 && r < V) cpu_convert_f32(out + (size_t)n * C, wte, wdt, (size_t)r * C, (size_t)C);
        else memset(out + (size_t)n * C, 0, (size_t)C * sizeof(float));
    }
}

static void cpu_embedding_backward_part(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C,
                                        int lo, int V) {
    int parts = (size_t)N * C > PAR_MIN ? MIN(be->threads, C) : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        size_t c0 = (size_t)C * part / parts, c1 = (size_t)C * (part + 1) / parts;
        for (int n = 0; n < N; n++) {
            int64_t r = (int64_t)ids[n] - lo;
            if (r < 0 || r >= V) continue;
            float *d = dwte + (size_t)r * C;
            const float *g = dout + (size_t)n * C;
            for (size_t c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

static int row_target(const int32_t *targets, int r, int lo) { return targets ? targets[r] - lo : -1; }

static void cpu_vocab_stats(Backend *be, float *stats, const float *z, const int32_t *targets, float tau, int lo, int M,
                            int V) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (M > 1)
    for (int r = 0; r < M; r++)
        vocab_row_stats(stats + (size_t)r * VOCAB_STATS, z + (size_t)r * V, V, row_target(targets, r, lo), tau, lo);
}

static void cpu_vocab_grad(Backend *be, float *z, const int32_t *targets, const float *rows, float tau, float softcap,
                           int lo, int M, int V) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (M > 1)
    for (int r = 0; r < M; r++) {
        const float *w = rows + (size_t)r * VOCAB_ROW;
        vocab_row_grad(z + (size_t)r * V, V, row_target(targets, r, lo), tau, w[VR_LSE], w[VR_COEF], softcap);
    }
}

static void cpu_vocab_jsd(Backend *be, float *part, const float *zs, const float *zt, const float *rows, float tau,
                          float beta, int M, int V) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (M > 1)
    for (int r = 0; r < M; r++) {
        const float *w = rows + (size_t)r * VOCAB_ROW;
        double L = 0, K = 0;
        vocab_row_jsd(&L, &K, zs + (size_t)r * V, zt + (size_t)r * V, V, tau, beta, w[VR_LSE], w[VR_LSE_T]);
        part[2 * (size_t)r] = (float)L;
        part[2 * (size_t)r + 1] = (float)K;
    }
}

static void cpu_vocab_jsd_grad(Backend *be, float *zs, const float *zt, const float *rows, float tau, float beta,
                               float softcap, int M, int V) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (M > 1)
    for (int r = 0; r < M; r++) {
        const float *w = rows + (size_t)r * VOCAB_ROW;
        vocab_row_jsd_grad(zs + (size_t)r * V, zt + (size_t)r * V, V, tau, beta, w[VR_LSE], w[VR_LSE_T], w[VR_L],
                           w[VR_K], w[VR_COEF], softcap);
    }
}

void backend_cpu_install_vocab(Backend *be) {
    be->embedding_forward_part = cpu_embedding_forward_part;
    be->embedding_backward_part = cpu_embedding_backward_part;
    be->vocab_stats = cpu_vocab_stats;
    be->vocab_grad = cpu_vocab_grad;
    be->vocab_jsd = cpu_vocab_jsd;
    be->vocab_jsd_grad = cpu_vocab_jsd_grad;
}
