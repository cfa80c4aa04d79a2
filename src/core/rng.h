// rng.h: counter-based random numbers (Philox4x32-10). A draw is a pure function of
// (key, counter), so a sampled token can be keyed by (seed, prompt index, sequence index, step)
// and does not depend on batch composition, thread count or backend.
#ifndef STILL_RNG_H
#define STILL_RNG_H

#include <stdint.h>

// One Philox4x32-10 block: 4 random u32 from a 64-bit key and a 128-bit counter.
void philox4x32(uint32_t out[4], uint64_t key, const uint32_t ctr[4]);

// A sequential stream (initialisation, shuffles): key = seed, counter advances.
typedef struct Rng {
    uint64_t key;
    uint64_t counter;   // block index
    uint32_t buf[4];
    int have;           // unread words in buf
} Rng;

void rng_init(Rng *r, uint64_t seed, uint64_t stream);
uint32_t rng_u32(Rng *r);
uint64_t rng_u64(Rng *r);
// uniform in [0, 1) with 24 random bits (float) or 53 (double)
float rng_uniform(Rng *r);
double rng_uniform_d(Rng *r);
float rng_normal(Rng *r);
// uniform integer in [0, n)
uint64_t rng_below(Rng *r, uint64_t n);

// Keyed uniform in [0,1) (53 bits): key (seed), counter (a, b, c) e.g. (prompt, sequence, step).
double rng_keyed_uniform(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d);

#endif
