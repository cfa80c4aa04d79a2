// tensors.h: the tensor table. One entry per parameter tensor, named as in Hugging Face
// checkpoints; it drives loading, saving, weight decay, gradient buffers, all-reduce and
// sharding (STYLE.md rule 3). Parameters live in one buffer (byte offsets, per-entry dtype);
// gradients and optimizer moments in fp32 buffers of the same order (element offsets).
#ifndef STILL_TENSORS_H
#define STILL_TENSORS_H

#include "config.h"

typedef enum {
    TK_EMBED = 0,  // model.embed_tokens.weight     (V, C)
    TK_NORM,       // model.norm.weight             (C)
    TK_LM_HEAD,    // lm_head.weight                (V, C)   untied causal LMs only
    TK_SCORE,      // score.weight                  (NL, C)  sequence classifiers only (no bias)
    // per layer:
    // (HF suffixes per family: family.h; the names here are the defaults)
    TK_LN1,        // input_layernorm.weight        (C)      NORM_PRE_ATTN
    TK_WQ, TK_BQ,  // self_attn.q_proj              (NH*HD, C), (NH*HD)
    TK_WK, TK_BK,  // self_attn.k_proj              (NKV*HD, C), (NKV*HD)
    TK_WV, TK_BV,  // self_attn.v_proj              (NKV*HD, C), (NKV*HD)
    TK_WO, TK_BO,  // self_attn.o_proj              (C, NH*HD), (C)
    TK_QN, TK_KN,  // self_attn.q_norm / k_norm     (HD) per head; (NH*HD), (NKV*HD) QKNORM_PROJ
    TK_LN2,        // post_attention_layernorm      (C)      NORM_PRE_MLP (the MLP's input norm)
    TK_WG, TK_BG,  // mlp.gate_proj                 (FF, C), (FF)
    TK_WU, TK_BU,  // mlp.up_proj                   (FF, C), (FF)
    TK_WD, TK_BD,  // mlp.down_proj                 (C, FF), (C)
    TK_LNA,        // norm of the attention output  (C)      NORM_POST_ATTN (OLMo 2, Gemma)
    TK_LNF,        // norm of the MLP output        (C)      NORM_POST_MLP
    TK_WQKV,       // self_attn.qkv_proj            (NH*HD + 2*NKV*HD, C)  fused_qkv (Phi-3)
    TK_WGU,        // mlp.gate_up_proj              (2*FF, C)              fused_gate_up
    // sparse MoE layers (cfg.layer_moe[l]) instead of the dense MLP; E experts of width FFE
    // (cfg.moe_intermediate_size): each expert kind is a run of E consecutive entries, expert e
    // named with its index, packed with no gap so that the run is one (E, rows, cols) array for
    // the grouped GEMMs; (kind, layer) finds expert 0
    TK_ROUTER,     // mlp.gate                      (E, C)
    TK_EXP_G,      // mlp.experts.e.gate_proj       (FFE, C) x E
    TK_EXP_U,      // mlp.experts.e.up_proj         (FFE, C) x E
    TK_EXP_D,      // mlp.experts.e.down_proj       (C, FFE) x E
    // GPT-OSS (cfg.moe_fused): every expert in one tensor; stored here as E blocks in the
    // (rows, cols) layout of the grouped GEMMs, in the checkpoint as HF has them (hf_shape);
    // expert parallel: the rank's ep_part blocks (experts [ep_lo, ep_lo + ep_part)), same name:
    TK_ROUTER_B,   // mlp.router.bias               (E)
    TK_XGU,        // mlp.experts.gate_up_proj      (E*2FFE, C); HF (E, C, 2FFE), each block transposed;
                   //                               rows alternate gate, up (HF's [..., ::2], [..., 1::2])
    TK_XGU_B,      // mlp.experts.gate_up_proj_bias (E*2FFE); HF (E, 2FFE)
    TK_XD,         // mlp.experts.down_proj         (E*C, FFE); HF (E, FFE, C), each block transposed
    TK_XD_B,       // mlp.experts.down_proj_bias    (E*C); HF (E, C)
    TK_SINKS,      // self_attn.sinks               (NH)   cfg.attn_sinks
    TK_COUNT
} TensorKind;

#define TK_FIRST_LAYER_KIND TK_LN1

typedef struct TensorInfo {
    char name[96];      // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
    TensorKind kind;
    int layer;          // -1 for embedding, final norm, lm_head
    int ndim;
    int64_t shape[2];
    size_t numel;
    DType dtype;        // storage dtype in the parameter buffer
    size_t offset;      // byte offset in the parameter buffer (64-byte aligned)
    size_t goffset;     // element offset in fp32 gradient / optimizer buffers
    int decay;          // weight decay applies (matrices; not norms or biases, as transformers)
    int is_matrix;      // 2-D weight (may be stored in bf16)
    int packed;         // placed right after the previous entry, no alignment gap (experts 1.. of a run)
    // The checkpoint's layout when it differs (GPT-OSS experts): hf_ndim 0 = ndim and shape;
    // hf_xpose: hf_shape (E, A, B) is E blocks of (A, B) that are stored here transposed, (B, A).
    int hf_ndim;
    int64_t hf_shape[3];
    int hf_xpose;
} TensorInfo;

typedef struct TensorTable {
    TensorInfo *t;      // (n)
    int n;
    int n_layers;
    int *index;         // (L+1, TK_COUNT): entry index or -1; row L holds the non-layer kinds
    size_t param_bytes; // size of the parameter buffer
    size_t n_params;    // total elements (parameter count)
    int packing;        // while building: the next entry follows the previous one with no gap
} TensorTable;

// Build the table for a config. matrix_dtype: storage of 2-D weights (F32 for training,
// BF16 allowed for inference); norms and biases are always F32.
void tensors_build(TensorTable *tt, const ModelConfig *cfg, DType matrix_dtype);
void tensors_free(TensorTable *tt);
// Append an entry to a table with room for it (tt->t): the next 64-byte aligned byte offset and
// element offset; 2-D entries stored as matrix_dtype and decayed, 1-D ones fp32 and not. The
// caller sets tt->index when the entry is to be found by (kind, layer).
TensorInfo *tensors_append(TensorTable *tt, const char *name, TensorKind kind, int layer, int64_t d0, int64_t d1,
                           DType matrix_dtype);
// Entry for (kind, layer) or NULL if the model has no such tensor. layer is ignored for
// non-layer kinds.
const TensorInfo *tensors_get(const TensorTable *tt, TensorKind kind, int layer);
const TensorInfo *tensors_find(const TensorTable *tt, const char *name);
// The checkpoint's shape of an entry (hf_shape, else its own).
void tensors_hf_shape(const TensorInfo *t, int *ndim, int64_t shape[3]);
// The element of the parameter buffer that holds element j (row-major) of the checkpoint's tensor.
size_t tensors_hf_index(const TensorInfo *t, size_t j);
// fp32 host copies between the checkpoint's layout (hf, numel) and the table's (own, numel).
void tensors_to_hf(const TensorInfo *t, float *hf, const float *own);
void tensors_from_hf(const TensorInfo *t, float *own, const float *hf);

#endif
