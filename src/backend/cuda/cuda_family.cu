// cuda_family.cu: the model-family ops of backend.h on CUDA (docs/models.md; spec in
// backend/ref/ref_family.c): RMSNorm with an offset weight (one warp per row, as cuda_ops.cu's;
// dw through the same column sums, which do not depend on the weights), the gelu_pytorch_tanh
// GeGLU and soft-capping, elementwise. Installs them with the AttnOpts attention of
// cuda_attention.cu / cuda_kv.cu and the soft-capped heads of cuda_loss.cu / cuda_heads.cu.
#include "cuda_common.cuh"

// inp (N,C), w (C) -> out (N,C) = inp * r * (woff + w), rstd (N)
__global__ void rmsnorm_off_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, float woff, int N,
                                       int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    ss = warp_sum(ss);
    float r = 1.0f / sqrtf(ss / C + eps);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = x[c] * r * (woff + w[c]);
    if (lane == 0) rstd[row] = r;
}

static void cu_rmsnorm_forward_off(Backend *be, float *out, float *rstd, const float *inp, const float *w, float woff,
                                   int N, int C, float eps) {
    if (N <= 0) return;
    rmsnorm_off_fwd_kernel<<<(N + 7) / 8, 256, 0, cu_ctx(be)->stream>>>(out, rstd, inp, w, woff, N, C, eps);
    LAUNCH_CHECK();
}

// dx_j += r (g_j u_j - x_j r^2 mean_i(g_i u_i x_i)), u = woff + w
__global__ void rmsnorm_off_bwd_kernel(float *dinp, const float *dout, const float *inp, const float *w, float woff,
                                       const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += g[c] * (woff + w[c]) * x[c];
    dot = warp_sum(dot);
    float r = rstd[row], k = r * r * dot / C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) dx[c] += r * (g[c] * (woff + w[c]) - x[c] * k);
}

static void cu_rmsnorm_backward_off(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                    const float *w, float woff, const float *rstd, int N, int C) {
    if (N <= 0) return;
    if (dinp) {
        rmsnorm_off_bwd_kernel<<<(N + 7) / 8, 256, 0, cu_ctx(be)->stream>>>(dinp, dout, inp, w, woff, rstd, N, C);
        LAUNCH_CHECK();
    }
    if (dw) cu_weights_written(be, dw), cu_colsum_add(be, dw, dout, inp, rstd, N, C);
}

#define GELU_K 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_A 0.044715f

__global__ void geglu_fwd_kernel(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = gate[i], th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        out[i] = 0.5f * x * (1.0f + th) * up[i];
    }
}

// d gelu_tanh / dx = 0.5 (1 + th) + 0.5 x (1 - th^2) K (1 + 3 A x^2)
__global__ void geglu_bwd_kernel(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                 size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = gate[i], th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        if (dgate) dgate[i] += dout[i] * up[i] * d;
        if (dup) dup[i] += dout[i] * 0.5f * x * (1.0f + th);
    }
}

static void cu_geglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n) {
    if (!n) return;
    geglu_fwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(out, gate, up, n);
    LAUNCH_CHECK();
}

static void cu_geglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                              const float *up, size_t n) {
    if (!n || (!dgate && !dup)) return;
    geglu_bwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(dgate, dup, dout, gate, up, n);
    LAUNCH_CHECK();
}

__global__ void softcap_fwd_kernel(float *x, float cap, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

__global__ void softcap_bwd_kernel(float *dx, const float *y, float cap, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float t = y[i] / cap;
        dx[i] *= 1.0f - t * t;
    }
}

static void cu_softcap_forward(Backend *be, float *x, float cap, size_t n) {
    CHECK(cap > 0);
    if (!n) return;
    softcap_fwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(x, cap, n);
    LAUNCH_CHECK();
}

static void cu_softcap_backward(Backend *be, float *dx, const float *y, float cap, size_t n) {
    CHECK(cap > 0);
    if (!n) return;
    softcap_bwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(dx, y, cap, n);
    LAUNCH_CHECK();
}

// ---- RMSNorm over a split feature dimension (backend.h): one warp per row, as above ---------
__global__ void rmsnorm_part_stat_kernel(float *stat, const float *a, const float *b, const float *w, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = a + (size_t)row * C, *y = b + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c] * (w ? w[c] : 1.0f) * y[c];
    s = warp_sum(s);
    if (lane == 0) stat[row] = s;
}

static void cu_rmsnorm_part_stat(Backend *be, float *stat, const float *a, const float *b, const float *w, int N,
                                 int C) {
    if (N <= 0) return;
    rmsnorm_part_stat_kernel<<<(N + 7) / 8, 256, 0, cu_ctx(be)->stream>>>(stat, a, b, w, N, C);
    LAUNCH_CHECK();
}

__global__ void rmsnorm_part_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, const float *ss,
                                        int N, int C, int D, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    float r = 1.0f / sqrtf(ss[row] / D + eps);
    __syncwarp();  // every lane has read ss before lane 0 writes rstd (they may alias)
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = x[c] * r * w[c];
    if (lane == 0) rstd[row] = r;
}

static void cu_rmsnorm_part_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w,
                                    const float *ss, int N, int C, int D, float eps) {
    if (N <= 0) return;
    rmsnorm_part_fwd_kernel<<<(N + 7) / 8, 256, 0, cu_ctx(be)->stream>>>(out, rstd, inp, w, ss, N, C, D, eps);
    LAUNCH_CHECK();
}

__global__ void rmsnorm_part_bwd_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                        const float *rstd, const float *dot, int N, int C, int D) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float r = rstd[row], k = r * r * dot[row] / D;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) dx[c] += r * (g[c] * w[c] - x[c] * k);
}

static void cu_rmsnorm_part_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                     const float *w, const float *rstd, const float *dot, int N, int C, int D) {
    if (N <= 0) return;
    if (dinp) {
        rmsnorm_part_bwd_kernel<<<(N + 7) / 8, 256, 0, cu_ctx(be)->stream>>>(dinp, dout, inp, w, rstd, dot, N, C, D);
        LAUNCH_CHECK();
    }
    if (dw) cu_weights_written(be, dw), cu_colsum_add(be, dw, dout, inp, rstd, N, C);
}

void cu_install_family(Backend *be) {
    be->attention_forward_opt = cu_attention_forward_opt;
    be->attention_backward_opt = cu_attention_backward_opt;
    be->attention_sinks_backward = cu_attention_sinks_backward;
    be->attention_cached_opt = cu_attention_cached_opt;
    be->kv_ring_write = cu_kv_ring_write;
    be->attention_ring = cu_attention_ring;
    be->rmsnorm_forward_off = cu_rmsnorm_forward_off;
    be->rmsnorm_backward_off = cu_rmsnorm_backward_off;
    be->geglu_forward = cu_geglu_forward;
    be->geglu_backward = cu_geglu_backward;
    be->softcap_forward = cu_softcap_forward;
    be->softcap_backward = cu_softcap_backward;
    be->ce_head_cap = cu_ce_head_cap;
    be->logprob_head_cap = cu_logprob_head_cap;
    be->distill_head_cap = cu_distill_head_cap;
    be->rmsnorm_part_stat = cu_rmsnorm_part_stat;
    be->rmsnorm_part_forward = cu_rmsnorm_part_forward;
    be->rmsnorm_part_backward = cu_rmsnorm_part_backward;
}
