// test_gguf_model.c: models loaded from GGUF files numpy wrote the way llama.cpp's converter
// does (scripts/ref_gguf.py: names, reversed dims, metadata keys, llama's permuted Q/K rows,
// llama3 rope_freqs) equal the Hugging Face checkpoints they came from: the same config, every
// tensor bit for bit, and the same logits (float32: exactly; bfloat16 storage: exactly the
// bf16 model of the checkpoint).
#include "test.h"

#include "core/alloc.h"
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

int main(void) {
    RUN(test_qwen3_tied);
    RUN(test_qwen3_untied);
    RUN(test_qwen2);
    RUN(test_llama_permuted_rope_freqs);
    RUN(test_bf16_storage);
    TEST_MAIN_END();
}
