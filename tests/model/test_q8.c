// test_q8.c: Q8_0 weights (--dtype q8_0). The quantizer against ggml's reference semantics (a
// hand-made block whose halves round away from zero; every matrix of tests/data/q8/qwen3 against
// scripts/ref_q8.py's blocks, bit for bit); the model's logits on ref and cpu against PyTorch
// (float64) run on the dequantized weights, norm-wise relative error <= 1e-5, at T = 20 (the
// panel + sgemm path) and T = 5 (the decode-sized kernel); refusals: q8_0 weights to train, and
// rows that are not whole blocks.
#include "test.h"

#include "core/alloc.h"
#include "core/dtype.h"
#include "model/qwen3.h"
#include "model/safetensors.h"

static const char *DIR_Q8 = "tests/data/q8/qwen3";
static const char *backends[] = {"ref", "cpu"};

static double rel_norm_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

// amax 127 gives d = 1 exactly: q = round(x) with halves away from zero (2.5 -> 3, -0.5 -> -1).
static void test_quantize_block(void) {
    float x[64] = {127.0f, 2.5f, -0.5f, 0.5f, -63.5f, 1.49f, -126.6f, 0.0f};
    for (int j = 8; j < 32; j++) x[j] = (float)(j - 20) * 1.25f;  // 1.25 * k: some halves
    // second block: all zero (d = 0, q = 0)
    BlockQ8_0 b[2];
    q8_0_quantize(b, x, 64);
    EXPECT(f16_to_f32(b[0].d) == 1.0f);
    int want[8] = {127, 3, -1, 1, -64, 1, -127, 0};
    for (int j = 0; j < 8; j++) EXPECT_MSG(b[0].qs[j] == want[j], "q[%d] = %d, want %d", j, b[0].qs[j], want[j]);
    for (int j = 8; j < 32; j++) {
        float v = (float)(j - 20) * 1.25f;
        int r = (int)(v < 0 ? -floor(-v + 0.5) : floor(v + 0.5));
        EXPECT_MSG(b[0].qs[j] == r, "q[%d] = %d, want %d", j, b[0].qs[j], r);
    }
    EXPECT(b[1].d == 0);
    for (int j = 0; j < 32; j++) EXPECT(b[1].qs[j] == 0);
    // dequantizing and quantizing again gives the same blocks (files convert without loss)
    float back[64];
    dtype_convert(back, DT_F32, b, DT_Q8_0, 64);
    BlockQ8_0 b2[2];
    dtype_convert(b2, DT_Q8_0, back, DT_F32, 64);
    EXPECT(memcmp(b, b2, sizeof b) == 0);
}

// Every matrix's blocks equal the reference quantizer's.
static void check_blocks(Model *m, const StSet *exp, const char *bename) {
    Backend *be = m->be;
    int checked = 0;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *t = &m->tt.t[i];
        if (!t->is_matrix) continue;
        EXPECT_MSG(t->dtype == DT_Q8_0, "%s stored as %s", t->name, dtype_st_name(t->dtype));
        char dn[140], qn[140];
        snprintf(dn, sizeof dn, "q8.%s.d", t->name);
        snprintf(qn, sizeof qn, "q8.%s.q", t->name);
        const StTensor *d = st_find(exp, dn), *q = st_find(exp, qn);
        EXPECT_MSG(d && q, "fixture lacks %s", dn);
        if (!d || !q) continue;
        size_t nb = t->numel / Q8_0_BLOCK;
        BlockQ8_0 *host = xmalloc(nb * sizeof(BlockQ8_0));
        be->download(be, host, model_data(m, t), dtype_bytes(DT_Q8_0, t->numel));
        size_t bad = 0;
        for (size_t b = 0; b < nb; b++) {
            if (f16_to_f32(host[b].d) != ((const float *)d->data)[b]) bad++;
            for (int j = 0; j < Q8_0_BLOCK; j++)
                if (host[b].qs[j] != (int)((const float *)q->data)[b * Q8_0_BLOCK + j]) bad++;
        }
        EXPECT_MSG(bad == 0, "%s/%s: %zu of %zu scales and quants differ from the reference", bename, t->name, bad,
                   nb * (Q8_0_BLOCK + 1));
        free(host);
        checked++;
    }
    EXPECT(checked >= 15);  // embedding + 7 per layer x 2 layers
}

// Logits of the first T ids against the fixture's first T rows (causal: the same values).
static void check_logits(Model *m, const StSet *exp, int T, const char *bename) {
    Backend *be = m->be;
    int V = m->cfg.vocab_size;
    const StTensor *ids_t = st_find(exp, "ids");
    int32_t ids[64], pos[64], seg[64], tgt[64];
    for (int t = 0; t < T; t++) {
        ids[t] = (int32_t)((const float *)ids_t->data)[t];
        pos[t] = t;
        seg[t] = 1;
        tgt[t] = IGNORE_INDEX;
    }
    Err e = {0};
    Plan *p;
    EXPECT_MSG(plan_get(m, PLAN_SCORE, 1, T, &p, &e) == ST_OK, "%s", e.msg);
    qwen3_set_inputs(m, p, ids, pos, seg, tgt, NULL);
    qwen3_forward(m, p);
    float *dev = be->alloc(be, (size_t)T * V * sizeof(float)), *logits = xmalloc((size_t)T * V * sizeof(float));
    qwen3_logits(m, p, 0, T, dev);
    be->download(be, logits, dev, (size_t)T * V * sizeof(float));
    double err = rel_norm_err(logits, st_find(exp, "logits")->data, (size_t)T * V);
    double off = rel_norm_err(logits, st_find(exp, "logits_f32")->data, (size_t)T * V);
    EXPECT_MSG(err <= 1e-5, "%s T=%d: q8_0 logits rel err %.3g against the dequantized reference", bename, T, err);
    EXPECT_MSG(off > 1e-4, "%s T=%d: q8_0 logits only %.3g from the fp32 model's: were the weights quantized?", bename,
               T, off);
    be->free(be, dev);
    free(logits);
}

static void test_logits_torch(void) {
    Err e = {0};
    StSet exp;
    char path[256];
    snprintf(path, sizeof path, "%s/expected.safetensors", DIR_Q8);
    EXPECT_MSG(st_open(path, &exp, &e) == ST_OK, "%s", e.msg);
    for (size_t b = 0; b < ARRAY_LEN(backends); b++) {
        Backend *be;
        EXPECT(backend_create(backends[b], 2, &be, &e) == ST_OK);
        Model *m = NULL;
        EXPECT_MSG(model_load_frozen(DIR_Q8, be, DT_Q8_0, &m, &e) == ST_OK, "%s", e.msg);
        if (m) {
            EXPECT(m->matrix_dtype == DT_Q8_0 && m->mapped_bytes < m->tt.param_bytes);
            check_blocks(m, &exp, backends[b]);
            check_logits(m, &exp, 20, backends[b]);
            check_logits(m, &exp, 5, backends[b]);
        }
        model_free(m);
        backend_destroy(be);
    }
    st_close(&exp);
}

static void test_refusals(void) {
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    Status st = model_load(DIR_Q8, be, DT_Q8_0, &m, &e);  // writable: what a trainer loads
    EXPECT(st != ST_OK && m == NULL);
    EXPECT_STR_CONTAINS(e.msg, "q8_0 weights cannot be trained");
    e = (Err){0};
    st = model_load_frozen("tests/data/models/qwen3_tied", be, DT_Q8_0, &m, &e);  // hidden 48
    EXPECT(st != ST_OK && m == NULL);
    EXPECT_STR_CONTAINS(e.msg, "has rows of 48 elements");
    EXPECT_STR_CONTAINS(e.msg, "model.embed_tokens.weight");
    backend_destroy(be);
}

int main(void) {
    RUN(test_quantize_block);
    RUN(test_logits_torch);
    RUN(test_refusals);
    TEST_MAIN_END();
}
