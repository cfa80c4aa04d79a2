// family.h: the model family table. One entry per Hugging Face model_type describes everything
// that differs between families: the transformers class names and config defaults, the tensors
// (HF names and shapes follow from the structure fields below), where the norms sit, the
// activation, the q/k norm, the embedding scale, fused projections, and which config.json fields
// the family reads. config.c reads config.json through it into ModelConfig; tensors.c names the
// tensors from it; qwen3.c runs the forward and backward from the resolved ModelConfig fields
// only (never from model_type). SEMANTICS_MODEL.md §1, docs/models.md.
//
// Adding a family:
//  1. An entry in family_table (family.c): model_type, architecture and classifier class names,
//     the defaults of transformers' <Family>Config, the structure fields (norms, norm_plus_one,
//     act, qk_norm, embed_scale_sqrt, fused_qkv, fused_gate_up, the bias rules), `names` for
//     every tensor whose HF suffix differs from tensors.c's default, and `fields`: every
//     config.json key the family accepts beyond family_common_fields (a key in neither list is
//     refused by name: it may change the math).
//  2. Per-layer attention options (sliding window, local RoPE base) and scalar options
//     (soft-caps, query scale) go in a `parse` hook of the entry: it reads the family's own
//     fields and fills ModelConfig.layer_window[l], layer_rope[l], rope_local_theta,
//     attn_softcap, final_softcap, query_scale. Everything a hook does not set keeps the
//     neutral value config_parse gives it (global attention, one RoPE, no caps, 1/sqrt(HD)).
//  3. A new computation is a backend op (backend.h: ref, cpu, cuda + parity tests), called from
//     qwen3.c where the resolved field asks for it: attention options in layer_attention /
//     layer_attention_backward (training) and in the cached loop of qwen3_forward_cached
//     (generation); norms in layer_qkv / layer_out and their mirror in qwen3_backward_from_lnf;
//     the embedding scale after embedding_forward; the final soft-cap in the loss heads. Until
//     the op exists, config_parse refuses the field by name.
//  4. A PyTorch port of the family's modeling file in scripts/ref_family.py, a tiny checkpoint in
//     tests/data/models/<name>, and the name in tests/model/test_torch_parity.c's list.
#ifndef STILL_FAMILY_H
#define STILL_FAMILY_H

#include "config.h"
#include "tensors.h"

typedef enum {
    BIAS_NEVER = 0,   // no bias
    BIAS_ALWAYS,      // always present (Qwen2's q/k/v)
    BIAS_ATTN_KEY,    // present when config.json's "attention_bias" is true
    BIAS_MLP_KEY,     // present when config.json's "mlp_bias" is true
} BiasRule;

typedef struct FamilyDesc {
    const char *model_type;    // config.json "model_type"
    const char *architecture;  // the *ForCausalLM class
    const char *classifier;    // the *ForSequenceClassification class, NULL if still has none
    // defaults of transformers' <Family>Config for absent fields (the five sizes are required)
    int vocab_size, max_position_embeddings;
    int head_dim;              // 0 = hidden_size / num_attention_heads
    int bos_token_id, eos_token_id;  // -1 = None
    double rms_norm_eps;
    // structure
    unsigned norms;            // NORM_* bits (config.h): which of the four layer norms exist
    int norm_plus_one;         // RMSNorm scales by (1 + w) (Gemma); 0: by w
    Activation act;            // the hidden_act the family defaults to
    QkNorm qk_norm;            // q/k RMSNorm: none, per head (HD wide), or over the projection
    int embed_scale_sqrt;      // embeddings times sqrt(hidden_size) (Gemma)
    int fused_qkv;             // self_attn.qkv_proj (QD + 2 KD, C): rows q, then k, then v
    int fused_gate_up;         // mlp.gate_up_proj (2 FF, C): rows gate, then up
    BiasRule qkv_bias, o_bias, mlp_bias;
    int rope_longrope_aliases;    // rope types "su" and "yarn" mean "longrope" (Phi3Config)
    int partial_rotary;        // reads partial_rotary_factor (top level, or in the rope dict) and
                               // rotates the first int(HD * factor) dims (Phi-3 / Phi-4-mini);
                               // elsewhere a factor other than 1 is refused
    int original_max_default;  // original_max_position_embeddings when config.json has none at the
                               // top level (Phi3Config: 4096); 0 = the class has no such attribute
    int tie_default;           // tie_word_embeddings when config.json has none (Gemma: true)
    int attention_bias_default;  // attention_bias when config.json has none (GptOssConfig: true)
    int reads_layer_types;     // the parse hook reads layer_types (sliding layers) itself
    const char *names[TK_COUNT];  // per-layer HF suffixes that differ from tensors.c's defaults
    const char *const *fields;    // NULL-terminated config.json keys beyond family_common_fields
    // The family's own config fields (per-layer attention, caps, rope variants); NULL = none.
    Status (*parse)(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
} FamilyDesc;

// The entry for a model_type, or NULL.
const FamilyDesc *family_find(const char *model_type);
int family_count(void);
const FamilyDesc *family_at(int i);
// "qwen3, qwen2, llama, ..." (static storage).
const char *family_names(void);
// Keys every family accepts: PretrainedConfig's generic attributes, which never change the
// math, and the fields config.c reads for every family. NULL-terminated.
extern const char *const family_common_fields[];
// Whether config.json key `key` is one the family reads or knows to be inert.
int family_accepts(const FamilyDesc *fd, const char *key);
// The HF suffix of a per-layer tensor kind in this family ("self_attn.q_proj.weight").
const char *family_tensor_suffix(const FamilyDesc *fd, TensorKind kind);

#endif
