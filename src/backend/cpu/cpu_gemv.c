// cpu_gemv.c: the linear layer for a few input rows (decode: N = batch <= CPU_GEMV_MAX_ROWS).
// Decoding one token is memory-bound: every weight is used N times, so the kernel's job is to
// stream the weight matrix from memory exactly once, at full bandwidth, and do the N
// multiply-adds on the way. Each thread owns a contiguous range of output rows and walks a block
// of R rows at once (R independent streams, R x N accumulators in registers); bf16 weights are
// widened to fp32 in registers (a shift), never written back; Q8_0 blocks are widened (int8 ->
// fp32) in registers too, dotted with the inputs and scaled by the block's d, so a Q8_0 weight is
// used as its dequantized fp32 value (backend.h). All arithmetic is fp32 FMA.
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
// 2 VW bf16 -> the even elements in *we, the odd ones in *wo
static inline void v_load_bf16_eo(const uint16_t *p, vf *we, vf *wo) {
    __m512i v = _mm512_loadu_si512(p);
    *we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *wo = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
}
static inline vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
static inline vf v_load_q8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
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
static inline void v_load_bf16_eo(const uint16_t *p, vf *we, vf *wo) {
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    *we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *wo = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
}
static inline vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
static inline vf v_load_q8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
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
    // bf16 in blocks of 2 VW elements: one vector load holds 2 VW weights; the low half of each
    // 32-bit lane is an even element (shift it up), the high half the odd one (mask it), so no
    // widening shuffle is needed. xeo holds each input block as its VW even then VW odd elements.
    if (bf16) {
        for (; c + 2 * VW <= C; c += 2 * VW) {
            vf we[4], wo[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) v_load_bf16_eo((const uint16_t *)w + (size_t)(o + r) * C + c, &we[r], &wo[r]);
#pragma GCC unroll 8
            for (int n = 0; n < N; n++) {
                vf xe = v_load_f32(xeo + (size_t)n * C + c, VW), xo = v_load_f32(xeo + (size_t)n * C + c + VW, VW);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) acc[r][n] = v_fma(wo[r], xo, v_fma(we[r], xe, acc[r][n]));
            }
        }
    }
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

// Q8_0 rows [o, o+R) against the N input rows: per block of 32, t = q . x (fp32), acc += d * t.
static inline __attribute__((always_inline)) void gemv_block_q8(float *out, const float *inp, const BlockQ8_0 *w,
                                                                const float *bias, int o, int C, int OC, const int R,
                                                                const int N) {
    enum { K = Q8_0_BLOCK / VW };  // vectors per block
    vf acc[4][CPU_GEMV_MAX_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) acc[r][n] = v_zero();
    int nb = C / Q8_0_BLOCK;
    for (int b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const BlockQ8_0 *blk = w + (size_t)(o + r) * nb + b;
            vf d = v_set1(cpu_f16_to_f32(blk->d)), wv[K];
#pragma GCC unroll 4
            for (int k = 0; k < K; k++) wv[k] = v_load_q8(blk->qs + k * VW);
#pragma GCC unroll 8
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + (size_t)b * Q8_0_BLOCK;
                vf t = v_mul(wv[0], v_load_f32(x, VW));
#pragma GCC unroll 4
                for (int k = 1; k < K; k++) t = v_fma(wv[k], v_load_f32(x + k * VW, VW), t);
                acc[r][n] = v_fma(d, t, acc[r][n]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) out[(size_t)n * OC + o + r] = v_sum(acc[r][n]) + (bias ? bias[o + r] : 0.0f);
}

#define GEMV_RANGE_Q8(R, N)                                                                                            \
    do {                                                                                                               \
        int o = o0;                                                                                                    \
        for (; o + (R) <= o1; o += (R)) gemv_block_q8(out, inp, wq, bias, o, C, OC, (R), (N));                         \
        for (; o < o1; o++) gemv_block_q8(out, inp, wq, bias, o, C, OC, 1, (N));                                       \
    } while (0)

// R x N accumulators, a block's K weight vectors, the running dot and the scale fit 16 registers.
static void gemv_range_q8(float *out, const float *inp, const BlockQ8_0 *wq, const float *bias, int o0, int o1, int C,
                          int OC, int N) {
    switch (N) {
    case 1: GEMV_RANGE_Q8(4, 1); break;
    case 2: GEMV_RANGE_Q8(4, 2); break;
    case 3: GEMV_RANGE_Q8(2, 3); break;
    case 4: GEMV_RANGE_Q8(2, 4); break;
    case 5: GEMV_RANGE_Q8(1, 5); break;
    case 6: GEMV_RANGE_Q8(1, 6); break;
    case 7: GEMV_RANGE_Q8(1, 7); break;
    default: GEMV_RANGE_Q8(1, 8); break;
    }
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
    // R x N accumulators plus 2 R weight vectors (bf16: even and odd) and two input vectors fit
    // the register file: 32 with AVX-512, 16 with AVX2.
#if defined(__AVX512F__)
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
#else
    switch (N) {
    case 1: GEMV_RANGE(4, 1); break;
    case 2: GEMV_RANGE(3, 2); break;
    case 3: GEMV_RANGE(2, 3); break;
    case 4: GEMV_RANGE(2, 4); break;
    case 5: GEMV_RANGE(1, 5); break;
    case 6: GEMV_RANGE(1, 6); break;
    case 7: GEMV_RANGE(1, 7); break;
    default: GEMV_RANGE(1, 8); break;
    }
#endif
}
#else
// No AVX2: plain loops (still one pass over the weights).
static void gemv_range_q8(float *out, const float *inp, const BlockQ8_0 *wq, const float *bias, int o0, int o1, int C,
                          int OC, int N) {
    int nb = C / Q8_0_BLOCK;
    for (int o = o0; o < o1; o++) {
        float acc[CPU_GEMV_MAX_ROWS] = {0};
        for (int b = 0; b < nb; b++) {
            const BlockQ8_0 *blk = wq + (size_t)o * nb + b;
            float d = f16_to_f32(blk->d);
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + (size_t)b * Q8_0_BLOCK;
                float t = 0;
                for (int j = 0; j < Q8_0_BLOCK; j++) t += (float)blk->qs[j] * x[j];
                acc[n] += d * t;
            }
        }
        for (int n = 0; n < N; n++) out[(size_t)n * OC + o] = acc[n] + (bias ? bias[o] : 0.0f);
    }
}

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

// inp (N,C), w (OC,C) fp32, bf16 or Q8_0, bias (OC) or NULL -> out (N,OC) = inp w^T + bias,
// N <= CPU_GEMV_MAX_ROWS
void cpu_gemv_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                      int C, int OC) {
    CHECK(N >= 1 && N <= CPU_GEMV_MAX_ROWS && (wdt == DT_F32 || wdt == DT_BF16 || wdt == DT_Q8_0));
    CHECK(wdt != DT_Q8_0 || C % Q8_0_BLOCK == 0);
    int bf16 = wdt == DT_BF16;
    float *xeo = NULL;
#ifdef VW
    if (bf16 && C >= 2 * VW) {  // each input row's blocks of 2 VW elements as (VW even, VW odd)
        xeo = cpu_scratch(be, CPU_SCR_GEMV, (size_t)N * C * sizeof(float));
        for (int n = 0; n < N; n++)
            for (int c = 0; c + 2 * VW <= C; c += 2 * VW)
                for (int i = 0; i < VW; i++) {
                    xeo[(size_t)n * C + c + i] = inp[(size_t)n * C + c + 2 * i];
                    xeo[(size_t)n * C + c + VW + i] = inp[(size_t)n * C + c + 2 * i + 1];
                }
    }
#endif
    int parts = (size_t)OC * C >= 65536 ? MIN(be->threads, OC) : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        // contiguous row ranges, boundaries on multiples of 4 rows
        int blocks = (OC + 3) / 4;
        int o0 = MIN(OC, (int)((long)blocks * part / parts) * 4), o1 = MIN(OC, (int)((long)blocks * (part + 1) / parts) * 4);
        if (wdt == DT_Q8_0) gemv_range_q8(out, inp, (const BlockQ8_0 *)w, bias, o0, o1, C, OC, N);
        else gemv_range(out, inp, xeo, w, bf16, bias, o0, o1, C, OC, N);
    }
}
