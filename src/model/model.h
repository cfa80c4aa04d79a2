// model.h: a loaded model: config, tensor table, one parameter buffer on the backend, optional
// fp32 gradient buffer, RoPE tables, and its plan cache.
#ifndef STILL_MODEL_H
#define STILL_MODEL_H

#include "../backend/backend.h"
#include "../core/progress.h"
#include "config.h"
#include "plan.h"
#include "tensors.h"

struct Model;
// Sharded parameters (FSDP, src/train/fsdp.c): the forward and backward passes ask for a layer's
// weights before they use them and say when a layer's gradients are complete. layer -1: the
// embedding, final norm and LM head (the rest of the model).
typedef struct ModelHooks {
    void *ctx;
    void (*materialize)(void *ctx, struct Model *m, int layer);  // m->data of the layer's tensors valid
    void (*grads_done)(void *ctx, struct Model *m, int layer);   // the layer's gradients are final
    // tensor parallelism (src/train/tp.c): buf (n floats, device) summed over the group in place
    void (*reduce)(void *ctx, struct Model *m, float *buf, size_t n);
    // host bytes: recv (group size * nbytes) = every rank's send, in rank order
    void (*gather)(void *ctx, struct Model *m, void *recv, const void *send, size_t nbytes);
    void *reduce_ctx;
    const struct MoeExchange *moe_ex;  // expert parallel (src/train/ep.c): the routed slots' exchange
} ModelHooks;

typedef struct Model {
    ModelConfig cfg;
    TensorTable tt;
    Backend *be;
    char *dir;            // directory it was loaded from (NULL for a fresh init)
    DType matrix_dtype;   // storage of 2-D weights in params
    DType ckpt_dtype;     // dtype of the checkpoint's weights (what saving writes by default)
    void *params;         // device, tt.param_bytes; NULL when every tensor is mapped (frozen)
    void **data;          // (tt.n) each tensor's device data: params + offset, or (frozen models
                          // on host-memory backends) into the checkpoint's read-only mapping
    struct StSet *mapping;  // the checkpoint, kept mapped while tensors point into it (frozen)
    int frozen;           // loaded by model_load_frozen: weights are read only, never trained
    size_t mapped_bytes;  // bytes of weights used in place from the mapping
    float *grads;         // device (tt.n_params) fp32, NULL until model_alloc_grads
    float *inv_freq;      // device (RD/2) RoPE inverse frequencies in use (longrope: the short or the
                          // long factors', rope_long; its contents change, never its address, so a
                          // recorded decode step replays with the table selected)
    float rope_mscale;    // attention scaling applied to cos and sin (yarn, longrope), else 1
    float *rope_host;     // longrope: host (2, RD/2) the short then the long tables; else NULL
    int rope_long;        // longrope: inv_freq holds the long table
    float *inv_freq_local;  // device (RD/2) RoPE of layers with cfg.layer_rope 1, or NULL
    PlanCache plans;
    struct Lora *lora;    // LoRA adapter (model/lora.h) or NULL; with one, only the adapter trains
    int grad_ckpt;        // TRAIN plans recompute each layer's forward in the backward pass
    double moe_capacity_factor;  // > 0: experts keep ceil(f N K / E) slots each (--moe_capacity_factor)
    double moe_aux_scale;  // weight of a backward pass's load-balancing gradient: 1 / micro-batches in
                           // still sft; 0 (none) elsewhere
    int shared;           // params and inv_freq belong to another model (model_share)
    const ModelHooks *hooks;  // sharded parameters or tensor parallelism (NULL: neither)
    float **gdata;        // (tt.n) each tensor's gradient when sharded (hooks), else NULL: grads + goffset
    const struct Model *share_of;  // the base of an adapter's model (peft_base_model): without hooks of
                                   // its own, that model's hooks materialize its layers (a sharded base)
} Model;

// Longrope: put the table for a forward call whose longest sequence has `len` positions (max
// position id + 1; transformers' longrope_frequency_update) into m->inv_freq. Returns 1 when the
// table changed (a KV cache filled with the other one is stale: src/gen/generate.c), 0 when it was
// already in place or the model has no longrope scaling.
int model_rope_select(struct Model *m, int len);
// The hooks' calls; no-ops on a model without hooks (model_materialize: nor a share_of with any).
void model_materialize(struct Model *m, int layer);
void model_grads_done(struct Model *m, int layer);
void model_reduce(struct Model *m, float *buf, size_t n);
// The gather hook (one process: recv = send).
void model_gather(struct Model *m, void *recv, const void *send, size_t nbytes);
// A model of cfg (its raw JSON copied) with uninitialised parameters in matrix_dtype.
Model *model_alloc(const ModelConfig *cfg, Backend *be, DType matrix_dtype);
// The gradient of a table entry of m->tt, NULL when the model has none.
float *model_tensor_grad(const Model *m, const TensorInfo *t);

// The tensors a trainer updates: the adapter's when the model has one, else the model's own
// (table, fp32 parameter buffer, gradient buffer or NULL).
typedef struct Trainable {
    const TensorTable *tt;
    void *params;
    float *grads;
} Trainable;
Trainable model_trainable(const Model *m);

// The config of a model directory (DIR/config.json) or of a GGUF file (its metadata).
Status model_config_load(const char *dir_or_gguf, ModelConfig *cfg, Err *e);

// Load config.json and safetensors (single or sharded) from a directory. matrix_dtype < 0:
// keep the checkpoint's dtype for 2-D weights when it is BF16, else F32. Missing, extra or
// mis-shaped tensors are errors naming the tensor. dir may be a GGUF file instead (docs/gguf.md).
Status model_load(const char *dir, Backend *be, int matrix_dtype, Model **out, Err *e);
// The same for a model that is only run (generation, eval, frozen teachers and reference
// models): on a host-memory backend (ref, cpu) every tensor whose checkpoint dtype is its
// storage dtype is used in place from the read-only mapping of the file, with no copy; the others
// (converted dtypes) are copied into params. Such a model has no gradients and is never written;
// its parameters are not one contiguous buffer (model_param / model_data per tensor).
Status model_load_frozen(const char *dir, Backend *be, int matrix_dtype, Model **out, Err *e);
// A part of a model to load instead of the whole (tensor parallelism, src/train/tp.h): only the
// part's elements of each tensor are read from the checkpoint. config: the part's config of the
// whole model's (dir names the model in errors); runs: fn(fn_ctx, whole_at, part_at, n) for each
// run of n elements of tensor l of the part (config lc) inside tensor w of the whole, in
// increasing part_at order, covering l.
typedef struct ModelPart {
    Status (*config)(const struct ModelPart *p, const ModelConfig *whole, const char *dir, ModelConfig *part, Err *e);
    void (*runs)(const struct ModelPart *p, const ModelConfig *lc, const TensorInfo *w, const TensorInfo *l,
                 void (*fn)(void *fn_ctx, size_t whole_at, size_t part_at, size_t n), void *fn_ctx);
    int T, t;  // the part's rank t of T (tensor parallelism)
} ModelPart;

// What model_load_opts loads. model_load and model_load_frozen load causal LMs only: a
// sequence-classification checkpoint is an error there, naming the commands that run it.
typedef struct ModelLoadOpts {
    int frozen;        // as model_load_frozen
    int classifier;    // a sequence classifier is wanted (still score, still reward, reward models)
    int num_labels;    // classifier: > 0 turns a causal checkpoint into a classifier with a new score
                       // head of this many outputs (lm_head dropped) and requires it of a classifier
                       // checkpoint; 0: the checkpoint must be a classifier already
    int pad_token_id;  // conversion: the new config's pad_token_id (-1: keep the causal config's)
    uint64_t seed;     // conversion: draw of the new score head, normal(0, initializer_range) as
                       // transformers initialises a Linear
    const ModelPart *part;  // NULL: the whole model; else that part only (nothing used in place;
                            // --max_memory checked against the part's bytes)
} ModelLoadOpts;
Status model_load_opts(const char *dir, Backend *be, int matrix_dtype, const ModelLoadOpts *o, Model **out, Err *e);
// A fresh model from a config: normal(0, initializer_range) matrices, norm weights 1, biases 0.
Status model_create_random(const ModelConfig *cfg, Backend *be, uint64_t seed, Model **out, Err *e);
// Write model.safetensors (in save_dtype) and config.json into dir (created if needed), tensor
// data streamed piece by piece (no second copy of the weights).
Status model_save(const Model *m, const char *dir, DType save_dtype, Err *e);
// The same two with progress drawn on pr (tensors initialised; MiB written).
Status model_create_random_p(const ModelConfig *cfg, Backend *be, uint64_t seed, Progress *pr, Model **out, Err *e);
Status model_save_p(const Model *m, const char *dir, DType save_dtype, Progress *pr, Err *e);
// Gradients of what trains: the adapter's when there is one, else every parameter's.
void model_alloc_grads(Model *m);
// A model sharing m's weights (no copy) without its adapter or gradients: the base model a LoRA
// run uses as its frozen reference or teacher. Free it before m.
Model *model_share(const Model *m);
void model_free(Model *m);

// Device pointers of a tensor (NULL when the model has none of that kind).
void *model_param(const Model *m, TensorKind kind, int layer);
// Device data of a table entry of m->tt.
void *model_data(const Model *m, const TensorInfo *t);
float *model_grad(const Model *m, TensorKind kind, int layer);
// The LM head (tied: the embedding) and its gradient.
const TensorInfo *model_lm_head(const Model *m);

#endif
