// config.h: the model configuration read from a Hugging Face config.json (Qwen3, Qwen2, Llama).
// See SEMANTICS_MODEL.md §1.1 and §1.5 for what each field means and the per-family flags.
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

typedef enum { ROPE_DEFAULT = 0, ROPE_LLAMA3, ROPE_YARN, ROPE_LINEAR } RopeType;

typedef struct RopeScaling {
    RopeType type;
    double factor;                            // linear / llama3 / yarn
    double low_freq_factor, high_freq_factor; // llama3
    double original_max_position_embeddings;  // llama3 / yarn
    double beta_fast, beta_slow;              // yarn [32, 1]
    double attention_factor;                  // yarn; < 0 = derived from factor (and mscale)
    double mscale, mscale_all_dim;            // yarn variant; 0 = absent
    int truncate;                             // yarn [1]
} RopeScaling;

typedef struct ModelConfig {
    char model_type[32];         // "qwen3", "qwen2", "llama"
    int vocab_size;              // V
    int hidden_size;             // C
    int intermediate_size;       // FF
    int num_hidden_layers;       // L
    int num_attention_heads;     // NH
    int num_key_value_heads;     // NKV
    int head_dim;                // HD (explicit in Qwen3; else hidden_size / num_attention_heads)
    double rms_norm_eps;
    double rope_theta;
    RopeScaling rope_scaling;
    int max_position_embeddings;
    int tie_word_embeddings;
    int qkv_bias;                // bias on q, k, v projections (Qwen2 always; Qwen3/Llama: attention_bias)
    int o_bias;                  // bias on o_proj (Qwen3/Llama attention_bias; never Qwen2)
    int mlp_bias;                // Llama mlp_bias
    int qk_norm;                 // per-head RMSNorm on q and k before RoPE (Qwen3)
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

// RoPE inverse frequencies (HD/2) for the configured rope type, and the attention scaling that
// multiplies cos and sin (1 except for yarn).
void config_rope_inv_freq(const ModelConfig *cfg, float *inv_freq, float *mscale);

#endif
