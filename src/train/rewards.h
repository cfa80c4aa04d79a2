// rewards.h: reward functions for online RL (GRPO, RLOO) and the metrics of `still eval`.
//
// A reward is given by a spec string (docs/grpo.md):
//   exact_match:COLUMN   1 when the completion's final answer (its last \boxed{...}, else its last
//                        number) equals the row's COLUMN (its \boxed{} / "#### x" answer, else the
//                        whole value), numbers compared as numbers; else 0
//   regex:PATTERN        1 when the PCRE2 pattern matches somewhere in the completion; else 0
//   length:TARGET        -|TARGET - characters| / 100  (characters = Unicode code points)
//   format               1 when the completion is "<think>\n...\n</think>\n<answer>\n...\n</answer>"
//                        (the think / answer format reward of the R1 recipes); else 0
//   model:DIR            a reward model (a sequence classifier with one label: still reward, or a
//                        Hugging Face *ForSequenceClassification checkpoint) scoring prompt +
//                        completion as TRL does (reward_model.h), batched through the same engine;
//                        loaded by rewards_load_models once the backend exists
//   cmd:PROGRAM          an external program (run by /bin/sh -c, started once and kept running):
//                        for every completion it reads one JSON line on stdin,
//                        {"prompt", "completion", "completion_ids", "columns": {...}},
//                        and answers one line: a number, or null (no reward for this completion)
// A reward that does not apply gives NaN (TRL's None): it is left out of that completion's sum.
// Functions see the text decoded with skip_special_tokens, as TRL's reward functions do.
#ifndef STILL_REWARDS_H
#define STILL_REWARDS_H

#include "../core/common.h"

#include <cjson/cJSON.h>
#include <sys/types.h>

typedef enum { REWARD_EXACT_MATCH = 0, REWARD_REGEX, REWARD_LENGTH, REWARD_FORMAT, REWARD_CMD, REWARD_MODEL } RewardKind;

struct Backend;
struct RewardModel;

typedef struct RewardFn {
    RewardKind kind;
    char *spec;          // as given
    char *name;          // TRL's reward function name; the k-th of a name gets "_k" (length, length_2, ...):
                         // distinct within a set, and rewards_init refuses a set where they are not
    char *metric_mean;   // "rewards/<name>/mean"
    char *metric_std;    // "rewards/<name>/std"
    char *arg;           // column, pattern, program, model directory (NULL for format)
    struct RewardModel *model;  // model: once loaded (rewards_load_models)
    double target;       // length
    void *re;            // pcre2_code * (regex, format)
    void *md;            // pcre2_match_data *
    // cmd: the child process
    pid_t pid;
    int fd;              // socket: the child's stdin and stdout
    char *rbuf;          // unread bytes of the child's answers
    size_t rlen, rcap;
} RewardFn;

typedef struct RewardSet {
    RewardFn *fns;       // (n)
    int n;
    double *weights;     // (n) reward_weights, 1 by default
    double timeout_s;    // cmd: seconds to wait for each answer
    // model: how the reward models run (set by the trainer before rewards_load_models)
    const cJSON *chat_template_kwargs;  // the trainer's --chat_template_kwargs (object or NULL)
    int model_batch_size;               // rows per forward pass (<= 0: 8)
    int model_pad_to_multiple_of;       // batch lengths rounded up to this
} RewardSet;

// One completion to score.
typedef struct RewardInput {  // (struct RewardInput in reward_model.h)
    const char *prompt;          // prompt text (decoded, skip_special_tokens)
    const char *completion;      // completion text (decoded, skip_special_tokens)
    const int32_t *ids;          // (n_ids) completion token ids
    int n_ids;
    const cJSON *row;            // the dataset row: its columns (may be NULL)
} RewardInput;

// Parse specs (n >= 1) and start cmd: programs. weights: n_weights values (0 = all 1; else
// exactly n). Errors name the spec and what is wrong.
Status rewards_init(RewardSet *rs, const char *const *specs, int n, const double *weights, int n_weights,
                    double timeout_s, Err *e);
// Load every model: reward onto be (dtype < 0: each checkpoint's). Until then scoring a model:
// reward is an error.
Status rewards_load_models(RewardSet *rs, struct Backend *be, int dtype, Err *e);
// Rewards that cannot be computed are errors, before any step: an exact_match:COLUMN whose column
// no row of the dataset (path, n_rows rows) has names the column and the columns there are. A
// row without it (or with null) where others have it scores NaN (None), as a datasets column does.
Status rewards_check_columns(const RewardSet *rs, const cJSON *const *rows, int n_rows, const char *path, Err *e);
// Stop cmd: children (closing their stdin, then SIGTERM after a grace period) and free.
void rewards_free(RewardSet *rs);
// out (n_in, rs->n): the value of function k for input i at out[i * rs->n + k], NaN for None.
// A cmd: program that dies, stalls past the timeout or answers anything but a number or null
// is an error naming the program.
Status rewards_score(RewardSet *rs, const RewardInput *in, int n_in, double *out, Err *e);

// The pieces of exact_match, exposed for tests. The final answer of a text: the content of its
// last \boxed{...} (braces balanced), else its last number; NULL when it has neither. Caller frees.
char *reward_final_answer(const char *text);
// Do two answers agree: equal as numbers (commas, "$" and a trailing "." ignored), else equal
// after trimming whitespace.
int reward_answers_equal(const char *a, const char *b);

#endif
