// rl_math.c: advantages, masks and per-token RL losses on host arrays (rl_math.h). Double
// precision throughout; NaN follows torch's nan* reductions.
#include "rl_math.h"

#include "../core/alloc.h"
#include "../core/common.h"

#include <math.h>
#include <string.h>

int rl_scale_rewards_parse(const char *s) {
    if (!strcmp(s, "group")) return RL_SCALE_GROUP;
    if (!strcmp(s, "batch")) return RL_SCALE_BATCH;
    if (!strcmp(s, "none")) return RL_SCALE_NONE;
    return -1;
}

int rl_loss_type_parse(const char *s) {
    if (!strcmp(s, "grpo")) return RL_LOSS_GRPO;
    if (!strcmp(s, "bnpo")) return RL_LOSS_BNPO;
    if (!strcmp(s, "dr_grpo")) return RL_LOSS_DR_GRPO;
    if (!strcmp(s, "dapo")) return RL_LOSS_DAPO;
    return -1;
}

// torch.nanmean of x[0..n) with the given stride (NaN when every value is NaN).
static double nanmean(const double *x, int n, int stride) {
    double s = 0;
    int c = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[(size_t)i * stride])) s += x[(size_t)i * stride], c++;
    return c ? s / c : NAN;
}

// TRL's nanstd: Bessel-corrected over the non-NaN values, NaN with fewer than two.
static double nanstd(const double *x, int n) {
    double m = nanmean(x, n, 1), s = 0;
    int c = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i])) s += (x[i] - m) * (x[i] - m), c++;
    return c > 1 ? sqrt(s / (c - 1)) : NAN;
}

void rl_reward_sum(double *total, const double *rewards, const double *weights, int n, int K) {
    for (int i = 0; i < n; i++) {
        double s = 0;
        int any = 0;
        for (int k = 0; k < K; k++) {
            double r = rewards[(size_t)i * K + k];
            if (!isnan(r)) s += weights[k] * r, any = 1;
        }
        total[i] = any ? s : NAN;
    }
}

void rl_grpo_advantages(double *adv, const double *total, int n, int G, RlScaleRewards scale, int *n_std_zero) {
    CHECK(G >= 1 && n % G == 0);
    double batch_std = n > 1 ? nanstd(total, n) : 0.0;
    int zero = 0;
    for (int g0 = 0; g0 < n; g0 += G) {
        double mean = nanmean(total + g0, G, 1);
        double std = scale == RL_SCALE_BATCH ? batch_std : (G > 1 ? nanstd(total + g0, G) : 0.0);
        for (int i = g0; i < g0 + G; i++) {
            double a = total[i] - mean;
            if (scale != RL_SCALE_NONE) a /= std + 1e-4;
            adv[i] = isnan(a) ? 0.0 : a;
            zero += fabs(std) <= 1e-8;  // torch.isclose(std, 0): atol 1e-8 (NaN is not close)
        }
    }
    if (n_std_zero) *n_std_zero = zero;
}

void rl_rloo_seq_kl(double *seq_kl, const float *old_logp, const float *ref_logp, const float *mask, int B, int T) {
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            s += (double)mask[i] * ((double)old_logp[i] - ref_logp[i]);
        }
        seq_kl[b] = s;
    }
}

void rl_rloo_advantages(double *adv, const double *total, const double *seq_kl, double beta, const double *clip_range,
                        int normalize, int n, int G) {
    CHECK(G >= 1 && n % G == 0);
    CHECK(beta == 0 || seq_kl);
    double *r = xmalloc((size_t)G * sizeof *r);  // (G) one group's rewards
    for (int g0 = 0; g0 < n; g0 += G) {
        double sum = 0;
        int scorable = 0;
        for (int j = 0; j < G; j++) {
            double x = total[g0 + j];
            if (clip_range && !isnan(x)) x = fmin(fmax(x, clip_range[0]), clip_range[1]);
            if (beta != 0) x -= beta * seq_kl[g0 + j];
            r[j] = x;
            if (!isnan(x)) sum += x, scorable++;
        }
        for (int j = 0; j < G; j++) adv[g0 + j] = G > 1 ? r[j] - (sum - r[j]) / (scorable - 1) : 0.0;
    }
    free(r);
    if (normalize) {
        double m = nanmean(adv, n, 1), s = nanstd(adv, n);
        for (int i = 0; i < n; i++) adv[i] = (adv[i] - m) / (s + 1e-4);
    }
    for (int i = 0; i < n; i++)
        if (isnan(adv[i])) adv[i] = 0.0;
}

void rl_completion_mask(float *mask, int32_t *len, const int32_t *ids, int B, int T, int32_t eos) {
    for (int b = 0; b < B; b++) {
        int end = T;  // one past the last kept token
        for (int t = 0; t < T; t++)
            if (ids[(size_t)b * T + t] == eos) {
                end = t + 1;
                break;
            }
        for (int t = 0; t < T; t++) mask[(size_t)b * T + t] = t < end ? 1.0f : 0.0f;
        if (len) len[b] = end;
    }
}

int rl_mask_truncated(float *mask, const int32_t *ids, const int32_t *len, int B, int T, int32_t eos, int32_t pad) {
    int count = 0;
    for (int b = 0; b < B; b++) {
        CHECK(len[b] >= 0 && len[b] <= T);
        int32_t last = len[b] > 0 ? ids[(size_t)b * T + len[b] - 1] : eos;
        if (len[b] > 0 && (last == eos || last == pad)) continue;
        for (int t = 0; t < T; t++) mask[(size_t)b * T + t] = 0.0f;
        count++;
    }
    return count;
}

// -min(w A, clip(w) A) and its derivative in w-space times w (= d/dlogp of the ratio term);
// sets the clip flags. Inside the clip range both branches are equal and torch splits the
// gradient between them, each passing it through, so d/dlogp = -A w unless clipped.
static double clipped_term(double w, double A, double lo, double hi, double *dlogp, int *low, int *high) {
    double c = fmin(fmax(w, lo), hi);
    *low = w < lo && A < 0;
    *high = w > hi && A > 0;
    *dlogp = (*low || *high) ? 0.0 : -A * w;
    return -fmin(w * A, c * A);
}

void rl_grpo_loss(const RlLossConfig *cfg, float *coef, float *tok_loss, RlLossStats *st, const float *logp,
                  const float *old_logp, const float *ref_logp, const float *is_ratio, const double *adv,
                  const float *mask, int B, int T) {
    CHECK(cfg->beta == 0 || ref_logp);
    CHECK(cfg->grad_accum >= 1);
    double lo = 1 - cfg->epsilon_low, hi = 1 + cfg->epsilon_high, GA = cfg->grad_accum;
    RlLossStats s = {0};
    double total = 0;  // the aggregated loss before GA
    double msum = 0;
    for (size_t i = 0; i < (size_t)B * T; i++) msum += mask[i];
    for (int b = 0; b < B; b++) {
        double mrow = 0;
        for (int t = 0; t < T; t++) mrow += mask[(size_t)b * T + t];
        // d(aggregate)/d(l_t) for a token of this row, before the mask
        double norm;
        switch (cfg->loss_type) {
        case RL_LOSS_GRPO: norm = 1.0 / (fmax(mrow, 1.0) * B); break;
        case RL_LOSS_BNPO: norm = 1.0 / fmax(msum, 1.0); break;
        case RL_LOSS_DR_GRPO: norm = 1.0 / ((double)B * cfg->max_completion_length); break;
        default: norm = cfg->num_processes / fmax(cfg->num_items, 1.0); break;
        }
        double gnorm = cfg->loss_type == RL_LOSS_DAPO ? norm : norm / GA;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            double lp = logp[i], lr = old_logp ? lp - old_logp[i] : 0.0, w = exp(lr), A = adv[b];
            double d;
            int low, high;
            double l = clipped_term(w, A, lo, hi, &d, &low, &high);
            if (is_ratio) l *= is_ratio[i], d *= is_ratio[i];
            if (cfg->beta != 0) {
                double x = (double)ref_logp[i] - lp, kl = exp(x) - x - 1, dkl = 1 - exp(x);
                if (cfg->use_bias_correction_kl) dkl = dkl * w + kl * w, kl *= w;
                l += cfg->beta * kl;
                d += cfg->beta * dkl;
                s.kl_sum += mask[i] * kl;
            }
            if (tok_loss) tok_loss[i] = (float)l;
            coef[i] = (float)(mask[i] * d * gnorm);
            total += mask[i] * l * norm;
            s.clip_low_sum += mask[i] * low;
            s.clip_high_sum += mask[i] * high;
            s.clip_region_sum += mask[i] * (low || high);
        }
    }
    s.mask_sum = msum;
    s.policy_loss = total;
    s.loss = cfg->loss_type == RL_LOSS_DAPO ? total : total / GA;
    if (st) *st = s;
}

void rl_seq_logp(double *seq, const float *logp, const float *mask, int B, int T) {
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int t = 0; t < T; t++) s += (double)mask[(size_t)b * T + t] * logp[(size_t)b * T + t];
        seq[b] = s;
    }
}

void rl_rloo_loss(const RlLossConfig *cfg, float *coef, RlLossStats *st, const float *logp, const double *old_seq,
                  const double *adv, const float *mask, int B, int T) {
    CHECK(cfg->grad_accum >= 1 && B >= 1);
    double lo = 1 - cfg->epsilon_low, hi = 1 + cfg->epsilon_high;
    RlLossStats s = {0};
    double total = 0;
    for (int b = 0; b < B; b++) {
        double L = 0;
        rl_seq_logp(&L, logp + (size_t)b * T, mask + (size_t)b * T, 1, T);
        double w = exp(old_seq ? L - old_seq[b] : 0.0), d;
        int low, high;
        total += clipped_term(w, adv[b], lo, hi, &d, &low, &high) / B;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            coef[i] = (float)(mask[i] * d / B / cfg->grad_accum);
        }
        s.clip_low_sum += low;
        s.clip_high_sum += high;
        s.clip_region_sum += low || high;
    }
    s.mask_sum = B;
    s.policy_loss = total;
    s.loss = total / cfg->grad_accum;
    if (st) *st = s;
}

double rl_sampled_token_distill(float *coef, double *kl_sum, const float *logp_s, const float *logp_t,
                                const float *mask, size_t n, double norm) {
    double loss = 0, kl = 0;
    for (size_t i = 0; i < n; i++) {
        double A = (double)logp_t[i] - logp_s[i];
        loss += -mask[i] * A * logp_s[i] / norm;
        kl -= mask[i] * A;
        coef[i] = (float)(-mask[i] * A / norm);
    }
    if (kl_sum) *kl_sum = kl;
    return loss;
}
