// optim.h: AdamW over the tensor table (weight decay only where the table says `decay`, as
// transformers), learning-rate schedules with warmup, and global grad-norm clipping.
// The moments live in fp32 device buffers in table order (element offsets = goffset).
//
// Data parallel: optim_step first sums the gradient over the ranks. ZeRO-0 all-reduces the flat
// gradient buffer in one call and every rank updates every parameter. ZeRO-1 splits the flat
// range [0, n) into one block per rank (dist_shard_range): the gradient is reduce-scattered, each
// rank holds m and v of its block only and updates that block of the parameters, and the
// parameter buffer is all-gathered. ZeRO-3 (FSDP, fsdp.h): parameters and gradients are sharded
// too; the gradient arrives reduce-scattered layer by layer during the backward pass, each rank
// updates its blocks and nothing is gathered after the update (the next forward gathers each
// layer). Clipping uses the global norm in every mode.
#ifndef STILL_OPTIM_H
#define STILL_OPTIM_H

#include "../dist/dist.h"
#include "../model/model.h"

typedef enum {
    SCHED_LINEAR = 0,          // transformers' default
    SCHED_COSINE,
    SCHED_CONSTANT,            // warmup ignored, as transformers' "constant"
    SCHED_CONSTANT_WITH_WARMUP,
} SchedType;

typedef struct OptimConfig {
    double lr, beta1, beta2, eps, weight_decay;
    double max_grad_norm;      // <= 0: no clipping
    SchedType sched;
    int warmup_steps;          // resolved (see optim_warmup_steps)
    int total_steps;           // optimizer steps of the whole run
    int fsdp_forward_prefetch;   // ZeRO-3: the next layer's gather overlaps a layer's forward (fsdp.h)
    int fsdp_backward_prefetch;  // ZeRO-3: the next gather and the reduce-scatter overlap the backward
} OptimConfig;

typedef struct Optim {
    OptimConfig cfg;
    Dist *dist;                // the ranks the gradient is summed over (never NULL after init)
    int zero_stage;            // 0, 1 or 3
    struct Fsdp *fsdp;         // ZeRO-3: the sharded parameters (m, v and the update run over its blocks)
    struct Fsdp *base;         // ZeRO-3 with an adapter: the frozen base sharded (fsdp.h); the adapter
                               // trains as ZeRO-0 does (zero_stage 0, fsdp NULL)
    size_t n;                  // parameters (flat fp32 elements)
    size_t lo, hi;             // the flat block this rank updates: [0, n) unless ZeRO-1
    float *m, *v;              // device (hi - lo) AdamW moments of [lo, hi)
    float *gshard;             // ZeRO-1: device (hi - lo) the summed gradient of [lo, hi)
    size_t *gcounts;           // ZeRO-1: (world) every rank's block size in the flat order
    size_t *pcounts;           // ZeRO-1: (world) the same blocks in the parameter buffer (floats)
    int t;                     // optimizer steps taken so far
} Optim;

Status optim_parse_schedule(const char *s, SchedType *out, Err *e);
const char *optim_schedule_name(SchedType s);
// transformers v5: warmup_steps >= 1 is a count, 0 < warmup_steps < 1 a ratio of total steps;
// otherwise warmup_ratio (ratio -> ceil(ratio * total)).
int optim_warmup_steps(double warmup_steps, double warmup_ratio, int total_steps);
// Learning rate of the optimizer step taken after `done` steps (transformers' LambdaLR at
// scheduler step `done`).
double optim_lr_at(const OptimConfig *c, int done);

// dist NULL: one process. zero_stage 0 or 1 (1 with one process is the same as 0), or 3: the
// model is sharded over the FSDP axis of dist's mesh (all of dist without one), even on one rank;
// a model with an adapter: its frozen base is (o->base), the adapter trains as with 0.
void optim_init(Optim *o, Model *m, const OptimConfig *cfg, Dist *dist, int zero_stage);
void optim_free(Optim *o, Backend *be);
// Zero the gradients before a step.
void optim_zero_grads(Optim *o, Model *m);
// Bytes of optimizer state this rank holds (m and v).
size_t optim_state_bytes(const Optim *o);
// The gradient summed over the ranks (ZeRO-0: all-reduce; ZeRO-1: reduce-scatter of this rank's
// block) and its global L2 norm before clipping; fails only when a collective does (timeout).
Status optim_reduce_grads(Optim *o, Model *m, double *grad_norm, Err *e);
// AdamW with clip coefficient min(1, max_norm / (norm + 1e-6)) as torch's clip_grad_norm_, over
// this rank's block, then the parameters gathered (ZeRO-1). grad_norm: optim_reduce_grads's.
// Returns the lr used.
Status optim_apply(Optim *o, Model *m, double grad_norm, double *lr, Err *e);
// Both.
Status optim_step(Optim *o, Model *m, double *grad_norm, double *lr, Err *e);
// Collective: the complete moments (n each) into host mh, vh on rank 0 (others pass NULL).
Status optim_gather_state(Optim *o, Backend *be, float *mh, float *vh, Err *e);
// This rank's block of complete host moments (n each) into the optimizer.
void optim_load_state(Optim *o, Backend *be, const float *mh, const float *vh);

#endif
