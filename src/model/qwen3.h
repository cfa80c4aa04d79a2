// qwen3.h: forward and backward of the Qwen3 family (Qwen3, Qwen2, Llama) over backend ops only.
// The model code orchestrates; every computation is an op of backend.h.
#ifndef STILL_QWEN3_H
#define STILL_QWEN3_H

#include "model.h"

// Upload one batch into a plan. ids, pos, seg (N = B*T) are required; targets (N) and
// weights (N) may be NULL (then every target is IGNORE_INDEX / every weight 1).
void qwen3_set_inputs(Model *m, Plan *p, const int32_t *ids, const int32_t *pos, const int32_t *seg,
                      const int32_t *targets, const float *weights);

// Forward to the final norm: fills p->lnf (N,C); TRAIN plans keep every layer's activations.
void qwen3_forward(Model *m, Plan *p);

// Generation on a static KV cache (PREFILL chunks and DECODE steps). p is a PREFILL plan (B,T)
// or the DECODE plan dp itself; p->ids and p->pos hold the chunk's tokens, which occupy cache
// slots [start, start+T) of every row, start set by qwen3_cache_seek (a device scalar, so a
// recorded decode step replays at the next slot). Each layer writes its keys and values into
// dp's cache and attends to slots [0, start+T) under dp->kmask. Leaves the residual in
// p->res_out.
void qwen3_forward_cached(Model *m, Plan *p, Plan *dp);
// Final norm and LM head for the last position (T-1) of every row of p only -> dp->logits (B,V).
void qwen3_last_logits(Model *m, Plan *p, Plan *dp);
// The same for one row of the cache: p has batch 1 and writes, attends and leaves its last
// logits in row `row` of dp (dp->B rows), the other rows untouched (continuous batching,
// src/gen/slots.c).
void qwen3_forward_cached_row(Model *m, Plan *p, Plan *dp, int row);
void qwen3_last_logits_row(Model *m, Plan *p, Plan *dp, int row);
// Set the first cache slot of the next chunk of T tokens (0 <= start, start + T <= dp->S).
void qwen3_cache_seek(Model *m, Plan *dp, int start, int T);
// One decode step: forward_cached and last_logits of the DECODE plan on itself. On a backend
// with graph hooks the step is run eagerly once, then recorded as the plan's graph and
// replayed from then on (every later input arrives by upload: ids, pos, cache_start).
void qwen3_decode_step(Model *m, Plan *dp);
// The same over the first `rows` rows of dp only (rows dp->B, or a power of two below it: each
// is its own recorded graph): rows [rows, dp->B) of the cache, kmask and logits are untouched
// and cost nothing (continuous batching decodes only its busy rows, src/gen/slots.c).
void qwen3_decode_step_rows(Model *m, Plan *dp, int rows);

// One SFT micro-batch on a TRAIN plan whose inputs are uploaded: forward, cross-entropy head and
// backward with grad_scale 1, accumulating into m->grads (the caller scales the accumulated
// gradient once per step). Recorded and replayed like qwen3_decode_step on graph backends.
void qwen3_train_micro(Model *m, Plan *p);

// Cross-entropy head over p->lnf: fills p->row_loss / row_correct / row_entropy (N).
// With backward (TRAIN plans, m->grads allocated): every parameter gradient ACCUMULATES
// d(grad_scale * sum_r row_loss_r)/d(param) into m->grads.
void qwen3_ce_loss(Model *m, Plan *p, float grad_scale, int backward);

// Backward from a gradient already placed in p->dln w.r.t. p->lnf (used by every loss head):
// accumulates into m->grads.
void qwen3_backward_from_lnf(Model *m, Plan *p);

// LM head for rows [row0, row0+nrows) of p->lnf -> out (nrows, V) device memory.
void qwen3_logits(Model *m, Plan *p, int row0, int nrows, float *out);

// Model FLOPs of one forward over N tokens at sequence length T (matmuls, attention, LM head);
// backward is twice this. Used by benchmarks and MFU.
// The load-balancing loss of the last TRAIN forward of p (transformers' load_balancing_loss_func
// over the model's sparse layers; 0 without output_router_logits or experts).
double qwen3_moe_aux_loss(Model *m, Plan *p);
double qwen3_forward_flops(const ModelConfig *cfg, int B, int T);

// ---- distillation and RL heads (docs/heads.md) -------------------------------------------
// Log-probabilities of p->targets at temperature tau over p->lnf (qwen3_forward has run):
// out_logp (N, device) = log_softmax(logits / tau)[target] (0 on IGNORE_INDEX rows), entropies
// into p->row_entropy. With coef (N, device) != NULL (TRAIN plan, m->grads allocated): every
// parameter gradient ACCUMULATES d(sum_r coef_r * logp_r)/d(param) into m->grads.
void qwen3_logprob(Model *m, Plan *p, float tau, const float *coef, float *out_logp);
// The same with the per-row statistics of logprob_head (backend.h) into out_stats
// (N, LOGPROB_STATS, device; may be NULL): mean logit, argmax hit, log sum p^2.
void qwen3_logprob_stats(Model *m, Plan *p, float tau, const float *coef, float *out_logp, float *out_stats);

// Generalized JSD (beta 0 forward KL, 1 reverse KL) of student m on plan p against teacher mt
// on plan pt, at temperature tau on both sides, over the whole vocabulary or the teacher's
// top_k. Both forwards have run on the same B, T and backend; rows are masked by p->targets and
// weighted by p->weights. Fills p->row_loss (N); row_kl (N, device, may be NULL) =
// KL(student || teacher) at temperature 1. With backward (TRAIN plan, m->grads allocated):
// every student parameter gradient ACCUMULATES d(grad_scale * sum_r row_loss_r)/d(param). The
// teacher is read only.
void qwen3_distill_loss(Model *m, Plan *p, Model *mt, Plan *pt, float tau, float beta, int top_k, float grad_scale,
                        int backward, float *row_kl);

// ---- sequence classifiers (cfg.num_labels NL > 0: *ForSequenceClassification) ---------------
// The pooled position of each row as transformers pools it (GenericForSequenceClassification):
// the rightmost token whose id is not pad_token_id, 0 when every token is one; with no pad token
// (pad_token_id < 0) the row's last token, as transformers does for a batch of one. ids (B,T) with
// row b's real tokens at [0, lens[b]) (right padding); rows (B) = b*T + that position.
void qwen3_cls_pool(const int32_t *ids, const int *lens, int B, int T, int pad_token_id, int32_t *rows);
// Scores of the pooled rows (qwen3_forward has run): rows (B, host) into p->pool_rows, the score
// head over p->lnf -> p->cls_scores and scores (B, NL, host; may be NULL).
void qwen3_cls_scores(Model *m, Plan *p, const int32_t *rows, float *scores);
// Backward of sum_{b,k} dscores[b,k] * scores[b,k] (dscores (B,NL) host) through the score head
// and the model after qwen3_cls_scores on the same TRAIN plan: ACCUMULATES into m->grads.
void qwen3_cls_backward(Model *m, Plan *p, const float *dscores);

#endif
