// sample_math.h: the exact arithmetic every backend's sampler shares (docs/sampling.md), so that
// the kept sets and the drawn ids are the same bits on ref, cpu and cuda and do not depend on
// summation order or thread count. Backends include it; it defines nothing else.
#ifndef STILL_SAMPLE_MATH_H
#define STILL_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

// The CUDA backend compiles the same functions for the device (__host__ __device__ under nvcc).
#ifdef __CUDACC__
#define SAMPLE_FN static inline __host__ __device__
#else
#define SAMPLE_FN static inline
#endif

// Token masses are fixed point: E = round(exp(x - m) * 2^SAMPLE_MASS_BITS) with m the row max,
// so E(max) = 2^44 and a row of up to 2^20 tokens sums exactly in a uint64. Integer sums are
// associative: every backend finds the same top-p boundary and the same drawn token.
#define SAMPLE_MASS_BITS 44

// Order-preserving u32 key of a float (larger value -> larger key; -0 and +0 are one key).
// Branch-free so that loops over keys vectorise; x + 0.0f turns -0 into +0.
SAMPLE_FN uint32_t sample_key(float x) {
    uint32_t b;
    float y = x + 0.0f;
    memcpy(&b, &y, sizeof b);
    return b ^ ((uint32_t)((int32_t)b >> 31) | 0x80000000u);
}

// e = exp(x - m) in double (the min-p criterion uses it directly).
SAMPLE_FN double sample_rel_exp(float x, float m) {
    if (x == -INFINITY) return 0.0;
    return exp((double)x - (double)m);
}

SAMPLE_FN uint64_t sample_mass(float x, float m) {
    return (uint64_t)(sample_rel_exp(x, m) * 0x1p44 + 0.5);
}

// Top-p keeps the smallest descending prefix whose mass reaches "keep" (HF removes the ascending
// prefix whose fp32 cumsum is <= fp32(1 - top_p)). With total mass Z: removable R =
// floor(fp32(1 - top_p) * Z) computed exactly, keep = Z - R. 0 means "keep only the top token".
SAMPLE_FN uint64_t sample_topp_keep(double top_p, uint64_t Z) {
    float thr = (float)(1.0 - top_p);
    if (!(thr > 0.0f)) return Z;
    if (thr >= 1.0f) return 0;
    int ex;
    float fr = frexpf(thr, &ex);                  // thr = fr * 2^ex, fr in [0.5, 1), ex <= 0
    uint64_t M = (uint64_t)ldexpf(fr, 24);        // thr = M * 2^(ex - 24), M < 2^24 exact
    unsigned __int128 prod = (unsigned __int128)M * Z;
    uint64_t R = (uint64_t)(prod >> (24 - ex));
    return Z - R;
}

// The inverse-CDF target for a uniform u in [0, 1): floor(u * Z) exactly, with u's 53 bits.
SAMPLE_FN uint64_t sample_target(double u, uint64_t Z) {
    if (!(u > 0.0)) return 0;
    uint64_t u53 = (uint64_t)(u * 0x1p53);
    if (u53 >= (1ull << 53)) u53 = (1ull << 53) - 1;
    return (uint64_t)(((unsigned __int128)u53 * Z) >> 53);
}

// The repetition penalty of HF's RepetitionPenaltyLogitsProcessor, in fp32.
SAMPLE_FN float sample_penalize(float s, float theta) { return s < 0.0f ? s * theta : s / theta; }

#endif
