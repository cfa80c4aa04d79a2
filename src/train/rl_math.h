// rl_math.h: host-side math of the online RL and on-policy distillation losses: advantages,
// per-token losses and the coefficients coef = d loss / d logp that logprob_head back-propagates
// (backend.h). Pure functions over host arrays; no model, no backend. Formulas and their TRL
// sources: docs/heads.md, SEMANTICS_TRAINERS.md §2c, §3, §4.
//
// Shapes: B completions of T tokens, row-major (B,T); mask (B,T) is the completion mask (times
// a tool mask) as 0/1 floats; per-completion arrays are (B). A micro-batch's loss is what TRL's
// compute_loss returns for it (normalisers included), so sum over micro-batches of coef-weighted
// backward passes gives TRL's gradient of one optimizer step.
#ifndef STILL_RL_MATH_H
#define STILL_RL_MATH_H

#include <stddef.h>
#include <stdint.h>

typedef enum { RL_SCALE_GROUP = 0, RL_SCALE_BATCH = 1, RL_SCALE_NONE = 2 } RlScaleRewards;
typedef enum { RL_LOSS_GRPO = 0, RL_LOSS_BNPO = 1, RL_LOSS_DR_GRPO = 2, RL_LOSS_DAPO = 3 } RlLossType;

// "group" / "batch" / "none", "grpo" / "bnpo" / "dr_grpo" / "dapo" -> enum; -1 if unknown.
int rl_scale_rewards_parse(const char *s);
int rl_loss_type_parse(const char *s);

// ---- rewards and advantages ------------------------------------------------------------
// rewards (n,K): reward function k's value for completion i, NaN where it returned None;
// weights (K) -> total (n) = nansum_k w_k R_k, NaN when every function returned None (an
// unscorable completion: excluded from baselines, advantage 0).
void rl_reward_sum(double *total, const double *rewards, const double *weights, int n, int K);

// GRPO advantages (multi_objective_aggregation "sum_then_normalize"), n = groups * G with each
// group's G completions consecutive: A_i = total_i - nanmean(group), divided by (std + 1e-4)
// unless scale is NONE, std = Bessel-corrected nanstd of the group (GROUP) or of all n (BATCH);
// a std over fewer than two values is NaN; every NaN advantage becomes 0. n_std_zero (may be
// NULL) = how many of the n completions have a std of 0 (TRL's frac_reward_zero_std * n).
void rl_grpo_advantages(double *adv, const double *total, int n, int G, RlScaleRewards scale, int *n_std_zero);

// RLOO's sequence KL for the reward: seq_kl (B) = sum_t mask (old_logp - ref_logp) (k1).
void rl_rloo_seq_kl(double *seq_kl, const float *old_logp, const float *ref_logp, const float *mask, int B, int T);

// RLOO advantages, n = groups * G: r = total, clamped to clip_range [lo, hi] when clip_range
// != NULL, minus beta * seq_kl when beta != 0; b_i = (nansum(group) - r_i) / (scorable - 1)
// (leave-one-out over the group's non-NaN rewards); A = r - b; with normalize,
// A = (A - nanmean(A)) / (nanstd(A) + 1e-4) over all n; NaN -> 0. G == 1 gives 0.
void rl_rloo_advantages(double *adv, const double *total, const double *seq_kl, double beta, const double *clip_range,
                        int normalize, int n, int G);

// ---- masks -------------------------------------------------------------------------------
// mask (B,T) = 1 up to and including the first eos of each row of ids (B,T), 0 after; len (B)
// (may be NULL) = the count of ones.
void rl_completion_mask(float *mask, int32_t *len, const int32_t *ids, int B, int T, int32_t eos);
// mask_truncated_completions: zero the mask row of every completion whose last kept token
// (ids[b, len[b] - 1]) is neither eos nor pad; an empty completion counts as truncated.
// Returns how many rows were zeroed.
int rl_mask_truncated(float *mask, const int32_t *ids, const int32_t *len, int B, int T, int32_t eos, int32_t pad);

// ---- GRPO per-token loss -------------------------------------------------------------------
typedef struct RlLossConfig {
    RlLossType loss_type;
    double epsilon_low;          // clip below at 1 - epsilon_low
    double epsilon_high;         // clip above at 1 + epsilon_high (TRL: epsilon when unset)
    double beta;                 // k3 KL coefficient; 0 = no reference model
    int use_bias_correction_kl;  // KL term times the importance ratio
    int max_completion_length;   // dr_grpo's normaliser
    double num_items;            // dapo: mask sum over the whole generation batch, all ranks
    int num_processes;           // dapo: P
    int grad_accum;              // GA: grpo, bnpo, dr_grpo and RLOO divide by it (1 in eval)
} RlLossConfig;

typedef struct RlLossStats {
    double loss;             // the micro-batch loss (normalisers included): what backward sees
    double policy_loss;      // TRL's policy_loss metric (the loss before the GA division)
    double mask_sum;         // sum of the mask (sequences, for RLOO)
    double kl_sum;           // sum mask * kl (beta != 0)
    double clip_low_sum;     // sum mask * [w < 1 - eps_low and A < 0]
    double clip_high_sum;    // sum mask * [w > 1 + eps_high and A > 0]
    double clip_region_sum;  // sum mask * [either]
} RlLossStats;                // metrics: sum / max(1, mask_sum) after summing over ranks

// Token-level ratio w = exp(logp - old_logp) (old_logp NULL: the current log-probs, w = 1):
//   l = -min(w A, clip(w, 1 - eps_low, 1 + eps_high) A) [* is_ratio] + beta kl,
//   kl = exp(ref - logp) - (ref - logp) - 1 [* w with use_bias_correction_kl]
// aggregated over the mask by cfg->loss_type (docs/heads.md). logp, old_logp, ref_logp,
// is_ratio (vLLM importance-sampling correction, NULL = 1), mask: (B,T); adv (B).
// coef (B,T) = d loss / d logp (the input of logprob_head); tok_loss (B,T) = l (may be NULL).
void rl_grpo_loss(const RlLossConfig *cfg, float *coef, float *tok_loss, RlLossStats *st, const float *logp,
                  const float *old_logp, const float *ref_logp, const float *is_ratio, const double *adv,
                  const float *mask, int B, int T);

// ---- RLOO's sequence-level loss ------------------------------------------------------------
// seq (B) = sum_t mask * logp (the sequence log-prob).
void rl_seq_logp(double *seq, const float *logp, const float *mask, int B, int T);
// w_i = exp(L_i - L_old_i), L = rl_seq_logp (old_seq NULL: w = 1);
// loss = mean_i(-min(w A, clip(w) A)) / GA; coef (B,T) = d loss / d logp; clip statistics
// count sequences (mask_sum = B).
void rl_rloo_loss(const RlLossConfig *cfg, float *coef, RlLossStats *st, const float *logp, const double *old_seq,
                  const double *adv, const float *mask, int B, int T);

// ---- sampled-token distillation (Thinking Machines OPD, OPSD use_tinker_loss, SDFT/SDPO
// "sampled_token") ---------------------------------------------------------------------------
// A_t = sg(logp_t - logp_s) ; l_t = -A_t logp_s ; loss = sum mask l / norm ;
// coef (n) = -mask A / norm. kl_sum (may be NULL) = sum mask (logp_s - logp_t), the sampled
// estimate of KL(student || teacher). Returns the loss.
double rl_sampled_token_distill(float *coef, double *kl_sum, const float *logp_s, const float *logp_t,
                                const float *mask, size_t n, double norm);

#endif
