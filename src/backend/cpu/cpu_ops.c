// cpu_ops.c: the CPU embedding, RMSNorm, RoPE, SwiGLU, elementwise and AdamW ops: OpenMP over
// rows (or fixed blocks), inner loops written to vectorise.
#include "cpu.h"

#include "../dropout_math.h"

#include <math.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define PAR_MIN 16384  // below this many elements a parallel region costs more than it saves

// [lo, hi) of n items for part i of parts (contiguous, in order).
static inline void split_range(size_t n, int parts, int i, size_t *lo, size_t *hi) {
    *lo = n * (size_t)i / (size_t)parts;
    *hi = n * (size_t)(i + 1) / (size_t)parts;
}

// ids (N), wte (V,C) -> out (N,C)
void cpu_embedding_forward(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        CHECK_MSG(ids[n] >= 0, "embedding id %d at row %d", ids[n], n);
        cpu_convert_f32(out + (size_t)n * C, wte, wdt, (size_t)ids[n] * C, (size_t)C);
    }
}

// dwte (V,C) += scatter of dout (N,C) at ids (N). Each thread owns a range of columns and walks
// the rows in order, so repeated ids accumulate without races and in a fixed order.
void cpu_embedding_backward(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C) {
    int parts = (size_t)N * C > PAR_MIN ? MIN(be->threads, C) : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        size_t c0, c1;
        split_range((size_t)C, parts, part, &c0, &c1);
        for (int n = 0; n < N; n++) {
            CHECK_MSG(ids[n] >= 0, "embedding id %d at row %d", ids[n], n);
            float *d = dwte + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            for (size_t c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

// inp (N,C), w (C) -> out (N,C), rstd (N)
void cpu_rmsnorm_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

// dinp (N,C) +=, dw (C) += ; dx_j = r (g_j w_j - x_j r^2 mean_i(g_i w_i x_i)), dw_i = sum_n g_i x_i r.
// dw: each thread sums a contiguous range of rows into its own partial; partials are added in
// thread order.
void cpu_rmsnorm_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          const float *rstd, int N, int C) {
    int parts = (size_t)N * C > PAR_MIN ? MIN(be->threads, N) : 1;
    float *partial = dw ? cpu_scratch(be, CPU_SCR_PARTIAL, (size_t)parts * C * sizeof(float)) : NULL;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        size_t n0, n1;
        split_range((size_t)N, parts, part, &n0, &n1);
        float *pd = partial ? partial + (size_t)part * C : NULL;
        if (pd) memset(pd, 0, (size_t)C * sizeof(float));
        for (size_t n = n0; n < n1; n++) {
            const float *x = inp + n * C, *g = dout + n * C;
            float r = rstd[n];
            if (dinp) {
                float dot = 0;
#pragma omp simd reduction(+ : dot)
                for (int c = 0; c < C; c++) dot += g[c] * w[c] * x[c];
                float k = r * r * dot / C;
                float *dx = dinp + n * C;
#pragma omp simd
                for (int c = 0; c < C; c++) dx[c] += r * (g[c] * w[c] - x[c] * k);
            }
            if (pd) {
#pragma omp simd
                for (int c = 0; c < C; c++) pd[c] += g[c] * x[c] * r;
            }
        }
    }
    if (dw)
        for (int part = 0; part < parts; part++)
#pragma omp simd
            for (int c = 0; c < C; c++) dw[c] += partial[(size_t)part * C + c];
}

// Rotation of the first RD dims by pos*inv_freq (dir = +1) or its transpose (dir = -1), scaled by
// mscale; the angle is the fp32 product, as in HF. Dims [RD, HD) pass through.
static void rope_apply(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                       int HD, int RD, float dir) {
    int half = RD / 2;
    CHECK_MSG(half <= 128, "rope: head_dim %d (config.json's CONFIG_MAX_HEAD_DIM is 256)", HD);
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * NH * HD > PAR_MIN)
    for (int n = 0; n < N; n++) {
        float cs[128], sn[128];  // (half) one position's cos and sin
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[n] * inv_freq[i];
            float s, c;
            sincosf(angle, &s, &c);
            cs[i] = c * mscale;
            sn[i] = dir * s * mscale;
        }
        for (int h = 0; h < NH; h++) {
            float *xh = x + ((size_t)n * NH + h) * HD;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = xh[i], b = xh[i + half];
                xh[i] = a * cs[i] - b * sn[i];
                xh[i + half] = b * cs[i] + a * sn[i];
            }
        }
    }
}

void cpu_rope_forward(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                      int HD, int RD) {
    rope_apply(be, x, pos, inv_freq, mscale, N, NH, HD, RD, 1.0f);
}

void cpu_rope_backward(Backend *be, float *dx, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                       int HD, int RD) {
    rope_apply(be, dx, pos, inv_freq, mscale, N, NH, HD, RD, -1.0f);
}

// gate, up (n) -> out (n) = silu(gate) * up
void cpu_swiglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n) {
#pragma omp parallel for simd schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + cpu_expf(-g)) * up[i];
    }
}

// dgate (n) +=, dup (n) += ; d silu(g)/dg = sig(g) (1 + g (1 - sig(g)))
void cpu_swiglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                         size_t n) {
#pragma omp parallel for simd schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = 1.0f / (1.0f + cpu_expf(-g));
        if (dgate) dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (dup) dup[i] += dout[i] * g * s;
    }
}

void cpu_add(Backend *be, float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_scale(Backend *be, float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_dropout(Backend *be, float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt) {
    float s = dropout_scale(p);
    uint64_t k = *key;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = dropout_keep(k, salt, i, p) ? inp[i] * s : 0.0f;
}

// Fixed blocks of SUMSQ_BLOCK elements, each summed in double, then the block sums in order:
// the result does not depend on the thread count.
#define SUMSQ_BLOCK 16384
double cpu_sumsq(Backend *be, const float *x, size_t n) {
    size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double *part = cpu_scratch(be, CPU_SCR_PARTIAL, MAX(nb, 1) * sizeof(double));
#pragma omp parallel for schedule(static) num_threads(be->threads) if (nb > 1)
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * SUMSQ_BLOCK, i1 = MIN(n, i0 + SUMSQ_BLOCK);
        double acc = 0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = i0; i < i1; i++) acc += (double)x[i] * x[i];
        part[b] = acc;
    }
    double total = 0;
    for (size_t b = 0; b < nb; b++) total += part[b];
    return total;
}

// One thread's range of the AdamW update. The AVX2 loop exists because sqrtf keeps gcc from
// vectorising the plain one (errno): 3M parameters take ~40 ms scalar, a few ms in AVX2.
static void adamw_range(float *p, float *m, float *v, const float *g, size_t i0, size_t i1, float b1, float b2,
                        float c1, float c2, float step, float inv_sbc2, float decay, float eps, float grad_scale) {
    size_t i = i0;
#ifdef __AVX2__
    __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2), vc1 = _mm256_set1_ps(c1), vc2 = _mm256_set1_ps(c2);
    __m256 vgs = _mm256_set1_ps(grad_scale), vstep = _mm256_set1_ps(step), vinv = _mm256_set1_ps(inv_sbc2);
    __m256 vdecay = _mm256_set1_ps(decay), veps = _mm256_set1_ps(eps);
    for (; i + 8 <= i1; i += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vc1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(vc2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), vinv), veps);
        __m256 upd = _mm256_div_ps(_mm256_mul_ps(vstep, mi), den);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), vdecay), upd));
    }
#endif
    for (; i < i1; i++) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_sbc2 + eps);
    }
}

// torch.optim.AdamW in fp32, the bias corrections computed in double once.
void cpu_adamw(Backend *be, float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
               double eps, double wd, int t, float grad_scale) {
    CHECK(t >= 1);
    double bc1 = 1.0 - pow((double)b1, t), bc2 = 1.0 - pow((double)b2, t);
    float step = (float)(lr / bc1), inv_sbc2 = (float)(1.0 / sqrt(bc2)), decay = (float)(1.0 - lr * wd);
    int parts = n > PAR_MIN ? be->threads : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        size_t i0, i1;
        split_range(n, parts, part, &i0, &i1);
        // torch passes 1 - beta as a Python float, rounded once to fp32
        adamw_range(p, m, v, g, i0, i1, (float)b1, (float)b2, (float)(1.0 - b1), (float)(1.0 - b2), step, inv_sbc2,
                    decay, (float)eps, grad_scale);
    }
}
