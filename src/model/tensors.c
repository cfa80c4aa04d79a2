// tensors.c: building the tensor table from a config.
#include "tensors.h"

#include "../core/alloc.h"
#include "family.h"

#include <string.h>

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
    if (!tt->packing) tt->param_bytes = size_mul(size_add(tt->param_bytes, 63) / 64, 64);
    t->packed = tt->packing;
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

// GPT-OSS's expert tensors as the checkpoint holds them (tensors.h); sinks decay as transformers'
// Trainer decays every parameter whose name says neither bias nor norm.
static void set_hf_layout(TensorInfo *t, int64_t E, int64_t C, int64_t FFE) {
    int64_t s[3] = {E, 0, 0};
    switch (t->kind) {
    case TK_XGU: s[1] = C, s[2] = 2 * FFE, t->hf_xpose = 1; break;
    case TK_XGU_B: s[1] = 2 * FFE; break;
    case TK_XD: s[1] = FFE, s[2] = C, t->hf_xpose = 1; break;
    case TK_XD_B: s[1] = C; break;
    case TK_SINKS: t->decay = 1; return;
    default: return;
    }
    t->hf_ndim = s[2] ? 3 : 2;
    memcpy(t->hf_shape, s, sizeof s);
}

void tensors_hf_shape(const TensorInfo *t, int *ndim, int64_t shape[3]) {
    *ndim = t->hf_ndim ? t->hf_ndim : t->ndim;
    for (int d = 0; d < 3; d++) shape[d] = t->hf_ndim ? t->hf_shape[d] : d < 2 ? t->shape[d] : 0;
}

size_t tensors_hf_index(const TensorInfo *t, size_t j) {
    if (!t->hf_xpose) return j;
    size_t A = (size_t)t->hf_shape[1], B = (size_t)t->hf_shape[2], blk = A * B;
    size_t e = j / blk, r = j % blk, a = r / B, b = r % B;
    return e * blk + b * A + a;
}

void tensors_to_hf(const TensorInfo *t, float *hf, const float *own) {
    for (size_t j = 0; j < t->numel; j++) hf[j] = own[tensors_hf_index(t, j)];
}

void tensors_from_hf(const TensorInfo *t, float *own, const float *hf) {
    for (size_t j = 0; j < t->numel; j++) own[tensors_hf_index(t, j)] = hf[j];
}

void tensors_build(TensorTable *tt, const ModelConfig *cfg, DType matrix_dtype) {
    memset(tt, 0, sizeof *tt);
    int L = cfg->num_hidden_layers;
    int64_t C = cfg->hidden_size, V = config_vocab_rows(cfg), FF = cfg->intermediate_size, HD = cfg->head_dim;
    int64_t QD = (int64_t)cfg->num_attention_heads * HD, KD = (int64_t)cfg->num_key_value_heads * HD;
    tt->n_layers = L;
    tt->t = xcalloc(size_add(3, size_mul((size_t)L, (size_t)TK_COUNT + 3 * (size_t)cfg->num_experts)), sizeof(TensorInfo));
    tt->index = xmalloc((size_t)(L + 1) * TK_COUNT * sizeof(int));
    for (int i = 0; i < (L + 1) * TK_COUNT; i++) tt->index[i] = -1;
    add(tt, "model.embed_tokens.weight", TK_EMBED, -1, V, C, matrix_dtype);
    const FamilyDesc *fd = cfg->family;
    unsigned nm = cfg->norms;
    int64_t qn = cfg->qk_norm == QKNORM_PROJ ? QD : HD, kn = cfg->qk_norm == QKNORM_PROJ ? KD : HD;
    int sep_qkv = !cfg->fused_qkv, sep_gu = !cfg->fused_gate_up;
    // E: the experts this model holds (expert parallel: a rank's run of them, tensors.h)
    int64_t FFE = cfg->moe_intermediate_size, E = config_local_experts(cfg);
    int fused = cfg->moe_fused;
    for (int l = 0; l < L; l++) {
        int moe = cfg->layer_moe[l];
        struct { TensorKind k; int64_t d0, d1; int present; } spec[] = {
            {TK_LN1, C, 0, (nm & NORM_PRE_ATTN) != 0},
            {TK_WQKV, QD + 2 * KD, C, !sep_qkv},
            {TK_WQ, QD, C, sep_qkv}, {TK_BQ, QD, 0, cfg->qkv_bias},
            {TK_WK, KD, C, sep_qkv}, {TK_BK, KD, 0, cfg->qkv_bias},
            {TK_WV, KD, C, sep_qkv}, {TK_BV, KD, 0, cfg->qkv_bias},
            {TK_WO, C, QD, 1}, {TK_BO, C, 0, cfg->o_bias},
            {TK_QN, qn, 0, cfg->qk_norm != QKNORM_NONE}, {TK_KN, kn, 0, cfg->qk_norm != QKNORM_NONE},
            {TK_SINKS, cfg->num_attention_heads, 0, cfg->attn_sinks},
            {TK_LNA, C, 0, (nm & NORM_POST_ATTN) != 0},
            {TK_LN2, C, 0, (nm & NORM_PRE_MLP) != 0},
            {TK_WGU, 2 * FF, C, !sep_gu && !moe},
            {TK_WG, FF, C, sep_gu && !moe}, {TK_BG, FF, 0, cfg->mlp_bias && !moe},
            {TK_WU, FF, C, sep_gu && !moe}, {TK_BU, FF, 0, cfg->mlp_bias && !moe},
            {TK_WD, C, FF, !moe}, {TK_BD, C, 0, cfg->mlp_bias && !moe},
            {TK_ROUTER, cfg->num_experts, C, moe}, {TK_ROUTER_B, cfg->num_experts, 0, moe && cfg->router_bias},
            {TK_EXP_G, FFE, C, moe && !fused}, {TK_EXP_U, FFE, C, moe && !fused}, {TK_EXP_D, C, FFE, moe && !fused},
            {TK_XGU, E * 2 * FFE, C, moe && fused}, {TK_XGU_B, E * 2 * FFE, 0, moe && fused},
            {TK_XD, E * C, FFE, moe && fused}, {TK_XD_B, E * C, 0, moe && fused},
            {TK_LNF, C, 0, (nm & NORM_POST_MLP) != 0},
        };
        for (size_t i = 0; i < ARRAY_LEN(spec); i++) {
            if (!spec[i].present) continue;
            char name[96];
            TensorKind k = spec[i].k;
            if (k == TK_EXP_G || k == TK_EXP_U || k == TK_EXP_D) {  // a packed run of E experts (expert parallel:
                int x0 = cfg->ep_part > 0 ? cfg->ep_lo : 0;              // the model's own, by their global names)
                for (int x = x0; x < x0 + config_local_experts(cfg); x++) {
                    char suffix[80];
                    snprintf(suffix, sizeof suffix, family_tensor_suffix(fd, k), x);
                    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
                    if (x == x0) add(tt, name, k, l, spec[i].d0, spec[i].d1, matrix_dtype);
                    else tensors_append(tt, name, k, l, spec[i].d0, spec[i].d1, matrix_dtype);
                    tt->packing = 1;
                }
                tt->packing = 0;
                continue;
            }
            snprintf(name, sizeof name, "model.layers.%d.%s", l, family_tensor_suffix(fd, k));
            add(tt, name, k, l, spec[i].d0, spec[i].d1, matrix_dtype);
            set_hf_layout(&tt->t[tt->n - 1], E, C, FFE);
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
