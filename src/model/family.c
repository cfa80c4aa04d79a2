// family.c: the model family table (family.h says how to add a family).
#include "family.h"

#include <string.h>

// PretrainedConfig's generic attributes (they never change a forward or backward pass), and the
// fields config.c reads for every family.
const char *const family_common_fields[] = {
    // read by config.c for every family
    "model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings",
    "initializer_range", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "tie_word_embeddings",
    "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id", "id2label", "label2id", "num_labels",
    "quantization_config", "layer_types", "attention_dropout",
    // PretrainedConfig and generation defaults saved by transformers: inert here
    "use_cache", "transformers_version", "_name_or_path", "name_or_path", "_commit_hash", "_attn_implementation",
    "_attn_implementation_autoset", "_attn_implementation_internal", "auto_map", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "cross_attention_hidden_size",
    "add_cross_attention", "tie_encoder_decoder", "max_length", "min_length", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "finetuning_task", "tokenizer_class", "prefix", "sep_token_id", "decoder_start_token_id", "task_specific_params",
    "problem_type", "gradient_checkpointing", NULL,
};

static const char *const qwen3_fields[] = {"attention_bias", "use_sliding_window", "sliding_window",
                                           "max_window_layers", NULL};
// Qwen2 has q/k/v biases whatever attention_bias says (transformers does not read the key).
static const char *const qwen2_fields[] = {"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers", NULL};
static const char *const llama_fields[] = {"attention_bias", "mlp_bias", "pretraining_tp", NULL};
static const char *const olmo2_fields[] = {"attention_bias", NULL};
static const char *const qwen3_moe_fields[] = {
    "attention_bias", "use_sliding_window", "sliding_window", "max_window_layers", "decoder_sparse_step",
    "moe_intermediate_size", "num_experts_per_tok", "num_experts", "norm_topk_prob", "output_router_logits",
    "router_aux_loss_coef", "mlp_only_layers", NULL};
static const char *const mixtral_fields[] = {"sliding_window", "num_experts_per_tok", "num_local_experts",
                                             "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
                                             NULL};
static const char *const mistral_fields[] = {"sliding_window", NULL};
// GptOssConfig: experts_per_token and initial_context_length are the original release's names that
// its config.json carries beside num_experts_per_tok and rope_scaling (transformers reads neither).
static const char *const gpt_oss_fields[] = {"attention_bias", "sliding_window", "num_local_experts",
                                             "num_experts_per_tok", "output_router_logits", "router_aux_loss_coef",
                                             "swiglu_alpha", "swiglu_limit", "experts_per_token",
                                             "initial_context_length", NULL};
// Gemma 2 / 3 (gemma3_text): the fields their parse hook reads (config.c), and the cache choice
// of generate(), which is inert here.
static const char *const gemma2_fields[] = {"attention_bias", "hidden_activation", "query_pre_attn_scalar",
                                            "sliding_window", "attn_logit_softcapping", "final_logit_softcapping",
                                            "cache_implementation", NULL};
static const char *const gemma3_fields[] = {"attention_bias", "hidden_activation", "query_pre_attn_scalar",
                                            "sliding_window", "sliding_window_pattern", "attn_logit_softcapping",
                                            "final_logit_softcapping", "rope_local_base_freq", "cache_implementation",
                                            "use_bidirectional_attention", NULL};
static const char *const phi3_fields[] = {"resid_pdrop", "embd_pdrop", "original_max_position_embeddings",
                                          "partial_rotary_factor", "sliding_window", NULL};

Status family_parse_qwen_window(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
Status family_parse_phi3(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
Status family_parse_qwen3_moe(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
Status family_parse_mixtral(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
Status family_parse_mistral(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
Status family_parse_gpt_oss(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
Status family_parse_gemma2(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);
Status family_parse_gemma3(const cJSON *root, const char *path, ModelConfig *cfg, Err *e);

#define PRE_NORMS (NORM_PRE_ATTN | NORM_PRE_MLP)
#define POST_NORMS (NORM_POST_ATTN | NORM_POST_MLP)
#define ALL_NORMS (PRE_NORMS | POST_NORMS)
// Gemma's four norms: input_layernorm, post_attention_layernorm (after attention),
// pre_feedforward_layernorm, post_feedforward_layernorm.
#define GEMMA_NAMES                                                                                                  \
    {[TK_LNA] = "post_attention_layernorm.weight", [TK_LN2] = "pre_feedforward_layernorm.weight",                  \
     [TK_LNF] = "post_feedforward_layernorm.weight"}

static const FamilyDesc family_table[] = {
    {
        .model_type = "qwen3", .architecture = "Qwen3ForCausalLM", .classifier = "Qwen3ForSequenceClassification",
        .vocab_size = 151936, .max_position_embeddings = 32768, .head_dim = 128, .bos_token_id = -1,
        .eos_token_id = -1, .rms_norm_eps = 1e-6,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_HEAD,
        .qkv_bias = BIAS_ATTN_KEY, .o_bias = BIAS_ATTN_KEY, .mlp_bias = BIAS_NEVER,
        .fields = qwen3_fields, .parse = family_parse_qwen_window,
    },
    {
        .model_type = "qwen2", .architecture = "Qwen2ForCausalLM", .classifier = "Qwen2ForSequenceClassification",
        .vocab_size = 151936, .max_position_embeddings = 32768, .head_dim = 0, .bos_token_id = -1,
        .eos_token_id = -1, .rms_norm_eps = 1e-6,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_NONE,
        .qkv_bias = BIAS_ALWAYS, .o_bias = BIAS_NEVER, .mlp_bias = BIAS_NEVER,
        .fields = qwen2_fields, .parse = family_parse_qwen_window,
    },
    {
        .model_type = "llama", .architecture = "LlamaForCausalLM", .classifier = "LlamaForSequenceClassification",
        .vocab_size = 32000, .max_position_embeddings = 2048, .head_dim = 0, .bos_token_id = 1, .eos_token_id = 2,
        .rms_norm_eps = 1e-6,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_NONE,
        .qkv_bias = BIAS_ATTN_KEY, .o_bias = BIAS_ATTN_KEY, .mlp_bias = BIAS_MLP_KEY,
        .fields = llama_fields,
    },
    {
        // Olmo2ForCausalLM: norms after attention and after the MLP (no pre-norms), q/k norm
        // over the whole projection.
        .model_type = "olmo2", .architecture = "Olmo2ForCausalLM", .classifier = "Olmo2ForSequenceClassification",
        .vocab_size = 50304, .max_position_embeddings = 2048, .head_dim = 0, .bos_token_id = -1,
        .eos_token_id = 50279, .rms_norm_eps = 1e-5,
        .norms = POST_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_PROJ,
        .qkv_bias = BIAS_ATTN_KEY, .o_bias = BIAS_ATTN_KEY, .mlp_bias = BIAS_NEVER,
        .names = {[TK_LNA] = "post_attention_layernorm.weight", [TK_LNF] = "post_feedforward_layernorm.weight"},
        .fields = olmo2_fields,
    },
    {
        // Phi3ForCausalLM: qkv_proj and gate_up_proj fused; longrope ("su") scaling with short and
        // long factors; partial rotary (Phi-4-mini).
        .model_type = "phi3", .architecture = "Phi3ForCausalLM", .classifier = "Phi3ForSequenceClassification",
        .vocab_size = 32064, .max_position_embeddings = 4096, .head_dim = 0, .bos_token_id = 1,
        .eos_token_id = 32000, .rms_norm_eps = 1e-5,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_NONE, .fused_qkv = 1, .fused_gate_up = 1,
        .qkv_bias = BIAS_NEVER, .o_bias = BIAS_NEVER, .mlp_bias = BIAS_NEVER, .rope_longrope_aliases = 1,
        .partial_rotary = 1, .original_max_default = 4096, .fields = phi3_fields, .parse = family_parse_phi3,
    },
    {
        // Qwen3MoeForCausalLM: Qwen3 attention; sparse layers route to num_experts SwiGLU experts
        // (mlp.gate, mlp.experts.E.*); the others keep the dense MLP.
        .model_type = "qwen3_moe", .architecture = "Qwen3MoeForCausalLM", .classifier = NULL,
        .vocab_size = 151936, .max_position_embeddings = 32768, .head_dim = 0, .bos_token_id = -1,
        .eos_token_id = -1, .rms_norm_eps = 1e-6,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_HEAD,
        .qkv_bias = BIAS_ATTN_KEY, .o_bias = BIAS_ATTN_KEY, .mlp_bias = BIAS_NEVER,
        .fields = qwen3_moe_fields, .parse = family_parse_qwen3_moe,
    },
    {
        // MixtralForCausalLM: every layer sparse (block_sparse_moe.gate, experts.E.w1 / w3 / w2).
        .model_type = "mixtral", .architecture = "MixtralForCausalLM", .classifier = NULL,
        .vocab_size = 32000, .max_position_embeddings = 4096 * 32, .head_dim = 0, .bos_token_id = 1,
        .eos_token_id = 2, .rms_norm_eps = 1e-5,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_NONE,
        .qkv_bias = BIAS_NEVER, .o_bias = BIAS_NEVER, .mlp_bias = BIAS_NEVER,
        .names = {[TK_ROUTER] = "block_sparse_moe.gate.weight", [TK_EXP_G] = "block_sparse_moe.experts.%d.w1.weight",
                  [TK_EXP_U] = "block_sparse_moe.experts.%d.w3.weight",
                  [TK_EXP_D] = "block_sparse_moe.experts.%d.w2.weight"},
        .fields = mixtral_fields, .parse = family_parse_mixtral,
    },
    {
        // GptOssForCausalLM: biased q/k/v/o, a sink logit per head, layer_types alternating sliding and
        // full attention, YaRN RoPE; every layer sparse: a biased router (softmax over the top-k
        // logits) and experts with biases and the clamped SwiGLU, stored as one tensor per kind.
        .model_type = "gpt_oss", .architecture = "GptOssForCausalLM", .classifier = NULL,
        .vocab_size = 201088, .max_position_embeddings = 131072, .head_dim = 64, .bos_token_id = -1,
        .eos_token_id = -1, .rms_norm_eps = 1e-5,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_NONE,
        .qkv_bias = BIAS_ATTN_KEY, .o_bias = BIAS_ATTN_KEY, .mlp_bias = BIAS_NEVER, .attention_bias_default = 1,
        .reads_layer_types = 1, .names = {[TK_ROUTER] = "mlp.router.weight"}, .fields = gpt_oss_fields,
        .parse = family_parse_gpt_oss,
    },
    {
        // MistralForCausalLM: Llama's layer with sliding_window on every layer (docs/models.md).
        .model_type = "mistral", .architecture = "MistralForCausalLM", .classifier = "MistralForSequenceClassification",
        .vocab_size = 32000, .max_position_embeddings = 131072, .head_dim = 0, .bos_token_id = 1, .eos_token_id = 2,
        .rms_norm_eps = 1e-6,
        .norms = PRE_NORMS, .act = ACT_SILU, .qk_norm = QKNORM_NONE,
        .qkv_bias = BIAS_NEVER, .o_bias = BIAS_NEVER, .mlp_bias = BIAS_NEVER,
        .fields = mistral_fields, .parse = family_parse_mistral,
    },
    {
        // Gemma2ForCausalLM: (1 + w) norms before and after each sublayer, embeddings times
        // sqrt(hidden), gelu_pytorch_tanh, query_pre_attn_scalar, soft-capped scores and logits,
        // even layers sliding.
        .model_type = "gemma2", .architecture = "Gemma2ForCausalLM", .classifier = "Gemma2ForSequenceClassification",
        .vocab_size = 256000, .max_position_embeddings = 8192, .head_dim = 256, .bos_token_id = 2, .eos_token_id = 1,
        .rms_norm_eps = 1e-6,
        .norms = ALL_NORMS, .norm_plus_one = 1, .act = ACT_GELU_TANH, .qk_norm = QKNORM_NONE, .embed_scale_sqrt = 1,
        .qkv_bias = BIAS_ATTN_KEY, .o_bias = BIAS_ATTN_KEY, .mlp_bias = BIAS_NEVER, .tie_default = 1,
        .reads_layer_types = 1, .names = GEMMA_NAMES, .fields = gemma2_fields, .parse = family_parse_gemma2,
    },
    {
        // Gemma3ForCausalLM (text only): Gemma 2's layer plus (1 + w) q/k norms per head, five
        // sliding layers in six, a local RoPE base for them.
        .model_type = "gemma3_text", .architecture = "Gemma3ForCausalLM", .classifier = NULL,
        .vocab_size = 262208, .max_position_embeddings = 131072, .head_dim = 256, .bos_token_id = 2,
        .eos_token_id = 1, .rms_norm_eps = 1e-6,
        .norms = ALL_NORMS, .norm_plus_one = 1, .act = ACT_GELU_TANH, .qk_norm = QKNORM_HEAD, .embed_scale_sqrt = 1,
        .qkv_bias = BIAS_ATTN_KEY, .o_bias = BIAS_ATTN_KEY, .mlp_bias = BIAS_NEVER, .tie_default = 1,
        .reads_layer_types = 1, .names = GEMMA_NAMES, .fields = gemma3_fields, .parse = family_parse_gemma3,
    },
};

const FamilyDesc *family_find(const char *model_type) {
    for (size_t i = 0; i < ARRAY_LEN(family_table); i++)
        if (!strcmp(model_type, family_table[i].model_type)) return &family_table[i];
    return NULL;
}

int family_count(void) { return (int)ARRAY_LEN(family_table); }

const FamilyDesc *family_at(int i) { return i >= 0 && i < family_count() ? &family_table[i] : NULL; }

const char *family_names(void) {
    static char buf[512];
    if (!buf[0]) {  // the same text on every call: a benign race at worst
        for (size_t i = 0; i < ARRAY_LEN(family_table); i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", family_table[i].model_type);
    }
    return buf;
}

static int in_list(const char *const *list, const char *key) {
    for (int i = 0; list && list[i]; i++)
        if (!strcmp(list[i], key)) return 1;
    return 0;
}

int family_accepts(const FamilyDesc *fd, const char *key) {
    return in_list(family_common_fields, key) || in_list(fd->fields, key);
}

static const char *default_suffix[TK_COUNT] = {
    [TK_LN1] = "input_layernorm.weight",
    [TK_WQ] = "self_attn.q_proj.weight", [TK_BQ] = "self_attn.q_proj.bias",
    [TK_WK] = "self_attn.k_proj.weight", [TK_BK] = "self_attn.k_proj.bias",
    [TK_WV] = "self_attn.v_proj.weight", [TK_BV] = "self_attn.v_proj.bias",
    [TK_WO] = "self_attn.o_proj.weight", [TK_BO] = "self_attn.o_proj.bias",
    [TK_QN] = "self_attn.q_norm.weight", [TK_KN] = "self_attn.k_norm.weight",
    [TK_LN2] = "post_attention_layernorm.weight",
    [TK_WG] = "mlp.gate_proj.weight", [TK_BG] = "mlp.gate_proj.bias",
    [TK_WU] = "mlp.up_proj.weight", [TK_BU] = "mlp.up_proj.bias",
    [TK_WD] = "mlp.down_proj.weight", [TK_BD] = "mlp.down_proj.bias",
    [TK_LNA] = "post_attention_layernorm.weight",
    [TK_LNF] = "post_feedforward_layernorm.weight",
    [TK_WQKV] = "self_attn.qkv_proj.weight",
    [TK_WGU] = "mlp.gate_up_proj.weight",
    [TK_ROUTER] = "mlp.gate.weight",
    [TK_EXP_G] = "mlp.experts.%d.gate_proj.weight",  // %d: the expert
    [TK_EXP_U] = "mlp.experts.%d.up_proj.weight",
    [TK_EXP_D] = "mlp.experts.%d.down_proj.weight",
    [TK_ROUTER_B] = "mlp.router.bias",
    [TK_XGU] = "mlp.experts.gate_up_proj",
    [TK_XGU_B] = "mlp.experts.gate_up_proj_bias",
    [TK_XD] = "mlp.experts.down_proj",
    [TK_XD_B] = "mlp.experts.down_proj_bias",
    [TK_SINKS] = "self_attn.sinks",
};

const char *family_tensor_suffix(const FamilyDesc *fd, TensorKind kind) {
    if (fd && fd->names[kind]) return fd->names[kind];
    return default_suffix[kind];
}
