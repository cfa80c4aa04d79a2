// ref_heads.c: the reference distillation and RL heads (backend.h, docs/heads.md), the spec. One
// row at a time: the row's fp32 logits live in scratch, every sum is a double.
#include "../heads_math.h"
#include "ref.h"

#include <math.h>
#include <string.h>

#include "../../core/alloc.h"

// z (V) = fp32 logits of one hidden row h (C) against W (V,C).
static void row_logits(float *z, const float *h, const void *W, DType wdt, int C, int V) {
    for (int v = 0; v < V; v++) {
        double acc = 0;
        for (int c = 0; c < C; c++) acc += (double)h[c] * ref_wload(W, wdt, (size_t)v * C + c);
        z[v] = (float)acc;
    }
}

// Final-logit soft-capping of a row in place (cap > 0; 0 = off), in double.
static void row_cap(float *z, int V, double cap) {
    if (cap > 0)
        for (int v = 0; v < V; v++) z[v] = (float)(cap * tanh(z[v] / cap));
}

// The chain rule through the soft-cap: dz (V) *= 1 - (zc / cap)^2, zc the capped logits.
static void row_cap_grad(float *dz, const float *zc, int V, double cap) {
    if (cap > 0)
        for (int v = 0; v < V; v++) {
            double t = zc[v] / cap;
            dz[v] = (float)(dz[v] * (1.0 - t * t));
        }
}

// logsumexp of z (V) / tau over its finite entries.
static double lse_scaled(const float *z, int V, double tau) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++)
        if (z[v] != -INFINITY && z[v] / tau > mx) mx = z[v] / tau;
    for (int v = 0; v < V; v++)
        if (z[v] != -INFINITY) sum += exp(z[v] / tau - mx);
    return mx + log(sum);
}

// dh (C) += dz (V) W ; dW (V,C) += dz^T h (when dW != NULL).
static void row_backward(float *dh, float *dW, const float *dz, const float *h, const void *W, DType wdt, int C,
                         int V) {
    for (int c = 0; c < C; c++) {
        double acc = 0;
        for (int v = 0; v < V; v++) acc += (double)dz[v] * ref_wload(W, wdt, (size_t)v * C + c);
        dh[c] = (float)(dh[c] + acc);
    }
    if (dW)
        for (int v = 0; v < V; v++) {
            float *dWv = dW + (size_t)v * C;
            for (int c = 0; c < C; c++) dWv[c] = (float)(dWv[c] + (double)dz[v] * h[c]);
        }
}

// h (N,C), W (V,C), targets (N), coef (N) or NULL -> row_logp, row_entropy (N); dh +=, dW += (see backend.h)
static void ref_logprob_head_cap(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh,
                                 float *dW, const float *h, const void *W, DType wdt, const int32_t *targets,
                                 const float *coef, float tau, float softcap, float *scratch, int chunk, int N, int C,
                                 int V) {
    CHECK(chunk >= 1 && V >= 1 && tau > 0 && softcap >= 0);
    CHECK_MSG(!coef || dh, "logprob_head: coef given without dh");
    float *z = scratch;                                       // (V)
    float *zc = softcap > 0 ? xmalloc((size_t)V * 4) : NULL;  // (V) the capped logits, for the backward pass
    for (int r = 0; r < N; r++) {
        int tgt = targets[r];
        if (tgt == IGNORE_INDEX) {
            if (row_logp) row_logp[r] = 0.0f;
            if (row_entropy) row_entropy[r] = 0.0f;
            if (row_stats) memset(row_stats + (size_t)r * LOGPROB_STATS, 0, LOGPROB_STATS * sizeof(float));
            continue;
        }
        CHECK_MSG(tgt >= 0 && tgt < V, "target %d at row %d outside the vocabulary (%d)", tgt, r, V);
        const float *hr = h + (size_t)r * C;
        row_logits(z, hr, W, wdt, C, V);
        row_cap(z, V, softcap);
        if (zc) memcpy(zc, z, (size_t)V * 4);
        double lse = lse_scaled(z, V, tau), pa = 0;
        for (int v = 0; v < V; v++) pa += exp(z[v] / tau - lse) * (z[v] / tau);
        if (row_logp) row_logp[r] = (float)(z[tgt] / tau - lse);
        if (row_entropy) row_entropy[r] = (float)(lse - pa);
        if (row_stats) {
            double zs = 0, mx2 = -INFINITY, s2 = 0;
            int amax = 0;
            for (int v = 0; v < V; v++) {
                zs += z[v] / tau;
                if (z[v] / tau > z[amax] / tau) amax = v;  // on the scaled fp32 logits, as cpu
                if (2.0 * z[v] / tau > mx2) mx2 = 2.0 * z[v] / tau;
            }
            for (int v = 0; v < V; v++) s2 += exp(2.0 * z[v] / tau - mx2);
            float *st = row_stats + (size_t)r * LOGPROB_STATS;
            st[LOGPROB_STAT_ZMEAN] = (float)(zs / V);
            st[LOGPROB_STAT_CORRECT] = amax == tgt ? 1.0f : 0.0f;
            st[LOGPROB_STAT_LSE2] = (float)(mx2 + log(s2) - 2 * lse);
        }
        if (!coef || coef[r] == 0.0f) continue;
        double g = coef[r] / (double)tau;
        for (int v = 0; v < V; v++) z[v] = (float)(g * ((v == tgt) - exp(z[v] / tau - lse)));
        row_cap_grad(z, zc, V, softcap);
        row_backward(dh + (size_t)r * C, dW, z, hr, W, wdt, C, V);
    }
    free(zc);
}

static void ref_logprob_head(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                             const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef,
                             float tau, float *scratch, int chunk, int N, int C, int V) {
    ref_logprob_head_cap(be, row_logp, row_entropy, row_stats, dh, dW, h, W, wdt, targets, coef, tau, 0.0f, scratch,
                         chunk, N, C, V);
}

// The generalized JSD of one row and, with grad, gscale * d jsd / d zs written over zs. zs, zt (V)
// fp32 logits at temperature 1 with entries outside the support at -inf.
static double jsd_row(float *zs, const float *zt, int V, double tau, double beta, int grad, double gscale) {
    double la = lse_scaled(zs, V, tau), lb = lse_scaled(zt, V, tau);
    double lb1 = log(beta), la1 = log1p(-beta);  // beta in (0, 1) only
    double L = 0, K = 0;  // K = sum p (s - m) (mixture) or the reverse KL itself
    for (int v = 0; v < V; v++) {
        if (zs[v] == -INFINITY) continue;
        double s = zs[v] / tau - la, t = zt[v] / tau - lb, p = exp(s), q = exp(t);
        if (beta == 0) {
            L += q * (t - s);
        } else if (beta == 1) {
            L += p * (s - t);
        } else {
            double x = s + la1, y = t + lb1, mx = fmax(x, y);
            double m = mx + log(exp(x - mx) + exp(y - mx));
            L += beta * q * (t - m) + (1 - beta) * p * (s - m);
            K += p * (s - m);
        }
    }
    if (!grad) return L;
    for (int v = 0; v < V; v++) {
        if (zs[v] == -INFINITY) {
            zs[v] = 0.0f;
            continue;
        }
        double s = zs[v] / tau - la, t = zt[v] / tau - lb, p = exp(s), q = exp(t), d;
        if (beta == 0) {
            d = p - q;
        } else if (beta == 1) {
            d = p * (s - t - L);
        } else {
            double x = s + la1, y = t + lb1, mx = fmax(x, y);
            double m = mx + log(exp(x - mx) + exp(y - mx));
            d = (1 - beta) * p * (s - m - K);
        }
        zs[v] = (float)(gscale * d / tau);
    }
    return L;
}

// KL(softmax(zs) || softmax(zt)) over the whole vocabulary.
static double kl_row(const float *zs, const float *zt, int V) {
    double la = lse_scaled(zs, V, 1.0), lb = lse_scaled(zt, V, 1.0), kl = 0;
    for (int v = 0; v < V; v++) {
        double s = zs[v] - la, t = zt[v] - lb;
        kl += exp(s) * (s - t);
    }
    return kl;
}

// student h_s (N,Cs) W_s, teacher h_t (N,Ct) W_t -> row_loss, row_kl (N); dh_s +=, dW_s += (see backend.h)
static void ref_distill_head_cap(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s,
                                 const float *h_s, const void *W_s, DType wdt_s, const float *h_t, const void *W_t,
                                 DType wdt_t, const int32_t *targets, const float *weights, float tau, float beta,
                                 int top_k, float grad_scale, float softcap_s, float softcap_t, float *scratch_s,
                                 float *scratch_t, int chunk, int N, int Cs, int Ct, int V) {
    CHECK(chunk >= 1 && V >= 1 && tau > 0 && beta >= 0 && beta <= 1 && top_k >= 0 && softcap_s >= 0 && softcap_t >= 0);
    float *zs = scratch_s, *zt = scratch_t;                     // (V) each
    float *zc = softcap_s > 0 ? xmalloc((size_t)V * 4) : NULL;  // (V) the student's capped logits
    for (int r = 0; r < N; r++) {
        if (targets[r] == IGNORE_INDEX) {
            if (row_loss) row_loss[r] = 0.0f;
            if (row_kl) row_kl[r] = 0.0f;
            continue;
        }
        const float *hs = h_s + (size_t)r * Cs;
        row_logits(zs, hs, W_s, wdt_s, Cs, V);
        row_logits(zt, h_t + (size_t)r * Ct, W_t, wdt_t, Ct, V);
        row_cap(zs, V, softcap_s);
        row_cap(zt, V, softcap_t);
        if (zc) memcpy(zc, zs, (size_t)V * 4);
        if (row_kl) row_kl[r] = (float)kl_row(zs, zt, V);
        heads_topk_mask(zs, zt, V, top_k);
        double w = weights ? weights[r] : 1.0;
        double L = jsd_row(zs, zt, V, tau, beta, dh_s != NULL, (double)grad_scale * w);
        if (row_loss) row_loss[r] = (float)(w * L);
        if (!dh_s) continue;
        row_cap_grad(zs, zc, V, softcap_s);
        row_backward(dh_s + (size_t)r * Cs, dW_s, zs, hs, W_s, wdt_s, Cs, V);
    }
    free(zc);
}

static void ref_distill_head(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                             const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                             const int32_t *targets, const float *weights, float tau, float beta, int top_k,
                             float grad_scale, float *scratch_s, float *scratch_t, int chunk, int N, int Cs, int Ct,
                             int V) {
    ref_distill_head_cap(be, row_loss, row_kl, dh_s, dW_s, h_s, W_s, wdt_s, h_t, W_t, wdt_t, targets, weights, tau,
                         beta, top_k, grad_scale, 0.0f, 0.0f, scratch_s, scratch_t, chunk, N, Cs, Ct, V);
}

// h (N,C), W (NL,C), rows (B) -> scores (B,NL); dh, dW += from dscores (see backend.h)
static void ref_score_head(Backend *be, float *scores, float *dh, float *dW, const float *h, const void *W, DType wdt,
                           const int32_t *rows, const float *dscores, int B, int N, int C, int NL) {
    CHECK_MSG(!dscores || dh, "score_head: dscores given without dh");
    for (int b = 0; b < B; b++) {
        CHECK_MSG(rows[b] >= 0 && rows[b] < N, "score_head: pooled row %d of sequence %d outside [0, %d)", rows[b], b, N);
        const float *hr = h + (size_t)rows[b] * C;
        for (int k = 0; k < NL && scores; k++) {
            double acc = 0;
            for (int c = 0; c < C; c++) acc += (double)hr[c] * ref_wload(W, wdt, (size_t)k * C + c);
            scores[(size_t)b * NL + k] = (float)acc;
        }
        if (!dscores) continue;
        const float *g = dscores + (size_t)b * NL;
        float *dhr = dh + (size_t)rows[b] * C;
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int k = 0; k < NL; k++) acc += (double)g[k] * ref_wload(W, wdt, (size_t)k * C + c);
            dhr[c] = (float)(dhr[c] + acc);
        }
        for (int k = 0; dW && k < NL; k++)
            for (int c = 0; c < C; c++) dW[(size_t)k * C + c] = (float)(dW[(size_t)k * C + c] + (double)g[k] * hr[c]);
    }
}

void backend_ref_install_heads(Backend *be) {
    be->score_head = ref_score_head;
    be->logprob_head = ref_logprob_head;
    be->distill_head = ref_distill_head;
    be->logprob_head_cap = ref_logprob_head_cap;
    be->distill_head_cap = ref_distill_head_cap;
}
