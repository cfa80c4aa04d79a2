// rng.c: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
#include "rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void philox4x32(uint32_t out[4], uint64_t key, const uint32_t ctr[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

void rng_init(Rng *r, uint64_t seed, uint64_t stream) {
    r->key = seed;
    r->counter = stream << 40;
    r->have = 0;
}

uint32_t rng_u32(Rng *r) {
    if (r->have == 0) {
        uint32_t ctr[4] = {(uint32_t)r->counter, (uint32_t)(r->counter >> 32), 0x5eed, 0};
        philox4x32(r->buf, r->key, ctr);
        r->counter++;
        r->have = 4;
    }
    return r->buf[4 - r->have--];
}

uint64_t rng_u64(Rng *r) {
    uint64_t hi = rng_u32(r);
    return (hi << 32) | rng_u32(r);
}

float rng_uniform(Rng *r) { return (float)(rng_u32(r) >> 8) * (1.0f / 16777216.0f); }

double rng_uniform_d(Rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

float rng_normal(Rng *r) {
    // Box-Muller; u1 in (0,1] so log is finite.
    double u1 = 1.0 - rng_uniform_d(r);
    double u2 = rng_uniform_d(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t rng_below(Rng *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng_u64(r);
    while (x >= limit);
    return x % n;
}

double rng_keyed_uniform(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    uint32_t ctr[4] = {a, b, c, d}, out[4];
    philox4x32(out, seed, ctr);
    uint64_t bits = ((uint64_t)out[0] << 32 | out[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);
}
