// cpu_loss.c: the cross-entropy head fused with the LM head. Rows whose target is IGNORE_INDEX
// are skipped before any arithmetic; the others are gathered `chunk` at a time into the
// caller's scratch, (chunk, V) logits then (chunk, C) hidden rows:
//   Z = Hg W^T (sgemm) -> per-row max, argmax, logsumexp, entropy, loss -> dZ in place ->
//   dW += dZ^T Hg (sgemm, beta 1) -> Hg = dZ W (sgemm) -> dh rows += Hg (scatter).
// 16-bit W is multiplied one converted panel of vocabulary rows at a time.
#include "cpu.h"

#include <math.h>
#include <omp.h>

// Z (M, V) = Hg (M, C) W^T
static void lm_head_logits(Backend *be, float *Z, const float *Hg, const void *W, DType wdt, int M, int C, int V) {
    if (wdt == DT_F32) {
        cpu_sgemm(0, 1, M, V, C, 1.0f, Hg, C, (const float *)W, C, 0.0f, Z, V);
        return;
    }
    int P = cpu_panel_rows(C, V);
    float *panel = cpu_scratch(be, CPU_SCR_PANEL, (size_t)P * C * sizeof(float));
    for (int v0 = 0; v0 < V; v0 += P) {
        int p = MIN(P, V - v0);
        cpu_weight_rows(be, panel, W, wdt, (size_t)v0, (size_t)p, C);
        cpu_sgemm(0, 1, M, p, C, 1.0f, Hg, C, panel, C, 0.0f, Z + v0, V);
    }
}

// Hg (M, C) = dZ (M, V) W (V, C)
static void lm_head_dh(Backend *be, float *Hg, const float *dZ, const void *W, DType wdt, int M, int C, int V) {
    if (wdt == DT_F32) {
        cpu_sgemm(0, 0, M, C, V, 1.0f, dZ, V, (const float *)W, C, 0.0f, Hg, C);
        return;
    }
    int P = cpu_panel_rows(C, V);
    float *panel = cpu_scratch(be, CPU_SCR_PANEL, (size_t)P * C * sizeof(float));
    for (int v0 = 0; v0 < V; v0 += P) {
        int p = MIN(P, V - v0);
        cpu_weight_rows(be, panel, W, wdt, (size_t)v0, (size_t)p, C);
        cpu_sgemm(0, 0, M, C, p, 1.0f, dZ + v0, V, panel, C, v0 == 0 ? 0.0f : 1.0f, Hg, C);
    }
}

// Statistics of one row of logits z (V) (each output may be NULL); with want_grad the row
// becomes dz = grad_w * (softmax(z) - onehot(tgt)), else it is left holding exp(z - max).
static void row_stats(float *z, int V, int tgt, float weight, int want_grad, float grad_w, float *loss,
                      float *correct, float *entropy) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++) mx = z[j] > mx ? z[j] : mx;
    int amax = 0;
    while (amax < V - 1 && z[amax] != mx) amax++;  // first index on ties
    float zt = z[tgt];
    double sum = 0, sz = 0;
#pragma omp simd reduction(+ : sum, sz)
    for (int j = 0; j < V; j++) {
        float e = cpu_expf(z[j] - mx);
        sum += e;
        sz += (double)e * z[j];
        z[j] = e;
    }
    double lse = mx + log(sum);
    if (loss) *loss = (float)(weight * (lse - zt));
    if (correct) *correct = amax == tgt ? 1.0f : 0.0f;
    if (entropy) *entropy = (float)(lse - sz / sum);
    if (want_grad) {
        float g = (float)(grad_w / sum);
#pragma omp simd
        for (int j = 0; j < V; j++) z[j] *= g;
        z[tgt] -= grad_w;
    }
}

// One chunk of M gathered rows idx (M).
static void ce_chunk(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                     const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                     float grad_scale, float softcap, float *Z, float *Hg, const int32_t *idx, int M, int C, int V) {
    float *G = cpu_cap_scratch(be, softcap, V);  // (threads, V) soft-cap derivatives
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)M * C > 65536)
    for (int i = 0; i < M; i++) memcpy(Hg + (size_t)i * C, h + (size_t)idx[i] * C, (size_t)C * sizeof(float));
    lm_head_logits(be, Z, Hg, W, wdt, M, C, V);
#pragma omp parallel for schedule(static) num_threads(be->threads) if (M > 1)
    for (int i = 0; i < M; i++) {
        int r = idx[i];
        float w = weights ? weights[r] : 1.0f, *z = Z + (size_t)i * V;
        float *g = G ? G + (size_t)omp_get_thread_num() * V : NULL;
        if (g) cpu_cap_row(z, dh ? g : NULL, V, softcap);
        row_stats(z, V, targets[r], w, dh != NULL, grad_scale * w, row_loss ? row_loss + r : NULL,
                  row_correct ? row_correct + r : NULL, row_entropy ? row_entropy + r : NULL);
        if (g && dh)
#pragma omp simd
            for (int j = 0; j < V; j++) z[j] *= g[j];
    }
    if (!dh) return;
    if (dW) cpu_sgemm(1, 0, V, C, M, 1.0f, Z, V, Hg, C, 1.0f, dW, C);
    lm_head_dh(be, Hg, Z, W, wdt, M, C, V);
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)M * C > 65536)
    for (int i = 0; i < M; i++) {
        float *d = dh + (size_t)idx[i] * C;
        const float *g = Hg + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}

// h (N,C), W (V,C), targets (N), weights (N) or NULL -> row_loss, row_correct, row_entropy (N);
// dh (N,C) +=, dW (V,C) += ; scratch (chunk, V + C)
void cpu_ce_head_cap(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                     const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                     float grad_scale, float softcap, float *scratch, int chunk, int N, int C, int V) {
    CHECK(chunk >= 1 && V >= 1 && softcap >= 0);
    int32_t *idx = cpu_scratch(be, CPU_SCR_INDEX, (size_t)chunk * sizeof(int32_t));
    float *Z = scratch, *Hg = scratch + (size_t)chunk * V;
    int r = 0;
    while (r < N) {
        int M = 0;
        for (; r < N && M < chunk; r++) {
            int tgt = targets[r];
            if (tgt == IGNORE_INDEX) {
                if (row_loss) row_loss[r] = 0.0f;
                if (row_correct) row_correct[r] = 0.0f;
                if (row_entropy) row_entropy[r] = 0.0f;
                continue;
            }
            CHECK_MSG(tgt >= 0 && tgt < V, "target %d at row %d outside the vocabulary (%d)", tgt, r, V);
            idx[M++] = r;
        }
        if (M > 0)
            ce_chunk(be, row_loss, row_correct, row_entropy, dh, dW, h, W, wdt, targets, weights, grad_scale, softcap, Z, Hg,
                     idx, M, C, V);
    }
}

void cpu_ce_head(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                 const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                 float grad_scale, float *scratch, int chunk, int N, int C, int V) {
    cpu_ce_head_cap(be, row_loss, row_correct, row_entropy, dh, dW, h, W, wdt, targets, weights, grad_scale, 0.0f,
                    scratch, chunk, N, C, V);
}
