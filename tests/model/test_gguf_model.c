// test_gguf_model.c: models loaded from GGUF files numpy wrote the way llama.cpp's converter
// does (scripts/ref_gguf.py: names, reversed dims, metadata keys, llama's permuted Q/K rows,
// llama3 rope_freqs) equal the Hugging Face checkpoints they came from: the same config, every
// tensor bit for bit, and the same logits (float32: exactly; bfloat16 storage: exactly the
// bf16 model of the checkpoint). A file of mixed quantized types loads as its dequantized blocks.
#include "test.h"

#include "core/alloc.h"
#include "model/gguf_model.h"
#include "model/qwen3.h"

// Logits (n, V) of a fixed id sequence through the score path.
static float *logits(Model *m, int n) {
    Err e = {0};
    Plan *p;
    EXPECT(plan_get(m, PLAN_SCORE, 1, n, &p, &e) == ST_OK);
    int32_t ids[64], pos[64], seg[64];
    for (int t = 0; t < n; t++) ids[t] = 3 + (7 * t) % (m->cfg.vocab_size - 3), pos[t] = t, seg[t] = 1;
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    size_t bytes = (size_t)n * m->cfg.vocab_size * sizeof(float);
    float *dev = m->be->alloc(m->be, bytes), *out = xmalloc(bytes);
    qwen3_logits(m, p, 0, n, dev);
    m->be->download(m->be, out, dev, bytes);
    m->be->free(m->be, dev);
    return out;
}

static void compare(const char *name, int dtype) {
    char dir[256], gguf[256];
    snprintf(dir, sizeof dir, "tests/data/models/%s", name);
    snprintf(gguf, sizeof gguf, "tests/data/gguf/%s.gguf", name);
    Err e = {0};
    Backend *be;
    EXPECT_MSG(backend_create("cpu", 2, &be, &e) == ST_OK, "%s", e.msg);
    Model *a = NULL, *b = NULL;
    EXPECT_MSG(model_load_frozen(dir, be, dtype, &a, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(model_load_frozen(gguf, be, dtype, &b, &e) == ST_OK, "%s: %s", name, e.msg);
    if (!a || !b) goto done;
    const ModelConfig *x = &a->cfg, *y = &b->cfg;
    EXPECT(!strcmp(x->model_type, y->model_type));
    EXPECT(x->vocab_size == y->vocab_size && x->hidden_size == y->hidden_size && x->intermediate_size == y->intermediate_size);
    EXPECT(x->num_hidden_layers == y->num_hidden_layers && x->num_attention_heads == y->num_attention_heads);
    EXPECT(x->num_key_value_heads == y->num_key_value_heads && x->head_dim == y->head_dim);
    EXPECT_MSG(x->rms_norm_eps == y->rms_norm_eps && x->rope_theta == y->rope_theta, "%s: eps %g / %g, theta %g / %g", name,
               x->rms_norm_eps, y->rms_norm_eps, x->rope_theta, y->rope_theta);
    EXPECT(x->tie_word_embeddings == y->tie_word_embeddings && x->qkv_bias == y->qkv_bias && x->qk_norm == y->qk_norm);
    EXPECT(x->rope_scaling.type == y->rope_scaling.type && x->rope_scaling.factor == y->rope_scaling.factor);
    EXPECT(x->rope_scaling.original_max_position_embeddings == y->rope_scaling.original_max_position_embeddings);
    EXPECT(x->rope_scaling.low_freq_factor == y->rope_scaling.low_freq_factor &&
           x->rope_scaling.high_freq_factor == y->rope_scaling.high_freq_factor);
    EXPECT(a->tt.n == b->tt.n && a->matrix_dtype == b->matrix_dtype);
    for (int i = 0; i < a->tt.n && i < b->tt.n; i++) {
        const TensorInfo *t = &a->tt.t[i];
        size_t bytes = t->numel * dtype_size(t->dtype);
        char *ha = xmalloc(bytes), *hb = xmalloc(bytes);
        be->download(be, ha, a->data[i], bytes);
        be->download(be, hb, b->data[i], bytes);
        EXPECT_MSG(!strcmp(t->name, b->tt.t[i].name) && !memcmp(ha, hb, bytes), "%s: tensor %s differs", name, t->name);
        free(ha), free(hb);
    }
    int n = 9;
    float *la = logits(a, n), *lb = logits(b, n);
    EXPECT_MSG(!memcmp(la, lb, (size_t)n * x->vocab_size * sizeof(float)), "%s: logits differ", name);
    free(la), free(lb);
done:
    model_free(a);
    model_free(b);
    backend_destroy(be);
}

static void test_qwen3_tied(void) { compare("qwen3_tied", -1); }
static void test_qwen3_untied(void) { compare("qwen3_untied", -1); }
static void test_qwen2(void) { compare("qwen2", -1); }
static void test_llama_permuted_rope_freqs(void) { compare("llama", -1); }
static void test_bf16_storage(void) {
    compare("qwen3_untied", DT_BF16);
    compare("llama", DT_BF16);
}

// A Q4_K_M-like file (scripts/ref_gguf.py's mixed.gguf: Q4_K, Q6_K, Q4_0 and Q8_0 matrices, F32
// norms) loads with every tensor its blocks dequantized (float32, or rounded once to bfloat16),
// and runs.
static void test_mixed_quant_types(void) {
    const char *path = "tests/data/gguf/mixed.gguf";
    for (int pass = 0; pass < 2; pass++) {
        int dt = pass ? DT_BF16 : -1;
        Err e = {0};
        Backend *be;
        CHECK(backend_create("cpu", 2, &be, &e) == ST_OK);
        Model *m = NULL;
        GgufFile g;
        EXPECT_MSG(model_load_frozen(path, be, dt, &m, &e) == ST_OK, "%s", e.msg);
        EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
        if (!m || test_current_failed) {
            model_free(m);
            backend_destroy(be);
            return;
        }
        EXPECT(m->matrix_dtype == (pass ? DT_BF16 : DT_F32) && m->cfg.qk_norm && !m->cfg.tie_word_embeddings);
        int quantized = 0;
        for (int i = 0; i < m->tt.n; i++) {
            const TensorInfo *t = &m->tt.t[i];
            char gname[160];
            EXPECT(gguf_name_from_hf(m->cfg.model_type, t->name, gname, sizeof gname));
            const GgufTensor *gt = gguf_find_tensor(&g, gname);
            EXPECT_MSG(gt && gt->numel == t->numel, "%s", t->name);
            if (!gt || gt->numel != t->numel) continue;
            quantized += gt->type != GGML_F32;
            float *want = xmalloc(t->numel * sizeof(float)), *got = xmalloc(t->numel * sizeof(float));
            void *raw = xmalloc(t->numel * dtype_size(t->dtype));
            gguf_dequantize(gt->type, gt->data, want, t->numel);
            if (t->dtype == DT_BF16)
                for (size_t k = 0; k < t->numel; k++) want[k] = bf16_to_f32(f32_to_bf16(want[k]));
            be->download(be, raw, m->data[i], t->numel * dtype_size(t->dtype));
            dtype_convert(got, DT_F32, raw, t->dtype, t->numel);
            EXPECT_MSG(!memcmp(want, got, t->numel * sizeof(float)), "%s (%s) differs from its dequantized blocks", t->name,
                       gguf_type_name(gt->type));
            free(want), free(got), free(raw);
        }
        EXPECT(quantized == 9);
        float *l = logits(m, 5);
        int finite = 1;
        for (size_t k = 0; k < (size_t)5 * m->cfg.vocab_size; k++) finite &= isfinite(l[k]) && fabsf(l[k]) < 1e4f;
        EXPECT(finite);
        free(l);
        gguf_close(&g);
        model_free(m);
        backend_destroy(be);
    }
}

// --dtype q8_0 (Q8_0 storage): the Q8_0 tensors of a GGUF file are held as the very blocks of the
// file (dequantized at load, quantized again to the same blocks).
static void test_q8_0_blocks_kept(void) {
    const char *path = "tests/data/gguf/mixed.gguf";
    Err e = {0};
    Backend *be;
    CHECK(backend_create("cpu", 2, &be, &e) == ST_OK);
    Model *m = NULL;
    GgufFile g;
    EXPECT_MSG(model_load_frozen(path, be, DT_Q8_0, &m, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
    const TensorInfo *t = m ? tensors_find(&m->tt, "model.layers.0.mlp.up_proj.weight") : NULL;
    const GgufTensor *gt = test_current_failed ? NULL : gguf_find_tensor(&g, "blk.0.ffn_up.weight");
    EXPECT(t && gt && gt->type == GGML_Q8_0 && t->dtype == DT_Q8_0);
    if (t && gt && t->dtype == DT_Q8_0) {
        size_t bytes = dtype_bytes(DT_Q8_0, t->numel);
        char *h = xmalloc(bytes);
        be->download(be, h, model_data(m, t), bytes);
        EXPECT(bytes == gt->nbytes && !memcmp(h, gt->data, bytes));
        free(h);
    }
    gguf_close(&g);
    model_free(m);
    backend_destroy(be);
}

int main(void) {
    RUN(test_qwen3_tied);
    RUN(test_qwen3_untied);
    RUN(test_qwen2);
    RUN(test_llama_permuted_rope_freqs);
    RUN(test_bf16_storage);
    RUN(test_mixed_quant_types);
    RUN(test_q8_0_blocks_kept);
    TEST_MAIN_END();
}
