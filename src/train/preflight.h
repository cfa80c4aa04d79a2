// preflight.h: what a run reads and writes, checked before any model is loaded, so a broken
// dataset line, a reward spec that does not resolve or an output_dir that cannot be written is
// reported in a second, not after minutes of loading weights.
#ifndef STILL_PREFLIGHT_H
#define STILL_PREFLIGHT_H

#include "rollout.h"

// output_dir can be created and written (NULL: nothing to check).
Status preflight_output_dir(const char *output_dir, Err *e);
// vocab_size of model_dir/config.json (0 when it cannot be read: the model load reports that).
int preflight_vocab_size(const char *model_dir);
// The prompts of path parse with model_dir's tokenizer and chat template (cfg's vocab_size 0:
// config.json's); nothing is kept.
Status preflight_prompts(const char *path, const PromptConfig *cfg, const char *model_dir, Err *e);
// Reward / metric specs resolve (cmd: programs start and are stopped again).
Status preflight_rewards(const char *const *specs, int n, const double *weights, int n_weights, double timeout_s,
                         Err *e);

#endif
