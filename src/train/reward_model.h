// reward_model.h: a sequence-classification model (a reward model) run over token sequences in
// static-shape batches through the same engine as every trainer (score plans, the backend's
// score_head op), pooled as transformers pools (qwen3_cls_pool). `still score` and the
// --reward model:DIR rewards of grpo / rloo use it.
#ifndef STILL_REWARD_MODEL_H
#define STILL_REWARD_MODEL_H

#include "../model/model.h"

// Scores out (n, NL) of n sequences ids[i] (lens[i] tokens) through classifier m, in batches of B
// rows in the given order, each T = round_up(its longest, pad_to_multiple_of), pooled at
// pad_token_id (< 0: each row's last token). Plans are built as shapes need them.
Status reward_model_score(Model *m, const int32_t *const *ids, const int *lens, int n, int B, int pad_to_multiple_of,
                          int pad_token_id, float *out, Err *e);

// ---- a reward model as a GRPO / RLOO reward (--reward model:DIR, rewards.h) ------------------
typedef struct RewardModel RewardModel;
struct RewardInput;

// DIR can serve as a reward before anything loads: a sequence classifier with one label (TRL
// loads it with num_labels=1) and a tokenizer. Errors name DIR and what is missing.
Status reward_model_check(const char *dir, Err *e);
// Load DIR (frozen; dtype < 0: the checkpoint's) on be, with its tokenizer and chat template.
Status reward_model_open(const char *dir, Backend *be, int dtype, RewardModel **out, Err *e);
void reward_model_close(RewardModel *rm);
// The reward of each completion as TRL's GRPOTrainer computes a model reward: the reward model's
// chat template over the row's "prompt" messages + {"role": "assistant", "content": completion}
// (with chat_template_kwargs) when the prompt is a message list, else prompt + completion as
// text; tokenised without special tokens; padded with the tokenizer's pad token (else EOS), which
// pooling skips; logits[:, 0]. out[i * stride] for input i (NaN for an empty sequence).
Status reward_model_rewards(RewardModel *rm, const struct RewardInput *in, int n, const cJSON *chat_template_kwargs,
                            int B, int pad_to_multiple_of, double *out, int stride, Err *e);

#endif
