// bench_weights.h: random matrices for the matmul benches (gemm_bench.c, gemv_bench.c), in any
// storage dtype, from a seeded xorshift stream (the same numbers in every run and both benches).
#ifndef STILL_BENCH_WEIGHTS_H
#define STILL_BENCH_WEIGHTS_H

#include "core/alloc.h"
#include "core/dtype.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct { uint64_t s; } BenchRng;
#define BENCH_RNG_INIT {88172645463325252ull}

// Uniform in [-0.05, 0.05).
static inline float bench_rnd(BenchRng *r) {
    r->s ^= r->s << 13, r->s ^= r->s >> 7, r->s ^= r->s << 17;
    return ((float)(r->s >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
}

// A random (oc, c) weight table stored as dt (f32, bf16, f16 or Q8_0, c a multiple of 32 for
// Q8_0); xaligned, released with free().
static inline void *bench_weight(BenchRng *r, DType dt, int oc, int c) {
    size_t n = (size_t)oc * c;
    float *f = xaligned(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = bench_rnd(r);
    if (dt == DT_F32) return f;
    void *w = xaligned(dtype_bytes(dt, n));
    if (dt == DT_Q8_0) q8_0_quantize(w, f, n);
    else
        for (size_t i = 0; i < n; i++) ((uint16_t *)w)[i] = dt == DT_BF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
    free(f);
    return w;
}

#endif
