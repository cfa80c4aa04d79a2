// ref_moe.c: reference mixture-of-experts ops (the spec of backend.h's "mixture of experts"):
// per-token routing from moe_math.h, the grouped GEMM as one double-accumulated dot product per
// output, scatter and combine one token at a time.
#include "ref.h"

#include "../moe_math.h"

#include <math.h>

// idx (N,K), w (N,K) from logits (N,E)
static void ref_moe_route_forward(Backend *be, int32_t *idx, float *w, const float *logits, int N, int E, int K,
                                  int norm) {
    CHECK(K >= 1 && K <= E);
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        moe_topk_row(idx + (size_t)n * K, l, E, K);
        moe_weights_row(w + (size_t)n * K, l, idx + (size_t)n * K, E, K, norm);
    }
}

// dlogits (N,E) += from dw (N,K)
static void ref_moe_route_backward(Backend *be, float *dlogits, const float *dw, const float *logits,
                                   const int32_t *idx, int N, int E, int K, int norm) {
    for (int n = 0; n < N; n++)
        moe_weights_backward_row(dlogits + (size_t)n * E, dw + (size_t)n * K, logits + (size_t)n * E,
                                 idx + (size_t)n * K, E, K, norm);
}

static void ref_moe_dispatch(Backend *be, int32_t *offsets, int32_t *slot_token, int32_t *token_slot,
                             int32_t *dropped, const int32_t *idx, int N, int E, int K, int capacity) {
    for (size_t i = 0; i < (size_t)N * K; i++) CHECK_MSG(idx[i] >= 0 && idx[i] < E, "expert %d of %d", idx[i], E);
    moe_dispatch_serial(offsets, slot_token, token_slot, dropped, idx, N, E, K, capacity);
}

// xs (S,C) = x (N,C) at slot_token (S)
static void ref_moe_gather(Backend *be, float *xs, const float *x, const int32_t *slot_token,
                           const int32_t *offsets, int S, int E, int C) {
    int total = offsets[E];
    for (int s = 0; s < S; s++)
        for (int c = 0; c < C; c++)
            xs[(size_t)s * C + c] = s < total ? x[(size_t)slot_token[s] * C + c] : 0.0f;
}

// dx (N,C) += dxs (S,C) at token_slot (N,K)
static void ref_moe_gather_backward(Backend *be, float *dx, const float *dxs, const int32_t *token_slot, int N,
                                    int K, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                int s = token_slot[(size_t)n * K + k];
                if (s >= 0) acc += dxs[(size_t)s * C + c];
            }
            dx[(size_t)n * C + c] = (float)(dx[(size_t)n * C + c] + acc);
        }
}

// The expert of kept slot s: offsets[e] <= s < offsets[e+1].
static int slot_expert(const int32_t *offsets, int E, int s) {
    int e = 0;
    while (e + 1 < E && offsets[e + 1] <= s) e++;
    return e;
}

// out (S,OC) = inp (S,C) w_e^T + bias_e per slot, w (E,OC,C), bias (E,OC) or NULL
static void ref_moe_grouped_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt,
                                           const float *bias, const int32_t *offsets, int S, int E, int C, int OC) {
    int total = offsets[E];
    for (int s = 0; s < S; s++) {
        int e = slot_expert(offsets, E, s);
        for (int o = 0; o < OC; o++) {
            if (s >= total) {
                out[(size_t)s * OC + o] = 0.0f;
                continue;
            }
            double acc = bias ? bias[(size_t)e * OC + o] : 0.0;
            size_t row = ((size_t)e * OC + o) * C;
            for (int c = 0; c < C; c++) acc += (double)inp[(size_t)s * C + c] * ref_wload(w, wdt, row + c);
            out[(size_t)s * OC + o] = (float)acc;
        }
    }
}

// dinp (S,C) += dout w_e ; dw (E,OC,C) += dout^T inp per expert ; dbias (E,OC) += colsum(dout)
static void ref_moe_grouped_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                            const float *inp, const void *w, DType wdt, const int32_t *offsets,
                                            int S, int E, int C, int OC) {
    int total = offsets[E];
    if (dinp)
        for (int s = 0; s < total; s++) {
            int e = slot_expert(offsets, E, s);
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dout[(size_t)s * OC + o] * ref_wload(w, wdt, ((size_t)e * OC + o) * C + c);
                dinp[(size_t)s * C + c] = (float)(dinp[(size_t)s * C + c] + acc);
            }
        }
    for (int e = 0; e < E; e++) {
        int s0 = offsets[e], s1 = offsets[e + 1];
        if (s0 == s1) continue;
        for (int o = 0; o < OC; o++) {
            if (dw)
                for (int c = 0; c < C; c++) {
                    double acc = 0;
                    for (int s = s0; s < s1; s++) acc += (double)dout[(size_t)s * OC + o] * inp[(size_t)s * C + c];
                    float *d = dw + ((size_t)e * OC + o) * C + c;
                    *d = (float)(*d + acc);
                }
            if (dbias) {
                double acc = 0;
                for (int s = s0; s < s1; s++) acc += dout[(size_t)s * OC + o];
                dbias[(size_t)e * OC + o] = (float)(dbias[(size_t)e * OC + o] + acc);
            }
        }
    }
}

// out (N,C) = sum_k w[n,k] ys[token_slot[n,k]]
static void ref_moe_combine_forward(Backend *be, float *out, const float *ys, const float *w,
                                    const int32_t *token_slot, int N, int K, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                int s = token_slot[(size_t)n * K + k];
                if (s >= 0) acc += (double)w[(size_t)n * K + k] * ys[(size_t)s * C + c];
            }
            out[(size_t)n * C + c] = (float)acc;
        }
}

// dys (S,C) += w dout at the slots ; dw (N,K) += dout . ys
static void ref_moe_combine_backward(Backend *be, float *dys, float *dw, const float *dout, const float *ys,
                                     const float *w, const int32_t *token_slot, int N, int K, int C) {
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            int s = token_slot[(size_t)n * K + k];
            if (s < 0) continue;
            const float *g = dout + (size_t)n * C;
            if (dys)
                for (int c = 0; c < C; c++)
                    dys[(size_t)s * C + c] = (float)(dys[(size_t)s * C + c] + (double)w[(size_t)n * K + k] * g[c]);
            if (dw) {
                double acc = 0;
                for (int c = 0; c < C; c++) acc += (double)g[c] * ys[(size_t)s * C + c];
                dw[(size_t)n * K + k] = (float)(dw[(size_t)n * K + k] + acc);
            }
        }
}

// stats (2E+1) += [selections (E), sum of probabilities (E), tokens]
static void ref_moe_aux_stats(Backend *be, float *stats, const float *logits, const int32_t *idx,
                              const int32_t *seg, int N, int E, int K) {
    for (int e = 0; e < E; e++) {
        double cnt = 0, ps = 0;
        for (int n = 0; n < N; n++) {
            if (seg && !seg[n]) continue;
            const float *l = logits + (size_t)n * E;
            ps += exp((double)l[e] - moe_lse_row(l, E));
            for (int k = 0; k < K; k++) cnt += idx[(size_t)n * K + k] == e;
        }
        stats[e] = (float)(stats[e] + cnt);
        stats[E + e] = (float)(stats[E + e] + ps);
    }
    int tokens = 0;
    for (int n = 0; n < N; n++) tokens += !seg || seg[n];
    stats[2 * E] += (float)tokens;
}

static void ref_moe_aux_backward(Backend *be, float *dlogits, const float *logits, const int32_t *seg,
                                 const float *stats, float coef, int N, int E) {
    for (int n = 0; n < N; n++)
        if (!seg || seg[n]) moe_aux_backward_row(dlogits + (size_t)n * E, logits + (size_t)n * E, stats, coef, E);
}

// out (n) = (clamp(up) + 1) * g * sigmoid(alpha g), g = min(gate, limit), from gu (n, 2)
static void ref_swiglu_clamp_forward(Backend *be, float *out, const float *gu, float alpha, float limit, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = fmin(gu[2 * i], limit), u = fmax(fmin(gu[2 * i + 1], limit), -(double)limit);
        out[i] = (float)((u + 1.0) * g / (1.0 + exp(-(double)alpha * g)));
    }
}

// dgu (n, 2) += ; d(g sig(a g))/dg = sig + a g sig (1 - sig); no gradient through an active clamp
static void ref_swiglu_clamp_backward(Backend *be, float *dgu, const float *dout, const float *gu, float alpha,
                                      float limit, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double gate = gu[2 * i], up = gu[2 * i + 1];
        double g = fmin(gate, limit), u = fmax(fmin(up, limit), -(double)limit);
        double s = 1.0 / (1.0 + exp(-(double)alpha * g));
        if (gate <= limit) dgu[2 * i] = (float)(dgu[2 * i] + (double)dout[i] * (u + 1.0) * (s + alpha * g * s * (1.0 - s)));
        if (up >= -limit && up <= limit) dgu[2 * i + 1] = (float)(dgu[2 * i + 1] + (double)dout[i] * g * s);
    }
}

void backend_ref_install_moe(Backend *be) {
    be->moe_route_forward = ref_moe_route_forward;
    be->moe_route_backward = ref_moe_route_backward;
    be->moe_dispatch = ref_moe_dispatch;
    be->moe_gather = ref_moe_gather;
    be->moe_gather_backward = ref_moe_gather_backward;
    be->moe_grouped_matmul_forward = ref_moe_grouped_matmul_forward;
    be->moe_grouped_matmul_backward = ref_moe_grouped_matmul_backward;
    be->moe_combine_forward = ref_moe_combine_forward;
    be->moe_combine_backward = ref_moe_combine_backward;
    be->moe_aux_stats = ref_moe_aux_stats;
    be->moe_aux_backward = ref_moe_aux_backward;
    be->swiglu_clamp_forward = ref_swiglu_clamp_forward;
    be->swiglu_clamp_backward = ref_swiglu_clamp_backward;
}
