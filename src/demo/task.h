// task.h: the demo's synthetic verifiable task, generated on the spot: addition of two numbers
// below 10^digits, "a+b=" -> "a+b" as digits. What it writes is ordinary still input: a
// character-level tokenizer.json (byte-level BPE without merges) and tokenizer_config.json,
// Qwen3 config.json files for randomly initialised models, and JSONL datasets in TRL formats:
//   train.jsonl    {"prompt": "12+34=", "completion": "46"}   (SFT: prompt-completion)
//   prompts.jsonl  {"prompt": "12+34=", "answer": "46"}       (distillation / GRPO prompts; the
//                                                              reward exact_match:answer)
//   test.jsonl     {"prompt": ..., "answer": ...}             held-out problems (eval)
//   train_hinted.jsonl  every training problem twice, shuffled: as in train.jsonl and with the
//                  answer written before it, {"prompt": "46=12+34=", "completion": "46"} (the
//                  student's SFT: it learns to read the answer off a hinted prompt, which makes it
//                  its own privileged teacher for self-distillation, TASK_HINT_TEMPLATE)
//   test_hinted.jsonl   the held-out problems with the hint (how good that teacher is)
// Every problem (a, b) is in exactly one of the training pool and the test set; the order of both
// is a seeded shuffle, so the files are the same for the same (digits, n_test, seed).
#ifndef STILL_DEMO_TASK_H
#define STILL_DEMO_TASK_H

#include "../core/common.h"

// Token ids of the tokenizer task_write_tokenizer writes: '0'..'9' are 0..9, '+' 10, '=' 11.
#define TASK_EOS_ID 12          // "<|endoftext|>": ends every completion
#define TASK_PAD_ID 13          // "<|pad|>"
#define TASK_N_TOKENS 14
#define TASK_VOCAB_SIZE 16      // the models' vocabulary (the embedding rows), >= TASK_N_TOKENS

// The hinted prompt: the answer, '=', the problem. As a teacher prompt template (`still distill
// --teacher self --teacher_prompt_template`), filled from a prompts.jsonl row.
#define TASK_HINT_TEMPLATE "{answer}={prompt}"

typedef struct TaskConfig {
    int digits;       // operands in [0, 10^digits), 1..4
    int n_test;       // held-out problems, fewer than the (10^digits)^2 problems
    uint64_t seed;
} TaskConfig;

typedef struct TaskFiles {
    char *tokenizer_dir;   // tokenizer.json, tokenizer_config.json
    char *train, *prompts, *test;
    char *train_hinted, *test_hinted;
    int n_train, n_test;
} TaskFiles;

// A Qwen3 model shape for the task (vocab TASK_VOCAB_SIZE, tied embeddings, EOS / pad ids set).
typedef struct TaskModel {
    int hidden, layers, heads, kv_heads, head_dim, ffn;
} TaskModel;

// Write the tokenizer, the datasets and nothing else into dir (created). Paths in *out (free
// with task_files_free).
Status task_write(const TaskConfig *c, const char *dir, TaskFiles *out, Err *e);
void task_files_free(TaskFiles *f);
// Write a config.json for shape m at path.
Status task_write_model_config(const TaskModel *m, const char *path, Err *e);
// Parameters of a model of shape m (Qwen3: q/k norms, tied embeddings).
size_t task_model_params(const TaskModel *m);
// Trainable weights of a rank-r LoRA adapter on every linear layer of such a model (all-linear).
size_t task_lora_params(const TaskModel *m, int r);

#endif
