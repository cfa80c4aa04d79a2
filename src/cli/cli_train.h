// cli_train.h: the flags every trainer shares (TrainingArguments names: optimizer, schedule,
// batch, steps, logging, checkpoints, resume, run-time) defined once, and the one function that
// fills TrainConfig from them. A trainer's table is its own flags followed by these; where a
// shared flag's default or help differs for a trainer, the trainer passes its own entry.
#ifndef STILL_CLI_TRAIN_H
#define STILL_CLI_TRAIN_H

#include "../train/trainer.h"
#include "args.h"

// Optional groups of shared flags (bits of `groups`).
enum {
    CLI_TRAIN_EVAL = 1,   // --eval_strategy, --eval_steps: trainers with an evaluation set
    CLI_TRAIN_DTYPE_REF = 2,  // --dtype is also a frozen reference model's storage (GRPO): q8_0
                              // allowed without --use_peft (the trained weights stay fp32)
};

// own (ends {NULL}) followed by the shared training flags of `groups`; an entry of `defaults`
// (ends {NULL}; may be NULL) replaces the shared flag of its name and type: this trainer's
// default or help. Free with free().
ArgSpec *cli_train_specs(const ArgSpec *own, const ArgSpec *defaults, int groups);

// What the shared flags set besides TrainConfig; every trainer's config holds these.
typedef struct CliTrain {
    const char *backend;   // --device
    int threads;           // --threads (0: OMP_NUM_THREADS, else all cores)
    size_t max_memory;     // --max_memory (0: what the machine has available)
    int dtype;             // --dtype (-1: not given)
    int save_dtype;        // --save_dtype (-1: not given)
    int batch_size;        // --per_device_train_batch_size (> 0)
    int max_plans;         // --max_plans (0: no limit)
} CliTrain;

// Check the shared flags of `groups` and fill t (every field but src_model_dir, save_dtype and
// zero_stage) and r. A flag with no default in this trainer's table reads as 0.
Status cli_train_config(const Args *a, int groups, TrainConfig *t, CliTrain *r, Err *e);

#endif
