// cpu_gemm_avx2.c: the prefill-sized linear layer for bf16 / f16 / Q8_0 weights (AVX2 + FMA +
// F16C, whatever -march the rest of the build has; cpu_matmul.c calls it only where cpuid
// reports these). out (N,OC) = inp (N,C) w^T, w (OC,C) stored as wdt.
//
// A cache-blocked GEMM with a 6 x 16 register tile (12 accumulators, 2 weight vectors and a
// broadcast input: 15 of the 16 ymm registers):
// - the input is packed once per call (cpu_gemm_pack_a_avx2): micro-panels of 6 rows, each
//   element k of the 6 rows side by side (k-major), rows past N zero;
// - for each block of KC columns of C, each block of 16 weight rows is widened to fp32 straight
//   into a k-major panel (16 weights of element k side by side, rows past OC zero): 16 rows of 8
//   elements loaded, widened in registers and transposed 8 x 8. Each weight is read and
//   converted once per call; the panel (KC x 16 fp32, 32 KiB) stays in L1 / L2 while every
//   input micro-panel (6 x KC, 12 KiB, from L2) goes past it, and while it is used the next
//   panel's weights are prefetched (their rows are short streams the hardware does not follow);
//   KC = 512: of 128 / 256 / 384 / 512 / 1024, timed on a shared Zen 3 (bench/gemm_bench), 384
//   and 512 were fastest and 128 slowest, a few percent apart;
// - the micro-kernel sums KC products per output in registers and adds them to out (or, in the
//   first block with beta = 0, stores them).
// Every output element is the same sequence of fp32 FMAs and adds whatever the thread count or
// the range of columns a thread owns.
#include "cpu.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#define MR CPU_GEMM_MR
#define NR CPU_GEMM_NR
#define KC CPU_GEMM_KC

// ap (panels, C, MR): micro-panels [p0, p1) of inp (N,C), rows past N zero.
void cpu_gemm_pack_a_avx2(float *ap, const float *inp, int N, int C, int p0, int p1) {
    for (int p = p0; p < p1; p++) {
        float *dst = ap + (size_t)p * C * MR;
        int r0 = p * MR, mr = N - r0 < MR ? N - r0 : MR;
        for (int i = 0; i < MR; i++) {
            if (i >= mr) {
                for (int k = 0; k < C; k++) dst[(size_t)k * MR + i] = 0.0f;
                continue;
            }
            const float *src = inp + (size_t)(r0 + i) * C;
            for (int k = 0; k < C; k++) dst[(size_t)k * MR + i] = src[k];
        }
    }
}

// Element `off` of the table as fp32.
static inline float load1(const void *w, DType wdt, size_t off) {
    if (wdt == DT_BF16) return bf16_to_f32(((const uint16_t *)w)[off]);
    if (wdt == DT_F16) return cpu_f16_to_f32(((const uint16_t *)w)[off]);
    if (wdt == DT_Q8_0) {
        const BlockQ8_0 *b = (const BlockQ8_0 *)w + off / Q8_0_BLOCK;
        return cpu_f16_to_f32(b->d) * (float)b->qs[off % Q8_0_BLOCK];
    }
    return ((const float *)w)[off];
}

// 8 consecutive weights from element `off` of the table, as fp32.
static inline __attribute__((always_inline)) __m256 load8(const void *w, const DType wdt, size_t off) {
    if (wdt == DT_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + off));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    if (wdt == DT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + off)));
    if (wdt == DT_Q8_0 && off % Q8_0_BLOCK <= Q8_0_BLOCK - 8) {  // all 8 in one block
        const BlockQ8_0 *b = (const BlockQ8_0 *)w + off / Q8_0_BLOCK;
        __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + off % Q8_0_BLOCK))));
        return _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16((short)b->d)), q);
    }
    if (wdt == DT_F32) return _mm256_loadu_ps((const float *)w + off);
    float t[8];  // Q8_0 across a block boundary (rows not a whole number of blocks)
    for (int i = 0; i < 8; i++) t[i] = load1(w, wdt, off + i);
    return _mm256_loadu_ps(t);
}

// r[i] (8 rows of 8) transposed in place
static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// bp (kc, NR): bp[k][j] = w[o + j][pc + k] as fp32 for j < nr, 0 for the rest.
static inline __attribute__((always_inline)) void pack_b(float *bp, const void *w, const DType wdt, int C, int OCp,
                                                         int o, int nr, int pc, int kc) {
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        if (k % 32 == 0 && wdt != DT_F32)  // the next panel's rows, 32 elements (a cache line or less) each
            for (int j = 0; j < NR && o + NR + j < OCp; j++) {
                size_t off = (size_t)(o + NR + j) * C + pc + k;
                _mm_prefetch(wdt == DT_Q8_0 ? (const char *)((const BlockQ8_0 *)w + off / Q8_0_BLOCK)
                                            : (const char *)((const uint16_t *)w + off),
                             _MM_HINT_T0);
            }
        for (int h = 0; h < NR; h += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                r[j] = h + j < nr ? load8(w, wdt, (size_t)(o + h + j) * C + pc + k) : _mm256_setzero_ps();
            transpose8(r);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) _mm256_store_ps(bp + (size_t)(k + i) * NR + h, r[i]);
        }
    }
    for (; k < kc; k++)  // the last C % 8 elements
        for (int j = 0; j < NR; j++) bp[(size_t)k * NR + j] = j < nr ? load1(w, wdt, (size_t)(o + j) * C + pc + k) : 0.0f;
}

// c (R, nr; row stride ldc) (+)= a (kc, MR) b (kc, NR) summed over k, for the first R rows of
// the micro-panel (R <= MR, a constant at each call: a last panel of fewer rows costs no FMAs
// on its zero rows); stored when acc = 0. The sums are named variables, not an array, so the
// compiler keeps them in registers.
static inline __attribute__((always_inline)) void kernel(int kc, const float *a, const float *b, float *c, int ldc,
                                                         const int R, int nr, int acc) {
    __m256 s00 = _mm256_setzero_ps(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00;
    __m256 s30 = s00, s31 = s00, s40 = s00, s41 = s00, s50 = s00, s51 = s00;
#define ROW(i, r0, r1)                                                                                                 \
    if (R > (i)) {                                                                                                     \
        __m256 x = _mm256_broadcast_ss(a + (i));                                                                       \
        r0 = _mm256_fmadd_ps(x, b0, r0);                                                                               \
        r1 = _mm256_fmadd_ps(x, b1, r1);                                                                               \
    }
    for (int k = 0; k < kc; k++, a += MR, b += NR) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        ROW(0, s00, s01)
        ROW(1, s10, s11)
        ROW(2, s20, s21)
        ROW(3, s30, s31)
        ROW(4, s40, s41)
        ROW(5, s50, s51)
    }
#undef ROW
    __m256 s[MR][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}, {s40, s41}, {s50, s51}};
    if (nr == NR) {
        for (int i = 0; i < R; i++) {
            float *ci = c + (size_t)i * ldc;
            if (acc) {
                s[i][0] = _mm256_add_ps(_mm256_loadu_ps(ci), s[i][0]);
                s[i][1] = _mm256_add_ps(_mm256_loadu_ps(ci + 8), s[i][1]);
            }
            _mm256_storeu_ps(ci, s[i][0]);
            _mm256_storeu_ps(ci + 8, s[i][1]);
        }
        return;
    }
    float t[MR][NR];  // an edge tile: only its R x nr part is out's
    for (int i = 0; i < R; i++) _mm256_storeu_ps(t[i], s[i][0]), _mm256_storeu_ps(t[i] + 8, s[i][1]);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < nr; j++) {
            float *ci = c + (size_t)i * ldc + j;
            *ci = acc ? *ci + t[i][j] : t[i][j];
        }
}

// the micro-kernel for the panel's mr rows
static void kernel_rows(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr, int acc) {
    switch (mr) {
    case 1: kernel(kc, a, b, c, ldc, 1, nr, acc); break;
    case 2: kernel(kc, a, b, c, ldc, 2, nr, acc); break;
    case 3: kernel(kc, a, b, c, ldc, 3, nr, acc); break;
    case 4: kernel(kc, a, b, c, ldc, 4, nr, acc); break;
    case 5: kernel(kc, a, b, c, ldc, 5, nr, acc); break;
    default: kernel(kc, a, b, c, ldc, MR, nr, acc); break;
    }
}

static inline __attribute__((always_inline)) void cols(const CpuGemmArgs *g, float *bp, int o0, int o1,
                                                       const DType wdt) {
    const int N = g->N, C = g->C, OC = g->OC, panels = (N + MR - 1) / MR;
    for (int pc = 0; pc < C; pc += KC) {
        int kc = C - pc < KC ? C - pc : KC, acc = pc > 0 || g->beta != 0.0f;
        for (int o = o0; o < o1; o += NR) {
            int nr = o1 - o < NR ? o1 - o : NR;
            pack_b(bp, g->w, wdt, C, o1, o, nr, pc, kc);
            for (int p = 0; p < panels; p++) {
                int mr = N - p * MR < MR ? N - p * MR : MR;
                kernel_rows(kc, g->ap + (size_t)p * C * MR + (size_t)pc * MR, bp, g->out + (size_t)p * MR * OC + o, OC,
                            mr, nr, acc);
            }
        }
    }
}

// Output columns [o0, o1) (o0 a multiple of NR) on the calling thread; bp: its panel (KC, NR).
void cpu_gemm_cols_avx2(const CpuGemmArgs *g, float *bp, int o0, int o1) {
    switch (g->wdt) {
    case DT_BF16: cols(g, bp, o0, o1, DT_BF16); break;
    case DT_F16: cols(g, bp, o0, o1, DT_F16); break;
    case DT_Q8_0: cols(g, bp, o0, o1, DT_Q8_0); break;
    default: cols(g, bp, o0, o1, DT_F32); break;
    }
}
#endif
