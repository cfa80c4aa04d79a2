// test_heads_torch.c: the reference backend's distillation and RL heads and the host-side RL
// math (train/rl_math.h) against PyTorch (float64) on the committed fixture
// tests/data/heads/heads_ref.bin, written by scripts/ref_heads.py with the primitives TRL uses
// (regenerate: scripts/refs_heads.sh).
// Tolerances, norm-wise over each buffer: ops 1e-5 (fp32 inputs, torch in float64, the
// reference backend in double with fp32 logits and outputs: a few fp32 ulp, as
// test_ref_torch.c); RL math 1e-5 (double math from the same fp32 inputs, fp32 outputs, and
// torch's clip comparisons made in float64 like ours).
#include "torch_fixture.h"

#include "train/rl_math.h"

#define FIXTURE "tests/data/heads/heads_ref.bin"
#define TOL 1e-5

static Backend *R;

// A f32 record as doubles (NaN kept).
static double *Dbl(const char *name) {
    const FixtureRec *r = fixture_get(name);
    double *d = xmalloc(r->n * sizeof(double) + 8);
    for (uint32_t i = 0; i < r->n; i++) d[i] = ((float *)r->data)[i];
    return d;
}

static void expect_ref_d(const char *name, const double *got, size_t n) {
    float *g = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) g[i] = (float)got[i];
    expect_ref(name, g, n);
    free(g);
}

static void test_logprob_vs_torch(void) {
    int32_t *d = I("lp.dims");
    int N = d[0], C = d[1], V = d[2], chunk = 4;
    float *logp = xmalloc(N * 4), *ent = xmalloc(N * 4), *dh = xcalloc((size_t)N * C, 4);
    float *dW = xcalloc((size_t)V * C, 4), *scratch = xmalloc((size_t)chunk * (V + C) * 4);
    R->logprob_head(R, logp, ent, NULL, dh, dW, F("lp.h"), F("lp.W"), DT_F32, I("lp.targets"), F("lp.coef"), F("lp.tau")[0],
                    scratch, chunk, N, C, V);
    expect_ref("lp.logp", logp, N);
    expect_ref("lp.entropy", ent, N);
    expect_ref("lp.dh", dh, (size_t)N * C);
    expect_ref("lp.dW", dW, (size_t)V * C);
    free(logp), free(ent), free(dh), free(dW), free(scratch);
}

static void test_distill_vs_torch(void) {
    const char *cases[] = {"d0", "d1", "d2", "d3", "d4", "d5", "d6"};
    char k[64];
#define REC(field) (snprintf(k, sizeof k, "ds.%s.%s", cases[c], field), k)
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        int32_t *d = I(REC("dims"));
        int N = d[0], Cs = d[1], Ct = d[2], V = d[3], top_k = d[4], chunk = 2;
        float *pr = F(REC("params"));
        float tau = pr[0], beta = pr[1], gs = pr[2];
        float *loss = xmalloc(N * 4), *kl = xmalloc(N * 4), *dh = xcalloc((size_t)N * Cs, 4);
        float *dW = xcalloc((size_t)V * Cs, 4), *ss = xmalloc((size_t)chunk * (V + Cs) * 4);
        float *st = xmalloc((size_t)chunk * (V + Ct) * 4);
        float *hs = F(REC("hs")), *Ws = F(REC("Ws")), *ht = F(REC("ht")), *Wt = F(REC("Wt")), *w = F(REC("weights"));
        R->distill_head(R, loss, kl, dh, dW, hs, Ws, DT_F32, ht, Wt, DT_F32, I(REC("targets")), w, tau, beta, top_k, gs,
                        ss, st, chunk, N, Cs, Ct, V);
        expect_ref(REC("loss"), loss, N);
        expect_ref(REC("kl"), kl, N);
        expect_ref(REC("dhs"), dh, (size_t)N * Cs);
        expect_ref(REC("dWs"), dW, (size_t)V * Cs);
        free(loss), free(kl), free(dh), free(dW), free(ss), free(st);
    }
#undef REC
}

static void test_advantages_vs_torch(void) {
    int32_t *d = I("adv.dims");
    int n = d[0], G = d[1], K = d[2];
    double *R_ = Dbl("adv.rewards"), *w = Dbl("adv.weights"), *tot = xmalloc(n * 8), *a = xmalloc(n * 8);
    rl_reward_sum(tot, R_, w, n, K);
    const float *want = F("adv.total");
    for (int i = 0; i < n; i++)
        EXPECT_MSG(isnan(tot[i]) == isnan(want[i]) && (isnan(tot[i]) || fabs(tot[i] - want[i]) < 1e-6),
                   "total[%d] %g vs %g", i, tot[i], want[i]);
    rl_grpo_advantages(a, tot, n, G, RL_SCALE_GROUP, NULL);
    expect_ref_d("adv.group", a, n);
    rl_grpo_advantages(a, tot, n, G, RL_SCALE_BATCH, NULL);
    expect_ref_d("adv.batch", a, n);
    rl_grpo_advantages(a, tot, n, G, RL_SCALE_NONE, NULL);
    expect_ref_d("adv.none", a, n);
    // RLOO
    int T = 5;
    double *kl = xmalloc(n * 8), clip[2] = {-0.5, 1.5};
    rl_rloo_seq_kl(kl, F("rloo.old"), F("rloo.ref"), F("rloo.mask"), n, T);
    expect_ref_d("rloo.seq_kl", kl, n);
    rl_rloo_advantages(a, tot, NULL, 0, NULL, 0, n, G);
    expect_ref_d("rloo.adv.a", a, n);
    rl_rloo_advantages(a, tot, kl, 0.05, clip, 0, n, G);
    expect_ref_d("rloo.adv.b", a, n);
    rl_rloo_advantages(a, tot, kl, 0.05, clip, 1, n, G);
    expect_ref_d("rloo.adv.c", a, n);
    free(R_), free(w), free(tot), free(a), free(kl);
}

static void test_policy_loss_vs_torch(void) {
    int32_t *d = I("pg.dims");
    int B = d[0], T = d[1];
    float *pr = F("pg.params");
    RlLossConfig cfg = {RL_LOSS_GRPO, pr[0], pr[1], pr[2], 0, d[3], pr[3], d[4], d[2]};
    double *adv = Dbl("pg.adv");
    float *coef = xmalloc((size_t)B * T * 4), *tok = xmalloc((size_t)B * T * 4);
    const char *names[4] = {"grpo", "bnpo", "dr_grpo", "dapo"};
    char k[64];
    RlLossStats st;
    for (int lt = 0; lt < 4; lt++)
        for (int variant = 0; variant < 3; variant++) {
            RlLossConfig c = cfg;
            c.loss_type = (RlLossType)lt;
            if (variant == 0) c.beta = 0;
            c.use_bias_correction_kl = variant == 2;
            rl_grpo_loss(&c, coef, tok, &st, F("pg.logp"), F("pg.old"), variant ? F("pg.ref") : NULL,
                         variant == 2 ? F("pg.isr") : NULL, adv, F("pg.mask"), B, T);
            float l = (float)st.loss;
            snprintf(k, sizeof k, "pg.%s.%d.loss", names[lt], variant);
            expect_ref(k, &l, 1);
            snprintf(k, sizeof k, "pg.%s.%d.coef", names[lt], variant);
            expect_ref(k, coef, (size_t)B * T);
            // per-token losses: torch's ptl at every position, masked or not
            snprintf(k, sizeof k, "pg.%s.%d.tok", names[lt], variant);
            expect_ref(k, tok, (size_t)B * T);
        }
    float clip[3] = {(float)(st.clip_low_sum / st.mask_sum), (float)(st.clip_high_sum / st.mask_sum),
                     (float)(st.clip_region_sum / st.mask_sum)};
    expect_ref("pg.clip", clip, 3);
    // RLOO's sequence loss on the same inputs (old sequence log-probs from the old token log-probs)
    double *old_seq = xmalloc(B * 8);
    rl_seq_logp(old_seq, F("pg.old"), F("pg.mask"), B, T);
    expect_ref_d("rl.old_seq", old_seq, B);
    rl_rloo_loss(&cfg, coef, &st, F("pg.logp"), old_seq, adv, F("pg.mask"), B, T);
    float l = (float)st.loss;
    expect_ref("rl.loss", &l, 1);
    expect_ref("rl.coef", coef, (size_t)B * T);
    // sampled-token distillation: teacher log-probs = pg.ref, norm 7
    l = (float)rl_sampled_token_distill(coef, NULL, F("pg.logp"), F("pg.ref"), F("pg.mask"), (size_t)B * T, 7.0);
    expect_ref("st.loss", &l, 1);
    expect_ref("st.coef", coef, (size_t)B * T);
    free(adv), free(coef), free(tok), free(old_seq);
}

int main(void) {
    if (!fixture_load(FIXTURE, TOL)) {
        printf("FAIL fixture: cannot read %s (regenerate with scripts/refs_heads.sh)\n", FIXTURE);
        return 1;
    }
    Err e = {0};
    if (backend_create("ref", 1, &R, &e) != ST_OK) {
        printf("FAIL backend: %s\n", e.msg);
        return 1;
    }
    RUN(test_logprob_vs_torch);
    RUN(test_distill_vs_torch);
    RUN(test_advantages_vs_torch);
    RUN(test_policy_loss_vs_torch);
    backend_destroy(R);
    fixture_free();
    TEST_MAIN_END();
}
