// cuda_moe.cu: the mixture-of-experts ops on the GPU. Routing and the load-balancing gradient
// are one thread per token running moe_math.h; the dispatch is one block, a thread per expert
// scanning the routed choices in a fixed order (deterministic, no host round trip, so a decode
// step stays capturable); the grouped GEMM is one launch over tiles of slots, each tile taking
// the weight tiles of the (usually one or two) experts whose slots it holds, and one launch for
// the per-expert weight gradients, whose blocks for experts without slots return at once. Every
// output element is summed by one thread in a fixed order; no atomics.
#include "cuda_common.cuh"

#include "../moe_math.h"

#define MOE_TILE 16

// ---- routing ---------------------------------------------------------------------------------
__global__ void moe_route_fwd_kernel(int32_t *idx, float *w, const float *logits, int N, int E, int K, int norm) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float *l = logits + (size_t)n * E;
    moe_topk_row(idx + (size_t)n * K, l, E, K);
    moe_weights_row(w + (size_t)n * K, l, idx + (size_t)n * K, E, K, norm);
}

__global__ void moe_route_bwd_kernel(float *dlogits, const float *dw, const float *logits, const int32_t *idx, int N,
                                     int E, int K, int norm) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    moe_weights_backward_row(dlogits + (size_t)n * E, dw + (size_t)n * K, logits + (size_t)n * E,
                             idx + (size_t)n * K, E, K, norm);
}

static void cu_moe_route_forward(Backend *be, int32_t *idx, float *w, const float *logits, int N, int E, int K,
                                 int norm) {
    if (N <= 0) return;
    moe_route_fwd_kernel<<<cu_blocks(N, 128), 128, 0, cu_ctx(be)->stream>>>(idx, w, logits, N, E, K, norm);
    LAUNCH_CHECK();
}

static void cu_moe_route_backward(Backend *be, float *dlogits, const float *dw, const float *logits,
                                  const int32_t *idx, int N, int E, int K, int norm) {
    if (N <= 0) return;
    moe_route_bwd_kernel<<<cu_blocks(N, 128), 128, 0, cu_ctx(be)->stream>>>(dlogits, dw, logits, idx, N, E, K,
                                                                             norm);
    LAUNCH_CHECK();
}

// ---- dispatch: one block; thread e owns expert e (and e + blockDim.x ...) ----------------------
__global__ void moe_dispatch_kernel(int32_t *offsets, int32_t *slot_token, int32_t *token_slot, int32_t *dropped,
                                    const int32_t *idx, int N, int E, int K, int capacity) {
    int S = N * K;
    for (int s = threadIdx.x; s < S; s += blockDim.x) slot_token[s] = -1;
    // kept counts into offsets[e+1], choices of expert e marked kept (0) or dropped (-1), in
    // priority order: rank k, then token
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int kept = 0;
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                size_t i = (size_t)n * K + k;
                if (idx[i] != e) continue;
                int keep = capacity <= 0 || kept < capacity;
                token_slot[i] = keep ? 0 : -1;
                kept += keep;
            }
        offsets[e + 1] = kept;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        offsets[0] = 0;
        for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
        if (dropped) *dropped = S - offsets[E];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int s = offsets[e];
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                size_t i = (size_t)n * K + k;
                if (idx[i] != e || token_slot[i] < 0) continue;
                token_slot[i] = s;
                slot_token[s++] = n;
            }
    }
}

static void cu_moe_dispatch(Backend *be, int32_t *offsets, int32_t *slot_token, int32_t *token_slot,
                            int32_t *dropped, const int32_t *idx, int N, int E, int K, int capacity) {
    moe_dispatch_kernel<<<1, 256, 0, cu_ctx(be)->stream>>>(offsets, slot_token, token_slot, dropped, idx, N, E, K,
                                                            capacity);
    LAUNCH_CHECK();
}

// ---- gather and combine ----------------------------------------------------------------------
#define MOE_GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void moe_gather_kernel(float *xs, const float *x, const int32_t *slot_token, const int32_t *offsets, int S,
                                  int E, int C) {
    int total = offsets[E];
    MOE_GRID_LOOP(i, (size_t)S * C) {
        int s = (int)(i / C), c = (int)(i % C);
        xs[i] = s < total ? x[(size_t)slot_token[s] * C + c] : 0.0f;
    }
}

__global__ void moe_gather_bwd_kernel(float *dx, const float *dxs, const int32_t *token_slot, int N, int K, int C) {
    MOE_GRID_LOOP(i, (size_t)N * C) {
        int n = (int)(i / C), c = (int)(i % C);
        float acc = dx[i];
        for (int k = 0; k < K; k++) {
            int s = token_slot[(size_t)n * K + k];
            if (s >= 0) acc += dxs[(size_t)s * C + c];
        }
        dx[i] = acc;
    }
}

__global__ void moe_combine_fwd_kernel(float *out, const float *ys, const float *w, const int32_t *token_slot, int N,
                                       int K, int C) {
    MOE_GRID_LOOP(i, (size_t)N * C) {
        int n = (int)(i / C), c = (int)(i % C);
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            int s = token_slot[(size_t)n * K + k];
            if (s >= 0) acc = fmaf(w[(size_t)n * K + k], ys[(size_t)s * C + c], acc);
        }
        out[i] = acc;
    }
}

__global__ void moe_combine_dys_kernel(float *dys, const float *dout, const float *w, const int32_t *token_slot,
                                       int N, int K, int C) {
    MOE_GRID_LOOP(i, (size_t)N * K * C) {
        size_t nk = i / C;
        int c = (int)(i % C), s = token_slot[nk];
        if (s >= 0) dys[(size_t)s * C + c] += w[nk] * dout[(nk / K) * C + c];
    }
}

// one warp per (token, choice): dw += dout[n] . ys[slot]
__global__ void moe_combine_dw_kernel(float *dw, const float *dout, const float *ys, const int32_t *token_slot, int N,
                                      int K, int C) {
    size_t nk = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (nk >= (size_t)N * K) return;  // whole warps: blockDim.x is a multiple of 32
    int s = token_slot[nk];
    if (s < 0) return;
    const float *g = dout + (nk / K) * C, *y = ys + (size_t)s * C;
    float acc = 0.0f;
    for (int c = lane; c < C; c += 32) acc = fmaf(g[c], y[c], acc);
    acc = warp_sum(acc);
    if (lane == 0) dw[nk] += acc;
}

static void cu_moe_gather(Backend *be, float *xs, const float *x, const int32_t *slot_token, const int32_t *offsets,
                          int S, int E, int C) {
    if ((size_t)S * C == 0) return;
    moe_gather_kernel<<<cu_blocks((size_t)S * C, 256), 256, 0, cu_ctx(be)->stream>>>(xs, x, slot_token, offsets, S,
                                                                                      E, C);
    LAUNCH_CHECK();
}

static void cu_moe_gather_backward(Backend *be, float *dx, const float *dxs, const int32_t *token_slot, int N, int K,
                                   int C) {
    if ((size_t)N * C == 0) return;
    moe_gather_bwd_kernel<<<cu_blocks((size_t)N * C, 256), 256, 0, cu_ctx(be)->stream>>>(dx, dxs, token_slot, N, K,
                                                                                          C);
    LAUNCH_CHECK();
}

static void cu_moe_combine_forward(Backend *be, float *out, const float *ys, const float *w,
                                   const int32_t *token_slot, int N, int K, int C) {
    if ((size_t)N * C == 0) return;
    moe_combine_fwd_kernel<<<cu_blocks((size_t)N * C, 256), 256, 0, cu_ctx(be)->stream>>>(out, ys, w, token_slot, N,
                                                                                           K, C);
    LAUNCH_CHECK();
}

static void cu_moe_combine_backward(Backend *be, float *dys, float *dw, const float *dout, const float *ys,
                                    const float *w, const int32_t *token_slot, int N, int K, int C) {
    size_t nk = (size_t)N * K;
    if (nk == 0) return;
    if (dys) {
        moe_combine_dys_kernel<<<cu_blocks(nk * C, 256), 256, 0, cu_ctx(be)->stream>>>(dys, dout, w, token_slot, N,
                                                                                        K, C);
        LAUNCH_CHECK();
    }
    if (dw) {
        moe_combine_dw_kernel<<<cu_blocks(nk * 32, 256), 256, 0, cu_ctx(be)->stream>>>(dw, dout, ys, token_slot, N,
                                                                                        K, C);
        LAUNCH_CHECK();
    }
}

// ---- grouped GEMM ------------------------------------------------------------------------------
// The expert of kept slot s: offsets[e] <= s < offsets[e+1] (a binary search; empty experts skipped).
__device__ inline int moe_slot_expert(const int32_t *offsets, int E, int s) {
    int lo = 0, hi = E;  // the first e in [0, E] with offsets[e] > s, minus one
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (offsets[mid] <= s) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

// out (S,OC): block (16,16) owns slots r0.. r0+15 x outputs o0.. o0+15; for every chunk of 16
// input channels it loads the input tile once and the weight tile of each expert in its slots.
// mode 0: out = inp w_e^T + bias (forward); mode 1: out += inp w_e (dinp: inp is dout (S,OC),
// "C" the reduced width OC, "OC" the output width C).
__global__ void moe_gmm_rows_kernel(float *out, const float *inp, const void *w, DType wdt, const float *bias,
                                    const int32_t *offsets, int S, int E, int Cin, int Cout, int mode) {
    __shared__ float xs[MOE_TILE][MOE_TILE + 1], ws[MOE_TILE][MOE_TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int r0 = blockIdx.y * MOE_TILE, o0 = blockIdx.x * MOE_TILE;
    int r = r0 + ty, o = o0 + tx;
    int total = offsets[E];
    if (r0 >= total) {  // the whole tile is past the kept slots (uniform over the block)
        if (mode == 0 && r < S && o < Cout) out[(size_t)r * Cout + o] = 0.0f;
        return;
    }
    int e_lo = moe_slot_expert(offsets, E, r0), e_hi = moe_slot_expert(offsets, E, min(r0 + MOE_TILE, total) - 1);
    int my_e = r < total ? moe_slot_expert(offsets, E, r) : -1;
    float acc = 0.0f;
    for (int k0 = 0; k0 < Cin; k0 += MOE_TILE) {
        xs[ty][tx] = (r < total && k0 + tx < Cin) ? inp[(size_t)r * Cin + k0 + tx] : 0.0f;
        for (int e = e_lo; e <= e_hi; e++) {
            if (offsets[e] == offsets[e + 1]) continue;  // uniform: the same e for every thread
            size_t base = (size_t)e * Cin * Cout;
            if (mode == 0)  // ws[o][k] = w_e[o0 + o][k0 + k], w_e (Cout, Cin)
                ws[ty][tx] = (o0 + ty < Cout && k0 + tx < Cin)
                                 ? cu_wload(w, wdt, base + (size_t)(o0 + ty) * Cin + k0 + tx) : 0.0f;
            else  // ws[k][o] = w_e[k0 + k][o0 + o], w_e (Cin, Cout)
                ws[ty][tx] = (k0 + ty < Cin && o0 + tx < Cout)
                                 ? cu_wload(w, wdt, base + (size_t)(k0 + ty) * Cout + o0 + tx) : 0.0f;
            __syncthreads();
            if (my_e == e) {
                if (mode == 0)
                    for (int kk = 0; kk < MOE_TILE; kk++) acc = fmaf(xs[ty][kk], ws[tx][kk], acc);
                else
                    for (int kk = 0; kk < MOE_TILE; kk++) acc = fmaf(xs[ty][kk], ws[kk][tx], acc);
            }
            __syncthreads();
        }
    }
    if (r >= S || o >= Cout) return;
    if (mode == 0) out[(size_t)r * Cout + o] = r < total ? acc + (bias ? bias[(size_t)my_e * Cout + o] : 0.0f) : 0.0f;
    else if (r < total) out[(size_t)r * Cout + o] += acc;
}

// dw (E,OC,C) += per expert dout^T inp: block (16,16) of expert blockIdx.z owns outputs
// o0.. o0+15 x channels c0.. c0+15 and walks that expert's slots in order.
__global__ void moe_gmm_dw_kernel(float *dw, const float *dout, const float *inp, const int32_t *offsets, int E, int C,
                                  int OC) {
    __shared__ float ds[MOE_TILE][MOE_TILE + 1], xs[MOE_TILE][MOE_TILE + 1];
    int e = blockIdx.z, s0 = offsets[e], s1 = offsets[e + 1];
    if (s0 == s1) return;  // uniform over the block
    int tx = threadIdx.x, ty = threadIdx.y;
    int c0 = blockIdx.x * MOE_TILE, o0 = blockIdx.y * MOE_TILE;
    float acc = 0.0f;
    for (int k0 = s0; k0 < s1; k0 += MOE_TILE) {
        int s = k0 + ty;
        ds[ty][tx] = (s < s1 && o0 + tx < OC) ? dout[(size_t)s * OC + o0 + tx] : 0.0f;  // ds[slot][o]
        xs[ty][tx] = (s < s1 && c0 + tx < C) ? inp[(size_t)s * C + c0 + tx] : 0.0f;     // xs[slot][c]
        __syncthreads();
        for (int kk = 0; kk < MOE_TILE; kk++) acc = fmaf(ds[kk][ty], xs[kk][tx], acc);
        __syncthreads();
    }
    int o = o0 + ty, c = c0 + tx;
    if (o < OC && c < C) dw[((size_t)e * OC + o) * C + c] += acc;
}

// dbias (E,OC) += per expert column sums of dout: one thread per (expert, output)
__global__ void moe_gmm_dbias_kernel(float *dbias, const float *dout, const int32_t *offsets, int E, int OC) {
    MOE_GRID_LOOP(i, (size_t)E * OC) {
        int e = (int)(i / OC), o = (int)(i % OC);
        float acc = 0.0f;
        for (int s = offsets[e]; s < offsets[e + 1]; s++) acc += dout[(size_t)s * OC + o];
        dbias[i] += acc;
    }
}

static void cu_moe_grouped_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt,
                                          const float *bias, const int32_t *offsets, int S, int E, int C, int OC) {
    if (S <= 0) return;
    dim3 grid((OC + MOE_TILE - 1) / MOE_TILE, (S + MOE_TILE - 1) / MOE_TILE), block(MOE_TILE, MOE_TILE);
    moe_gmm_rows_kernel<<<grid, block, 0, cu_ctx(be)->stream>>>(out, inp, w, wdt, bias, offsets, S, E, C, OC, 0);
    LAUNCH_CHECK();
}

static void cu_moe_grouped_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                           const float *inp, const void *w, DType wdt, const int32_t *offsets, int S,
                                           int E, int C, int OC) {
    if (S <= 0) return;
    dim3 block(MOE_TILE, MOE_TILE);
    if (dinp) {
        dim3 grid((C + MOE_TILE - 1) / MOE_TILE, (S + MOE_TILE - 1) / MOE_TILE);
        moe_gmm_rows_kernel<<<grid, block, 0, cu_ctx(be)->stream>>>(dinp, dout, w, wdt, NULL, offsets, S, E, OC, C,
                                                                     1);
        LAUNCH_CHECK();
    }
    if (dw) {
        cu_weights_written(be, dw);
        dim3 grid((C + MOE_TILE - 1) / MOE_TILE, (OC + MOE_TILE - 1) / MOE_TILE, E);
        moe_gmm_dw_kernel<<<grid, block, 0, cu_ctx(be)->stream>>>(dw, dout, inp, offsets, E, C, OC);
        LAUNCH_CHECK();
    }
    if (dbias) {
        cu_weights_written(be, dbias);
        moe_gmm_dbias_kernel<<<cu_blocks((size_t)E * OC, 256), 256, 0, cu_ctx(be)->stream>>>(dbias, dout, offsets, E,
                                                                                              OC);
        LAUNCH_CHECK();
    }
}

// ---- load-balancing loss ------------------------------------------------------------------------
__global__ void moe_lse_kernel(float *lse, const float *logits, int N, int E) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) lse[n] = (float)moe_lse_row(logits + (size_t)n * E, E);
}

// one thread per expert, tokens in order; thread E counts the tokens
__global__ void moe_aux_stats_kernel(float *stats, const float *logits, const float *lse, const int32_t *idx,
                                     const int32_t *seg, int N, int E, int K) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e > E) return;
    if (e == E) {
        int tokens = 0;
        for (int n = 0; n < N; n++) tokens += !seg || seg[n];
        stats[2 * E] += (float)tokens;
        return;
    }
    double cnt = 0, ps = 0;
    for (int n = 0; n < N; n++) {
        if (seg && !seg[n]) continue;
        ps += exp((double)logits[(size_t)n * E + e] - lse[n]);
        for (int k = 0; k < K; k++) cnt += idx[(size_t)n * K + k] == e;
    }
    stats[e] += (float)cnt;
    stats[E + e] += (float)ps;
}

__global__ void moe_aux_bwd_kernel(float *dlogits, const float *logits, const int32_t *seg, const float *stats,
                                   float coef, int N, int E) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N || (seg && !seg[n])) return;
    moe_aux_backward_row(dlogits + (size_t)n * E, logits + (size_t)n * E, stats, coef, E);
}

static void cu_moe_aux_stats(Backend *be, float *stats, const float *logits, const int32_t *idx, const int32_t *seg,
                             int N, int E, int K) {
    float *lse = (float *)cu_scratch(be, CU_SCR_RED, (size_t)(N > 0 ? N : 1) * sizeof(float));  // (N)
    if (N > 0) {
        moe_lse_kernel<<<cu_blocks(N, 128), 128, 0, cu_ctx(be)->stream>>>(lse, logits, N, E);
        LAUNCH_CHECK();
    }
    moe_aux_stats_kernel<<<cu_blocks(E + 1, 128), 128, 0, cu_ctx(be)->stream>>>(stats, logits, lse, idx, seg, N, E,
                                                                                 K);
    LAUNCH_CHECK();
}

static void cu_moe_aux_backward(Backend *be, float *dlogits, const float *logits, const int32_t *seg,
                                const float *stats, float coef, int N, int E) {
    if (N <= 0) return;
    moe_aux_bwd_kernel<<<cu_blocks(N, 128), 128, 0, cu_ctx(be)->stream>>>(dlogits, logits, seg, stats, coef, N, E);
    LAUNCH_CHECK();
}

// ---- GPT-OSS's clamped SwiGLU (interleaved gate / up) -----------------------------------------
__global__ void swiglu_clamp_fwd_kernel(float *out, const float *gu, float alpha, float limit, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = fminf(gu[2 * i], limit), u = fmaxf(fminf(gu[2 * i + 1], limit), -limit);
        out[i] = (u + 1.0f) * g / (1.0f + expf(-alpha * g));
    }
}

__global__ void swiglu_clamp_bwd_kernel(float *dgu, const float *dout, const float *gu, float alpha, float limit,
                                        size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gate = gu[2 * i], up = gu[2 * i + 1];
        float g = fminf(gate, limit), u = fmaxf(fminf(up, limit), -limit);
        float s = 1.0f / (1.0f + expf(-alpha * g));
        if (gate <= limit) dgu[2 * i] += dout[i] * (u + 1.0f) * (s + alpha * g * s * (1.0f - s));
        if (up >= -limit && up <= limit) dgu[2 * i + 1] += dout[i] * g * s;
    }
}

static void cu_swiglu_clamp_forward(Backend *be, float *out, const float *gu, float alpha, float limit, size_t n) {
    if (n == 0) return;
    swiglu_clamp_fwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(out, gu, alpha, limit, n);
    LAUNCH_CHECK();
}

static void cu_swiglu_clamp_backward(Backend *be, float *dgu, const float *dout, const float *gu, float alpha,
                                     float limit, size_t n) {
    if (n == 0) return;
    swiglu_clamp_bwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(dgu, dout, gu, alpha, limit, n);
    LAUNCH_CHECK();
}

void cu_install_moe(Backend *be) {
    be->moe_route_forward = cu_moe_route_forward;
    be->moe_route_backward = cu_moe_route_backward;
    be->moe_dispatch = cu_moe_dispatch;
    be->moe_gather = cu_moe_gather;
    be->moe_gather_backward = cu_moe_gather_backward;
    be->moe_grouped_matmul_forward = cu_moe_grouped_matmul_forward;
    be->moe_grouped_matmul_backward = cu_moe_grouped_matmul_backward;
    be->moe_combine_forward = cu_moe_combine_forward;
    be->moe_combine_backward = cu_moe_combine_backward;
    be->moe_aux_stats = cu_moe_aux_stats;
    be->moe_aux_backward = cu_moe_aux_backward;
    be->swiglu_clamp_forward = cu_swiglu_clamp_forward;
    be->swiglu_clamp_backward = cu_swiglu_clamp_backward;
}
