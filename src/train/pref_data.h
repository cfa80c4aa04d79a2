// pref_data.h: preference datasets in TRL's formats -> token ids, as DPOTrainer._prepare_dataset
// (trl/trainer/dpo_trainer.py, TRL 1.10.0.dev0) prepares them; docs/dpo.md.
//
// Paired rows (DPO), formats decided by the first row as TRL does:
//   prompt / chosen / rejected     strings or message lists
//   chosen / rejected              implicit prompt: the longest common prefix (extract_prompt,
//                                  characters of strings or whole messages) becomes the prompt
//   prompt_ids / chosen_ids / rejected_ids   already tokenised (the collator's input)
// Text rows: EOS appended to chosen / rejected when missing; prompt_ids = ids(prompt) and
// chosen_ids = ids(prompt + chosen)[len(prompt_ids):] (tokenizer with its special tokens).
// Conversational rows: prompt_ids = template(prompt, add_generation_prompt), chosen_ids =
// template(prompt + chosen)[len(prompt_ids):], no EOS added. With keep_start truncation, rows
// whose prompt alone has max_length tokens or more are dropped (counted).
// Optional numeric columns ref_chosen_logps / ref_rejected_logps are kept (NAN when absent).
#ifndef STILL_PREF_DATA_H
#define STILL_PREF_DATA_H

#include "data.h"

typedef struct PrefConfig {
    int max_length;                     // <= 0: none
    int keep_end;                       // truncation_mode keep_end (nothing is dropped then)
    const cJSON *chat_template_kwargs;  // object or NULL
    int skip_bad_rows;
    int vocab_size;                     // > 0: ids must lie in [0, vocab_size)
} PrefConfig;

typedef struct PrefExample {
    int32_t *prompt, *chosen, *rejected;  // (np), (nc), (nr)
    int np, nc, nr;
    double ref_chosen, ref_rejected;      // the dataset's ref_*_logps columns, NAN when absent
} PrefExample;

typedef struct PrefSet {
    PrefExample *ex;  // (n)
    int n;
    int tokenised, conversational, implicit_prompt;
    int has_ref;      // every row carries both ref_*_logps columns
    int n_dropped;    // prompt alone reaches max_length (keep_start)
    int n_bad;        // rows skipped with skip_bad_rows
    char first_bad[512];
} PrefSet;

// Does the file need a tokenizer (anything but pre-tokenised rows)? From its first row.
Status pref_detect(const char *path, int *needs_codec, Err *e);
// Read path. codec may be NULL for pre-tokenised rows. Errors name path:line.
Status pref_load(const char *path, const PrefConfig *cfg, const TextCodec *codec, PrefSet *out, Err *e);
void pref_free(PrefSet *s);

// ---- unpaired rows (KTO: trl/trainer/kto_trainer.py::_prepare_dataset) ------------------------------
//   prompt / completion / label    strings or message lists; label true = desirable
//   prompt_ids / completion_ids / label
//   paired rows (any format above)  unpaired as TRL's unpair_preference_dataset does: per block of
//                                   1000 rows, every chosen row (label true), then every rejected one
// EOS appended to text completions; rows whose prompt alone has max_length tokens or more dropped.
// KL completions (kl_batch > 0): within each run of kl_batch consecutive rows the completions
// rotate by one: row k gets row k-1's, the first row the run's last (TRL's add_kl_completion_ids).
typedef struct UnpairedExample {
    int32_t *prompt, *completion;  // (np), (nc)
    int np, nc;
    int label;                     // 1 desirable, 0 undesirable
    int kl_src;                    // the row whose completion is this row's KL completion (-1: none)
    double ref_logp, ref_kl_logp;  // ref_logps / ref_KL_logps columns, NAN when absent
} UnpairedExample;

typedef struct UnpairedSet {
    UnpairedExample *ex;
    int n;
    int from_pairs;                // unpaired from chosen / rejected rows
    int has_ref;                   // every row carries ref_logps (and ref_KL_logps with KL)
    int n_desirable;
    int n_dropped, n_bad;
    char first_bad[512];
} UnpairedSet;

Status unpaired_detect(const char *path, int *needs_codec, Err *e);
Status unpaired_load(const char *path, const PrefConfig *cfg, const TextCodec *codec, int kl_batch, UnpairedSet *out,
                     Err *e);
void unpaired_free(UnpairedSet *s);

// TRL's extract_prompt on two strings: the length (bytes) of the prompt and where chosen's and
// rejected's remainders start (*c0, *r0). Characters are code points, as Python compares them.
// Fails for an empty chosen or rejected (TRL fails there too).
Status pref_extract_prompt_text(const char *chosen, const char *rejected, size_t *prompt_len, size_t *c0, size_t *r0,
                                Err *e);

#endif
