// config.h: the model configuration read from a Hugging Face config.json, through the family
// table (family.h). See SEMANTICS_MODEL.md §1.1 and §1.5 for what each field means, and
// docs/models.md for the families, their fields and what is refused.
#ifndef STILL_CONFIG_H
#define STILL_CONFIG_H

#include "../core/common.h"
#include "../core/dtype.h"

#include <cjson/cJSON.h>

#define MAX_EOS_IDS 8

// The largest sizes config_parse accepts, the same for every backend: the sampler's fixed-point
// masses sum exactly over at most 2^20 tokens; the attention kernels hold a head of at most 256;
// with these, every tensor and plan size is a product that fits size_t, and every per-row width
// (NH * HD, FF, V) an int.
#define CONFIG_MAX_VOCAB (1 << 20)
#define CONFIG_MAX_HIDDEN (1 << 16)
#define CONFIG_MAX_INTERMEDIATE (1 << 18)
#define CONFIG_MAX_LAYERS 1024
#define CONFIG_MAX_HEADS 1024
#define CONFIG_MAX_HEAD_DIM 256

typedef enum { ROPE_DEFAULT = 0, ROPE_LLAMA3, ROPE_YARN, ROPE_LINEAR, ROPE_LONGROPE } RopeType;

// Which norms a decoder layer has (bits of ModelConfig.norms). Pre-norms normalise a sublayer's
// input; post-norms normalise its output before the residual add.
enum {
    NORM_PRE_ATTN = 1,   // TK_LN1: x -> attention(norm(x))          (Llama, Qwen, Gemma, Phi-3)
    NORM_POST_ATTN = 2,  // TK_LNA: x + norm(attention(...))          (OLMo 2, Gemma)
    NORM_PRE_MLP = 4,    // TK_LN2: mlp(norm(h))                      (Llama, Qwen, Gemma, Phi-3)
    NORM_POST_MLP = 8,   // TK_LNF: h + norm(mlp(...))                (OLMo 2, Gemma)
};
typedef enum { ACT_SILU = 0, ACT_GELU_TANH } Activation;  // gated MLP: act(gate) * up
typedef enum {
    QKNORM_NONE = 0,
    QKNORM_HEAD,  // RMSNorm of each head (HD wide) of q and k, before RoPE (Qwen3, Gemma 3)
    QKNORM_PROJ,  // RMSNorm over the whole q / k projection (NH*HD, NKV*HD wide), before the
                  // split into heads (OLMo 2)
} QkNorm;

#define ROPE_MAX_FACTORS (CONFIG_MAX_HEAD_DIM / 2)
struct FamilyDesc;

typedef struct RopeScaling {
    RopeType type;
    double factor;                            // linear / llama3 / yarn
    double low_freq_factor, high_freq_factor; // llama3
    double original_max_position_embeddings;  // llama3 / yarn
    double beta_fast, beta_slow;              // yarn [32, 1]
    double attention_factor;                  // yarn; < 0 = derived from factor (and mscale)
    double mscale, mscale_all_dim;            // yarn variant; 0 = absent
    int truncate;                             // yarn [1]
    float short_factor[ROPE_MAX_FACTORS];     // longrope: per-frequency divisors (RD/2)
    float long_factor[ROPE_MAX_FACTORS];      // longrope: for a call whose longest sequence is
                                              // longer than original_max_position_embeddings
} RopeScaling;

typedef struct ModelConfig {
    char model_type[32];         // "qwen3", "qwen2", "llama", ... (family.h)
    const struct FamilyDesc *family;  // the family table's entry (static storage)
    int vocab_size;              // V
    int vocab_lo, vocab_part;    // tensor parallel: this model holds rows [vocab_lo, vocab_lo + vocab_part) of the
                                 // embedding and the LM head (src/train/tp.c); vocab_part 0: all V
    int hidden_size;             // C
    int intermediate_size;       // FF
    int num_hidden_layers;       // L
    int num_attention_heads;     // NH
    int num_key_value_heads;     // NKV
    int head_dim;                // HD (explicit in Qwen3; else hidden_size / num_attention_heads)
    int rotary_dim;              // RD: RoPE rotates the first RD dims of each head (HD, or
                                 // int(HD * partial_rotary_factor) for Phi-3; even)
    double rms_norm_eps;
    double rope_theta;
    RopeScaling rope_scaling;
    int max_position_embeddings;
    int tie_word_embeddings;
    int qkv_bias;                // bias on q, k, v projections (Qwen2 always; Qwen3/Llama: attention_bias)
    int o_bias;                  // bias on o_proj (Qwen3/Llama attention_bias; never Qwen2)
    int mlp_bias;                // Llama mlp_bias
    int qk_norm;                 // QkNorm: q/k RMSNorm before RoPE (Qwen3: per head; OLMo 2: projection)
    // resolved from the family table (family.h); the forward and backward read only these
    unsigned norms;              // NORM_* bits
    int norm_plus_one;           // RMSNorm scales by (1 + w)
    Activation act;
    float embed_scale;           // embeddings are multiplied by this (1 = none)
    int fused_qkv, fused_gate_up;  // fused projections in the checkpoint (family.h)
    double query_scale;          // attention score scale; 0 = 1/sqrt(head_dim)
    double attn_softcap;         // cap * tanh(score / cap) on attention scores; 0 = none
    double final_softcap;        // the same on the LM head's logits; 0 = none
    double rope_local_theta;     // RoPE base of layers with layer_rope 1 (unscaled); 0 = none
    // per layer l < num_hidden_layers
    int layer_window[CONFIG_MAX_LAYERS];    // 0 = global attention; W > 0: query t attends keys
                                            // s with t - W < s <= t (sliding window)
    unsigned char layer_rope[CONFIG_MAX_LAYERS];  // 0 = rope_theta + rope_scaling; 1 = local
    // mixture of experts (qwen3_moe, mixtral; docs/models.md "Routing"); num_experts 0 = dense
    int num_experts;             // E (qwen3_moe num_experts, mixtral num_local_experts)
    int ep_size, ep_lo, ep_part; // expert parallel (src/train/ep.c): ep_size ranks share the experts; this
                                 // model holds experts [ep_lo, ep_lo + ep_part) of every sparse layer (ep_part
                                 // 0: all E, ep_size 0 or 1: no exchange)
    int num_experts_per_tok;     // K
    int moe_intermediate_size;   // expert FF (mixtral: intermediate_size)
    int norm_topk_prob;          // routing weights: softmax over the K selected logits
    int output_router_logits;    // training adds router_aux_loss_coef * the load-balancing loss
    double router_aux_loss_coef;
    unsigned char layer_moe[CONFIG_MAX_LAYERS];   // 1 = layer l's MLP is the sparse MoE block
    int router_bias;             // the router has a bias (gpt_oss: mlp.router.bias)
    int moe_fused;               // experts stored as GptOssExperts: one gate_up_proj (E, C, 2 FF) with
                                 // gate / up interleaved, down_proj (E, FF, C), each with a bias
    double swiglu_alpha, swiglu_limit;  // moe_fused experts' clamped SwiGLU (backend.h swiglu_clamp_forward)
    int attn_sinks;              // a learned sink logit per query head (self_attn.sinks; AttnOpts.sinks)
    int num_labels;              // > 0: a *ForSequenceClassification model (architectures[0]): a score
                                 // head (num_labels, C) and no LM head; 0: a causal LM
    double initializer_range;    // for `still init`
    DType torch_dtype;           // checkpoint dtype ("torch_dtype" or "dtype")
    int bos_token_id;            // -1 if absent
    int pad_token_id;            // -1 if absent
    int eos_token_ids[MAX_EOS_IDS];
    int n_eos_token_ids;
    cJSON *raw;                  // the parsed config.json, kept so saving writes its fields back as given
} ModelConfig;

// Parse config.json text. `path` names the file in messages. Unsupported values (qwen3_moe,
// sliding-window layers, unknown rope types or model types) are errors naming the value.
Status config_parse(const char *text, size_t len, const char *path, ModelConfig *cfg, Err *e);
Status config_load(const char *path, ModelConfig *cfg, Err *e);
// Fill defaults for fields that are missing from cfg->raw (used by `still init`), keeping every
// given field as given, and serialise. Caller frees the returned text.
char *config_to_json(const ModelConfig *cfg);
void config_free(ModelConfig *cfg);
// Make cfg a sequence-classification config (Qwen3/Qwen2/LlamaForSequenceClassification) with
// num_labels outputs: architectures, num_labels, id2label / label2id (LABEL_i, as transformers
// names them) in cfg->raw; pad_token_id >= 0 replaces the config's (what pooling looks for).
void config_set_classifier(ModelConfig *cfg, int num_labels, int pad_token_id);
// The architecture name config_to_json writes when config.json has none.
const char *config_architecture(const ModelConfig *cfg);

// Longrope (transformers' longrope_frequency_update): whether a forward call whose longest
// sequence holds `len` positions (max position id + 1) uses long_factor. 0 for other rope types.
int config_rope_long(const ModelConfig *cfg, int len);

// RoPE inverse frequencies (RD/2) for the configured rope type (longrope: short_factor), and the
// attention scaling that multiplies cos and sin (1 except for yarn and longrope).
void config_rope_inv_freq(const ModelConfig *cfg, float *inv_freq, float *mscale);
// Longrope's inverse frequencies (RD/2) with long_factor (the same attention scaling).
void config_rope_long_inv_freq(const ModelConfig *cfg, float *inv_freq);
// The local layers' RoPE inverse frequencies (RD/2): base rope_local_theta, no scaling (Gemma 3's
// rotary_emb_local).
void config_rope_local_inv_freq(const ModelConfig *cfg, float *inv_freq);

// The rows of the embedding and the LM head this model holds (vocab_part, or the whole V).
static inline int config_vocab_rows(const ModelConfig *c) { return c->vocab_part > 0 ? c->vocab_part : c->vocab_size; }
// Tensor parallelism (src/train/tp.c gives every rank of the group a vocabulary shard): the
// group's size and this rank's place in it; 1 and 0 for a whole model.
static inline int config_tp_size(const ModelConfig *c) { return c->vocab_part > 0 ? c->vocab_size / c->vocab_part : 1; }
static inline int config_tp_rank(const ModelConfig *c) { return c->vocab_part > 0 ? c->vocab_lo / c->vocab_part : 0; }
// The experts of each sparse layer this model holds (ep_part, or all E), and the ranks that share them.
static inline int config_local_experts(const ModelConfig *c) { return c->ep_part > 0 ? c->ep_part : c->num_experts; }
static inline int config_ep_size(const ModelConfig *c) { return c->ep_size > 1 ? c->ep_size : 1; }

#endif
