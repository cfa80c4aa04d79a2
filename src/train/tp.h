// tp.h: tensor parallelism (Megatron-style) over the tensor-parallel axis of the mesh. Each of T
// ranks holds a model of its own with T times fewer attention heads, kv-heads and MLP columns: q,
// k, v and gate, up split by output rows (heads / columns; a fused qkv / gate_up part by part), o
// and down by input columns, the
// embedding and the LM head by vocabulary rows (cfg.vocab_lo / vocab_part: the heads on vocabulary
// shards of model/vocab_head.h); norms are replicated. The block outputs of o and down are partial sums,
// all-reduced over the group through the model's reduce hook (model.h) before each residual add,
// (the biases of o and down added by rank 0 of the group only; attention sinks split with their
// heads), and the activation gradients entering the two norms of a layer are all-reduced in the backward
// pass, so the residual stream and every replicated tensor's gradient are the same on every rank
// of the group (a block without a pre-norm, OLMo 2's, all-reduces its input gradient before it
// joins the residual's). Per-head q_norm / k_norm see only their rank's heads: their gradients are
// summed over the group before the update (optim.c). q_norm / k_norm over the whole projection
// (OLMo 2) are split with the heads, the rows' sums of squares all-reduced in the forward pass and
// the norm's dot in the backward pass.
#ifndef STILL_TP_H
#define STILL_TP_H

#include "../dist/dist.h"
#include "../model/lora.h"
#include "../model/model.h"
#include "checkpoint.h"

typedef struct Tp {
    Dist *d;        // the tensor-parallel axis
    Status st;      // the first failed all-reduce inside a hook
    Err err;
    ModelHooks hooks;
} Tp;

// How kind is split in a model of config c: 0 by rows (output features), 1 by columns (input
// features), -1 replicated.
int tp_split_dim(const ModelConfig *c, TensorKind kind);
// Whether a replicated tensor's gradient is each rank's share, summed over the group before the
// update: the per-head q/k norms (every rank's heads).
int tp_grad_summed(const ModelConfig *c, TensorKind kind);
// The same for table entry t of a model or of its adapter (lora.h): an adapter's lora_B split
// by rows with a weight split by rows (q, k, v, gate, up), its lora_A by columns with one split
// by columns (o, down), the other halves of the pairs whole, and a whole lora_A's gradient each
// rank's share (of its output rows), summed over the group.
int tp_tensor_split_dim(const ModelConfig *c, const TensorInfo *t);
int tp_tensor_grad_summed(const ModelConfig *c, const TensorInfo *t);
// The usage error (naming dir, NULL: "the model") when heads, kv-heads, intermediate_size,
// moe_intermediate_size (with experts) or vocab_size of c is not divisible by T.
Status tp_check_dims(const ModelConfig *c, int T, const char *dir, Err *e);
// The config of rank t's part of a model of config c split T ways: NH/T heads, NKV/T kv-heads,
// FF/T MLP columns and FFE/T columns of every expert, and its shard of the vocabulary.
ModelConfig tp_local_config(const ModelConfig *c, int T, int t);
// Whether m can be split T ways: heads, kv-heads, intermediate_size and vocab_size divisible
// (usage errors naming the one that is not), and what is not supported yet (Q8_0 rows of a split tensor that are not whole blocks on each rank; an
// adapter on the experts or the router of a mixture of experts, or with modules to save). A classifier's score head is replicated. A frozen model (generation) is copied.
Status tp_check_model(const Model *m, int T, Err *e);
// What loads only this rank's part of a model (model.h ModelLoadOpts.part: the rank's rows and
// columns of each split tensor read from the checkpoint, replicated ones whole), in p, or NULL
// when world has no tensor-parallel axis (tp_size 1).
const ModelPart *tp_part(ModelPart *p, Dist *world);
// Replace *m by rank t's part of it (the full model is freed, its adapter split with it; a model
// loaded as that part through tp_part is kept, with the adapter tp_lora_attach / tp_lora_load
// gave it) and install the reduce hook over d (the tensor-parallel axis,
// d->world = T).
Status tp_shard(Tp *tp, Model **m, Dist *d, Err *e);
// A LoRA adapter on part m of a model (loaded through tp_part): lora_attach / lora_load of the
// whole model's adapter (one process's draws and checks; the file whole), of which m keeps its
// rank's part. On a whole model, lora_attach / lora_load.
Status tp_lora_attach(Model *m, const LoraConfig *c, uint64_t seed, Err *e);
Status tp_lora_load(Model *m, const char *dir, Err *e);
// Collective over the tensor-parallel axis: the full model (fp32) on its rank 0 (*full), NULL on
// the others; with an adapter, the whole adapter on a model with no weights of its own (what
// checkpoint_write_model saves of it).
Status tp_gather(Tp *tp, const Model *m, Model **full, Err *e);
// The same for host buffers in table order (moments): full (the full table's n_params, on rank 0)
// from every rank's local (its table's n_params).
Status tp_gather_flat(Tp *tp, const Model *m, float *full, const float *local, Err *e);
// A full fp32 model of m's config times the group (uninitialised).
Model *tp_full_model(Tp *tp, const Model *m);
// Resume: this rank's part of a checkpoint of the whole model (weights into m, moments into host
// opt_m, opt_v of m's n_params, and the state), reading only the part's elements of each tensor.
Status tp_load_checkpoint(Tp *tp, const char *dir, Model *m, float *opt_m, float *opt_v, TrainState *s, Err *e);
Status tp_status(Tp *tp, Err *e);
void tp_free(Tp *tp, Model *m);

#endif
