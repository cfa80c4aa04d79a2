// config.c: Hugging Face config.json through the family table (family.h; SEMANTICS_MODEL.md
// §1.1, §1.5; docs/models.md).
//
// Defaults for absent fields are those of transformers' <Family>Config (family.c),
// except the five sizes (vocab, hidden, intermediate, layers, heads), which are required: a
// checkpoint without them is broken, and silently building a 4096-wide model from class
// defaults would hide that. Where transformers versions differ (rope_parameters in v5), both
// spellings are read; docs/formats.md lists every rule.
#include "config.h"

#include "family.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#define DEFAULT_ROPE_THETA 10000.0
#define DEFAULT_INITIALIZER_RANGE 0.02
#define DEFAULT_MAX_WINDOW_LAYERS 28

// An int field: absent (or null) -> dflt; present -> integer within [lo, INT_MAX].
static Status get_int_field(const cJSON *obj, const char *key, const char *what, int required, int dflt, int lo,
                            int *out, Err *e) {
    long long v;
    Status st = json_get_int(obj, key, what, required, &v, e);
    if (st == ST_ENOTFOUND) {
        *out = dflt;
        return ST_OK;
    }
    if (st != ST_OK) return st;
    if (v < lo || v > INT_MAX) {
        if (lo == 1)
            return err_set(e, ST_EINVAL, "%s: field \"%s\" is %lld, expected a positive integer", what, key, v);
        return err_set(e, ST_EINVAL, "%s: field \"%s\" is %lld, expected an integer >= %d", what, key, v, lo);
    }
    *out = (int)v;
    return ST_OK;
}

// A size beyond what every backend supports (CONFIG_MAX_*): an error naming the field and the limit.
static Status check_max(const char *path, const char *key, int v, int max, const char *who, Err *e) {
    if (v <= max) return ST_OK;
    return err_set(e, ST_EINVAL, "%s: field \"%s\" is %d, more than the %d still supports%s%s%s", path, key, v, max,
                   who ? " (" : "", who ? who : "", who ? ")" : "");
}

static Status get_double_field(const cJSON *obj, const char *key, const char *what, double dflt, double *out,
                               Err *e) {
    Status st = json_get_double(obj, key, what, 0, out, e);
    if (st == ST_ENOTFOUND) {
        *out = dflt;
        return ST_OK;
    }
    return st;
}

static Status get_positive_double(const cJSON *obj, const char *key, const char *what, double dflt, double *out,
                                  Err *e) {
    TRY(get_double_field(obj, key, what, dflt, out, e));
    if (!(*out > 0) || !isfinite(*out))
        return err_set(e, ST_EINVAL, "%s: field \"%s\" is %g, expected a positive number", what, key, *out);
    return ST_OK;
}

static Status get_bool_field(const cJSON *obj, const char *key, const char *what, int dflt, int *out, Err *e) {
    Status st = json_get_bool(obj, key, what, 0, out, e);
    if (st == ST_ENOTFOUND) {
        *out = dflt;
        return ST_OK;
    }
    return st;
}

static Status parse_model_type(const cJSON *root, const char *path, const FamilyDesc **fam, Err *e) {
    const char *mt;
    TRY(json_get_string(root, "model_type", path, 1, &mt, e));
    *fam = family_find(mt);
    if (*fam) return ST_OK;
    return err_set(e, ST_EUNSUPPORTED, "%s: model_type \"%s\" is not supported (supported: %s)", path, mt,
                   family_names());
}

// Every key of config.json is one the family reads or knows to be inert; any other may change
// the math, so it is refused by name rather than ignored.
static Status check_fields(const cJSON *root, const char *path, const FamilyDesc *fd, Err *e) {
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!family_accepts(fd, it->string))
            return err_set(e, ST_EUNSUPPORTED,
                           "%s: field \"%s\" is not known for model_type %s (still refuses fields it does not "
                           "implement; docs/models.md)",
                           path, it->string, fd->model_type);
    }
    return ST_OK;
}

static int reads_attention_bias(const FamilyDesc *fd) {
    return fd->qkv_bias == BIAS_ATTN_KEY || fd->o_bias == BIAS_ATTN_KEY;
}

// A dropout probability: only 0 (still's trainers have no dropout inside the model).
static Status check_zero_dropout(const cJSON *root, const char *path, const char *key, Err *e) {
    double p;
    TRY(get_double_field(root, key, path, 0.0, &p, e));
    if (p != 0.0)
        return err_set(e, ST_EUNSUPPORTED, "%s: field \"%s\" is %g: dropout inside the model is not supported (only 0)",
                       path, key, p);
    return ST_OK;
}

static Status parse_eos(const cJSON *root, const char *path, int dflt, ModelConfig *cfg, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    cfg->n_eos_token_ids = 0;
    if (!v || cJSON_IsNull(v)) {
        if (dflt >= 0) cfg->eos_token_ids[cfg->n_eos_token_ids++] = dflt;
        return ST_OK;
    }
    if (cJSON_IsNumber(v)) {
        int id;
        TRY(get_int_field(root, "eos_token_id", path, 1, -1, 0, &id, e));
        cfg->eos_token_ids[cfg->n_eos_token_ids++] = id;
        return ST_OK;
    }
    if (!cJSON_IsArray(v))
        return err_set(e, ST_EINVAL, "%s: field \"eos_token_id\" must be an integer or a list of integers", path);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 ||
            it->valuedouble > INT_MAX)
            return err_set(e, ST_EINVAL, "%s: field \"eos_token_id\" must be an integer or a list of integers", path);
        if (cfg->n_eos_token_ids == MAX_EOS_IDS)
            return err_set(e, ST_EUNSUPPORTED, "%s: field \"eos_token_id\" lists more than %d ids", path, MAX_EOS_IDS);
        cfg->eos_token_ids[cfg->n_eos_token_ids++] = (int)it->valuedouble;
    }
    return ST_OK;
}

static Status parse_dtype(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    const char *key = json_has(root, "torch_dtype") ? "torch_dtype" : "dtype";
    const char *s;
    Status st = json_get_string(root, key, path, 0, &s, e);
    if (st == ST_ENOTFOUND) {
        cfg->torch_dtype = DT_BF16;
        return ST_OK;
    }
    if (st != ST_OK) return st;
    if (strcmp(s, "float32") && strcmp(s, "bfloat16") && strcmp(s, "float16"))
        return err_set(e, ST_EUNSUPPORTED, "%s: field \"%s\" is \"%s\", expected float32, bfloat16 or float16", path, key,
                       s);
    CHECK(dtype_parse(s, &cfg->torch_dtype) == 0);
    return ST_OK;
}

// layer_types (transformers v4.5x+): every layer "full_attention" unless a family's parse hook
// reads sliding layers itself (then it sets cfg->layer_window and this is not called).
static Status check_layer_types(const cJSON *root, const char *path, const ModelConfig *cfg, Err *e) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt)) return err_set(e, ST_EINVAL, "%s: field \"layer_types\" must be a list of strings", path);
        int n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, lt) {
            if (!cJSON_IsString(it))
                return err_set(e, ST_EINVAL, "%s: field \"layer_types\" must be a list of strings", path);
            if (!strcmp(it->valuestring, "sliding_attention"))
                return err_set(e, ST_EUNSUPPORTED,
                               "%s: layer_types[%d] is \"sliding_attention\": sliding-window attention layers are not "
                               "supported",
                               path, n);
            if (strcmp(it->valuestring, "full_attention"))
                return err_set(e, ST_EUNSUPPORTED,
                               "%s: layer_types[%d] is \"%s\", expected \"full_attention\"", path, n, it->valuestring);
            n++;
        }
        if (n != cfg->num_hidden_layers)
            return err_set(e, ST_EINVAL, "%s: field \"layer_types\" has %d entries, expected num_hidden_layers = %d",
                           path, n, cfg->num_hidden_layers);
    }
    return ST_OK;
}

// Qwen2 / Qwen3: use_sliding_window with max_window_layers (layers from max_window_layers on
// would slide) is refused wherever it would apply to at least one layer.
Status family_parse_qwen_window(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    int use_sw;
    TRY(get_bool_field(root, "use_sliding_window", path, 0, &use_sw, e));
    if (!use_sw || !json_has(root, "sliding_window")) return ST_OK;
    int mwl;
    TRY(get_int_field(root, "max_window_layers", path, 0, DEFAULT_MAX_WINDOW_LAYERS, 0, &mwl, e));
    if (mwl < cfg->num_hidden_layers)
        return err_set(e, ST_EUNSUPPORTED,
                       "%s: use_sliding_window is true (layers %d..%d would use sliding-window attention): "
                       "sliding-window attention layers are not supported",
                       path, mwl, cfg->num_hidden_layers - 1);
    return ST_OK;
}

// Phi-3: dropouts (only 0), sliding_window on every layer (transformers' Phi3 masks with it when
// it is not null); partial_rotary_factor is read with the rope fields (parse_rope).
Status family_parse_phi3(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    TRY(check_zero_dropout(root, path, "resid_pdrop", e));
    TRY(check_zero_dropout(root, path, "embd_pdrop", e));
    int w;
    TRY(get_int_field(root, "sliding_window", path, 0, 0, 1, &w, e));
    for (int l = 0; l < cfg->num_hidden_layers; l++) cfg->layer_window[l] = w;
    return ST_OK;
}

// Experts shared by qwen3_moe and mixtral: E (key e_key), K, the routing and aux-loss fields.
static Status parse_moe_common(const cJSON *root, const char *path, const char *e_key, int e_dflt, int k_dflt,
                               ModelConfig *cfg, Err *e) {
    TRY(get_int_field(root, e_key, path, 0, e_dflt, 0, &cfg->num_experts, e));
    TRY(check_max(path, e_key, cfg->num_experts, 1 << 16, NULL, e));
    TRY(get_int_field(root, "num_experts_per_tok", path, 0, k_dflt, 1, &cfg->num_experts_per_tok, e));
    if (cfg->num_experts > 0 && cfg->num_experts_per_tok > cfg->num_experts)
        return err_set(e, ST_EINVAL, "%s: num_experts_per_tok is %d, expected at most %s = %d", path,
                       cfg->num_experts_per_tok, e_key, cfg->num_experts);
    TRY(get_bool_field(root, "output_router_logits", path, 0, &cfg->output_router_logits, e));
    TRY(get_double_field(root, "router_aux_loss_coef", path, 0.001, &cfg->router_aux_loss_coef, e));
    if (!(cfg->router_aux_loss_coef >= 0))
        return err_set(e, ST_EINVAL, "%s: router_aux_loss_coef is %g, expected >= 0", path, cfg->router_aux_loss_coef);
    return ST_OK;
}

// Qwen3-MoE (Qwen3MoeDecoderLayer): layer l is sparse unless it is in mlp_only_layers, when
// num_experts > 0 and (l + 1) % decoder_sparse_step == 0; sparse layers' experts have
// moe_intermediate_size, dense layers intermediate_size.
Status family_parse_qwen3_moe(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    TRY(family_parse_qwen_window(root, path, cfg, e));
    TRY(parse_moe_common(root, path, "num_experts", 128, 8, cfg, e));
    TRY(get_int_field(root, "moe_intermediate_size", path, 0, 768, 1, &cfg->moe_intermediate_size, e));
    TRY(check_max(path, "moe_intermediate_size", cfg->moe_intermediate_size, CONFIG_MAX_INTERMEDIATE, NULL, e));
    TRY(get_bool_field(root, "norm_topk_prob", path, 0, &cfg->norm_topk_prob, e));
    int step;
    TRY(get_int_field(root, "decoder_sparse_step", path, 0, 1, 1, &step, e));
    unsigned char dense[CONFIG_MAX_LAYERS] = {0};
    const cJSON *mol = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (mol && !cJSON_IsNull(mol)) {
        if (!cJSON_IsArray(mol))
            return err_set(e, ST_EINVAL, "%s: field \"mlp_only_layers\" must be a list of layer indices", path);
        const cJSON *it;
        cJSON_ArrayForEach(it, mol) {
            if (!cJSON_IsNumber(it) || it->valuedouble != (int)it->valuedouble || it->valuedouble < 0 ||
                it->valuedouble >= cfg->num_hidden_layers)
                return err_set(e, ST_EINVAL, "%s: mlp_only_layers holds %g, expected layer indices in [0, %d)", path,
                               cJSON_IsNumber(it) ? it->valuedouble : -1.0, cfg->num_hidden_layers);
            dense[(int)it->valuedouble] = 1;
        }
    }
    for (int l = 0; l < cfg->num_hidden_layers; l++)
        cfg->layer_moe[l] = !dense[l] && cfg->num_experts > 0 && (l + 1) % step == 0;
    return ST_OK;
}

// Mixtral (MixtralSparseMoeBlock): every layer sparse, experts of intermediate_size, weights
// renormalised over the top k (softmax over the selected logits); sliding_window on every layer
// when not null; router_jitter_noise (training noise on the router input) only 0.
Status family_parse_mixtral(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    TRY(parse_moe_common(root, path, "num_local_experts", 8, 2, cfg, e));
    if (cfg->num_experts < 1)
        return err_set(e, ST_EINVAL, "%s: field \"num_local_experts\" is 0, expected a positive integer", path);
    cfg->moe_intermediate_size = cfg->intermediate_size;
    cfg->norm_topk_prob = 1;
    double jitter;
    TRY(get_double_field(root, "router_jitter_noise", path, 0.0, &jitter, e));
    if (jitter != 0)
        return err_set(e, ST_EUNSUPPORTED, "%s: router_jitter_noise %g is not supported (only 0)", path, jitter);
    int w;
    TRY(get_int_field(root, "sliding_window", path, 0, 0, 1, &w, e));
    for (int l = 0; l < cfg->num_hidden_layers; l++) cfg->layer_window[l] = w, cfg->layer_moe[l] = 1;
    return ST_OK;
}

// ---- the sliding-window families (docs/models.md) ----------------------------------------------

// An int field that may be null: absent -> dflt, null -> null_value, else an integer >= lo.
static Status get_nullable_int(const cJSON *root, const char *key, const char *path, int dflt, int null_value, int lo,
                               int *out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        *out = dflt;
        return ST_OK;
    }
    if (cJSON_IsNull(v)) {
        *out = null_value;
        return ST_OK;
    }
    return get_int_field(root, key, path, 1, dflt, lo, out, e);
}

// A soft-cap that may be null (0 = none): absent -> dflt; present -> a positive number.
static Status get_softcap(const cJSON *root, const char *key, const char *path, double dflt, double *out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        *out = dflt;
        return ST_OK;
    }
    if (cJSON_IsNull(v)) {
        *out = 0;
        return ST_OK;
    }
    return get_positive_double(root, key, path, dflt, out, e);
}

// MistralConfig: sliding_window (default 4096; null = every layer global) on every layer; query i
// sees key j iff i - W < j <= i (transformers' masking_utils, sliding_window_overlay).
Status family_parse_mistral(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    int w;
    TRY(get_nullable_int(root, "sliding_window", path, 4096, 0, 1, &w, e));
    for (int l = 0; l < cfg->num_hidden_layers; l++) cfg->layer_window[l] = w;
    return ST_OK;
}

// Which layers slide: layer_types when given ("sliding_attention" / "full_attention", one per
// layer), else every layer l with (l + 1) % pattern != 0 (Gemma 2: pattern 2, the even layers;
// Gemma 3: sliding_window_pattern). Sliding layers get window w (null: none slides).
static Status gemma_layers(const cJSON *root, const char *path, int pattern, int w, ModelConfig *cfg, Err *e) {
    int L = cfg->num_hidden_layers;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    unsigned char sliding[CONFIG_MAX_LAYERS];
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != L)
            return err_set(e, ST_EINVAL, "%s: field \"layer_types\" must list num_hidden_layers = %d strings", path, L);
        int n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, lt) {
            int s = cJSON_IsString(it) && !strcmp(it->valuestring, "sliding_attention");
            if (!s && !(cJSON_IsString(it) && !strcmp(it->valuestring, "full_attention")))
                return err_set(e, ST_EUNSUPPORTED,
                               "%s: layer_types[%d] must be \"sliding_attention\" or \"full_attention\"", path, n);
            sliding[n++] = (unsigned char)s;
        }
    } else {
        for (int l = 0; l < L; l++) sliding[l] = (unsigned char)((l + 1) % pattern != 0);
    }
    for (int l = 0; l < L; l++) cfg->layer_window[l] = sliding[l] ? w : 0;
    return ST_OK;
}

// What Gemma 2 and 3 share: hidden_activation (gelu_pytorch_tanh; the MLP reads only this key),
// query_pre_attn_scalar (the score scale is its -1/2 power), the two soft-caps and the window.
static Status gemma_common(const cJSON *root, const char *path, double attn_cap, double final_cap, ModelConfig *cfg,
                           int *window, Err *e) {
    const char *act;
    Status st = json_get_string(root, "hidden_activation", path, 0, &act, e);
    if (st != ST_OK && st != ST_ENOTFOUND) return st;
    if (st == ST_OK && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_tanh"))
        return err_set(e, ST_EUNSUPPORTED, "%s: hidden_activation \"%s\" is not supported (only gelu_pytorch_tanh)",
                       path, act);
    cfg->act = ACT_GELU_TANH;
    double qs;
    TRY(get_positive_double(root, "query_pre_attn_scalar", path, 256.0, &qs, e));
    cfg->query_scale = 1.0 / sqrt(qs);
    TRY(get_softcap(root, "attn_logit_softcapping", path, attn_cap, &cfg->attn_softcap, e));
    TRY(get_softcap(root, "final_logit_softcapping", path, final_cap, &cfg->final_softcap, e));
    return get_nullable_int(root, "sliding_window", path, 4096, 0, 1, window, e);
}

// Gemma2Config: attn_logit_softcapping 50, final_logit_softcapping 30 by default.
Status family_parse_gemma2(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    int w;
    TRY(gemma_common(root, path, 50.0, 30.0, cfg, &w, e));
    return gemma_layers(root, path, 2, w, cfg, e);
}

// Gemma3TextConfig: no caps by default, sliding_window_pattern 6, rope_local_base_freq 10000 for
// the sliding layers (without rope_scaling, which only the global layers use).
Status family_parse_gemma3(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    int w, pattern, bidir;
    TRY(gemma_common(root, path, 0.0, 0.0, cfg, &w, e));
    TRY(get_int_field(root, "sliding_window_pattern", path, 0, 6, 1, &pattern, e));
    TRY(gemma_layers(root, path, pattern, w, cfg, e));
    TRY(get_bool_field(root, "use_bidirectional_attention", path, 0, &bidir, e));
    if (bidir)
        return err_set(e, ST_EUNSUPPORTED, "%s: use_bidirectional_attention true is not supported (causal only)", path);
    TRY(get_positive_double(root, "rope_local_base_freq", path, 10000.0, &cfg->rope_local_theta, e));
    for (int l = 0; l < cfg->num_hidden_layers; l++) cfg->layer_rope[l] = cfg->layer_window[l] > 0;
    return ST_OK;
}

static const cJSON *rope_dict(const cJSON *root, const char **name);

// GptOssConfig (docs/models.md): layer_types (by default the even layers slide) with sliding_window
// (128); a sink logit per head; every layer sparse over num_local_experts (128), num_experts_per_tok
// (4) chosen by the biased router and weighted by a softmax over their logits; experts of
// intermediate_size with the clamped SwiGLU (swiglu_alpha 1.702, swiglu_limit 7). Without a rope
// dict, GptOssConfig's YaRN (factor 32, beta_fast 32, beta_slow 1, truncate false, original
// context 4096); rope_theta 150000 when absent.
Status family_parse_gpt_oss(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    int w;
    TRY(get_nullable_int(root, "sliding_window", path, 128, 0, 1, &w, e));
    TRY(gemma_layers(root, path, 2, w, cfg, e));
    TRY(parse_moe_common(root, path, "num_local_experts", 128, 4, cfg, e));
    if (cfg->num_experts < 1)
        return err_set(e, ST_EINVAL, "%s: field \"num_local_experts\" is 0, expected a positive integer", path);
    int v;
    TRY(get_int_field(root, "experts_per_token", path, 0, cfg->num_experts_per_tok, 1, &v, e));
    if (v != cfg->num_experts_per_tok)
        return err_set(e, ST_EINVAL, "%s: experts_per_token is %d but num_experts_per_tok is %d (transformers reads "
                       "num_experts_per_tok; make them agree)", path, v, cfg->num_experts_per_tok);
    TRY(get_int_field(root, "initial_context_length", path, 0, 1, 1, &v, e));  // inert, but an integer
    TRY(get_positive_double(root, "swiglu_alpha", path, 1.702, &cfg->swiglu_alpha, e));
    TRY(get_positive_double(root, "swiglu_limit", path, 7.0, &cfg->swiglu_limit, e));
    cfg->moe_intermediate_size = cfg->intermediate_size;
    cfg->norm_topk_prob = 1;
    cfg->router_bias = cfg->moe_fused = cfg->attn_sinks = 1;
    for (int l = 0; l < cfg->num_hidden_layers; l++) cfg->layer_moe[l] = 1;
    const char *name;
    const cJSON *rd = rope_dict(root, &name);
    if (!json_has(root, "rope_theta") && !(rd && cJSON_IsObject(rd) && json_has(rd, "rope_theta")))
        cfg->rope_theta = 150000.0;
    if (!rd || cJSON_IsNull(rd)) {
        RopeScaling *rs = &cfg->rope_scaling;
        rs->type = ROPE_YARN;
        rs->factor = 32.0, rs->beta_fast = 32.0, rs->beta_slow = 1.0, rs->truncate = 0;
        rs->original_max_position_embeddings = 4096;
        rs->attention_factor = -1.0, rs->mscale = rs->mscale_all_dim = 0;
    }
    return ST_OK;
}

// The rope dict: v5 "rope_parameters" (possibly keyed per layer type) or legacy "rope_scaling".
static const cJSON *rope_dict(const cJSON *root, const char **name) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    if (rp && cJSON_IsObject(rp)) {
        *name = "rope_parameters";
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        if (full && cJSON_IsObject(full) && !json_has(rp, "rope_type") && !json_has(rp, "type")) {
            *name = "rope_parameters.full_attention";
            return full;
        }
        return rp;
    }
    *name = "rope_scaling";
    return cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
}

// longrope's per-frequency factors: a list of rotary_dim / 2 positive numbers.
static Status read_factors(const cJSON *rd, const char *key, const char *what, int n, float *out, Err *e) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(rd, key);
    if (!a || !cJSON_IsArray(a))
        return err_set(e, ST_EINVAL, "%s: field \"%s\" must be a list of %d numbers (rotary dims / 2)", what, key, n);
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble > 0) || !isfinite(it->valuedouble))
            return err_set(e, ST_EINVAL, "%s: %s[%d] must be a positive number", what, key, k);
        if (k < n) out[k] = (float)it->valuedouble;
        k++;
    }
    if (k != n) return err_set(e, ST_EINVAL, "%s: field \"%s\" has %d entries, expected %d (rotary dims / 2)", what, key, k, n);
    return ST_OK;
}

// longrope (modeling_rope_utils.py _compute_longrope_parameters, transformers v5):
// original_max_position_embeddings from the top level (Phi3Config's attribute, 4096 when
// config.json has none), else the rope dict, else max_position_embeddings; factor from the rope
// dict, else max_position_embeddings / original (v4.4x-4.5x took that ratio even over an
// explicit factor when the top-level field existed); attention_factor from the rope dict, else
// 1 for factor <= 1, else sqrt(1 + ln(factor) / ln(original)). short_factor applies to a forward
// call whose longest sequence fits the original context, long_factor beyond it
// (config_rope_long).
static Status parse_longrope(const cJSON *root, const cJSON *rd, const char *path, const char *what, ModelConfig *cfg,
                             Err *e) {
    RopeScaling *rs = &cfg->rope_scaling;
    const FamilyDesc *fd = cfg->family;
    rs->type = ROPE_LONGROPE;
    TRY(read_factors(rd, "short_factor", what, cfg->rotary_dim / 2, rs->short_factor, e));
    TRY(read_factors(rd, "long_factor", what, cfg->rotary_dim / 2, rs->long_factor, e));
    TRY(get_double_field(rd, "attention_factor", what, -1.0, &rs->attention_factor, e));
    if (json_has(root, "original_max_position_embeddings")) {
        int omax;
        TRY(get_int_field(root, "original_max_position_embeddings", path, 1, 0, 1, &omax, e));
        rs->original_max_position_embeddings = omax;
    } else {
        double dflt = fd->original_max_default > 0 ? fd->original_max_default : cfg->max_position_embeddings;
        TRY(get_positive_double(rd, "original_max_position_embeddings", what, dflt,
                                &rs->original_max_position_embeddings, e));
    }
    TRY(get_double_field(rd, "factor", what, cfg->max_position_embeddings / rs->original_max_position_embeddings,
                         &rs->factor, e));
    if (rs->attention_factor < 0)
        rs->attention_factor =
            rs->factor <= 1 ? 1.0 : sqrt(1 + log(rs->factor) / log(rs->original_max_position_embeddings));
    return ST_OK;
}

// partial_rotary_factor f (the rope dict's, else the top level's): RoPE on the first
// int(HD * f) dims, as transformers' rope init functions size `dim`. Only families that slice
// q and k for it (FamilyDesc.partial_rotary) accept f != 1.
static Status parse_partial_rotary(const cJSON *root, const cJSON *rd, const char *path, const char *what,
                                   ModelConfig *cfg, Err *e) {
    double prf = 1.0;
    const char *where = path;
    if (rd && cJSON_IsObject(rd) && json_has(rd, "partial_rotary_factor")) {
        TRY(get_double_field(rd, "partial_rotary_factor", what, 1.0, &prf, e));
        where = what;
    } else if (cfg->family->partial_rotary) {
        TRY(get_double_field(root, "partial_rotary_factor", path, 1.0, &prf, e));
    }
    cfg->rotary_dim = cfg->head_dim;
    if (prf == 1.0) return ST_OK;
    if (!cfg->family->partial_rotary)
        return err_set(e, ST_EUNSUPPORTED, "%s: partial_rotary_factor %g is not supported for %s (only 1.0)", where, prf,
                       cfg->model_type);
    int rd_dims = (int)((double)cfg->head_dim * prf);
    if (!(prf > 0 && prf <= 1) || rd_dims < 2 || rd_dims % 2)
        return err_set(e, ST_EINVAL,
                       "%s: partial_rotary_factor %g gives %d rotary dims of head_dim %d, expected an even number >= 2 "
                       "(a factor in (0, 1])",
                       where, prf, rd_dims, cfg->head_dim);
    cfg->rotary_dim = rd_dims;
    return ST_OK;
}

static Status parse_rope(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    RopeScaling *rs = &cfg->rope_scaling;
    memset(rs, 0, sizeof *rs);
    rs->type = ROPE_DEFAULT;
    rs->factor = 1.0;
    rs->attention_factor = -1.0;
    rs->beta_fast = 32.0;
    rs->beta_slow = 1.0;
    rs->truncate = 1;
    rs->original_max_position_embeddings = cfg->max_position_embeddings;

    const char *name;
    const cJSON *rd = rope_dict(root, &name);
    char what[1200];
    snprintf(what, sizeof what, "%s: %s", path, name);
    TRY(parse_partial_rotary(root, rd, path, what, cfg, e));
    if (json_has(root, "rope_theta")) {
        TRY(get_positive_double(root, "rope_theta", path, DEFAULT_ROPE_THETA, &cfg->rope_theta, e));
    } else {
        cfg->rope_theta = DEFAULT_ROPE_THETA;
    }
    if (!rd || cJSON_IsNull(rd)) return ST_OK;
    if (!cJSON_IsObject(rd)) return err_set(e, ST_EINVAL, "%s: field \"%s\" must be an object or null", path, name);
    if (!json_has(root, "rope_theta") && json_has(rd, "rope_theta"))
        TRY(get_positive_double(rd, "rope_theta", what, DEFAULT_ROPE_THETA, &cfg->rope_theta, e));

    const char *type = NULL;
    const char *type_key = json_has(rd, "rope_type") ? "rope_type" : "type";
    Status st = json_get_string(rd, type_key, what, 0, &type, e);
    if (st == ST_ENOTFOUND) {
        if (json_has(rd, "factor"))
            return err_set(e, ST_EINVAL, "%s: missing field \"rope_type\" (default, linear, llama3 or yarn)", what);
        type = "default";
    } else if (st != ST_OK) {
        return st;
    }
    if (cfg->family->rope_longrope_aliases && (!strcmp(type, "su") || !strcmp(type, "yarn"))) type = "longrope";
    if (!strcmp(type, "default")) {
        rs->type = ROPE_DEFAULT;
        return ST_OK;
    }
    if (!strcmp(type, "linear")) {
        rs->type = ROPE_LINEAR;
        TRY(json_get_double(rd, "factor", what, 1, &rs->factor, e));
    } else if (!strcmp(type, "llama3")) {
        rs->type = ROPE_LLAMA3;
        TRY(json_get_double(rd, "factor", what, 1, &rs->factor, e));
        TRY(json_get_double(rd, "low_freq_factor", what, 1, &rs->low_freq_factor, e));
        TRY(json_get_double(rd, "high_freq_factor", what, 1, &rs->high_freq_factor, e));
        TRY(json_get_double(rd, "original_max_position_embeddings", what, 1, &rs->original_max_position_embeddings, e));
        if (!(rs->low_freq_factor > 0) || !(rs->high_freq_factor > rs->low_freq_factor))
            return err_set(e, ST_EINVAL,
                           "%s: low_freq_factor %g and high_freq_factor %g must satisfy 0 < low < high", what,
                           rs->low_freq_factor, rs->high_freq_factor);
    } else if (!strcmp(type, "longrope")) {
        TRY(parse_longrope(root, rd, path, what, cfg, e));
    } else if (!strcmp(type, "yarn")) {
        rs->type = ROPE_YARN;
        TRY(get_double_field(rd, "original_max_position_embeddings", what, cfg->max_position_embeddings,
                             &rs->original_max_position_embeddings, e));
        // transformers v5: an absent factor is the ratio of the context lengths. (Some v4.5x
        // releases overrode an explicit factor with that ratio; the explicit factor wins here.)
        if (json_has(rd, "factor")) {
            TRY(json_get_double(rd, "factor", what, 1, &rs->factor, e));
        } else if (json_has(rd, "original_max_position_embeddings")) {
            rs->factor = cfg->max_position_embeddings / rs->original_max_position_embeddings;
        } else {
            TRY(json_get_double(rd, "factor", what, 1, &rs->factor, e));
        }
        TRY(get_double_field(rd, "attention_factor", what, -1.0, &rs->attention_factor, e));
        // Python's `x or default`: 0 also means the default.
        TRY(get_double_field(rd, "beta_fast", what, 32.0, &rs->beta_fast, e));
        TRY(get_double_field(rd, "beta_slow", what, 1.0, &rs->beta_slow, e));
        if (rs->beta_fast == 0) rs->beta_fast = 32.0;
        if (rs->beta_slow == 0) rs->beta_slow = 1.0;
        TRY(get_double_field(rd, "mscale", what, 0.0, &rs->mscale, e));
        TRY(get_double_field(rd, "mscale_all_dim", what, 0.0, &rs->mscale_all_dim, e));
        TRY(get_bool_field(rd, "truncate", what, 1, &rs->truncate, e));
        if (!(rs->original_max_position_embeddings > 0) || !(rs->beta_fast > 0) || !(rs->beta_slow > 0))
            return err_set(e, ST_EINVAL,
                           "%s: original_max_position_embeddings, beta_fast and beta_slow must be positive", what);
    } else {
        return err_set(e, ST_EUNSUPPORTED, "%s: rope type \"%s\" is not supported (supported: default, linear, llama3, yarn, longrope)",
                       what, type);
    }
    if (!(rs->factor > 0) || !isfinite(rs->factor))
        return err_set(e, ST_EINVAL, "%s: field \"factor\" is %g, expected a positive number", what, rs->factor);
    return ST_OK;
}

// architectures[0] names a *ForSequenceClassification class: the model has a score head of
// num_labels outputs, which transformers takes from id2label when the config has one, else from
// "num_labels", else 2 (PretrainedConfig's default).
static Status parse_architecture(const cJSON *root, const char *path, const FamilyDesc *fd, ModelConfig *cfg,
                                 Err *e) {
    cfg->num_labels = 0;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (!arch || cJSON_IsNull(arch)) return ST_OK;
    if (!cJSON_IsArray(arch)) return err_set(e, ST_EINVAL, "%s: field \"architectures\" must be a list of strings", path);
    const cJSON *a0 = cJSON_GetArrayItem(arch, 0);
    if (!a0) return ST_OK;
    if (!cJSON_IsString(a0)) return err_set(e, ST_EINVAL, "%s: field \"architectures\" must be a list of strings", path);
    const char *name = a0->valuestring, *suffix = "ForSequenceClassification";
    size_t n = strlen(name), k = strlen(suffix);
    if (n < k || strcmp(name + n - k, suffix)) return ST_OK;
    if (!fd->classifier)
        return err_set(e, ST_EUNSUPPORTED, "%s: architectures[0] is \"%s\": still has no sequence classifier for %s",
                       path, name, fd->model_type);
    if (strcmp(name, fd->classifier))
        return err_set(e, ST_EUNSUPPORTED, "%s: architectures[0] is \"%s\": a %s model's classifier is %s", path, name,
                       fd->model_type, fd->classifier);
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    if (id2label && !cJSON_IsNull(id2label)) {
        if (!cJSON_IsObject(id2label))
            return err_set(e, ST_EINVAL, "%s: field \"id2label\" must be an object {\"0\": \"LABEL_0\", ...}", path);
        cfg->num_labels = cJSON_GetArraySize(id2label);
        if (cfg->num_labels < 1) return err_set(e, ST_EINVAL, "%s: field \"id2label\" is empty", path);
        int given;
        TRY(get_int_field(root, "num_labels", path, 0, cfg->num_labels, 1, &given, e));
        if (given != cfg->num_labels)
            return err_set(e, ST_EINVAL, "%s: num_labels is %d but id2label has %d labels", path, given, cfg->num_labels);
        return ST_OK;
    }
    return get_int_field(root, "num_labels", path, 0, 2, 1, &cfg->num_labels, e);
}

static Status parse_fields(const cJSON *root, const char *path, ModelConfig *cfg, Err *e) {
    if (!cJSON_IsObject(root)) return err_set(e, ST_EINVAL, "%s: expected a JSON object", path);
    const FamilyDesc *fd = NULL;
    TRY(parse_model_type(root, path, &fd, e));
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", fd->model_type);
    cfg->family = fd;
    TRY(check_fields(root, path, fd, e));

    if (json_has(root, "quantization_config")) {
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
        const cJSON *qm = cJSON_IsObject(q) ? cJSON_GetObjectItemCaseSensitive(q, "quant_method") : NULL;
        if (cJSON_IsString(qm) && !strcmp(qm->valuestring, "mxfp4"))
            return err_set(e, ST_EUNSUPPORTED,
                           "%s: quantization_config.quant_method \"mxfp4\": MXFP4 expert weights (*_blocks, *_scales) "
                           "are not supported; use a bf16 checkpoint (transformers dequantizes one with "
                           "Mxfp4Config(dequantize=True) and save_pretrained)", path);
        return err_set(e, ST_EUNSUPPORTED, "%s: quantized checkpoints (quantization_config) are not supported", path);
    }
    const char *act;
    Status st = json_get_string(root, "hidden_act", path, 0, &act, e);
    if (st != ST_OK && st != ST_ENOTFOUND) return st;
    cfg->act = fd->act;
    if (st == ST_OK && !strcmp(act, "silu")) cfg->act = ACT_SILU;
    else if (st == ST_OK && (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_tanh"))) cfg->act = ACT_GELU_TANH;
    else if (st == ST_OK)
        return err_set(e, ST_EUNSUPPORTED, "%s: hidden_act \"%s\" is not supported (silu or gelu_pytorch_tanh)", path,
                       act);

    TRY(get_int_field(root, "vocab_size", path, 1, 0, 1, &cfg->vocab_size, e));
    TRY(get_int_field(root, "hidden_size", path, 1, 0, 1, &cfg->hidden_size, e));
    TRY(get_int_field(root, "intermediate_size", path, 1, 0, 1, &cfg->intermediate_size, e));
    TRY(get_int_field(root, "num_hidden_layers", path, 1, 0, 1, &cfg->num_hidden_layers, e));
    TRY(get_int_field(root, "num_attention_heads", path, 1, 0, 1, &cfg->num_attention_heads, e));
    TRY(check_max(path, "vocab_size", cfg->vocab_size, CONFIG_MAX_VOCAB, "the sampler's fixed-point masses", e));
    TRY(check_max(path, "hidden_size", cfg->hidden_size, CONFIG_MAX_HIDDEN, NULL, e));
    TRY(check_max(path, "intermediate_size", cfg->intermediate_size, CONFIG_MAX_INTERMEDIATE, NULL, e));
    TRY(check_max(path, "num_hidden_layers", cfg->num_hidden_layers, CONFIG_MAX_LAYERS, NULL, e));
    TRY(check_max(path, "num_attention_heads", cfg->num_attention_heads, CONFIG_MAX_HEADS, NULL, e));
    TRY(get_int_field(root, "num_key_value_heads", path, 0, cfg->num_attention_heads, 1, &cfg->num_key_value_heads, e));
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return err_set(e, ST_EINVAL,
                       "%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", path,
                       cfg->num_attention_heads, cfg->num_key_value_heads);
    if (json_has(root, "head_dim")) {
        TRY(get_int_field(root, "head_dim", path, 1, 0, 1, &cfg->head_dim, e));
    } else if (fd->head_dim) {
        cfg->head_dim = fd->head_dim;
    } else {
        if (cfg->hidden_size % cfg->num_attention_heads != 0)
            return err_set(e, ST_EINVAL,
                           "%s: no head_dim, and hidden_size (%d) is not a multiple of num_attention_heads (%d)", path,
                           cfg->hidden_size, cfg->num_attention_heads);
        cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
    }
    if (cfg->head_dim % 2)
        return err_set(e, ST_EINVAL, "%s: head_dim is %d, expected an even number (RoPE rotates pairs)", path,
                       cfg->head_dim);
    TRY(check_max(path, "head_dim", cfg->head_dim, CONFIG_MAX_HEAD_DIM, "the attention kernels", e));

    TRY(get_positive_double(root, "rms_norm_eps", path, fd->rms_norm_eps, &cfg->rms_norm_eps, e));
    TRY(get_int_field(root, "max_position_embeddings", path, 0, fd->max_position_embeddings, 1,
                      &cfg->max_position_embeddings, e));
    TRY(get_bool_field(root, "tie_word_embeddings", path, fd->tie_default, &cfg->tie_word_embeddings, e));
    TRY(get_positive_double(root, "initializer_range", path, DEFAULT_INITIALIZER_RANGE, &cfg->initializer_range, e));

    int attention_bias = 0, mlp_bias = 0;
    if (reads_attention_bias(fd))
        TRY(get_bool_field(root, "attention_bias", path, fd->attention_bias_default, &attention_bias, e));
    if (fd->mlp_bias == BIAS_MLP_KEY) TRY(get_bool_field(root, "mlp_bias", path, 0, &mlp_bias, e));
    BiasRule rules[3] = {fd->qkv_bias, fd->o_bias, fd->mlp_bias};
    int *bias[3] = {&cfg->qkv_bias, &cfg->o_bias, &cfg->mlp_bias};
    for (int i = 0; i < 3; i++)
        *bias[i] = rules[i] == BIAS_ALWAYS       ? 1
                   : rules[i] == BIAS_ATTN_KEY ? attention_bias
                   : rules[i] == BIAS_MLP_KEY  ? mlp_bias
                                               : 0;
    cfg->qk_norm = fd->qk_norm;
    cfg->norms = fd->norms;
    cfg->norm_plus_one = fd->norm_plus_one;
    cfg->embed_scale = fd->embed_scale_sqrt ? sqrtf((float)cfg->hidden_size) : 1.0f;
    cfg->fused_qkv = fd->fused_qkv;
    cfg->fused_gate_up = fd->fused_gate_up;
    TRY(check_zero_dropout(root, path, "attention_dropout", e));

    TRY(get_int_field(root, "bos_token_id", path, 0, fd->bos_token_id, 0, &cfg->bos_token_id, e));
    TRY(get_int_field(root, "pad_token_id", path, 0, -1, 0, &cfg->pad_token_id, e));
    TRY(parse_eos(root, path, fd->eos_token_id, cfg, e));
    TRY(parse_dtype(root, path, cfg, e));
    if (!fd->reads_layer_types) TRY(check_layer_types(root, path, cfg, e));
    TRY(parse_rope(root, path, cfg, e));
    if (fd->parse) TRY(fd->parse(root, path, cfg, e));
    TRY(parse_architecture(root, path, fd, cfg, e));
    TRY(check_max(path, "num_labels", cfg->num_labels, CONFIG_MAX_VOCAB, "as vocab_size", e));
    return ST_OK;
}

int config_rope_long(const ModelConfig *cfg, int len) {
    const RopeScaling *rs = &cfg->rope_scaling;
    return rs->type == ROPE_LONGROPE && len > rs->original_max_position_embeddings;
}

Status config_parse(const char *text, size_t len, const char *path, ModelConfig *cfg, Err *e) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root;
    TRY(json_parse_text(text, len, path, &root, e));
    Status st = parse_fields(root, path, cfg, e);
    if (st != ST_OK) {
        cJSON_Delete(root);
        memset(cfg, 0, sizeof *cfg);
        return st;
    }
    cfg->raw = root;
    return ST_OK;
}

Status config_load(const char *path, ModelConfig *cfg, Err *e) {
    char *text;
    size_t len;
    memset(cfg, 0, sizeof *cfg);
    TRY(file_read_all(path, &text, &len, e));
    Status st = config_parse(text, len, path, cfg, e);
    free(text);
    return st;
}

void config_free(ModelConfig *cfg) {
    if (cfg->raw) cJSON_Delete(cfg->raw);
    memset(cfg, 0, sizeof *cfg);
}

static void add_missing(cJSON *o, const char *key, cJSON *v) {
    if (cJSON_GetObjectItemCaseSensitive(o, key)) {
        cJSON_Delete(v);
        return;
    }
    cJSON_AddItemToObject(o, key, v);
}

const char *config_architecture(const ModelConfig *cfg) {
    const FamilyDesc *fd = cfg->family;
    return cfg->num_labels > 0 && fd->classifier ? fd->classifier : fd->architecture;
}

static void set_item(cJSON *o, const char *key, cJSON *v) {
    if (cJSON_GetObjectItemCaseSensitive(o, key)) cJSON_ReplaceItemInObjectCaseSensitive(o, key, v);
    else cJSON_AddItemToObject(o, key, v);
}

void config_set_classifier(ModelConfig *cfg, int num_labels, int pad_token_id) {
    CHECK(cfg->raw && num_labels > 0);
    cfg->num_labels = num_labels;
    cJSON *arch = cJSON_CreateArray(), *id2label = cJSON_CreateObject(), *label2id = cJSON_CreateObject();
    CHECK_MSG(cfg->family->classifier, "%s has no sequence classifier", cfg->model_type);
    cJSON_AddItemToArray(arch, cJSON_CreateString(cfg->family->classifier));
    for (int i = 0; i < num_labels; i++) {
        char id[16], label[32];
        snprintf(id, sizeof id, "%d", i);
        snprintf(label, sizeof label, "LABEL_%d", i);
        cJSON_AddItemToObject(id2label, id, cJSON_CreateString(label));
        cJSON_AddItemToObject(label2id, label, cJSON_CreateNumber(i));
    }
    set_item(cfg->raw, "architectures", arch);
    set_item(cfg->raw, "num_labels", cJSON_CreateNumber(num_labels));
    set_item(cfg->raw, "id2label", id2label);
    set_item(cfg->raw, "label2id", label2id);
    if (pad_token_id >= 0) {
        cfg->pad_token_id = pad_token_id;
        set_item(cfg->raw, "pad_token_id", cJSON_CreateNumber(pad_token_id));
    }
}

char *config_to_json(const ModelConfig *cfg) {
    CHECK(cfg->raw);
    cJSON *o = cJSON_Duplicate(cfg->raw, 1);
    CHECK(o);
    const FamilyDesc *fd = cfg->family;
    cJSON *arch = cJSON_CreateArray();
    cJSON_AddItemToArray(arch, cJSON_CreateString(config_architecture(cfg)));
    add_missing(o, "architectures", arch);
    add_missing(o, "head_dim", cJSON_CreateNumber(cfg->head_dim));
    add_missing(o, "num_key_value_heads", cJSON_CreateNumber(cfg->num_key_value_heads));
    add_missing(o, "hidden_act", cJSON_CreateString("silu"));
    add_missing(o, "max_position_embeddings", cJSON_CreateNumber(cfg->max_position_embeddings));
    add_missing(o, "rms_norm_eps", cJSON_CreateNumber(cfg->rms_norm_eps));
    if (!json_has(o, "rope_parameters")) add_missing(o, "rope_theta", cJSON_CreateNumber(cfg->rope_theta));
    add_missing(o, "tie_word_embeddings", cJSON_CreateBool(cfg->tie_word_embeddings));
    if (reads_attention_bias(fd)) add_missing(o, "attention_bias", cJSON_CreateBool(cfg->o_bias));
    if (fd->mlp_bias == BIAS_MLP_KEY) add_missing(o, "mlp_bias", cJSON_CreateBool(cfg->mlp_bias));
    add_missing(o, "initializer_range", cJSON_CreateNumber(cfg->initializer_range));
    if (!json_has(o, "dtype")) add_missing(o, "torch_dtype", cJSON_CreateString(dtype_torch_name(cfg->torch_dtype)));
    if (cfg->bos_token_id >= 0) add_missing(o, "bos_token_id", cJSON_CreateNumber(cfg->bos_token_id));
    if (cfg->n_eos_token_ids == 1) add_missing(o, "eos_token_id", cJSON_CreateNumber(cfg->eos_token_ids[0]));
    char *s = cJSON_Print(o);
    CHECK(s);
    cJSON_Delete(o);
    char *out = xstrdup(s);
    cJSON_free(s);
    return out;
}

// inv_freq as transformers computes it in fp32 (modeling_rope_utils.py). Each step rounds to
// float where torch does; `a / tensor` in torch is `reciprocal(tensor) * a`.
void config_rope_local_inv_freq(const ModelConfig *cfg, float *inv_freq) {
    const int dim = cfg->rotary_dim, half = dim / 2;
    const float base = (float)cfg->rope_local_theta;
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / (float)pow((double)base, (double)((float)(2 * i) / (float)dim));
}

// longrope: 1 / (ext[i] * base^(2i/d)), ext the short or the long factors.
static void longrope_inv_freq(const ModelConfig *cfg, const float *ext, float *inv_freq) {
    const int dim = cfg->rotary_dim, half = dim / 2;
    const float base = (float)cfg->rope_theta;
    for (int i = 0; i < half; i++) {
        float ex = (float)(2 * i) / (float)dim;
        float pos_freq = (float)pow((double)base, (double)ex);
        inv_freq[i] = 1.0f / (ext[i] * pos_freq);
    }
}

void config_rope_long_inv_freq(const ModelConfig *cfg, float *inv_freq) {
    CHECK(cfg->rope_scaling.type == ROPE_LONGROPE);
    longrope_inv_freq(cfg, cfg->rope_scaling.long_factor, inv_freq);
}

void config_rope_inv_freq(const ModelConfig *cfg, float *inv_freq, float *mscale) {
    const RopeScaling *rs = &cfg->rope_scaling;
    const int dim = cfg->rotary_dim, half = dim / 2;
    const float base = (float)cfg->rope_theta;
    *mscale = 1.0f;
    for (int i = 0; i < half; i++) {
        float ex = (float)(2 * i) / (float)dim;
        float pos_freq = (float)pow((double)base, (double)ex);
        inv_freq[i] = 1.0f / pos_freq;
    }
    if (rs->type == ROPE_DEFAULT) return;
    if (rs->type == ROPE_LONGROPE) {  // short factors: calls within the original context
        longrope_inv_freq(cfg, rs->short_factor, inv_freq);
        *mscale = (float)rs->attention_factor;
        return;
    }
    if (rs->type == ROPE_LINEAR) {
        for (int i = 0; i < half; i++) inv_freq[i] = inv_freq[i] / (float)rs->factor;
        return;
    }
    if (rs->type == ROPE_LLAMA3) {
        const float factor = (float)rs->factor, lff = (float)rs->low_freq_factor, hff = (float)rs->high_freq_factor;
        const double old_ctx = rs->original_max_position_embeddings;
        const float low_wl = (float)(old_ctx / rs->low_freq_factor);
        const float high_wl = (float)(old_ctx / rs->high_freq_factor);
        const float two_pi = (float)(2.0 * M_PI);
        for (int i = 0; i < half; i++) {
            float inv = inv_freq[i];
            float wl = (1.0f / inv) * two_pi;
            float v = wl > low_wl ? inv / factor : inv;
            float smooth = ((1.0f / wl) * (float)old_ctx - lff) / (hff - lff);
            float smoothed = (1.0f - smooth) * v / factor + smooth * v;
            int medium = !(wl < high_wl) && !(wl > low_wl);
            inv_freq[i] = medium ? smoothed : v;
        }
        return;
    }
    // yarn
    const double factor = rs->factor, omax = rs->original_max_position_embeddings;
    double attn = rs->attention_factor;
    if (attn < 0) {
        double m = factor <= 1 ? 1.0 : 0.1 * log(factor) + 1.0;
        if (rs->mscale != 0 && rs->mscale_all_dim != 0) {
            double a = factor <= 1 ? 1.0 : 0.1 * rs->mscale * log(factor) + 1.0;
            double b = factor <= 1 ? 1.0 : 0.1 * rs->mscale_all_dim * log(factor) + 1.0;
            m = a / b;
        }
        attn = m;
    }
    *mscale = (float)attn;
    double lnbase = log(cfg->rope_theta);
    double low = dim * log(omax / (rs->beta_fast * 2 * M_PI)) / (2 * lnbase);
    double high = dim * log(omax / (rs->beta_slow * 2 * M_PI)) / (2 * lnbase);
    if (rs->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = MAX(low, 0.0);
    high = MIN(high, (double)(dim - 1));
    if (low == high) high += 0.001;
    const float flow = (float)low, fspan = (float)(high - low), ffactor = (float)factor;
    for (int i = 0; i < half; i++) {
        float ex = (float)(2 * i) / (float)dim;
        float pos_freq = (float)pow((double)base, (double)ex);
        float extra = 1.0f / pos_freq;
        float inter = 1.0f / (ffactor * pos_freq);
        float ramp = ((float)i - flow) / fspan;
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float ef = 1.0f - ramp;
        inv_freq[i] = inter * (1.0f - ef) + extra * ef;
    }
}
