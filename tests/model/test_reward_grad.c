// test_reward_grad.c: the gradient of the reward loss by finite differences. reward_bt_loss's own
// derivatives (margin, centering) in double; then the whole path on the reference backend — the
// tiny reward model of tests/data/reward, pairs with a margin, forward, pooling, score head,
// Bradley-Terry loss with centering, qwen3_cls_backward — against central differences of the
// loss in parameters of the score head, the embedding, a layer matrix and a norm.
#include "test.h"

#include "model/qwen3.h"
#include "train/reward.h"

static void test_bt_loss_derivatives(void) {
    double rc[3] = {0.3, -1.2, 2.0}, rr[3] = {0.5, -2.0, -0.1}, mg[3] = {0.2, -0.4, 0.7};
    double drc[3], drr[3];
    double L = reward_bt_loss(rc, rr, mg, 3, 1, 0.05, 0.5, drc, drr);
    // -log sigmoid(d) by hand for the first pair, and the centering term
    double want = 0;
    for (int i = 0; i < 3; i++) {
        double d = rc[i] - rr[i] - mg[i];
        want += log1p(exp(-d)) / 3 + 0.05 * (rc[i] + rr[i]) * (rc[i] + rr[i]) / 3;
    }
    EXPECT_MSG(fabs(L - want) < 1e-12, "loss %.15g vs %.15g", L, want);
    for (int i = 0; i < 3; i++) {
        const double h = 1e-6;
        double x[3], y[3];
        memcpy(x, rc, sizeof x), memcpy(y, rr, sizeof y);
        x[i] += h;
        double lp = reward_bt_loss(x, y, mg, 3, 1, 0.05, 1, NULL, NULL);
        x[i] -= 2 * h;
        double lm = reward_bt_loss(x, y, mg, 3, 1, 0.05, 1, NULL, NULL);
        EXPECT_MSG(fabs(0.5 * (lp - lm) / (2 * h) - drc[i]) < 1e-8, "d/drc[%d]: %.10g vs %.10g", i,
                   0.5 * (lp - lm) / (2 * h), drc[i]);
        memcpy(x, rc, sizeof x);
        y[i] += h;
        lp = reward_bt_loss(x, y, mg, 3, 1, 0.05, 1, NULL, NULL);
        y[i] -= 2 * h;
        lm = reward_bt_loss(x, y, mg, 3, 1, 0.05, 1, NULL, NULL);
        EXPECT_MSG(fabs(0.5 * (lp - lm) / (2 * h) - drr[i]) < 1e-8, "d/drr[%d]", i);
    }
}

// Two pairs: chosen rows 0-1, rejected rows 2-3, right-padded to T; a pad id (0) at the end of one.
enum { NP = 2, T = 12 };
static const int32_t seqs[2 * NP][T] = {{5, 17, 300, 42, 42, 7, 250, 0},
                                        {99, 1, 383, 64, 128},
                                        {12, 77, 200, 3, 150, 260, 31, 8, 9, 10, 11},
                                        {8, 8, 30}};
static const int lens[2 * NP] = {8, 5, 11, 3};
static const double margins[NP] = {0.3, -0.2};

static double loss_of(Model *m, Plan *p, int backward) {
    int32_t ids[2 * NP * T], pos[2 * NP * T], seg[2 * NP * T], rows[2 * NP];
    for (int r = 0; r < 2 * NP; r++)
        for (int t = 0; t < T; t++) {
            ids[r * T + t] = t < lens[r] ? seqs[r][t] : 0;
            pos[r * T + t] = t < lens[r] ? t : 0;
            seg[r * T + t] = t < lens[r];
        }
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    qwen3_cls_pool(ids, lens, 2 * NP, T, m->cfg.pad_token_id, rows);
    float sc[2 * NP];
    qwen3_cls_scores(m, p, rows, sc);
    double rc[NP], rr[NP], drc[NP], drr[NP];
    for (int b = 0; b < NP; b++) rc[b] = sc[b], rr[b] = sc[NP + b];
    double L = reward_bt_loss(rc, rr, margins, NP, 1, 0.1, 1, drc, drr);
    if (backward) {
        float ds[2 * NP];
        for (int b = 0; b < NP; b++) ds[b] = (float)drc[b], ds[NP + b] = (float)drr[b];
        qwen3_cls_backward(m, p, ds);
    }
    return L;
}

static void test_model_gradient(void) {
    Backend *be;
    Err e = {0};
    EXPECT_MSG(backend_create("ref", 1, &be, &e) == ST_OK, "%s", e.msg);
    Model *m = NULL;
    ModelLoadOpts lo = {.classifier = 1};
    EXPECT_MSG(model_load_opts("tests/data/reward/rm", be, DT_F32, &lo, &m, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    model_alloc_grads(m);
    be->zero(be, m->grads, m->tt.n_params * sizeof(float));
    Plan *p;
    EXPECT_MSG(plan_get(m, PLAN_TRAIN, 2 * NP, T, &p, &e) == ST_OK, "%s", e.msg);
    loss_of(m, p, 1);
    struct { const char *name; size_t idx; } probes[] = {
        {"score.weight", 0}, {"score.weight", 7}, {"score.weight", 40},
        {"model.embed_tokens.weight", 17 * 48 + 3}, {"model.embed_tokens.weight", 250 * 48 + 11},
        {"model.layers.0.self_attn.q_proj.weight", 100}, {"model.layers.1.mlp.down_proj.weight", 333},
        {"model.layers.1.input_layernorm.weight", 5}, {"model.norm.weight", 20},
    };
    int checked = 0;
    for (size_t i = 0; i < ARRAY_LEN(probes); i++) {
        const TensorInfo *t = tensors_find(&m->tt, probes[i].name);
        EXPECT_MSG(t != NULL, "no tensor %s", probes[i].name);
        if (!t) continue;
        float *x = (float *)model_data(m, t) + probes[i].idx, x0 = *x;
        double g = m->grads[t->goffset + probes[i].idx];
        const float h = 1e-2f;
        *x = x0 + h;
        double lp = loss_of(m, p, 0);
        *x = x0 - h;
        double lm = loss_of(m, p, 0);
        *x = x0;
        double fd = (lp - lm) / (2.0 * h);
        // fp32 forward: the loss carries ~1e-7 relative rounding, so 1e-5 absolute on fd, plus
        // O(h^2) truncation
        EXPECT_MSG(fabs(fd - g) <= 2e-4 + 2e-2 * fabs(g), "%s[%zu]: finite difference %.7g vs gradient %.7g",
                   probes[i].name, probes[i].idx, fd, g);
        checked += fabs(g) > 1e-4;
    }
    EXPECT_MSG(checked >= 6, "only %d probed gradients are non-negligible: the test checks too little", checked);
    model_free(m);
    backend_destroy(be);
}

int main(void) {
    RUN(test_bt_loss_derivatives);
    RUN(test_model_gradient);
    TEST_MAIN_END();
}
