// test_rl_math.c: host-side RL math (train/rl_math.h) on cases solved by hand (numbers in the
// comments), and every loss type's coefficients against central differences of its own loss.
// Inputs are fp32 log-probs, the math is double: hand values agree to 1e-6 (the fp32 rounding
// of the inputs); the difference quotients use a step of 1e-2 on smooth pieces (away from the
// clip kinks) and agree to 1e-5 relative (O(eps^2) terms of exp are ~1e-5 of the gradient).
#include "test.h"

#include "core/alloc.h"
#include "core/rng.h"
#include "train/rl_math.h"

#define NEAR(a, b, tol) EXPECT_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g", (double)(a), (double)(b))

static void test_parse(void) {
    EXPECT(rl_scale_rewards_parse("group") == RL_SCALE_GROUP && rl_scale_rewards_parse("batch") == RL_SCALE_BATCH);
    EXPECT(rl_scale_rewards_parse("none") == RL_SCALE_NONE && rl_scale_rewards_parse("x") == -1);
    EXPECT(rl_loss_type_parse("dapo") == RL_LOSS_DAPO && rl_loss_type_parse("dr_grpo") == RL_LOSS_DR_GRPO);
    EXPECT(rl_loss_type_parse("grpo") == RL_LOSS_GRPO && rl_loss_type_parse("bnpo") == RL_LOSS_BNPO);
    EXPECT(rl_loss_type_parse("cispo") == -1);
}

// Weights (1, 0.5): (1, 2) -> 2 ; (NaN, 4) -> 2 ; (NaN, NaN) -> NaN (unscorable).
static void test_reward_sum(void) {
    double R[6] = {1, 2, NAN, 4, NAN, NAN}, w[2] = {1, 0.5}, tot[3];
    rl_reward_sum(tot, R, w, 3, 2);
    EXPECT(tot[0] == 2 && tot[1] == 2 && isnan(tot[2]));
}

// Group (1, 2, 3, 6): mean 3, Bessel std sqrt(14/3) = 2.1602469;
//   A = (-2, -1, 0, 3) / 2.1603469 = (-0.9257772, -0.4628886, 0, 1.3886659).
// Group (1, NaN, 3, 5): mean 3, std sqrt(8/2) = 2; A = (-2/2.0001, 0, 0, 2/2.0001) = +-0.99995.
// Group (NaN, NaN, NaN, 7): std over one value is NaN: every A is 0.
// scale "none": A = r - mean; "batch" on groups (1, 2, 3, 6), (1, 1, 1, 1): std of all eight
//   = 1.7728105, A = (-1.1280885, -0.5640443, 0, 1.6921328, 0, 0, 0, 0); the second group's
//   own std is 0 (frac_reward_zero_std counts it under "group" scaling).
static void test_grpo_advantages(void) {
    double r[12] = {1, 2, 3, 6, 1, NAN, 3, 5, NAN, NAN, NAN, 7}, a[12];
    int zero = -1;
    rl_grpo_advantages(a, r, 12, 4, RL_SCALE_GROUP, &zero);
    NEAR(a[0], -0.9257772, 1e-6); NEAR(a[1], -0.4628886, 1e-6); NEAR(a[2], 0, 0); NEAR(a[3], 1.3886659, 1e-6);
    NEAR(a[4], -0.99995, 1e-6); NEAR(a[5], 0, 0); NEAR(a[6], 0, 0); NEAR(a[7], 0.99995, 1e-6);
    for (int i = 8; i < 12; i++) EXPECT(a[i] == 0);
    EXPECT(zero == 0);
    rl_grpo_advantages(a, r, 12, 4, RL_SCALE_NONE, NULL);
    NEAR(a[0], -2, 0); NEAR(a[3], 3, 0); NEAR(a[7], 2, 0); NEAR(a[5], 0, 0); NEAR(a[11], 0, 0);
    double rb[8] = {1, 2, 3, 6, 1, 1, 1, 1};
    rl_grpo_advantages(a, rb, 8, 4, RL_SCALE_BATCH, &zero);
    NEAR(a[0], -1.1280885, 1e-6); NEAR(a[1], -0.5640443, 1e-6); NEAR(a[3], 1.6921328, 1e-6); NEAR(a[5], 0, 0);
    EXPECT(zero == 0);
    rl_grpo_advantages(a, rb, 8, 4, RL_SCALE_GROUP, &zero);
    EXPECT(zero == 4 && a[4] == 0 && a[7] == 0);
}

// G = 3, r = (1, 2, 6): baselines ((2+6)/2, (1+6)/2, (1+2)/2) = (4, 3.5, 1.5), A = (-3, -1.5, 4.5).
// r = (1, NaN, 5): baselines over the scorable (5, -, 1): A = (-4, 0, 4).
// Clip to [0, 4] and beta 0.5 with seq_kl (2, 0, -2): r = (1 - 1, 2, 4 + 1) = (0, 2, 5):
//   A = (0 - 3.5, 2 - 2.5, 5 - 1) = (-3.5, -0.5, 4).
// normalize on (-3, -1.5, 4.5): mean 0, std sqrt((9 + 2.25 + 20.25)/2) = 3.9686270:
//   A = (-3, -1.5, 4.5) / 3.9687270 = (-0.7559099, -0.3779549, 1.1338648).
static void test_rloo_advantages(void) {
    double r[6] = {1, 2, 6, 1, NAN, 5}, a[6];
    rl_rloo_advantages(a, r, NULL, 0, NULL, 0, 6, 3);
    NEAR(a[0], -3, 1e-12); NEAR(a[1], -1.5, 1e-12); NEAR(a[2], 4.5, 1e-12);
    NEAR(a[3], -4, 1e-12); NEAR(a[4], 0, 0); NEAR(a[5], 4, 1e-12);
    double kl[3] = {2, 0, -2}, clip[2] = {0, 4};
    rl_rloo_advantages(a, r, kl, 0.5, clip, 0, 3, 3);
    NEAR(a[0], -3.5, 1e-12); NEAR(a[1], -0.5, 1e-12); NEAR(a[2], 4, 1e-12);
    rl_rloo_advantages(a, r, NULL, 0, NULL, 1, 3, 3);
    NEAR(a[0], -0.7559099, 1e-6); NEAR(a[1], -0.3779549, 1e-6); NEAR(a[2], 1.1338648, 1e-6);
    rl_rloo_advantages(a, r, NULL, 0, NULL, 0, 3, 1);  // one generation: no baseline, A = 0
    EXPECT(a[0] == 0 && a[1] == 0 && a[2] == 0);
    // k1 KL per sequence: (old - ref) over the mask
    float old[4] = {-1, -2, -3, -4}, ref[4] = {-1.5f, -1, -2, -9}, m[4] = {1, 1, 1, 0};
    double sk[2];
    rl_rloo_seq_kl(sk, old, ref, m, 2, 2);
    NEAR(sk[0], 0.5 - 1, 0); NEAR(sk[1], -1, 0);
}

// ids with eos 2 and pad 0: row 0 ends with eos at t=2; row 1 never emits eos (truncated);
// row 2 is eos at t=0.
static void test_masks(void) {
    int32_t ids[12] = {5, 6, 2, 0, 7, 8, 9, 9, 2, 0, 0, 0}, len[3];
    float m[12];
    rl_completion_mask(m, len, ids, 3, 4, 2);
    EXPECT(len[0] == 3 && len[1] == 4 && len[2] == 1);
    EXPECT(m[2] == 1 && m[3] == 0 && m[7] == 1 && m[8] == 1 && m[9] == 0);
    EXPECT(rl_mask_truncated(m, ids, len, 3, 4, 2, 0) == 1);
    EXPECT(m[0] == 1 && m[4] == 0 && m[7] == 0 && m[8] == 1);
    int32_t len2[3] = {3, 0, 2};  // an empty completion counts as truncated; ending on pad does not
    EXPECT(rl_mask_truncated(m, ids, len2, 3, 4, 2, 0) == 1);
}

// One completion, two tokens, A = 1, eps 0.2, ratios w = (1.5, 0.9) (old = logp - ln w):
//   token 0: w > 1.2 and A > 0: clipped high, l = -min(1.5, 1.2) = -1.2, d l / d logp = 0
//   token 1: inside the range, l = -0.9, d l / d logp = -A w = -0.9
//   grpo: loss = (-1.2 - 0.9) / 2 = -1.05, coef = (0, -0.45); GA 2 halves loss and coef.
//   beta 0.1 with ref - logp = (ln 2, 0): kl = (2 - ln 2 - 1, 0) = (0.3068528, 0),
//     d kl / d logp = 1 - e^(ref - logp) = (-1, 0): loss = (-1.2 + 0.0306853 - 0.9) / 2 = -1.0346574,
//     coef = (-0.1, -0.9) / 2 = (-0.05, -0.45); kl metric sum 0.3068528.
//   A = -1 instead: token 0 unclipped (w A = -1.5 < -1.2): l = 1.5, d = w = 1.5; token 1:
//     l = 0.9, d = 0.9; bnpo: loss = 2.4 / 2 = 1.2, coef = (0.75, 0.45).
//   dapo with num_items 8 over P 2 (normaliser 4): A = 1: loss = -2.1 / 4 = -0.525, coef (0, -0.225).
//   dr_grpo with max_completion_length 5: loss = -2.1 / 5 = -0.42, coef = (0, -0.18).
static void test_grpo_loss_hand(void) {
    float logp[2] = {-0.5f, -1.0f}, old[2], ref[2], m[2] = {1, 1}, coef[2], tl[2];
    old[0] = (float)(logp[0] - log(1.5)), old[1] = (float)(logp[1] - log(0.9));
    ref[0] = (float)(logp[0] + log(2.0)), ref[1] = logp[1];
    double A = 1;
    RlLossConfig cfg = {RL_LOSS_GRPO, 0.2, 0.2, 0, 0, 5, 8, 2, 1};
    RlLossStats st;
    rl_grpo_loss(&cfg, coef, tl, &st, logp, old, NULL, NULL, &A, m, 1, 2);
    NEAR(st.loss, -1.05, 1e-6); NEAR(coef[0], 0, 0); NEAR(coef[1], -0.45, 1e-6); NEAR(tl[0], -1.2, 1e-6);
    NEAR(st.clip_high_sum, 1, 0); NEAR(st.clip_low_sum, 0, 0); NEAR(st.clip_region_sum, 1, 0); NEAR(st.mask_sum, 2, 0);
    cfg.grad_accum = 2, cfg.beta = 0.1;
    rl_grpo_loss(&cfg, coef, NULL, &st, logp, old, ref, NULL, &A, m, 1, 2);
    NEAR(st.loss, -1.0346574 / 2, 1e-6); NEAR(st.policy_loss, -1.0346574, 1e-6);
    NEAR(coef[0], -0.05 / 2, 1e-6); NEAR(coef[1], -0.45 / 2, 1e-6); NEAR(st.kl_sum, 0.3068528, 1e-6);
    cfg.grad_accum = 1, cfg.beta = 0, cfg.loss_type = RL_LOSS_BNPO, A = -1;
    rl_grpo_loss(&cfg, coef, NULL, &st, logp, old, NULL, NULL, &A, m, 1, 2);
    NEAR(st.loss, 1.2, 1e-6); NEAR(coef[0], 0.75, 1e-6); NEAR(coef[1], 0.45, 1e-6); NEAR(st.clip_region_sum, 0, 0);
    cfg.loss_type = RL_LOSS_DAPO, A = 1;
    rl_grpo_loss(&cfg, coef, NULL, &st, logp, old, NULL, NULL, &A, m, 1, 2);
    NEAR(st.loss, -0.525, 1e-6); NEAR(coef[1], -0.225, 1e-6);
    cfg.loss_type = RL_LOSS_DR_GRPO;
    rl_grpo_loss(&cfg, coef, NULL, &st, logp, old, NULL, NULL, &A, m, 1, 2);
    NEAR(st.loss, -0.42, 1e-6); NEAR(coef[1], -0.18, 1e-6);
    // old NULL: w = 1 everywhere, loss -A, coef -A / T
    cfg.loss_type = RL_LOSS_GRPO;
    rl_grpo_loss(&cfg, coef, NULL, &st, logp, NULL, NULL, NULL, &A, m, 1, 2);
    NEAR(st.loss, -1, 1e-12); NEAR(coef[0], -0.5, 1e-12); NEAR(coef[1], -0.5, 1e-12);
}

// Every loss type's coefficients are the gradient of its own loss: central differences on
// random inputs (tokens near a clip boundary, where the loss has a kink, are not probed).
typedef struct {
    RlLossConfig cfg;
    float *logp, *old, *ref, *isr, *mask;
    double *adv;
    int B, T, rloo;
    double *old_seq;
} FdCtx;

static double fd_loss(FdCtx *c) {
    float *coef = xmalloc((size_t)c->B * c->T * 4);
    RlLossStats st;
    if (c->rloo)
        rl_rloo_loss(&c->cfg, coef, &st, c->logp, c->old_seq, c->adv, c->mask, c->B, c->T);
    else
        rl_grpo_loss(&c->cfg, coef, NULL, &st, c->logp, c->old, c->ref, c->isr, c->adv, c->mask, c->B, c->T);
    free(coef);
    return st.loss;
}

static void check_fd(FdCtx *c, const char *what) {
    size_t n = (size_t)c->B * c->T;
    float *coef = xmalloc(n * 4);
    RlLossStats st;
    if (c->rloo)
        rl_rloo_loss(&c->cfg, coef, &st, c->logp, c->old_seq, c->adv, c->mask, c->B, c->T);
    else
        rl_grpo_loss(&c->cfg, coef, NULL, &st, c->logp, c->old, c->ref, c->isr, c->adv, c->mask, c->B, c->T);
    double worst = 0, gmax = 0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(coef[i]));
    int probed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!c->rloo) {
            double w = exp((double)c->logp[i] - c->old[i]);
            if (fabs(w - (1 - c->cfg.epsilon_low)) < 0.05 || fabs(w - (1 + c->cfg.epsilon_high)) < 0.05) continue;
        }
        float x0 = c->logp[i], eps = 1e-2f;
        c->logp[i] = x0 + eps;
        double lp = fd_loss(c);
        c->logp[i] = x0 - eps;
        double lm = fd_loss(c);
        c->logp[i] = x0;
        double num = (lp - lm) / (2.0 * eps), err = fabs(num - coef[i]) / fmax(fabs(coef[i]), 1e-2 * gmax);
        worst = fmax(worst, err);
        probed++;
    }
    EXPECT_MSG(worst < 1e-4 && probed > (int)n / 2, "%s: worst rel err %.3g over %d tokens", what, worst, probed);
    free(coef);
}

static void test_loss_gradients(void) {
    Rng rng;
    rng_init(&rng, 77, 0);
    int B = 4, T = 6;
    size_t n = (size_t)B * T;
    FdCtx c = {{RL_LOSS_GRPO, 0.2, 0.28, 0, 0, 9, 30, 2, 3}, xmalloc(n * 4), xmalloc(n * 4), xmalloc(n * 4),
               xmalloc(n * 4), xmalloc(n * 4), xmalloc(B * 8), B, T, 0, xmalloc(B * 8)};
    for (size_t i = 0; i < n; i++) {
        c.logp[i] = -3 * rng_uniform(&rng);
        c.old[i] = c.logp[i] + 0.5f * rng_normal(&rng);
        c.ref[i] = c.logp[i] + 0.7f * rng_normal(&rng);
        c.isr[i] = 0.5f + rng_uniform(&rng);
        c.mask[i] = (i % T) < (size_t)(2 + (i / T)) ? 1.0f : 0.0f;  // rows of 2, 3, 4, 5 tokens
    }
    for (int b = 0; b < B; b++) c.adv[b] = b == 2 ? -0.7 : rng_normal(&rng);
    const char *names[4] = {"grpo", "bnpo", "dr_grpo", "dapo"};
    char what[80];
    for (int lt = 0; lt < 4; lt++)
        for (int variant = 0; variant < 3; variant++) {
            c.cfg.loss_type = (RlLossType)lt;
            c.cfg.beta = variant ? 0.04 : 0;
            c.cfg.use_bias_correction_kl = variant == 2;
            float *isr = c.isr;
            if (variant != 2) c.isr = NULL;
            snprintf(what, sizeof what, "%s beta %g bias-corrected %d", names[lt], c.cfg.beta, variant == 2);
            check_fd(&c, what);
            c.isr = isr;
        }
    c.rloo = 1;
    double seq[4];  // sequence ratios e^0.4 (clipped when A > 0) and e^-0.1 (inside)
    rl_seq_logp(seq, c.logp, c.mask, B, T);
    for (int b = 0; b < B; b++) c.old_seq[b] = seq[b] + (b % 2 ? 0.4 : -0.1);
    check_fd(&c, "rloo");
    free(c.logp), free(c.old), free(c.ref), free(c.isr), free(c.mask), free(c.adv), free(c.old_seq);
}

// RLOO, B = 2, GA 2, eps 0.2, A = (1, -1), sequence ratios w = (e^0.5, e^-0.5) = (1.6487213, 0.6065307):
//   seq 0: w > 1.2 and A > 0: clipped, l = -1.2, d = 0 ; seq 1: w < 0.8 and A < 0: clipped,
//   l = -min(-0.6065307, -0.8) = 0.8, d = 0 ; loss = mean(-1.2, 0.8) / 2 = -0.1; both clipped.
//   With w = (e^0.1, e^0.1) = 1.1051709 and A = (1, -1): l = (-1.1051709, 1.1051709), loss 0,
//   coef = -A w / B / GA * mask = (-0.2762927, +0.2762927) on every kept token.
static void test_rloo_loss_hand(void) {
    float logp[4] = {-1, -2, -0.5f, -3}, m[4] = {1, 1, 1, 0}, coef[4];
    double adv[2] = {1, -1}, old[2] = {-3 - 0.5, -0.5 + 0.5};
    RlLossConfig cfg = {RL_LOSS_GRPO, 0.2, 0.2, 0, 0, 0, 0, 1, 2};
    RlLossStats st;
    rl_rloo_loss(&cfg, coef, &st, logp, old, adv, m, 2, 2);
    NEAR(st.loss, -0.1, 1e-6); NEAR(st.clip_high_sum, 1, 0); NEAR(st.clip_low_sum, 1, 0); NEAR(st.mask_sum, 2, 0);
    for (int i = 0; i < 4; i++) EXPECT(coef[i] == 0);
    old[0] = -3 - 0.1, old[1] = -0.5 - 0.1;
    rl_rloo_loss(&cfg, coef, &st, logp, old, adv, m, 2, 2);
    NEAR(st.loss, 0, 1e-6); NEAR(coef[0], -0.2762927, 1e-6); NEAR(coef[1], -0.2762927, 1e-6);
    NEAR(coef[2], 0.2762927, 1e-6); NEAR(coef[3], 0, 0); NEAR(st.clip_region_sum, 0, 0);
}

// logp_s = ln 1/2, logp_t = ln 1/4: A = ln(1/2) = -0.6931472; l = -A logp_s = -0.4804530;
// coef = -A = 0.6931472; KL estimate logp_s - logp_t = ln 2. A masked token adds nothing.
static void test_sampled_token_hand(void) {
    float ls[2] = {(float)log(0.5), -1}, lt[2] = {(float)log(0.25), -5}, m[2] = {1, 0}, coef[2];
    double kl;
    double loss = rl_sampled_token_distill(coef, &kl, ls, lt, m, 2, 1.0);
    NEAR(loss, -0.4804530, 1e-6); NEAR(coef[0], 0.6931472, 1e-6); NEAR(coef[1], 0, 0); NEAR(kl, 0.6931472, 1e-6);
    loss = rl_sampled_token_distill(coef, NULL, ls, lt, m, 2, 4.0);
    NEAR(loss, -0.4804530 / 4, 1e-6); NEAR(coef[0], 0.6931472 / 4, 1e-6);
}

int main(void) {
    RUN(test_parse);
    RUN(test_reward_sum);
    RUN(test_grpo_advantages);
    RUN(test_rloo_advantages);
    RUN(test_masks);
    RUN(test_grpo_loss_hand);
    RUN(test_loss_gradients);
    RUN(test_rloo_loss_hand);
    RUN(test_sampled_token_hand);
    TEST_MAIN_END();
}
