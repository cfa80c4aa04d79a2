// fsdp.h: FSDP / ZeRO-3. The parameters, their summed gradient and (in optim.c) the AdamW moments
// are sharded by flat range over the FSDP axis of the mesh: the model is cut into units (one per
// layer, and one for the embedding, final norm and LM head), each unit's floats in parameter-buffer
// order (alignment gaps included, always zero) split into one block per rank (dist_shard_range).
// Through the model's hooks (model.h) a layer is all-gathered into one working buffer just before
// its forward and again before its backward (the buffer is reused by the next layer), and its
// gradient, accumulated in a working gradient buffer, is reduce-scattered into this rank's block
// as soon as the layer's backward is done. The rest unit (embedding, norm, head) is gathered once
// per optimizer step and stays resident until the update; its gradient is reduce-scattered at the
// end of each backward pass. A failed collective inside a hook is kept (fsdp_status) and every
// later one is skipped.
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

typedef struct Fsdp {
    Dist *d;                     // the FSDP axis
    Dist *dp;                    // data-parallel replicas of each shard (NULL or world 1: none)
    Model *m;
    int L;                       // units 0..L-1: layers; unit L: embedding, final norm, LM head
    FsdpUnit *u;                 // (L + 1)
    int *unit_of;                // (tt.n) each tensor's unit
    size_t *upos;                // (tt.n) where each tensor starts inside its unit's floats
    size_t n;                    // floats of this rank's blocks, all units
    float *p, *g;                // device (n): the parameter blocks and their summed gradient
    float *work, *gwork;         // device (largest layer): the gathered layer and its gradient
    float *rest, *grest;         // device (unit L): the gathered rest and its gradient
    float *tmp;                  // device (largest block): one reduce-scattered block
    float *full;                 // device (param_bytes) while fsdp_full_begin holds one, else NULL
    int layer_at;                // the layer in work, -1: none
    int rest_ok;                 // rest holds the current parameters
    Status st;                   // the first failure inside a hook
    Err err;
    ModelHooks hooks;            // with the tensor-parallel reduce hook of the model's, if any
    const ModelHooks *prev;      // the model's hooks before (restored by fsdp_free)
} Fsdp;

// Whether ZeRO-3 supports this model: an fp32 model of its own (no adapter, not frozen).
Status fsdp_check_model(const Model *m, Err *e);
// Shard m over d (its parameters are copied into this rank's blocks and the full buffer freed),
// install the hooks. dp may be NULL.
void fsdp_init(Fsdp *f, Model *m, Dist *d, Dist *dp);
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
// the working buffers (a layer and its gradient, the rest and its gradient, one block).
size_t fsdp_bytes(const Fsdp *f);

#endif
