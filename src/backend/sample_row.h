// sample_row.h: one row of the sort-free sampler of backend.h (sample_logits) on the host, over a
// group of vocabulary shards. The cpu backend samples its rows as a group of one; tensor
// parallelism (gen/sample_shard.c) as a group of T ranks, each holding columns [lo, lo + V) of
// every row. Every threshold is found by a radix walk over histograms summed over the group, and
// every sum is the sum of the shards' sums: token masses are the fixed-point integers of
// sample_math.h, so the top-k and top-p thresholds, the kept ties (in index order: the counts of
// the ranks before this one) and the inverse-CDF draw are those of one process exactly; only the
// log-probs' double sums are added in another order across shards.
#ifndef STILL_SAMPLE_ROW_H
#define STILL_SAMPLE_ROW_H

#include "backend.h"

typedef struct SampleGroup {
    int T, t;   // ranks in the group and this one's index
    int lo, V;  // this shard's columns [lo, lo + V) of a row of T * V
    // recv (T * n bytes) = every rank's send (n bytes), in rank order (T > 1 only)
    void (*gather)(void *ctx, void *recv, const void *send, size_t n);
    void *ctx;
    void *buf;  // T * SAMPLE_GROUP_BUF bytes (T > 1 only)
} SampleGroup;

#define SAMPLE_GROUP_BUF (2048 * sizeof(uint64_t))  // the largest exchange: a top-digit histogram

// The row's id (global), its log-prob after the processors (lp_out) and of the raw logits at the
// temperature (lp_raw_out), each optional. logits (V) this shard's columns; s (V) scratch for the
// processed scores (may be logits itself when lp_raw_out is NULL); seen (T * V) the whole row's
// seen ids (NULL when repetition_penalty is 1); banned (K) whole-row ids, entries outside the row
// ignored; u the row's uniform (sampling rows).
void sample_row_group(const SampleGroup *g, int32_t *id_out, float *lp_out, float *lp_raw_out, float *s,
                      const float *logits, const SampleParams *p, double u, const uint8_t *seen,
                      const int32_t *banned, int K);

#endif
