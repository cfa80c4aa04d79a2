// test_dpo_math.c: the DPO loss family of dpo_math.c: every loss type's d loss / d logp against
// central differences of dpo_loss itself (each f-divergence, WPO weights, a weighted mix, pairs
// whose sorted order the aot losses permute), hand-solved values of the sigmoid / ipo losses,
// and TRL's configuration checks.
#include "test.h"

#include "train/dpo_math.h"

#include <math.h>

#define NP 5

// no two log ratios of a kind equal (the aot losses sort them: a tie has no derivative)
static const double lc0[NP] = {-12.3, -8.1, -20.5, -5.25, -9.9}, lr0[NP] = {-11.0, -9.45, -18.2, -7.7, -9.1};
static const double rc0[NP] = {-12.0, -8.9, -19.1, -6.0, -10.4}, rr0[NP] = {-10.6, -9.0, -18.9, -7.1, -8.8};
static const double lenc[NP] = {6, 3, 11, 2, 5}, lenr[NP] = {5, 4, 9, 4, 0}, wpo0[NP] = {0.8, 0.3, 1.2, 0.05, 0.6};

static double loss_at(const DpoLossConfig *c, const double *lc, const double *lr, int wpo, double sft, double *gc,
                      double *gr, double *gs) {
    double scratch[3 * NP];
    DpoPairs p = {.n = NP, .logp_c = lc, .logp_r = lr, .ref_c = rc0, .ref_r = rr0, .len_c = lenc, .len_r = lenr,
                  .wpo = wpo ? wpo0 : NULL, .sft_nll = sft};
    return dpo_loss(c, &p, gc, gr, gs, scratch);
}

// Central differences of every analytic derivative (step 1e-5, tolerance 1e-6 relative to the
// largest component, floor 1e-8: the losses are smooth in double away from hinge's kink).
static void fd_check(const char *what, const DpoLossConfig *c, int wpo) {
    double gc[NP], gr[NP], gs, lc[NP], lr[NP], sft = 3.7;
    memcpy(lc, lc0, sizeof lc), memcpy(lr, lr0, sizeof lr);
    double L = loss_at(c, lc, lr, wpo, sft, gc, gr, &gs);
    EXPECT_MSG(isfinite(L), "%s: loss %g", what, L);
    double scale = fabs(gs);
    for (int i = 0; i < NP; i++) scale = fmax(scale, fmax(fabs(gc[i]), fabs(gr[i])));
    const double h = 1e-5, tol = 1e-6 * fmax(scale, 1e-2);
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < NP; i++) {
            double *x = side ? lr : lc, keep = x[i];
            x[i] = keep + h;
            double up = loss_at(c, lc, lr, wpo, sft, NULL, NULL, NULL);
            x[i] = keep - h;
            double dn = loss_at(c, lc, lr, wpo, sft, NULL, NULL, NULL);
            x[i] = keep;
            double fd = (up - dn) / (2 * h), an = side ? gr[i] : gc[i];
            EXPECT_MSG(fabs(fd - an) <= tol, "%s: d loss / d logp_%s[%d] %.10g, central difference %.10g", what,
                       side ? "r" : "c", i, an, fd);
        }
    double fd = (loss_at(c, lc, lr, wpo, sft + h, NULL, NULL, NULL) - loss_at(c, lc, lr, wpo, sft - h, NULL, NULL, NULL)) /
                (2 * h);
    EXPECT_MSG(fabs(fd - gs) <= tol, "%s: d loss / d sft_nll %.10g, central difference %.10g", what, gs, fd);
}

static DpoLossConfig one(DpoLossType t, double beta, double ls, DpoFDiv f) {
    DpoLossConfig c = {.n_types = 1, .type = {t}, .weight = {1.0}, .beta = beta, .label_smoothing = ls,
                       .discopop_tau = 0.05, .fdiv = f, .f_alpha = 0.5};
    return c;
}

static void test_gradients(void) {
    char what[96];
    for (int t = 0; t < DPO_N_LOSS_TYPES; t++)
        for (int f = 0; f < 4; f++) {
            double ls = t == DPO_EXO_PAIR ? 1e-3 : t == DPO_ROBUST ? 0.1 : t == DPO_AOT ? 0.05 : 0;
            DpoLossConfig c = one((DpoLossType)t, f == DPO_F_JS ? 0.5 : 0.1, ls, (DpoFDiv)f);
            if (f == DPO_F_ALPHA) c.f_alpha = 0.3;
            snprintf(what, sizeof what, "%s f%d", dpo_loss_name((DpoLossType)t), f);
            fd_check(what, &c, 0);
            if (t != DPO_AOT && t != DPO_AOT_UNPAIRED) {
                snprintf(what, sizeof what, "%s f%d wpo", dpo_loss_name((DpoLossType)t), f);
                fd_check(what, &c, 1);
            }
        }
    DpoLossConfig mix = {.n_types = 3, .type = {DPO_SIGMOID, DPO_BCO_PAIR, DPO_SFT}, .weight = {0.8, 0.2, 1.0},
                         .beta = 0.2, .discopop_tau = 0.05};
    fd_check("mpo mix", &mix, 0);
    fd_check("mpo mix wpo", &mix, 1);
    DpoLossConfig big = one(DPO_SIGMOID, 3.0, 0, DPO_F_REVERSE_KL);  // saturated logistic: no overflow
    fd_check("sigmoid beta 3", &big, 0);
}

// Hand-solved: one pair with u_c = 1, u_r = -1 (delta = 2), beta 0.5:
//   sigmoid: -log sigmoid(1) = 0.3132616875, d/d logp_c = -0.5 sigmoid(-1) = -0.1344707107
//   ipo (len 2 and 4): (1/2 + 1/4 - 1)^2 = 0.0625, d/d logp_c = 2 (-0.25) / 2 = -0.25, d/d logp_r = 0.125
static void test_hand(void) {
    double lc = -3, lr = -6, rc = -4, rr = -5, len_c = 2, len_r = 4, gc, gr, scratch[3];
    DpoPairs p = {.n = 1, .logp_c = &lc, .logp_r = &lr, .ref_c = &rc, .ref_r = &rr, .len_c = &len_c, .len_r = &len_r};
    DpoLossConfig c = one(DPO_SIGMOID, 0.5, 0, DPO_F_REVERSE_KL);
    double L = dpo_loss(&c, &p, &gc, &gr, NULL, scratch);
    EXPECT(fabs(L - 0.3132616875) < 1e-9 && fabs(gc + 0.1344707107) < 1e-9 && fabs(gr - 0.1344707107) < 1e-9);
    c.type[0] = DPO_IPO;
    L = dpo_loss(&c, &p, &gc, &gr, NULL, scratch);
    EXPECT(fabs(L - 0.0625) < 1e-12 && fabs(gc + 0.25) < 1e-12 && fabs(gr - 0.125) < 1e-12);
}

static void test_checks(void) {
    Err e = {0};
    DpoLossConfig c = one(DPO_EXO_PAIR, 0.1, 0, DPO_F_REVERSE_KL);
    EXPECT(dpo_check_config(&c, &e) == ST_EINVAL && strstr(e.msg, "label_smoothing"));
    c = one(DPO_AOT, 0.1, 0, DPO_F_REVERSE_KL);
    c.use_weighting = 1;
    EXPECT(dpo_check_config(&c, &e) == ST_EUNSUPPORTED);
    c = one(DPO_SIGMOID, 0, 0, DPO_F_REVERSE_KL);
    EXPECT(dpo_check_config(&c, &e) == ST_EINVAL);
    DpoLossType t;
    EXPECT(dpo_parse_loss_type("sigmoid_norm", &t, &e) == ST_OK && t == DPO_SIGMOID_NORM);
    EXPECT(dpo_parse_loss_type("kto_pair", &t, &e) == ST_EINVAL && strstr(e.msg, "kto_pair"));
}

int main(void) {
    RUN(test_gradients);
    RUN(test_hand);
    RUN(test_checks);
    TEST_MAIN_END();
}
