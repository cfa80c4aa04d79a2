// cpu_heads.c: the distillation and RL heads (backend.h, docs/heads.md) on the CPU. As in
// cpu_loss.c, rows whose target is IGNORE_INDEX are skipped before any arithmetic and the others
// are gathered `chunk` at a time into the caller's scratch, (chunk, V) logits then (chunk, C)
// hidden rows: Z = Hg W^T (sgemm) -> per-row statistics and dZ in place (rows in parallel) ->
// dW += dZ^T Hg -> Hg = dZ W -> dh rows += Hg (scatter).
#include "../heads_math.h"
#include "cpu.h"

#include <math.h>
#include <omp.h>

// Gather the next up-to-`chunk` rows of targets (N) that are not IGNORE_INDEX, starting at *r,
// into idx; rows skipped on the way get 0 in out0 / out1 (each may be NULL). Returns the count.
static int gather_rows(int32_t *idx, int *r, const int32_t *targets, int N, int V, int chunk, float *out0,
                       float *out1) {
    int M = 0;
    for (; *r < N && M < chunk; (*r)++) {
        int tgt = targets[*r];
        if (tgt == IGNORE_INDEX) {
            if (out0) out0[*r] = 0.0f;
            if (out1) out1[*r] = 0.0f;
            continue;
        }
        CHECK_MSG(tgt >= 0 && tgt < V, "target %d at row %d outside the vocabulary (%d)", tgt, *r, V);
        idx[M++] = *r;
    }
    return M;
}

static void copy_rows(Backend *be, float *dst, const float *src, const int32_t *idx, int M, int C) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)M * C > 65536)
    for (int i = 0; i < M; i++) memcpy(dst + (size_t)i * C, src + (size_t)idx[i] * C, (size_t)C * sizeof(float));
}

// dW (V,C) += dZ^T Hg (when dW != NULL); then dh rows idx += dZ W, through Hg (overwritten).
static void head_backward(Backend *be, float *dh, float *dW, const float *dZ, float *Hg, const void *W, DType wdt,
                          const int32_t *idx, int M, int C, int V) {
    if (dW) cpu_matmul_backward(be, NULL, dW, NULL, dZ, Hg, W, wdt, M, C, V);
    memset(Hg, 0, (size_t)M * C * sizeof(float));
    cpu_matmul_backward(be, Hg, NULL, NULL, dZ, NULL, W, wdt, M, C, V);
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)M * C > 65536)
    for (int i = 0; i < M; i++) {
        float *d = dh + (size_t)idx[i] * C;
        const float *g = Hg + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}

static float row_max(const float *z, int V) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
    return mx;
}

// logsumexp of z (V) (entries at -inf count 0).
static double row_lse(const float *z, int V) {
    float mx = row_max(z, V);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; j++) sum += cpu_expf(z[j] - mx);
    return mx + log(sum);
}

// ---------------------------------------------------------------- logprob_head
// One row z (V) of raw logits: logp, entropy and the row statistics (backend.h) at tau; with
// want_grad, z becomes dz = g (onehot(tgt) - softmax(z / tau)).
static void logprob_row(float *z, int V, int tgt, float tau, int want_grad, float g, float *logp, float *entropy,
                        float *stats) {
#pragma omp simd
    for (int j = 0; j < V; j++) z[j] = z[j] / tau;
    float mx = row_max(z, V), zt = z[tgt];
    if (stats) {
        double zs = 0;
        int amax = 0;
        for (int j = 0; j < V; j++) {
            zs += z[j];
            if (z[j] > z[amax]) amax = j;
        }
        stats[LOGPROB_STAT_ZMEAN] = (float)(zs / V);
        stats[LOGPROB_STAT_CORRECT] = amax == tgt ? 1.0f : 0.0f;
    }
    double sum = 0, sz = 0, s2 = 0;
#pragma omp simd reduction(+ : sum, sz, s2)
    for (int j = 0; j < V; j++) {
        float e = cpu_expf(z[j] - mx);
        sum += e;
        sz += (double)e * z[j];
        s2 += (double)e * e;
        z[j] = e;
    }
    double lse = mx + log(sum);
    if (logp) *logp = (float)(zt - lse);
    if (entropy) *entropy = (float)(lse - sz / sum);
    if (stats) stats[LOGPROB_STAT_LSE2] = (float)(log(s2) - 2 * log(sum));
    if (want_grad) {
        float s = (float)(-g / sum);
#pragma omp simd
        for (int j = 0; j < V; j++) z[j] *= s;
        z[tgt] += g;
    }
}

static void cpu_logprob_head_cap(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh,
                                 float *dW, const float *h, const void *W, DType wdt, const int32_t *targets,
                                 const float *coef, float tau, float softcap, float *scratch, int chunk, int N, int C,
                                 int V) {
    CHECK(chunk >= 1 && V >= 1 && tau > 0 && softcap >= 0);
    float *G = cpu_cap_scratch(be, softcap, V);  // (threads, V) soft-cap derivatives
    CHECK_MSG(!coef || dh, "logprob_head: coef given without dh");
    int32_t *idx = cpu_scratch(be, CPU_SCR_INDEX, (size_t)chunk * sizeof(int32_t));
    float *Z = scratch, *Hg = scratch + (size_t)chunk * V;
    int r = 0;
    while (r < N) {
        int r0 = r;
        int M = gather_rows(idx, &r, targets, N, V, chunk, row_logp, row_entropy);
        if (row_stats)  // rows skipped on the way: 0
            for (int k = r0; k < r; k++)
                if (targets[k] == IGNORE_INDEX) memset(row_stats + (size_t)k * LOGPROB_STATS, 0, LOGPROB_STATS * sizeof(float));
        if (M == 0) continue;
        copy_rows(be, Hg, h, idx, M, C);
        cpu_matmul_forward(be, Z, Hg, W, wdt, NULL, M, C, V);
#pragma omp parallel for schedule(static) num_threads(be->threads) if (M > 1)
        for (int i = 0; i < M; i++) {
            int row = idx[i];
            float *z = Z + (size_t)i * V, *g = G ? G + (size_t)omp_get_thread_num() * V : NULL;
            if (g) cpu_cap_row(z, coef ? g : NULL, V, softcap);
            logprob_row(z, V, targets[row], tau, coef != NULL, coef ? coef[row] / tau : 0.0f,
                        row_logp ? row_logp + row : NULL, row_entropy ? row_entropy + row : NULL,
                        row_stats ? row_stats + (size_t)row * LOGPROB_STATS : NULL);
            if (g && coef)
#pragma omp simd
                for (int j = 0; j < V; j++) z[j] *= g[j];
        }
        if (coef) head_backward(be, dh, dW, Z, Hg, W, wdt, idx, M, C, V);
    }
}

static void cpu_logprob_head(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                             const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef,
                             float tau, float *scratch, int chunk, int N, int C, int V) {
    cpu_logprob_head_cap(be, row_logp, row_entropy, row_stats, dh, dW, h, W, wdt, targets, coef, tau, 0.0f, scratch,
                         chunk, N, C, V);
}

// ---------------------------------------------------------------- distill_head
// KL(softmax(zs) || softmax(zt)) of one row over the whole vocabulary.
static double kl_row(const float *zs, const float *zt, int V) {
    float ls = (float)row_lse(zs, V), lt = (float)row_lse(zt, V);
    double kl = 0;
#pragma omp simd reduction(+ : kl)
    for (int j = 0; j < V; j++) {
        float s = zs[j] - ls;
        kl += (double)cpu_expf(s) * (s - (zt[j] - lt));
    }
    return kl;
}

// One row: zs, zt (V) raw logits with entries outside the support at -inf. Returns the JSD at
// tau; with want_grad zs becomes g * tau * d jsd / d zs (0 outside the support), zt is scaled by 1/tau.
static double jsd_row(float *zs, float *zt, int V, float tau, float beta, int want_grad, float g) {
#pragma omp simd
    for (int j = 0; j < V; j++) zs[j] = zs[j] / tau, zt[j] = zt[j] / tau;
    float la = (float)row_lse(zs, V), lb = (float)row_lse(zt, V);
    float lmix_s = log1pf(-beta), lmix_t = logf(beta);
    double L = 0, K = 0;
    if (beta == 0.0f) {
#pragma omp simd reduction(+ : L)
        for (int j = 0; j < V; j++) {
            float s = zs[j] - la, t = zt[j] - lb, q = cpu_expf(t);
            L += zt[j] == -INFINITY ? 0.0 : (double)q * (t - s);
        }
    } else if (beta == 1.0f) {
#pragma omp simd reduction(+ : L)
        for (int j = 0; j < V; j++) {
            float s = zs[j] - la, t = zt[j] - lb, p = cpu_expf(s);
            L += zs[j] == -INFINITY ? 0.0 : (double)p * (s - t);
        }
    } else {
        for (int j = 0; j < V; j++) {
            if (zs[j] == -INFINITY) continue;
            float s = zs[j] - la, t = zt[j] - lb, p = cpu_expf(s), q = cpu_expf(t);
            float x = s + lmix_s, y = t + lmix_t, m = fmaxf(x, y) + log1pf(cpu_expf(-fabsf(x - y)));
            L += beta * (double)q * (t - m) + (1 - beta) * (double)p * (s - m);
            K += (double)p * (s - m);
        }
    }
    if (!want_grad) return L;
    if (beta == 0.0f) {
#pragma omp simd
        for (int j = 0; j < V; j++) {
            float d = g * (cpu_expf(zs[j] - la) - cpu_expf(zt[j] - lb));
            zs[j] = zs[j] == -INFINITY ? 0.0f : d;
        }
    } else if (beta == 1.0f) {
        float Lf = (float)L;
#pragma omp simd
        for (int j = 0; j < V; j++) {
            float s = zs[j] - la, t = zt[j] - lb, d = g * cpu_expf(s) * (s - t - Lf);
            zs[j] = zs[j] == -INFINITY ? 0.0f : d;
        }
    } else {
        float Kf = (float)K, gb = g * (1 - beta);
        for (int j = 0; j < V; j++) {
            if (zs[j] == -INFINITY) {
                zs[j] = 0.0f;
                continue;
            }
            float s = zs[j] - la, t = zt[j] - lb, p = cpu_expf(s);
            float x = s + lmix_s, y = t + lmix_t, m = fmaxf(x, y) + log1pf(cpu_expf(-fabsf(x - y)));
            zs[j] = gb * p * (s - m - Kf);
        }
    }
    return L;
}

static void cpu_distill_head_cap(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s,
                                 const float *h_s, const void *W_s, DType wdt_s, const float *h_t, const void *W_t,
                                 DType wdt_t, const int32_t *targets, const float *weights, float tau, float beta,
                                 int top_k, float grad_scale, float softcap_s, float softcap_t, float *scratch_s,
                                 float *scratch_t, int chunk, int N, int Cs, int Ct, int V) {
    CHECK(chunk >= 1 && V >= 1 && tau > 0 && beta >= 0 && beta <= 1 && top_k >= 0 && softcap_s >= 0 && softcap_t >= 0);
    float *G = cpu_cap_scratch(be, softcap_s, V);  // (threads, V) the student's soft-cap derivatives
    int32_t *idx = cpu_scratch(be, CPU_SCR_INDEX, (size_t)chunk * sizeof(int32_t));
    float *Zs = scratch_s, *Hs = scratch_s + (size_t)chunk * V;
    float *Zt = scratch_t, *Ht = scratch_t + (size_t)chunk * V;
    int r = 0;
    while (r < N) {
        int M = gather_rows(idx, &r, targets, N, V, chunk, row_loss, row_kl);
        if (M == 0) continue;
        copy_rows(be, Hs, h_s, idx, M, Cs);
        copy_rows(be, Ht, h_t, idx, M, Ct);
        cpu_matmul_forward(be, Zs, Hs, W_s, wdt_s, NULL, M, Cs, V);
        cpu_matmul_forward(be, Zt, Ht, W_t, wdt_t, NULL, M, Ct, V);
#pragma omp parallel for schedule(static) num_threads(be->threads) if (M > 1)
        for (int i = 0; i < M; i++) {
            int row = idx[i];
            float *zs = Zs + (size_t)i * V, *zt = Zt + (size_t)i * V;
            float *g = G ? G + (size_t)omp_get_thread_num() * V : NULL;
            if (g) cpu_cap_row(zs, dh_s ? g : NULL, V, softcap_s);
            if (softcap_t > 0) cpu_cap_row(zt, NULL, V, softcap_t);
            if (row_kl) row_kl[row] = (float)kl_row(zs, zt, V);
            heads_topk_mask(zs, zt, V, top_k);
            float w = weights ? weights[row] : 1.0f;
            double L = jsd_row(zs, zt, V, tau, beta, dh_s != NULL, grad_scale * w / tau);
            if (row_loss) row_loss[row] = (float)(w * L);
            if (g && dh_s)
#pragma omp simd
                for (int j = 0; j < V; j++) zs[j] *= g[j];
        }
        if (dh_s) head_backward(be, dh_s, dW_s, Zs, Hs, W_s, wdt_s, idx, M, Cs, V);
    }
}

static void cpu_distill_head(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                             const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                             const int32_t *targets, const float *weights, float tau, float beta, int top_k,
                             float grad_scale, float *scratch_s, float *scratch_t, int chunk, int N, int Cs, int Ct,
                             int V) {
    cpu_distill_head_cap(be, row_loss, row_kl, dh_s, dW_s, h_s, W_s, wdt_s, h_t, W_t, wdt_t, targets, weights, tau,
                         beta, top_k, grad_scale, 0.0f, 0.0f, scratch_s, scratch_t, chunk, N, Cs, Ct, V);
}

// ---------------------------------------------------------------- score_head
// B pooled rows only: a few dot products per sequence. Parallel over the outputs (scores: (b, k);
// dh and dW: columns c), so repeated rows accumulate without races; sums over b and k in double.
static void cpu_score_head(Backend *be, float *scores, float *dh, float *dW, const float *h, const void *W, DType wdt,
                           const int32_t *rows, const float *dscores, int B, int N, int C, int NL) {
    CHECK_MSG(!dscores || dh, "score_head: dscores given without dh");
    for (int b = 0; b < B; b++)
        CHECK_MSG(rows[b] >= 0 && rows[b] < N, "score_head: pooled row %d of sequence %d outside [0, %d)", rows[b], b, N);
    float *Wf = cpu_scratch(be, CPU_SCR_PANEL, (size_t)NL * C * sizeof(float));  // (NL,C) fp32 copy of W
    cpu_convert_f32(Wf, W, wdt, 0, (size_t)NL * C);
    if (scores) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)B * NL * C > 65536)
        for (int i = 0; i < B * NL; i++) {
            int b = i / NL, k = i % NL;
            const float *hr = h + (size_t)rows[b] * C, *wk = Wf + (size_t)k * C;
            double acc = 0;
            for (int c = 0; c < C; c++) acc += (double)hr[c] * wk[c];
            scores[i] = (float)acc;
        }
    }
    if (!dscores) return;
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)B * NL * C > 65536)
    for (int c = 0; c < C; c++) {
        for (int b = 0; b < B; b++) {
            double acc = 0;
            for (int k = 0; k < NL; k++) acc += (double)dscores[(size_t)b * NL + k] * Wf[(size_t)k * C + c];
            float *d = dh + (size_t)rows[b] * C + c;
            *d = (float)(*d + acc);
        }
        for (int k = 0; dW && k < NL; k++) {
            double acc = 0;
            for (int b = 0; b < B; b++) acc += (double)dscores[(size_t)b * NL + k] * h[(size_t)rows[b] * C + c];
            dW[(size_t)k * C + c] = (float)(dW[(size_t)k * C + c] + acc);
        }
    }
}

void backend_cpu_install_heads(Backend *be) {
    be->score_head = cpu_score_head;
    be->logprob_head = cpu_logprob_head;
    be->distill_head = cpu_distill_head;
    be->logprob_head_cap = cpu_logprob_head_cap;
    be->distill_head_cap = cpu_distill_head_cap;
}
