// cuda_vocab.cu: the vocabulary-shard ops (backend.h) on CUDA (spec in backend/ref/ref_vocab.c):
// the masked embedding one thread per element (its backward one thread per column, rows in
// order, as cu_embedding_backward); the row statistics and divergences of vocab_math.h one block
// per row (a shard row is tens of thousands of logits: each thread sums a strided part in
// double, then the block's fixed tree), the gradients one thread per element; the per-element
// arithmetic is vocab_math.h's, as on ref and cpu.
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

#define VOCAB_THREADS 256

__global__ void __launch_bounds__(VOCAB_THREADS) vocab_stats_kernel(float *stats, const float *z,
                                                                      const int32_t *targets, float tau, int lo,
                                                                      int V) {
    __shared__ float shv[32];
    __shared__ int shi[32];
    __shared__ double shd[32];
    const int r = blockIdx.x;
    const float *zr = z + (size_t)r * V;
    // the first index of the maximum (NaN never wins; a row of -inf: index 0)
    float bv = -INFINITY;
    int bi = INT32_MAX;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float x = zr[j] / tau;
        if (x > bv) bv = x, bi = j;
    }
    if (bi == INT32_MAX && (int)threadIdx.x < V) bi = threadIdx.x;
    int arg = block_argmax(bv, bi, shv, shi);
    arg = arg < V ? arg : 0;
    const float xa = zr[arg] / tau, m = xa > -INFINITY ? xa : -INFINITY;  // the first maximum's own value
    double a[4] = {0, 0, 0, 0};
    for (int j = threadIdx.x; j < V; j += blockDim.x) vocab_stats_elem(a, zr[j] / tau, m);
    for (int k = 0; k < 4; k++) a[k] = block_sum(a[k], shd);
    if (threadIdx.x == 0)
        vocab_stats_store(stats + (size_t)r * VOCAB_STATS, m, arg, a, zr, V, row_target(targets, r, lo),
                          tau, lo);
}

static void cu_vocab_stats(Backend *be, float *stats, const float *z, const int32_t *targets, float tau, int lo, int M,
                           int V) {
    if (M <= 0) return;
    CHECK(V >= 1);
    vocab_stats_kernel<<<M, VOCAB_THREADS, 0, cu_ctx(be)->stream>>>(stats, z, targets, tau, lo, V);
    LAUNCH_CHECK();
}

__global__ void vocab_grad_kernel(float *z, const int32_t *targets, const float *rows, float tau, float softcap, int lo,
                                  int M, int V) {
    size_t total = (size_t)M * V;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / V), j = (int)(i % V);
        const float *w = rows + (size_t)r * VOCAB_ROW;
        z[i] = vocab_grad_elem(z[i], j, row_target(targets, r, lo), tau, w[VR_LSE], w[VR_COEF], softcap);
    }
}

static void cu_vocab_grad(Backend *be, float *z, const int32_t *targets, const float *rows, float tau, float softcap,
                          int lo, int M, int V) {
    if (M <= 0) return;
    vocab_grad_kernel<<<cu_blocks((size_t)M * V, 256), 256, 0, cu_ctx(be)->stream>>>(z, targets, rows, tau, softcap,
                                                                                      lo, M, V);
    LAUNCH_CHECK();
}

__global__ void __launch_bounds__(VOCAB_THREADS) vocab_jsd_kernel(float *part, const float *zs, const float *zt,
                                                                    const float *rows, float tau, float beta, int V) {
    __shared__ double shd[32];
    const int r = blockIdx.x;
    const float *w = rows + (size_t)r * VOCAB_ROW;
    const size_t o = (size_t)r * V;
    double L = 0, K = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        vocab_jsd_elem(&L, &K, zs[o + j], zt[o + j], tau, beta, w[VR_LSE], w[VR_LSE_T]);
    L = block_sum(L, shd);
    K = block_sum(K, shd);
    if (threadIdx.x == 0) {
        part[2 * (size_t)r] = (float)L;
        part[2 * (size_t)r + 1] = (float)K;
    }
}

static void cu_vocab_jsd(Backend *be, float *part, const float *zs, const float *zt, const float *rows, float tau,
                         float beta, int M, int V) {
    if (M <= 0) return;
    vocab_jsd_kernel<<<M, VOCAB_THREADS, 0, cu_ctx(be)->stream>>>(part, zs, zt, rows, tau, beta, V);
    LAUNCH_CHECK();
}

__global__ void vocab_jsd_grad_kernel(float *zs, const float *zt, const float *rows, float tau, float beta,
                                      float softcap, int M, int V) {
    size_t total = (size_t)M * V;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const float *w = rows + (i / V) * VOCAB_ROW;
        zs[i] = vocab_jsd_grad_elem(zs[i], zt[i], tau, beta, w[VR_LSE], w[VR_LSE_T], w[VR_L], w[VR_K], w[VR_COEF],
                                    softcap);
    }
}

static void cu_vocab_jsd_grad(Backend *be, float *zs, const float *zt, const float *rows, float tau, float beta,
                              float softcap, int M, int V) {
    if (M <= 0) return;
    vocab_jsd_grad_kernel<<<cu_blocks((size_t)M * V, 256), 256, 0, cu_ctx(be)->stream>>>(zs, zt, rows, tau, beta,
                                                                                          softcap, M, V);
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
