// cuda_attention.cu: causal self-attention with GQA and segment masks, flash style: keys stream
// through shared memory in tiles of 32 with an online softmax, and only the log-sum-exp (lse)
// per query is kept for the backward pass. fp32 throughout (scores, exp, accumulators). With
// ctx->attn_mma (the default with bf16 GEMMs, STILL_CUDA_ATTN) the entry points below hand over to
// the tensor-core kernels of cuda_attention_mma.cu instead.
//
// Layouts: q (B,T,NH,HD), k v (B,T,NKV,HD), seg (B,T), out (B,T,NH,HD), lse (B,NH,T).
// Forward and dq: a block holds BQ queries of one (b, h); each warp owns QPW of them and lane j
// scores key j of the tile. dk/dv: a block holds BQ keys of one (b, kv head); queries of every
// head of the group stream through shared memory and lane j scores query j. Each output element
// is written by exactly one thread in a fixed order: no atomics, deterministic.
#include "cuda_common.cuh"

#define ATT_WARPS 4
#define ATT_QPW 4                       // queries (or keys) per warp
#define ATT_BQ (ATT_WARPS * ATT_QPW)    // per block
#define ATT_TILE 32                     // keys (or queries) per shared-memory tile
#define ATT_MAX_SMEM (112 * 1024)  // >= the largest need (dk/dv at HD 256: ~99 KB); fits sm_80 and sm_90

// Query t attends key s iff s <= t and seg[s] == seg[t] != 0 and, with a window W > 0, t - s < W.
// With cap > 0 a score x becomes cap tanh(x / cap) (AttnOpts, backend.h).
__device__ __forceinline__ float att_cap(float x, float cap) { return cap > 0.0f ? cap * tanhf(x / cap) : x; }
// d score / d x at the score sc: 1 - (sc / cap)^2 with a cap, else 1.
__device__ __forceinline__ float att_cap_grad(float sc, float cap) {
    return cap > 0.0f ? 1.0f - (sc / cap) * (sc / cap) : 1.0f;
}

// DPL: head-dim elements per lane (HD <= 32 * DPL).
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32) attn_fwd_kernel(float *out, float *lse, const float *q,
                                                                  const float *k, const float *v, const int32_t *seg,
                                                                  int T, int NH, int NKV, int HD, float scale, int W,
                                                                  float cap) {
    extern __shared__ float sm[];
    const int HP = HD + 1;  // padded row: lane j reading row j hits distinct banks
    float *Qs = sm;                      // (BQ, HD)
    float *Ks = Qs + ATT_BQ * HD;        // (TILE, HP)
    float *Vs = Ks + ATT_TILE * HP;      // (TILE, HP)
    int *segk = (int *)(Vs + ATT_TILE * HP);  // (TILE)
    const int b = blockIdx.z, h = blockIdx.y, t0 = blockIdx.x * ATT_BQ, kh = h / (NH / NKV);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t *segb = seg + (size_t)b * T;

    for (int i = threadIdx.x; i < ATT_BQ * HD; i += blockDim.x) {
        int qi = i / HD, d = i % HD, t = t0 + qi;
        Qs[i] = t < T ? q[(((size_t)b * T + t) * NH + h) * HD + d] : 0.0f;
    }
    float m[ATT_QPW], l[ATT_QPW], acc[ATT_QPW][DPL];
    int segq[ATT_QPW];
#pragma unroll
    for (int i = 0; i < ATT_QPW; i++) {
        int t = t0 + warp * ATT_QPW + i;
        segq[i] = t < T ? segb[t] : 0;
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < DPL; c++) acc[i][c] = 0.0f;
    }
    const int tmax = min(T - 1, t0 + ATT_BQ - 1);
    const int sfirst = W > 0 ? max(0, t0 - W + 1) / ATT_TILE * ATT_TILE : 0;  // no query of the block sees further back
    for (int s0 = sfirst; s0 <= tmax; s0 += ATT_TILE) {
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_TILE * HD; i += blockDim.x) {
            int j = i / HD, d = i % HD, s = s0 + j;
            size_t src = (((size_t)b * T + s) * NKV + kh) * HD + d;
            Ks[j * HP + d] = s < T ? k[src] : 0.0f;
            Vs[j * HP + d] = s < T ? v[src] : 0.0f;
        }
        if (threadIdx.x < ATT_TILE) segk[threadIdx.x] = s0 + threadIdx.x < T ? segb[s0 + threadIdx.x] : 0;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ATT_QPW; i++) {
            const int qi = warp * ATT_QPW + i, t = t0 + qi;
            if (t >= T || segq[i] == 0 || s0 > t) continue;  // warp-uniform
            const int s = s0 + lane;
            const bool valid = s <= t && segk[lane] == segq[i] && (W <= 0 || t - s < W);
            float sc = -INFINITY;
            if (valid) {
                float dot = 0.0f;
                const float *qr = Qs + qi * HD, *kr = Ks + lane * HP;
                for (int d = 0; d < HD; d++) dot += qr[d] * kr[d];
                sc = att_cap(dot * scale, cap);
            }
            float tmx = warp_max(sc);
            if (tmx == -INFINITY) continue;
            float mnew = fmaxf(m[i], tmx);
            float corr = expf(m[i] - mnew);  // 0 when m was -inf
            float p = valid ? expf(sc - mnew) : 0.0f;
            l[i] = l[i] * corr + warp_sum(p);
#pragma unroll
            for (int c = 0; c < DPL; c++) acc[i][c] *= corr;
            for (int j = 0; j < ATT_TILE; j++) {
                float pj = __shfl_sync(0xffffffffu, p, j);
                if (pj == 0.0f) continue;
                const float *vr = Vs + j * HP;
#pragma unroll
                for (int c = 0; c < DPL; c++) {
                    int d = lane + 32 * c;
                    if (d < HD) acc[i][c] += pj * vr[d];
                }
            }
            m[i] = mnew;
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_QPW; i++) {
        int t = t0 + warp * ATT_QPW + i;
        if (t >= T) continue;
        float *o = out + (((size_t)b * T + t) * NH + h) * HD;
        bool pad = segq[i] == 0;
        float inv = pad ? 0.0f : 1.0f / l[i];
#pragma unroll
        for (int c = 0; c < DPL; c++) {
            int d = lane + 32 * c;
            if (d < HD) o[d] = pad ? 0.0f : acc[i][c] * inv;
        }
        if (lane == 0) lse[((size_t)b * NH + h) * T + t] = pad ? 0.0f : m[i] + logf(l[i]);
    }
}

// D (B,NH,T) = dout . out per query (one warp per query).
__global__ void attn_dot_kernel(float *D, const float *dout, const float *out, int B, int T, int NH, int HD) {
    size_t row = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;  // (b, t, h) order
    int lane = threadIdx.x & 31;
    if (row >= (size_t)B * T * NH) return;
    const float *g = dout + row * HD, *o = out + row * HD;
    float acc = 0.0f;
    for (int d = lane; d < HD; d += 32) acc += g[d] * o[d];
    acc = warp_sum(acc);
    int h = (int)(row % NH);
    size_t bt = row / NH;
    int t = (int)(bt % T), b = (int)(bt / T);
    if (lane == 0) D[((size_t)b * NH + h) * T + t] = acc;
}

// dq_t += scale sum_s dS_ts k_s, dS_ts = P_ts (dout_t . v_s - D_t), P_ts = exp(scale q_t.k_s - lse_t)
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32) attn_dq_kernel(float *dq, const float *dout, const float *lse,
                                                                 const float *D, const float *q, const float *k,
                                                                 const float *v, const int32_t *seg, int T, int NH,
                                                                 int NKV, int HD, float scale, int W, float cap) {
    extern __shared__ float sm[];
    const int HP = HD + 1;
    float *Qs = sm;                      // (BQ, HD)
    float *Gs = Qs + ATT_BQ * HD;        // (BQ, HD) dout
    float *Ks = Gs + ATT_BQ * HD;        // (TILE, HP)
    float *Vs = Ks + ATT_TILE * HP;      // (TILE, HP)
    int *segk = (int *)(Vs + ATT_TILE * HP);
    const int b = blockIdx.z, h = blockIdx.y, t0 = blockIdx.x * ATT_BQ, kh = h / (NH / NKV);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t *segb = seg + (size_t)b * T;

    for (int i = threadIdx.x; i < ATT_BQ * HD; i += blockDim.x) {
        int qi = i / HD, d = i % HD, t = t0 + qi;
        size_t src = (((size_t)b * T + t) * NH + h) * HD + d;
        Qs[i] = t < T ? q[src] : 0.0f;
        Gs[i] = t < T ? dout[src] : 0.0f;
    }
    float acc[ATT_QPW][DPL], lq[ATT_QPW], Dq[ATT_QPW];
    int segq[ATT_QPW];
#pragma unroll
    for (int i = 0; i < ATT_QPW; i++) {
        int t = t0 + warp * ATT_QPW + i;
        segq[i] = t < T ? segb[t] : 0;
        lq[i] = t < T ? lse[((size_t)b * NH + h) * T + t] : 0.0f;
        Dq[i] = t < T ? D[((size_t)b * NH + h) * T + t] : 0.0f;
#pragma unroll
        for (int c = 0; c < DPL; c++) acc[i][c] = 0.0f;
    }
    const int tmax = min(T - 1, t0 + ATT_BQ - 1);
    const int sfirst = W > 0 ? max(0, t0 - W + 1) / ATT_TILE * ATT_TILE : 0;
    for (int s0 = sfirst; s0 <= tmax; s0 += ATT_TILE) {
        __syncthreads();
        for (int i = threadIdx.x; i < ATT_TILE * HD; i += blockDim.x) {
            int j = i / HD, d = i % HD, s = s0 + j;
            size_t src = (((size_t)b * T + s) * NKV + kh) * HD + d;
            Ks[j * HP + d] = s < T ? k[src] : 0.0f;
            Vs[j * HP + d] = s < T ? v[src] : 0.0f;
        }
        if (threadIdx.x < ATT_TILE) segk[threadIdx.x] = s0 + threadIdx.x < T ? segb[s0 + threadIdx.x] : 0;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ATT_QPW; i++) {
            const int qi = warp * ATT_QPW + i, t = t0 + qi;
            if (t >= T || segq[i] == 0 || s0 > t) continue;
            const int s = s0 + lane;
            float ds = 0.0f;
            if (s <= t && segk[lane] == segq[i] && (W <= 0 || t - s < W)) {
                const float *qr = Qs + qi * HD, *gr = Gs + qi * HD, *kr = Ks + lane * HP, *vr = Vs + lane * HP;
                float qk = 0.0f, gv = 0.0f;
                for (int d = 0; d < HD; d++) qk += qr[d] * kr[d], gv += gr[d] * vr[d];
                float sc = att_cap(qk * scale, cap);
                float p = expf(sc - lq[i]);
                ds = p * (gv - Dq[i]) * att_cap_grad(sc, cap);
            }
            for (int j = 0; j < ATT_TILE; j++) {
                float dj = __shfl_sync(0xffffffffu, ds, j);
                if (dj == 0.0f) continue;
                const float *kr = Ks + j * HP;
#pragma unroll
                for (int c = 0; c < DPL; c++) {
                    int d = lane + 32 * c;
                    if (d < HD) acc[i][c] += dj * kr[d];
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_QPW; i++) {
        int t = t0 + warp * ATT_QPW + i;
        if (t >= T || segq[i] == 0) continue;
        float *o = dq + (((size_t)b * T + t) * NH + h) * HD;
#pragma unroll
        for (int c = 0; c < DPL; c++) {
            int d = lane + 32 * c;
            if (d < HD) o[d] += scale * acc[i][c];
        }
    }
}

// dk_s += scale sum_{h in group, t} dS_ts q_t ; dv_s += sum_{h in group, t} P_ts dout_t
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32) attn_dkv_kernel(float *dk, float *dv, const float *dout,
                                                                  const float *lse, const float *D, const float *q,
                                                                  const float *k, const float *v, const int32_t *seg,
                                                                  int T, int NH, int NKV, int HD, float scale, int W,
                                                                  float cap) {
    extern __shared__ float sm[];
    const int HP = HD + 1;
    float *Ks = sm;                       // (BQ, HD) this block's keys
    float *Vs = Ks + ATT_BQ * HD;         // (BQ, HD)
    float *Qs = Vs + ATT_BQ * HD;         // (TILE, HP) queries of the tile
    float *Gs = Qs + ATT_TILE * HP;       // (TILE, HP) their dout
    float *ls = Gs + ATT_TILE * HP;       // (TILE) lse
    float *Ds = ls + ATT_TILE;            // (TILE) D
    int *segt = (int *)(Ds + ATT_TILE);   // (TILE)
    const int b = blockIdx.z, kh = blockIdx.y, s0 = blockIdx.x * ATT_BQ, rep = NH / NKV;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t *segb = seg + (size_t)b * T;

    for (int i = threadIdx.x; i < ATT_BQ * HD; i += blockDim.x) {
        int si = i / HD, d = i % HD, s = s0 + si;
        size_t src = (((size_t)b * T + s) * NKV + kh) * HD + d;
        Ks[i] = s < T ? k[src] : 0.0f;
        Vs[i] = s < T ? v[src] : 0.0f;
    }
    float ak[ATT_QPW][DPL], av[ATT_QPW][DPL];
    int segs[ATT_QPW];
#pragma unroll
    for (int i = 0; i < ATT_QPW; i++) {
        int s = s0 + warp * ATT_QPW + i;
        segs[i] = s < T ? segb[s] : 0;
#pragma unroll
        for (int c = 0; c < DPL; c++) ak[i][c] = av[i][c] = 0.0f;
    }
    const int tstart = s0 / ATT_TILE * ATT_TILE;
    const int tend = W > 0 ? min(T, s0 + ATT_BQ - 1 + W) : T;  // no later query sees a key of the block
    for (int h = kh * rep; h < (kh + 1) * rep; h++) {
        for (int t0 = tstart; t0 < tend; t0 += ATT_TILE) {
            __syncthreads();
            for (int i = threadIdx.x; i < ATT_TILE * HD; i += blockDim.x) {
                int j = i / HD, d = i % HD, t = t0 + j;
                size_t src = (((size_t)b * T + t) * NH + h) * HD + d;
                Qs[j * HP + d] = t < T ? q[src] : 0.0f;
                Gs[j * HP + d] = t < T ? dout[src] : 0.0f;
            }
            if (threadIdx.x < ATT_TILE) {
                int t = t0 + threadIdx.x;
                ls[threadIdx.x] = t < T ? lse[((size_t)b * NH + h) * T + t] : 0.0f;
                Ds[threadIdx.x] = t < T ? D[((size_t)b * NH + h) * T + t] : 0.0f;
                segt[threadIdx.x] = t < T ? segb[t] : 0;
            }
            __syncthreads();
#pragma unroll
            for (int i = 0; i < ATT_QPW; i++) {
                const int si = warp * ATT_QPW + i, s = s0 + si;
                if (s >= T || segs[i] == 0 || t0 + ATT_TILE - 1 < s) continue;  // warp-uniform
                const int t = t0 + lane;
                float p = 0.0f, ds = 0.0f;
                if (t < T && t >= s && segt[lane] == segs[i] && (W <= 0 || t - s < W)) {
                    const float *kr = Ks + si * HD, *vr = Vs + si * HD, *qr = Qs + lane * HP, *gr = Gs + lane * HP;
                    float qk = 0.0f, gv = 0.0f;
                    for (int d = 0; d < HD; d++) qk += qr[d] * kr[d], gv += gr[d] * vr[d];
                    float sc = att_cap(qk * scale, cap);
                    p = expf(sc - ls[lane]);
                    ds = p * (gv - Ds[lane]) * att_cap_grad(sc, cap);
                }
                for (int j = 0; j < ATT_TILE; j++) {
                    float pj = __shfl_sync(0xffffffffu, p, j), dj = __shfl_sync(0xffffffffu, ds, j);
                    if (pj == 0.0f && dj == 0.0f) continue;
                    const float *qr = Qs + j * HP, *gr = Gs + j * HP;
#pragma unroll
                    for (int c = 0; c < DPL; c++) {
                        int d = lane + 32 * c;
                        if (d < HD) ak[i][c] += dj * qr[d], av[i][c] += pj * gr[d];
                    }
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < ATT_QPW; i++) {
        int s = s0 + warp * ATT_QPW + i;
        if (s >= T || segs[i] == 0) continue;
        size_t o = (((size_t)b * T + s) * NKV + kh) * HD;
#pragma unroll
        for (int c = 0; c < DPL; c++) {
            int d = lane + 32 * c;
            if (d >= HD) continue;
            if (dk) dk[o + d] += scale * ak[i][c];
            if (dv) dv[o + d] += av[i][c];
        }
    }
}

static size_t fwd_smem(int HD) { return ((size_t)ATT_BQ * HD + 2 * ATT_TILE * (HD + 1)) * 4 + ATT_TILE * 4; }
static size_t dq_smem(int HD) { return ((size_t)2 * ATT_BQ * HD + 2 * ATT_TILE * (HD + 1)) * 4 + ATT_TILE * 4; }
static size_t dkv_smem(int HD) { return ((size_t)2 * ATT_BQ * HD + 2 * ATT_TILE * (HD + 1) + 2 * ATT_TILE) * 4 + ATT_TILE * 4; }

#define ATT_FOR_EACH_DPL(X) X(1) X(2) X(4) X(8)

void cu_attention_init(size_t smem_optin) {
    cu_attention_mma_init(smem_optin);
#define ATT_ATTR(D)                                                                                              \
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_MAX_SMEM)); \
    CUDA_CHECK(cudaFuncSetAttribute(attn_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_MAX_SMEM));  \
    CUDA_CHECK(cudaFuncSetAttribute(attn_dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_MAX_SMEM));
    ATT_FOR_EACH_DPL(ATT_ATTR)
#undef ATT_ATTR
}

static int att_dpl(int HD) {
    CHECK_MSG(HD >= 1 && HD <= 256, "cuda attention: head_dim %d (1..256 supported)", HD);
    return HD <= 32 ? 1 : HD <= 64 ? 2 : HD <= 128 ? 4 : 8;
}

// The tensor-core kernels implement global, uncapped attention at 1/sqrt(HD); any other AttnOpts
// runs the fp32 kernels above.
static int opts_plain(AttnOpts o, int HD) {
    return o.window <= 0 && o.softcap <= 0 && (o.scale <= 0 || o.scale == (float)(1.0 / sqrt((double)HD)));
}

static float opts_scale(AttnOpts o, int HD) { return o.scale > 0 ? o.scale : (float)(1.0 / sqrt((double)HD)); }

void cu_attention_forward_opt(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                              const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o) {
    CHECK(NKV > 0 && NH % NKV == 0);
    if (cu_ctx(be)->attn_mma && opts_plain(o, HD)) {
        cu_attention_mma_forward(be, out, lse, q, k, v, seg, B, T, NH, NKV, HD);
        return;
    }
    dim3 grid((T + ATT_BQ - 1) / ATT_BQ, NH, B);
    float scale = opts_scale(o, HD), cap = o.softcap > 0 ? o.softcap : 0.0f;
    int W = o.window > 0 ? o.window : 0;
    size_t sm = fwd_smem(HD);
    cudaStream_t st = cu_ctx(be)->stream;
    switch (att_dpl(HD)) {
#define ATT_CASE(D) \
    case D: attn_fwd_kernel<D><<<grid, ATT_WARPS * 32, sm, st>>>(out, lse, q, k, v, seg, T, NH, NKV, HD, scale, W, cap); break;
        ATT_FOR_EACH_DPL(ATT_CASE)
#undef ATT_CASE
    }
    LAUNCH_CHECK();
}

void cu_attention_backward_opt(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                               int B, int T, int NH, int NKV, int HD, AttnOpts o) {
    CHECK(NKV > 0 && NH % NKV == 0);
    if (!dq && !dk && !dv) return;
    cudaStream_t st = cu_ctx(be)->stream;
    float scale = opts_scale(o, HD), cap = o.softcap > 0 ? o.softcap : 0.0f;
    int W = o.window > 0 ? o.window : 0;
    size_t rows = (size_t)B * T * NH;
    float *Dbuf = (float *)cu_scratch(be, CU_SCR_RED, rows * sizeof(float));
    attn_dot_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, st>>>(Dbuf, dout, out, B, T, NH, HD);
    LAUNCH_CHECK();
    if (cu_ctx(be)->attn_mma && opts_plain(o, HD)) {
        cu_attention_mma_backward(be, dq, dk, dv, Dbuf, dout, lse, q, k, v, seg, B, T, NH, NKV, HD);
        return;
    }
    int dpl = att_dpl(HD);
    if (dq) {
        dim3 grid((T + ATT_BQ - 1) / ATT_BQ, NH, B);
        size_t sm = dq_smem(HD);
        switch (dpl) {
#define ATT_CASE(DD) \
    case DD: attn_dq_kernel<DD><<<grid, ATT_WARPS * 32, sm, st>>>(dq, dout, lse, Dbuf, q, k, v, seg, T, NH, NKV, HD, scale, W, cap); break;
            ATT_FOR_EACH_DPL(ATT_CASE)
#undef ATT_CASE
        }
        LAUNCH_CHECK();
    }
    if (dk || dv) {
        dim3 grid((T + ATT_BQ - 1) / ATT_BQ, NKV, B);
        size_t sm = dkv_smem(HD);
        switch (dpl) {
#define ATT_CASE(DD) \
    case DD: attn_dkv_kernel<DD><<<grid, ATT_WARPS * 32, sm, st>>>(dk, dv, dout, lse, Dbuf, q, k, v, seg, T, NH, NKV, HD, scale, W, cap); break;
            ATT_FOR_EACH_DPL(ATT_CASE)
#undef ATT_CASE
        }
        LAUNCH_CHECK();
    }
}

void cu_attention_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                          const int32_t *seg, int B, int T, int NH, int NKV, int HD) {
    AttnOpts o = {0, 0.0f, 0.0f, 0};
    cu_attention_forward_opt(be, out, lse, q, k, v, seg, B, T, NH, NKV, HD, o);
}

void cu_attention_backward(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, const int32_t *seg, int B,
                           int T, int NH, int NKV, int HD) {
    AttnOpts o = {0, 0.0f, 0.0f, 0};
    cu_attention_backward_opt(be, dq, dk, dv, dout, out, lse, q, k, v, seg, B, T, NH, NKV, HD, o);
}
