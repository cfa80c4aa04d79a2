// slots.h: continuous batching on the static KV cache — a fixed number of decode slots (rows of
// one decode plan), each running its own sequence: a sequence joins a free slot (its prompt
// prefilled into that row alone, in the backend's prefill buckets) while the others keep their
// cache, every step decodes the busy slots at once, and a finished slot takes the next sequence.
//
// Decode cost follows the busy slots: a step runs over rows [0, n) only, n the smallest bucket
// 1, 2, 4, ... (capped at B) that holds them; before the step, busy rows above n swap places
// (cache rows over the slots in use, masks, sampler parameters) with free rows below it.
// `still serve` schedules its requests on it (src/serve).
//
// Same tokens as gen_generate. A sequence's keys lie in its row exactly as gen_generate lays out
// a batch of one: the padded prompt ends at the slot the next token goes to, and the generated
// tokens follow contiguously, so attention sees the same keys in the same order; positions,
// sampler parameters, bans and draws are the row's own (draw of sequence j at its step t:
// rng_keyed_uniform(seed, 0, j, t, 0), gen_generate's for prompt 0). All rows write each
// decode step at one shared cache slot, `cur`: a sequence of padded length P joins only once
// cur >= P (at most P steps' wait; at once when nothing runs), and only when its max_new_tokens
// fit before the end of the cache; when no slot is busy cur starts again. Plans: one decode plan
// (B, S) (with one recorded step per row bucket on graph backends) and one batch-1 prefill plan
// per bucket.
//
// Not here (gen_generate has them): repetition_penalty (its seen-id counts are per batch), stop
// callbacks are as in GenConfig.on_token.
#ifndef STILL_GEN_SLOTS_H
#define STILL_GEN_SLOTS_H

#include "generate.h"

typedef struct GenSlots GenSlots;

#define GEN_MAX_TOP_LOGPROBS 20  // GenConfig.top_logprobs at most (OpenAI's limit)

typedef struct GenSlotsStats {
    long decode_steps;    // decode steps run
    long decode_rows;     // rows computed, summed over the steps (the buckets)
    long busy_rows;       // busy rows, summed over the steps
    long prefill_tokens;  // real prompt tokens prefilled
    long prefill_slots;   // slots prefilled, padding included
    long swapped_slots;   // cache slots moved between rows by compaction
    long reused_tokens;   // prompt tokens not prefilled: a free row held their keys (prefix reuse)
} GenSlotsStats;

// B slots of S cache slots each (one decode plan).
Status gen_slots_open(Model *m, int B, int S, GenSlots **out, Err *e);
void gen_slots_close(GenSlots *g);
int gen_slots_busy(const GenSlots *g);  // slots running a sequence
int gen_slots_size(const GenSlots *g);  // B
// Prefix reuse (on after open): a sequence joins the free slot whose cache holds the longest
// prefix of its prompt and prefills only the rest. The reused keys and values of generated
// tokens came from decode steps, so logits match a fresh prefill to float roundings, not bits.
void gen_slots_set_prefix_reuse(GenSlots *g, int on);
void gen_slots_stats(const GenSlots *g, GenSlotsStats *out);
// The rows a decode step of `busy` busy slots computes among B: the smallest power of two >= busy,
// at most B.
int gen_slots_bucket(int B, int busy);
// Could k sequences of this prompt length and cfg->max_new_tokens join now (free slots, cur >= P,
// room before the end of the cache)? Sequences that can never fit (P + max_new_tokens - 1 > S)
// are an error of gen_slots_add.
int gen_slots_can_join(const GenSlots *g, const GenConfig *cfg, int len, int k);
// Start sequence seq_index of a prompt in a free slot: prefill, then the next gen_slots_step
// draws its first token. cfg is copied (on_token / user are called with prompt_index 0 and
// seq_index); out receives the ids (allocated here, freed with gen_seqs_free-like free of ids /
// logprobs) and out->finish becomes non-NONE when the sequence ends. out must stay valid until
// then. Errors: bad config, ids outside the vocabulary, a prompt that can never fit, no room now.
Status gen_slots_add(GenSlots *g, const GenConfig *cfg, int seq_index, const int32_t *prompt, int len, GenSeq *out,
                     Err *e);
// One step: draw every busy slot's next token (on_token called), finish those that end, then one
// decode step of the busy slots' bucket. Returns the number of slots still busy.
int gen_slots_step(GenSlots *g);

#endif
