// reward.h: reward-model training with TRL RewardTrainer semantics (docs/reward.md).
//
// Preference pairs (reward_data.h) -> micro-batches of B pairs laid out as 2B rows, the B chosen
// sequences then the B rejected ones (TRL's DataCollatorForPreference), right-padded to a
// multiple of pad_to_multiple_of -> forward -> the score head at each sequence's pooled row
// (qwen3_cls_pool: transformers' last non-pad token) -> the Bradley-Terry loss of the micro-batch
// -> backward through the score head (qwen3_cls_backward) -> the shared trainer loop (AdamW,
// schedule, clipping, logging, checkpoints, resume).
//
// Loss per micro-batch of n pairs, rewards r_c, r_r (TRL's compute_loss):
//   L = mean_i -log sigmoid(r_c,i - r_r,i - margin_i) [+ coef * mean_i (r_c,i + r_r,i)^2]
// divided by the micro-batches of the step (Trainer's loss / gradient_accumulation_steps, as
// RewardTrainer computes its own loss). Data parallel: every rank's micro-batch loss is its own
// mean and the gradients are averaged over the ranks, as DDP does (over the ranks that have pairs
// in it: in the last micro-batch of an epoch some may have none).
// Metrics per micro-batch, averaged over the logging window (TRL's names): accuracy (mean of
// r_c > r_r), margin (mean r_c - r_r), min_reward, mean_reward, max_reward (over every chosen
// and rejected reward of the micro-batch on every rank); num_tokens counts real tokens.
// Evaluation (--eval_dataset, --eval_strategy steps): eval_loss over the eval pairs in file order,
// batch means weighted by pairs (Trainer.evaluation_loop), eval_accuracy, eval_margin and
// eval_min / mean / max_reward the mean over batches of their per-batch values.
#ifndef STILL_REWARD_H
#define STILL_REWARD_H

#include "reward_data.h"
#include "trainer.h"

typedef struct RewardConfig {
    const char *model_dir, *dataset;
    const char *eval_dataset;     // NULL: none
    int eval_batch_size;          // pairs per eval batch (per_device_eval_batch_size)
    const char *backend;
    int threads;
    size_t max_memory;            // --max_memory (0: what the machine has available)
    int dtype;                    // --dtype (-1: not given): saved dtype unless --save_dtype
    int save_dtype;               // -1: --dtype, else the input checkpoint's dtype
    RewardDataConfig data;        // max_length (TRL: 1024, pairs over it dropped), skip_bad_rows
    const char *chat_template_kwargs;  // JSON object text or NULL
    const char *eos_token;        // appended to text completions (default: the tokenizer's)
    int batch_size;               // pairs per micro-batch per rank (2 x rows)
    int pad_to_multiple_of;       // <= 1: off
    int drop_last, shuffle;
    int has_center;               // --center_rewards_coefficient given (TRL's None otherwise)
    double center_rewards_coefficient;
    int max_plans;
    TrainConfig train;
    Dist *dist;                   // the ranks (NULL: one process)
} RewardConfig;

// The loss of n pairs and its gradient: rc, rr (n) rewards, margin (n) or NULL, center_coef
// applied when has_center. drc, drr (n; may be NULL) = scale * d loss / d r. Returns the loss.
double reward_bt_loss(const double *rc, const double *rr, const double *margin, int n, int has_center,
                      double center_coef, double scale, double *drc, double *drr);

Status reward_run(RewardConfig *c, TrainResult *res, Err *e);

#endif
