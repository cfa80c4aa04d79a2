// sft.h: supervised fine-tuning (TRL SFTTrainer semantics): data -> static batches -> trainer.
#ifndef STILL_SFT_H
#define STILL_SFT_H

#include "trainer.h"

typedef struct SftConfig {
    const char *model_dir, *dataset, *eval_dataset;
    const char *backend;
    int threads;
    size_t max_memory;   // --max_memory (0: what the machine has available)
    int dtype;                    // --dtype (-1: not given): saved dtype unless --save_dtype
    int save_dtype;               // -1: --dtype, else the input checkpoint's dtype
    DataConfig data;
    const char *chat_template_kwargs;  // JSON object text or NULL
    const char *eos_token;
    int packing;
    int eval_packing;            // -1: as packing (TRL's eval_packing None); 0 / 1
    PackStrategy packing_strategy;
    int padding_max_length;       // --padding max_length
    BatchConfig batch;
    int eval_batch_size;
    int max_plans;
    double moe_capacity_factor;  // --moe_capacity_factor (0: exact dispatch)
    int ep_size;                  // --ep_size: expert-parallel ranks (ep.h; 0 or 1: none)
    TrainConfig train;
    Dist *dist;                   // the ranks (NULL: one process)
} SftConfig;

Status sft_run(SftConfig *c, TrainResult *res, Err *e);

#endif
