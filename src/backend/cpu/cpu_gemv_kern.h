// cpu_gemv_kern.h: the decode-sized matmul kernels of cpu_gemv.c, written once over a vector
// type and instantiated per instruction set: cpu_gemv_avx2.c and cpu_gemv_avx512.c define
// GEMV_AVX512 (or not) and GEMV_FN(name) under their `#pragma GCC target`, then include this
// file; cpu_gemv.c picks one at run time (CpuCtx.isa). Rows [o0, o1) of the output, one thread.
//
// Every weight vector is loaded once for all N input rows. fp32 walks a block of R rows at once
// (R x N accumulators in registers); bf16 and Q8_0 walk one row at a time with U independent
// accumulator sets (gemv_row_seq), so a thread's rows are one sequential stream.
// - fp32: one vector of weights, N FMAs.
// - bf16: a vector load holds 2 VW weights; the low half of each 32-bit lane is an even element
//   (shift it up), the high half the odd one (mask it), so no widening shuffle: 2 N FMAs
//   against the inputs' even / odd halves (xeo, prepared by the caller).
// - Q8_0, few rows (N small): per block, t = q . x (int8 widened to fp32 in registers), acc +=
//   d t: K + 1 FMAs per row and block for K vectors per block.
// - Q8_0, more rows: each block is dequantized once in registers (d q is exact in fp32: an
//   11-bit by an 8-bit significand), then N K FMAs: K + N K operations against N (K + 1), so
//   fewer once N > K (cpu_gemv_rows says where each is used).
// All arithmetic is fp32 FMA; a Q8_0 weight is used as its dequantized value d q (backend.h).
#include "cpu.h"

#include <immintrin.h>

#if defined(GEMV_AVX512)
#define VW 16
typedef __m512 vf;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
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
static inline vf v_load_q8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#else
#define VW 8
typedef __m256 vf;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
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
static inline vf v_load_q8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#endif

// a Q8_0 scale (fp16) as fp32 in every lane: the half broadcast, then widened (F16C is part of
// both targets) — two operations, where a scalar conversion and a broadcast of it take three
// with a dependence on the register the scalar was inserted into.
#if defined(GEMV_AVX512)
static inline vf v_set1_f16(uint16_t h) { return _mm512_cvtph_ps(_mm256_set1_epi16((short)h)); }
#else
static inline vf v_set1_f16(uint16_t h) { return _mm256_cvtph_ps(_mm_set1_epi16((short)h)); }
#endif

// Rows [o, o+R) of w against the N input rows: out[n, o+r] = x_n . w_{o+r} (+ bias).
// R and N are compile-time constants at every call site, so acc stays in registers.
static inline __attribute__((always_inline)) void gemv_block(const CpuGemvArgs *a, int o, const int R, const int N) {
    const int C = a->C, bf16 = a->wdt == DT_BF16;
    const void *w = a->w;
    const float *inp = a->inp, *xeo = a->xeo;
    vf acc[4][CPU_GEMV_MAX_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) acc[r][n] = v_zero();
    int c = 0;
    if (bf16 && xeo) {  // blocks of 2 VW elements; xeo holds each input block as VW even, VW odd
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
        for (int n = 0; n < N; n++)
            a->out[(size_t)n * a->OC + o + r] = v_sum(acc[r][n]) + (a->bias ? a->bias[o + r] : 0.0f);
}

// Q8_0 rows [o, o+R): per block of 32, t = q . x (fp32), acc += d * t (DQ = 0), or the block
// dequantized once, w = d q, and acc += w . x (DQ = 1).
static inline __attribute__((always_inline)) void gemv_block_q8(const CpuGemvArgs *a, int o, const int R, const int N,
                                                                const int DQ) {
    enum { K = Q8_0_BLOCK / VW };  // vectors per block
    const int C = a->C, nb = C / Q8_0_BLOCK;
    const BlockQ8_0 *w = (const BlockQ8_0 *)a->w;
    vf acc[4][CPU_GEMV_MAX_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) acc[r][n] = v_zero();
    for (int b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const BlockQ8_0 *blk = w + (size_t)(o + r) * nb + b;
            vf d = v_set1_f16(blk->d), wv[K];
#pragma GCC unroll 4
            for (int k = 0; k < K; k++) wv[k] = DQ ? v_mul(d, v_load_q8(blk->qs + k * VW)) : v_load_q8(blk->qs + k * VW);
#pragma GCC unroll 8
            for (int n = 0; n < N; n++) {
                const float *x = a->inp + (size_t)n * C + (size_t)b * Q8_0_BLOCK;
                if (DQ) {
#pragma GCC unroll 4
                    for (int k = 0; k < K; k++) acc[r][n] = v_fma(wv[k], v_load_f32(x + k * VW, VW), acc[r][n]);
                } else {
                    vf t = v_mul(wv[0], v_load_f32(x, VW));
#pragma GCC unroll 4
                    for (int k = 1; k < K; k++) t = v_fma(wv[k], v_load_f32(x + k * VW, VW), t);
                    acc[r][n] = v_fma(d, t, acc[r][n]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++)
            a->out[(size_t)n * a->OC + o + r] = v_sum(acc[r][n]) + (a->bias ? a->bias[o + r] : 0.0f);
}

// One Q8_0 block of a row against the N inputs x_n = x + n * C (its 32 columns): acc[n] +=
// d (q . x_n) (DQ = 0) or (d q) . x_n (DQ = 1).
static inline __attribute__((always_inline)) void q8_block(vf *acc, const BlockQ8_0 *blk, const float *x, int C,
                                                           const int N, const int DQ) {
    enum { K = Q8_0_BLOCK / VW };
    vf d = v_set1_f16(blk->d), wv[K];
#pragma GCC unroll 4
    for (int k = 0; k < K; k++) wv[k] = DQ ? v_mul(d, v_load_q8(blk->qs + k * VW)) : v_load_q8(blk->qs + k * VW);
#pragma GCC unroll 8
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * C;
        if (DQ) {
#pragma GCC unroll 4
            for (int k = 0; k < K; k++) acc[n] = v_fma(wv[k], v_load_f32(xn + k * VW, VW), acc[n]);
        } else {
            vf t = v_mul(wv[0], v_load_f32(xn, VW));
#pragma GCC unroll 4
            for (int k = 1; k < K; k++) t = v_fma(wv[k], v_load_f32(xn + k * VW, VW), t);
            acc[n] = v_fma(d, t, acc[n]);
        }
    }
}

// Row o alone, U independent sets of accumulators over the columns (few input rows): a thread's
// rows are then one sequential stream through memory, which the hardware prefetchers follow
// across row ends. R rows side by side are R short streams (a bf16 row of 1024 is 32 cache
// lines) that stop and start again every R rows; measured on Zen 3 (bench/gemv_bench, one
// thread, 256 MB of bf16 rows of 1024): 8.2-9.0 GB/s side by side, 10.7-11.9 sequential, beside
// a plain read's 13.4-15.0.
static inline __attribute__((always_inline)) void gemv_row_seq(const CpuGemvArgs *a, int o, const int U, const int N,
                                                               const int DQ) {
    const int C = a->C;
    const float *inp = a->inp, *xeo = a->xeo;
    vf acc[4][CPU_GEMV_MAX_ROWS];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) acc[u][n] = v_zero();
    if (a->wdt == DT_Q8_0) {
        const int nb = C / Q8_0_BLOCK;
        const BlockQ8_0 *w = (const BlockQ8_0 *)a->w + (size_t)o * nb;
        int b = 0;
        for (; b + U <= nb; b += U)
#pragma GCC unroll 4
            for (int u = 0; u < U; u++)
                q8_block(&acc[u][0], w + b + u, inp + (size_t)(b + u) * Q8_0_BLOCK, C, N, DQ);
        for (; b < nb; b++) q8_block(&acc[0][0], w + b, inp + (size_t)b * Q8_0_BLOCK, C, N, DQ);
    } else if (a->wdt == DT_BF16) {
        const uint16_t *w = (const uint16_t *)a->w + (size_t)o * C;
        int c = 0;
        if (xeo) {  // blocks of 2 VW: even elements shifted up, odd ones masked (see gemv_block)
            for (; c + U * 2 * VW <= C; c += U * 2 * VW)
#pragma GCC unroll 4
                for (int u = 0; u < U; u++) {
                    vf we, wo;
                    v_load_bf16_eo(w + c + u * 2 * VW, &we, &wo);
#pragma GCC unroll 8
                    for (int n = 0; n < N; n++) {
                        const float *x = xeo + (size_t)n * C + c + u * 2 * VW;
                        acc[u][n] = v_fma(wo, v_load_f32(x + VW, VW), v_fma(we, v_load_f32(x, VW), acc[u][n]));
                    }
                }
            for (; c + 2 * VW <= C; c += 2 * VW) {
                vf we, wo;
                v_load_bf16_eo(w + c, &we, &wo);
#pragma GCC unroll 8
                for (int n = 0; n < N; n++) {
                    const float *x = xeo + (size_t)n * C + c;
                    acc[0][n] = v_fma(wo, v_load_f32(x + VW, VW), v_fma(we, v_load_f32(x, VW), acc[0][n]));
                }
            }
        }
        for (; c < C; c += VW) {
            int k = C - c < VW ? C - c : VW;
            vf wv = v_load_bf16(w + c, k);
#pragma GCC unroll 8
            for (int n = 0; n < N; n++) acc[0][n] = v_fma(wv, v_load_f32(inp + (size_t)n * C + c, k), acc[0][n]);
        }
    } else {
        const float *w = (const float *)a->w + (size_t)o * C;
        int c = 0;
        for (; c + U * VW <= C; c += U * VW)
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                vf wv = v_load_f32(w + c + u * VW, VW);
#pragma GCC unroll 8
                for (int n = 0; n < N; n++)
                    acc[u][n] = v_fma(wv, v_load_f32(inp + (size_t)n * C + c + u * VW, VW), acc[u][n]);
            }
        for (; c < C; c += VW) {
            int k = C - c < VW ? C - c : VW;
            vf wv = v_load_f32(w + c, k);
#pragma GCC unroll 8
            for (int n = 0; n < N; n++) acc[0][n] = v_fma(wv, v_load_f32(inp + (size_t)n * C + c, k), acc[0][n]);
        }
    }
#pragma GCC unroll 8
    for (int n = 0; n < N; n++) {
        vf s = acc[0][n];
#pragma GCC unroll 4
        for (int u = 1; u < U; u++) s = v_add(s, acc[u][n]);
        a->out[(size_t)n * a->OC + o] = v_sum(s) + (a->bias ? a->bias[o] : 0.0f);
    }
}

#define GEMV_RANGE_SEQ(U, N, DQ)                                                                                       \
    do {                                                                                                               \
        for (int o = o0; o < o1; o++) gemv_row_seq(a, o, (U), (N), (DQ));                                              \
    } while (0)

// Rows [o0, o1): blocks of R rows, then single rows.
#define GEMV_RANGE(R, N)                                                                                               \
    do {                                                                                                               \
        int o = o0;                                                                                                    \
        for (; o + (R) <= o1; o += (R)) gemv_block(a, o, (R), (N));                                                    \
        for (; o < o1; o++) gemv_block(a, o, 1, (N));                                                                  \
    } while (0)
#define GEMV_RANGE_Q8(R, N, DQ)                                                                                        \
    do {                                                                                                               \
        int o = o0;                                                                                                    \
        for (; o + (R) <= o1; o += (R)) gemv_block_q8(a, o, (R), (N), (DQ));                                           \
        for (; o < o1; o++) gemv_block_q8(a, o, 1, (N), (DQ));                                                         \
    } while (0)

// fp32 walks R rows side by side (rows of 1024 fp32 are whole 4 KiB pages; measured no slower
// than one row at a time, and fewer loads of the inputs); bf16 and Q8_0 rows are short, so they
// go one row at a time (gemv_row_seq) except where that is already the case for the register
// file's sake (AVX2 from N = 5: R = 1). R (U) x N accumulators and the weight vectors of R rows
// (bf16: even and odd; Q8_0: a block's K) fit the register file: 32 with AVX-512, 16 with AVX2.
// Q8_0 dequantizes its blocks where that takes fewer operations: t = q . x costs N (K + 1) FMAs
// per row and block, dequantizing K + N K, so from N = K + 1.
void GEMV_FN(cpu_gemv_rows)(const CpuGemvArgs *a, int o0, int o1) {
    const int N = a->N;
    if (a->wdt != DT_F32) {
        const int q8 = a->wdt == DT_Q8_0;
#if defined(GEMV_AVX512)  // K = 2
        switch (N) {
        case 1: GEMV_RANGE_SEQ(4, 1, 0); break;
        case 2: GEMV_RANGE_SEQ(2, 2, 0); break;
        case 3: GEMV_RANGE_SEQ(2, 3, 1); break;
        case 4: GEMV_RANGE_SEQ(2, 4, 1); break;
        case 5: GEMV_RANGE_SEQ(2, 5, 1); break;
        case 6: GEMV_RANGE_SEQ(2, 6, 1); break;
        case 7: GEMV_RANGE_SEQ(2, 7, 1); break;
        default: GEMV_RANGE_SEQ(2, 8, 1); break;
        }
#else  // K = 4
        switch (N) {
        case 1: GEMV_RANGE_SEQ(4, 1, 0); break;
        case 2: GEMV_RANGE_SEQ(2, 2, 0); break;
        case 3: GEMV_RANGE_SEQ(2, 3, 0); break;
        case 4: GEMV_RANGE_SEQ(2, 4, 0); break;
        case 5:
            if (q8) GEMV_RANGE_Q8(1, 5, 1);
            else GEMV_RANGE(1, 5);
            break;
        case 6:
            if (q8) GEMV_RANGE_Q8(1, 6, 1);
            else GEMV_RANGE(1, 6);
            break;
        case 7:
            if (q8) GEMV_RANGE_Q8(1, 7, 1);
            else GEMV_RANGE(1, 7);
            break;
        default:
            if (q8) GEMV_RANGE_Q8(1, 8, 1);
            else GEMV_RANGE(1, 8);
            break;
        }
#endif
        (void)q8;
        return;
    }
#if defined(GEMV_AVX512)
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

// The input rows' blocks of 2 VW elements as (VW even, VW odd), for bf16 weights.
void GEMV_FN(cpu_gemv_split_eo)(float *xeo, const float *inp, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c + 2 * VW <= C; c += 2 * VW)
            for (int i = 0; i < VW; i++) {
                xeo[(size_t)n * C + c + i] = inp[(size_t)n * C + c + 2 * i];
                xeo[(size_t)n * C + c + VW + i] = inp[(size_t)n * C + c + 2 * i + 1];
            }
}
