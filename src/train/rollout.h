// rollout.h: what every on-policy trainer (distillation, GRPO, RLOO) and `still eval` share:
// prompt datasets, rollouts through the generation engine, and the static-shape scoring
// batches that put [prompt ; completion] rows through a model's loss heads.
//
// Prompt datasets (TRL's prompt-only formats): JSONL / JSON array rows with "prompt" as a string
// (tokenised as is, with the tokenizer's special tokens, as GRPO does) or a message list (chat
// template with add_generation_prompt and chat_template_kwargs); every other column is kept for
// reward functions and teacher templates. Rows with "messages" (conversational) use all messages
// but the last assistant one as the prompt and keep that one as the dataset completion (GKD).
//
// Scoring layout. A batch of n rows (prompt_i, completion_i) becomes one static shape:
// T = round_up(P + C, pad_to_multiple_of), P = the longest prompt, C = max_completion_length.
// Prompts are left-aligned at the end of the prompt region (left padding, seg 0), completions
// follow at P, right padding after them. Positions count real tokens from 0. targets[t] is the
// next token when that token is a completion token counted by the completion mask (up to and
// including the first EOS of any EOS id), else IGNORE_INDEX: so the loss heads see exactly the
// completion tokens, and row r's completion token k sits at flat index r*T + P - 1 + k.
#ifndef STILL_ROLLOUT_H
#define STILL_ROLLOUT_H

#include "../gen/generate.h"
#include "data.h"

typedef struct PromptRow {
    int32_t *ids;          // (n) prompt token ids
    int n;
    char *text;            // the rendered prompt text (what the model sees)
    cJSON *row;            // the dataset row (columns for rewards and templates); owned
    int32_t *completion;   // (n_completion) a dataset completion (messages rows), else NULL
    int n_completion;
} PromptRow;

typedef struct PromptSet {
    PromptRow *rows;       // (n)
    int n;
    int conversational;    // prompts are message lists
} PromptSet;

typedef struct PromptConfig {
    const cJSON *chat_template_kwargs;  // object or NULL
    int max_prompt_length;              // > 0: keep the last tokens (left truncation); 0: none
    int skip_bad_rows;
    int vocab_size;                     // ids checked against it
} PromptConfig;

// Load prompts; errors name file:line and the reason.
Status prompts_load(const char *path, const PromptConfig *cfg, const TextCodec *codec, PromptSet *ps, Err *e);
void prompts_free(PromptSet *ps);
// rewards_check_columns over the rows of ps (path names the file in the error).
struct RewardSet;
Status prompts_check_rewards(const PromptSet *ps, const struct RewardSet *rs, const char *path, Err *e);
// Render a prompt row through a template string with {column} placeholders filled from the row
// (self-distillation's teacher prompt). For message-list prompts the filled template replaces
// the content of the last user message; the result is encoded as the dataset encodes prompts.
Status prompts_render_template(const PromptSet *ps, int index, const char *tmpl, const PromptConfig *cfg,
                               const TextCodec *codec, PromptRow *out, Err *e);
void prompt_row_free(PromptRow *r);

// The completion mask rule: tokens up to and including the first id in eos (n_eos ids).
int rollout_mask_len(const int32_t *ids, int n, const int32_t *eos, int n_eos);

typedef struct ScoreBatch {
    int B, T, P, C;         // rows, padded length, prompt region, completion region
    int32_t *ids, *pos, *seg, *targets;  // (B*T) host
    int *comp_len;          // (B) completion tokens counted by the mask
    int *truncated;         // (B) 1 when the completion did not end with EOS
    int n_targets;          // sum of comp_len
} ScoreBatch;

// Lay out rows (prompt_i, completion_i) as a scoring batch. C = max_completion_length (longer
// completions are an error); B rows; a prompt region of the longest prompt, at least P_min
// (expert parallel: every rank's batch of one shape); pad_to_multiple_of as generation uses it.
// A completion is cut after its first EOS (TRL's rule): the tokens after it are padding (segment
// 0), outside the attention and the load-balancing loss of a mixture of experts.
Status score_batch_build(ScoreBatch *sb, const int32_t *const *prompts, const int *prompt_lens,
                         const int32_t *const *completions, const int *completion_lens, int B, int C, int P_min,
                         int pad_to_multiple_of, const int32_t *eos, int n_eos, Err *e);
void score_batch_free(ScoreBatch *sb);

#endif
