// cuda_vocab.cu: the vocabulary-shard ops (backend.h) on CUDA (spec in backend/ref/ref_vocab.c):
// the masked embedding one thread per element (its backward one thread per column, rows in
// order, as cu_embedding_backward), the row statistics and gradients of vocab_math.h one thread
// per row, the same arithmetic as ref and cpu.
#include "../vocab_math.h"
#include "cuda_common.cuh"

__global__ void emb_part_fwd_kernel(float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C, int lo,
                                    int V) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, c = i % C;
        long long r = (long long)ids[n] - lo;
        out[i] = r >= 0 && r < V ? cu_wload(wte, wdt, (size_t)r * C + c) : 0.0f;
    }
}

static void cu_embedding_forward_part(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N,
                                      int C, int lo, int V) {
    if (N <= 0) return;
    emb_part_fwd_kernel<<<cu_blocks((size_t)N * C, 256), 256, 0, cu_ctx(be)->stream>>>(out, ids, wte, wdt, N, C, lo, V);
    LAUNCH_CHECK();
}

__global__ void emb_part_bwd_kernel(float *dwte, const float *dout, const int32_t *ids, int N, int C, int lo, int V) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int n = 0; n < N; n++) {
        long long r = (long long)ids[n] - lo;
        if (r >= 0 && r < V) dwte[(size_t)r * C + c] += dout[(size_t)n * C + c];
    }
}

static void cu_embedding_backward_part(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C,
                                       int lo, int V) {
    if (N <= 0) return;
    cu_weights_written(be, dwte);
    emb_part_bwd_kernel<<<(C + 63) / 64, 64, 0, cu_ctx(be)->stream>>>(dwte, dout, ids, N, C, lo, V);
    LAUNCH_CHECK();
}

__device__ static int row_target(const int32_t *targets, int r, int lo) { return targets ? targets[r] - lo : -1; }

__global__ void vocab_stats_kernel(float *stats, const float *z, const int32_t *targets, float tau, int lo, int M,
                                   int V) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    vocab_row_stats(stats + (size_t)r * VOCAB_STATS, z + (size_t)r * V, V, row_target(targets, r, lo), tau, lo);
}

static void cu_vocab_stats(Backend *be, float *stats, const float *z, const int32_t *targets, float tau, int lo, int M,
                           int V) {
    if (M <= 0) return;
    vocab_stats_kernel<<<(M + 63) / 64, 64, 0, cu_ctx(be)->stream>>>(stats, z, targets, tau, lo, M, V);
    LAUNCH_CHECK();
}

__global__ void vocab_grad_kernel(float *z, const int32_t *targets, const float *rows, float tau, float softcap, int lo,
                                  int M, int V) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float *w = rows + (size_t)r * VOCAB_ROW;
    vocab_row_grad(z + (size_t)r * V, V, row_target(targets, r, lo), tau, w[VR_LSE], w[VR_COEF], softcap);
}

static void cu_vocab_grad(Backend *be, float *z, const int32_t *targets, const float *rows, float tau, float softcap,
                          int lo, int M, int V) {
    if (M <= 0) return;
    vocab_grad_kernel<<<(M + 63) / 64, 64, 0, cu_ctx(be)->stream>>>(z, targets, rows, tau, softcap, lo, M, V);
    LAUNCH_CHECK();
}

__global__ void vocab_jsd_kernel(float *part, const float *zs, const float *zt, const float *rows, float tau,
                                 float beta, int M, int V) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float *w = rows + (size_t)r * VOCAB_ROW;
    double L = 0, K = 0;
    vocab_row_jsd(&L, &K, zs + (size_t)r * V, zt + (size_t)r * V, V, tau, beta, w[VR_LSE], w[VR_LSE_T]);
    part[2 * (size_t)r] = (float)L;
    part[2 * (size_t)r + 1] = (float)K;
}

static void cu_vocab_jsd(Backend *be, float *part, const float *zs, const float *zt, const float *rows, float tau,
                         float beta, int M, int V) {
    if (M <= 0) return;
    vocab_jsd_kernel<<<(M + 63) / 64, 64, 0, cu_ctx(be)->stream>>>(part, zs, zt, rows, tau, beta, M, V);
    LAUNCH_CHECK();
}

__global__ void vocab_jsd_grad_kernel(float *zs, const float *zt, const float *rows, float tau, float beta,
                                      float softcap, int M, int V) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const float *w = rows + (size_t)r * VOCAB_ROW;
    vocab_row_jsd_grad(zs + (size_t)r * V, zt + (size_t)r * V, V, tau, beta, w[VR_LSE], w[VR_LSE_T], w[VR_L], w[VR_K],
                       w[VR_COEF], softcap);
}

static void cu_vocab_jsd_grad(Backend *be, float *zs, const float *zt, const float *rows, float tau, float beta,
                              float softcap, int M, int V) {
    if (M <= 0) return;
    vocab_jsd_grad_kernel<<<(M + 63) / 64, 64, 0, cu_ctx(be)->stream>>>(zs, zt, rows, tau, beta, softcap, M, V);
    LAUNCH_CHECK();
}

void cu_install_vocab(Backend *be) {
    be->embedding_forward_part = cu_embedding_forward_part;
    be->embedding_backward_part = cu_embedding_backward_part;
    be->vocab_stats = cu_vocab_stats;
    be->vocab_grad = cu_vocab_grad;
    be->vocab_jsd = cu_vocab_jsd;
    be->vocab_jsd_grad = cu_vocab_jsd_grad;
}
