// generate.h: the generation engine — batched prompts × num_return_sequences → completions on a
// static KV cache (ARCHITECTURE §6, docs/generate.md). `still generate`, `still chat` and the
// trainers' rollouts (SFT eval, distillation, GRPO/RLOO) all call gen_generate.
//
// Static shapes. Rows (one per prompt × return sequence, prompt-major) run in batches of a fixed
// B = min(batch_size, rows); a short last batch is filled with idle rows. Each batch's prompts are
// left-padded to P slots; RoPE positions come from the attention mask (every row's first real
// token at position 0), also across prefill chunks. Prefill runs a first chunk, then chunks of
// prefill_chunk_size slots; decode then runs one token per row per step for the whole batch;
// finished rows keep running, masked, fed pad_token_id.
// Prefill buckets (pad_to_multiple_of 0, the default): the first chunk is the smallest bucket
// that holds what the full chunks leave of the longest prompt; buckets are the backend's
// prefill_bucket doubled until prefill_chunk_size (cpu: 16, 32, 64, ..., 512), so a 5-token prompt
// computes 16 slots. pad_to_multiple_of > 0 instead pads P to a multiple of it (1: exact lengths).
// Plans: per batch size at most one prefill plan per bucket (or per multiple of the granule up
// to the chunk size) and one decode plan per max_cache_len, which owns the KV cache
// [L][B][NKV][max_cache_len][HD]. model->plans.max_plans turns an extra shape into an error.
//
// Decoding follows transformers' generate() (SEMANTICS_MODEL §3, docs/sampling.md): repetition
// penalty, no_repeat_ngram, bad words, min_new_tokens, then greedy argmax or temperature / top-k /
// top-p / min-p and a draw; several EOS ids; finished rows pad-filled. Two deliberate
// differences, both so that a row never depends on the others in its batch: the repetition
// penalty and no_repeat_ngram look at the row's real tokens only (transformers also counts the
// pad tokens of left padding), and the last prompt token's logits come from the last prefill
// chunk (transformers' recent versions recompute it as a 1-token step).
//
// Randomness: the draw of row (prompt i, sequence j) at step t uses
// rng_keyed_uniform(seed, i, j, t, 0), so a completion depends only on (model, prompt, config,
// seed, i, j): not on batch size, batch composition, thread count or backend. With prompt_keys,
// prompt i of a call draws as prompt prompt_keys[i]: a process generating some prompts of a
// larger list (data parallel) draws exactly what one call over the whole list draws.
//
// Host / device: token ids, lengths and done flags live on the host; per step only the chosen ids
// (and log-probs when asked) come back from the device, and ids, positions, uniforms and ban
// lists (B values each, bans B × K) go to it.
#ifndef STILL_GEN_GENERATE_H
#define STILL_GEN_GENERATE_H

#include "../model/model.h"

#define GEN_MAX_EOS 16
#define GEN_MAX_LIST 512  // ids a generation_config.json list (suppress_tokens, bad_words_ids, ...) may hold

typedef enum {
    GEN_FINISH_NONE = 0,  // still running (never in a returned sequence)
    GEN_FINISH_EOS,       // produced an EOS id (included in ids)
    GEN_FINISH_STOP,      // the on_token callback stopped it (stop strings; the token is included)
    GEN_FINISH_LENGTH,    // reached max_new_tokens
} GenFinish;

const char *gen_finish_name(GenFinish f);  // "eos", "stop", "length"

typedef enum {
    GEN_LOGPROBS_NONE = 0,
    GEN_LOGPROBS_RAW,        // log_softmax(logits / temperature)[id]: no penalties or filters (TRL's
                             // GRPO/RLOO recompute this); greedy rows use temperature 1
    GEN_LOGPROBS_PROCESSED,  // under the processed distribution the token was drawn from
} GenLogprobs;

// Called on the host for every token a live row produces, in step order. Return non-zero to
// finish that row now (GEN_FINISH_STOP), e.g. when its text ends with a stop string.
typedef int (*GenTokenFn)(void *user, int prompt_index, int seq_index, int32_t id, float logprob);

typedef struct GenConfig {
    // length
    int max_new_tokens;          // >= 1: the most tokens a row generates (and the buffers' size)
    int max_length;              // > 0: a row also stops once prompt + generated tokens reach it (at least
                                 // one token is generated); 0 = off
    int min_new_tokens;          // EOS ids banned until this many tokens exist; 0 = off
    int min_length;              // EOS ids banned while prompt + generated tokens < min_length; 0 = off;
                                 // ignored when min_new_tokens > 0 (generate() replaces it then)
    // decoding (transformers GenerationConfig names and meanings)
    int do_sample;               // 0 = greedy argmax (first index on ties)
    float temperature;           // > 0
    int top_k;                   // <= 0 = off
    double top_p;                // >= 1 = off
    float min_p;                 // 0 = off
    float repetition_penalty;    // 1 = off
    int no_repeat_ngram_size;    // 0 = off
    const int32_t *bad_words;    // ids of every bad word back to back (caller owns); NULL: cfg_bad_words
    const int *bad_words_off;    // (n_bad_words + 1) word w = bad_words[off[w] .. off[w+1])
    int n_bad_words;
    // generation_config.json's lists, held here (the struct stays copyable)
    int32_t cfg_bad_words[GEN_MAX_LIST];      // bad_words_ids back to back, used when bad_words is NULL
    int cfg_bad_words_off[GEN_MAX_LIST + 1];
    int n_cfg_bad_words;
    int32_t suppress[GEN_MAX_LIST];           // suppress_tokens: -inf at every step
    int n_suppress;
    int32_t begin_suppress[GEN_MAX_LIST];     // begin_suppress_tokens: -inf at the first generated token
    int n_begin_suppress;
    int32_t eos[GEN_MAX_EOS];    // EOS ids: any of them finishes a row
    int n_eos;
    int ignore_eos;              // keep going after EOS (until max_new_tokens)
    int32_t pad_token_id;        // fills left padding and finished rows; < 0: eos[0], else 0
    int num_return_sequences;    // sequences per prompt, >= 1
    uint64_t seed;
    const int *prompt_keys;      // (prompts of the call) the prompt index in the draw keys; NULL: i
    GenLogprobs logprobs;
    int top_logprobs;            // gen_slots only: the most likely ids at every step and their
                                 // log_softmax(logits / temperature) (GenSeq.top_*), at most 20; 0 = off
    // static shapes
    int batch_size;              // rows per batch; <= 0: every row in one batch
    int pad_to_multiple_of;      // 0: the backend's prefill buckets; > 0: pad prompts to a multiple
                                 // of this (1: each length its own plans)
    int prefill_chunk_size;      // slots per prefill chunk (the largest bucket); a multiple of
                                 // pad_to_multiple_of when that is > 1
    int max_cache_len;           // 0: longest padded prompt + max_new_tokens, rounded up to 128
    // host callback (may be NULL)
    GenTokenFn on_token;
    void *user;
    // progress (may be NULL): rows finished of every row of the call, after each batch and each
    // decode step (step: the batch's decode step, -1 after a batch)
    void (*on_progress)(void *user, int rows_done, int rows_total, int step);
    void *progress_user;
    // lockstep (may be NULL; gen_generate only): a collective over a group of processes whose
    // forward passes must match one for one (expert parallelism's exchange): the elementwise max
    // of v (n) over the group, in place. The group's calls then run the same batches (of the most
    // rows any member has; its own rows past its count idle), every batch prefilled as its
    // longest prompt across the group, and decode steps until no member has a live row (rows
    // that are done take no more tokens).
    Status (*lockstep)(void *ctx, int *v, int n, Err *e);
    void *lockstep_ctx;
} GenConfig;

// One completion.
typedef struct GenSeq {
    int prompt_index, seq_index;
    int32_t *ids;                // (n) generated ids (the EOS id included when produced)
    float *logprobs;             // (n) when cfg.logprobs != NONE, else NULL
    int n;
    GenFinish finish;
    int cached;                  // prompt tokens not prefilled: their keys were in the cache (gen_slots)
    int32_t *top_ids;            // (n, cfg.top_logprobs) gen_slots: the likeliest ids of each step, or NULL
    float *top_logprobs;         // (n, cfg.top_logprobs) their log-probs (as `logprobs` RAW: temperature, no filters)
} GenSeq;

typedef struct GenStats {
    long prompt_tokens;          // real prompt tokens
    long prefill_slots;          // slots run through prefill, padding included
    long generated_tokens;       // tokens returned
    long decode_steps;           // batched decode steps (forward passes of T = 1)
    long decode_rows;            // decode_steps × B (row-steps computed, idle and finished rows included)
    double prefill_seconds, decode_seconds;
    int batches, batch_size, max_cache_len;
    int plans_built;             // plans this call built
    int plans_total;             // plans the model holds after the call
    int graphs;                  // plan steps recorded as replayable graphs (CUDA), held by the model
    size_t plan_bytes;           // their memory
} GenStats;

// transformers' defaults: greedy, temperature 1, top_k 50, top_p 1, no penalties; plus
// max_new_tokens 256, batch_size 8, pad_to_multiple_of 0 (prefill buckets), prefill_chunk_size 512.
void gen_config_default(GenConfig *c);
// Apply a model directory's generation_config.json (if present) over c: do_sample, temperature,
// top_k, top_p, min_p, repetition_penalty, no_repeat_ngram_size, max_new_tokens, max_length (when
// there is no max_new_tokens; transformers' default value 20 means 20 new tokens), min_length,
// min_new_tokens, bad_words_ids, suppress_tokens, begin_suppress_tokens, eos_token_id (int or
// list), pad_token_id. Without one, config.json's eos and pad ids are used. Errors name the file
// and field (docs/sampling.md lists what is honoured).
Status gen_config_load(GenConfig *c, const char *model_dir, const ModelConfig *mc, Err *e);
// Write dir/generation_config.json as transformers' GenerationConfig.from_model_config would for
// cfg: bos, eos (int or list) and pad ids, do_sample false (atomically). `still init` and checkpoints
// of a model without one of its own use it.
Status gen_config_write_default(const ModelConfig *cfg, const char *dir, Err *e);
// Add an EOS id unless already present (tokenizer eos, say). Error when the list is full.
Status gen_config_add_eos(GenConfig *c, int32_t id, Err *e);
// Check ranges (temperature > 0, top_p in [0,1], chunk a multiple of the padding granule...).
Status gen_config_check(const GenConfig *c, int vocab_size, Err *e);

// Generate for n_prompts prompts (prompts[i] has lens[i] >= 1 ids). *out receives
// n_prompts * num_return_sequences sequences, prompt-major (out[i * nrs + j]); free with
// gen_seqs_free. stats may be NULL. Errors: bad config, an id outside the vocabulary, a prompt
// that does not fit max_cache_len, a plan over max_plans.
Status gen_generate(Model *m, const GenConfig *cfg, const int32_t *const *prompts, const int *lens, int n_prompts,
                    GenSeq **out, GenStats *stats, Err *e);
void gen_seqs_free(GenSeq *s, int n);

// A conversation whose keys and values stay in one decode plan's cache between calls (still
// chat): a call prefills only what the prompt adds to the longest prefix it shares with the
// tokens already cached (at least its last token), then decodes as gen_generate does with one
// row. The cache length is cfg->max_cache_len (fixed by the caller: another length is another
// plan, and the conversation is prefilled again); when the new turn does not fit behind what is
// cached, the whole prompt is laid out afresh. A repetition penalty turns the reuse off (its
// counts are built during prefill), and so do a sliding layer's ring cache (the new turn's
// padding would overwrite the window) and a cache past longrope's original context (the switch
// to long_factor reruns the sequence). Sampling draws as gen_generate's prompt 0.
typedef struct GenSession {
    int32_t *ids;     // (n) tokens whose keys and values are in the cache, in order
    int *slot;        // (n) the cache slot of each
    int n, cap;
    int next;         // the first slot after everything written
    int32_t *mask;    // (S) host copy of the cache's key mask
    const void *dp;   // the plan holding them (NULL: nothing cached)
    int reused;       // tokens the last call did not prefill again
} GenSession;

Status gen_session_generate(Model *m, const GenConfig *cfg, GenSession *s, const int32_t *prompt, int len,
                            GenSeq **out, GenStats *stats, Err *e);
void gen_session_free(GenSession *s);

// The padded prompt length P of a batch whose longest prompt has n tokens on backend be.
int gen_padded_len(const GenConfig *cfg, const Backend *be, int n);
// The same, and the slots of the first prefill chunk (the rest run prefill_chunk_size at a time).
int gen_prefill_schedule(const GenConfig *cfg, const Backend *be, int n, int *first);
// The cache length gen_generate uses for these prompts on backend be (cfg.max_cache_len, or
// P of the longest prompt + max_new_tokens rounded up to 128).
int gen_cache_len(const GenConfig *cfg, const Backend *be, const int *lens, int n_prompts);

#endif
