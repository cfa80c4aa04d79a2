// cuda_heads.cu: the distillation and RL heads (backend.h, docs/heads.md; spec in
// backend/ref/ref_heads.c), fused with the LM head like cuda_loss.cu's ce_head: per chunk of
// rows one GEMM per model makes the chunk's logits in the caller's scratch (chunk, V), one block
// per row computes the row's statistics (double sums, block reductions) and, for the backward
// pass, dz in place; two GEMMs then accumulate dh += dz W and dW += dz^T h. The LM heads are
// converted to the GEMM dtype once per call (student CU_SCR_W, teacher CU_SCR_W2).
//
// The teacher's top-k support is selected in the row's block without sorting: the radix select
// of heads_math.h (four 8-bit digits of the order-preserving keys, histograms in shared memory)
// gives the k-th largest key and how many values equal to it are kept; a block-wide prefix count
// over ascending indices then finds the last kept tie, so the support is exactly the set
// heads_topk_mask picks on the host.
#include "cuda_common.cuh"

#include "../heads_math.h"

#define HEADS_THREADS 1024

// Outputs of an ignored row: 0 everywhere, dz 0 when backward. Returns 1 when the row is ignored.
__device__ inline int ignored_row(int tgt, float *zr, float *o0, float *o1, int backward, int V) {
    if (tgt != IGNORE_INDEX) return 0;
    if (threadIdx.x == 0) {
        if (o0) *o0 = 0.0f;
        if (o1) *o1 = 0.0f;
    }
    if (backward)
        for (int v = threadIdx.x; v < V; v += blockDim.x) zr[v] = 0.0f;
    return 1;
}

// max over z (V) (entries at -inf included; they never win over a finite one).
__device__ inline float row_max(const float *z, int V, float *red) {
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
    return block_max(mx, red);
}

// logsumexp of z (V) / tau over its finite entries, in double.
__device__ inline double row_lse(const float *z, int V, double tau, float *red, double *redd) {
    const double mx = (double)row_max(z, V, red) / tau;
    double sum = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        if (z[v] != -INFINITY) sum += exp(z[v] / tau - mx);
    return mx + log(block_sum(sum, redd));
}

// ---- logprob_head ----------------------------------------------------------------------------
// z (nr, V) logits of rows r0.. (unscaled) -> row_logp, row_entropy, row_stats (nr, LOGPROB_STATS);
// dz in place when backward.
__global__ void __launch_bounds__(HEADS_THREADS) logprob_row_kernel(float *z, float *row_logp, float *row_entropy,
                                                                    float *row_stats, const int32_t *targets,
                                                                    const float *coef, float tau, int backward, int V,
                                                                    float cap) {
    __shared__ float red[32];
    __shared__ double redd[32];
    __shared__ int redi[32];
    const int r = blockIdx.x;
    float *zr = z + (size_t)r * V;
    const int tgt = targets[r];
    float *st = row_stats ? row_stats + (size_t)r * LOGPROB_STATS : NULL;
    if (tgt == IGNORE_INDEX && st && threadIdx.x == 0)
        for (int k = 0; k < LOGPROB_STATS; k++) st[k] = 0.0f;
    if (ignored_row(tgt, zr, row_logp ? row_logp + r : NULL, row_entropy ? row_entropy + r : NULL, backward, V)) return;
    if (tgt < 0 || tgt >= V) {
        if (threadIdx.x == 0)
            printf("still: cuda logprob_head: target %d at chunk row %d outside the vocabulary (%d)\n", tgt, r, V);
        __trap();
    }
    if (cap > 0.0f) {  // final-logit soft-capping, each thread its own entries
        for (int v = threadIdx.x; v < V; v += blockDim.x) zr[v] = cap * tanhf(zr[v] / cap);
        __syncthreads();
    }
    const double dtau = tau;
    const double lse = row_lse(zr, V, dtau, red, redd);
    double pa = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        double a = zr[v] / dtau;
        pa += exp(a - lse) * a;
    }
    pa = block_sum(pa, redd);
    double zs = 0, s2 = 0;
    int amax = 0;
    if (st) {  // the scaled fp32 logits, as ref and cpu
        float bv = -INFINITY;
        int bi = INT32_MAX;
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            float a = zr[v] / tau;
            zs += a;
            s2 += exp(2.0 * ((double)a - lse));
            if (a > bv) bv = a, bi = v;
        }
        zs = block_sum(zs, redd);
        s2 = block_sum(s2, redd);
        amax = block_argmax(bv, bi, red, redi);
    }
    const float zt = zr[tgt];
    if (threadIdx.x == 0) {
        if (row_logp) row_logp[r] = (float)(zt / dtau - lse);
        if (row_entropy) row_entropy[r] = (float)(lse - pa);
        if (st) {
            st[LOGPROB_STAT_ZMEAN] = (float)(zs / V);
            st[LOGPROB_STAT_CORRECT] = amax == tgt ? 1.0f : 0.0f;
            st[LOGPROB_STAT_LSE2] = (float)log(s2);
        }
    }
    if (!backward) return;
    __syncthreads();  // every thread has read z[tgt] before z becomes dz
    const double g = coef[r] / dtau;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const double c = cap > 0.0f ? 1.0 - ((double)zr[v] / cap) * ((double)zr[v] / cap) : 1.0;  // d capped / d raw
        zr[v] = g == 0 ? 0.0f : (float)(g * ((v == tgt) - exp(zr[v] / dtau - lse)) * c);
    }
}

void cu_logprob_head_cap(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                         const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef,
                         float tau, float softcap, float *scratch, int chunk, int N, int C, int V) {
    CHECK(chunk >= 1 && V >= 1 && tau > 0 && softcap >= 0);
    CHECK_MSG(!coef || dh, "logprob_head: coef given without dh");
    CudaCtx *ctx = cu_ctx(be);
    const int backward = coef != NULL;
    if (dW) cu_weights_written(be, dW);
    const void *Wc = cu_weight_operand(be, CU_SCR_W, W, wdt, (size_t)V * C);
    float *z = scratch;  // (chunk, V)
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int nr = MIN(chunk, N - r0);
        const void *Hc = cu_operand(be, CU_SCR_A, h + (size_t)r0 * C, DT_F32, (size_t)nr * C);
        cu_gemm(be, 0, 1, nr, V, C, 1.0f, Hc, C, Wc, C, 0.0f, z, V);
        logprob_row_kernel<<<nr, HEADS_THREADS, 0, ctx->stream>>>(
            z, row_logp ? row_logp + r0 : NULL, row_entropy ? row_entropy + r0 : NULL,
            row_stats ? row_stats + (size_t)r0 * LOGPROB_STATS : NULL, targets + r0, backward ? coef + r0 : NULL, tau,
            backward, V, softcap);
        LAUNCH_CHECK();
        if (!backward) continue;
        const void *G = cu_operand(be, CU_SCR_C, z, DT_F32, (size_t)nr * V);
        cu_gemm(be, 0, 0, nr, C, V, 1.0f, G, V, Wc, C, 1.0f, dh + (size_t)r0 * C, C);
        if (dW) cu_gemm(be, 1, 0, V, C, nr, 1.0f, G, V, Hc, C, 1.0f, dW, C);
    }
}

void cu_logprob_head(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                     const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef, float tau,
                     float *scratch, int chunk, int N, int C, int V) {
    cu_logprob_head_cap(be, row_logp, row_entropy, row_stats, dh, dW, h, W, wdt, targets, coef, tau, 0.0f, scratch,
                        chunk, N, C, V);
}

// ---- distill_head ----------------------------------------------------------------------------
// Restrict a row to the teacher's top k (0 < k < V): entries of zs and zt outside the support
// become -inf, the support being exactly heads_topk_mask's.
__device__ void topk_mask_block(float *zs, float *zt, int V, int k) {
    __shared__ int cnt[256];
    __shared__ uint32_t s_prefix;
    __shared__ int s_need, s_tie_end, s_warp[32], s_base;
    uint32_t prefix = 0, mask = 0;
    int need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) cnt[i] = 0;
        __syncthreads();
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            uint32_t key = sample_key(zt[v]);
            if ((key & mask) == prefix) atomicAdd(&cnt[(key >> shift) & 255], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int d = 255, nd = need;
            for (; d > 0 && cnt[d] < nd; d--) nd -= cnt[d];
            s_prefix = prefix | (uint32_t)d << shift;
            s_need = nd;
        }
        __syncthreads();
        prefix = s_prefix;
        need = s_need;
        mask |= 255u << shift;
        __syncthreads();  // s_prefix, s_need and cnt are read before the next digit rewrites them
    }
    const uint32_t thr = prefix;  // the k-th largest key; the first `need` equal to it are kept
    // The index of the need-th value equal to thr, in ascending index order: a block prefix count.
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (threadIdx.x == 0) s_tie_end = -1, s_base = 0;
    __syncthreads();
    for (int v0 = 0; v0 < V; v0 += blockDim.x) {
        const int v = v0 + threadIdx.x;
        const int eq = v < V && sample_key(zt[v]) == thr;
        const unsigned bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) s_warp[w] = __popc(bal);
        __syncthreads();
        int before = s_base;
        for (int j = 0; j < w; j++) before += s_warp[j];
        before += __popc(bal & ((1u << lane) - 1u));
        if (eq && before == need - 1) s_tie_end = v;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int j = 0; j < nw; j++) s_base += s_warp[j];
        __syncthreads();
        if (s_tie_end >= 0) break;  // uniform: read after the barrier
    }
    const int tie_end = s_tie_end;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const uint32_t key = sample_key(zt[v]);
        const int keep = key > thr || (key == thr && v <= tie_end);
        if (!keep) zs[v] = zt[v] = -INFINITY;
    }
    __syncthreads();
}

// zs, zt (nr, V) student and teacher logits of rows r0.. -> row_loss, row_kl; dz_s in place over
// zs when backward.
__global__ void __launch_bounds__(HEADS_THREADS) distill_row_kernel(float *zs_all, float *zt_all, float *row_loss,
                                                                    float *row_kl, const int32_t *targets,
                                                                    const float *weights, float tau, float beta,
                                                                    int top_k, float grad_scale, int backward, int V,
                                                                    float cap_s, float cap_t) {
    __shared__ float red[32];
    __shared__ double redd[32];
    const int r = blockIdx.x;
    float *zs = zs_all + (size_t)r * V, *zt = zt_all + (size_t)r * V;
    if (ignored_row(targets[r], zs, row_loss ? row_loss + r : NULL, row_kl ? row_kl + r : NULL, backward, V)) return;
    if (cap_s > 0.0f || cap_t > 0.0f) {  // final-logit soft-capping of each model, each thread its own entries
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            if (cap_s > 0.0f) zs[v] = cap_s * tanhf(zs[v] / cap_s);
            if (cap_t > 0.0f) zt[v] = cap_t * tanhf(zt[v] / cap_t);
        }
        __syncthreads();
    }
    if (row_kl) {  // KL(student || teacher), whole vocabulary, temperature 1
        const double la = row_lse(zs, V, 1.0, red, redd), lb = row_lse(zt, V, 1.0, red, redd);
        double kl = 0;
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            double s = zs[v] - la, t = zt[v] - lb;
            kl += exp(s) * (s - t);
        }
        kl = block_sum(kl, redd);
        if (threadIdx.x == 0) row_kl[r] = (float)kl;
    }
    __syncthreads();
    if (top_k > 0 && top_k < V) topk_mask_block(zs, zt, V, top_k);
    const double dtau = tau, db = beta;
    const double la = row_lse(zs, V, dtau, red, redd), lb = row_lse(zt, V, dtau, red, redd);
    const double lb1 = log(db), la1 = log1p(-db);  // used for beta in (0, 1) only
    double L = 0, K = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        if (zs[v] == -INFINITY) continue;
        double s = zs[v] / dtau - la, t = zt[v] / dtau - lb, p = exp(s), q = exp(t);
        if (beta == 0.0f) {
            L += q * (t - s);
        } else if (beta == 1.0f) {
            L += p * (s - t);
        } else {
            double x = s + la1, y = t + lb1, mx = fmax(x, y);
            double m = mx + log(exp(x - mx) + exp(y - mx));
            L += db * q * (t - m) + (1 - db) * p * (s - m);
            K += p * (s - m);
        }
    }
    L = block_sum(L, redd);
    K = block_sum(K, redd);
    const double w = weights ? weights[r] : 1.0;
    if (threadIdx.x == 0 && row_loss) row_loss[r] = (float)(w * L);
    if (!backward) return;
    const double gscale = (double)grad_scale * w;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        if (zs[v] == -INFINITY) {
            zs[v] = 0.0f;
            continue;
        }
        double s = zs[v] / dtau - la, t = zt[v] / dtau - lb, p = exp(s), q = exp(t), d;
        if (beta == 0.0f) {
            d = p - q;
        } else if (beta == 1.0f) {
            d = p * (s - t - L);
        } else {
            double x = s + la1, y = t + lb1, mx = fmax(x, y);
            double m = mx + log(exp(x - mx) + exp(y - mx));
            d = (1 - db) * p * (s - m - K);
        }
        const double c = cap_s > 0.0f ? 1.0 - ((double)zs[v] / cap_s) * ((double)zs[v] / cap_s) : 1.0;  // d capped / d raw
        zs[v] = (float)(gscale * d / dtau * c);
    }
}

void cu_distill_head_cap(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                         const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                         const int32_t *targets, const float *weights, float tau, float beta, int top_k,
                         float grad_scale, float softcap_s, float softcap_t, float *scratch_s, float *scratch_t,
                         int chunk, int N, int Cs, int Ct, int V) {
    CHECK(chunk >= 1 && V >= 1 && tau > 0 && beta >= 0 && beta <= 1 && top_k >= 0 && softcap_s >= 0 && softcap_t >= 0);
    CudaCtx *ctx = cu_ctx(be);
    const int backward = dh_s != NULL;
    if (dW_s) cu_weights_written(be, dW_s);
    const void *Wsc = cu_weight_operand(be, CU_SCR_W, W_s, wdt_s, (size_t)V * Cs);
    const void *Wtc = cu_weight_operand(be, CU_SCR_W2, W_t, wdt_t, (size_t)V * Ct);
    float *zs = scratch_s, *zt = scratch_t;  // (chunk, V) each
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int nr = MIN(chunk, N - r0);
        const void *Hs = cu_operand(be, CU_SCR_A, h_s + (size_t)r0 * Cs, DT_F32, (size_t)nr * Cs);
        const void *Ht = cu_operand(be, CU_SCR_B, h_t + (size_t)r0 * Ct, DT_F32, (size_t)nr * Ct);
        cu_gemm(be, 0, 1, nr, V, Cs, 1.0f, Hs, Cs, Wsc, Cs, 0.0f, zs, V);
        cu_gemm(be, 0, 1, nr, V, Ct, 1.0f, Ht, Ct, Wtc, Ct, 0.0f, zt, V);
        distill_row_kernel<<<nr, HEADS_THREADS, 0, ctx->stream>>>(zs, zt, row_loss ? row_loss + r0 : NULL,
                                                                  row_kl ? row_kl + r0 : NULL, targets + r0,
                                                                  weights ? weights + r0 : NULL, tau, beta, top_k,
                                                                  grad_scale, backward, V, softcap_s, softcap_t);
        LAUNCH_CHECK();
        if (!backward) continue;
        const void *G = cu_operand(be, CU_SCR_C, zs, DT_F32, (size_t)nr * V);
        cu_gemm(be, 0, 0, nr, Cs, V, 1.0f, G, V, Wsc, Cs, 1.0f, dh_s + (size_t)r0 * Cs, Cs);
        if (dW_s) cu_gemm(be, 1, 0, V, Cs, nr, 1.0f, G, V, Hs, Cs, 1.0f, dW_s, Cs);
    }
}

void cu_distill_head(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                     const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                     const int32_t *targets, const float *weights, float tau, float beta, int top_k, float grad_scale,
                     float *scratch_s, float *scratch_t, int chunk, int N, int Cs, int Ct, int V) {
    cu_distill_head_cap(be, row_loss, row_kl, dh_s, dW_s, h_s, W_s, wdt_s, h_t, W_t, wdt_t, targets, weights, tau,
                        beta, top_k, grad_scale, 0.0f, 0.0f, scratch_s, scratch_t, chunk, N, Cs, Ct, V);
}

// ---- score_head --------------------------------------------------------------------------------
// B pooled rows only. Forward: one block per (sequence, label), a double block sum over C.
// Backward: one thread per column c, sequences in order, so repeated rows accumulate without
// races and every sum has a fixed order.
#define SCORE_THREADS 256

__global__ void __launch_bounds__(SCORE_THREADS) score_fwd_kernel(float *scores, const float *h, const void *W,
                                                                  DType wdt, const int32_t *rows, int N, int C,
                                                                  int NL) {
    __shared__ double redd[32];
    const int i = blockIdx.x, b = i / NL, k = i % NL, r = rows[b];
    if (r < 0 || r >= N) {
        if (threadIdx.x == 0) printf("still: cuda score_head: pooled row %d of sequence %d outside [0, %d)\n", r, b, N);
        __trap();
    }
    double acc = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        acc += (double)h[(size_t)r * C + c] * cu_wload(W, wdt, (size_t)k * C + c);
    acc = block_sum(acc, redd);
    if (threadIdx.x == 0) scores[i] = (float)acc;
}

__global__ void score_bwd_kernel(float *dh, float *dW, const float *h, const void *W, DType wdt, const int32_t *rows,
                                 const float *dscores, int B, int C, int NL) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int b = 0; b < B; b++) {
        double acc = 0;
        for (int k = 0; k < NL; k++) acc += (double)dscores[(size_t)b * NL + k] * cu_wload(W, wdt, (size_t)k * C + c);
        float *d = dh + (size_t)rows[b] * C + c;
        *d = (float)(*d + acc);
    }
    if (!dW) return;
    for (int k = 0; k < NL; k++) {
        double acc = 0;
        for (int b = 0; b < B; b++) acc += (double)dscores[(size_t)b * NL + k] * h[(size_t)rows[b] * C + c];
        dW[(size_t)k * C + c] = (float)(dW[(size_t)k * C + c] + acc);
    }
}

void cu_score_head(Backend *be, float *scores, float *dh, float *dW, const float *h, const void *W, DType wdt,
                   const int32_t *rows, const float *dscores, int B, int N, int C, int NL) {
    CHECK_MSG(!dscores || dh, "score_head: dscores given without dh");
    CudaCtx *ctx = cu_ctx(be);
    if (B <= 0) return;
    if (scores) {
        score_fwd_kernel<<<B * NL, SCORE_THREADS, 0, ctx->stream>>>(scores, h, W, wdt, rows, N, C, NL);
        LAUNCH_CHECK();
    }
    if (!dscores) return;
    if (dW) cu_weights_written(be, dW);
    score_bwd_kernel<<<cu_blocks((size_t)C, SCORE_THREADS), SCORE_THREADS, 0, ctx->stream>>>(dh, dW, h, W, wdt, rows,
                                                                                             dscores, B, C, NL);
    LAUNCH_CHECK();
}
