// cpu_gemv.c: the linear layer for a few input rows (decode: N = batch <= CPU_GEMV_MAX_ROWS).
// Decoding one token is memory-bound: every weight is used N times, so the kernel's job is to
// stream the weight matrix from memory exactly once, at full bandwidth, and do the N
// multiply-adds on the way. Each thread owns a contiguous range of output rows and walks a block
// of R rows at once (R independent streams, R x N accumulators in registers); bf16 weights are
// widened to fp32 in registers (a shift), never written back. All arithmetic is fp32 FMA.
#include "cpu.h"

#include <omp.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float v_sum(vf a) { return _mm512_reduce_add_ps(a); }
static inline vf v_load_f32(const float *p, int n) {
    return n == VW ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
static inline vf v_load_bf16(const uint16_t *p, int n) {
    __m256i h = n == VW ? _mm256_loadu_si256((const __m256i *)p)
                        : _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#elif defined(__AVX2__)
#define VW 8
typedef __m256 vf;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline float v_sum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline __m256i tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf v_load_f32(const float *p, int n) {
    return n == VW ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(n));
}
static inline vf v_load_bf16(const uint16_t *p, int n) {
    __m128i h;
    if (n == VW) {
        h = _mm_loadu_si128((const __m128i *)p);
    } else {
        uint16_t tmp[8] = {0};
        for (int i = 0; i < n; i++) tmp[i] = p[i];
        h = _mm_loadu_si128((const __m128i *)tmp);
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

#ifdef VW
// Rows [o, o+R) of w against the N input rows: out[n, o+r] = x_n . w_{o+r} (+ bias).
// R and N are compile-time constants at every call site, so acc stays in registers.
static inline __attribute__((always_inline)) void gemv_block(float *out, const float *inp, const float *xeo,
                                                             const void *w, int bf16, const float *bias, int o, int C,
                                                             int OC, const int R, const int N) {
    vf acc[4][CPU_GEMV_MAX_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) acc[r][n] = v_zero();
    int c = 0;
#if defined(__AVX512F__)
    // bf16 in 32-element blocks: one 512-bit load holds 32 weights; the low half of each 32-bit
    // lane is an even element (shift it up), the high half the odd one (mask it), so no
    // widening shuffle is needed. xeo holds each input block as its 16 even then 16 odd elements.
    if (bf16) {
        const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
        for (; c + 32 <= C; c += 32) {
            vf we[4], wo[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512i v = _mm512_loadu_si512((const uint16_t *)w + (size_t)(o + r) * C + c);
                we[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
                wo[r] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
            }
#pragma GCC unroll 8
            for (int n = 0; n < N; n++) {
                vf xe = _mm512_loadu_ps(xeo + (size_t)n * C + c), xo = _mm512_loadu_ps(xeo + (size_t)n * C + c + 16);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) acc[r][n] = v_fma(wo[r], xo, v_fma(we[r], xe, acc[r][n]));
            }
        }
    }
#endif
    for (; c < C; c += VW) {
        int k = C - c < VW ? C - c : VW;
        vf wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = bf16 ? v_load_bf16((const uint16_t *)w + (size_t)(o + r) * C + c, k)
                         : v_load_f32((const float *)w + (size_t)(o + r) * C + c, k);
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) {
            vf xv = v_load_f32(inp + (size_t)n * C + c, k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][n] = v_fma(wv[r], xv, acc[r][n]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) out[(size_t)n * OC + o + r] = v_sum(acc[r][n]) + (bias ? bias[o + r] : 0.0f);
}

// Rows [o0, o1): blocks of R rows, then single rows.
#define GEMV_RANGE(R, N)                                                                                               \
    do {                                                                                                               \
        int o = o0;                                                                                                    \
        for (; o + (R) <= o1; o += (R)) gemv_block(out, inp, xeo, w, bf16, bias, o, C, OC, (R), (N));                       \
        for (; o < o1; o++) gemv_block(out, inp, xeo, w, bf16, bias, o, C, OC, 1, (N));                                     \
    } while (0)

static void gemv_range(float *out, const float *inp, const float *xeo, const void *w, int bf16, const float *bias,
                       int o0, int o1, int C, int OC, int N) {
    // R x N accumulators plus R weight vectors and one input vector fit the register file.
    switch (N) {
    case 1: GEMV_RANGE(4, 1); break;
    case 2: GEMV_RANGE(4, 2); break;
    case 3: GEMV_RANGE(4, 3); break;
    case 4: GEMV_RANGE(4, 4); break;
    case 5: GEMV_RANGE(2, 5); break;
    case 6: GEMV_RANGE(2, 6); break;
    case 7: GEMV_RANGE(2, 7); break;
    default: GEMV_RANGE(2, 8); break;
    }
}
#else
// No AVX2: plain loops (still one pass over the weights).
static void gemv_range(float *out, const float *inp, const float *xeo, const void *w, int bf16, const float *bias,
                       int o0, int o1, int C, int OC, int N) {
    for (int o = o0; o < o1; o++) {
        float acc[CPU_GEMV_MAX_ROWS] = {0};
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)o * C + c;
            float wv = bf16 ? bf16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
            for (int n = 0; n < N; n++) acc[n] += wv * inp[(size_t)n * C + c];
        }
        for (int n = 0; n < N; n++) out[(size_t)n * OC + o] = acc[n] + (bias ? bias[o] : 0.0f);
    }
}
#endif

// inp (N,C), w (OC,C) fp32 or bf16, bias (OC) or NULL -> out (N,OC) = inp w^T + bias, N <= CPU_GEMV_MAX_ROWS
void cpu_gemv_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                      int C, int OC) {
    CHECK(N >= 1 && N <= CPU_GEMV_MAX_ROWS && (wdt == DT_F32 || wdt == DT_BF16));
    int bf16 = wdt == DT_BF16;
    float *xeo = NULL;
#if defined(__AVX512F__)
    if (bf16 && C >= 32) {  // each input row's 32-element blocks as (16 even, 16 odd)
        xeo = cpu_scratch(be, CPU_SCR_GEMV, (size_t)N * C * sizeof(float));
        for (int n = 0; n < N; n++)
            for (int c = 0; c + 32 <= C; c += 32)
                for (int i = 0; i < 16; i++) {
                    xeo[(size_t)n * C + c + i] = inp[(size_t)n * C + c + 2 * i];
                    xeo[(size_t)n * C + c + 16 + i] = inp[(size_t)n * C + c + 2 * i + 1];
                }
    }
#endif
    int parts = (size_t)OC * C >= 65536 ? MIN(be->threads, OC) : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        // contiguous row ranges, boundaries on multiples of 4 rows
        int blocks = (OC + 3) / 4;
        int o0 = MIN(OC, (int)((long)blocks * part / parts) * 4), o1 = MIN(OC, (int)((long)blocks * (part + 1) / parts) * 4);
        gemv_range(out, inp, xeo, w, bf16, bias, o0, o1, C, OC, N);
    }
}
