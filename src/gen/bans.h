// bans.h: the host side of the history-dependent logits processors. The host holds each row's
// token history (prompt incl. pads + generated); every step it lists the ids these processors
// set to -inf, and uploads the lists as sample_logits' `banned` (B,K) array (docs/sampling.md).
// Each function appends to out[*n..cap) and counts every id in *n even past cap, so the caller
// can tell that K was too small. Duplicates are harmless.
#ifndef STILL_GEN_BANS_H
#define STILL_GEN_BANS_H

#include <stdint.h>

// NoRepeatNGramLogitsProcessor(n): ids (len) the whole history. When len >= n - 1 (and n > 0),
// every earlier window w of length n with w[:n-1] == the last n-1 ids bans w[n-1].
void bans_no_repeat_ngram(int32_t *out, int cap, int *n_out, const int32_t *ids, int len, int n);

// NoBadWordsLogitsProcessor: words are `nwords` id sequences, word w = words[off[w] .. off[w+1]).
// A one-id word equal to an eos id is dropped (as HF does); other one-id words are always banned;
// a longer word (no longer than the history) bans its last id iff its other ids equal the tail
// of the history.
void bans_bad_words(int32_t *out, int cap, int *n_out, const int32_t *ids, int len, const int32_t *words,
                    const int *off, int nwords, const int32_t *eos, int neos);

// MinLengthLogitsProcessor / MinNewTokensLengthLogitsProcessor: all eos ids while
// cur_len < min_length, or cur_len - prompt_len < min_new_tokens (cur_len = prompt incl. pads +
// generated). 0 = off.
void bans_min_tokens(int32_t *out, int cap, int *n_out, int cur_len, int prompt_len, int min_length,
                     int min_new_tokens, const int32_t *eos, int neos);

// SuppressTokensLogitsProcessor / SuppressTokensAtBeginLogitsProcessor: the ids (n) as given (the
// caller decides the step: every step, or the first generated token only).
void bans_suppress(int32_t *out, int cap, int *n_out, const int32_t *ids, int n);

#endif
