// ref_loss.c: the reference cross-entropy head fused with the LM head, one row at a time: the
// row's fp32 logits live in scratch (V floats, within the (chunk, V + C) the caller provides),
// everything else is double.
#include "ref.h"

#include <math.h>

// h (N,C), W (V,C), targets (N), weights (N) or NULL -> row_loss, row_correct, row_entropy (N);
// dh (N,C) +=, dW (V,C) += (see backend.h)
// With softcap > 0 every logit is softcap * tanh(z / softcap) and dz picks up 1 - (z_capped / softcap)^2.
void ref_ce_head_cap(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                     const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                     float grad_scale, float softcap, float *scratch, int chunk, int N, int C, int V) {
    CHECK(chunk >= 1 && V >= 1 && softcap >= 0);
    double cap = softcap;
    float *z = scratch;  // (V)
    for (int r = 0; r < N; r++) {
        int tgt = targets[r];
        if (tgt == IGNORE_INDEX) {
            if (row_loss) row_loss[r] = 0.0f;
            if (row_correct) row_correct[r] = 0.0f;
            if (row_entropy) row_entropy[r] = 0.0f;
            continue;
        }
        CHECK_MSG(tgt >= 0 && tgt < V, "target %d at row %d outside the vocabulary (%d)", tgt, r, V);
        const float *hr = h + (size_t)r * C;
        double wr = weights ? weights[r] : 1.0;
        int amax = 0;
        for (int v = 0; v < V; v++) {
            double acc = 0;
            for (int c = 0; c < C; c++) acc += (double)hr[c] * ref_wload(W, wdt, (size_t)v * C + c);
            z[v] = cap > 0 ? (float)(cap * tanh(acc / cap)) : (float)acc;
            if (z[v] > z[amax]) amax = v;
        }
        double mx = z[amax], sum = 0, pz = 0;
        for (int v = 0; v < V; v++) {
            double e = exp(z[v] - mx);
            sum += e;
            pz += e * z[v];
        }
        double lse = mx + log(sum);
        if (row_loss) row_loss[r] = (float)(wr * (lse - z[tgt]));
        if (row_correct) row_correct[r] = amax == tgt ? 1.0f : 0.0f;
        if (row_entropy) row_entropy[r] = (float)(lse - pz / sum);  // -sum p (z - lse)
        if (!dh) continue;
        double gw = (double)grad_scale * wr;
        float *dhr = dh + (size_t)r * C;
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int v = 0; v < V; v++) {
                double dz = gw * (exp(z[v] - lse) - (v == tgt)) * (cap > 0 ? 1.0 - (z[v] / cap) * (z[v] / cap) : 1.0);
                acc += dz * ref_wload(W, wdt, (size_t)v * C + c);
            }
            dhr[c] = (float)(dhr[c] + acc);
        }
        if (dW) {
            for (int v = 0; v < V; v++) {
                double dz = gw * (exp(z[v] - lse) - (v == tgt)) * (cap > 0 ? 1.0 - (z[v] / cap) * (z[v] / cap) : 1.0);
                float *dWv = dW + (size_t)v * C;
                for (int c = 0; c < C; c++) dWv[c] = (float)(dWv[c] + dz * hr[c]);
            }
        }
    }
}

void ref_ce_head(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                 const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                 float grad_scale, float *scratch, int chunk, int N, int C, int V) {
    ref_ce_head_cap(be, row_loss, row_correct, row_entropy, dh, dW, h, W, wdt, targets, weights, grad_scale, 0.0f,
                    scratch, chunk, N, C, V);
}
