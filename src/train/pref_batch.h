// pref_batch.h: what the preference trainers (DPO, KTO) share: rows of prompt + completion in one
// static-shape batch, right-padded as TRL's preference collators pad them, and their sequence
// log-probs through logprob_head (forward, per-row statistics, and the backward pass of
// per-token coefficients). No [B, T, V] tensor: the head runs in chunks of rows.
#ifndef STILL_PREF_BATCH_H
#define STILL_PREF_BATCH_H

#include "../model/model.h"
#include "../model/plan.h"

typedef struct SeqRows {
    int R, Tcap;               // rows and the longest T any batch can have (buffers sized once)
    int T;                     // this batch's T (a multiple of pad_to_multiple_of)
    int32_t *ids, *pos, *seg;  // (R, T)
    int32_t *targets;          // (R, T) ids[t+1] where token t+1 is a completion token, else IGNORE_INDEX
    float *tokw;               // (R, T) weight of target t in the row's sequence log-prob (1, or ld_alpha)
    int *len;                  // (R) completion tokens kept (TRL's completion_mask sum)
    int *tlen;                 // (R) completion tokens that are targets (the shifted mask sum)
    int *full;                 // (R) tokens kept (prompt + completion after truncation)
    int n_tokens;              // real tokens of the batch (TRL's attention_mask sum)
    int T_min;                 // > 0: the longest row is taken to be at least this long (expert parallel:
                               // every rank's batch of one shape, the longest of the global batch)
} SeqRows;

void seq_rows_init(SeqRows *s, int R, int Tcap);
void seq_rows_free(SeqRows *s);
// Tokens a row keeps: min(np + nc, max_length) (max_length <= 0: no truncation).
int seq_row_tokens(int np, int nc, int max_length);
// Start a batch: every row empty (all padding).
void seq_rows_reset(SeqRows *s);
// Row r = prompt (np) + completion (nc), cut to max_length keeping the start or (keep_end) the end,
// as TRL's DataCollatorForPreference / DataCollatorForUnpairedPreference cut them.
void seq_rows_set(SeqRows *s, int r, const int32_t *prompt, int np, const int32_t *comp, int nc, int max_length,
                  int keep_end);
// Fix T (the longest row, or T_min, rounded up to pad_to_multiple_of, at least 1) and lay the rows out as
// (R, T): positions from 0, segment 1 on real tokens, targets, token weights 1.
void seq_rows_finish(SeqRows *s, int pad_to_multiple_of);

// Device buffers and their host copies for the head's outputs over (R, Tcap).
typedef struct SeqScorer {
    Backend *be;
    int R, Tcap;
    float *d_logp, *d_stats, *d_coef;      // device (R*Tcap), (R*Tcap, LOGPROB_STATS), (R*Tcap)
    float *logp, *entropy, *stats, *coef;  // host, the same shapes
} SeqScorer;

void seq_scorer_init(SeqScorer *sc, Backend *be, int R, int Tcap);
void seq_scorer_free(SeqScorer *sc);
// Forward of m on the rows with a plan of `mode` (PLAN_SCORE for a frozen model, PLAN_TRAIN before
// a backward pass): per-token log-probs into sc->logp; with stats, entropies and row statistics too.
// *plan (may be NULL) receives the plan.
Status seq_score(SeqScorer *sc, Model *m, PlanMode mode, const SeqRows *s, int stats, Plan **plan, Err *e);
// out (R) = sum_t tokw * logp of every row.
void seq_sums(const SeqScorer *sc, const SeqRows *s, double *out);
// Back-propagate sum_t coef * logp (sc->coef, host (R, T)) through plan p (seq_score's, TRAIN):
// every parameter gradient of m accumulates.
void seq_backward(SeqScorer *sc, Model *m, Plan *p, const SeqRows *s);

#endif
