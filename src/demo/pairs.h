// pairs.h: the demo's on-policy preference pairs for `still dpo`, from a model's own scored
// samples. `still eval --num_return_sequences N --do_sample true` on the training prompts
// writes generations.jsonl (one row per sample: prompt_index, prompt, completion and the
// metric's 0 / 1 in "metrics"); for every prompt with a sample the metric scored 0, one pair
//   {"prompt": "12+34=", "chosen": "46", "rejected": "45"}
// chosen: the prompts file's reference column, rejected: the first such sample (in the file's
// order). Prompts whose samples are all right give no pair. `still demo --pairs_from` runs it,
// so commands.sh reproduces the file (docs/demo.md).
#ifndef STILL_DEMO_PAIRS_H
#define STILL_DEMO_PAIRS_H

#include "../core/common.h"

typedef struct PairsConfig {
    const char *generations;  // eval's generations.jsonl
    const char *prompts;      // the prompts it was generated from ({"prompt", answer_key})
    const char *answer_key;   // "answer": the chosen completion
    const char *metric;       // "exact_match:answer": a sample scored 0 by it is rejected
    const char *output;       // the pairs, JSONL (written atomically)
} PairsConfig;

// Write the pairs; *n_pairs of them (may be NULL). Errors name the file and line.
Status demo_write_pairs(const PairsConfig *c, int *n_pairs, Err *e);

#endif
