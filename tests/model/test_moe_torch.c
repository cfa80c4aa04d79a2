// test_moe_torch.c: the mixture-of-experts families against their PyTorch ports
// (scripts/ref_moe.py, float64): qwen3_moe with a dense layer (mlp_only_layers), qwen3_moe with
// decoder_sparse_step 2 and renormalised top-3 of 6, mixtral, gpt_oss (scripts/ref_gpt_oss.py:
// sinks, sliding and full layers, YaRN, biased router and experts, the clamped SwiGLU; its
// experts' gradients compared in the checkpoint's layout). Per model and backend: logits,
// the cross-entropy, the load-balancing loss (load_balancing_loss_func) and every parameter's
// gradient of ce + router_aux_loss_coef * aux, the router and every expert included; the same
// with gradient checkpointing; greedy generation on the KV cache against full recomputation;
// and --moe_capacity_factor: a factor of E / K drops nothing and gives the exact logits, a small
// one drops choices (counted) and changes them; one token reads only its K experts per layer.
//
// Tolerances, norm-wise relative error per tensor of fp32 compute against float64, as
// test_torch_parity.c: logits and losses 1e-5, gradients 2e-5. The fixtures keep every token's
// K-th and (K+1)-th router logits at least 1e-3 apart (the script checks), far beyond fp32
// rounding, so the engine routes every token as PyTorch does.
#include "test.h"

#include "core/alloc.h"
#include "gen/generate.h"
#include "model/qwen3.h"
#include "model/safetensors.h"

#define TOL_GRAD 2e-5

static const char *models[] = {"qwen3_moe", "qwen3_moe_step2", "mixtral", "gpt_oss"};
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

typedef struct {
    Backend *be;
    Model *m;
    StSet exp;
    int T;
    int32_t ids[64], pos[64], seg[64], tgt[64];
} Case;

static int open_case(Case *c, const char *name, const char *bename) {
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "tests/data/models/%s", name);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    Err e = {0};
    memset(c, 0, sizeof *c);
    EXPECT_MSG(backend_create(bename, 2, &c->be, &e) == ST_OK, "%s", e.msg);
    if (!c->be) return 0;
    EXPECT_MSG(model_load(dir, c->be, DT_F32, &c->m, &e) == ST_OK, "%s: %s", name, e.msg);
    EXPECT_MSG(st_open(path, &c->exp, &e) == ST_OK, "%s", e.msg);
    if (!c->m || !c->exp.n_tensors) return 0;
    const StTensor *ids_t = st_find(&c->exp, "ids");
    c->T = (int)ids_t->numel;
    for (int t = 0; t < c->T; t++) {
        c->ids[t] = (int32_t)((const float *)ids_t->data)[t];
        c->pos[t] = t, c->seg[t] = 1;
    }
    for (int t = 0; t < c->T; t++) c->tgt[t] = t + 1 < c->T ? c->ids[t + 1] : IGNORE_INDEX;
    return 1;
}

static void close_case(Case *c) {
    st_close(&c->exp);
    model_free(c->m);
    backend_destroy(c->be);
}

static double expect_scalar(const Case *c, const char *key) { return ((const float *)st_find(&c->exp, key)->data)[0]; }

// Logits (T,V) of the case's sequence through a SCORE plan.
static float *score_logits(Case *c) {
    Err e = {0};
    Model *m = c->m;
    Plan *p;
    EXPECT(plan_get(m, PLAN_SCORE, 1, c->T, &p, &e) == ST_OK);
    qwen3_set_inputs(m, p, c->ids, c->pos, c->seg, NULL, NULL);
    qwen3_forward(m, p);
    int V = m->cfg.vocab_size;
    float *dev = c->be->alloc(c->be, (size_t)c->T * V * 4), *out = xmalloc((size_t)c->T * V * 4);
    qwen3_logits(m, p, 0, c->T, dev);
    c->be->download(c->be, out, dev, (size_t)c->T * V * 4);
    c->be->free(c->be, dev);
    return out;
}

static void check_train(const char *name, const char *bename, int ckpt) {
    Case c;
    if (!open_case(&c, name, bename)) return;
    Model *m = c.m;
    Err e = {0};
    int T = c.T, V = m->cfg.vocab_size;
    m->grad_ckpt = ckpt;
    model_alloc_grads(m);
    Plan *p;
    EXPECT(plan_get(m, PLAN_TRAIN, 1, T, &p, &e) == ST_OK);
    qwen3_set_inputs(m, p, c.ids, c.pos, c.seg, c.tgt, NULL);
    qwen3_forward(m, p);
    float *dev = c.be->alloc(c.be, (size_t)T * V * 4), *logits = xmalloc((size_t)T * V * 4);
    qwen3_logits(m, p, 0, T, dev);
    c.be->download(c.be, logits, dev, (size_t)T * V * 4);
    double err = rel_norm_err(logits, st_find(&c.exp, "logits")->data, (size_t)T * V);
    EXPECT_MSG(err <= 1e-5, "%s/%s logits rel err %.3g", name, bename, err);
    double aux = qwen3_moe_aux_loss(m, p), want_aux = expect_scalar(&c, "aux_loss");
    EXPECT_MSG(fabs(aux - want_aux) <= 1e-5 * want_aux, "%s/%s aux loss %.9g vs %.9g", name, bename, aux, want_aux);
    m->moe_aux_scale = 1.0;
    qwen3_ce_loss(m, p, 1.0f / (float)(T - 1), 1);
    float rows[64];
    c.be->download(c.be, rows, p->row_loss, (size_t)T * sizeof(float));
    double ce = 0;
    for (int t = 0; t < T - 1; t++) ce += rows[t];
    ce /= T - 1;
    double want_ce = expect_scalar(&c, "ce_loss");
    EXPECT_MSG(fabs(ce - want_ce) <= 1e-5 * want_ce, "%s/%s ce %.9g vs %.9g", name, bename, ce, want_ce);
    double want = expect_scalar(&c, "loss"), total = ce + m->cfg.router_aux_loss_coef * aux;
    EXPECT_MSG(fabs(total - want) <= 1e-5 * want, "%s/%s loss %.9g vs %.9g", name, bename, total, want);
    float *grads = xmalloc(m->tt.n_params * sizeof(float));
    c.be->download(c.be, grads, m->grads, m->tt.n_params * sizeof(float));
    int n_checked = 0, n_experts = 0;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *ti = &m->tt.t[i];
        char gname[128];
        snprintf(gname, sizeof gname, "grad.%s", ti->name);
        const StTensor *g = st_find(&c.exp, gname);
        EXPECT_MSG(g != NULL, "fixture lacks %s", gname);
        if (!g) continue;
        float *hf = xmalloc(ti->numel * sizeof(float));
        tensors_to_hf(ti, hf, grads + ti->goffset);  // the checkpoint's layout (gpt_oss experts)
        double ge = g->numel == ti->numel ? rel_norm_err(hf, g->data, ti->numel) : INFINITY;
        free(hf);
        EXPECT_MSG(ge <= TOL_GRAD, "%s/%s%s gradient of %s rel err %.3g", name, bename, ckpt ? " ckpt" : "", ti->name, ge);
        n_checked++;
        n_experts += ti->kind == TK_EXP_G || ti->kind == TK_XGU;
    }
    EXPECT(n_checked == m->tt.n && n_checked == c.exp.n_tensors - 5 && n_experts > 0);
    free(grads), free(logits);
    c.be->free(c.be, dev);
    close_case(&c);
}

static void test_train_parity(void) {
    for (size_t b = 0; b < ARRAY_LEN(backends); b++)
        for (size_t i = 0; i < ARRAY_LEN(models); i++) check_train(models[i], backends[b], 0);
    check_train("qwen3_moe", "cpu", 1);
    check_train("mixtral", "cpu", 1);
    check_train("gpt_oss", "cpu", 1);
}

// Greedy generation on the KV cache: every token is the argmax of a full recomputation.
static void check_generate(const char *name) {
    Case c;
    if (!open_case(&c, name, "cpu")) return;
    Model *m = c.m;
    GenConfig g;
    gen_config_default(&g);
    g.max_new_tokens = 12;
    g.ignore_eos = 1;
    g.batch_size = 2;
    g.prefill_chunk_size = 8;
    int lens[2] = {c.T, 7};
    const int32_t *prompts[2] = {c.ids, c.ids + 5};
    GenSeq *out = NULL;
    Err e = {0};
    EXPECT_MSG(gen_generate(m, &g, prompts, lens, 2, &out, NULL, &e) == ST_OK, "%s", e.msg);
    int V = m->cfg.vocab_size;
    for (int r = 0; out && r < 2; r++) {
        int n = lens[r] + out[r].n - 1, bad = 0;
        Case rc = c;  // the same model; recompute over prompt + generated tokens
        memcpy(rc.ids, prompts[r], (size_t)lens[r] * 4);
        memcpy(rc.ids + lens[r], out[r].ids, (size_t)(out[r].n - 1) * 4);
        rc.T = n;
        for (int t = 0; t < n; t++) rc.pos[t] = t, rc.seg[t] = 1;
        float *lg = score_logits(&rc);
        for (int i = 0; i < out[r].n; i++) {
            const float *row = lg + (size_t)(lens[r] - 1 + i) * V;
            int am = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[am]) am = v;
            bad += am != out[r].ids[i] && row[am] - row[out[r].ids[i]] > 1e-4;
        }
        EXPECT_MSG(out[r].n == 12 && bad == 0, "%s row %d: %d of %d greedy tokens differ from recomputation", name, r,
                   bad, out[r].n);
        free(lg);
    }
    if (out) gen_seqs_free(out, 2);
    close_case(&c);
}

static void test_generate_matches_recompute(void) {
    for (size_t i = 0; i < ARRAY_LEN(models); i++) check_generate(models[i]);
}

// --moe_capacity_factor: E / K can never drop (capacity >= N); 0.5 drops and moves the logits.
static void test_capacity_factor(void) {
    Case c;
    if (!open_case(&c, "qwen3_moe", "cpu")) return;
    Model *m = c.m;
    const float *want = st_find(&c.exp, "logits")->data;
    size_t n = (size_t)c.T * m->cfg.vocab_size;
    m->moe_capacity_factor = (double)m->cfg.num_experts / m->cfg.num_experts_per_tok;
    float *lg = score_logits(&c);
    double err = rel_norm_err(lg, want, n);
    EXPECT_MSG(err <= 1e-5, "capacity factor E/K: logits rel err %.3g", err);
    Plan *p;
    Err e = {0};
    EXPECT(plan_get(m, PLAN_SCORE, 1, c.T, &p, &e) == ST_OK);
    int32_t dropped = -1;
    c.be->download(c.be, &dropped, p->layers[0].moe.dropped, sizeof dropped);
    EXPECT_MSG(dropped == 0, "capacity factor E/K dropped %d choices", dropped);
    free(lg);
    m->moe_capacity_factor = 0.5;  // capacity ceil(0.5 * 20 * 2 / 8) = 3 of 40 choices over 8 experts
    lg = score_logits(&c);
    c.be->download(c.be, &dropped, p->layers[2].moe.dropped, sizeof dropped);  // the last sparse layer
    EXPECT_MSG(dropped >= 40 - 8 * 3, "capacity 3: %d of 40 choices dropped, expected at least 16", dropped);
    err = rel_norm_err(lg, want, n);
    EXPECT_MSG(err > 1e-3, "capacity 3 leaves the logits unchanged (rel err %.3g)", err);
    free(lg);
    close_case(&c);
}

// One token (batch-1 decode's shape) reads only its K experts per layer: with every other
// expert's weights set to NaN the logits are the same bits (a kernel that read or weighted an
// unrouted expert, even by 0, would turn them NaN).
static void test_one_token_reads_routed_experts(void) {
    for (size_t mi = 0; mi < ARRAY_LEN(models); mi++)
        for (size_t b = 0; b < ARRAY_LEN(backends); b++) {
            Case c;
            if (!open_case(&c, models[mi], backends[b])) continue;
            Model *m = c.m;
            c.T = 1;
            Plan *p;
            Err e = {0};
            EXPECT(plan_get(m, PLAN_TRAIN, 1, 1, &p, &e) == ST_OK);  // every layer's routing kept
            float *before = score_logits(&c);
            qwen3_set_inputs(m, p, c.ids, c.pos, c.seg, NULL, NULL);
            qwen3_forward(m, p);
            int E = m->cfg.num_experts, K = m->cfg.num_experts_per_tok, poisoned = 0;
            for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
                if (!m->cfg.layer_moe[l]) continue;
                int32_t idx[64];
                c.be->download(c.be, idx, p->layers[l].moe.idx, (size_t)K * sizeof(int32_t));
                // an expert's weights: entry first + x of a run, or block x of a fused tensor (gpt_oss)
                TensorKind kinds[7] = {TK_EXP_G, TK_EXP_U, TK_EXP_D, TK_XGU, TK_XGU_B, TK_XD, TK_XD_B};
                for (int k = 0; k < 7; k++) {
                    int first = c.m->tt.index[(size_t)l * TK_COUNT + kinds[k]];
                    if (first < 0) continue;
                    int fused = kinds[k] >= TK_XGU;
                    for (int x = 0; x < E; x++) {
                        int used = 0;
                        for (int j = 0; j < K; j++) used |= idx[j] == x;
                        if (used) continue;
                        const TensorInfo *t = &m->tt.t[fused ? first : first + x];
                        size_t n = fused ? t->numel / E : t->numel;
                        float *nan = xmalloc(n * sizeof(float));
                        for (size_t i = 0; i < n; i++) nan[i] = NAN;
                        c.be->upload(c.be, (float *)m->data[fused ? first : first + x] + (fused ? (size_t)x * n : 0),
                                     nan, n * sizeof(float));
                        free(nan);
                        poisoned++;
                    }
                }
            }
            float *after = score_logits(&c);
            EXPECT_MSG(poisoned > 0 && !memcmp(before, after, (size_t)m->cfg.vocab_size * sizeof(float)),
                       "%s/%s: %d unrouted experts set to NaN change the logits", models[mi], backends[b], poisoned);
            free(before), free(after);
            close_case(&c);
        }
}

// gpt_oss loaded frozen (cpu: tensors used in place from the mapping, the transposed experts
// copied) gives the fp32 logits; with bf16 weights (the transposed copies converted) it stays
// within bf16's rounding: 2^-9 relative per weight moves these logits by about 1e-2.
static void test_gpt_oss_frozen_and_bf16(void) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        Case c;
        if (!open_case(&c, "gpt_oss", "cpu")) return;
        model_free(c.m);
        Err e = {0};
        c.m = NULL;
        EXPECT_MSG(model_load_frozen("tests/data/models/gpt_oss", c.be, bf16 ? DT_BF16 : DT_F32, &c.m, &e) == ST_OK, "%s",
                   e.msg);
        if (!c.m) {
            close_case(&c);
            return;
        }
        EXPECT(bf16 || c.m->mapped_bytes > 0);
        float *lg = score_logits(&c);
        double err = rel_norm_err(lg, st_find(&c.exp, "logits")->data, (size_t)c.T * c.m->cfg.vocab_size);
        EXPECT_MSG(err <= (bf16 ? 5e-2 : 1e-5), "gpt_oss frozen%s: logits rel err %.3g", bf16 ? " bf16" : "", err);
        free(lg);
        close_case(&c);
    }
}

int main(void) {
    RUN(test_train_parity);
    RUN(test_generate_matches_recompute);
    RUN(test_capacity_factor);
    RUN(test_one_token_reads_routed_experts);
    RUN(test_gpt_oss_frozen_and_bf16);
    TEST_MAIN_END();
}
