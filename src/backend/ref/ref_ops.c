// ref_ops.c: the reference embedding, RMSNorm, linear, RoPE, SwiGLU, elementwise and AdamW ops.
// Plain loops, double accumulators; forward writes with `=`, backward accumulates with `+=`.
#include "ref.h"

#include "../dropout_math.h"

#include <math.h>

// ids (N), wte (V,C) -> out (N,C)
void ref_embedding_forward(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C) {
    for (int n = 0; n < N; n++) {
        CHECK_MSG(ids[n] >= 0, "embedding id %d at row %d", ids[n], n);
        size_t row = (size_t)ids[n] * C;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = ref_wload(wte, wdt, row + c);
    }
}

// dwte (V,C) += scatter of dout (N,C) at ids (N)
void ref_embedding_backward(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C) {
    for (int n = 0; n < N; n++) {
        CHECK_MSG(ids[n] >= 0, "embedding id %d at row %d", ids[n], n);
        float *d = dwte + (size_t)ids[n] * C;
        for (int c = 0; c < C; c++) d[c] = (float)((double)d[c] + dout[(size_t)n * C + c]);
    }
}

// inp (N,C), w (C) -> out (N,C), rstd (N)
void ref_rmsnorm_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (float)(x[c] * r * w[c]);
        rstd[n] = (float)r;
    }
}

// y = w x r with r = (mean(x^2) + eps)^-1/2, so dx_j = r (g_j w_j - x_j r^2 mean_i(g_i w_i x_i)) and
// dw_i = sum_n g_i x_i r.
// dinp (N,C) +=, dw (C) += ; from dout (N,C), inp, w, rstd (N)
void ref_rmsnorm_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        double r = rstd[n];
        if (dinp) {
            double dot = 0;
            for (int c = 0; c < C; c++) dot += (double)g[c] * w[c] * x[c];
            double k = r * r * dot / C;
            float *dx = dinp + (size_t)n * C;
            for (int c = 0; c < C; c++) dx[c] = (float)(dx[c] + r * ((double)g[c] * w[c] - x[c] * k));
        }
    }
    if (dw) {
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int n = 0; n < N; n++) acc += (double)dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
            dw[c] = (float)(dw[c] + acc);
        }
    }
}

// inp (N,C), w (OC,C), bias (OC) or NULL -> out (N,OC)
void ref_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                        int C, int OC) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            double acc = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) acc += (double)x[c] * ref_wload(w, wdt, (size_t)o * C + c);
            out[(size_t)n * OC + o] = (float)acc;
        }
    }
}

// dinp (N,C) += dout w ; dw (OC,C) += dout^T inp ; dbias (OC) += colsum(dout)
void ref_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const void *w, DType wdt, int N, int C, int OC) {
    if (dinp) {
        for (int n = 0; n < N; n++) {
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int o = 0; o < OC; o++) acc += (double)dout[(size_t)n * OC + o] * ref_wload(w, wdt, (size_t)o * C + c);
                dinp[(size_t)n * C + c] = (float)(dinp[(size_t)n * C + c] + acc);
            }
        }
    }
    if (dw) {
        for (int o = 0; o < OC; o++) {
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int n = 0; n < N; n++) acc += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
                dw[(size_t)o * C + c] = (float)(dw[(size_t)o * C + c] + acc);
            }
        }
    }
    if (dbias) {
        for (int o = 0; o < OC; o++) {
            double acc = 0;
            for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + o];
            dbias[o] = (float)(dbias[o] + acc);
        }
    }
}

// Rotate the first RD dims of every head of every row by angle pos*inv_freq[i] (dir = +1) or its
// inverse (dir = -1), both scaled by mscale; the inverse rotation is the transpose, which is the
// backward pass. Dims [RD, HD) are left as they are.
static void rope_apply(float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH, int HD,
                       int RD, int dir) {
    int half = RD / 2;
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < half; i++) {
            // fp32 angle as in HF: freqs = float(pos) * inv_freq (fp32 product)
            float angle = (float)pos[n] * inv_freq[i];
            double c = cos((double)angle) * mscale, s = dir * sin((double)angle) * mscale;
            for (int h = 0; h < NH; h++) {
                float *xh = x + ((size_t)n * NH + h) * HD;
                double a = xh[i], b = xh[i + half];
                xh[i] = (float)(a * c - b * s);
                xh[i + half] = (float)(b * c + a * s);
            }
        }
    }
}

// x (N,NH,HD) in place, pos (N), inv_freq (RD/2)
void ref_rope_forward(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                      int HD, int RD) {
    rope_apply(x, pos, inv_freq, mscale, N, NH, HD, RD, +1);
}

// dx (N,NH,HD) in place: overwritten with the transpose rotation
void ref_rope_backward(Backend *be, float *dx, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                       int HD, int RD) {
    rope_apply(dx, pos, inv_freq, mscale, N, NH, HD, RD, -1);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// gate, up (n) -> out (n) = silu(gate) * up
void ref_swiglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g * sigmoid(g) * up[i]);
    }
}

// d silu(g)/dg = sig(g) (1 + g (1 - sig(g)))
// dgate (n) +=, dup (n) +=
void ref_swiglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                         size_t n) {
    for (size_t i = 0; i < n; i++) {
        double g = gate[i], s = sigmoid(g);
        if (dgate) dgate[i] = (float)(dgate[i] + (double)dout[i] * up[i] * s * (1.0 + g * (1.0 - s)));
        if (dup) dup[i] = (float)(dup[i] + (double)dout[i] * g * s);
    }
}

void ref_add(Backend *be, float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)((double)a[i] + b[i]);
}

void ref_scale(Backend *be, float *x, float s, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)x[i] * s);
}

void ref_dropout(Backend *be, float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt) {
    float s = dropout_scale(p);
    for (size_t i = 0; i < n; i++) out[i] = dropout_keep(*key, salt, i, p) ? inp[i] * s : 0.0f;
}

double ref_sumsq(Backend *be, const float *x, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
    return acc;
}

// torch.optim.AdamW (decoupled weight decay, bias-corrected moments), in double; m and v are
// rounded to fp32 when stored and the update uses the stored values, as torch does.
void ref_adamw(Backend *be, float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
               double eps, double wd, int t, float grad_scale) {
    CHECK(t >= 1);
    double bc1 = 1.0 - pow((double)b1, t), bc2 = 1.0 - pow((double)b2, t);
    double step = (double)lr / bc1, sbc2 = sqrt(bc2);
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * grad_scale;
        double pi = (double)p[i] * (1.0 - (double)lr * wd);
        m[i] = (float)((double)b1 * m[i] + (1.0 - b1) * gi);
        v[i] = (float)((double)b2 * v[i] + (1.0 - b2) * gi * gi);
        p[i] = (float)(pi - step * m[i] / (sqrt((double)v[i]) / sbc2 + eps));
    }
}
