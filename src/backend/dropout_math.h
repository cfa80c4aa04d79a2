// dropout_math.h: the dropout mask every backend shares, a pure function of (key, salt, element),
// so that ref, cpu and cuda drop the same elements and a backward pass regenerates the forward's
// mask instead of storing it. Backends include it; it defines nothing else.
#ifndef STILL_DROPOUT_MATH_H
#define STILL_DROPOUT_MATH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DROPOUT_FN static inline __host__ __device__
#else
#define DROPOUT_FN static inline
#endif

// splitmix64's finaliser over the element's counter: 24 uniform bits u in [0, 1); kept iff u >= p.
DROPOUT_FN int dropout_keep(uint64_t key, uint64_t salt, size_t i, float p) {
    uint64_t z = key + salt * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(uint32_t)(z >> 40) * 0x1p-24f;
    return u >= p;
}

// The key whose element i is element i0 + i of key's (the counter is linear in i): a part of a
// larger buffer (a rank's columns of each row under tensor parallelism) draws the whole buffer's
// mask, dropout_keep(dropout_key_at(key, i0), salt, i, p) == dropout_keep(key, salt, i0 + i, p).
DROPOUT_FN uint64_t dropout_key_at(uint64_t key, size_t i0) { return key + (uint64_t)i0 * 0xD1B54A32D192ED03ull; }

// The factor of a kept element (fp32, as torch's 1 / (1 - p)).
DROPOUT_FN float dropout_scale(float p) { return 1.0f / (1.0f - p); }

#endif
