// cpu_family.c: the model-family ops of backend.h on the CPU (docs/models.md): RMSNorm with an
// offset weight (the plain RMSNorm ops on woff + w, which is all that changes), the
// gelu_pytorch_tanh GeGLU and soft-capping. The windowed / soft-capped attention is in
// cpu_attention.c and cpu_kv.c, the soft-capped heads in cpu_loss.c and cpu_heads.c.
#include "cpu.h"

#include <math.h>

#define PAR_MIN 16384  // below this many elements a parallel region costs more than it saves

// u (C) = woff + w in scratch
static float *offset_weights(Backend *be, const float *w, float woff, int C) {
    float *u = cpu_scratch(be, CPU_SCR_NORMW, (size_t)C * sizeof(float));
    for (int c = 0; c < C; c++) u[c] = woff + w[c];
    return u;
}

static void cpu_rmsnorm_forward_off(Backend *be, float *out, float *rstd, const float *inp, const float *w,
                                    float woff, int N, int C, float eps) {
    cpu_rmsnorm_forward(be, out, rstd, inp, offset_weights(be, w, woff, C), N, C, eps);
}

// dw does not depend on the weights, dinp sees woff + w: the plain backward on u.
static void cpu_rmsnorm_backward_off(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                     const float *w, float woff, const float *rstd, int N, int C) {
    cpu_rmsnorm_backward(be, dinp, dw, dout, inp, offset_weights(be, w, woff, C), rstd, N, C);
}

#define GELU_K 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_A 0.044715f

// out (n) = gelu_tanh(gate) * up
static void cpu_geglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = gate[i], th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        out[i] = 0.5f * x * (1.0f + th) * up[i];
    }
}

// dgate (n) +=, dup (n) += ; d gelu_tanh / dx = 0.5 (1 + th) + 0.5 x (1 - th^2) K (1 + 3 A x^2)
static void cpu_geglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                               const float *up, size_t n) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = gate[i], th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        if (dgate) dgate[i] += dout[i] * up[i] * d;
        if (dup) dup[i] += dout[i] * 0.5f * x * (1.0f + th);
    }
}

static void cpu_softcap_forward(Backend *be, float *x, float cap, size_t n) {
    CHECK(cap > 0);
    float inv = 1.0f / cap;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

static void cpu_softcap_backward(Backend *be, float *dx, const float *y, float cap, size_t n) {
    CHECK(cap > 0);
    float inv = 1.0f / cap;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float t = y[i] * inv;
        dx[i] *= 1.0f - t * t;
    }
}

// ---- RMSNorm over a split feature dimension (backend.h) ------------------------------------
static void cpu_rmsnorm_part_stat(Backend *be, float *stat, const float *a, const float *b, const float *w, int N,
                                  int C) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = a + (size_t)n * C, *y = b + (size_t)n * C;
        float s = 0;
        if (w) {
#pragma omp simd reduction(+ : s)
            for (int c = 0; c < C; c++) s += x[c] * w[c] * y[c];
        } else {
#pragma omp simd reduction(+ : s)
            for (int c = 0; c < C; c++) s += x[c] * y[c];
        }
        stat[n] = s;
    }
}

static void cpu_rmsnorm_part_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w,
                                     const float *ss, int N, int C, int D, float eps) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C, r = 1.0f / sqrtf(ss[n] / D + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

// dinp as cpu_rmsnorm_backward's with the group's dot; dw through it (it does not read w)
static void cpu_rmsnorm_part_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                      const float *w, const float *rstd, const float *dot, int N, int C, int D) {
    if (dinp) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * C > PAR_MIN)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            float r = rstd[n], k = r * r * dot[n] / D, *dx = dinp + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * (g[c] * w[c] - x[c] * k);
        }
    }
    if (dw) cpu_rmsnorm_backward(be, NULL, dw, dout, inp, w, rstd, N, C);
}

void backend_cpu_install_family(Backend *be) {
    be->attention_forward_opt = cpu_attention_forward_opt;
    be->attention_backward_opt = cpu_attention_backward_opt;
    be->attention_sinks_backward = cpu_attention_sinks_backward;
    be->rmsnorm_forward_off = cpu_rmsnorm_forward_off;
    be->rmsnorm_backward_off = cpu_rmsnorm_backward_off;
    be->geglu_forward = cpu_geglu_forward;
    be->geglu_backward = cpu_geglu_backward;
    be->softcap_forward = cpu_softcap_forward;
    be->softcap_backward = cpu_softcap_backward;
    be->ce_head_cap = cpu_ce_head_cap;
    be->rmsnorm_part_stat = cpu_rmsnorm_part_stat;
    be->rmsnorm_part_forward = cpu_rmsnorm_part_forward;
    be->rmsnorm_part_backward = cpu_rmsnorm_part_backward;
}
