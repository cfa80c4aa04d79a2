// optim.h: AdamW over the tensor table (weight decay only where the table says `decay`, as
// transformers), learning-rate schedules with warmup, and global grad-norm clipping.
// The moments live in fp32 device buffers in table order (element offsets = goffset).
#ifndef STILL_OPTIM_H
#define STILL_OPTIM_H

#include "../model/model.h"

typedef enum {
    SCHED_LINEAR = 0,          // transformers' default
    SCHED_COSINE,
    SCHED_CONSTANT,            // warmup ignored, as transformers' "constant"
    SCHED_CONSTANT_WITH_WARMUP,
} SchedType;

typedef struct OptimConfig {
    double lr, beta1, beta2, eps, weight_decay;
    double max_grad_norm;      // <= 0: no clipping
    SchedType sched;
    int warmup_steps;          // resolved (see optim_warmup_steps)
    int total_steps;           // optimizer steps of the whole run
} OptimConfig;

typedef struct Optim {
    OptimConfig cfg;
    float *m, *v;              // device (n_params) AdamW moments
    size_t n;
    int t;                     // optimizer steps taken so far
} Optim;

Status optim_parse_schedule(const char *s, SchedType *out, Err *e);
const char *optim_schedule_name(SchedType s);
// transformers v5: warmup_steps >= 1 is a count, 0 < warmup_steps < 1 a ratio of total steps;
// otherwise warmup_ratio (ratio -> ceil(ratio * total)).
int optim_warmup_steps(double warmup_steps, double warmup_ratio, int total_steps);
// Learning rate of the optimizer step taken after `done` steps (transformers' LambdaLR at
// scheduler step `done`).
double optim_lr_at(const OptimConfig *c, int done);

void optim_init(Optim *o, Model *m, const OptimConfig *cfg);
void optim_free(Optim *o, Backend *be);
// Global L2 norm of the gradient buffer (before clipping).
double optim_grad_norm(const Optim *o, const Model *m);
// One step: norm, clip coefficient min(1, max_norm / (norm + 1e-6)) as torch's clip_grad_norm_,
// AdamW over every tensor. Returns the pre-clip norm and the lr used.
void optim_step(Optim *o, Model *m, double *grad_norm, double *lr);

#endif
