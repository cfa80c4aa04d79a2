// tensors.c: building the tensor table from a config.
#include "tensors.h"

#include "../core/alloc.h"

#include <string.h>

static const char *layer_suffix[TK_COUNT] = {
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
};

TensorInfo *tensors_append(TensorTable *tt, const char *name, TensorKind kind, int layer, int64_t d0, int64_t d1,
                           DType matrix_dtype) {
    TensorInfo *t = &tt->t[tt->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer;
    // every dimension comes from a config that config_parse bounded (CONFIG_MAX_*): nothing here wraps
    CHECK_MSG(d0 > 0 && d1 >= 0, "%s: shape [%lld, %lld]", name, (long long)d0, (long long)d1);
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    t->numel = size_mul((size_t)d0, (size_t)(d1 > 0 ? d1 : 1));
    t->is_matrix = t->ndim == 2;
    t->decay = t->is_matrix;
    t->dtype = t->is_matrix ? matrix_dtype : DT_F32;
    tt->param_bytes = size_mul(size_add(tt->param_bytes, 63) / 64, 64);
    t->offset = tt->param_bytes;
    tt->param_bytes = size_add(tt->param_bytes, dtype_bytes(t->dtype, t->numel));
    t->goffset = tt->n_params;
    tt->n_params = size_add(tt->n_params, t->numel);
    CHECK_MSG(tt->param_bytes != SIZE_MAX && tt->n_params != SIZE_MAX, "%s: the parameter buffer overflows size_t", name);
    tt->n++;
    return t;
}

static void add(TensorTable *tt, const char *name, TensorKind kind, int layer, int64_t d0, int64_t d1,
                DType matrix_dtype) {
    int row = layer < 0 ? tt->n_layers : layer;
    tt->index[(size_t)row * TK_COUNT + kind] = tt->n;
    tensors_append(tt, name, kind, layer, d0, d1, matrix_dtype);
}

void tensors_build(TensorTable *tt, const ModelConfig *cfg, DType matrix_dtype) {
    memset(tt, 0, sizeof *tt);
    int L = cfg->num_hidden_layers;
    int64_t C = cfg->hidden_size, V = cfg->vocab_size, FF = cfg->intermediate_size, HD = cfg->head_dim;
    int64_t QD = (int64_t)cfg->num_attention_heads * HD, KD = (int64_t)cfg->num_key_value_heads * HD;
    tt->n_layers = L;
    tt->t = xcalloc((size_t)(3 + L * TK_COUNT), sizeof(TensorInfo));
    tt->index = xmalloc((size_t)(L + 1) * TK_COUNT * sizeof(int));
    for (int i = 0; i < (L + 1) * TK_COUNT; i++) tt->index[i] = -1;
    add(tt, "model.embed_tokens.weight", TK_EMBED, -1, V, C, matrix_dtype);
    for (int l = 0; l < L; l++) {
        struct { TensorKind k; int64_t d0, d1; int present; } spec[] = {
            {TK_LN1, C, 0, 1},
            {TK_WQ, QD, C, 1}, {TK_BQ, QD, 0, cfg->qkv_bias},
            {TK_WK, KD, C, 1}, {TK_BK, KD, 0, cfg->qkv_bias},
            {TK_WV, KD, C, 1}, {TK_BV, KD, 0, cfg->qkv_bias},
            {TK_WO, C, QD, 1}, {TK_BO, C, 0, cfg->o_bias},
            {TK_QN, HD, 0, cfg->qk_norm}, {TK_KN, HD, 0, cfg->qk_norm},
            {TK_LN2, C, 0, 1},
            {TK_WG, FF, C, 1}, {TK_BG, FF, 0, cfg->mlp_bias},
            {TK_WU, FF, C, 1}, {TK_BU, FF, 0, cfg->mlp_bias},
            {TK_WD, C, FF, 1}, {TK_BD, C, 0, cfg->mlp_bias},
        };
        for (size_t i = 0; i < ARRAY_LEN(spec); i++) {
            if (!spec[i].present) continue;
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, layer_suffix[spec[i].k]);
            add(tt, name, spec[i].k, l, spec[i].d0, spec[i].d1, matrix_dtype);
        }
    }
    add(tt, "model.norm.weight", TK_NORM, -1, C, 0, matrix_dtype);
    if (cfg->num_labels > 0) add(tt, "score.weight", TK_SCORE, -1, cfg->num_labels, C, matrix_dtype);
    else if (!cfg->tie_word_embeddings) add(tt, "lm_head.weight", TK_LM_HEAD, -1, V, C, matrix_dtype);
    tt->param_bytes = size_mul(size_add(tt->param_bytes, 63) / 64, 64);
}

void tensors_free(TensorTable *tt) {
    free(tt->t);
    free(tt->index);
    memset(tt, 0, sizeof *tt);
}

const TensorInfo *tensors_get(const TensorTable *tt, TensorKind kind, int layer) {
    int row = kind < TK_FIRST_LAYER_KIND ? tt->n_layers : layer;
    if (row < 0 || row > tt->n_layers) return NULL;
    int i = tt->index[(size_t)row * TK_COUNT + kind];
    return i < 0 ? NULL : &tt->t[i];
}

const TensorInfo *tensors_find(const TensorTable *tt, const char *name) {
    for (int i = 0; i < tt->n; i++)
        if (!strcmp(tt->t[i].name, name)) return &tt->t[i];
    return NULL;
}
