// trainer.h: the training loop every trainer shares: micro-batches grouped into optimizer steps
// (gradient accumulation), a loss normalised over the whole step, AdamW with schedule and
// clipping, logging, evaluation, checkpoints and bit-exact resume.
//
// Data parallel (`mpirun -np N`): every rank runs the loop on its shard of every global batch;
// the step function normalises by global counts and reports global values, the optimizer sums
// the gradients (optim.h: ZeRO-0 or ZeRO-1), rank 0 logs and writes every file.
#ifndef STILL_TRAINER_H
#define STILL_TRAINER_H

#include "batch.h"
#include "checkpoint.h"
#include "metrics.h"
#include "optim.h"
#include "peft.h"

#include <signal.h>

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
    int save_per_epoch;          // save_strategy epoch: a checkpoint at the end of every epoch
    int save_total_limit, save_only_model;
    int eval_steps;              // > 0: evaluate every eval_steps steps (only then); <= 0: never
    DType save_dtype;
    const char *resume;          // checkpoint path, "latest", or NULL
    uint64_t seed;
    int stop_after_steps;        // > 0: stop (as if killed) after this many steps (tests)
    int skip_nonfinite;          // a NaN/Inf loss or gradient skips the update (logged) instead of stopping
    int zero_stage;              // 0: moments replicated; 1: sharded over the ranks (optim.h)
    PeftConfig peft;             // --use_peft, --lora_*, --adapter (peft.h)
    int gradient_checkpointing;  // recompute each layer's forward in the backward pass
    // Polled after every optimizer step (NULL: never): non-zero stops the run there with a complete
    // checkpoint, metrics and plots, returning ST_EINTR (the CLI passes interrupt_flag()).
    const volatile sig_atomic_t *stop;
} TrainConfig;

typedef struct TrainResult {
    int steps;                   // global step reached
    int step0, steps_run;        // the step this process started from (resume), and steps it ran
    double last_loss;            // mean loss of the last logging window
    double train_loss;           // mean step loss over the steps this process ran (Trainer's train_loss)
    double train_seconds;        // this process's loop, saving included
    double save_seconds;         // of which writing checkpoints and the final model
    double tokens_per_second;    // tokens of this process / (train_seconds - save_seconds)
    double eval_loss;            // NAN without an eval set
    int skipped_steps;           // updates skipped for a NaN/Inf loss or gradient (--skip_nonfinite)
} TrainResult;

// What one optimizer step of a trainer reports. Metrics are (sum, count) pairs so the logging
// window averages them the way TRL does (SFT: the mean over micro-batches; RL: over steps).
#define STEP_MAX_METRICS 48
typedef struct StepReport {
    double loss;                               // the step's loss, as differentiated
    double n_tokens;                           // tokens processed (TRL's num_tokens)
    int n_metrics;
    const char *names[STEP_MAX_METRICS];       // TRL metric names, static strings
    double sums[STEP_MAX_METRICS], counts[STEP_MAX_METRICS];
    // Set by the loop: progress inside a long step (micro-batches, generation rounds, scoring).
    void (*tick)(void *ctx, const char *what, int done, int total);
    void *tick_ctx;
} StepReport;

// Add a value to a report (sum += value, count += weight).
void step_report_add(StepReport *r, const char *name, double value, double weight);
// Report progress inside a step: "what done/total" on the bar, total <= 0: the phase alone
// (no-op without a tick).
void step_report_tick(const StepReport *r, const char *what, int done, int total);

// A trainer plugs into the loop with one function per optimizer step: fill m->grads (zeroed by
// the loop) with the gradient of the step's loss and report it. The step function must be a pure
// function of (weights, step index, seed) so that resuming reproduces the run bit for bit.
// Distributed (dist->world > 1), a step function computes its rank's share of the step: its
// gradient is this rank's part of the gradient of the GLOBAL loss (normalisers summed over the
// ranks first: the loop only sums the gradients), and its report holds global values, the same
// on every rank (the loop logs rank 0's).
typedef struct StepSource {
    void *ctx;
    const char *what;          // "rows", "prompts": for log lines
    int n_items;               // dataset rows / prompts
    int steps_per_epoch;
    int micro_batches, batch_size, grad_accum;  // checked on resume: same data and batch flags
                                                // (micro-batches per epoch are global ones; batch_size per rank)
    Dist *dist;                // the ranks this source's steps run on (NULL: one process)
    Status (*step)(void *ctx, Model *m, int step, StepReport *r, Err *e);
    // Evaluation (may be NULL): writes its metrics into o and the loss into *eval_loss.
    Status (*evaluate)(void *ctx, Model *m, cJSON *o, double *eval_loss, Err *e);
    // State of the source that resuming needs besides the weights (may be NULL): written into
    // every checkpoint directory before its completion marker, read back on resume (an EMA
    // teacher, say).
    Status (*save_state)(void *ctx, const char *ckpt_dir, Err *e);
    Status (*load_state)(void *ctx, const char *ckpt_dir, Err *e);
    int sharded_ok;            // its steps run on a model with sharded parameters (ZeRO-3, fsdp.h)
    int sharded_base_ok;       // and on an adapter's sharded frozen base (no unsharded share of the base,
                               // as a reference model or self-teacher would be)
} StepSource;

// The mesh of d (--tp_size, --fsdp_size) against m: dimensions a tensor-parallel split needs
// divisible (a usage error naming the dimension), and what is not implemented yet.
Status trainer_check_mesh(const Model *m, const Dist *d, Err *e);

// The loop every trainer shares: steps, AdamW, logging, evaluation, checkpoints, resume.
Status trainer_loop(Model *m, StepSource *src, const TrainConfig *cfg, TrainResult *res, Err *e);

// TrainingArguments' defaults as TRL's trainer configs set them (DPOConfig, KTOConfig, GRPOConfig):
// learning rate lr, AdamW (0.9, 0.999, 1e-8), max_grad_norm 1, linear schedule, 3 epochs, no step
// limit, no gradient accumulation, logging every 10 steps, saving every 500.
void trainer_config_trl_default(TrainConfig *t, double lr);

// Steps of one epoch: micro-batches / grad_accum, rounded up (the last step of an epoch may
// take fewer micro-batches, as transformers does).
int trainer_steps_per_epoch(int micro_batches, int grad_accum);
// Train m (fp32 master weights) on `train`, evaluating on `eval` (may be NULL); the batchers are
// this rank's shards of d (NULL: one process).
Status trainer_run(Model *m, Batcher *train, Batcher *eval, Dist *d, const TrainConfig *cfg, TrainResult *res,
                   Err *e);
// Evaluate over every batch of an eval set (score plans) as Trainer.evaluation_loop does: eval_loss
// the mean of the batch mean losses weighted by rows; accuracy and entropy (may be NULL) TRL's
// plain mean over batches of their per-batch ratios. With d (may be NULL), eval is this rank's
// shard and every batch's counts are summed over the ranks.
Status trainer_evaluate(Model *m, Batcher *eval, Dist *d, double *loss, double *accuracy, double *entropy, Err *e);

#endif
