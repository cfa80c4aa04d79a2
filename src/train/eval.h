// eval.h: evaluation of a model on a prompt dataset: generate a completion for every row (greedy
// by default, the generation engine), score each with metrics given as reward specs
// (rewards.h: exact_match:COLUMN, regex:PATTERN, length:TARGET, format, cmd:PROGRAM), averaged
// over the rows where they apply; plus the loss / perplexity of the dataset's own completions
// (rows with a "completion" column, or message rows ending with an assistant reply), teacher
// forced. `still eval` and the demo call it.
#ifndef STILL_EVAL_H
#define STILL_EVAL_H

#include "../gen/generate.h"
#include "codec.h"
#include "rewards.h"
#include "rollout.h"

typedef struct EvalConfig {
    const char *dataset;
    const char *adapter;                  // PEFT LoRA adapter applied by eval_run (NULL: none)
    const char *output_dir;               // NULL: no files (eval.json, generations.jsonl)
    const char *const *metrics;           // (n_metrics) reward specs
    int n_metrics;
    double reward_timeout;
    const char *chat_template_kwargs;     // JSON object text or NULL
    int max_prompt_length;                // > 0: keep the last tokens of longer prompts
    int skip_bad_rows;
    int loss;                             // compute loss / perplexity on rows with completions
    GenConfig gen;                        // decoding (eval_gen_config_default, then the caller's changes)
} EvalConfig;

typedef struct EvalResult {
    int rows;                 // prompts evaluated
    int n_metrics;
    char **names;             // (n_metrics) the specs
    double *values;           // (n_metrics) mean over rows where the metric applies (NaN: none)
    int *counts;              // (n_metrics) rows where it applies
    int loss_rows;            // rows with a dataset completion
    long loss_tokens;         // completion tokens scored
    double loss, perplexity;  // token-mean cross-entropy and exp(loss); NaN without completions
    long generated_tokens;
    double mean_length;       // generated tokens per row
    double gen_seconds, seconds;
} EvalResult;

// Greedy decoding, max_new_tokens 256, batch_size 8, pad_to_multiple_of 128 (gen_config_default).
void eval_gen_config_default(GenConfig *g);

// Evaluate model m (any weights dtype) whose tokenizer / chat template are `codec` and whose
// directory model_dir supplies generation_config.json's EOS ids (may be NULL). c->gen's EOS list
// is extended with them and the tokenizer's EOS.
Status eval_model(Model *m, ModelCodec *codec, const char *model_dir, const EvalConfig *c, EvalResult *r, Err *e);
// Load model_dir (weights stored as dtype, -1: the checkpoint's) on backend / threads and evaluate.
Status eval_run(const char *model_dir, const char *backend, int threads, int dtype, const EvalConfig *c,
                EvalResult *r, Err *e);
// The summary as JSON: {"rows", "metrics": {spec: mean}, "loss", "perplexity", ...}. Caller deletes.
cJSON *eval_result_json(const EvalResult *r);
void eval_result_free(EvalResult *r);

#endif
