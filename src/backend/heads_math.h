// heads_math.h: the top-k support rule of distill_head, shared by every backend so that the
// support is the same set of tokens everywhere given the same teacher logits. Exact (integer keys
// of sample_math.h, radix select), no sort. Backends include it; it defines nothing else.
#ifndef STILL_HEADS_MATH_H
#define STILL_HEADS_MATH_H

#include "sample_math.h"

// The support of the k largest values of x (V), 1 <= k < V: every x with key > *thr, then the
// first *ties (ascending index) with key == *thr. Four passes of 8-bit digits over x.
static inline void heads_topk_rule(const float *x, int V, int k, uint32_t *thr, int *ties) {
    uint32_t prefix = 0, mask = 0;
    long need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        long cnt[256] = {0};
        for (int i = 0; i < V; i++) {
            uint32_t key = sample_key(x[i]);
            if ((key & mask) == prefix) cnt[(key >> shift) & 255]++;
        }
        int d = 255;
        for (; d > 0 && cnt[d] < need; d--) need -= cnt[d];
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
    }
    *thr = prefix;   // the k-th largest key
    *ties = (int)need;  // how many of the values equal to it belong to the top k
}

// Restrict a row to the teacher's top k: every entry of zs and zt (V) outside the support
// becomes -inf (k <= 0 or k >= V: the whole vocabulary, nothing changes).
static inline void heads_topk_mask(float *zs, float *zt, int V, int k) {
    if (k <= 0 || k >= V) return;
    uint32_t thr;
    int ties;
    heads_topk_rule(zt, V, k, &thr, &ties);
    for (int v = 0; v < V; v++) {
        uint32_t key = sample_key(zt[v]);
        int keep = key > thr || (key == thr && ties-- > 0);
        if (!keep) zs[v] = zt[v] = -INFINITY;
    }
}

#endif
