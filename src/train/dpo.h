// dpo.h: Direct Preference Optimization and its loss family (TRL DPOTrainer semantics,
// trl/trainer/dpo_trainer.py at 1.10.0.dev0; docs/dpo.md) as one StepSource of the shared loop.
//
// Per micro-batch of B pairs: one static-shape batch of 2B rows, [prompt + chosen] rows first and
// [prompt + rejected] rows after them (TRL's concatenated forward), each truncated to max_length
// (keep_start, or keep_end) and right-padded to T = the longest row rounded up to
// pad_to_multiple_of. Sequence log-probs are sums over completion tokens of logprob_head's
// per-token log-probs (no [B, T, V] tensor); the reference's come from a second model (--ref_model,
// else a frozen copy of the initial weights; with --use_peft the base with the adapter off) or
// were precomputed once over the dataset. dpo_math gives the loss and d loss / d logp, and
// logprob_head back-propagates those coefficients. The loss of a step is the mean of its
// micro-batch losses (HF Trainer divides by the micro-batches of the step), averaged over ranks.
#ifndef STILL_DPO_H
#define STILL_DPO_H

#include "dpo_math.h"
#include "pref_data.h"
#include "trainer.h"

typedef struct DpoConfig {
    const char *model_dir, *ref_model_dir, *dataset;  // ref_model_dir NULL: the initial weights
    const char *backend;
    int threads;
    size_t max_memory;
    int dtype;                  // --dtype: storage of the frozen reference (-1: its checkpoint's)
    int save_dtype;             // -1: --dtype, else the input checkpoint's dtype
    const char *chat_template_kwargs;
    PrefConfig data;            // max_length, truncation, bad rows
    int pad_to_multiple_of;
    int per_device_train_batch_size;  // pairs per micro-batch (per rank)
    int shuffle, drop_last;
    DpoLossConfig loss;
    int has_ld_alpha;           // --ld_alpha given (TRL's None otherwise)
    double ld_alpha;
    int precompute_ref_log_probs;
    int precompute_ref_batch_size;  // <= 0: per_device_train_batch_size
    int max_plans;
    int ep_size;                // --ep_size: expert-parallel ranks (ep.h; 0 or 1: none)
    TrainConfig train;
    Dist *dist;                 // the ranks (NULL: one process)
} DpoConfig;

// DPOConfig's defaults (still's static-shape ones: pad_to_multiple_of 128).
void dpo_config_default(DpoConfig *c);
Status dpo_run(DpoConfig *c, TrainResult *res, Err *e);

#endif
