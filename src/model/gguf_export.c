// gguf_export.c: a loaded model -> GGUF metadata and tensors, as llama.cpp's converter lays them.
#include "gguf_export.h"

#include "../core/dtype.h"
#include "family.h"
#include "gguf_model.h"

#include <math.h>
#include <string.h>

// llama.cpp's general.file_type values (LLAMA_FTYPE_*).
static uint32_t file_type(uint32_t outtype) {
    switch (outtype) {
    case GGML_F16: return 1;
    case GGML_Q8_0: return 7;
    case GGML_BF16: return 32;
    default: return 0;
    }
}

void gguf_quantize_q8_0(void *dst, const float *x, size_t n) {
    uint8_t *b = dst;
    for (size_t i = 0; i < n / 32; i++, x += 32, b += 34) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        uint16_t h = f32_to_f16(d);
        memcpy(b, &h, 2);
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

// Llama 3 rope scaling as the converter's per-frequency factors (llama.cpp divides each
// frequency by its factor).
static float *llama3_factors(const ModelConfig *c) {
    const RopeScaling *rs = &c->rope_scaling;
    int half = c->head_dim / 2;
    float *f = xmalloc((size_t)half * sizeof(float));
    double lo_wl = rs->original_max_position_embeddings / rs->low_freq_factor;
    double hi_wl = rs->original_max_position_embeddings / rs->high_freq_factor;
    for (int i = 0; i < half; i++) {
        double freq = 1.0 / pow(c->rope_theta, 2.0 * i / c->head_dim), wl = 2 * M_PI / freq;
        if (wl < hi_wl) f[i] = 1;
        else if (wl > lo_wl) f[i] = (float)rs->factor;
        else {
            double smooth = (rs->original_max_position_embeddings / wl - rs->low_freq_factor) /
                            (rs->high_freq_factor - rs->low_freq_factor);
            f[i] = (float)(1 / ((1 - smooth) / rs->factor + smooth));
        }
    }
    return f;
}

// The GGUF architecture of a model: its model_type, except Mistral, which llama.cpp's converter
// writes as llama (LlamaModel registers MistralForCausalLM).
static const char *gguf_arch(const ModelConfig *c) {
    return !strcmp(c->model_type, "mistral") ? "llama" : !strcmp(c->model_type, "gemma3_text") ? "gemma3" : c->model_type;
}

static void add_metadata(const Model *m, uint32_t outtype, const char *name, GgufWriter *w) {
    const ModelConfig *c = &m->cfg;
    const char *arch = gguf_arch(c);
    char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    gguf_w_str(w, "general.architecture", arch);
    gguf_w_str(w, "general.type", "model");
    if (name && *name) gguf_w_str(w, "general.name", name);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)c->num_hidden_layers);
    gguf_w_u32(w, KEY("context_length"), (uint32_t)c->max_position_embeddings);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)c->hidden_size);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)c->intermediate_size);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)c->num_attention_heads);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->num_key_value_heads);
    gguf_w_f32(w, KEY("rope.freq_base"), (float)c->rope_theta);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->rms_norm_eps);
    if (c->head_dim * c->num_attention_heads != c->hidden_size || !strcmp(arch, "qwen3") || !strncmp(arch, "gemma", 5)) {
        gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
        gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    }
    if (!strcmp(arch, "llama")) {
        gguf_w_u32(w, KEY("vocab_size"), (uint32_t)c->vocab_size);
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
    }
    if (!strcmp(arch, "gemma2") || !strcmp(arch, "gemma3")) {  // Gemma2Model / Gemma3Model (gemma_exportable)
        gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)c->layer_window[0]);
        if (c->attn_softcap > 0) gguf_w_f32(w, KEY("attn_logit_softcapping"), (float)c->attn_softcap);
        if (c->final_softcap > 0) gguf_w_f32(w, KEY("final_logit_softcapping"), (float)c->final_softcap);
    }
    if (!strcmp(arch, "phi3")) {  // Phi3MiniModel.set_gguf_parameters
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)c->rotary_dim);
        double omax = c->rope_scaling.type == ROPE_LONGROPE ? c->rope_scaling.original_max_position_embeddings
                                                             : (double)c->family->original_max_default;
        gguf_w_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)omax);
        gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)c->layer_window[0]);
        if (c->rope_scaling.type == ROPE_LONGROPE)
            gguf_w_f32(w, KEY("rope.scaling.attn_factor"), (float)c->rope_scaling.attention_factor);
    }
    const RopeScaling *rs = &c->rope_scaling;
    if (rs->type == ROPE_LINEAR || rs->type == ROPE_YARN) {
        gguf_w_str(w, KEY("rope.scaling.type"), rs->type == ROPE_LINEAR ? "linear" : "yarn");
        gguf_w_f32(w, KEY("rope.scaling.factor"), (float)rs->factor);
        if (rs->type == ROPE_YARN)
            gguf_w_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)rs->original_max_position_embeddings);
    }
    gguf_w_u32(w, "general.file_type", file_type(outtype));
    gguf_w_u32(w, "general.quantization_version", 2);
#undef KEY
}

// What llama.cpp's gemma2 / gemma3 store and run: the query scale 1/sqrt(head_dim); gemma2: the
// even layers sliding with one window, both soft-caps; gemma3: five layers in six sliding
// (sliding_window_pattern 6) on RoPE base 10000, no attention soft-cap; tied embeddings (the
// converter drops lm_head). Anything else would be another model once loaded: refused by name.
static Status gemma_exportable(const ModelConfig *c, Err *e) {
    const char *mt = c->model_type;
    int g3 = !strcmp(mt, "gemma3_text"), pattern = g3 ? 6 : 2;
    if (fabs(c->query_scale * sqrt((double)c->head_dim) - 1) > 1e-12)
        return err_set(e, ST_EUNSUPPORTED,
                       "GGUF export of %s: query_pre_attn_scalar must be head_dim %d (llama.cpp scales queries by "
                       "1/sqrt(head_dim) and the file has no field for it)", mt, c->head_dim);
    for (int l = 0; l < c->num_hidden_layers; l++)
        if (c->layer_window[0] < 1 || c->layer_window[l] != ((l + 1) % pattern ? c->layer_window[0] : 0))
            return err_set(e, ST_EUNSUPPORTED,
                           "GGUF export of %s: layer %d's attention differs from llama.cpp's %s (every layer l with "
                           "(l + 1) %% %d != 0 sliding with one window, the others global)", mt, l, g3 ? "gemma3" : "gemma2",
                           pattern);
    if (g3 && c->rope_local_theta != 10000.0)
        return err_set(e, ST_EUNSUPPORTED, "GGUF export of gemma3_text: rope_local_base_freq must be 10000 (llama.cpp's)");
    if (g3 && c->attn_softcap > 0)
        return err_set(e, ST_EUNSUPPORTED, "GGUF export of gemma3_text: attn_logit_softcapping must be null");
    if (!g3 && (!(c->attn_softcap > 0) || !(c->final_softcap > 0)))
        return err_set(e, ST_EUNSUPPORTED, "GGUF export of gemma2: a soft-cap of null is not supported (llama.cpp reads 50 "
                                           "and 30 for an absent one)");
    if (!c->tie_word_embeddings)
        return err_set(e, ST_EUNSUPPORTED, "GGUF export of %s: untied lm_head (llama.cpp's converter drops it)", mt);
    return ST_OK;
}

Status gguf_export_begin(GgufExport *x, const Model *m, uint32_t outtype, const char *name, GgufWriter *w, Err *e) {
    memset(x, 0, sizeof *x);
    if (m->cfg.num_labels > 0)
        return err_set(e, ST_EUNSUPPORTED, "%s is a sequence classifier (a score head): GGUF export writes causal LMs only",
                       m->dir ? m->dir : "the model");
    const char *mt = m->cfg.model_type;
    if (strcmp(mt, "qwen3") && strcmp(mt, "qwen2") && strcmp(mt, "llama") && strcmp(mt, "olmo2") && strcmp(mt, "phi3") &&
        strcmp(mt, "gemma2") && strcmp(mt, "gemma3_text") && strcmp(mt, "mistral"))
        return err_set(e, ST_EUNSUPPORTED,
                       "GGUF export of model_type %s is not supported (qwen3, qwen2, llama, mistral, olmo2, phi3, gemma2, "
                       "gemma3_text)",
                       mt);
    if (!strcmp(mt, "gemma2") || !strcmp(mt, "gemma3_text")) TRY(gemma_exportable(&m->cfg, e));
    if (!strcmp(mt, "mistral") && m->cfg.layer_window[0] > 0)
        return err_set(e, ST_EUNSUPPORTED,
                       "GGUF export of mistral with sliding_window %d: llama.cpp's converter writes Mistral as the llama "
                       "architecture, which has no sliding window (only sliding_window null exports)",
                       m->cfg.layer_window[0]);
    mt = gguf_arch(&m->cfg);
    for (int i = 0; i < m->tt.n; i++) {
        char gname[160];
        if (!gguf_name_from_hf(mt, m->tt.t[i].name, gname, sizeof gname))
            return err_set(e, ST_EUNSUPPORTED, "tensor \"%s\" has no GGUF name", m->tt.t[i].name);
    }
    x->m = m;
    x->outtype = outtype;
    x->src = xmalloc((size_t)(m->tt.n + 3) * sizeof(int));  // + rope_freqs, or the two longrope factor tensors
    add_metadata(m, outtype, name, w);
    const ModelConfig *c = &m->cfg;
    if (c->rope_scaling.type == ROPE_LLAMA3) {
        x->rope_freqs = llama3_factors(c);
        int64_t ne[1] = {c->head_dim / 2};
        gguf_w_tensor(w, "rope_freqs.weight", 1, ne, GGML_F32, x->rope_freqs);
        x->src[x->n++] = -1;
    }
    if (c->rope_scaling.type == ROPE_LONGROPE) {  // Phi3MiniModel.generate_extra_tensors
        int64_t ne[1] = {c->rotary_dim / 2};
        gguf_w_tensor(w, "rope_factors_long.weight", 1, ne, GGML_F32, c->rope_scaling.long_factor);
        x->src[x->n++] = -1;
        gguf_w_tensor(w, "rope_factors_short.weight", 1, ne, GGML_F32, c->rope_scaling.short_factor);
        x->src[x->n++] = -1;
    }
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *t = &m->tt.t[i];
        char gname[160];
        gguf_name_from_hf(mt, t->name, gname, sizeof gname);
        int64_t ne[2] = {t->ndim == 2 ? t->shape[1] : t->shape[0], t->ndim == 2 ? t->shape[0] : 1};
        uint32_t type = t->ndim == 1 ? GGML_F32 : outtype;
        if (type == GGML_Q8_0 && ne[0] % 32) type = GGML_F16;
        gguf_w_tensor(w, gname, t->ndim, ne, type, NULL);
        x->src[x->n++] = i;
        x->cap = MAX(x->cap, t->numel);
    }
    x->stage = xmalloc(x->cap * sizeof(float));
    x->stage2 = xmalloc(x->cap * sizeof(float));
    return ST_OK;
}

Status gguf_export_fill(void *ctx, int i, void *dst, Err *e) {
    GgufExport *x = ctx;
    CHECK(i >= 0 && i < x->n && x->src[i] >= 0);
    const Model *m = x->m;
    const TensorInfo *t = &m->tt.t[x->src[i]];
    size_t es = dtype_size(t->dtype);
    // The tensor as float32 on the host.
    if (t->dtype == DT_F32) {
        m->be->download(m->be, x->stage, model_data(m, t), t->numel * 4);
    } else {
        m->be->download(m->be, x->stage2, model_data(m, t), t->numel * es);
        dtype_convert(x->stage, DT_F32, x->stage2, t->dtype, t->numel);
    }
    float *src = x->stage;
    int q = t->kind == TK_WQ || t->kind == TK_BQ, k = t->kind == TK_WK || t->kind == TK_BK;
    if (!strcmp(gguf_arch(&m->cfg), "llama") && (q || k)) {
        int heads = q ? m->cfg.num_attention_heads : m->cfg.num_key_value_heads;
        size_t row = t->ndim == 2 ? (size_t)t->shape[1] : 1;
        gguf_llama_permute(x->stage2, x->stage, heads, m->cfg.head_dim, row * sizeof(float));
        src = x->stage2;
    }
    int norm = t->kind == TK_NORM || t->kind == TK_LN1 || t->kind == TK_LN2 || t->kind == TK_LNA || t->kind == TK_LNF ||
               t->kind == TK_QN || t->kind == TK_KN;
    if (m->cfg.norm_plus_one && norm)  // Gemma's converter: every norm weight plus one
        for (size_t k = 0; k < t->numel; k++) src[k] += 1.0f;
    uint32_t type = t->ndim == 1 ? GGML_F32 : x->outtype;
    if (type == GGML_Q8_0 && t->shape[1] % 32) type = GGML_F16;
    switch (type) {
    case GGML_F32: memcpy(dst, src, t->numel * 4); break;
    case GGML_F16: dtype_convert(dst, DT_F16, src, DT_F32, t->numel); break;
    case GGML_BF16: dtype_convert(dst, DT_BF16, src, DT_F32, t->numel); break;
    case GGML_Q8_0: gguf_quantize_q8_0(dst, src, t->numel); break;
    default: return err_set(e, ST_EINVAL, "gguf export: output type %u", type);
    }
    return ST_OK;
}

void gguf_export_end(GgufExport *x) {
    free(x->src);
    free(x->rope_freqs);
    free(x->stage);
    free(x->stage2);
    memset(x, 0, sizeof *x);
}
