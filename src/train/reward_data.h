// reward_data.h: preference pairs for reward models, as TRL's RewardTrainer._prepare_dataset
// builds them (docs/reward.md). The format is decided by the first row:
//   chosen_ids / rejected_ids   pre-tokenised full sequences (also the legacy chosen_input_ids /
//                               rejected_input_ids); no tokenizer needed
//   chosen / rejected strings   an optional "prompt" string is prepended to both; EOS is appended to
//                               chosen and rejected when they lack it (before the prompt is
//                               prepended), and each is tokenised with the tokenizer's special tokens
//   chosen / rejected messages  an optional "prompt" message list is prepended to both; the chat
//                               template renders the whole conversation (the row's "tools" and
//                               chat_template_kwargs), tokenised without special tokens
//   margin (optional)           a number per row, subtracted inside the loss; TRL's collator uses
//                               it when the first row has it
// Pairs whose chosen or rejected sequence has more than max_length tokens are dropped (TRL
// filters them; it does not truncate).
#ifndef STILL_REWARD_DATA_H
#define STILL_REWARD_DATA_H

#include "data.h"

typedef struct RewardPair {
    int32_t *chosen, *rejected;  // (n_chosen), (n_rejected) full sequences
    int n_chosen, n_rejected;
    double margin;               // 0 without a margin column
} RewardPair;

typedef struct RewardPairs {
    RewardPair *p;               // (n)
    int n;
    int has_margin;              // the first row has "margin"
    int pretokenised, conversational;
    int n_dropped;               // pairs over max_length
    int n_bad;                   // rows skipped with skip_bad_rows
    char first_bad[512];
} RewardPairs;

typedef struct RewardDataConfig {
    int max_length;              // <= 0: no filter
    const cJSON *chat_template_kwargs;  // object or NULL
    int skip_bad_rows;
    int vocab_size;              // > 0: ids must lie in [0, vocab_size)
} RewardDataConfig;

// Does the first row of path hold preference pairs ("chosen" and "rejected", or their ids)? *ids:
// pre-tokenised (no tokenizer needed). Errors name the file.
Status reward_data_detect(const char *path, int *is_pairs, int *ids, Err *e);
// Read path (JSONL or a JSON array). codec may be NULL for pre-tokenised data. Errors name
// path:line and the column.
Status reward_data_load(const char *path, const RewardDataConfig *cfg, const TextCodec *codec, RewardPairs *out,
                        Err *e);
void reward_pairs_free(RewardPairs *rp);

#endif
