// cuda_attention_mma.cu: causal self-attention with GQA and segment masks on the tensor cores
// (bf16 mma.sync m16n8k16, fp32 accumulators), flash style: scores exist only as register tiles
// of 16 rows x 64 columns per warp, the softmax is online, and only lse (B,NH,T) is kept.
// Same contract as cuda_attention.cu (backend.h): query t attends key s iff s <= t and
// seg[s] == seg[t] != 0; padding queries give out = 0, lse = 0; backward accumulates.
//
// Precision: q, k, v, dout are rounded to bf16 as they enter shared memory, and so are the
// probabilities P (for P V and P^T dout) and dS (for dS K and dS^T q); every product accumulates
// in fp32; scores, the running max / sum, exp, lse and D = dout . out are fp32.
//
// Layouts: q (B,T,NH,HD), k v (B,T,NKV,HD), seg (B,T), out (B,T,NH,HD), lse D (B,NH,T).
// Shared tiles hold rows of bf16 pairs (uint32 words; row stride HDP/2 + 4 words, HDP = HD
// rounded up to 16 and zero-filled, so any HD up to 256 works and fragment loads of a warp hit
// distinct banks). A tile that is also the B operand of a product over its rows (V in P V, K in
// dS K, q and dout in dS^T q and P^T dout) is kept transposed too, (HDP, 64 rows / 2 + 4 words):
// every fragment is then one 32-bit shared load per register. Forward and dq: a block owns 64 queries of one (b, h), 16 per warp, and keys
// stream through in tiles of 64. dk/dv: a block owns 64 keys of one (b, kv head) and the queries
// of every head of the group stream through. Output dims are split in chunks of 128 per block
// (two blocks per row tile at HD 256) to bound the accumulators per lane. Every output element
// is written by one thread in a fixed order: no atomics, deterministic.
#include "cuda_common.cuh"
#include "cuda_mma.cuh"

#define TC_WARPS 4
#define TC_BM 64   // rows (queries, or keys for dk/dv) per block: 16 per warp
#define TC_BN 64   // columns (keys, or queries) per shared-memory tile: 8 n-tiles of the mma
#define TC_DCH 16  // output dims per block, in 8-wide n-tiles (128 dims)
#define TC_WT (TC_BN / 2 + 4)  // row stride (words) of a transposed tile: dims as rows

static int tc_hdp(int HD) { return (HD + 15) / 16 * 16; }
static int tc_words(int HD) { return tc_hdp(HD) / 2 + 4; }  // row stride of a shared tile

// Rows [0, rows) of src (row i at src + i * stride floats, `valid` of them exist; dims past HD
// and rows past valid are zero) as bf16 pairs: dst (rows, W words) by rows when not NULL, dt
// (HDP, TC_WT words: dt[d][j / 2] holds rows j, j + 1 of dim d) transposed when not NULL.
// rows is even; each thread reads a 2 x 2 block (two dims of two rows).
__device__ inline void tile_load(uint32_t *dst, int W, uint32_t *dt, const float *src, size_t stride, int valid,
                                 int rows, int HD, int HDP) {
    const int half = HDP / 2;
    for (int i = threadIdx.x; i < rows / 2 * half; i += blockDim.x) {
        int rp = i / half, c = (i % half) * 2, r = 2 * rp;
        float x[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // [row][dim]
        for (int a = 0; a < 2; a++)
            if (r + a < valid) {
                const float *row = src + (size_t)(r + a) * stride;
                if (c < HD) x[a][0] = row[c];
                if (c + 1 < HD) x[a][1] = row[c + 1];
            }
        if (dst) dst[r * W + c / 2] = pack_bf16x2(x[0][0], x[0][1]), dst[(r + 1) * W + c / 2] = pack_bf16x2(x[1][0], x[1][1]);
        if (dt) dt[c * TC_WT + rp] = pack_bf16x2(x[0][0], x[1][0]), dt[(c + 1) * TC_WT + rp] = pack_bf16x2(x[0][1], x[1][1]);
    }
}

// A fragment of rows m0.., dims k0.. of a tile (A[m][k] = tile[m0 + m][k0 + k])
__device__ inline void frag_a(uint32_t a[4], const uint32_t *t, int W, int m0, int k0, int g, int q) {
    const uint32_t *r0 = t + (m0 + g) * W + (k0 >> 1) + q, *r8 = r0 + 8 * W;
    a[0] = r0[0], a[1] = r8[0], a[2] = r0[4], a[3] = r8[4];
}
// B fragment whose columns are tile rows: B[k][n] = tile[n0 + n][k0 + k]
__device__ inline void frag_b_rows(uint32_t b[2], const uint32_t *t, int W, int n0, int k0, int g, int q) {
    const uint32_t *r = t + (n0 + g) * W + (k0 >> 1) + q;
    b[0] = r[0], b[1] = r[4];
}
// The A fragment of the 16 columns [16 j, 16 j + 16) of a 16 x 64 fp32 accumulator tile.
__device__ inline void acc_to_a(uint32_t a[4], const float s[8][4], int j) {
    a[0] = pack_bf16x2(s[2 * j][0], s[2 * j][1]);
    a[1] = pack_bf16x2(s[2 * j][2], s[2 * j][3]);
    a[2] = pack_bf16x2(s[2 * j + 1][0], s[2 * j + 1][1]);
    a[3] = pack_bf16x2(s[2 * j + 1][2], s[2 * j + 1][3]);
}
// s (16 x 64) = rows m0.. of tile A times the rows of tile B (as columns), over HDP dims
__device__ inline void tile_product(float s[8][4], const uint32_t *A, const uint32_t *B, int W, int m0, int HDP, int g,
                                    int q) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) s[nt][i] = 0.0f;
    for (int k0 = 0; k0 < HDP; k0 += 16) {
        uint32_t a[4];
        frag_a(a, A, W, m0, k0, g, q);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            uint32_t b[2];
            frag_b_rows(b, B, W, nt * 8, k0, g, q);
            mma_bf16_16816(s[nt], a, b, s[nt]);
        }
    }
}
// acc (16 x NTO*8, dims d0..) += P (16 x 64, accumulator layout) times the 64 rows of a tile,
// given transposed (tt: HDP x TC_WT)
template <int NTO>
__device__ inline void acc_times_tile(float acc[NTO][4], const float p[8][4], const uint32_t *tt, int d0, int HDP,
                                      int g, int q) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        uint32_t a[4];
        acc_to_a(a, p, j);
#pragma unroll
        for (int nd = 0; nd < NTO; nd++) {
            if (d0 + nd * 8 >= HDP) break;  // warp-uniform
            uint32_t b[2];
            frag_b_rows(b, tt, TC_WT, d0 + nd * 8, 16 * j, g, q);  // B[k][n] = row 16 j + k, dim n
            mma_bf16_16816(acc[nd], a, b, acc[nd]);
        }
    }
}

// ---- forward ----------------------------------------------------------------------------------
template <int NTO>
__global__ void __launch_bounds__(TC_WARPS * 32) attn_mma_fwd_kernel(float *out, float *lse, const float *q,
                                                                     const float *k, const float *v, const int32_t *seg,
                                                                     int T, int NH, int NKV, int HD, float scale,
                                                                     int nch) {
    extern __shared__ uint32_t smw[];
    const int HDP = (HD + 15) / 16 * 16, W = HDP / 2 + 4;
    uint32_t *Qs = smw, *Ks = Qs + TC_BM * W;  // (64, W) each
    uint32_t *Vt = Ks + TC_BN * W;             // (HDP, TC_WT): V transposed
    int *segk = (int *)(Vt + HDP * TC_WT);     // (64)
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV), ch = blockIdx.x % nch;
    const int t0 = blockIdx.x / nch * TC_BM, d0 = ch * TC_DCH * 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
    const int32_t *segb = seg + (size_t)b * T;
    const size_t qs = (size_t)NH * HD, ks = (size_t)NKV * HD;

    tile_load(Qs, W, NULL, q + ((size_t)b * T + t0) * qs + (size_t)h * HD, qs, T - t0, TC_BM, HD, HDP);
    const int w0 = t0 + warp * 16, row[2] = {w0 + g, w0 + g + 8};
    int sq[2];
    float m[2], l[2], o[NTO][4];
    for (int r = 0; r < 2; r++) sq[r] = row[r] < T ? segb[row[r]] : 0, m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
    for (int nd = 0; nd < NTO; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[nd][i] = 0.0f;
    const int tmax = min(T - 1, t0 + TC_BM - 1);
    for (int s0 = 0; s0 <= tmax; s0 += TC_BN) {
        __syncthreads();
        tile_load(Ks, W, NULL, k + ((size_t)b * T + s0) * ks + (size_t)kh * HD, ks, T - s0, TC_BN, HD, HDP);
        tile_load(NULL, W, Vt, v + ((size_t)b * T + s0) * ks + (size_t)kh * HD, ks, T - s0, TC_BN, HD, HDP);
        if (threadIdx.x < TC_BN) segk[threadIdx.x] = s0 + threadIdx.x < T ? segb[s0 + threadIdx.x] : 0;
        __syncthreads();
        if (w0 >= T || s0 > w0 + 15) continue;  // warp-uniform: no query of the warp sees these keys
        float s[8][4];
        tile_product(s, Qs, Ks, W, warp * 16, HDP, g, qd);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = i >> 1, j = nt * 8 + 2 * qd + (i & 1), key = s0 + j;
                bool ok = sq[r] != 0 && key <= row[r] && segk[j] == sq[r];  // key < T: key <= row < T
                s[nt][i] = ok ? s[nt][i] * scale : -INFINITY;
                mx[r] = fmaxf(mx[r], s[nt][i]);
            }
        float corr[2], base[2];
        for (int r = 0; r < 2; r++) {
            // the four lanes of a group hold one row between them
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mnew = fmaxf(m[r], mx[r]);
            corr[r] = mnew == -INFINITY ? 1.0f : expf(m[r] - mnew);  // 0 when m was -inf
            base[r] = mnew == -INFINITY ? 0.0f : mnew;
            m[r] = mnew;
        }
        float ls[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float p = expf(s[nt][i] - base[i >> 1]);  // exp(-inf) = 0 for masked keys
                s[nt][i] = p;
                ls[i >> 1] += p;
            }
        for (int r = 0; r < 2; r++) l[r] = l[r] * corr[r] + ls[r];  // this lane's part of the row sum
#pragma unroll
        for (int nd = 0; nd < NTO; nd++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[nd][i] *= corr[i >> 1];
        acc_times_tile<NTO>(o, s, Vt, d0, HDP, g, qd);
    }
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int nd = 0; nd < NTO; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = i >> 1, d = d0 + nd * 8 + 2 * qd + (i & 1);
            if (row[r] >= T || d >= HD) continue;
            out[(((size_t)b * T + row[r]) * NH + h) * HD + d] = sq[r] ? o[nd][i] / l[r] : 0.0f;
        }
    if (ch == 0 && qd == 0)
        for (int r = 0; r < 2; r++)
            if (row[r] < T) lse[((size_t)b * NH + h) * T + row[r]] = sq[r] ? m[r] + logf(l[r]) : 0.0f;
}

// ---- backward: dq -------------------------------------------------------------------------------
// dq_t += scale sum_s dS_ts k_s, dS_ts = P_ts (dout_t . v_s - D_t), P_ts = exp(scale q_t.k_s - lse_t)
template <int NTO>
__global__ void __launch_bounds__(TC_WARPS * 32) attn_mma_dq_kernel(float *dq, const float *dout, const float *lse,
                                                                    const float *D, const float *q, const float *k,
                                                                    const float *v, const int32_t *seg, int T, int NH,
                                                                    int NKV, int HD, float scale, int nch) {
    extern __shared__ uint32_t smw[];
    const int HDP = (HD + 15) / 16 * 16, W = HDP / 2 + 4;
    uint32_t *Qs = smw, *Gs = Qs + TC_BM * W, *Ks = Gs + TC_BM * W, *Vs = Ks + TC_BN * W;  // (64, W) each
    uint32_t *Kt = Vs + TC_BN * W;                                                          // (HDP, TC_WT)
    int *segk = (int *)(Kt + HDP * TC_WT);                                                  // (64)
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (NH / NKV), ch = blockIdx.x % nch;
    const int t0 = blockIdx.x / nch * TC_BM, d0 = ch * TC_DCH * 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
    const int32_t *segb = seg + (size_t)b * T;
    const size_t qs = (size_t)NH * HD, ks = (size_t)NKV * HD, qoff = ((size_t)b * T + t0) * qs + (size_t)h * HD;

    tile_load(Qs, W, NULL, q + qoff, qs, T - t0, TC_BM, HD, HDP);
    tile_load(Gs, W, NULL, dout + qoff, qs, T - t0, TC_BM, HD, HDP);
    const int w0 = t0 + warp * 16, row[2] = {w0 + g, w0 + g + 8};
    int sq[2];
    float lq[2], Dq[2], acc[NTO][4];
    for (int r = 0; r < 2; r++) {
        bool in = row[r] < T;
        sq[r] = in ? segb[row[r]] : 0;
        lq[r] = in ? lse[((size_t)b * NH + h) * T + row[r]] : 0.0f;
        Dq[r] = in ? D[((size_t)b * NH + h) * T + row[r]] : 0.0f;
    }
#pragma unroll
    for (int nd = 0; nd < NTO; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nd][i] = 0.0f;
    const int tmax = min(T - 1, t0 + TC_BM - 1);
    for (int s0 = 0; s0 <= tmax; s0 += TC_BN) {
        __syncthreads();
        tile_load(Ks, W, Kt, k + ((size_t)b * T + s0) * ks + (size_t)kh * HD, ks, T - s0, TC_BN, HD, HDP);
        tile_load(Vs, W, NULL, v + ((size_t)b * T + s0) * ks + (size_t)kh * HD, ks, T - s0, TC_BN, HD, HDP);
        if (threadIdx.x < TC_BN) segk[threadIdx.x] = s0 + threadIdx.x < T ? segb[s0 + threadIdx.x] : 0;
        __syncthreads();
        if (w0 >= T || s0 > w0 + 15) continue;  // warp-uniform
        float s[8][4], dp[8][4];
        tile_product(s, Qs, Ks, W, warp * 16, HDP, g, qd);
        tile_product(dp, Gs, Vs, W, warp * 16, HDP, g, qd);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = i >> 1, j = nt * 8 + 2 * qd + (i & 1), key = s0 + j;
                bool ok = sq[r] != 0 && key <= row[r] && segk[j] == sq[r];
                float p = ok ? expf(s[nt][i] * scale - lq[r]) : 0.0f;
                s[nt][i] = p * (dp[nt][i] - Dq[r]);  // dS
            }
        acc_times_tile<NTO>(acc, s, Kt, d0, HDP, g, qd);
    }
#pragma unroll
    for (int nd = 0; nd < NTO; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = i >> 1, d = d0 + nd * 8 + 2 * qd + (i & 1);
            if (row[r] >= T || sq[r] == 0 || d >= HD) continue;
            dq[(((size_t)b * T + row[r]) * NH + h) * HD + d] += scale * acc[nd][i];
        }
}

// ---- backward: dk, dv -----------------------------------------------------------------------------
// dk_s += scale sum_{h in group, t} dS_ts q_t ; dv_s += sum_{h in group, t} P_ts dout_t. Scores are
// computed transposed (keys as rows): S^T = K Q^T, dP^T = V dout^T.
template <int NTO>
__global__ void __launch_bounds__(TC_WARPS * 32) attn_mma_dkv_kernel(float *dk, float *dv, const float *dout,
                                                                     const float *lse, const float *D, const float *q,
                                                                     const float *k, const float *v, const int32_t *seg,
                                                                     int T, int NH, int NKV, int HD, float scale,
                                                                     int nch) {
    extern __shared__ uint32_t smw[];
    const int HDP = (HD + 15) / 16 * 16, W = HDP / 2 + 4;
    uint32_t *Ks = smw, *Vs = Ks + TC_BM * W, *Qs = Vs + TC_BM * W, *Gs = Qs + TC_BN * W;  // (64, W) each
    uint32_t *Qt = Gs + TC_BN * W, *Gt = Qt + HDP * TC_WT;                                 // (HDP, TC_WT) each
    float *ls = (float *)(Gt + HDP * TC_WT), *Ds = ls + TC_BN;                             // (64) each
    int *segt = (int *)(Ds + TC_BN);                                                        // (64)
    const int b = blockIdx.z, kh = blockIdx.y, rep = NH / NKV, ch = blockIdx.x % nch;
    const int s0 = blockIdx.x / nch * TC_BM, d0 = ch * TC_DCH * 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qd = lane & 3;
    const int32_t *segb = seg + (size_t)b * T;
    const size_t qs = (size_t)NH * HD, ks = (size_t)NKV * HD, koff = ((size_t)b * T + s0) * ks + (size_t)kh * HD;

    tile_load(Ks, W, NULL, k + koff, ks, T - s0, TC_BM, HD, HDP);
    tile_load(Vs, W, NULL, v + koff, ks, T - s0, TC_BM, HD, HDP);
    const int w0 = s0 + warp * 16, key[2] = {w0 + g, w0 + g + 8};
    int sk[2];
    for (int r = 0; r < 2; r++) sk[r] = key[r] < T ? segb[key[r]] : 0;
    float ak[NTO][4], av[NTO][4];
#pragma unroll
    for (int nd = 0; nd < NTO; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) ak[nd][i] = av[nd][i] = 0.0f;
    for (int h = kh * rep; h < (kh + 1) * rep; h++) {
        for (int t0 = s0 / TC_BN * TC_BN; t0 < T; t0 += TC_BN) {
            __syncthreads();
            const size_t qoff = ((size_t)b * T + t0) * qs + (size_t)h * HD;
            tile_load(Qs, W, Qt, q + qoff, qs, T - t0, TC_BN, HD, HDP);
            tile_load(Gs, W, Gt, dout + qoff, qs, T - t0, TC_BN, HD, HDP);
            if (threadIdx.x < TC_BN) {
                int t = t0 + threadIdx.x;
                ls[threadIdx.x] = t < T ? lse[((size_t)b * NH + h) * T + t] : 0.0f;
                Ds[threadIdx.x] = t < T ? D[((size_t)b * NH + h) * T + t] : 0.0f;
                segt[threadIdx.x] = t < T ? segb[t] : 0;
            }
            __syncthreads();
            if (w0 >= T || t0 + TC_BN - 1 < w0) continue;  // warp-uniform: every query precedes every key
            float st[8][4], dpt[8][4];
            tile_product(st, Ks, Qs, W, warp * 16, HDP, g, qd);
            tile_product(dpt, Vs, Gs, W, warp * 16, HDP, g, qd);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int r = i >> 1, j = nt * 8 + 2 * qd + (i & 1), t = t0 + j;
                    bool ok = sk[r] != 0 && t >= key[r] && t < T && segt[j] == sk[r];
                    float p = ok ? expf(st[nt][i] * scale - ls[j]) : 0.0f;
                    st[nt][i] = p;
                    dpt[nt][i] = p * (dpt[nt][i] - Ds[j]);  // dS^T
                }
            acc_times_tile<NTO>(av, st, Gt, d0, HDP, g, qd);
            acc_times_tile<NTO>(ak, dpt, Qt, d0, HDP, g, qd);
        }
    }
#pragma unroll
    for (int nd = 0; nd < NTO; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = i >> 1, d = d0 + nd * 8 + 2 * qd + (i & 1);
            if (key[r] >= T || sk[r] == 0 || d >= HD) continue;
            size_t o = (((size_t)b * T + key[r]) * NKV + kh) * HD + d;
            if (dk) dk[o] += scale * ak[nd][i];
            if (dv) dv[o] += av[nd][i];
        }
}

// ---- launches ---------------------------------------------------------------------------------------
static size_t tile_bytes(int HD) { return (size_t)TC_BN * tc_words(HD) * 4; }   // (64, W)
static size_t ttile_bytes(int HD) { return (size_t)tc_hdp(HD) * TC_WT * 4; }    // (HDP, TC_WT)
static size_t fwd_smem(int HD) { return 2 * tile_bytes(HD) + ttile_bytes(HD) + TC_BN * 4; }
static size_t dq_smem(int HD) { return 4 * tile_bytes(HD) + ttile_bytes(HD) + TC_BN * 4; }
static size_t dkv_smem(int HD) { return 4 * tile_bytes(HD) + 2 * ttile_bytes(HD) + 3 * TC_BN * 4; }
// dkv_smem(256) ~ 209 KB, the most any kernel here needs: within sm_90's 227 KB per block

// Allow each kernel what HD 256 needs, within what the device allows (smem_optin bytes per block).
void cu_attention_mma_init(size_t smem_optin) {
    int most = (int)(dkv_smem(256) < smem_optin ? dkv_smem(256) : smem_optin);
#define TC_ATTR(N)                                                                                                  \
    CUDA_CHECK(cudaFuncSetAttribute(attn_mma_fwd_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, most)); \
    CUDA_CHECK(cudaFuncSetAttribute(attn_mma_dq_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, most));  \
    CUDA_CHECK(cudaFuncSetAttribute(attn_mma_dkv_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    TC_ATTR(8)
    TC_ATTR(16)
#undef TC_ATTR
}

static void smem_fits(Backend *be, size_t need, int HD) {
    size_t optin = cu_ctx(be)->smem_optin;
    CHECK_MSG(need <= optin,
              "cuda attention: head_dim %d needs %zu bytes of shared memory per block, this GPU allows %zu; "
              "STILL_CUDA_ATTN=fp32 selects the fp32 kernels", HD, need, optin);
}

// n-tiles of output per block (8 up to HD 64, else 16) and the number of 128-dim chunks
static int tc_nto(int HD) { return tc_hdp(HD) <= 64 ? 8 : 16; }
static int tc_nch(int HD) { return (tc_hdp(HD) + TC_DCH * 8 - 1) / (TC_DCH * 8); }

void cu_attention_mma_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                              const int32_t *seg, int B, int T, int NH, int NKV, int HD) {
    CHECK_MSG(HD >= 1 && HD <= 256, "cuda attention: head_dim %d (1..256 supported)", HD);
    const int nch = tc_nch(HD);
    dim3 grid((unsigned)(((T + TC_BM - 1) / TC_BM) * nch), NH, B);
    float scale = (float)(1.0 / sqrt((double)HD));
    cudaStream_t st = cu_ctx(be)->stream;
    smem_fits(be, fwd_smem(HD), HD);
    if (tc_nto(HD) == 8)
        attn_mma_fwd_kernel<8><<<grid, TC_WARPS * 32, fwd_smem(HD), st>>>(out, lse, q, k, v, seg, T, NH, NKV, HD, scale, nch);
    else
        attn_mma_fwd_kernel<16><<<grid, TC_WARPS * 32, fwd_smem(HD), st>>>(out, lse, q, k, v, seg, T, NH, NKV, HD, scale, nch);
    LAUNCH_CHECK();
}

// D (B,NH,T) = dout . out, computed by the caller (cuda_attention.cu)
void cu_attention_mma_backward(Backend *be, float *dq, float *dk, float *dv, const float *D, const float *dout,
                               const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                               int B, int T, int NH, int NKV, int HD) {
    CHECK_MSG(HD >= 1 && HD <= 256, "cuda attention: head_dim %d (1..256 supported)", HD);
    const int nch = tc_nch(HD), nto = tc_nto(HD);
    float scale = (float)(1.0 / sqrt((double)HD));
    cudaStream_t st = cu_ctx(be)->stream;
    if (dq) {
        size_t sm = dq_smem(HD);
        smem_fits(be, sm, HD);
        dim3 grid((unsigned)(((T + TC_BM - 1) / TC_BM) * nch), NH, B);
        if (nto == 8)
            attn_mma_dq_kernel<8><<<grid, TC_WARPS * 32, sm, st>>>(dq, dout, lse, D, q, k, v, seg, T, NH, NKV, HD, scale, nch);
        else
            attn_mma_dq_kernel<16><<<grid, TC_WARPS * 32, sm, st>>>(dq, dout, lse, D, q, k, v, seg, T, NH, NKV, HD, scale, nch);
        LAUNCH_CHECK();
    }
    if (dk || dv) {
        size_t sm = dkv_smem(HD);
        smem_fits(be, sm, HD);
        dim3 grid((unsigned)(((T + TC_BM - 1) / TC_BM) * nch), NKV, B);
        if (nto == 8)
            attn_mma_dkv_kernel<8><<<grid, TC_WARPS * 32, sm, st>>>(dk, dv, dout, lse, D, q, k, v, seg, T, NH, NKV, HD, scale, nch);
        else
            attn_mma_dkv_kernel<16><<<grid, TC_WARPS * 32, sm, st>>>(dk, dv, dout, lse, D, q, k, v, seg, T, NH, NKV, HD, scale, nch);
        LAUNCH_CHECK();
    }
}
