// test_family_models.c: the sliding-window families (mistral, gemma2, gemma3_text) against their
// PyTorch ports (scripts/ref_sliding.py, float64): the tiny checkpoints' logits at every one of
// 20 positions (longer than every window), the mean cross-entropy and every parameter's gradient
// on ref and cpu; greedy generation from a prompt longer than the windows, on the windowed ring
// cache, against the port's greedy tokens (full recomputation at every step) and against the
// engine's own recomputation without a cache, with prefill chunks that end inside and across
// the window and a left-padded batch; the ring caches' size; and config.json errors by name.
//
// Tolerances as tests/model/test_torch_parity.c: logits and loss 1e-5, gradients 2e-5 norm-wise
// per tensor (fp32 compute against float64). Greedy tokens are compared up to the first step
// whose top-2 logit gap (recorded by the port) is below 1e-3: rounding can flip a nearer tie.
#include "test.h"

#include "core/alloc.h"
#include "gen/generate.h"
#include "model/config.h"
#include "model/plan.h"
#include "model/qwen3.h"
#include "model/safetensors.h"

#define TOL_GRAD 2e-5

static const char *models[] = {"mistral", "gemma2", "gemma3_text"};

static double rel_norm_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

static Model *load(const char *name, const char *bename, Backend **be, StSet *exp) {
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "tests/data/models/%s", name);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    Err e = {0};
    EXPECT_MSG(backend_create(bename, 2, be, &e) == ST_OK, "%s", e.msg);
    Model *m = NULL;
    EXPECT_MSG(model_load(dir, *be, DT_F32, &m, &e) == ST_OK, "%s: %s", name, e.msg);
    EXPECT_MSG(st_open(path, exp, &e) == ST_OK, "%s", e.msg);
    return m;
}

static int fixture_ids(const StSet *exp, const char *key, int32_t *ids, int cap) {
    const StTensor *t = st_find(exp, key);
    EXPECT_MSG(t != NULL, "fixture lacks %s", key);
    int n = t ? (int)t->numel : 0;
    CHECK(n <= cap);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((const float *)t->data)[i];
    return n;
}

// Logits, loss and every gradient against the port.
static void check_torch(const char *name, const char *bename) {
    Backend *be;
    StSet exp;
    Model *m = load(name, bename, &be, &exp);
    if (!m) return;
    int32_t ids[64], pos[64], seg[64], tgt[64];
    int T = fixture_ids(&exp, "ids", ids, 64), V = m->cfg.vocab_size;
    for (int t = 0; t < T; t++) pos[t] = t, seg[t] = 1, tgt[t] = t + 1 < T ? ids[t + 1] : IGNORE_INDEX;
    model_alloc_grads(m);
    Plan *p;
    Err e = {0};
    EXPECT_MSG(plan_get(m, PLAN_TRAIN, 1, T, &p, &e) == ST_OK, "%s", e.msg);
    qwen3_set_inputs(m, p, ids, pos, seg, tgt, NULL);
    qwen3_forward(m, p);
    float *dev = be->alloc(be, (size_t)T * V * 4), *logits = xmalloc((size_t)T * V * 4);
    qwen3_logits(m, p, 0, T, dev);
    be->download(be, logits, dev, (size_t)T * V * 4);
    double err = rel_norm_err(logits, st_find(&exp, "logits")->data, (size_t)T * V);
    EXPECT_MSG(err <= 1e-5, "%s/%s logits rel err %.3g", name, bename, err);
    qwen3_ce_loss(m, p, 1.0f / (float)(T - 1), 1);
    float rows[64];
    be->download(be, rows, p->row_loss, (size_t)T * 4);
    double loss = 0;
    for (int t = 0; t < T - 1; t++) loss += rows[t];
    loss /= T - 1;
    double want = ((const float *)st_find(&exp, "loss")->data)[0];
    EXPECT_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "%s/%s loss %.9g vs %.9g", name, bename, loss, want);
    float *grads = xmalloc(m->tt.n_params * 4);
    be->download(be, grads, m->grads, m->tt.n_params * 4);
    int checked = 0;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *ti = &m->tt.t[i];
        char gname[160];
        snprintf(gname, sizeof gname, "grad.%s", ti->name);
        const StTensor *g = st_find(&exp, gname);
        EXPECT_MSG(g != NULL && g->numel == ti->numel, "fixture lacks %s", gname);
        if (!g) continue;
        double ge = rel_norm_err(grads + ti->goffset, g->data, ti->numel);
        EXPECT_MSG(ge <= TOL_GRAD, "%s/%s gradient of %s rel err %.3g", name, bename, ti->name, ge);
        checked++;
    }
    int in_fixture = 0;
    for (int i = 0; i < exp.n_tensors; i++) in_fixture += !strncmp(exp.tensors[i].name, "grad.", 5);
    EXPECT_MSG(checked == m->tt.n && checked == in_fixture, "%s: %d tensors, %d checked, %d gradients in the fixture",
               name, m->tt.n, checked, in_fixture);
    free(grads), free(logits);
    be->free(be, dev);
    st_close(&exp);
    model_free(m);
    backend_destroy(be);
}

// How far below the best logit `id` is at the last position of a full forward over ids (n)
// without a cache (0: it is the argmax).
static double recompute_shortfall(Model *m, const int32_t *ids, int n, int32_t id) {
    Err e = {0};
    Plan *p;
    int saved = m->plans.max_plans;
    m->plans.max_plans = 0;
    EXPECT(plan_get(m, PLAN_SCORE, 1, n, &p, &e) == ST_OK);
    m->plans.max_plans = saved;
    int32_t pos[64], seg[64];
    for (int t = 0; t < n; t++) pos[t] = t, seg[t] = 1;
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    int V = m->cfg.vocab_size;
    float *dev = m->be->alloc(m->be, (size_t)V * 4), *row = xmalloc((size_t)V * 4);
    qwen3_logits(m, p, n - 1, 1, dev);
    m->be->download(m->be, row, dev, (size_t)V * 4);
    float best = row[0];
    for (int v = 1; v < V; v++) best = fmaxf(best, row[v]);
    double d = (double)best - row[id];
    m->be->free(m->be, dev);
    free(row);
    return d;
}

// Greedy generation on the ring caches: the port's tokens (up to a near-tie), and every token the
// argmax of the engine's own full recomputation (within 1e-4 of it: rounding may flip a near-tie); one prompt alone with several prefill chunkings,
// and left-padded in a batch with a shorter prompt.
static void check_greedy(const char *name, const char *bename) {
    Backend *be;
    StSet exp;
    Model *m = load(name, bename, &be, &exp);
    if (!m) return;
    int32_t prompt[64], want[64];
    int P = fixture_ids(&exp, "greedy_prompt", prompt, 64), n = fixture_ids(&exp, "greedy", want, 64);
    const float *gap = st_find(&exp, "greedy_gap")->data;
    int trusted = 0;  // steps before the first near-tie
    while (trusted < n && gap[trusted] >= 1e-3f) trusted++;
    int min_window = 1 << 30;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->cfg.layer_window[l] > 0) min_window = MIN(min_window, m->cfg.layer_window[l]);
    EXPECT_MSG(P > min_window && min_window < (1 << 30), "%s: prompt %d, smallest window %d", name, P, min_window);
    int chunks[3] = {0, 3, 7};  // the engine's default; chunks shorter and longer than the windows
    for (int c = 0; c < 3; c++) {
        GenConfig gc;
        gen_config_default(&gc);
        gc.max_new_tokens = n;
        gc.ignore_eos = 1;
        gc.batch_size = 2;
        if (chunks[c]) gc.pad_to_multiple_of = 1, gc.prefill_chunk_size = chunks[c];
        const int32_t *prompts[2] = {prompt, prompt + 4};
        int lens[2] = {P, P - 4};  // the second row: left-padded by 4 in the batch
        GenSeq *out = NULL;
        GenStats st;
        Err e = {0};
        EXPECT_MSG(gen_generate(m, &gc, prompts, lens, 2, &out, &st, &e) == ST_OK, "%s", e.msg);
        if (!out) continue;
        EXPECT(out[0].n == n && out[1].n == n);
        int agree = 0;
        while (agree < trusted && out[0].ids[agree] == want[agree]) agree++;
        EXPECT_MSG(agree == trusted, "%s/%s chunk %d: greedy token %d is %d, the port's %d (%d steps before a near-tie)",
                   name, bename, chunks[c], agree, agree < n ? out[0].ids[agree] : -1, agree < n ? want[agree] : -1,
                   trusted);
        for (int r = 0; r < 2; r++) {
            int32_t seq[64];
            memcpy(seq, prompts[r], (size_t)lens[r] * 4);
            int bad = -1;
            for (int i = 0; i < out[r].n && bad < 0; i++) {
                if (recompute_shortfall(m, seq, lens[r] + i, out[r].ids[i]) > 1e-4) bad = i;  // a near-tie may flip
                seq[lens[r] + i] = out[r].ids[i];
            }
            EXPECT_MSG(bad < 0, "%s/%s chunk %d row %d: token %d differs from full recomputation", name, bename,
                       chunks[c], r, bad);
        }
        gen_seqs_free(out, 2);
    }
    st_close(&exp);
    model_free(m);
    backend_destroy(be);
}

// A sliding layer's cache is a ring of its window; a global layer's holds every slot.
static void test_ring_cache_size(void) {
    Backend *be;
    StSet exp;
    Model *m = load("gemma3_text", "cpu", &be, &exp);
    if (!m) return;
    const ModelConfig *c = &m->cfg;
    int S = 256, B = 3;
    EXPECT(c->layer_window[0] == 4 && c->layer_window[1] == 0 && c->layer_window[2] == 4);
    EXPECT(plan_cache_slots(c, 0, S) == 4 && plan_cache_slots(c, 1, S) == S && plan_cache_slots(c, 2, S) == 4);
    size_t row = (size_t)c->num_key_value_heads * c->head_dim;
    EXPECT(plan_cache_floats(c, B, S) == (size_t)B * row * (4 + S + 4));
    EXPECT(plan_cache_offset(c, 2, B, S) == (size_t)B * row * (4 + S));
    EXPECT(plan_cache_slots(c, 0, 3) == 3);  // a window longer than the cache: the plain cache
    st_close(&exp);
    model_free(m);
    backend_destroy(be);
}

// config.json: the fields each family reads, its defaults, and refusals naming the field.
static Status parse(const char *text, ModelConfig *c, Err *e) { return config_parse(text, strlen(text), "config.json", c, e); }

#define SIZES "\"vocab_size\":64,\"hidden_size\":16,\"intermediate_size\":32,\"num_hidden_layers\":4,"          \
              "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":8"

static void expect_refused(const char *text, const char *needle) {
    ModelConfig c;
    Err e = {0};
    Status st = parse(text, &c, &e);
    EXPECT_MSG(st != ST_OK && strstr(e.msg, needle), "expected an error naming %s, got %s", needle,
               st == ST_OK ? "success" : e.msg);
    if (st == ST_OK) config_free(&c);
}

static void test_configs(void) {
    ModelConfig c;
    Err e = {0};
    // mistral: sliding_window defaults to 4096 on every layer, null = global
    EXPECT_MSG(parse("{\"model_type\":\"mistral\"," SIZES "}", &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.layer_window[0] == 4096 && c.layer_window[3] == 4096 && !c.tie_word_embeddings && c.act == ACT_SILU);
    config_free(&c);
    EXPECT_MSG(parse("{\"model_type\":\"mistral\",\"sliding_window\":null," SIZES "}", &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.layer_window[0] == 0 && c.layer_window[3] == 0);
    config_free(&c);
    // gemma2: even layers slide, caps 50 / 30, query_pre_attn_scalar 256, tied, (1 + w), gelu
    EXPECT_MSG(parse("{\"model_type\":\"gemma2\"," SIZES "}", &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.layer_window[0] == 4096 && c.layer_window[1] == 0 && c.layer_window[2] == 4096 && c.layer_window[3] == 0);
    EXPECT(c.attn_softcap == 50 && c.final_softcap == 30 && fabs(c.query_scale - 1.0 / 16) < 1e-15);
    EXPECT(c.tie_word_embeddings && c.norm_plus_one && c.act == ACT_GELU_TANH && c.embed_scale == 4.0f);
    config_free(&c);
    EXPECT_MSG(parse("{\"model_type\":\"gemma2\",\"attn_logit_softcapping\":null,\"final_logit_softcapping\":null,"
                     "\"layer_types\":[\"full_attention\",\"sliding_attention\",\"full_attention\",\"full_attention\"],"
                     "\"sliding_window\":7," SIZES "}",
                     &c, &e) == ST_OK,
               "%s", e.msg);
    EXPECT(c.attn_softcap == 0 && c.final_softcap == 0 && c.layer_window[0] == 0 && c.layer_window[1] == 7);
    config_free(&c);
    // gemma3_text: pattern 6 by default (layers 0-3 of 4 slide), local RoPE on sliding layers only
    EXPECT_MSG(parse("{\"model_type\":\"gemma3_text\",\"sliding_window_pattern\":2," SIZES "}", &c, &e) == ST_OK, "%s",
               e.msg);
    EXPECT(c.layer_window[0] == 4096 && c.layer_window[1] == 0 && c.layer_rope[0] == 1 && c.layer_rope[1] == 0);
    EXPECT(c.rope_local_theta == 10000 && c.attn_softcap == 0 && c.final_softcap == 0 && c.qk_norm == QKNORM_HEAD);
    config_free(&c);
    expect_refused("{\"model_type\":\"gemma2\",\"hidden_activation\":\"gelu\"," SIZES "}", "hidden_activation");
    expect_refused("{\"model_type\":\"gemma2\",\"layer_types\":[\"full_attention\"]," SIZES "}", "layer_types");
    expect_refused("{\"model_type\":\"gemma3_text\",\"layer_types\":[\"a\",\"b\",\"c\",\"d\"]," SIZES "}",
                   "layer_types[0]");
    expect_refused("{\"model_type\":\"gemma3_text\",\"use_bidirectional_attention\":true," SIZES "}",
                   "use_bidirectional_attention");
    expect_refused("{\"model_type\":\"gemma2\",\"final_logit_softcapping\":-1," SIZES "}", "final_logit_softcapping");
    expect_refused("{\"model_type\":\"mistral\",\"query_pre_attn_scalar\":4," SIZES "}", "query_pre_attn_scalar");
    expect_refused("{\"model_type\":\"mistral\",\"sliding_window\":0," SIZES "}", "sliding_window");
}

static void test_mistral_ref(void) { check_torch("mistral", "ref"); }
static void test_mistral_cpu(void) { check_torch("mistral", "cpu"); }
static void test_gemma2_ref(void) { check_torch("gemma2", "ref"); }
static void test_gemma2_cpu(void) { check_torch("gemma2", "cpu"); }
static void test_gemma3_ref(void) { check_torch("gemma3_text", "ref"); }
static void test_gemma3_cpu(void) { check_torch("gemma3_text", "cpu"); }
static void test_greedy_cpu(void) {
    for (size_t i = 0; i < ARRAY_LEN(models); i++) check_greedy(models[i], "cpu");
}

int main(void) {
    RUN(test_configs);
    RUN(test_mistral_ref);
    RUN(test_mistral_cpu);
    RUN(test_gemma2_ref);
    RUN(test_gemma2_cpu);
    RUN(test_gemma3_ref);
    RUN(test_gemma3_cpu);
    RUN(test_greedy_cpu);
    RUN(test_ring_cache_size);
    TEST_MAIN_END();
}
