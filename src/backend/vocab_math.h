// vocab_math.h: the per-row arithmetic of the vocabulary-parallel ops (backend.h, "vocabulary
// shards"): one row of logits of a shard of the vocabulary, its statistics, and the gradient
// once the statistics of every shard are combined (src/model/vocab_head.c). Shared by every
// backend, so that a shard's statistics are the same bits on ref, cpu and cuda (one thread per
// row there); backends include it; it defines nothing else.
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

// st (VOCAB_STATS) of z (V); tgt is the target's index in the shard (outside [0, V): not here).
VOCAB_FN void vocab_row_stats(float *st, const float *z, int V, int tgt, float tau, int lo) {
    float m = -INFINITY;
    int arg = 0;
    for (int j = 0; j < V; j++) {
        float x = z[j] / tau;
        if (x > m) m = x, arg = j;
    }
    double sum = 0, sx = 0, s2 = 0, xs = 0;
    for (int j = 0; j < V; j++) {
        float x = z[j] / tau;
        xs += x;
        if (x == -INFINITY) continue;
        double e = exp((double)x - (double)m);
        sum += e;
        sx += e * x;
        s2 += e * e;
    }
    int has = tgt >= 0 && tgt < V;
    st[VS_MAX] = m;
    st[VS_SUM] = (float)sum;
    st[VS_SX] = (float)sx;
    st[VS_S2] = (float)s2;
    st[VS_XSUM] = (float)xs;
    st[VS_TGT] = has ? z[tgt] / tau : 0.0f;
    st[VS_HAS] = (float)has;
    st[VS_ARG] = (float)(lo + arg);
}

// The derivative of the soft-cap y = cap tanh(u / cap) from y: 1 - (y / cap)^2 (1 without a cap).
VOCAB_FN float vocab_cap_grad(float y, float softcap) {
    if (!(softcap > 0)) return 1.0f;
    float r = y / softcap;
    return 1.0f - r * r;
}

// z (V) -> dz in place: coef (softmax(z / tau)_j - [j == tgt]) / tau through the soft-cap, with
// lse the logsumexp of the whole row at tau. coef 0: zeros.
VOCAB_FN void vocab_row_grad(float *z, int V, int tgt, float tau, double lse, double coef, float softcap) {
    for (int j = 0; j < V; j++) {
        if (coef == 0) {
            z[j] = 0.0f;
            continue;
        }
        double x = (double)(z[j] / tau), p = x == -INFINITY ? 0.0 : exp(x - lse);
        z[j] = (float)(coef * (p - (j == tgt)) / tau) * vocab_cap_grad(z[j], softcap);
    }
}

// The log of the mixture (1 - beta) p + beta q from s = log p, t = log q (0 < beta < 1).
VOCAB_FN double vocab_mix(double s, double t, double beta) {
    double x = s + log1p(-beta), y = t + log(beta), mx = fmax(x, y);
    return mx + log(exp(x - mx) + exp(y - mx));
}

// The shard's share of the generalized JSD of student zs and teacher zt (V) at tau, with la, lb
// the whole rows' logsumexps at tau (backend.h distill_head): *L += the divergence's terms,
// *K += sum p (s - m) (0 < beta < 1).
VOCAB_FN void vocab_row_jsd(double *L, double *K, const float *zs, const float *zt, int V, double tau, double beta,
                            double la, double lb) {
    for (int j = 0; j < V; j++) {
        if (zs[j] == -INFINITY) continue;
        double s = zs[j] / tau - la, t = zt[j] / tau - lb, p = exp(s), q = exp(t);
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
}

// zs (V) -> gscale d jsd / d zs in place (through the student's soft-cap), L and K the whole row's.
VOCAB_FN void vocab_row_jsd_grad(float *zs, const float *zt, int V, double tau, double beta, double la, double lb,
                                 double L, double K, double gscale, float softcap) {
    for (int j = 0; j < V; j++) {
        if (zs[j] == -INFINITY || gscale == 0) {
            zs[j] = 0.0f;
            continue;
        }
        double s = zs[j] / tau - la, t = zt[j] / tau - lb, p = exp(s), q = exp(t), d;
        if (beta == 0) d = p - q;
        else if (beta == 1) d = p * (s - t - L);
        else d = (1 - beta) * p * (s - vocab_mix(s, t, beta) - K);
        zs[j] = (float)(gscale * d / tau) * vocab_cap_grad(zs[j], softcap);
    }
}

#endif
