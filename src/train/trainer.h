// trainer.h: the training loop every trainer shares: micro-batches grouped into optimizer steps
// (gradient accumulation), a loss normalised over the whole step, AdamW with schedule and
// clipping, logging, evaluation, checkpoints and bit-exact resume.
#ifndef STILL_TRAINER_H
#define STILL_TRAINER_H

#include "batch.h"
#include "checkpoint.h"
#include "metrics.h"
#include "optim.h"

typedef struct TrainConfig {
    const char *output_dir;
    const char *src_model_dir;   // tokenizer and generation config are copied from here
    int grad_accum;
    double num_train_epochs;
    int max_steps;               // > 0 overrides num_train_epochs
    OptimConfig opt;             // lr, betas, eps, weight decay, clipping, schedule
    double warmup_steps, warmup_ratio;
    int logging_steps, logging_first_step;
    int save_steps;              // <= 0: no intermediate checkpoints
    int save_total_limit, save_only_model;
    int eval_steps;              // <= 0: evaluate only at the end (when an eval set exists)
    DType save_dtype;
    const char *resume;          // checkpoint path, "latest", or NULL
    uint64_t seed;
    int stop_after_steps;        // > 0: stop (as if killed) after this many steps (tests)
} TrainConfig;

typedef struct TrainResult {
    int steps;
    double last_loss;            // mean loss of the last logging window
    double train_seconds;
    double tokens_per_second;
    double eval_loss;            // NAN without an eval set
} TrainResult;

// Steps of one epoch: micro-batches / grad_accum, rounded up (the last step of an epoch may
// take fewer micro-batches, as transformers does).
int trainer_steps_per_epoch(int micro_batches, int grad_accum);
// Train m (fp32 master weights) on `train`, evaluating on `eval` (may be NULL).
Status trainer_run(Model *m, Batcher *train, Batcher *eval, const TrainConfig *cfg, TrainResult *res, Err *e);
// Loss over every batch of an eval set (score plans); also accuracy and entropy (may be NULL).
Status trainer_evaluate(Model *m, Batcher *eval, double *loss, double *accuracy, double *entropy, Err *e);

#endif
