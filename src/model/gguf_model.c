// gguf_model.c: GGUF metadata -> ModelConfig, GGUF tensors -> an StSet under HF names.
#include "gguf_model.h"

#include "../core/alloc.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

// Per-layer names: GGUF suffix after "blk.N." and HF suffix after "model.layers.N.".
static const char *const layer_names[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},     {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},     {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},      {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.weight", "mlp.up_proj.weight"},          {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.weight", "mlp.down_proj.weight"},      {"ffn_down.bias", "mlp.down_proj.bias"},
};

// Per-layer names of one architecture that differ from layer_names (llama.cpp's
// gguf-py/gguf/tensor_mapping.py resolves them by the architecture's tensor list): OLMo 2's
// post-norms; Phi-3's fused projections.
typedef struct ArchNames {
    const char *arch, *model_type;  // general.architecture, and the family's model_type when it differs
    const char *names[3][2];        // unused entries NULL
} ArchNames;

static const ArchNames arch_names[] = {
    {"olmo2", NULL, {{"post_attention_norm.weight", "post_attention_layernorm.weight"},
               {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}}},
    {"phi3", NULL, {{"attn_qkv.weight", "self_attn.qkv_proj.weight"}, {"ffn_up.weight", "mlp.gate_up_proj.weight"}}},
    {"gemma2", NULL, {{"post_attention_norm.weight", "post_attention_layernorm.weight"},
                {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
                {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}}},
    {"gemma3", "gemma3_text", {{"post_attention_norm.weight", "post_attention_layernorm.weight"},
                               {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
                               {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}}},
};

static const char *const global_names[][2] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// "PREFIX<int>.rest" -> layer and rest; 0 if s does not start that way.
static int split_layer(const char *s, const char *prefix, int *layer, const char **rest) {
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n)) return 0;
    const char *p = s + n;
    if (*p < '0' || *p > '9') return 0;
    long v = 0;
    while (*p >= '0' && *p <= '9' && v < 1000000) v = v * 10 + (*p++ - '0');
    if (*p != '.' || v >= 1000000) return 0;
    *layer = (int)v;
    *rest = p + 1;
    return 1;
}

static int map_name(const char *arch, const char *in, char *out, size_t n, int from) {
    int to = 1 - from;
    for (size_t i = 0; i < ARRAY_LEN(global_names); i++)
        if (!strcmp(in, global_names[i][from])) return snprintf(out, n, "%s", global_names[i][to]), 1;
    static const char *const prefixes[2] = {"blk.", "model.layers."};
    int layer;
    const char *rest;
    if (!split_layer(in, prefixes[from], &layer, &rest)) return 0;
    for (size_t a = 0; arch && a < ARRAY_LEN(arch_names); a++) {
        const ArchNames *an = &arch_names[a];
        if (strcmp(arch, an->arch) && (!an->model_type || strcmp(arch, an->model_type))) continue;
        for (int i = 0; i < 3 && arch_names[a].names[i][0]; i++)
            if (!strcmp(rest, arch_names[a].names[i][from]))
                return snprintf(out, n, "%s%d.%s", prefixes[to], layer, arch_names[a].names[i][to]), 1;
    }
    for (size_t i = 0; i < ARRAY_LEN(layer_names); i++)
        if (!strcmp(rest, layer_names[i][from])) return snprintf(out, n, "%s%d.%s", prefixes[to], layer, layer_names[i][to]), 1;
    return 0;
}

int gguf_name_to_hf(const char *arch, const char *gguf_name, char *hf, size_t n) {
    return map_name(arch, gguf_name, hf, n, 0);
}
int gguf_name_from_hf(const char *arch, const char *hf_name, char *gguf_name, size_t n) {
    return map_name(arch, hf_name, gguf_name, n, 1);
}

void gguf_llama_unpermute(void *dst, const void *src, int n_heads, int hd, size_t row_bytes) {
    int half = hd / 2;
    for (int h = 0; h < n_heads; h++)
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < half; i++) {
                size_t hf_row = (size_t)h * hd + (size_t)s * half + i, gg_row = (size_t)h * hd + 2 * (size_t)i + s;
                memcpy((char *)dst + hf_row * row_bytes, (const char *)src + gg_row * row_bytes, row_bytes);
            }
}

void gguf_llama_permute(void *dst, const void *src, int n_heads, int hd, size_t row_bytes) {
    int half = hd / 2;
    for (int h = 0; h < n_heads; h++)
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < half; i++) {
                size_t hf_row = (size_t)h * hd + (size_t)s * half + i, gg_row = (size_t)h * hd + 2 * (size_t)i + s;
                memcpy((char *)dst + gg_row * row_bytes, (const char *)src + hf_row * row_bytes, row_bytes);
            }
}

// ------------------------------------------------------------------------------------ config

typedef struct KeyMap {
    const char *gguf;   // after "<arch>."
    const char *hf;
    int required;
    int is_float;
} KeyMap;

static const KeyMap key_map[] = {
    {"block_count", "num_hidden_layers", 1, 0},
    {"embedding_length", "hidden_size", 1, 0},
    {"feed_forward_length", "intermediate_size", 1, 0},
    {"attention.head_count", "num_attention_heads", 1, 0},
    {"attention.head_count_kv", "num_key_value_heads", 0, 0},
    {"attention.key_length", "head_dim", 0, 0},
    {"context_length", "max_position_embeddings", 0, 0},
    {"rope.freq_base", "rope_theta", 0, 1},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", 1, 1},
};

static const char *dtype_of_type(uint32_t t) {
    return t == GGML_BF16 ? "bfloat16" : t == GGML_F16 ? "float16" : "float32";
}

static Status add_rope_scaling(const GgufFile *g, const char *arch, cJSON *root, Err *e) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    char *type = NULL;
    Status st = gguf_get_str(g, key, 0, &type, e);
    if (st == ST_ENOTFOUND) return ST_OK;
    if (st != ST_OK) return st;
    if (!strcmp(type, "none")) {
        free(type);
        return ST_OK;
    }
    if (strcmp(type, "linear") && strcmp(type, "yarn")) {
        st = err_set(e, ST_EUNSUPPORTED, "%s: %s \"%s\" is not supported (none, linear, yarn)", g->path, key, type);
        free(type);
        return st;
    }
    cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", type);
    double factor = 1, orig = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    st = gguf_get_float(g, key, 1, &factor, e);
    if (st == ST_OK) cJSON_AddNumberToObject(rs, "factor", factor);
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if (st == ST_OK && !strcmp(type, "yarn")) {
        st = gguf_get_float(g, key, 1, &orig, e);
        if (st == ST_OK) cJSON_AddNumberToObject(rs, "original_max_position_embeddings", orig);
    }
    free(type);
    return st;
}

// HF's llama3 frequency factor of RoPE frequency f (rope_type "llama3").
static double llama3_factor(double f, double factor, double lo, double hi, double old) {
    double wl = 2 * M_PI / f, lo_wl = old / lo, hi_wl = old / hi;
    if (wl < hi_wl) return 1;
    if (wl > lo_wl) return factor;
    double smooth = (old / wl - lo) / (hi - lo);
    return 1 / ((1 - smooth) / factor + smooth);
}

// llama.cpp's converter turns Llama 3 rope scaling into per-frequency factors (rope_freqs.weight,
// inv_freq / factor). The parameters are recovered from them (low_freq_factor taken as 1: only
// the ratios old / low and old / high matter), rounded as Hugging Face configs write them, and
// checked to give the stored factors back; factors of any other shape are refused.
static Status add_llama3_rope(const GgufFile *g, cJSON *root, Err *e) {
    const GgufTensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    const cJSON *nh = cJSON_GetObjectItem(root, "num_attention_heads"), *c = cJSON_GetObjectItem(root, "hidden_size");
    const cJSON *kl = cJSON_GetObjectItem(root, "head_dim"), *th = cJSON_GetObjectItem(root, "rope_theta");
    int hd = kl ? kl->valueint : (nh && c && nh->valueint ? c->valueint / nh->valueint : 0);
    double base = th ? th->valuedouble : 10000.0;
    if (t->type != GGML_F32 || t->n_dims != 1 || hd < 2 || t->ne[0] != hd / 2)
        return err_set(e, ST_EINVAL, "%s: tensor \"rope_freqs.weight\" must be F32 of %d elements (head_dim / 2)", g->path, hd / 2);
    int n = hd / 2;
    const float *ff = (const float *)t->data;
    double factor = 1, s1 = -1, s2 = -1, w1 = 0, w2 = 0, max_one_wl = 0;
    for (int i = 0; i < n; i++) factor = MAX(factor, (double)ff[i]);
    if (factor <= 1) return ST_OK;  // no scaling
    for (int i = 0; i < n; i++) {
        double f = 1 / pow(base, 2.0 * i / hd), wl = 2 * M_PI / f, v = ff[i];
        if (fabs(v - 1) <= 1e-6) max_one_wl = MAX(max_one_wl, wl);
        if (v > 1 + 1e-6 && v < factor * (1 - 1e-6)) {
            double s = (1 / v - 1 / factor) / (1 - 1 / factor);
            if (s1 < 0) s1 = s, w1 = wl;
            else s2 = s, w2 = wl;
        }
    }
    double lo = 1, hi = 4, old;
    if (s2 >= 0) {  // smooth = old / (hi - lo) / wl - lo / (hi - lo): a line in 1 / wl
        double a = (s2 - s1) / (1 / w2 - 1 / w1), b = s1 - a / w1;
        hi = b < 0 ? 1 - 1 / b : 4;
        old = b < 0 ? -a / b : 8192;
    } else if (s1 >= 0) {
        old = w1 * ((hi - lo) * s1 + lo);
    } else {
        old = MAX(8192, ceil(max_one_wl * hi + 1));
    }
    old = round(old);
    hi = round(hi * 1000) / 1000;
    for (int i = 0; i < n; i++) {
        double f = 1 / pow(base, 2.0 * i / hd);
        if (fabs(llama3_factor(f, factor, lo, hi, old) - ff[i]) > 1e-5 * ff[i])
            return err_set(e, ST_EUNSUPPORTED,
                           "%s: tensor \"rope_freqs.weight\" holds RoPE frequency factors that are not Llama 3 rope scaling "
                           "(element %d is %g); other factors are not supported", g->path, i, (double)ff[i]);
    }
    cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", "llama3");
    cJSON_AddNumberToObject(rs, "factor", (double)(float)factor);
    cJSON_AddNumberToObject(rs, "low_freq_factor", lo);
    cJSON_AddNumberToObject(rs, "high_freq_factor", hi);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", old);
    return ST_OK;
}

// A F32 vector tensor of n elements as a JSON list, or NULL (error set) when it is not one.
static cJSON *factor_list(const GgufFile *g, const char *name, int n, Err *e) {
    const GgufTensor *t = gguf_find_tensor(g, name);
    if (!t || t->type != GGML_F32 || t->n_dims != 1 || t->ne[0] != n) {
        err_set(e, ST_EINVAL, "%s: tensor \"%s\" must be F32 of %d elements (rope.dimension_count / 2)", g->path, name, n);
        return NULL;
    }
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)((const float *)t->data)[i]));
    return a;
}

// Phi-3 as llama.cpp's converter (Phi3MiniModel) writes it: rope.dimension_count (partial
// rotary), rope.scaling.original_context_length, attention.sliding_window (0: none), and for
// longrope rope.scaling.attn_factor with the tensors rope_factors_long / rope_factors_short.
static Status add_phi3(const GgufFile *g, cJSON *root, Err *e) {
    const cJSON *nh = cJSON_GetObjectItem(root, "num_attention_heads"), *c = cJSON_GetObjectItem(root, "hidden_size");
    const cJSON *kl = cJSON_GetObjectItem(root, "head_dim");
    int hd = kl ? kl->valueint : c->valueint / nh->valueint;
    int64_t v;
    Status st = gguf_get_int(g, "phi3.rope.dimension_count", 0, &v, e);
    if (st == ST_OK && (v < 2 || v > hd || v % 2))
        return err_set(e, ST_EINVAL, "%s: phi3.rope.dimension_count is %lld, expected an even number in [2, %d]", g->path,
                       (long long)v, hd);
    int rd = st == ST_OK ? (int)v : hd;
    if (st != ST_OK && st != ST_ENOTFOUND) return st;
    if (rd != hd) cJSON_AddNumberToObject(root, "partial_rotary_factor", (double)rd / hd);
    st = gguf_get_int(g, "phi3.rope.scaling.original_context_length", 0, &v, e);
    if (st == ST_OK) cJSON_AddNumberToObject(root, "original_max_position_embeddings", (double)v);
    else if (st != ST_ENOTFOUND) return st;
    st = gguf_get_int(g, "phi3.attention.sliding_window", 0, &v, e);
    if (st == ST_OK && v > 0) cJSON_AddNumberToObject(root, "sliding_window", (double)v);
    else if (st == ST_OK || st == ST_ENOTFOUND) cJSON_AddNullToObject(root, "sliding_window");
    else return st;
    if (!gguf_find_tensor(g, "rope_factors_long.weight") && !gguf_find_tensor(g, "rope_factors_short.weight"))
        return ST_OK;
    cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
    cJSON_AddStringToObject(rs, "type", "longrope");
    cJSON *sf = factor_list(g, "rope_factors_short.weight", rd / 2, e);
    if (!sf) return e->code;
    cJSON_AddItemToObject(rs, "short_factor", sf);
    cJSON *lf = factor_list(g, "rope_factors_long.weight", rd / 2, e);
    if (!lf) return e->code;
    cJSON_AddItemToObject(rs, "long_factor", lf);
    double af;
    st = gguf_get_float(g, "phi3.rope.scaling.attn_factor", 0, &af, e);
    if (st == ST_OK) cJSON_AddNumberToObject(rs, "attention_factor", af);
    return st == ST_ENOTFOUND ? ST_OK : st;
}

// Gemma 2 and 3 as llama.cpp's converter (Gemma2Model, Gemma3Model) writes them and llama.cpp
// runs them: the query scale 1/sqrt(key_length) (query_pre_attn_scalar = head_dim),
// attention.sliding_window (gemma2: the even layers; gemma3: five layers in six, their RoPE base
// 10000 unscaled, as llama.cpp fixes them), the soft-caps (absent: the config class's defaults,
// which are llama.cpp's).
static Status add_gemma(const GgufFile *g, const char *arch, cJSON *root, Err *e) {
    const cJSON *kl = cJSON_GetObjectItem(root, "head_dim");
    if (!kl) return err_set(e, ST_EINVAL, "%s: missing metadata \"%s.attention.key_length\"", g->path, arch);
    cJSON_AddNumberToObject(root, "query_pre_attn_scalar", kl->valuedouble);
    int64_t w;
    char key[96];
    snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
    TRY(gguf_get_int(g, key, 1, &w, e));
    if (w < 1) return err_set(e, ST_EINVAL, "%s: %s is %lld, expected >= 1", g->path, key, (long long)w);
    cJSON_AddNumberToObject(root, "sliding_window", (double)w);
    if (!strcmp(arch, "gemma3")) {
        cJSON_AddNumberToObject(root, "sliding_window_pattern", 6);
        cJSON_AddNumberToObject(root, "rope_local_base_freq", 10000.0);
    }
    static const char *const caps[] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (int i = 0; i < 2; i++) {
        double v;
        snprintf(key, sizeof key, "%s.%s", arch, caps[i]);
        Status st = gguf_get_float(g, key, 0, &v, e);
        if (st == ST_OK) cJSON_AddNumberToObject(root, caps[i], v);
        else if (st != ST_ENOTFOUND) return st;
    }
    return ST_OK;
}

static Status build_config_json(const GgufFile *g, cJSON *root, Err *e) {
    char *arch = NULL;
    TRY(gguf_get_str(g, "general.architecture", 1, &arch, e));
    Status st = ST_OK;
    if (strcmp(arch, "qwen3") && strcmp(arch, "qwen2") && strcmp(arch, "llama") && strcmp(arch, "olmo2") &&
        strcmp(arch, "phi3") && strcmp(arch, "gemma2") && strcmp(arch, "gemma3")) {
        st = err_set(e, ST_EUNSUPPORTED,
                     "%s: general.architecture \"%s\" is not supported (qwen3, qwen2, llama, olmo2, phi3, gemma2, gemma3)",
                     g->path, arch);
        goto done;
    }
    cJSON_AddStringToObject(root, "model_type", strcmp(arch, "gemma3") ? arch : "gemma3_text");
    for (size_t i = 0; i < ARRAY_LEN(key_map) && st == ST_OK; i++) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", arch, key_map[i].gguf);
        if (key_map[i].is_float) {
            double v;
            st = gguf_get_float(g, key, key_map[i].required, &v, e);
            if (st == ST_OK) cJSON_AddNumberToObject(root, key_map[i].hf, v);
        } else {
            int64_t v;
            st = gguf_get_int(g, key, key_map[i].required, &v, e);
            if (st == ST_OK && (v < 1 || v > 1 << 30)) {
                st = err_set(e, ST_EINVAL, "%s: metadata \"%s\" is %lld, expected a positive integer", g->path, key, (long long)v);
            }
            if (st == ST_OK) cJSON_AddNumberToObject(root, key_map[i].hf, (double)v);
        }
        if (st == ST_ENOTFOUND) st = ST_OK;
    }
    if (st != ST_OK) goto done;
    // Per-layer arrays of head counts (several GGUF writers allow them) must be uniform.
    const GgufTensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) {
        st = err_set(e, ST_EINVAL, "%s: missing 2-D tensor \"token_embd.weight\"", g->path);
        goto done;
    }
    cJSON_AddNumberToObject(root, "vocab_size", (double)emb->ne[1]);
    cJSON_AddBoolToObject(root, "tie_word_embeddings", !gguf_find_tensor(g, "output.weight"));
    if (strcmp(arch, "qwen2") && strcmp(arch, "phi3"))
        cJSON_AddBoolToObject(root, "attention_bias", gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL);
    if (!strcmp(arch, "llama")) cJSON_AddBoolToObject(root, "mlp_bias", gguf_find_tensor(g, "blk.0.ffn_gate.bias") != NULL);
    cJSON_AddStringToObject(root, "torch_dtype", dtype_of_type(emb->type));
    static const char *const ids[][2] = {{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                         {"tokenizer.ggml.eos_token_id", "eos_token_id"},
                                         {"tokenizer.ggml.padding_token_id", "pad_token_id"}};
    for (size_t i = 0; i < ARRAY_LEN(ids) && st == ST_OK; i++) {
        int64_t v;
        st = gguf_get_int(g, ids[i][0], 0, &v, e);
        if (st == ST_OK && (v < 0 || v >= emb->ne[1]))
            st = err_set(e, ST_EINVAL, "%s: %s is %lld, outside the vocabulary (%lld)", g->path, ids[i][0], (long long)v,
                         (long long)emb->ne[1]);
        if (st == ST_OK) cJSON_AddNumberToObject(root, ids[i][1], (double)v);
        if (st == ST_ENOTFOUND) st = ST_OK, cJSON_AddNullToObject(root, ids[i][1]);
    }
    if (st == ST_OK && !strcmp(arch, "phi3")) st = add_phi3(g, root, e);
    if (st == ST_OK && (!strcmp(arch, "gemma2") || !strcmp(arch, "gemma3"))) st = add_gemma(g, arch, root, e);
    if (st == ST_OK) st = add_rope_scaling(g, arch, root, e);
    if (st == ST_OK && gguf_find_tensor(g, "rope_freqs.weight")) st = add_llama3_rope(g, root, e);
done:
    free(arch);
    return st;
}

Status gguf_model_config(const GgufFile *g, ModelConfig *cfg, Err *e) {
    cJSON *root = cJSON_CreateObject();
    Status st = build_config_json(g, root, e);
    if (st == ST_OK) {
        char *text = cJSON_PrintUnformatted(root);
        char what[1100];
        snprintf(what, sizeof what, "%s (GGUF metadata)", g->path);
        st = config_parse(text, strlen(text), what, cfg, e);
        free(text);
    }
    cJSON_Delete(root);
    return st;
}

// ------------------------------------------------------------------------------------ tensors

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

static void *own(StSet *set, size_t bytes) {
    void *p = xaligned(bytes ? bytes : 1);
    set->owned = xrealloc(set->owned, (size_t)(set->n_owned + 1) * sizeof *set->owned);
    set->owned[set->n_owned++] = p;
    return p;
}

// One GGUF tensor -> t (HF name set by the caller): shape reversed, data in place or converted.
static Status convert_tensor(const GgufFile *g, const GgufTensor *gt, const ModelConfig *cfg, int is_llama,
                             DType quant_dtype, StSet *set, StTensor *t, Err *e) {
    t->ndim = (int)gt->n_dims;
    for (uint32_t d = 0; d < gt->n_dims; d++) t->shape[d] = gt->ne[gt->n_dims - 1 - d];
    t->numel = gt->numel;
    int quantized = gt->type != GGML_F32 && gt->type != GGML_F16 && gt->type != GGML_BF16;
    t->dtype = gt->type == GGML_F16 ? DT_F16 : gt->type == GGML_BF16 ? DT_BF16 : quantized ? quant_dtype : DT_F32;
    t->nbytes = t->numel * dtype_size(t->dtype);
    const void *src = gt->data;
    if (quantized) {
        float *f = own(set, t->numel * sizeof(float));
        gguf_dequantize(gt->type, gt->data, f, t->numel);
        if (t->dtype != DT_F32) {
            void *c = own(set, t->nbytes);
            dtype_convert(c, t->dtype, f, DT_F32, t->numel);
            free(set->owned[set->n_owned - 2]);
            set->owned[set->n_owned - 2] = set->owned[set->n_owned - 1];
            set->n_owned--;
            f = c;
        }
        src = f;
    }
    t->data = src;
    size_t nl = strlen(t->name);
    if (cfg->norm_plus_one && nl > 11 && !strcmp(t->name + nl - 11, "norm.weight")) {
        // Gemma's converter stores every norm weight plus one (Gemma2RMSNorm scales by 1 + w)
        if (t->dtype != DT_F32)
            return err_set(e, ST_EINVAL, "%s: norm tensor \"%s\" must be F32", g->path, gt->name);
        float *w = own(set, t->nbytes);
        for (size_t i = 0; i < t->numel; i++) w[i] = ((const float *)src)[i] - 1.0f;
        t->data = w;
    }
    int q = strstr(t->name, ".q_proj.") != NULL, k = strstr(t->name, ".k_proj.") != NULL;
    if (is_llama && (q || k)) {
        int heads = q ? cfg->num_attention_heads : cfg->num_key_value_heads;
        size_t rows = (size_t)heads * cfg->head_dim;
        if ((size_t)t->shape[0] != rows)
            return err_set(e, ST_EINVAL, "%s: tensor \"%s\" has %lld rows, expected %zu (%d heads of %d)", g->path, gt->name,
                           (long long)t->shape[0], rows, heads, cfg->head_dim);
        void *dst = own(set, t->nbytes);
        gguf_llama_unpermute(dst, src, heads, cfg->head_dim, t->nbytes / rows);
        t->data = dst;
    }
    return ST_OK;
}

Status gguf_model_open(const char *path, int quant_dtype, ModelConfig *cfg, StSet *set, Err *e) {
    memset(set, 0, sizeof *set);
    memset(cfg, 0, sizeof *cfg);
    GgufFile g;
    TRY(gguf_open(path, &g, e));
    Status st = gguf_model_config(&g, cfg, e);
    if (st != ST_OK) {
        gguf_close(&g);
        return st;
    }
    DType qdt = quant_dtype == DT_BF16 ? DT_BF16 : quant_dtype == DT_F16 ? DT_F16 : DT_F32;
    int is_llama = !strcmp(cfg->model_type, "llama");
    set->tensors = xcalloc((size_t)g.n_tensors + 1, sizeof(StTensor));
    for (int i = 0; i < g.n_tensors && st == ST_OK; i++) {
        const GgufTensor *gt = &g.tensors[i];
        char hf[160];
        if (!strcmp(gt->name, "rope_freqs.weight") || !strcmp(gt->name, "rope_factors_long.weight") ||
            !strcmp(gt->name, "rope_factors_short.weight"))
            continue;  // now in the config's rope_scaling
        if (!gguf_name_to_hf(cfg->model_type, gt->name, hf, sizeof hf)) {
            st = err_set(e, ST_EINVAL, "%s: unexpected tensor \"%s\" (not part of a %s model)", path, gt->name, cfg->model_type);
            break;
        }
        StTensor *t = &set->tensors[set->n_tensors++];
        t->name = xstrdup(hf);
        st = convert_tensor(&g, gt, cfg, is_llama, qdt, set, t, e);
    }
    if (st == ST_OK) {
        qsort(set->tensors, (size_t)set->n_tensors, sizeof(StTensor), cmp_name);
        for (int i = 1; i < set->n_tensors && st == ST_OK; i++)  // two GGUF names for one tensor
            if (!strcmp(set->tensors[i - 1].name, set->tensors[i].name))
                st = err_set(e, ST_EINVAL, "%s: two tensors map to \"%s\" (not a %s model's layout)", path,
                             set->tensors[i].name, cfg->model_type);
    }
    if (st == ST_OK) {
        // The set owns the mapping from here on.
        set->files = xmalloc(sizeof(MappedFile));
        set->file_paths = xmalloc(sizeof(char *));
        set->files[0] = g.map;
        set->file_paths[0] = xstrdup(path);
        set->n_files = 1;
        g.map.fd = -1;
        g.map.data = NULL;
    }
    gguf_close(&g);
    if (st != ST_OK) {
        st_close(set);
        config_free(cfg);
    }
    return st;
}
