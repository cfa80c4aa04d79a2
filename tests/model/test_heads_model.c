// test_heads_model.c: the model-level heads (qwen3_logprob with coefficients, qwen3_distill_loss)
// back-propagate through a whole tiny model: for every parameter tensor, the entry with the
// largest gradient is checked against a central finite difference of the loss. Reference
// backend (double accumulation, fp32 activations): with a step of 3e-3 the difference quotient's
// fp32 noise and O(eps^2) term are ~1e-4 of these largest entries, so 1e-2 relative is a loose
// but failing-when-wrong bound (a missing temperature or a wrong mixture term is off by O(1)).
#include "test.h"

#include "core/alloc.h"
#include "model/qwen3.h"

#define B 2
#define T 6
#define N (B * T)

static Model *load(Backend *be, const char *name) {
    char dir[128];
    snprintf(dir, sizeof dir, "tests/data/models/%s", name);
    Err e = {0};
    Model *m = NULL;
    EXPECT_MSG(model_load(dir, be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    return m;
}

static void inputs(int32_t *ids, int32_t *pos, int32_t *seg, int32_t *tgt, float *w, int V) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            int pad = b == 1 && t < 2;  // row 1 left-padded by two
            ids[i] = (int32_t)((i * 37 + 11) % V);
            pos[i] = pad ? 0 : t - (b == 1 ? 2 : 0);
            seg[i] = pad ? 0 : 1;
            tgt[i] = pad || t == T - 1 ? IGNORE_INDEX : (int32_t)((i * 53 + 7) % V);
            w[i] = 0.5f + 0.25f * (i % 3);
        }
}

typedef struct {
    Model *m, *mt;
    Plan *p, *pt;
    int mode;  // 0 logprob, 1 distill
    float coef[N], *dev_coef, *dev_out;
    float tau, beta, grad_scale;
    int top_k;
} Ctx;

// The loss by a forward pass only.
static double loss(Ctx *c) {
    Backend *be = c->m->be;
    qwen3_forward(c->m, c->p);
    float rows[N];
    double acc = 0;
    if (c->mode == 0) {
        qwen3_logprob(c->m, c->p, c->tau, NULL, c->dev_out);
        be->download(be, rows, c->dev_out, sizeof rows);
        for (int i = 0; i < N; i++) acc += (double)c->coef[i] * rows[i];
    } else {
        qwen3_distill_loss(c->m, c->p, c->mt, c->pt, c->tau, c->beta, c->top_k, c->grad_scale, 0, NULL);
        be->download(be, rows, c->p->row_loss, sizeof rows);
        for (int i = 0; i < N; i++) acc += rows[i];
        acc *= c->grad_scale;
    }
    return acc;
}

static void check_grads(Ctx *c, const char *what) {
    Model *m = c->m;
    Backend *be = m->be;
    be->zero(be, m->grads, m->tt.n_params * sizeof(float));
    qwen3_forward(m, c->p);
    if (c->mode == 0)
        qwen3_logprob(m, c->p, c->tau, c->dev_coef, c->dev_out);
    else
        qwen3_distill_loss(m, c->p, c->mt, c->pt, c->tau, c->beta, c->top_k, c->grad_scale, 1, NULL);
    float *g = xmalloc(m->tt.n_params * sizeof(float));
    be->download(be, g, m->grads, m->tt.n_params * sizeof(float));
    double worst = 0;
    const char *worst_name = "";
    int checked = 0;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *ti = &m->tt.t[i];
        size_t best = 0;
        for (size_t j = 0; j < ti->numel; j++)
            if (fabsf(g[ti->goffset + j]) > fabsf(g[ti->goffset + best])) best = j;
        double ana = g[ti->goffset + best];
        if (ana == 0) continue;  // e.g. a bias the model does not have
        float *x = (float *)((char *)m->params + ti->offset) + best, x0 = *x, eps = 3e-3f;
        *x = x0 + eps;
        double lp = loss(c);
        *x = x0 - eps;
        double lm = loss(c);
        *x = x0;
        double num = (lp - lm) / ((double)(x0 + eps) - (double)(x0 - eps));
        double err = fabs(num - ana) / fmax(fabs(ana), fabs(num));
        if (err > worst) worst = err, worst_name = ti->name;
        checked++;
    }
    if (getenv("OPS_VERBOSE")) printf("  %-28s %d tensors, worst rel err %.2e (%s)\n", what, checked, worst, worst_name);
    EXPECT_MSG(worst < 1e-2 && checked >= 10, "%s: %d tensors, worst rel err %.3g in %s", what, checked, worst,
               worst_name);
    free(g);
}

static void test_model_heads(void) {
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("ref", 1, &be, &e) == ST_OK);
    Model *m = load(be, "qwen3_untied"), *mt = load(be, "qwen3_tied");
    if (!m || !mt) return;
    model_alloc_grads(m);
    int V = m->cfg.vocab_size;
    int32_t ids[N], pos[N], seg[N], tgt[N];
    float w[N];
    inputs(ids, pos, seg, tgt, w, V);
    Ctx c = {.m = m, .mt = mt, .tau = 0.8f, .beta = 0.5f, .grad_scale = 0.4f};
    EXPECT(plan_get(m, PLAN_TRAIN, B, T, &c.p, &e) == ST_OK);
    EXPECT(plan_get(mt, PLAN_SCORE, B, T, &c.pt, &e) == ST_OK);
    qwen3_set_inputs(m, c.p, ids, pos, seg, tgt, w);
    qwen3_set_inputs(mt, c.pt, ids, pos, seg, tgt, NULL);
    qwen3_forward(mt, c.pt);  // the teacher's forward, once
    for (int i = 0; i < N; i++) c.coef[i] = (float)((i % 5) - 2) * 0.3f + 0.1f;
    c.dev_coef = be->alloc(be, sizeof c.coef);
    c.dev_out = be->alloc(be, N * sizeof(float));
    be->upload(be, c.dev_coef, c.coef, sizeof c.coef);
    c.mode = 0;
    check_grads(&c, "logprob tau 0.8");
    c.mode = 1;
    check_grads(&c, "distill beta 0.5 tau 0.8");
    c.beta = 1.0f, c.tau = 1.0f, c.top_k = 20;
    check_grads(&c, "distill beta 1 top-20");
    c.beta = 0.0f, c.tau = 1.2f, c.top_k = 0;
    check_grads(&c, "distill beta 0 tau 1.2");
    // row_kl: 0 on masked rows, >= 0 elsewhere, and the same whatever beta / tau / top_k
    float kl1[N], kl2[N];
    float *dev_kl = be->alloc(be, N * sizeof(float));
    qwen3_forward(m, c.p);
    qwen3_distill_loss(m, c.p, mt, c.pt, 1.2f, 0.0f, 0, 1.0f, 0, dev_kl);
    be->download(be, kl1, dev_kl, sizeof kl1);
    qwen3_distill_loss(m, c.p, mt, c.pt, 0.7f, 0.3f, 5, 1.0f, 0, dev_kl);
    be->download(be, kl2, dev_kl, sizeof kl2);
    for (int i = 0; i < N; i++) {
        EXPECT(kl1[i] == kl2[i]);
        EXPECT(tgt[i] == IGNORE_INDEX ? kl1[i] == 0 : kl1[i] > 0);
    }
    be->free(be, c.dev_coef), be->free(be, c.dev_out), be->free(be, dev_kl);
    model_free(mt);
    model_free(m);
    backend_destroy(be);
}

int main(void) {
    RUN(test_model_heads);
    TEST_MAIN_END();
}
