// ref_family.c: the reference model-family ops of backend.h (docs/models.md): RMSNorm with an
// offset weight, the gelu_pytorch_tanh GeGLU and soft-capping. Plain loops, double arithmetic;
// the windowed / soft-capped attention lives in ref_attention.c and ref_kv.c, the soft-capped
// heads in ref_loss.c and ref_heads.c.
#include "ref.h"

#include <math.h>

// inp (N,C), w (C) -> out (N,C) = inp * rstd * (woff + w), rstd (N)
static void ref_rmsnorm_forward_off(Backend *be, float *out, float *rstd, const float *inp, const float *w,
                                    float woff, int N, int C, float eps) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (float)(x[c] * r * ((double)woff + w[c]));
        rstd[n] = (float)r;
    }
}

// As ref_rmsnorm_backward with u = woff + w: dx_j = r (g_j u_j - x_j r^2 mean_i(g_i u_i x_i)),
// dw_i = sum_n g_i x_i r.
static void ref_rmsnorm_backward_off(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                     const float *w, float woff, const float *rstd, int N, int C) {
    for (int n = 0; n < N && dinp; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        double r = rstd[n], dot = 0;
        for (int c = 0; c < C; c++) dot += (double)g[c] * ((double)woff + w[c]) * x[c];
        double k = r * r * dot / C;
        float *dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) dx[c] = (float)(dx[c] + r * ((double)g[c] * ((double)woff + w[c]) - x[c] * k));
    }
    if (dw)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int n = 0; n < N; n++) acc += (double)dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
            dw[c] = (float)(dw[c] + acc);
        }
}

#define GELU_K 0.7978845608028654  // sqrt(2 / pi)
#define GELU_A 0.044715

// gate, up (n) -> out (n) = gelu_tanh(gate) * up
static void ref_geglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = gate[i], th = tanh(GELU_K * (x + GELU_A * x * x * x));
        out[i] = (float)(0.5 * x * (1.0 + th) * up[i]);
    }
}

// d gelu_tanh(x) / dx = 0.5 (1 + th) + 0.5 x (1 - th^2) K (1 + 3 A x^2), th = tanh(K (x + A x^3))
static void ref_geglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                               const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double x = gate[i], th = tanh(GELU_K * (x + GELU_A * x * x * x));
        double gel = 0.5 * x * (1.0 + th);
        double d = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
        if (dgate) dgate[i] = (float)(dgate[i] + (double)dout[i] * up[i] * d);
        if (dup) dup[i] = (float)(dup[i] + (double)dout[i] * gel);
    }
}

// x (n) = cap * tanh(x / cap)
static void ref_softcap_forward(Backend *be, float *x, float cap, size_t n) {
    CHECK(cap > 0);
    for (size_t i = 0; i < n; i++) x[i] = (float)(cap * tanh((double)x[i] / cap));
}

// dx (n) *= 1 - (y / cap)^2
static void ref_softcap_backward(Backend *be, float *dx, const float *y, float cap, size_t n) {
    CHECK(cap > 0);
    for (size_t i = 0; i < n; i++) {
        double t = (double)y[i] / cap;
        dx[i] = (float)(dx[i] * (1.0 - t * t));
    }
}

// ---- RMSNorm over a split feature dimension ----------------------------------------------
// stat (N) = sum_c a b (w or 1)
static void ref_rmsnorm_part_stat(Backend *be, float *stat, const float *a, const float *b, const float *w, int N,
                                  int C) {
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += (double)a[(size_t)n * C + c] * b[(size_t)n * C + c] * (w ? w[c] : 1.0);
        stat[n] = (float)s;
    }
}

// rstd = 1/sqrt(ss / D + eps), out = inp * rstd * w
static void ref_rmsnorm_part_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w,
                                     const float *ss, int N, int C, int D, float eps) {
    for (int n = 0; n < N; n++) {
        double r = 1.0 / sqrt((double)ss[n] / D + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (float)(inp[(size_t)n * C + c] * r * w[c]);
        rstd[n] = (float)r;
    }
}

// dx_j += r (g_j w_j - x_j r^2 dot / D); dw as ref_rmsnorm_backward_off's
static void ref_rmsnorm_part_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                      const float *w, const float *rstd, const float *dot, int N, int C, int D) {
    for (int n = 0; n < N && dinp; n++) {
        double r = rstd[n], k = r * r * dot[n] / D;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            dinp[i] = (float)(dinp[i] + r * ((double)dout[i] * w[c] - inp[i] * k));
        }
    }
    if (dw) ref_rmsnorm_backward_off(be, NULL, dw, dout, inp, w, 0.0f, rstd, N, C);
}

void backend_ref_install_family(Backend *be) {
    be->attention_forward_opt = ref_attention_forward_opt;
    be->attention_backward_opt = ref_attention_backward_opt;
    be->attention_sinks_backward = ref_attention_sinks_backward;
    be->rmsnorm_forward_off = ref_rmsnorm_forward_off;
    be->rmsnorm_backward_off = ref_rmsnorm_backward_off;
    be->geglu_forward = ref_geglu_forward;
    be->geglu_backward = ref_geglu_backward;
    be->softcap_forward = ref_softcap_forward;
    be->softcap_backward = ref_softcap_backward;
    be->ce_head_cap = ref_ce_head_cap;
    be->rmsnorm_part_stat = ref_rmsnorm_part_stat;
    be->rmsnorm_part_forward = ref_rmsnorm_part_forward;
    be->rmsnorm_part_backward = ref_rmsnorm_part_backward;
}
