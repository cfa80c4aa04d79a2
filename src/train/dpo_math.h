// dpo_math.h: the DPO loss family on sequence log-probs, and its derivatives, in double. Pure
// functions: the trainer (dpo.c) computes log-probs through logprob_head, calls dpo_loss, and
// back-propagates the returned d loss / d logp through logprob_head's coefficients.
//
// Source: trl/trainer/dpo_trainer.py::DPOTrainer._compute_loss and dpo_config.py (TRL
// 1.10.0.dev0, HEAD f2cd577). Per micro-batch of n pairs (docs/dpo.md has every formula):
//   u_c = logp_c - ref_c, u_r = logp_r - ref_r                     (chosen / rejected log ratios)
//   s = f(u): reverse_kl u | forward_kl -exp(-u) | js_divergence logsigmoid(u)
//             | alpha_divergence exp(min((a-1) u, 80)) / (a-1)    (a = 1 within 1e-6: u)
//   delta = s_c - s_r
//   loss = sum_k weight_k * mean_i(l_k,i [* w_i under use_weighting])
// where the per-pair l of each type is TRL's; `sft` is the token-mean NLL of the chosen
// completions of the micro-batch (the same value for every pair). WPO weights w_i are constants
// (computed under no_grad in TRL).
#ifndef STILL_DPO_MATH_H
#define STILL_DPO_MATH_H

#include "../core/common.h"

typedef enum {
    DPO_SIGMOID = 0, DPO_HINGE, DPO_IPO, DPO_EXO_PAIR, DPO_NCA_PAIR, DPO_ROBUST, DPO_BCO_PAIR, DPO_SPPO_HARD,
    DPO_AOT, DPO_AOT_UNPAIRED, DPO_APO_ZERO, DPO_APO_DOWN, DPO_DISCOPOP, DPO_SFT, DPO_SIGMOID_NORM,
    DPO_N_LOSS_TYPES
} DpoLossType;

typedef enum { DPO_F_REVERSE_KL = 0, DPO_F_FORWARD_KL, DPO_F_JS, DPO_F_ALPHA } DpoFDiv;

#define DPO_MAX_LOSSES 16

typedef struct DpoLossConfig {
    int n_types;
    DpoLossType type[DPO_MAX_LOSSES];
    double weight[DPO_MAX_LOSSES];  // loss_weights (1 each by default)
    double beta;                    // 0.1
    double label_smoothing;         // robust, exo_pair, aot, aot_unpaired
    double discopop_tau;            // 0.05
    DpoFDiv fdiv;                   // f_divergence_type
    double f_alpha;                 // f_alpha_divergence_coef (0.5)
    int use_weighting;              // WPO
} DpoLossConfig;

// One micro-batch's pairs; every array (n).
typedef struct DpoPairs {
    int n;
    const double *logp_c, *logp_r;  // policy sequence log-probs (ld_alpha-weighted sums)
    const double *ref_c, *ref_r;    // reference sequence log-probs
    const double *len_c, *len_r;    // completion tokens of each row (ipo, sigmoid_norm: max(len, 1))
    const double *wpo;              // use_weighting: w_i = chosen weight * rejected weight; else NULL
    double sft_nll;                 // sft: mean NLL of the chosen completion tokens of the micro-batch
} DpoPairs;

const char *dpo_loss_name(DpoLossType t);
Status dpo_parse_loss_type(const char *s, DpoLossType *out, Err *e);
Status dpo_parse_fdiv(const char *s, DpoFDiv *out, Err *e);
// TRL's checks of a configuration (exo_pair needs label_smoothing > 0, no WPO with aot, ...).
Status dpo_check_config(const DpoLossConfig *c, Err *e);

// The micro-batch loss; d_logp_c, d_logp_r (n) = d loss / d logp_c, d logp_r (may be NULL);
// *d_sft (may be NULL) = d loss / d sft_nll. scratch: 3 n doubles (aot sorting).
double dpo_loss(const DpoLossConfig *c, const DpoPairs *p, double *d_logp_c, double *d_logp_r, double *d_sft,
                double *scratch);

// ---- KTO (trl/trainer/kto_trainer.py::_compute_loss) -------------------------------------------
// u_i = logp_i - ref_i of each row; kl = the batch's KL estimate (clamped at 0, no gradient).
//   kto:               desirable 1 - sigmoid(beta (u - kl)), undesirable 1 - sigmoid(beta (kl - u))
//   apo_zero_unpaired: desirable 1 - sigmoid(beta u),        undesirable sigmoid(beta u)
//   loss = mean over the n rows of (desirable_weight | undesirable_weight) * l
typedef enum { KTO_LOSS_KTO = 0, KTO_LOSS_APO_ZERO_UNPAIRED } KtoLossType;

typedef struct KtoLossConfig {
    KtoLossType type;
    double beta, desirable_weight, undesirable_weight;
} KtoLossConfig;

Status kto_parse_loss_type(const char *s, KtoLossType *out, Err *e);
// label (n): 1 desirable. d_logp (n, may be NULL) = d loss / d logp.
double kto_loss(const KtoLossConfig *c, int n, const double *logp, const double *ref, const int *label, double kl,
                double *d_logp);

// Chosen and rejected rewards beta * u (TRL's rewards/*, from the log ratios whatever f is).
static inline double dpo_reward(double beta, double logp, double ref) { return beta * (logp - ref); }

#endif
