// grpo.h: online RL with verifiable rewards: GRPO and RLOO (TRL GRPOTrainer / RLOOTrainer
// semantics, SEMANTICS_TRAINERS §4, docs/grpo.md) as one StepSource of the shared trainer loop.
//
// One generation round = per_device_train_batch_size × gradient_accumulation_steps completions
// (TRL's generation batch with steps_per_generation = GA): that many / num_generations prompts,
// each sampled num_generations times by the generation engine, scored by the reward functions,
// turned into advantages; then shuffled and cut into GA micro-batches of
// per_device_train_batch_size completions, the round reused for num_iterations optimizer steps.
// Per micro-batch: [prompt ; completion] rows as a static-shape scoring batch (rollout.h),
// forward, log-probs of the completion tokens at logits / temperature (qwen3_logprob), the RL
// loss and its d loss / d logp (rl_math.h), and the backward pass of those coefficients.
//
// Data parallel (`mpirun -np N`, TRL's layout): a round is world × B × GA completions. Rank r
// generates its contiguous share of the round's prompts (draws keyed by the global prompt index,
// so N ranks generate exactly what one process with N × B generates) and scores its rewards;
// completions and rewards are gathered, advantages computed over the whole round on every rank;
// micro-batch s of the shuffled round is world × B completions and rank r trains rows
// [r·B, (r+1)·B) of it. With N > 1, B × GA must be a multiple of num_generations.
#ifndef STILL_GRPO_H
#define STILL_GRPO_H

#include "../gen/generate.h"
#include "rewards.h"
#include "rl_math.h"
#include "rollout.h"
#include "trainer.h"

typedef enum { GRPO_ALGO_GRPO = 0, GRPO_ALGO_RLOO = 1 } GrpoAlgo;

typedef struct GrpoConfig {
    GrpoAlgo algo;
    const char *model_dir, *dataset;
    const char *backend;
    int threads;
    size_t max_memory;              // --max_memory (0: what the machine has available)
    int dtype;                      // --dtype: storage of the frozen reference (-1: the checkpoint's)
    int save_dtype;                 // -1: --dtype, else the input checkpoint's dtype
    const char *chat_template_kwargs;  // JSON object text or NULL
    int max_prompt_length;          // > 0: keep the last tokens of longer prompts
    int skip_bad_rows;
    int shuffle_dataset;
    // rewards
    const char *const *reward_specs;
    int n_rewards;
    const double *reward_weights;   // n_reward_weights values (0: all 1)
    int n_reward_weights;
    double reward_timeout;          // seconds per cmd: answer
    // rollouts: the generation engine with TRL's sampling defaults
    int num_generations;            // G >= 2
    int max_completion_length;
    float temperature;
    double top_p;
    int top_k;                      // 0 = off
    float min_p;
    float repetition_penalty;
    int pad_to_multiple_of;         // prompts (generation) and scoring rows
    int decode_batch_size;          // rows decoded together (<= 0: the whole round)
    int per_device_train_batch_size;// completions per micro-batch
    // loss
    double beta;                    // KL to the reference: k3 in the loss (GRPO), k1 in the reward (RLOO)
    double epsilon, epsilon_high;   // epsilon_high < 0: = epsilon
    int num_iterations;             // optimizer steps per generation round (mu)
    RlScaleRewards scale_rewards;   // GRPO
    RlLossType loss_type;           // GRPO
    int mask_truncated_completions;
    int normalize_advantages;       // RLOO
    int has_reward_clip_range;      // RLOO
    double reward_clip_range[2];
    int max_plans;
    int ep_size;                    // --ep_size: expert-parallel ranks (ep.h; 0 or 1: none)
    int log_completions;            // rank 0 appends every round to output_dir/completions.jsonl
    TrainConfig train;
    Dist *dist;                     // the ranks (NULL: one process)
} GrpoConfig;

// TRL's defaults for GRPOConfig (algo GRPO) or RLOOConfig (algo RLOO).
void grpo_config_default(GrpoConfig *c, GrpoAlgo algo);

// Train: load the model, prompts, tokenizer, reward functions (and the reference model when
// beta != 0), run the shared trainer loop, write output_dir.
Status grpo_run(GrpoConfig *c, TrainResult *res, Err *e);

// ---- the pieces grpo_run composes (tests drive them directly) ------------------------------
typedef struct Grpo Grpo;

// The values TRL's GRPOConfig / RLOOConfig refuse, alone or together (ST_EUSAGE): checked before
// anything is loaded, and again by grpo_create.
Status grpo_check_config(const GrpoConfig *c, Err *e);
// Everything but the policy: tokenizer, prompts, rewards, reference model, buffers. m is the
// policy (fp32 master weights, not owned); its current weights are the reference's.
Status grpo_create(GrpoConfig *c, Model *m, Grpo **out, Err *e);
void grpo_free(Grpo *g);
// The StepSource for trainer_loop.
StepSource grpo_source(Grpo *g);
int grpo_prompts(const Grpo *g);  // prompts loaded

// Use these completions as the next generation round instead of generating (the round of
// optimizer step `step`): n = per_device_train_batch_size × GA rows, prompt-major with
// num_generations rows per prompt; prompt[i] indexes the loaded prompts; rewards (n, K) the
// reward functions' values (NaN = None), or NULL to run the reward functions.
Status grpo_set_round(Grpo *g, int step, const int *prompt, const int32_t *const *ids, const int *lens,
                      const double *rewards, Err *e);
// The last round's order of completions in micro-batches (n) and advantages (n), for tests.
const int *grpo_round_order(const Grpo *g);
const double *grpo_round_advantages(const Grpo *g);

#endif
