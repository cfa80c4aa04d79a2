// lora.h: LoRA adapters on a frozen base model, with PEFT's semantics and file format
// (docs/lora.md). An adapter adds scale * B A x to a linear layer's output (A (r, in), B (out, r),
// scale = alpha / r, or alpha / sqrt(r) with rslora), optionally through dropout on x; modules to
// save get trainable fp32 copies that replace the base tensors while the adapter is enabled.
//
// The adapter's tensors live in one fp32 buffer with a table of PEFT-named tensors
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), as the model's parameters
// do; their gradients and optimizer moments are fp32 buffers in the same order. The base model's
// tensors are never updated and get no gradient: backward only propagates through them.
//
// A trainer attaches an adapter to its model (lora_attach / lora_load), and the model code calls
// lora_forward / lora_backward after each base linear layer (qwen3.c). Switching the adapter off
// (lora->enabled = 0) gives the base model back without a second copy of its weights.
#ifndef STILL_LORA_H
#define STILL_LORA_H

#include "../core/alloc.h"
#include "model.h"

// The linear layers an adapter can target, in PEFT's module names. In a mixture-of-experts layer
// every expert's gate / up / down projection is a linear layer of its own (PEFT wraps each
// nn.Linear of the experts' ModuleList: ...mlp.experts.3.gate_proj, Mixtral's
// ...block_sparse_moe.experts.3.w1), and so is the router (mlp.gate, block_sparse_moe.gate): a
// target name matches them by the last part of the module name, as PEFT matches it. The experts'
// pairs of a layer sit in the table as a run of E lora_A then a run of E lora_B, so the grouped
// GEMMs of the MoE block take them as (E, r, in) and (E, out, r).
typedef enum {
    LORA_Q = 0, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN,
    LORA_EXP_GATE, LORA_EXP_UP, LORA_EXP_DOWN, LORA_ROUTER,
    LORA_N_MODULES
} LoraModule;

#define LORA_N_DENSE 7  // LORA_Q .. LORA_DOWN: the modules whose names do not depend on the family
#define LORA_MAX_SAVE 16
#define LORA_MAX_WORDS 16

typedef struct LoraConfig {
    int r;                   // rank (> 0)
    double alpha;            // lora_alpha
    double dropout;          // lora_dropout in [0, 1)
    int use_rslora;          // scale alpha / sqrt(r) instead of alpha / r
    unsigned targets;        // bit LoraModule: the module has an adapter in every layer (that has the module)
    int all_linear;          // targets came from "all-linear" (recorded in adapter_config.json as the names)
    int n_words;             // the target names as given (matched against the experts' and router's
    char words[LORA_MAX_WORDS][32];  // module names once the model is known)
    int n_save;              // modules_to_save: module names matched as PEFT does (name or ".name" suffix)
    char save[LORA_MAX_SAVE][64];
} LoraConfig;

typedef struct Lora {
    LoraConfig cfg;
    float scale;             // alpha / r or alpha / sqrt(r)
    TensorTable tt;          // PEFT-named fp32 tensors: lora_A / lora_B pairs, then modules to save
    float *params;           // device (tt.n_params)
    float *grads;            // device (tt.n_params) while training, else NULL
    int *ab;                 // (L, LORA_N_MODULES) entry of lora_A (lora_B follows) or -1; experts:
                             // expert 0's lora_A, its lora_B E entries later
    int n_experts;           // E of the model (0: dense)
    int slot_rows;           // input rows of a targeted layer per token: K when experts are targeted, else 1
    int enabled;             // 1: forward adds the adapter and uses the saved copies; 0: the base model
    int max_in, max_out;     // widest input / output of a targeted layer (plan scratch)
    // tensor parallel (tp > 1): the adapter of rank tp_rank's part of a model split tp ways (tp.h):
    // lora_B of q, k, v, gate, up split by rows with the base weight, lora_A of o and down by
    // columns; the rest whole
    int tp, tp_rank;
    // dropout during training: masks are a pure function of (seed, step, call, layer, module,
    // element), the element's index in the whole input (a rank's columns of o's and down's too)
    uint64_t seed;
    int step, calls;         // set by the trainer loop: the optimizer step; forward calls this step
} Lora;

// PEFT module names ("q_proj", ...) and the base weight kind of each module; the experts' and the
// router's names are the family's (lora_module_leaf).
const char *lora_module_name(LoraModule mod);
TensorKind lora_module_kind(LoraModule mod);
// The module path of mod in layer l's checkpoint names ("self_attn.q_proj",
// "mlp.experts.3.gate_proj" for expert 3, "block_sparse_moe.gate") and its last part.
void lora_module_path_of(const ModelConfig *cfg, LoraModule mod, int expert, char *buf, size_t cap);
void lora_module_leaf(const ModelConfig *cfg, LoraModule mod, char *buf, size_t cap);
// Parse --lora_target_modules (names separated by spaces or commas, or "all-linear" = every
// linear layer but the LM head, as PEFT resolves it for a causal LM). NULL or "" gives PEFT's
// default for the architecture (q_proj, v_proj for qwen2, qwen3, llama).
Status lora_parse_targets(const char *text, LoraConfig *c, Err *e);
// Parse --lora_modules_to_save (names separated by spaces or commas; NULL: none). Each must name
// a module of the model that is not a LoRA target (checked by lora_attach).
Status lora_parse_modules_to_save(const char *text, LoraConfig *c, Err *e);

// Attach a new adapter to m with PEFT's default initialisation: lora_A Kaiming-uniform
// (a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in))), lora_B zeros; modules to save copied from the
// base. Draws are keyed by seed. m must have no adapter yet.
Status lora_attach(Model *m, const LoraConfig *c, uint64_t seed, Err *e);
// Detach and free m's adapter (no-op without one).
void lora_detach(Model *m);
// Allocate the adapter's gradient buffer (training).
void lora_alloc_grads(Lora *lo, Backend *be);

// PEFT's files: dir/adapter_config.json and dir/adapter_model.safetensors.
// Load an adapter saved by PEFT or by lora_save into m (which must have none): the LoRA pairs
// found in the file and the modules it saves, checked against the model's shapes and the config
// (r, lora_alpha, use_rslora; DoRA, bias, rank or alpha patterns are refused).
Status lora_load(Model *m, const char *dir, Err *e);
// Write m's adapter into dir (created if needed) as PEFT does; base_model names the base model
// (adapter_config.json's base_model_name_or_path; may be NULL).
Status lora_save(const Model *m, const char *dir, const char *base_model, Err *e);
// 1 when dir holds adapter_config.json.
int lora_dir_has_adapter(const char *dir);

// Fold the adapter into the base weights (W += scale * B A; saved copies replace their base
// tensors) and detach it: m becomes a plain model. The base must hold fp32 weights.
Status lora_merge(Model *m, Err *e);

// 'A' or 'B' for a tensor of a LoRA pair (lora_A, lora_B), 0 for a saved copy.
int lora_pair_side(const TensorInfo *t);

// Trainable parameters of an adapter (for logs): A, B and the saved copies.
size_t lora_n_params(const Lora *lo);

// ---- the model code's hooks (qwen3.c) -----------------------------------------------------
// The adapter is in use (attached and enabled).
int lora_active(const Model *m);
// A saved copy replacing base tensor (kind, layer) while the adapter is active, or NULL;
// its gradient (NULL when not training).
float *lora_saved_param(const Model *m, TensorKind kind, int layer);
float *lora_saved_grad(const Model *m, TensorKind kind, int layer);
// After the base linear layer `wk` of layer l: out (N,OC) += scale * B A dropout(inp (N,C)).
// TRAIN plans keep the scaled inner activations (N, r) per layer for the backward pass. Tensor
// parallel: o_proj's and down_proj's inp is the rank's columns and out a partial sum (the model
// all-reduces it next): A x is all-reduced over the group (model_reduce, r per row) and B's
// output added by the group's rank 0 only, as those layers' biases are.
void lora_forward(Model *m, Plan *p, int l, TensorKind wk, float *out, const float *inp, int N, int C, int OC);
// The adapter's share of the backward pass of that layer: dinp (N,C) += its input gradient,
// and the lora_A / lora_B gradients accumulate (when the adapter trains).
void lora_backward(Model *m, Plan *p, int l, TensorKind wk, float *dinp, const float *dout, const float *inp, int N,
                   int C, int OC);
// The adapter of layer l's mixture-of-experts block for plan p (moe.h), or NULL when it has none.
struct MoeLora;
const struct MoeLora *lora_moe(Model *m, Plan *p, int l, struct MoeLora *out);
// Carve the adapter's plan buffers out of the plan's arena (plan.c; p->mode, B, T, ckpt set;
// a NULL arena base only measures).
void lora_plan_layout(const Lora *lo, int L, Plan *p, Arena *a);
// Upload the dropout key of the next forward pass on p (qwen3_set_inputs).
void lora_set_inputs(Model *m, Plan *p);

// ---- building blocks of lora_io.c ------------------------------------------------------------
const char *lora_module_path(LoraModule mod);   // "self_attn.q_proj", ...
// A new adapter for m (not attached) with its table and a zeroed buffer: a lora_A / lora_B pair
// per layer and targeted module for which has_pair(ctx, layer, module) holds (NULL: all).
Status lora_new(Model *m, const LoraConfig *c, int (*has_pair)(void *, int, int), void *ctx, Lora **out, Err *e);
// The base tensor a saved copy t replaces (the embedding for a tied LM head).
const TensorInfo *lora_saved_base(const Model *m, const TensorInfo *t);
// Fill the saved copies of lo from m's base tensors.
void lora_copy_saved(Model *m, Lora *lo);

#endif
