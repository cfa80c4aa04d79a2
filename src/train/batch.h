// batch.h: examples -> rows (one example, or several packed documents) -> static-shape
// micro-batches (B, T) with T rounded up to pad_to_multiple_of (or fixed at max_length).
//
// Data parallel: a global micro-batch is world * B consecutive rows of the epoch's order, and
// rank r fills rows [r*B, (r+1)*B) of it (accelerate's batch-sampler sharding), so the ranks
// together see exactly what one process with world * B rows per micro-batch sees. T is each
// rank's own (its rows' longest, rounded up), as every device pads its own batch.
//
// Inside a row every document is its own segment (attention never crosses documents), RoPE
// positions restart at 0 per document, and the next-token target of a document's last token is
// IGNORE_INDEX (so the first token of a document is never a target), as TRL's padding-free
// collator does with position_ids.
#ifndef STILL_BATCH_H
#define STILL_BATCH_H

#include "data.h"

typedef enum { PACK_NONE = 0, PACK_BFD, PACK_WRAPPED } PackStrategy;

typedef struct Rows {
    int n;                // rows
    int *start;           // (n + 1) offsets into the token arrays
    int32_t *ids;         // (total)
    int32_t *targets;     // (total) shifted labels, IGNORE_INDEX = no loss
    int32_t *pos;         // (total)
    int32_t *seg;         // (total) 1.. per document within its row
    int max_len;
} Rows;

Status batch_parse_packing(const char *s, PackStrategy *out, Err *e);
// Build rows. PACK_NONE: one row per example. PACK_BFD: best-fit-decreasing bins of seq_len
// within blocks of 1000 examples (TRL's map batch), over-long documents truncated. PACK_WRAPPED:
// everything concatenated and cut every seq_len tokens.
void batch_make_rows(Rows *r, const Dataset *d, PackStrategy pack, int seq_len);
void batch_rows_free(Rows *r);

typedef struct BatchConfig {
    int B;                 // rows per micro-batch (per rank)
    int rank, world;       // this process's shard of every global micro-batch (world <= 1: one process)
    int pad_to_multiple_of;// <= 1: off
    int fixed_T;           // > 0: every batch has this T (--padding max_length)
    int same_T;            // T of the whole global micro-batch on every rank (expert parallel: ep.h)
    int drop_last;
    int shuffle;           // reshuffle rows every epoch (seeded)
    uint64_t seed;
} BatchConfig;

// One micro-batch on the host, buffers sized for the largest T once (no allocation per step).
typedef struct HostBatch {
    int B, T;
    int32_t *ids, *pos, *seg, *targets;  // (B, T) each
    int n_targets;         // targets != IGNORE_INDEX
    int n_tokens;          // real (non-padding) tokens
    int n_rows;            // real rows (the last batch of an epoch may have fewer than B)
} HostBatch;

typedef struct Batcher {
    BatchConfig cfg;
    const Rows *rows;
    int n_batches;         // (global) micro-batches per epoch
    int Tmax;              // largest T any batch can have
    int *order;            // (rows->n) row order of the current epoch
    int order_epoch;       // epoch `order` belongs to (-1 none)
} Batcher;

// The row order of an epoch: 0..n-1, shuffled (Fisher-Yates keyed by seed and epoch) or not.
void batch_epoch_order(int *order, int n, int shuffle, uint64_t seed, int epoch);
void batcher_init(Batcher *bt, const Rows *rows, const BatchConfig *cfg);
// order (n) = the items of an epoch in the order its batches take them: 0..n-1, or (shuffle) a
// permutation keyed by (seed, epoch), the same one every run and every rank draws.
void batch_epoch_order(int *order, int n, int shuffle, uint64_t seed, int epoch);
void batcher_free(Batcher *bt);
void host_batch_init(HostBatch *hb, const Batcher *bt);
void host_batch_free(HostBatch *hb);
// Fill micro-batch `index` of `epoch` (a pure function of seed, epoch and index).
void batcher_fill(Batcher *bt, int epoch, int index, HostBatch *hb);
// T that micro-batch `index` of `epoch` will have.
int batcher_T(Batcher *bt, int epoch, int index);

#endif
