// distill.h: on-policy distillation (TRL DistillationTrainer, GKDTrainer, OPSD self-distillation)
// = prompts (rollout.h) + student rollouts (gen/) + teacher and student scoring through
// distill_head / logprob_head + the shared loop (trainer.h). docs/distill.md.
//
// One optimizer step: grad_accum micro-batches of B prompts. Completions come from the student
// (on-policy), the teacher (GKD seq_kd) or the dataset (GKD off-policy); each micro-batch is laid
// out as [prompt ; completion] rows (student prompt for the student, teacher prompt for the
// teacher, on one common shape so that row r's completion token k sits at the same index on both
// sides), the teacher runs a score plan, the student a train plan, and the loss head pairs them
// chunk by chunk. The loss is normalised by the completion tokens of the whole step.
#ifndef STILL_DISTILL_H
#define STILL_DISTILL_H

#include "rollout.h"
#include "trainer.h"

typedef enum {
    DISTILL_LOSS_JSD = 0,      // generalized JSD over the full vocabulary (or the teacher's top-k)
    DISTILL_LOSS_SAMPLED,      // sampled-token reverse KL: -sg(log p_T - log p_S) log p_S
} DistillLossKind;

typedef enum {
    TEACHER_MODEL = 0,         // a separate (frozen) teacher model
    TEACHER_FIXED,             // self: a frozen copy of the student's initial weights
    TEACHER_EMA,               // self: an EMA of the student's weights (saved in checkpoints)
    TEACHER_LIVE,              // self: the student's current weights
} TeacherMode;

const char *distill_teacher_mode_name(TeacherMode m);

// What one micro-batch's loss is: kind, beta (0 forward KL, 1 reverse KL), support, temperature.
typedef struct DistillLoss {
    DistillLossKind kind;
    float beta;
    int top_k;                 // 0: full vocabulary; k: the teacher's top-k
    float tau;                 // loss temperature (both sides)
} DistillLoss;

// Scoring buffers for micro-batches of up to B rows of up to Tmax positions.
typedef struct DistillScorer {
    Model *student, *teacher;  // teacher may be the student (live self-distillation)
    DistillLoss loss;
    int B, Tmax, C;            // rows, longest layout, completion region (max_completion_length, or
                               // GKD's longest dataset completion when that is longer)
    int whole;                 // set by the caller: every completion token is trained on (dataset
                               // completions, as TRL's collator labels them), not up to the first EOS
    int pad_to_multiple_of;
    int P_min;                 // set by the caller: a prompt region of at least this (expert parallel:
                               // every rank's batch of one shape)
    int32_t eos[GEN_MAX_EOS];
    int n_eos;
    float *d_kl, *d_logp_s, *d_logp_t, *d_coef;   // device (B*Tmax)
    float *h_loss, *h_kl, *h_logp_s, *h_logp_t, *h_coef, *h_mask;  // host (B*Tmax)
    int32_t *ids, *pos, *seg, *targets;           // host (B*Tmax) the student's aligned layout
    int32_t *tids, *tpos, *tseg;                  // host (B*Tmax) the teacher's
    double *row_kl;            // host (B) after distill_score: each row's mean KL over its completion
} DistillScorer;

// Per-row results of one scored micro-batch.
typedef struct DistillRows {
    double loss;               // sum of the row losses / norm (the micro-batch's share of the step loss)
    double kl_sum;             // sum over completion tokens of KL(student || teacher) at tau 1
    int n_targets;             // completion tokens scored
    int n_tokens;              // real tokens (prompts and completions, teacher side excluded)
    int T;                     // the layout's padded length
    double teacher_seconds;    // wall time of the teacher's forward pass
    double aux_loss;           // the student's load-balancing loss of this forward (an MoE with
                               // output_router_logits, backward only; else 0): its gradient, times
                               // router_aux_loss_coef * student->moe_aux_scale, is in the backward
} DistillRows;

void distill_scorer_init(DistillScorer *s, Model *student, Model *teacher, const DistillLoss *loss, int B, int Tmax,
                         int C, int pad_to_multiple_of, const int32_t *eos, int n_eos);
void distill_scorer_free(DistillScorer *s);
// Score n <= B rows: the student sees sprompt_i + completion_i, the teacher tprompt_i +
// completion_i (tprompts NULL: the student's prompts). Completion tokens up to and including the
// first EOS are trained on. backward: accumulate d(loss)/d(student params) into student->grads
// (a train plan), where loss = sum over rows and tokens / norm. Errors: a layout longer than
// Tmax, a completion longer than C, plan limits.
Status distill_score(DistillScorer *s, const int32_t *const *sprompts, const int *slens,
                     const int32_t *const *tprompts, const int *tlens, const int32_t *const *comps, const int *clens,
                     int n, double norm, int backward, DistillRows *out, Err *e);

// The whole command: flags of `still distill` resolved into a config.
typedef struct DistillConfig {
    const char *model_dir, *teacher_dir;   // teacher_dir NULL: self-distillation (--teacher self)
    const char *dataset, *eval_dataset;
    const char *backend;
    int threads;
    size_t max_memory;           // --max_memory (0: what the machine has available)
    int dtype;                   // --dtype (-1: not given): saved dtype unless --save_dtype
    int save_dtype;              // -1: --dtype, else the input checkpoint's dtype
    DType teacher_dtype;         // storage of the frozen teacher's 2-D weights
    const char *teacher_adapter; // PEFT LoRA adapter applied to the teacher (NULL: none)
    DistillLoss loss;
    GenConfig gen;               // sampling (temperature, top_p, top_k, do_sample, max_new_tokens) over defaults
    int gkd;                     // GKDTrainer behaviour: lmbda coin per micro-batch, seq_kd
    double lmbda;
    int seq_kd;
    int max_length;              // GKD: a dataset prompt + completion longer than this loses its oldest
                                 // tokens (prompt first; TRL's DataCollatorForChatML); 0: none
    TeacherMode teacher_mode;
    double teacher_ema_decay;
    const char *teacher_prompt_template;   // self-distillation; NULL: the default (OPSD's)
    const char *log_rollouts;    // JSONL file or NULL
    const char *chat_template_kwargs;      // JSON object text or NULL
    const char *eos_token;
    PromptConfig prompts;
    int B;                       // per_device_train_batch_size
    int generation_batch_size;   // rows per generation batch; <= 0: every row of the step
    int shuffle;
    int pad_to_multiple_of;
    int max_plans;
    int ep_size;               // --ep_size: expert-parallel ranks of the student (ep.h; 0 or 1: none)
    TrainConfig train;
    Dist *dist;                  // the ranks (NULL: one process)
} DistillConfig;

// OPSD's teacher prompt (SEMANTICS_TRAINERS §3) with {problem} and {solution} placeholders.
extern const char *DISTILL_OPSD_TEMPLATE;

Status distill_run(DistillConfig *c, TrainResult *res, Err *e);

#endif
