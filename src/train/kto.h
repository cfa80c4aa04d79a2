// kto.h: Kahneman-Tversky Optimization on unpaired preference data (TRL KTOTrainer semantics,
// trl/trainer/kto_trainer.py at 1.10.0.dev0; docs/kto.md) as one StepSource of the shared loop.
//
// Rows are taken in dataset order (TRL's sequential sampling, which its KL estimate needs): a
// micro-batch is B consecutive rows [prompt + completion], and B KL rows [prompt + the completion
// of the previous row of the same run of B] (pref_data's kl_src). The KL estimate
// kl = max(0, mean(policy KL logps - reference KL logps)) (averaged over ranks, no gradient)
// enters the kto loss; sequence log-probs come through logprob_head as in DPO (pref_batch.h).
#ifndef STILL_KTO_H
#define STILL_KTO_H

#include "dpo_math.h"
#include "pref_data.h"
#include "trainer.h"

typedef struct KtoConfig {
    const char *model_dir, *ref_model_dir, *dataset;
    const char *backend;
    int threads;
    size_t max_memory;
    int dtype, save_dtype;
    const char *chat_template_kwargs;
    PrefConfig data;               // max_length (keep_start), bad rows
    int pad_to_multiple_of;
    int per_device_train_batch_size;
    int drop_last;
    KtoLossConfig loss;
    int precompute_ref_log_probs;
    int max_plans;
    int ep_size;                // --ep_size: expert-parallel ranks (ep.h; 0 or 1: none)
    TrainConfig train;
    Dist *dist;
} KtoConfig;

void kto_config_default(KtoConfig *c);
Status kto_run(KtoConfig *c, TrainResult *res, Err *e);

#endif
