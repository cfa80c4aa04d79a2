// test_gguf_export.c: still's GGUF writer side. Each test model exported (gguf_export: the
// converter's names, dims, metadata, llama's Q/K permutation, Llama 3 rope factors) and loaded
// back: float32 gives the checkpoint's tensors and logits exactly; f16 and bf16 give its weights
// rounded to that type exactly, Q8_0 weights within half a quantization step of each block, and
// in each case exactly the logits of the checkpoint with its weights rounded that way. OLMo 2 and
// Phi-3 (fused projections, partial rotary, longrope factors) with llama.cpp's names and keys for
// those architectures.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "model/gguf_export.h"
#include "model/gguf_model.h"
#include "model/qwen3.h"
#include "model/safetensors.h"

#include <unistd.h>

static char tmpdir[256];

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

static float *host_f32(const Model *m, int i) {
    const TensorInfo *t = &m->tt.t[i];
    float *f = xmalloc(t->numel * sizeof(float));
    void *raw = xmalloc(t->numel * dtype_size(t->dtype));
    m->be->download(m->be, raw, m->data[i], t->numel * dtype_size(t->dtype));
    dtype_convert(f, DT_F32, raw, t->dtype, t->numel);
    free(raw);
    return f;
}

// The checkpoint with every matrix rounded as an export to type stores it (bf16: bf16 storage).
static Model *rounded(const char *dir, Backend *be, uint32_t type) {
    Err e = {0};
    Model *r = NULL;
    EXPECT_MSG(model_load(dir, be, type == GGML_BF16 ? DT_BF16 : DT_F32, &r, &e) == ST_OK, "%s", e.msg);
    if (!r) return r;
    if (r->cfg.norm_plus_one)  // Gemma's norms are stored plus one: (w + 1) - 1 in float32
        for (int i = 0; i < r->tt.n; i++) {
            const TensorInfo *t = &r->tt.t[i];
            if (t->ndim != 1) continue;
            float *x = xmalloc(t->numel * sizeof(float));
            be->download(be, x, r->data[i], t->numel * sizeof(float));
            for (size_t k = 0; k < t->numel; k++) x[k] = (x[k] + 1.0f) - 1.0f;
            be->upload(be, r->data[i], x, t->numel * sizeof(float));
            free(x);
        }
    if (type == GGML_BF16 || type == GGML_F32) return r;
    for (int i = 0; i < r->tt.n; i++) {
        const TensorInfo *t = &r->tt.t[i];
        if (t->ndim != 2) continue;
        float *x = xmalloc(t->numel * sizeof(float));
        void *q = xmalloc(t->numel / 32 * 34 + 34);
        be->download(be, x, r->data[i], t->numel * sizeof(float));
        if (type == GGML_Q8_0 && t->shape[1] % 32 == 0) {
            gguf_quantize_q8_0(q, x, t->numel);
            gguf_dequantize(GGML_Q8_0, q, x, t->numel);
        } else {
            for (size_t k = 0; k < t->numel; k++) x[k] = f16_to_f32(f32_to_f16(x[k]));
        }
        be->upload(be, r->data[i], x, t->numel * sizeof(float));
        free(x), free(q);
    }
    return r;
}

static void export_one(const Model *m, uint32_t type, const char *path) {
    GgufWriter w;
    GgufExport x;
    Err e = {0};
    gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT);
    EXPECT_MSG(gguf_export_begin(&x, m, type, "test", &w, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(gguf_w_write(&w, path, gguf_export_fill, &x, &e) == ST_OK, "%s", e.msg);
    gguf_export_end(&x);
    gguf_writer_free(&w);
}

// name: a model of tests/data/models, or "label=DIR".
static void check(const char *name, uint32_t type) {
    char dir[256], path[600], label[64];
    const char *eq = strchr(name, '=');
    snprintf(label, sizeof label, "%.*s", eq ? (int)(eq - name) : (int)strlen(name), name);
    if (eq) snprintf(dir, sizeof dir, "%s", eq + 1);
    else snprintf(dir, sizeof dir, "tests/data/models/%s", name);
    snprintf(path, sizeof path, "%s/%s_%s.gguf", tmpdir, label, gguf_type_name(type));
    Err e = {0};
    Backend *be;
    CHECK(backend_create("cpu", 2, &be, &e) == ST_OK);
    Model *a = NULL, *b = NULL;
    EXPECT_MSG(model_load_frozen(dir, be, DT_F32, &a, &e) == ST_OK, "%s", e.msg);
    if (a) export_one(a, type, path);
    EXPECT_MSG(a && model_load_frozen(path, be, -1, &b, &e) == ST_OK, "%s %s: %s", name, gguf_type_name(type), e.msg);
    if (!a || !b) goto done;
    EXPECT(b->tt.n == a->tt.n);
    // (Mistral is written as llama, as llama.cpp's converter writes it)
    const char *want_mt = strcmp(a->cfg.model_type, "mistral") ? a->cfg.model_type : "llama";
    EXPECT_MSG(!strcmp(want_mt, b->cfg.model_type) && a->cfg.rope_scaling.type == b->cfg.rope_scaling.type,
               "%s: read back as %s", name, b->cfg.model_type);
    double worst = 0;  // largest error relative to the bound of the type
    for (int i = 0; i < a->tt.n && i < b->tt.n; i++) {
        const TensorInfo *t = &a->tt.t[i];
        float *x = host_f32(a, i), *y = host_f32(b, i);
        uint32_t tt = t->ndim == 1 ? GGML_F32 : type;
        if (tt == GGML_Q8_0 && t->shape[1] % 32) tt = GGML_F16;
        for (size_t k = 0; k < t->numel; k++) {
            float want = x[k];
            if (t->ndim == 1 && a->cfg.norm_plus_one) want = (want + 1.0f) - 1.0f;
            if (tt == GGML_F16) want = f16_to_f32(f32_to_f16(x[k]));
            if (tt == GGML_BF16) want = bf16_to_f32(f32_to_bf16(x[k]));
            if (tt != GGML_Q8_0) {
                if (memcmp(&want, &y[k], 4)) worst = fmax(worst, 1e9);
                continue;
            }
            size_t b0 = k / 32 * 32;
            float amax = 0;
            for (size_t j = b0; j < b0 + 32; j++) amax = fmaxf(amax, fabsf(x[j]));
            double bound = 0.5 * amax / 127 * (1 + 1e-3) + 1e-3 * amax;  // half a step; d rounded to f16
            if (amax > 0) worst = fmax(worst, fabs(y[k] - x[k]) / bound);
        }
        free(x), free(y);
    }
    EXPECT_MSG(worst <= 1, "%s %s: a weight is off by %.3g of its bound", name, gguf_type_name(type), worst);
    int n = 7;
    float *la = logits(a, n), *lb = logits(b, n);
    size_t nv = (size_t)n * a->cfg.vocab_size;
    double scale = 0, diff = 0;
    for (size_t k = 0; k < nv; k++) scale = fmax(scale, fabs(la[k])), diff = fmax(diff, fabs(la[k] - lb[k]));
    // Against the checkpoint: f32 exactly, the others close (the test models' random weights
    // amplify rounding; the exact check is the next one).
    double tol = type == GGML_F32 ? (a->cfg.norm_plus_one ? 1e-5 : 0) : 0.1;  // Gemma: its norms' (w + 1) - 1
    EXPECT_MSG(diff <= tol * scale, "%s %s: logits differ by %.3g (scale %.3g, tolerance %.3g)", name,
               gguf_type_name(type), diff, scale, tol);
    // Against the checkpoint with its weights rounded to the type: exactly.
    Model *r = rounded(dir, be, type);
    if (r) {
        float *lr = logits(r, n);
        EXPECT_MSG(!memcmp(lr, lb, nv * sizeof(float)), "%s %s: logits differ from the checkpoint rounded to the type",
                   name, gguf_type_name(type));
        free(lr);
        model_free(r);
    }
    free(la), free(lb);
done:
    model_free(a);
    model_free(b);
    backend_destroy(be);
}

static void test_f32_exact(void) {
    const char *names[] = {"qwen3_tied", "qwen3_untied", "qwen2", "llama", "olmo2", "phi3", "phi3_long"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) check(names[i], GGML_F32);
}

// The names and keys llama.cpp's converter writes for olmo2 (Olmo2Model) and phi3
// (Phi3MiniModel), and the config they load back to.
// Gemma 2: the tiny checkpoint with query_pre_attn_scalar = head_dim (the only query scale
// llama.cpp's gemma2 stores); the fixture's own 24 is refused by name.
static void test_gemma2(void) {
    char dir[300], cmd[800];
    snprintf(dir, sizeof dir, "%s/gemma2_hd", tmpdir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && cp tests/data/models/gemma2/model.safetensors %s/ && sed 's/\"query_pre_attn_scalar\": 24/"
             "\"query_pre_attn_scalar\": 16/' tests/data/models/gemma2/config.json >%s/config.json",
             dir, dir, dir);
    EXPECT(system(cmd) == 0);
    char spec[320];
    snprintf(spec, sizeof spec, "gemma2_hd=%s", dir);
    check(spec, GGML_F32);
    check(spec, GGML_Q8_0);
    char path[600];
    Err e = {0};
    GgufFile g;
    snprintf(path, sizeof path, "%s/gemma2_hd_F32.gguf", tmpdir);
    EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
    if (!test_current_failed) {
        const char *want[] = {"blk.1.attn_norm.weight", "blk.1.post_attention_norm.weight", "blk.1.ffn_norm.weight",
                              "blk.1.post_ffw_norm.weight", "output_norm.weight"};
        for (size_t i = 0; i < ARRAY_LEN(want); i++) EXPECT_MSG(gguf_find_tensor(&g, want[i]), "gemma2: no %s", want[i]);
        EXPECT(!gguf_find_tensor(&g, "output.weight"));
        int64_t v;
        double f;
        EXPECT(gguf_get_int(&g, "gemma2.attention.sliding_window", 1, &v, &e) == ST_OK && v == 6);
        EXPECT(gguf_get_int(&g, "gemma2.attention.key_length", 1, &v, &e) == ST_OK && v == 16);
        EXPECT(gguf_get_float(&g, "gemma2.attn_logit_softcapping", 1, &f, &e) == ST_OK && f == 3.0);
        EXPECT(gguf_get_float(&g, "gemma2.final_logit_softcapping", 1, &f, &e) == ST_OK && f == 15.0);
        StSet ck;  // the norms stored plus one, as the converter stores them
        int opened = st_open("tests/data/models/gemma2/model.safetensors", &ck, &e) == ST_OK;
        EXPECT_MSG(opened, "%s", e.msg);
        const StTensor *hn = opened ? st_find(&ck, "model.layers.1.pre_feedforward_layernorm.weight") : NULL;
        const GgufTensor *gn = gguf_find_tensor(&g, "blk.1.ffn_norm.weight");
        EXPECT(hn && gn && gn->numel == hn->numel);
        for (size_t k = 0; hn && gn && gn->numel == hn->numel && k < hn->numel; k++)
            EXPECT(((const float *)gn->data)[k] == ((const float *)hn->data)[k] + 1.0f);
        if (opened) st_close(&ck);
        gguf_close(&g);
    }
    // the norms are stored plus one, as the converter stores them
    Backend *be;
    CHECK(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load_frozen("tests/data/models/gemma2", be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    if (m) {
        GgufWriter w;
        GgufExport x;
        gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT);
        EXPECT(gguf_export_begin(&x, m, GGML_F32, "t", &w, &e) == ST_EUNSUPPORTED);
        EXPECT_STR_CONTAINS(e.msg, "query_pre_attn_scalar must be head_dim 16");
        gguf_export_end(&x);
        gguf_writer_free(&w);
        model_free(m);
    }
    backend_destroy(be);
}

// Gemma 3 as llama.cpp runs it (five sliding layers in six on RoPE base 10000, linear scaling
// on the global ones): a random 6-layer model saved and exported; the fixture (every other layer
// sliding) is refused by name.
static void test_gemma3(void) {
    static const char cfg_text[] =
        "{\"model_type\": \"gemma3_text\", \"architectures\": [\"Gemma3ForCausalLM\"], \"vocab_size\": 384, "
        "\"hidden_size\": 48, \"intermediate_size\": 96, \"num_hidden_layers\": 6, \"num_attention_heads\": 3, "
        "\"num_key_value_heads\": 1, \"head_dim\": 16, \"query_pre_attn_scalar\": 16, \"sliding_window\": 4, "
        "\"sliding_window_pattern\": 6, \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, "
        "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4.0}, \"initializer_range\": 0.5, "
        "\"torch_dtype\": \"float32\", \"max_position_embeddings\": 512}";
    char dir[300], spec[320];
    snprintf(dir, sizeof dir, "%s/gemma3_six", tmpdir);
    Err e = {0};
    ModelConfig c;
    Backend *be;
    CHECK(backend_create("cpu", 1, &be, &e) == ST_OK);
    EXPECT_MSG(config_parse(cfg_text, strlen(cfg_text), "config.json", &c, &e) == ST_OK, "%s", e.msg);
    Model *m = NULL;
    if (!test_current_failed) EXPECT_MSG(model_create_random(&c, be, 7, &m, &e) == ST_OK, "%s", e.msg);
    if (m) EXPECT_MSG(model_save(m, dir, DT_F32, &e) == ST_OK, "%s", e.msg);
    model_free(m);  // (the model took the config's JSON)
    if (!test_current_failed) {
        snprintf(spec, sizeof spec, "gemma3_six=%s", dir);
        check(spec, GGML_F32);
        char path[600];
        GgufFile g;
        snprintf(path, sizeof path, "%s/gemma3_six_F32.gguf", tmpdir);
        EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
        if (!test_current_failed) {
            char *arch = NULL;
            EXPECT(gguf_get_str(&g, "general.architecture", 1, &arch, &e) == ST_OK && arch && !strcmp(arch, "gemma3"));
            free(arch);
            EXPECT(gguf_find_tensor(&g, "blk.5.attn_q_norm.weight") && gguf_find_tensor(&g, "blk.5.post_ffw_norm.weight"));
            EXPECT(!gguf_find_tensor(&g, "gemma3.attn_logit_softcapping"));
            gguf_close(&g);
        }
    }
    m = NULL;
    EXPECT_MSG(model_load_frozen("tests/data/models/gemma3_text", be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    if (m) {
        GgufWriter w;
        GgufExport x;
        gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT);
        EXPECT(gguf_export_begin(&x, m, GGML_F32, "t", &w, &e) == ST_EUNSUPPORTED);
        EXPECT_STR_CONTAINS(e.msg, "layer 1's attention differs from llama.cpp's gemma3");
        gguf_export_end(&x);
        gguf_writer_free(&w);
        model_free(m);
    }
    backend_destroy(be);
}

// Mistral without a sliding window (Mistral 7B v0.2 and later): the llama architecture, Q/K rows
// permuted; with one it is refused by name.
static void test_mistral(void) {
    char dir[300], cmd[800], spec[320];
    snprintf(dir, sizeof dir, "%s/mistral_nw", tmpdir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && cp tests/data/models/mistral/model.safetensors %s/ && sed 's/\"sliding_window\": 5/"
             "\"sliding_window\": null/' tests/data/models/mistral/config.json >%s/config.json",
             dir, dir, dir);
    EXPECT(system(cmd) == 0);
    snprintf(spec, sizeof spec, "mistral_nw=%s", dir);
    check(spec, GGML_F32);
    check(spec, GGML_BF16);
    Err e = {0};
    Backend *be;
    CHECK(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load_frozen("tests/data/models/mistral", be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    if (m) {
        GgufWriter w;
        GgufExport x;
        gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT);
        EXPECT(gguf_export_begin(&x, m, GGML_F32, "t", &w, &e) == ST_EUNSUPPORTED);
        EXPECT_STR_CONTAINS(e.msg, "GGUF export of mistral with sliding_window 5");
        gguf_export_end(&x);
        gguf_writer_free(&w);
        model_free(m);
    }
    backend_destroy(be);
}

static void test_family_layout(void) {
    check("olmo2", GGML_F32);
    check("phi3_long", GGML_F32);
    check("olmo2", GGML_Q8_0);
    check("phi3_long", GGML_BF16);
    char path[600];
    Err e = {0};
    GgufFile g;
    snprintf(path, sizeof path, "%s/olmo2_F32.gguf", tmpdir);
    EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
    if (!test_current_failed) {
        const char *want[] = {"blk.1.post_attention_norm.weight", "blk.1.post_ffw_norm.weight", "blk.1.attn_q_norm.weight",
                              "blk.1.attn_k_norm.weight", "blk.0.attn_q.weight", "blk.0.ffn_gate.weight"};
        for (size_t i = 0; i < ARRAY_LEN(want); i++) EXPECT_MSG(gguf_find_tensor(&g, want[i]), "olmo2: no %s", want[i]);
        EXPECT(!gguf_find_tensor(&g, "blk.0.ffn_norm.weight") && !gguf_find_tensor(&g, "blk.0.attn_norm.weight"));
        char *arch = NULL;
        EXPECT(gguf_get_str(&g, "general.architecture", 1, &arch, &e) == ST_OK && arch && !strcmp(arch, "olmo2"));
        free(arch);
        gguf_close(&g);
    }
    snprintf(path, sizeof path, "%s/phi3_long_F32.gguf", tmpdir);
    EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
    if (!test_current_failed) {
        const char *want[] = {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight", "blk.0.attn_norm.weight",
                              "blk.0.ffn_norm.weight", "rope_factors_long.weight", "rope_factors_short.weight"};
        for (size_t i = 0; i < ARRAY_LEN(want); i++) EXPECT_MSG(gguf_find_tensor(&g, want[i]), "phi3: no %s", want[i]);
        EXPECT(!gguf_find_tensor(&g, "blk.0.ffn_gate.weight") && !gguf_find_tensor(&g, "blk.0.attn_q.weight"));
        int64_t v;
        double f;
        EXPECT(gguf_get_int(&g, "phi3.rope.dimension_count", 1, &v, &e) == ST_OK && v == 18);  // 24 * 0.75
        EXPECT(gguf_get_int(&g, "phi3.rope.scaling.original_context_length", 1, &v, &e) == ST_OK && v == 8);
        EXPECT(gguf_get_int(&g, "phi3.attention.sliding_window", 1, &v, &e) == ST_OK && v == 262144);
        EXPECT(gguf_get_int(&g, "phi3.context_length", 1, &v, &e) == ST_OK && v == 64);
        // sqrt(1 + ln(64 / 8) / ln 8) = sqrt(2)
        EXPECT(gguf_get_float(&g, "phi3.rope.scaling.attn_factor", 1, &f, &e) == ST_OK && fabs(f - sqrt(2.0)) < 1e-6);
        const GgufTensor *lf = gguf_find_tensor(&g, "rope_factors_long.weight");
        EXPECT(lf && lf->ne[0] == 9 && fabsf(((const float *)lf->data)[2] - 2.8f) < 1e-6f);
        ModelConfig c;
        EXPECT_MSG(gguf_model_config(&g, &c, &e) == ST_OK, "%s", e.msg);
        if (!test_current_failed) {
            EXPECT(c.rotary_dim == 18 && c.rope_scaling.type == ROPE_LONGROPE &&
                   c.rope_scaling.original_max_position_embeddings == 8 && c.layer_window[0] == 262144 &&
                   fabs(c.rope_scaling.attention_factor - sqrt(2.0)) < 1e-6);
            config_free(&c);
        }
        gguf_close(&g);
    }
}

static void test_f16_bf16_q8_0(void) {
    const char *names[] = {"qwen3_untied", "qwen2", "llama"};
    uint32_t types[] = {GGML_F16, GGML_BF16, GGML_Q8_0};
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        for (size_t t = 0; t < ARRAY_LEN(types); t++) check(names[i], types[t]);
}

// The same file twice is the same bytes; the numpy-written file and still's agree on names,
// shapes and data (f32) tensor by tensor.
static void test_matches_numpy_writer(void) {
    const char *names[] = {"qwen3_untied", "llama"};
    for (size_t n = 0; n < ARRAY_LEN(names); n++) {
        char dir[256], path[600], ref[256];
        snprintf(dir, sizeof dir, "tests/data/models/%s", names[n]);
        snprintf(path, sizeof path, "%s/%s_np.gguf", tmpdir, names[n]);
        snprintf(ref, sizeof ref, "tests/data/gguf/%s.gguf", names[n]);
        Err e = {0};
        Backend *be;
        CHECK(backend_create("cpu", 1, &be, &e) == ST_OK);
        Model *a = NULL;
        EXPECT(model_load_frozen(dir, be, DT_F32, &a, &e) == ST_OK);
        if (a) export_one(a, GGML_F32, path);
        GgufFile g, r;
        EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
        EXPECT_MSG(gguf_open(ref, &r, &e) == ST_OK, "%s", e.msg);
        if (!test_current_failed) {
            EXPECT(g.n_tensors == r.n_tensors);
            for (int i = 0; i < r.n_tensors; i++) {
                const GgufTensor *x = &r.tensors[i], *y = gguf_find_tensor(&g, x->name);
                EXPECT_MSG(y && y->type == x->type && y->n_dims == x->n_dims && y->nbytes == x->nbytes &&
                               !memcmp(y->ne, x->ne, sizeof x->ne),
                           "%s: tensor %s", names[n], x->name);
                if (y && y->nbytes == x->nbytes && strcmp(x->name, "rope_freqs.weight"))
                    EXPECT_MSG(!memcmp(x->data, y->data, x->nbytes), "%s: %s data differs", names[n], x->name);
            }
            static const char *keys[] = {"block_count", "embedding_length", "feed_forward_length", "attention.head_count",
                                         "attention.head_count_kv", "context_length"};
            for (size_t k = 0; k < ARRAY_LEN(keys); k++) {
                char key[128];
                int64_t u, v;
                snprintf(key, sizeof key, "%s.%s", a->cfg.model_type, keys[k]);
                EXPECT_MSG(gguf_get_int(&g, key, 1, &u, &e) == ST_OK && gguf_get_int(&r, key, 1, &v, &e) == ST_OK && u == v, "%s", key);
            }
            // rope factors: float32 of the same formula (still computes in double, numpy in float32 frequencies)
            const GgufTensor *x = gguf_find_tensor(&r, "rope_freqs.weight"), *y = gguf_find_tensor(&g, "rope_freqs.weight");
            EXPECT((x == NULL) == (y == NULL));
            for (size_t k = 0; x && y && k < x->numel; k++)
                EXPECT(fabsf(((const float *)x->data)[k] - ((const float *)y->data)[k]) <= 1e-5f * ((const float *)x->data)[k]);
            gguf_close(&g);
            gguf_close(&r);
        }
        model_free(a);
        backend_destroy(be);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/still_test_gguf_export_%d", (int)getpid());
    Err e = {0};
    CHECK(dir_create(tmpdir, &e) == ST_OK);
    RUN(test_f32_exact);
    RUN(test_f16_bf16_q8_0);
    RUN(test_family_layout);
    RUN(test_gemma2);
    RUN(test_mistral);
    RUN(test_gemma3);
    RUN(test_matches_numpy_writer);
    dir_remove_tree(tmpdir, &e);
    TEST_MAIN_END();
}
