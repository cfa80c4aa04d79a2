// vocab_math.h: the per-row arithmetic of the vocabulary-parallel ops (backend.h, "vocabulary
// shards"): one row of logits of a shard of the vocabulary, its statistics, and the gradient
// once the statistics of every shard are combined (src/model/vocab_head.c). Shared by every
// backend: the gradients are elementwise (vocab_*_elem, the same bits everywhere, one CUDA thread
// per element), the statistics sums in double (a CUDA block per row sums in another order: the
// same floats but for a last-bit rounding of the double); backends include it; it defines
// nothing else.
#ifndef STILL_VOCAB_MATH_H
#define STILL_VOCAB_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define VOCAB_FN static inline __host__ __device__
#else
#define VOCAB_FN static inline
#endif

// Statistics of a row z (V) of one shard at temperature tau, x = z / tau (fp32), m = max x:
enum {
    VS_MAX = 0,   // m (-inf for an empty row)
    VS_SUM = 1,   // sum exp(x - m)
    VS_SX = 2,    // sum exp(x - m) x                   (entropy)
    VS_S2 = 3,    // sum exp(2 (x - m))                  (log sum p^2)
    VS_XSUM = 4,  // sum x                               (mean logit)
    VS_TGT = 5,   // x[tgt] when the target is in the shard, else 0
    VS_HAS = 6,   // 1 when it is
    VS_ARG = 7,   // the shard's first index of m, plus the shard's first id
    VOCAB_STATS = 8
};

// Per-row values the gradient ops read (rows (M, VOCAB_ROW)).
enum {
    VR_LSE = 0,   // logsumexp of the whole row at tau (the student's in a distillation)
    VR_LSE_T = 1, // the teacher's
    VR_L = 2,     // the row's divergence (jsd)
    VR_K = 3,     // sum p (s - m) of the mixture (0 < beta < 1)
    VR_COEF = 4,  // what multiplies the row's gradient (0: the row's gradient is 0)
    VOCAB_ROW = 5
};

// One element x = z_j / tau of a row whose maximum is m, added to the sums a[4]: sum exp(x - m),
// sum exp(x - m) x, sum exp(2 (x - m)), sum x.
VOCAB_FN void vocab_stats_elem(double *a, float x, float m) {
    a[3] += x;
    if (x == -INFINITY) return;
    double e = exp((double)x - (double)m);
    a[0] += e;
    a[1] += e * x;
    a[2] += e * e;
}

// st (VOCAB_STATS) from the row's maximum m at its first index arg, the sums a of
// vocab_stats_elem, and z (V); tgt is the target's index in the shard (outside [0, V): not here).
VOCAB_FN void vocab_stats_store(float *st, float m, int arg, const double *a, const float *z, int V, int tgt, float tau,
                                int lo) {
    int has = tgt >= 0 && tgt < V;
    st[VS_MAX] = m;
    st[VS_SUM] = (float)a[0];
    st[VS_SX] = (float)a[1];
    st[VS_S2] = (float)a[2];
    st[VS_XSUM] = (float)a[3];
    st[VS_TGT] = has ? z[tgt] / tau : 0.0f;
    st[VS_HAS] = (float)has;
    st[VS_ARG] = (float)(lo + arg);
}

// st (VOCAB_STATS) of z (V), the elements in order.
VOCAB_FN void vocab_row_stats(float *st, const float *z, int V, int tgt, float tau, int lo) {
    float m = -INFINITY;
    int arg = 0;
    for (int j = 0; j < V; j++) {
        float x = z[j] / tau;
        if (x > m) m = x, arg = j;
    }
    double a[4] = {0, 0, 0, 0};
    for (int j = 0; j < V; j++) vocab_stats_elem(a, z[j] / tau, m);
    vocab_stats_store(st, m, arg, a, z, V, tgt, tau, lo);
}

// The derivative of the soft-cap y = cap tanh(u / cap) from y: 1 - (y / cap)^2 (1 without a cap).
VOCAB_FN float vocab_cap_grad(float y, float softcap) {
    if (!(softcap > 0)) return 1.0f;
    float r = y / softcap;
    return 1.0f - r * r;
}

// Element j of a row's gradient from its logit zj: coef (softmax(z / tau)_j - [j == tgt]) / tau
// through the soft-cap, with lse the logsumexp of the whole row at tau. coef 0: 0.
VOCAB_FN float vocab_grad_elem(float zj, int j, int tgt, float tau, double lse, double coef, float softcap) {
    if (coef == 0) return 0.0f;
    double x = (double)(zj / tau), p = x == -INFINITY ? 0.0 : exp(x - lse);
    return (float)(coef * (p - (j == tgt)) / tau) * vocab_cap_grad(zj, softcap);
}

// z (V) -> dz in place (vocab_grad_elem).
VOCAB_FN void vocab_row_grad(float *z, int V, int tgt, float tau, double lse, double coef, float softcap) {
    for (int j = 0; j < V; j++) z[j] = vocab_grad_elem(z[j], j, tgt, tau, lse, coef, softcap);
}

// The log of the mixture (1 - beta) p + beta q from s = log p, t = log q (0 < beta < 1).
VOCAB_FN double vocab_mix(double s, double t, double beta) {
    double x = s + log1p(-beta), y = t + log(beta), mx = fmax(x, y);
    return mx + log(exp(x - mx) + exp(y - mx));
}

// One element's terms of the generalized JSD of student zs and teacher zt at tau, with la, lb the
// whole rows' logsumexps at tau (backend.h distill_head): *L += the divergence's term, *K += p (s
// - m) (0 < beta < 1).
VOCAB_FN void vocab_jsd_elem(double *L, double *K, float zs, float zt, double tau, double beta, double la, double lb) {
    if (zs == -INFINITY) return;
    double s = zs / tau - la, t = zt / tau - lb, p = exp(s), q = exp(t);
    if (beta == 0) {
        *L += q * (t - s);
    } else if (beta == 1) {
        *L += p * (s - t);
    } else {
        double m = vocab_mix(s, t, beta);
        *L += beta * q * (t - m) + (1 - beta) * p * (s - m);
        *K += p * (s - m);
    }
}

// The shard's share of a row (V): vocab_jsd_elem over its elements in order.
VOCAB_FN void vocab_row_jsd(double *L, double *K, const float *zs, const float *zt, int V, double tau, double beta,
                            double la, double lb) {
    for (int j = 0; j < V; j++) vocab_jsd_elem(L, K, zs[j], zt[j], tau, beta, la, lb);
}

// Element j of gscale d jsd / d zs (through the student's soft-cap), L and K the whole row's.
VOCAB_FN float vocab_jsd_grad_elem(float zs, float zt, double tau, double beta, double la, double lb, double L,
                                   double K, double gscale, float softcap) {
    if (zs == -INFINITY || gscale == 0) return 0.0f;
    double s = zs / tau - la, t = zt / tau - lb, p = exp(s), q = exp(t), d;
    if (beta == 0) d = p - q;
    else if (beta == 1) d = p * (s - t - L);
    else d = (1 - beta) * p * (s - vocab_mix(s, t, beta) - K);
    return (float)(gscale * d / tau) * vocab_cap_grad(zs, softcap);
}

// zs (V) -> the gradient in place (vocab_jsd_grad_elem).
VOCAB_FN void vocab_row_jsd_grad(float *zs, const float *zt, int V, double tau, double beta, double la, double lb,
                                 double L, double K, double gscale, float softcap) {
    for (int j = 0; j < V; j++) zs[j] = vocab_jsd_grad_elem(zs[j], zt[j], tau, beta, la, lb, L, K, gscale, softcap);
}

#endif
