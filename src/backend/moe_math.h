// moe_math.h: the per-token arithmetic of the mixture-of-experts ops (backend.h, "mixture of
// experts") that every backend shares: sort-free top-k, the routing weights and their backward,
// the load-balancing gradient of one token, and the serial counting sort of moe_dispatch.
// Backends include it; it defines nothing else.
#ifndef STILL_MOE_MATH_H
#define STILL_MOE_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOE_FN static inline __host__ __device__
#else
#define MOE_FN static inline
#endif

// (a, ia) ranks before (b, ib): the larger logit, the smaller index on equal logits.
MOE_FN int moe_before(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// idx (K) = the K first experts of row l (E) in that order, by K passes of an argmax that skips
// what an earlier pass took (each pass keeps the best entry ranking after the previous pick):
// O(K E), no sort and no scratch.
MOE_FN void moe_topk_row(int32_t *idx, const float *l, int E, int K) {
    float pv = INFINITY;
    int pi = -1;
    for (int k = 0; k < K; k++) {
        int bi = -1;
        float bv = -INFINITY;
        for (int e = 0; e < E; e++) {
            if (pi >= 0 && !moe_before(pv, pi, l[e], e)) continue;  // taken by an earlier pass
            if (bi < 0 || moe_before(l[e], e, bv, bi)) bv = l[e], bi = e;
        }
        idx[k] = bi;
        pv = bv, pi = bi;
    }
}

// Row maximum and log-sum-exp of l (E) in double.
MOE_FN double moe_lse_row(const float *l, int E) {
    double m = -INFINITY, s = 0;
    for (int e = 0; e < E; e++) m = fmax(m, (double)l[e]);
    for (int e = 0; e < E; e++) s += exp((double)l[e] - m);
    return m + log(s);
}

// w (K) = the routing weights of idx (K) (backend.h moe_route_forward).
MOE_FN void moe_weights_row(float *w, const float *l, const int32_t *idx, int E, int K, int norm) {
    if (norm) {
        double m = l[idx[0]], s = 0;  // idx[0] holds the row maximum
        for (int k = 0; k < K; k++) s += exp((double)l[idx[k]] - m);
        for (int k = 0; k < K; k++) w[k] = (float)(exp((double)l[idx[k]] - m) / s);
    } else {
        double lse = moe_lse_row(l, E);
        for (int k = 0; k < K; k++) w[k] = (float)exp((double)l[idx[k]] - lse);
    }
}

// dl (E) += the gradient of the weights of idx (K) applied to dw (K).
MOE_FN void moe_weights_backward_row(float *dl, const float *dw, const float *l, const int32_t *idx, int E, int K,
                                     int norm) {
    if (norm) {  // w = softmax of the selected logits: dl_k = w_k (dw_k - w . dw)
        double m = l[idx[0]], s = 0, dot = 0;
        for (int k = 0; k < K; k++) s += exp((double)l[idx[k]] - m);
        for (int k = 0; k < K; k++) dot += exp((double)l[idx[k]] - m) / s * dw[k];
        for (int k = 0; k < K; k++) {
            double wk = exp((double)l[idx[k]] - m) / s;
            dl[idx[k]] = (float)(dl[idx[k]] + wk * (dw[k] - dot));
        }
    } else {  // w_k = p[idx_k]: dl_j = p_j ([j = idx_k] dw_k - sum_k w_k dw_k)
        double lse = moe_lse_row(l, E), dot = 0;
        for (int k = 0; k < K; k++) dot += exp((double)l[idx[k]] - lse) * dw[k];
        for (int e = 0; e < E; e++) {
            double g = -dot;
            for (int k = 0; k < K; k++)
                if (idx[k] == e) g += dw[k];
            dl[e] = (float)(dl[e] + exp((double)l[e] - lse) * g);
        }
    }
}

// dl (E) += coef p_j (g_j - p . g), p = softmax(l), g_e = E stats[e] / M^2 (moe_aux_backward).
MOE_FN void moe_aux_backward_row(float *dl, const float *l, const float *stats, float coef, int E) {
    double M = stats[2 * E];
    if (M <= 0) return;
    double lse = moe_lse_row(l, E), pg = 0, gs = (double)E / (M * M);
    for (int e = 0; e < E; e++) pg += exp((double)l[e] - lse) * stats[e] * gs;
    for (int e = 0; e < E; e++) {
        double p = exp((double)l[e] - lse);
        dl[e] = (float)(dl[e] + coef * p * (stats[e] * gs - pg));
    }
}

// moe_dispatch on one thread (backend.h): counts in offsets[e+1], kept slots marked 0 in
// token_slot, the prefix sum, then slots handed out from each expert's end walking the tokens
// backwards (so they come out in ascending token order), which leaves offsets[e+1] at the start
// of expert e: the array shifts down by one.
MOE_FN void moe_dispatch_serial(int32_t *offsets, int32_t *slot_token, int32_t *token_slot, int32_t *dropped,
                                const int32_t *idx, int N, int E, int K, int capacity) {
    int S = N * K, lost = 0;
    for (int e = 0; e <= E; e++) offsets[e] = 0;
    for (int s = 0; s < S; s++) slot_token[s] = -1;
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
            int e = idx[(size_t)n * K + k];
            int keep = capacity <= 0 || offsets[e + 1] < capacity;
            token_slot[(size_t)n * K + k] = keep ? 0 : -1;
            if (keep) offsets[e + 1]++;
            else lost++;
        }
    for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
    int total = offsets[E];
    for (int n = N - 1; n >= 0; n--)
        for (int k = K - 1; k >= 0; k--) {
            size_t i = (size_t)n * K + k;
            if (token_slot[i] < 0) continue;
            int s = --offsets[idx[i] + 1];
            token_slot[i] = s;
            slot_token[s] = n;
        }
    for (int e = 0; e < E; e++) offsets[e] = offsets[e + 1];
    offsets[E] = total;
    if (dropped) *dropped = lost;
}

#endif
