// backend.h: the op table. Everything that touches device memory in a step is an op here, so
// model/, gen/ and train/ are written once and run on every backend (ARCHITECTURE §4).
//
// Conventions (STYLE.md):
//  - llm.c order: outputs first, then inputs, then dims. Dims: B batch, T sequence, C channels,
//    NH query heads, NKV kv heads, HD head dim, N = B*T rows, V vocab, OC output channels.
//  - Forward ops write their outputs with `=`. Backward ops ACCUMULATE (`+=`) into every
//    gradient they produce (activation gradients and parameter gradients alike); callers zero
//    gradient buffers first. A NULL gradient pointer means "not needed".
//  - Pointers are device memory of the backend (host memory for ref and cpu). Weights that may
//    be stored in bf16 (matmul and embedding tables) come with their DType; norm weights,
//    biases, activations, gradients and optimizer state are always fp32.
//  - Ops never allocate. Scratch space comes from the caller's plan.
//  - backend/ref is the spec: plain scalar loops with double accumulators. backend/cpu and
//    backend/cuda are held to it by tests/ops.
//  - Every function pointer is required except the graph_* hooks (NULL on backends that run ops
//    eagerly; callers test them). backend_create fails, naming the op,
//    when a backend leaves a required one NULL (backend.c, REQUIRED_OPS), so a missing op is an
//    error at startup, never a NULL call mid-run.
#ifndef STILL_BACKEND_H
#define STILL_BACKEND_H

#include "../core/common.h"
#include "../core/dtype.h"

#include <stdint.h>

#define IGNORE_INDEX (-100)

// Per-row statistics of logprob_head (row_stats (N, LOGPROB_STATS)).
enum { LOGPROB_STAT_ZMEAN = 0, LOGPROB_STAT_CORRECT = 1, LOGPROB_STAT_LSE2 = 2, LOGPROB_STATS = 3 };

typedef struct Backend Backend;

// One linear layer of matmul_forward_multi: out (N,OC) = inp w^T + bias, w (OC,C) as wdt.
typedef struct MatmulPart {
    float *out;
    const void *w;
    DType wdt;
    const float *bias;  // (OC) or NULL
    int OC;
} MatmulPart;

// Per-row sampling parameters of `sample_logits` (device memory, uploaded once per generate call).
// The HF GenerationConfig fields they mirror and their "off" values are in docs/sampling.md.
typedef struct SampleParams {
    float temperature;         // > 0; divides the scores of sampling rows (1 = off)
    float repetition_penalty;  // > 0; applied to every seen id, greedy or not (1 = off)
    float min_p;               // in [0, 1]; 0 = off
    int32_t top_k;             // <= 0 = off; k' = min(max(k, 1), V), ties at the threshold kept
    double top_p;              // in [0, 1]; >= 1 = off. double: HF compares with fp32(1 - top_p)
    int32_t do_sample;         // 0 = greedy argmax (temperature / top-k / top-p / min-p ignored)
    int32_t pad_;
} SampleParams;

// Attention options of one layer (the model-family ops at the end of Backend; docs/models.md).
//   window > 0: sliding window, key s visible to query t only when t - s < window (on top of the
//     causal and segment rules: transformers' sliding_window_overlay, kv_idx > q_idx - window, so
//     a query sees itself and the window - 1 keys before it); 0 = global.
//   softcap > 0: every scaled score x becomes softcap * tanh(x / softcap) before the softmax
//     (Gemma 2's attn_logit_softcapping); 0 = off.
//   scale > 0: the score scale (Gemma's query_pre_attn_scalar^-0.5); 0 = 1/sqrt(HD).
//   sinks (NH) or NULL: attention sinks (GPT-OSS), device memory: a learned logit per query head
//     that joins the softmax's denominator and carries no value, so with scores x_s,
//     p_s = exp(x_s) / (sum_j exp(x_j) + exp(sinks[h])) and lse includes the sink term. Padding
//     queries (and cached queries with no key) still produce 0.
typedef struct AttnOpts {
    int32_t window;
    float softcap;
    float scale;
    int32_t pad_;
    const float *sinks;
} AttnOpts;

struct Backend {
    const char *name;  // "ref", "cpu", "cuda"
    void *ctx;         // backend-private state (thread count, BLAS handles, streams)
    int threads;
    size_t max_memory; // --max_memory budget for the process (0: what the machine has available)
    // Prefill buckets: the smallest prefill chunk; generation runs a prompt in chunks of
    // prefill_bucket * 2^k slots (capped at the prefill chunk size), so a short prompt computes
    // few padding slots while the plans stay a small bounded set (docs/generate.md). The cpu and
    // ref backends run any shape at no cost and declare 16; cuda, whose steps are recorded per
    // shape, declares 128.
    int prefill_bucket;
    // Device memory is host memory (ref, cpu): weights can be used in place from a read-only
    // mapping of the checkpoint instead of copied (model_load).
    int host_memory;

    // ---- memory ------------------------------------------------------------------------
    void *(*alloc)(Backend *be, size_t bytes);  // zero-filled, 64-byte aligned; aborts on failure
    void (*free)(Backend *be, void *p);
    void (*upload)(Backend *be, void *dst, const void *src, size_t bytes);    // host -> device
    void (*download)(Backend *be, void *dst, const void *src, size_t bytes);  // device -> host
    void (*zero)(Backend *be, void *dst, size_t bytes);
    void (*copy)(Backend *be, void *dst, const void *src, size_t bytes);      // device -> device
    void (*sync)(Backend *be);
    void (*destroy)(Backend *be);

    // ---- embedding ---------------------------------------------------------------------
    // ids (N), wte (V,C) -> out (N,C)
    void (*embedding_forward)(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C);
    // dwte (V,C) += scatter of dout (N,C) at ids (N)
    void (*embedding_backward)(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C);

    // ---- RMSNorm over the last dim (also per head for q/k norm: N = rows*heads, C = HD) -----
    // inp (N,C), w (C) -> out (N,C) = inp * rstd * w, rstd (N) = 1/sqrt(mean(inp^2) + eps)
    void (*rmsnorm_forward)(Backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
    // dinp (N,C) +=, dw (C) += ; from dout (N,C), inp, w, rstd
    void (*rmsnorm_backward)(Backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                             const float *rstd, int N, int C);

    // ---- linear layer ------------------------------------------------------------------
    // inp (N,C), w (OC,C) row-major as in HF, bias (OC) or NULL -> out (N,OC) = inp w^T + bias
    // w (here, in matmul_backward and the heads' W) is a weight: cuda reads an fp32 w from a bf16
    // copy that only the writes of upload, copy, zero, add, scale, adamw and gradient outputs
    // refresh (docs/backends.md), so w is never an activation that another op computes.
    void (*matmul_forward)(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                           int C, int OC);
    // Optional (NULL: one matmul_forward per part): parts[i].out (N, parts[i].OC) = inp (N,C)
    // parts[i].w^T + parts[i].bias for i < count, the projections that read one input (q, k, v;
    // gate, up) in one pass over the threads; each output equals its own matmul_forward's.
    void (*matmul_forward_multi)(Backend *be, const MatmulPart *parts, int count, const float *inp, int N, int C);
    // dinp (N,C) += dout w ; dw (OC,C) += dout^T inp ; dbias (OC) += colsum(dout). Any may be NULL.
    void (*matmul_backward)(Backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const void *w, DType wdt, int N, int C, int OC);

    // ---- rotary position embedding, half-split (NeoX) layout, in place ----------------------
    // x (N,NH,HD), pos (N), inv_freq (RD/2): the first RD dims of every head rotate (RD even,
    // <= HD; RD < HD is partial rotary, Phi-3's partial_rotary_factor), dims [RD, HD) pass
    // through. For i < RD/2, angle = pos*inv_freq[i], c = cos(angle)*mscale, s = sin(angle)*mscale;
    // x[i] <- x[i] c - x[i+RD/2] s ; x[i+RD/2] <- x[i+RD/2] c + x[i] s
    void (*rope_forward)(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                         int HD, int RD);
    // dx (N,NH,HD) in place: the transpose rotation (dx is overwritten, not accumulated)
    void (*rope_backward)(Backend *be, float *dx, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                          int HD, int RD);

    // ---- causal self-attention with GQA and segment masks --------------------------------
    // q (B,T,NH,HD), k v (B,T,NKV,HD), seg (B,T) -> out (B,T,NH,HD), lse (B,NH,T)
    // Query t attends key s iff s <= t and seg[b,s] == seg[b,t] != 0 (seg 0 = padding; packed
    // documents carry distinct ids). Query head h uses kv head h / (NH/NKV). Scale 1/sqrt(HD).
    // Padding queries (seg 0) produce out = 0 and lse = 0. lse is the log-sum-exp of the scaled
    // scores, kept for the backward pass.
    void (*attention_forward)(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                              const int32_t *seg, int B, int T, int NH, int NKV, int HD);
    // dq (B,T,NH,HD) +=, dk dv (B,T,NKV,HD) += ; from dout, out, lse and the forward inputs
    void (*attention_backward)(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                               int B, int T, int NH, int NKV, int HD);

    // ---- SwiGLU MLP activation ---------------------------------------------------------
    // gate, up (n) -> out (n) = silu(gate) * up
    void (*swiglu_forward)(Backend *be, float *out, const float *gate, const float *up, size_t n);
    // dgate (n) +=, dup (n) +=
    void (*swiglu_backward)(Backend *be, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                            size_t n);

    // ---- elementwise -------------------------------------------------------------------
    // out (n) = a + b (out may alias a or b)
    void (*add)(Backend *be, float *out, const float *a, const float *b, size_t n);
    // x (n) *= s
    void (*scale)(Backend *be, float *x, float s, size_t n);
    // sum of x^2 with a double accumulator, returned to the host
    double (*sumsq)(Backend *be, const float *x, size_t n);
    // Inverted dropout with a counter-based mask (dropout_math.h): out (n) = inp * keep_i / (1 - p),
    // keep_i = dropout_keep(*key, salt, i, p). key is a device scalar (so a recorded step replays
    // with the next key after one upload); the same (key, salt) gives the same mask on every
    // backend, which is how a backward pass applies the forward's mask. out may alias inp.
    void (*dropout)(Backend *be, float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt);

    // ---- loss heads: fused with the LM head, run in chunks of rows (ARCHITECTURE §5) -------
    // Cross-entropy. h (N,C) final hidden states, W (V,C) LM head, targets (N) (IGNORE_INDEX =
    // skip the row), weights (N) per-token loss weights or NULL (1 each).
    // z_r = h_r W^T (fp32). Outputs per row (0 for ignored rows; each output may be NULL):
    //   row_loss (N) = weight_r * (logsumexp(z_r) - z_r[target_r])
    //   row_correct (N) = 1 if argmax z_r == target_r (first index on ties), else 0
    //   row_entropy (N) = -sum_v p_v log p_v of softmax(z_r)
    // Backward when dh != NULL: dz_r = grad_scale * weight_r * (softmax(z_r) - onehot(target_r));
    // dh (N,C) += dz W ; dW (V,C) += dz^T h (when dW != NULL).
    // scratch: (chunk, V + C) floats; at most `chunk` rows of logits exist at once.
    void (*ce_head)(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                    const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                    float grad_scale, float *scratch, int chunk, int N, int C, int V);

    // ---- optimizer ---------------------------------------------------------------------
    // torch.optim.AdamW on a flat range, step t >= 1, gradient multiplied by grad_scale first:
    // p *= 1 - lr*wd ; m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2 ;
    // p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
    void (*adamw)(Backend *be, float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
                  double eps, double wd, int t, float grad_scale);

    // ---- sampling: logits processors and the token choice, on the device (docs/sampling.md) ----
    // During decoding only ids (B) and, when asked, the chosen token's log-probs (B) cross to the
    // host. Token history stays on the host; what needs it reaches the op as `seen` (device
    // state) and `banned` (a small per-step upload).

    // seen (B,V) |= onehot(ids (B,T)): marks every id of prompt (incl. pads) and generated tokens
    // for the repetition penalty. ids outside [0, V) are skipped. Start from be->zero(seen).
    void (*sample_seen_update)(Backend *be, uint8_t *seen, const int32_t *ids, int B, int T, int V);

    // One decoding step. logits (B,V) raw fp32 -> scores (B,V) processed, ids (B) chosen.
    // Per row b with p = params[b], in HF order:
    //   s = logits; repetition penalty on ids with seen[b,i] != 0 (s < 0 ? s*θ : s/θ);
    //   s[banned[b,j]] = -inf for j < K (host-computed: no_repeat_ngram, bad_words, EOS while
    //   below min_new_tokens / min_length; entries outside [0, V) are padding);
    //   greedy (p.do_sample == 0): ids[b] = first index of max s;
    //   sampling: s /= T; top-k; top-p on the renormalised survivors; min-p; every removed score
    //   -inf; ids[b] = inverse-CDF draw in index order with the uniform u[b] in [0, 1).
    // scores (B,V) ends as HF's final `scores` (removed = -inf). It may alias logits (in place).
    // Outputs that may be NULL:
    //   logprob (B)     = log softmax(scores[b])[ids[b]]: the chosen token under the processed
    //                     distribution the draw used (for greedy rows: penalties and bans only);
    //   logprob_raw (B) = log softmax(logits[b] / p.temperature)[ids[b]] on the raw logits, no
    //                     penalties or filters (what TRL's RL losses recompute); needs
    //                     scores != logits.
    // seen may be NULL when every repetition_penalty is 1; banned may be NULL when K == 0; u may
    // be NULL when no row samples. params, u, seen, banned are device memory.
    void (*sample_logits)(Backend *be, int32_t *ids, float *logprob, float *logprob_raw, float *scores,
                          const float *logits, const SampleParams *params, const double *u, const uint8_t *seen,
                          const int32_t *banned, int K, int B, int V);
    // ---- end of sampling ---------------------------------------------------------------

    // ---- captured step graphs (docs/backends.md). NULL on backends that run ops eagerly
    // (ref, cpu): callers test the pointer and otherwise just call the ops. ------------------
    // graph_begin: the ops called until graph_end are recorded, not run, as the graph `key`
    // (a plan's shape and step kind). Only device-side ops may be recorded: upload, download,
    // sync and sumsq (host transfers) abort while recording. Run a shape once eagerly before
    // recording it, so that every scratch buffer already has its size.
    void (*graph_begin)(Backend *be, uint64_t key);
    // graph_end: stop recording and instantiate the graph `key` (replacing one of that key).
    void (*graph_end)(Backend *be, uint64_t key);
    // graph_launch: replay graph `key` on the backend's stream; returns 0 when there is none.
    // A replay reads and writes the same device buffers, with the same scalar arguments, as
    // the recorded calls: inputs change by uploading into those buffers first.
    int (*graph_launch)(Backend *be, uint64_t key);
    // graph_drop: release graph `key` (its buffers are about to be freed); no-op when absent.
    void (*graph_drop)(Backend *be, uint64_t key);
    // ---- KV cache / decode (generation on a static cache, ARCHITECTURE §6) -----------------
    // One layer's cache is kc, vc (B,NKV,S,HD): S = max_cache_len slots per row, written at
    // absolute slot indices (left padding occupies slots; RoPE positions are separate).

    // The chunk's first cache slot `start` is a device int32 scalar, not an argument, so that a
    // captured decode step replays at the next slot after one upload (graph_launch above).
    // The caller keeps 0 <= start and start + T <= S.

    // kc, vc (B,NKV,S,HD) at slots [start, start+T) = k, v (B,T,NKV,HD). Other slots untouched.
    void (*kv_cache_write)(Backend *be, float *kc, float *vc, const float *k, const float *v, const int32_t *start,
                           int B, int T, int NKV, int HD, int S);

    // Attention of a chunk of queries against the cache (prefill chunks; decode is T = 1).
    // q (B,T,NH,HD) are the queries at cache slots [start, start+T); kc, vc (B,NKV,S,HD);
    // kmask (B,S) -> out (B,T,NH,HD).
    // Query t attends key slot s iff s <= start+t and kmask[b,s] != 0 (0 = left padding), so
    // only slots [0, start+T) are ever read. Query head h uses kv head h / (NH/NKV); scale
    // 1/sqrt(HD). A query with no key to attend (a padding slot) gets out = 0. Masked keys are
    // skipped, never weighted, so whatever a masked or unwritten slot holds has no effect.
    void (*attention_cached)(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                             const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV, int HD,
                             int S);
    // ---- end of KV cache / decode ----------------------------------------------------------
    // ---- distillation and RL heads (docs/heads.md) --------------------------------------
    // Fused with the LM head and chunked over rows like ce_head: at most `chunk` rows of logits
    // exist at once. Rows whose target is IGNORE_INDEX are skipped (their outputs are 0).

    // Log-probability of the target under temperature tau > 0 (TRL divides the logits by the
    // temperature before selective_log_softmax). h (N,C), W (V,C), targets (N), z_r = (h_r W^T) / tau:
    //   row_logp (N) = z_r[target_r] - logsumexp(z_r)            (may be NULL)
    //   row_entropy (N) = -sum_v p_v log p_v of softmax(z_r)      (may be NULL)
    //   row_stats (N, LOGPROB_STATS) (may be NULL), per row, for the preference trainers' metrics:
    //     [LOGPROB_STAT_ZMEAN]   mean_v z_r[v]                       (TRL's logits/chosen)
    //     [LOGPROB_STAT_CORRECT] 1 if argmax z_r == target_r (first index on ties), else 0
    //     [LOGPROB_STAT_LSE2]    log sum_v softmax(z_r)_v^2 = lse(2 z_r) - 2 lse(z_r)   (WPO)
    // Backward when coef (N) != NULL (dh required): the gradient of sum_r coef_r * row_logp_r,
    //   dz_r = coef_r * (onehot(target_r) - softmax(z_r)) / tau ; dh (N,C) += dz W ;
    //   dW (V,C) += dz^T h (when dW != NULL; NULL for a frozen model).
    // The host turns a loss into coef_r = d loss / d logp_r (train/rl_math.h).
    // scratch: (chunk, V + C) floats.
    void (*logprob_head)(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                         const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef,
                         float tau, float *scratch, int chunk, int N, int C, int V);

    // Generalized JSD between student and teacher next-token distributions (TRL's
    // generalized_jsd_loss / _jsd_divergence). Student h_s (N,Cs), W_s (V,Cs) as wdt_s; teacher
    // h_t (N,Ct), W_t (V,Ct) as wdt_t (the teacher gets no gradient). targets (N) only mask rows;
    // weights (N) per-row loss weights or NULL (1 each). Over the support S, both sides at tau:
    //   s = log_softmax(h_s W_s^T / tau), t = log_softmax(h_t W_t^T / tau), p = e^s, q = e^t
    //   S = the whole vocabulary when top_k == 0; else the top_k largest teacher logits (equal
    //   values by ascending index), both distributions renormalised over S.
    //   beta == 0: jsd = sum_S q (t - s)                     KL(teacher || student), forward
    //   beta == 1: jsd = sum_S p (s - t)                     KL(student || teacher), reverse
    //   else:      m = log((1-beta) p + beta q) ; jsd = beta sum_S q (t - m) + (1-beta) sum_S p (s - m)
    //   row_loss (N) = weight_r * jsd_r                              (may be NULL)
    //   row_kl (N) = KL(student || teacher) over the whole vocabulary at temperature 1, whatever
    //                tau, beta and top_k are (a metric; unweighted)    (may be NULL)
    // Backward when dh_s != NULL: dz_s = grad_scale * weight_r * d jsd_r / d z_s ;
    //   dh_s (N,Cs) += dz_s W_s ; dW_s (V,Cs) += dz_s^T h_s (when dW_s != NULL).
    // scratch_s: (chunk, V + Cs) floats, scratch_t: (chunk, V + Ct) floats (a student and a
    // teacher plan's head scratch).
    void (*distill_head)(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                         const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                         const int32_t *targets, const float *weights, float tau, float beta, int top_k,
                         float grad_scale, float *scratch_s, float *scratch_t, int chunk, int N, int Cs, int Ct,
                         int V);
    // ---- end of distillation and RL heads ----------------------------------------------

    // Sequence-classification head: transformers' *ForSequenceClassification `score` (a Linear
    // without bias) at one pooled position per sequence. h (N,C) final hidden states, W (NL,C) as
    // wdt, rows (B) the pooled row of each sequence, in [0, N):
    //   scores (B,NL) = h[rows[b]] W^T                                    (may be NULL)
    // Backward when dscores (B,NL) != NULL (dh required): dh[rows[b]] (C) += dscores[b] W ;
    //   dW (NL,C) += sum_b dscores[b]^T h[rows[b]] (when dW != NULL). Rows may repeat (their
    //   gradients add up). Only the B pooled rows are read: no (N, NL) scores ever exist.
    void (*score_head)(Backend *be, float *scores, float *dh, float *dW, const float *h, const void *W, DType wdt,
                       const int32_t *rows, const float *dscores, int B, int N, int C, int NL);

    // ---- model-family ops (Mistral, Gemma 2 / 3; docs/models.md) --------------------------
    // attention_forward / attention_backward / attention_cached with AttnOpts (above): the same
    // layouts and rules, plus the window, the soft-cap and the scale. The backward pass takes the
    // gradient through the soft-cap: d x = d score * (1 - (score / softcap)^2).
    void (*attention_forward_opt)(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                                  const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o);
    void (*attention_backward_opt)(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                                   const float *lse, const float *q, const float *k, const float *v,
                                   const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o);
    // The sinks' gradient (dq, dk, dv need nothing new: lse already holds the sink term and the
    // sink carries no value, so D = dout . out stays the row's correction):
    //   dsinks[h] (NH) += -sum over (b, t) with seg[b,t] != 0 of exp(sinks[h] - lse[b,h,t]) * (dout . out)[b,t,h]
    // from the forward's out (B,T,NH,HD) and lse (B,NH,T); sinks (NH).
    void (*attention_sinks_backward)(Backend *be, float *dsinks, const float *dout, const float *out,
                                     const float *lse, const float *sinks, const int32_t *seg, int B, int T, int NH,
                                     int HD);
    // Cached attention: with o.window > 0 query slot p attends slots s with p - s < window.
    void (*attention_cached_opt)(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                                 const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV, int HD,
                                 int S, AttnOpts o);
    // Windowed static cache of a sliding layer: a ring kc, vc (B,NKV,W,HD) of W = window slots,
    // absolute slot s at ring index s % W, so memory follows the window, not max_cache_len.
    // kv_ring_write: ring at (start+t) % W = k, v (B,T,NKV,HD) for the chunk's last min(T, W)
    // tokens (the only ones a later query can see).
    void (*kv_ring_write)(Backend *be, float *kc, float *vc, const float *k, const float *v, const int32_t *start,
                          int B, int T, int NKV, int HD, int W);
    // attention_ring: queries q (B,T,NH,HD) at slots [start, start+T), o.window = W >= 1. Keys at
    // slots s < start come from the ring (which must hold slots [start - W, start): call this
    // BEFORE kv_ring_write of the chunk), keys at slots [start, start+T) from the chunk's own k, v
    // (B,T,NKV,HD). kmask (B,S) by absolute slot (S = max_cache_len) as attention_cached; query
    // p attends s iff s <= p, p - s < W, kmask[b,s] != 0. Equal to attention_cached_opt on a
    // full cache holding the same keys.
    void (*attention_ring)(Backend *be, float *out, const float *q, const float *kc, const float *vc, const float *k,
                           const float *v, const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV,
                           int HD, int S, AttnOpts o);
    // RMSNorm with an offset weight: out (N,C) = inp * rstd * (woff + w), rstd (N) as
    // rmsnorm_forward (Gemma's (1 + w) norms: woff = 1; fp32). Backward as rmsnorm_backward with
    // woff + w in place of w; dw (C) += the same sums (d(woff + w) / dw = 1).
    void (*rmsnorm_forward_off)(Backend *be, float *out, float *rstd, const float *inp, const float *w, float woff,
                                int N, int C, float eps);
    void (*rmsnorm_backward_off)(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, float woff, const float *rstd, int N, int C);
    // GeGLU activation with gelu_pytorch_tanh: out (n) = gelu_tanh(gate) * up,
    //   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    void (*geglu_forward)(Backend *be, float *out, const float *gate, const float *up, size_t n);
    // dgate (n) +=, dup (n) +=
    void (*geglu_backward)(Backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                           const float *up, size_t n);
    // Soft-capping of a buffer in place: x (n) = cap * tanh(x / cap), cap > 0 (Gemma 2's
    // final_logit_softcapping on the last-position logits before sampling).
    void (*softcap_forward)(Backend *be, float *x, float cap, size_t n);
    // dx (n) *= 1 - (y / cap)^2 in place, y (n) the capped values (the chain rule through it).
    void (*softcap_backward)(Backend *be, float *dx, const float *y, float cap, size_t n);
    // The loss heads with final-logit soft-capping: as ce_head, logprob_head and distill_head
    // with every logit z (before the temperature) replaced by softcap * tanh(z / softcap) when
    // softcap > 0 (0 = the plain head), the backward pass through it. distill_head_cap caps the
    // student's logits with softcap_s and the teacher's with softcap_t (the two models' configs).
    void (*ce_head_cap)(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                        const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                        float grad_scale, float softcap, float *scratch, int chunk, int N, int C, int V);
    void (*logprob_head_cap)(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                             const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef,
                             float tau, float softcap, float *scratch, int chunk, int N, int C, int V);
    void (*distill_head_cap)(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                             const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                             const int32_t *targets, const float *weights, float tau, float beta, int top_k,
                             float grad_scale, float softcap_s, float softcap_t, float *scratch_s, float *scratch_t,
                             int chunk, int N, int Cs, int Ct, int V);
    // ---- end of model-family ops ---------------------------------------------------------

    // ---- mixture of experts (docs/models.md, "Routing") ---------------------------------------
    // E experts, K experts per token, N tokens, S = N*K routed slots. The router logits (N,E) are
    // a matmul_forward of the block's input with the router weight (E,C). Routing is exact and
    // capacity-free unless a capacity is given to moe_dispatch (docs/backends.md).

    // Top-k without sorting the experts: idx (N,K) the K largest logits of each row in
    // descending order, equal values by ascending expert index; w (N,K) their weights:
    //   norm == 0: w_k = softmax(logits_n)[idx_k]              (qwen3_moe, norm_topk_prob false)
    //   norm != 0: w_k = softmax over the K selected logits     (mixtral; qwen3_moe with
    //              norm_topk_prob, the same numbers as renormalising the selected softmax probs)
    void (*moe_route_forward)(Backend *be, int32_t *idx, float *w, const float *logits, int N, int E, int K, int norm);
    // dlogits (N,E) += d w / d logits applied to dw (N,K); idx is piecewise constant (no gradient).
    void (*moe_route_backward)(Backend *be, float *dlogits, const float *dw, const float *logits, const int32_t *idx,
                               int N, int E, int K, int norm);
    // Grouping of the routed slots by expert (a counting sort; no host round trip):
    //   offsets (E+1): expert e owns slots [offsets[e], offsets[e+1]); offsets[E] = slots kept;
    //   slot_token (S): the token of each kept slot, ascending token order within an expert
    //                   (entries from offsets[E] on are -1);
    //   token_slot (N,K): the slot of (token n, choice k), -1 when dropped.
    // capacity <= 0: every slot is kept. capacity > 0: an expert keeps at most `capacity` slots,
    // taking choices in order of rank k (all first choices, then all second ...), tokens in order
    // within a rank; dropped (1) (device, may be NULL) = the number of slots dropped.
    void (*moe_dispatch)(Backend *be, int32_t *offsets, int32_t *slot_token, int32_t *token_slot, int32_t *dropped,
                         const int32_t *idx, int N, int E, int K, int capacity);
    // xs (S,C) = x (N,C) at slot_token; slots from offsets[E] on are 0.
    void (*moe_gather)(Backend *be, float *xs, const float *x, const int32_t *slot_token, const int32_t *offsets, int S,
                       int E, int C);
    // dx (N,C) += sum_k dxs[token_slot[n,k]] (dropped slots skipped)
    void (*moe_gather_backward)(Backend *be, float *dx, const float *dxs, const int32_t *token_slot, int N, int K,
                                int C);
    // Grouped linear layer, one call for all experts: for each slot s < offsets[E] of expert e,
    // out[s] (OC) = inp[s] (C) w_e^T + bias_e, w (E,OC,C) as wdt, bias (E,OC) or NULL; slots from
    // offsets[E] on get 0. Experts without slots are not read.
    void (*moe_grouped_matmul_forward)(Backend *be, float *out, const float *inp, const void *w, DType wdt,
                                       const float *bias, const int32_t *offsets, int S, int E, int C, int OC);
    // dinp (S,C) += dout w_e ; dw (E,OC,C) += per expert dout^T inp ; dbias (E,OC) += colsum(dout);
    // over the kept slots only. Any gradient may be NULL.
    void (*moe_grouped_matmul_backward)(Backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                        const float *inp, const void *w, DType wdt, const int32_t *offsets, int S,
                                        int E, int C, int OC);
    // out (N,C) = sum_k w[n,k] ys[token_slot[n,k]] (dropped slots contribute 0)
    void (*moe_combine_forward)(Backend *be, float *out, const float *ys, const float *w, const int32_t *token_slot,
                                int N, int K, int C);
    // dys (S,C) += w[n,k] dout[n] at token_slot[n,k] ; dw (N,K) += dout[n] . ys[token_slot[n,k]]
    void (*moe_combine_backward)(Backend *be, float *dys, float *dw, const float *dout, const float *ys, const float *w,
                                 const int32_t *token_slot, int N, int K, int C);
    // Load-balancing statistics (transformers' load_balancing_loss_func), accumulated over the
    // MoE layers of a step: stats (2E+1) += [count of selections per expert (E), sum of
    // softmax(logits_n) (E), tokens (1)] over the tokens with seg[n] != 0 (seg NULL: all).
    // With M = stats[2E]: aux = E * sum_e stats[e] * stats[E+e] / M^2.
    void (*moe_aux_stats)(Backend *be, float *stats, const float *logits, const int32_t *idx, const int32_t *seg,
                          int N, int E, int K);
    // dlogits (N,E) += coef * d aux / d logits for the tokens with seg[n] != 0 (the counts are
    // piecewise constant): p = softmax(logits_n), g_e = E stats[e] / M^2,
    // dlogits[n,j] += coef p_j (g_j - p . g). Nothing when M = 0.
    void (*moe_aux_backward)(Backend *be, float *dlogits, const float *logits, const int32_t *seg, const float *stats,
                             float coef, int N, int E);
    // GPT-OSS's clamped SwiGLU over interleaved gate / up columns (GptOssExperts): gu (n, 2) holds
    // gate = gu[2i], up = gu[2i+1]; with g = min(gate, limit), u = clamp(up, -limit, limit),
    //   out (n) = (u + 1) * g * sigmoid(alpha * g)
    void (*swiglu_clamp_forward)(Backend *be, float *out, const float *gu, float alpha, float limit, size_t n);
    // dgu (n, 2) += the gradient through it; 0 where a clamp holds the value (gate > limit,
    // |up| > limit), as torch.clamp's backward
    void (*swiglu_clamp_backward)(Backend *be, float *dgu, const float *dout, const float *gu, float alpha, float limit,
                                  size_t n);
    // ---- end of mixture of experts -------------------------------------------------------------

    // ---- vocabulary shards (tensor parallelism: src/model/vocab_head.c, docs/distributed.md) ----
    // A rank holds rows [lo, lo + V) of the embedding and the LM head. Logits of a shard come from
    // matmul_forward with its rows; these ops compute what the shards' statistics combine from and
    // the gradient once they are combined (vocab_math.h, shared by every backend).
    // out (N,C) = wte[ids - lo] for ids in [lo, lo + V), 0 for the others; wte (V,C) as wdt
    void (*embedding_forward_part)(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N,
                                   int C, int lo, int V);
    // dwte (V,C) += scatter of dout (N,C) at ids - lo, the ids in [lo, lo + V) only
    void (*embedding_backward_part)(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C,
                                    int lo, int V);
    // stats (M, VOCAB_STATS) of every row of z (M,V) at temperature tau (vocab_row_stats), the
    // target of row r targets[r] - lo in the shard (targets NULL: none).
    void (*vocab_stats)(Backend *be, float *stats, const float *z, const int32_t *targets, float tau, int lo, int M,
                        int V);
    // z (M,V) -> dz in place (vocab_row_grad) from rows (M, VOCAB_ROW): [VR_LSE], [VR_COEF].
    void (*vocab_grad)(Backend *be, float *z, const int32_t *targets, const float *rows, float tau, float softcap,
                       int lo, int M, int V);
    // part (M,2) = the shard's [L, K] of the generalized JSD of zs, zt (M,V) (vocab_row_jsd) with
    // rows (M, VOCAB_ROW): [VR_LSE], [VR_LSE_T].
    void (*vocab_jsd)(Backend *be, float *part, const float *zs, const float *zt, const float *rows, float tau,
                      float beta, int M, int V);
    // zs (M,V) -> dz in place (vocab_row_jsd_grad) from rows: every VR_* field.
    void (*vocab_jsd_grad)(Backend *be, float *zs, const float *zt, const float *rows, float tau, float beta,
                           float softcap, int M, int V);
    // ---- end of vocabulary shards --------------------------------------------------------------

    // ---- RMSNorm over a feature dimension split across ranks (tensor parallelism: OLMo 2's q/k
    // norms over the whole projection, src/model/qwen3.c). Each rank holds C of the D features of
    // every row; the per-row sums below are all-reduced over the group between the calls.
    // stat (N) = sum_c a[n,c] b[n,c] (w ? w[c] : 1): with a = b = inp the sum of squares, with
    // a = dout, b = inp and the weights the backward's dot
    void (*rmsnorm_part_stat)(Backend *be, float *stat, const float *a, const float *b, const float *w, int N, int C);
    // out (N,C) = inp * rstd * w, rstd (N) = 1/sqrt(ss / D + eps) from the group's ss (N) (may
    // alias rstd)
    void (*rmsnorm_part_forward)(Backend *be, float *out, float *rstd, const float *inp, const float *w,
                                 const float *ss, int N, int C, int D, float eps);
    // dinp (N,C) += r (dout w - inp r^2 dot / D) from the group's dot (N); dw (C) += sum_n dout inp r
    // (either may be NULL)
    void (*rmsnorm_part_backward)(Backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, const float *dot, int N, int C, int D);
    // ---- end of split RMSNorm ------------------------------------------------------------------
};

// Create a backend by name ("ref", "cpu", "cuda"). threads <= 0: OMP_NUM_THREADS, else all
// cores. Asking for a backend this build or machine lacks is an error, never a silent fallback.
Status backend_create(const char *name, int threads, Backend **out, Err *e);
void backend_destroy(Backend *be);

// Constructors of the individual backends (backend/ref/ref.c, backend/cpu/cpu.c, ...).
Backend *backend_ref_create(int threads);
Backend *backend_cpu_create(int threads);
// The OpenBLAS kernel set in use ("Haswell", "SkylakeX", ...; NULL without OpenBLAS), and the one
// to ask for through OPENBLAS_CORETYPE at the next start when the library's detection fell back
// to kernels without AVX2 on a machine that has AVX2 and FMA (NULL: keep; blas_core.c).
const char *cpu_blas_core(void);
const char *cpu_blas_core_override(void);
// Install the sampling ops into a backend (called by the constructors above).
void backend_ref_install_sampling(Backend *be);
void backend_cpu_install_sampling(Backend *be);
// Install the KV cache / decode ops (called by the constructors above).
void backend_ref_install_kv(Backend *be);
void backend_cpu_install_kv(Backend *be);
// Install the distillation and RL heads (backend/ref/ref_heads.c, backend/cpu/cpu_heads.c).
void backend_ref_install_heads(Backend *be);
void backend_cpu_install_heads(Backend *be);
// Install the model-family ops (backend/ref/ref_family.c, backend/cpu/cpu_family.c).
void backend_ref_install_family(Backend *be);
void backend_cpu_install_family(Backend *be);
// Install the mixture-of-experts ops (backend/ref/ref_moe.c, backend/cpu/cpu_moe.c).
void backend_ref_install_moe(Backend *be);
void backend_cpu_install_moe(Backend *be);
// Install the vocabulary-shard ops (backend/ref/ref_vocab.c, backend/cpu/cpu_vocab.c).
void backend_ref_install_vocab(Backend *be);
void backend_cpu_install_vocab(Backend *be);
#ifdef STILL_CUDA
Status backend_cuda_create(int threads, Backend **out, Err *e);
#endif

#endif
