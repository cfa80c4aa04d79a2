// fsdp.h: FSDP / ZeRO-3. The parameters, their summed gradient and (in optim.c) the AdamW moments
// are sharded by flat range over the FSDP axis of the mesh: the model is cut into units (one per
// layer, and one for the embedding, final norm and LM head), each unit's floats in parameter-buffer
// order (alignment gaps included, always zero) split into one block per rank (dist_shard_range).
// Through the model's hooks (model.h) a layer is all-gathered into a working buffer before its
// forward and again before its backward, and its gradient, accumulated in the working gradient
// buffer of the same slot, is reduce-scattered into this rank's block once the layer's backward is
// done. The rest unit (embedding, norm, head) is gathered once per optimizer step and stays
// resident until the update; its gradient is reduce-scattered at the end of each backward pass.
//
// Prefetch (FsdpPrefetch; both on by default; off on an FSDP axis of one rank): two slots of a layer and its gradient. The forward
// starts layer l+1's gather when layer l is materialized (layer 0's with the rest), the backward
// layer l-1's when layer l is, and layer l's gradient reduce-scatter stays in flight while layer
// l-1's backward runs: the next layer's hook completes it (dist_wait). The layer to prefetch
// follows the calls: up after a lower layer or the rest, down after a higher layer or the same
// one (the backward starts with the forward's last layer); a wrong guess is completed and
// discarded, so every rank issues the same collectives whatever the model does. The results are
// bit for bit those of the blocking path (the same collectives on the same data, the gradient
// blocks added in the same order). A failed collective inside a hook is kept (fsdp_status) and
// every later one is skipped.
//
// A model with an adapter (LoRA, model/lora.h) shards its frozen base the same way (fp32 or bf16,
// the units' bytes moved as 4-byte words, the collectives never add them): each layer is
// all-gathered before its forward and its backward, the rest once and kept, and nothing has a
// gradient (no gradient buffers, no reduce-scatter). The adapter is not sharded: it trains
// whole on every rank as ZeRO-0 trains it (optim.c), its gradient all-reduced over the data axis.
#ifndef STILL_FSDP_H
#define STILL_FSDP_H

#include "../dist/dist.h"
#include "../model/model.h"

typedef struct FsdpUnit {
    int nseg;
    size_t seg_at[2], seg_n[2];  // floats: where each segment starts in the full parameter layout, length
    size_t n;                    // floats of the unit (segments back to back)
    size_t lo, hi;               // this rank's block of [0, n)
    size_t at;                   // where the block starts in the shard buffers
    size_t *counts;              // (F) every rank's block size
} FsdpUnit;

// What overlaps communication with compute (--fsdp_forward_prefetch, --fsdp_backward_prefetch).
typedef struct FsdpPrefetch {
    int forward;   // the next layer's gather in flight during a layer's forward
    int backward;  // the next (lower) layer's gather and this layer's reduce-scatter during the backward
} FsdpPrefetch;

typedef struct Fsdp {
    Dist *d;                     // the FSDP axis
    Dist *dp;                    // data-parallel replicas of each shard (NULL or world 1: none)
    Model *m;
    int frozen;                  // m's base is frozen (it has an adapter): no gradients (g, gwork, grest, tmp NULL)
    int L;                       // units 0..L-1: layers; unit L: embedding, final norm, LM head
    FsdpUnit *u;                 // (L + 1)
    int *unit_of;                // (tt.n) each tensor's unit
    size_t *upos;                // (tt.n) where each tensor starts inside its unit's floats
    size_t n;                    // floats of this rank's blocks, all units
    size_t layer_n;              // floats of the largest layer
    float *p, *g;                // device (n): the parameter blocks and their summed gradient
    FsdpPrefetch pf;
    int nslots;                  // 2 with any prefetch, else 1
    float *work[2], *gwork[2];   // device (layer_n) per slot: a gathered layer and its gradient
    int held[2];                 // the layer each slot's work holds (or is being gathered into), -1: none
    int cur;                     // the slot of the layer materialized last, -1: none
    int last;                    // that layer, -1: the rest (a forward starts there)
    DistReq ag;                  // the prefetched gather in flight, into slot ag_slot (-1: none)
    int ag_slot;
    DistReq rs;                  // a layer's gradient reduce-scatter in flight, from slot rs_slot (-1: none)
    int rs_slot, rs_unit;
    long started;                // collectives started ahead and left in flight across a layer's compute
    long in_flight;              // of which still incomplete when the compute began (dist_test)
    float *rest, *grest;         // device (unit L): the gathered rest and its gradient
    float *tmp;                  // device (largest block): one reduce-scattered block
    float *full;                 // device (param_bytes) while fsdp_full_begin holds one, else NULL
    int rest_ok;                 // rest holds the current parameters
    Status st;                   // the first failure inside a hook
    Err err;
    ModelHooks hooks;            // with the tensor-parallel reduce hook of the model's, if any
    const ModelHooks *prev;      // the model's hooks before (restored by fsdp_free)
} Fsdp;

// Whether ZeRO-3 supports this model: an fp32 model of its own (not frozen), or an adapter on an
// fp32 or bf16 base without tensor parallelism.
Status fsdp_check_model(const Model *m, Err *e);
// Shard m over d (its parameters are copied into this rank's blocks and the full buffer freed;
// a frozen base's checkpoint mapping closed), install the hooks. dp may be NULL.
void fsdp_init(Fsdp *f, Model *m, Dist *d, Dist *dp, FsdpPrefetch pf);
// Uninstall the hooks; the model is left without parameters (it is freed next).
void fsdp_free(Fsdp *f);
// The first failure of a hook's collective (ST_OK: none).
Status fsdp_status(Fsdp *f, Err *e);
// Zero this rank's gradient blocks (the start of a step).
void fsdp_zero_grads(Fsdp *f);
// The parameters changed (after an update): every unit is gathered again when next used.
void fsdp_invalidate(Fsdp *f);
// Collective. Every tensor of m whole in one full parameter buffer (m->params, m->data), on
// every rank (all) or on rank 0 of the FSDP axis only (the one that writes a checkpoint).
Status fsdp_full_begin(Fsdp *f, int all, Err *e);
// Back to shards; with scatter, this rank's blocks are first taken from the full buffer (after
// a resume wrote the weights into it).
void fsdp_full_end(Fsdp *f, int scatter);
// For optim.c: call fn on every piece of a tensor inside this rank's blocks: the tensor, the
// piece's first element inside the tensor, its index in the shard buffers, its length.
void fsdp_for_pieces(const Fsdp *f, void (*fn)(void *ctx, const TensorInfo *t, size_t elem, size_t at, size_t len),
                     void *ctx);
// Host moments: the complete buffer (tt.n_params, table order) on rank 0 of the FSDP axis from
// every rank's blocks (shard, device n); collective over the FSDP axis.
Status fsdp_gather_flat(Fsdp *f, float *full_host, const float *shard, Err *e);
// This rank's blocks (device n) of a complete host buffer (tt.n_params, table order).
void fsdp_scatter_flat(Fsdp *f, float *shard, const float *full_host);
// Per-rank bytes of what sharded training holds: the blocks (params, gradients, 2 moments) and
// the working buffers (a layer and its gradient per slot, the rest and its gradient, one block).
size_t fsdp_bytes(const Fsdp *f);
// Floats of the largest layer unit and of the rest unit of a tensor table (alignment gaps included).
void fsdp_unit_floats(const TensorTable *tt, size_t *layer_n, size_t *rest_n);
// Working-buffer bytes of a model whose largest layer is layer_n floats and rest unit rest_n
// (still info, the trainer's memory check): what fsdp_bytes adds to the blocks, without the block;
// frozen: a frozen base's (no gradient buffers).
size_t fsdp_work_bytes(size_t layer_n, size_t rest_n, FsdpPrefetch pf, int frozen);
// The prefetch counters as one log line (tests/e2e/dist_fsdp.sh reads it).
void fsdp_overlap_line(const Fsdp *f, char *buf, size_t n);

#endif
