// ep.h: expert parallelism (--ep_size P, docs/distributed.md "Expert parallel"). Each of P ranks
// holds E / P experts of every sparse layer (rank q the experts [q E/P, (q+1) E/P)) and every other
// tensor whole; every rank takes its own batches, as in data parallelism. In each MoE block a rank
// routes its tokens over all E experts, sends every routed slot to the rank holding its expert and
// gets the expert's output back (two all-to-alls; the backward pass moves the gradients the same
// two ways: moe.h MoeExchange). An expert's gradient is therefore complete on its own rank after
// the backward pass, summed over every rank's tokens of the group, while every other gradient is
// all-reduced over the world, as in data parallelism (optim.c). A world of P x R ranks is R groups
// of P consecutive ranks (rank = q + P r: expert shard q of replica r); an expert's gradient is
// then all-reduced over its R replicas (the ranks of the same q). The exchange runs on host
// memory (cpu backend).
#ifndef STILL_EP_H
#define STILL_EP_H

#include "../dist/dist.h"
#include "../model/model.h"
#include "../model/moe.h"

typedef struct Ep {
    Dist *d;            // the expert-parallel group (d->world = P): the world itself, or &group
    Dist group, reps;   // with R > 1 replicas: this rank's group and its expert shard's replicas
    int R;              // data-parallel replicas of each group (world / P)
    int El;             // experts per rank
    Status st;          // the first failed exchange (the step goes on with empty slots; ep_status)
    Err err;
    MoeExchange ex;
    ModelHooks hooks;
    float *buf;         // host staging of the exchange (cap floats)
    size_t cap;
} Ep;

// Whether m can be split P ways: a mixture of experts whose E is divisible by P, no adapter, fp32,
// the cpu backend. Per-expert tensors are split by expert, gpt_oss's one tensor per projection
// (and its biases) into P runs of E / P expert blocks under the tensor's name.
Status ep_check_model(const Model *m, int P, Err *e);
// Replace *m by this rank's part of it (the full model is freed) and install the exchange: d is
// the world, of P x R ranks (collective: every rank calls it).
Status ep_shard(Ep *ep, Model **m, Dist *d, int P, Err *e);
// A trainer's --ep_size P (P <= 1: nothing): ep_shard over world (NULL: one process) after the
// checks of the layout expert parallelism runs on (a multiple of P ranks, no tensor-parallel
// axis: data_axis == world, zero_stage 0), a usage error naming the flags otherwise.
Status ep_open(Ep *ep, Model **m, Dist *world, const Dist *data_axis, int P, int zero_stage, Err *e);
// The gradient of this rank's experts summed over the replicas (R > 1), and their squared norm
// summed over the group (each expert once) into *ss_own.
Status ep_reduce_experts(Ep *ep, const Model *m, float *grads, double *ss_own, Err *e);
// Collective over the group: the full model (fp32) on its rank 0 (*full), NULL on the others.
Status ep_gather(Ep *ep, const Model *m, Model **full, Err *e);
// The same for host buffers in table order (moments): full (the full table's n_params, on rank 0)
// from every rank's local (its table's n_params).
Status ep_gather_flat(Ep *ep, const Model *m, float *full, const float *local, Err *e);
// A full fp32 model of m's config (uninitialised), rank d->rank's part of one into m, and of full
// host moments into local ones (resuming: every rank reads the checkpoint and keeps its part).
Model *ep_full_model(const Model *m);
void ep_slice_model(const Model *full, Model *m);
void ep_slice_flat(const Model *m, const Model *full, float *local, const float *full_flat);
// An expert tensor of a sparse layer (gpt_oss: its biases too): this rank's own, its gradient
// all-reduced over the replicas of its shard only.
int ep_local_kind(TensorKind kind);
Status ep_status(Ep *ep, Err *e);
// The expert-parallel state of a model ep_shard split (NULL: none).
Ep *ep_of(const Model *m);
// GenConfig.lockstep over ep (a void *): the elementwise max of v (n) over its group (collective).
Status ep_lockstep_max(void *ep, int *v, int n, Err *e);
void ep_free(Ep *ep, Model *m);

#endif
