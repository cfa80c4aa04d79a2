// test_heads.c: the reference distillation and RL heads (logprob_head, distill_head) against
// central finite differences of their own forward, against the formulas written out in double
// here, and on two- and three-token cases solved by hand. The reference backend computes in
// double from fp32 logits, so the hand-solved values agree to fp32 rounding of the outputs
// (tolerance 1e-6 relative); the finite differences see fp32 outputs summed over rows, so they
// use the step and tolerance of test_ref_grad.c's ce_head check (1e-2 and 2e-3 relative, with a
// floor at 1e-2 of the largest gradient component).
#include "ops_util.h"

static Backend *R;

// ---------------------------------------------------------------- logprob_head
typedef struct {
    float *h, *W, *coef, *logp, *ent, *stats, *scratch;
    const int32_t *targets;
    float tau;
    int N, C, V, chunk;
} LpCtx;

static double lp_loss(void *p) {
    LpCtx *c = p;
    R->logprob_head(R, c->logp, c->ent, c->stats, NULL, NULL, c->h, c->W, DT_F32, c->targets, NULL, c->tau, c->scratch, c->chunk,
                    c->N, c->C, c->V);
    double acc = 0;
    for (int r = 0; r < c->N; r++) acc += (double)c->coef[r] * c->logp[r];
    return acc;
}

static void test_logprob_head(void) {
    int N = 7, C = 5, V = 11, chunk = 3;
    int32_t targets[7] = {4, IGNORE_INDEX, 0, 10, 4, IGNORE_INDEX, 7};
    float coef[7] = {1.0f, 5.0f, -0.5f, 2.0f, 0.0f, 1.0f, -1.5f};
    LpCtx c = {new_normal((size_t)N * C, 1), new_normal((size_t)V * C, 1), coef, xmalloc(N * 4), xmalloc(N * 4),
               xmalloc((size_t)N * LOGPROB_STATS * 4), xmalloc((size_t)chunk * (V + C) * 4), targets, 0.7f, N, C, V,
               chunk};
    lp_loss(&c);
    for (int r = 0; r < N; r++) {
        if (targets[r] == IGNORE_INDEX) {
            EXPECT(c.logp[r] == 0 && c.ent[r] == 0);
            for (int k = 0; k < LOGPROB_STATS; k++) EXPECT(c.stats[r * LOGPROB_STATS + k] == 0);
            continue;
        }
        double a[11], mx = -INFINITY, sum = 0, ent = 0, zs = 0, p2 = 0;
        int amax = 0;
        for (int v = 0; v < V; v++) a[v] = (float)dot_d(c.h + r * C, c.W + v * C, C) / (double)c.tau;
        for (int v = 0; v < V; v++) mx = fmax(mx, a[v]), zs += a[v], amax = a[v] > a[amax] ? v : amax;
        for (int v = 0; v < V; v++) sum += exp(a[v] - mx);
        for (int v = 0; v < V; v++) ent -= exp(a[v] - mx - log(sum)) * (a[v] - mx - log(sum));
        for (int v = 0; v < V; v++) p2 += exp(2 * (a[v] - mx - log(sum)));
        EXPECT(test_rel_err(c.logp[r], a[targets[r]] - mx - log(sum), 1e-6) < 1e-5);
        EXPECT(test_rel_err(c.ent[r], ent, 1e-6) < 1e-5);
        const float *st = c.stats + r * LOGPROB_STATS;
        EXPECT(test_rel_err(st[LOGPROB_STAT_ZMEAN], zs / V, 1e-6) < 1e-5);
        EXPECT(st[LOGPROB_STAT_CORRECT] == (amax == targets[r] ? 1.0f : 0.0f));
        EXPECT(test_rel_err(st[LOGPROB_STAT_LSE2], log(p2), 1e-6) < 1e-5);
    }
    size_t nh = (size_t)N * C, nw = (size_t)V * C;
    float *dh0 = new_normal(nh, 1), *dW0 = new_normal(nw, 1), *dh = new_copy(dh0, nh), *dW = new_copy(dW0, nw);
    R->logprob_head(R, c.logp, NULL, NULL, dh, dW, c.h, c.W, DT_F32, targets, coef, c.tau, c.scratch, chunk, N, C, V);
    float *gh = grad_delta(dh, dh0, nh), *gW = grad_delta(dW, dW0, nw);
    gradcheck("logprob_head dh", lp_loss, &c, c.h, nh, gh, 300, 1e-2, 2e-3, 1e-2);
    gradcheck("logprob_head dW", lp_loss, &c, c.W, nw, gW, 300, 1e-2, 2e-3, 1e-2);
    for (int i = 0; i < C; i++) EXPECT(gh[1 * C + i] == 0 && gh[5 * C + i] == 0 && gh[4 * C + i] == 0);
    // dW NULL (a frozen model): dh unchanged
    float *dh2 = new_copy(dh0, nh);
    R->logprob_head(R, NULL, NULL, NULL, dh2, NULL, c.h, c.W, DT_F32, targets, coef, c.tau, c.scratch, chunk, N, C, V);
    EXPECT(!memcmp(dh2, dh, nh * 4));
    free(c.h), free(c.W), free(c.logp), free(c.ent), free(c.stats), free(c.scratch);
    free(dh0), free(dW0), free(dh), free(dW), free(gh), free(gW), free(dh2);
}

// ---------------------------------------------------------------- distill_head
typedef struct {
    float *hs, *Ws, *ht, *Wt, *weights, *loss, *kl, *ss, *st;
    const int32_t *targets;
    float tau, beta, grad_scale;
    int top_k, N, Cs, Ct, V, chunk;
} DsCtx;

static double ds_loss(void *p) {
    DsCtx *c = p;
    R->distill_head(R, c->loss, c->kl, NULL, NULL, c->hs, c->Ws, DT_F32, c->ht, c->Wt, DT_F32, c->targets, c->weights,
                    c->tau, c->beta, c->top_k, c->grad_scale, c->ss, c->st, c->chunk, c->N, c->Cs, c->Ct, c->V);
    double acc = 0;
    for (int r = 0; r < c->N; r++) acc += c->loss[r];
    return acc * c->grad_scale;
}

// The loss of row r written out: log-softmax over the support in double, the three cases of
// TRL's _jsd_divergence, and the full-vocabulary KL(student || teacher) at temperature 1.
static void ds_expected(const DsCtx *c, int r, double *jsd, double *kl) {
    int V = c->V;
    double zs[64], zt[64];
    int in[64];
    for (int v = 0; v < V; v++) {
        zs[v] = (float)dot_d(c->hs + r * c->Cs, c->Ws + v * c->Cs, c->Cs);
        zt[v] = (float)dot_d(c->ht + r * c->Ct, c->Wt + v * c->Ct, c->Ct);
    }
    for (int v = 0; v < V; v++) {  // rank of v among the teacher logits, ties by index
        int rank = 0;
        for (int u = 0; u < V; u++) rank += zt[u] > zt[v] || (zt[u] == zt[v] && u < v);
        in[v] = c->top_k == 0 || rank < c->top_k;
    }
    double ms = -INFINITY, mt = -INFINITY, ss = 0, st = 0, ms1 = -INFINITY, mt1 = -INFINITY, ss1 = 0, st1 = 0;
    for (int v = 0; v < V; v++) {
        ms1 = fmax(ms1, zs[v]), mt1 = fmax(mt1, zt[v]);
        if (in[v]) ms = fmax(ms, zs[v] / c->tau), mt = fmax(mt, zt[v] / c->tau);
    }
    for (int v = 0; v < V; v++) {
        ss1 += exp(zs[v] - ms1), st1 += exp(zt[v] - mt1);
        if (in[v]) ss += exp(zs[v] / c->tau - ms), st += exp(zt[v] / c->tau - mt);
    }
    double b = c->beta;
    *jsd = 0, *kl = 0;
    for (int v = 0; v < V; v++) {
        double s1 = zs[v] - ms1 - log(ss1), t1 = zt[v] - mt1 - log(st1);
        *kl += exp(s1) * (s1 - t1);
        if (!in[v]) continue;
        double s = zs[v] / c->tau - ms - log(ss), t = zt[v] / c->tau - mt - log(st), p = exp(s), q = exp(t);
        double m = log((1 - b) * p + b * q);
        *jsd += b == 0 ? q * (t - s) : b == 1 ? p * (s - t) : b * q * (t - m) + (1 - b) * p * (s - m);
    }
}

static void check_distill(float tau, float beta, int top_k, int Ct) {
    int N = 7, Cs = 5, V = 11, chunk = 3;
    int32_t targets[7] = {4, IGNORE_INDEX, 0, 10, 4, IGNORE_INDEX, 7};
    float weights[7] = {1.0f, 5.0f, 0.5f, 2.0f, 0.0f, 1.0f, 1.5f};
    // inputs of scale 0.7: logits of spread ~1.5, sharp enough to matter, smooth enough that the
    // central difference's O(eps^2) term stays below the tolerance
    DsCtx c = {new_normal((size_t)N * Cs, 0.7f), new_normal((size_t)V * Cs, 0.7f), new_normal((size_t)N * Ct, 1),
               new_normal((size_t)V * Ct, 1), weights, xmalloc(N * 4), xmalloc(N * 4),
               xmalloc((size_t)chunk * (V + Cs) * 4), xmalloc((size_t)chunk * (V + Ct) * 4), targets, tau, beta,
               0.7f, top_k, N, Cs, Ct, V, chunk};
    ds_loss(&c);
    for (int r = 0; r < N; r++) {
        if (targets[r] == IGNORE_INDEX) {
            EXPECT(c.loss[r] == 0 && c.kl[r] == 0);
            continue;
        }
        double jsd, kl;
        ds_expected(&c, r, &jsd, &kl);
        EXPECT_MSG(test_rel_err(c.loss[r], weights[r] * jsd, 1e-6) < 1e-5, "row %d: %.8g vs %.8g", r, c.loss[r],
                   weights[r] * jsd);
        EXPECT_MSG(test_rel_err(c.kl[r], kl, 1e-6) < 1e-5, "row %d kl: %.8g vs %.8g", r, c.kl[r], kl);
        EXPECT(c.loss[r] >= 0 && c.kl[r] >= 0);
    }
    size_t nh = (size_t)N * Cs, nw = (size_t)V * Cs, nt = (size_t)N * Ct;
    float *dh0 = new_normal(nh, 1), *dW0 = new_normal(nw, 1), *dh = new_copy(dh0, nh), *dW = new_copy(dW0, nw);
    float *ht0 = new_copy(c.ht, nt), *Wt0 = new_copy(c.Wt, (size_t)V * Ct);
    R->distill_head(R, c.loss, NULL, dh, dW, c.hs, c.Ws, DT_F32, c.ht, c.Wt, DT_F32, targets, weights, tau, beta, top_k,
                    c.grad_scale, c.ss, c.st, chunk, N, Cs, Ct, V);
    EXPECT(!memcmp(ht0, c.ht, nt * 4) && !memcmp(Wt0, c.Wt, (size_t)V * Ct * 4));  // the teacher is read only
    float *gh = grad_delta(dh, dh0, nh), *gW = grad_delta(dW, dW0, nw);
    char what[64];
    snprintf(what, sizeof what, "distill dh tau %g beta %g k %d", tau, beta, top_k);
    gradcheck(what, ds_loss, &c, c.hs, nh, gh, 300, 1e-2, 2e-3, 1e-2);
    snprintf(what, sizeof what, "distill dW tau %g beta %g k %d", tau, beta, top_k);
    gradcheck(what, ds_loss, &c, c.Ws, nw, gW, 300, 1e-2, 2e-3, 1e-2);
    for (int i = 0; i < Cs; i++) EXPECT(gh[1 * Cs + i] == 0 && gh[5 * Cs + i] == 0 && gh[4 * Cs + i] == 0);
    free(c.hs), free(c.Ws), free(c.ht), free(c.Wt), free(c.loss), free(c.kl), free(c.ss), free(c.st);
    free(dh0), free(dW0), free(dh), free(dW), free(gh), free(gW), free(ht0), free(Wt0);
}

static void test_distill_head(void) {
    check_distill(1.0f, 0.0f, 0, 5);
    check_distill(1.0f, 1.0f, 0, 5);
    check_distill(1.0f, 0.5f, 0, 5);
    check_distill(1.3f, 0.5f, 0, 8);  // a teacher of another width
    check_distill(0.8f, 0.0f, 4, 5);
    check_distill(0.8f, 1.0f, 4, 3);
    check_distill(1.1f, 0.3f, 4, 5);
    check_distill(1.0f, 0.9f, 1, 5);  // one token: every distribution is a point mass, loss 0
}

// ---------------------------------------------------------------- hand-solved cases
// Two tokens with W = I (C = V = 2), so the hidden row is the logit row.
// Student logits (0, ln 3): p = (1/4, 3/4). Teacher logits (0, 0): q = (1/2, 1/2).
//   forward KL(q||p) = 1/2 ln(1/2 / 1/4) + 1/2 ln(1/2 / 3/4) = 1/2 ln(4/3)           = 0.1438410362
//     d/dz_s = p - q = (-1/4, 1/4)
//   reverse KL(p||q) = 1/4 ln(1/2) + 3/4 ln(3/2)                                       = 0.1308120359
//     d/dz_s = p (s - t - KL): (1/4 (ln(1/2) - KL), 3/4 (ln(3/2) - KL))                 = (-0.2059898, 0.2059898)
//   beta 1/2: M = (3/8, 5/8);
//     jsd = 1/2 [1/2 ln(4/3) + 1/2 ln(4/5)] + 1/2 [1/4 ln(2/3) + 3/4 ln(6/5)]          = 0.0338220756
//     d/dz_s = (1-beta) p (s - m - K), K = KL(p||M) = 1/4 ln(2/3) + 3/4 ln(6/5) = 0.0353748906
//       = 1/2 (1/4 (ln(2/3) - K), 3/4 (ln(6/5) - K))                                   = (-0.0551050, 0.0551050)
//   row_kl = KL(p||q) at temperature 1 = 0.1308120359 in every mode.
// Temperature 2 on the same logits: p = (1, sqrt 3)/(1 + sqrt 3), q = (1/2, 1/2);
//   forward KL = 1/2 ln(1/2 (1 + sqrt 3)) + 1/2 ln((1 + sqrt 3)/(2 sqrt 3))           = 0.0372523
//   d/dz_s = (p - q) / 2 = (1/(1+sqrt 3) - 1/2) / 2 (-1 on token 0, +1 on token 1)     = (-0.0669873, 0.0669873)
// logprob_head, target 1, coef 2: tau 1: logp = ln(3/4) = -0.2876820725, entropy
//   -(1/4 ln(1/4) + 3/4 ln(3/4)) = 0.5623351446, dz = 2 (onehot - p) = (-1/2, 1/2);
//   tau 2: logp = ln(sqrt 3/(1 + sqrt 3)) = -0.4557464, dz = 2 (onehot - p)/2 = (-p0, p0) = (-0.3660254, 0.3660254).
static void hand_distill(float tau, float beta, int top_k, double want_loss, double want_d0, double want_d1) {
    float W[4] = {1, 0, 0, 1}, hs[2] = {0.0f, (float)log(3.0)}, ht[2] = {0, 0}, sc[8], st[8], loss, kl;
    float dh[2] = {0, 0}, dW[4] = {0, 0, 0, 0};
    int32_t tg[1] = {1};
    R->distill_head(R, &loss, &kl, dh, dW, hs, W, DT_F32, ht, W, DT_F32, tg, NULL, tau, beta, top_k, 1.0f, sc, st, 1, 1,
                    2, 2, 2);
    EXPECT_MSG(test_rel_err(loss, want_loss, 1e-9) < 1e-6, "tau %g beta %g: loss %.9g, want %.9g", tau, beta, loss,
               want_loss);
    EXPECT_MSG(test_rel_err(kl, 0.1308120359, 1e-9) < 1e-6, "kl %.9g", kl);
    EXPECT_MSG(fabs(dh[0] - want_d0) < 1e-6 && fabs(dh[1] - want_d1) < 1e-6, "tau %g beta %g: dh (%.7g, %.7g)", tau,
               beta, dh[0], dh[1]);
    // W = I: dW row v = dz_v * h
    EXPECT(fabs(dW[2] - dh[1] * hs[0]) < 1e-7 && fabs(dW[3] - dh[1] * hs[1]) < 1e-7);
}

static void test_hand_two_tokens(void) {
    hand_distill(1.0f, 0.0f, 0, 0.5 * log(4.0 / 3), -0.25, 0.25);
    double rkl = 0.25 * log(0.5) + 0.75 * log(1.5);
    EXPECT(fabs(rkl - 0.1308120359) < 1e-9);
    hand_distill(1.0f, 1.0f, 0, rkl, 0.25 * (log(0.5) - rkl), 0.75 * (log(1.5) - rkl));
    double K = 0.25 * log(2.0 / 3) + 0.75 * log(1.2);
    double jsd = 0.5 * (0.5 * log(4.0 / 3) + 0.5 * log(0.8)) + 0.5 * K;
    EXPECT(fabs(jsd - 0.0338220756) < 1e-9 && fabs(K - 0.0353748906) < 1e-9);
    hand_distill(1.0f, 0.5f, 0, jsd, 0.5 * 0.25 * (log(2.0 / 3) - K), 0.5 * 0.75 * (log(1.2) - K));
    double r3 = sqrt(3.0), p0 = 1 / (1 + r3);
    double fkl2 = 0.5 * log(0.5 * (1 + r3)) + 0.5 * log((1 + r3) / (2 * r3));
    EXPECT(fabs(fkl2 - 0.0372523) < 1e-7 && fabs((p0 - 0.5) / 2 + 0.0669873) < 1e-7);
    hand_distill(2.0f, 0.0f, 0, fkl2, (p0 - 0.5) / 2, (0.5 - p0) / 2);
    hand_distill(1.0f, 0.5f, 2, jsd, 0.5 * 0.25 * (log(2.0 / 3) - K), 0.5 * 0.75 * (log(1.2) - K));  // k = V: all

    float W[4] = {1, 0, 0, 1}, h[2] = {0.0f, (float)log(3.0)}, sc[4], logp, ent, coef = 2.0f;
    int32_t tg[1] = {1};
    float dh[2] = {0, 0};
    float st[LOGPROB_STATS];
    // logits (0, ln 3): p = (1/4, 3/4); mean logit ln(3)/2; argmax 1 = target; sum p^2 = 10/16
    R->logprob_head(R, &logp, &ent, st, dh, NULL, h, W, DT_F32, tg, &coef, 1.0f, sc, 1, 1, 2, 2);
    EXPECT(fabs(logp - log(0.75)) < 1e-7 && fabs(ent - 0.5623351446) < 1e-7);
    EXPECT(fabs(st[LOGPROB_STAT_ZMEAN] - 0.5493061443) < 1e-7 && st[LOGPROB_STAT_CORRECT] == 1.0f);
    EXPECT(fabs(st[LOGPROB_STAT_LSE2] - log(0.625)) < 1e-7);
    EXPECT(fabs(dh[0] + 0.5) < 1e-7 && fabs(dh[1] - 0.5) < 1e-7);
    dh[0] = dh[1] = 0;
    R->logprob_head(R, &logp, NULL, NULL, dh, NULL, h, W, DT_F32, tg, &coef, 2.0f, sc, 1, 1, 2, 2);
    EXPECT(fabs(logp - log(r3 / (1 + r3))) < 1e-7);
    EXPECT(fabs(logp + 0.4557464) < 1e-6 && fabs(p0 - 0.3660254) < 1e-7);
    EXPECT(fabs(dh[0] + p0) < 1e-6 && fabs(dh[1] - p0) < 1e-6);
}

// Top-k with a tie at the threshold (V = 3, k = 2): teacher logits (1, 0, 0) keep tokens 0 and 1
// (the tie between 1 and 2 goes to the lower index). Student logits (0, ln 3, 5) renormalised
// over {0, 1}: p = (1/4, 3/4); teacher q = (e, 1)/(1 + e).
//   forward KL = q0 ln(q0 / p0) + q1 ln(q1 / p1), d/dz_s = (p0 - q0, p1 - q1, 0)
//   with e = 2.718281828: q = (0.7310585786, 0.2689414214), KL = 0.7310585786 ln 2.9242343
//   + 0.2689414214 ln 0.3585885619 = 0.7844497 - 0.2758208 = 0.5086289
// Token 2, the student's favourite, is outside the support: its gradient is exactly 0.
static void test_hand_topk_tie(void) {
    float W[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, hs[3] = {0.0f, (float)log(3.0), 5.0f}, ht[3] = {1, 0, 0};
    float sc[12], st[12], loss, dh[3] = {0, 0, 0};
    int32_t tg[1] = {0};
    R->distill_head(R, &loss, NULL, dh, NULL, hs, W, DT_F32, ht, W, DT_F32, tg, NULL, 1.0f, 0.0f, 2, 1.0f, sc, st, 1, 1,
                    3, 3, 3);
    double e = exp(1.0), q0 = e / (1 + e), q1 = 1 / (1 + e);
    double want = q0 * log(q0 / 0.25) + q1 * log(q1 / 0.75);
    EXPECT(fabs(want - 0.5086289) < 1e-6);
    EXPECT_MSG(test_rel_err(loss, want, 1e-9) < 1e-6, "loss %.9g want %.9g", loss, want);
    EXPECT(fabs(dh[0] - (0.25 - q0)) < 1e-6 && fabs(dh[1] - (0.75 - q1)) < 1e-6 && dh[2] == 0.0f);
    // teacher (0, 0, 1): the tie between 0 and 1 keeps token 0 with token 2
    float ht2[3] = {0, 0, 1};
    R->distill_head(R, &loss, NULL, NULL, NULL, hs, W, DT_F32, ht2, W, DT_F32, tg, NULL, 1.0f, 1.0f, 2, 1.0f, sc, st, 1,
                    1, 3, 3, 3);
    // support {0, 2}: p = (1, e^5)/(1 + e^5), q = (1, e)/(1 + e); reverse KL = sum p ln(p/q)
    double P0 = 1 / (1 + exp(5.0)), P2 = 1 - P0, Q0 = 1 / (1 + e), Q2 = 1 - Q0;
    double rkl = P0 * log(P0 / Q0) + P2 * log(P2 / Q2);
    EXPECT_MSG(test_rel_err(loss, rkl, 1e-9) < 1e-6, "loss %.9g want %.9g", loss, rkl);
}

int main(void) {
    rng_init(&ops_rng, 2718, 0);
    Err e = {0};
    if (backend_create("ref", 1, &R, &e) != ST_OK) {
        printf("FAIL backend: %s\n", e.msg);
        return 1;
    }
    RUN(test_logprob_head);
    RUN(test_distill_head);
    RUN(test_hand_two_tokens);
    RUN(test_hand_topk_tie);
    backend_destroy(R);
    TEST_MAIN_END();
}
