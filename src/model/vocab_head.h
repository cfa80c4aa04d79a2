// vocab_head.h: the embedding, the LM head and the loss heads of a model that holds a shard of
// the vocabulary (cfg.vocab_part > 0: rows [vocab_lo, vocab_lo + vocab_part) of the embedding and
// the LM head, one shard per rank of a tensor-parallel group, src/train/tp.c). No rank ever holds
// a row of whole-vocabulary logits in the loss heads: each chunk of rows gets its shard's logits
// (matmul_forward), their statistics (vocab_stats: max, sum exp, target logit, argmax, ...),
// which the group exchanges through the model's reduce hook (every rank's slot of a zeroed
// buffer, summed: an all-gather) and every rank combines in the same order; then the shard's
// gradient (vocab_grad, vocab_jsd_grad) and the LM head's backward into the rank's rows. The
// hidden-state gradient is the sum of the shards' shares: all-reduced before the final norm's
// backward. Semantics are the fused heads' (backend.h ce_head, logprob_head, distill_head).
#ifndef STILL_VOCAB_HEAD_H
#define STILL_VOCAB_HEAD_H

#include "model.h"

// out (N,C) = the embeddings of ids (N) (every rank's share summed over the group).
void vocab_embed(Model *m, float *out, const int32_t *ids, int N);
// dwte (the shard's rows) += the embedding's backward of dout (N,C).
void vocab_embed_backward(Model *m, float *dwte, const float *dout, const int32_t *ids, int N);

// The loss heads over p->lnf with the LM head W (the shard's rows, as wdt) and its gradient dW
// (NULL: none), as qwen3_ce_loss, qwen3_logprob_stats and qwen3_distill_loss describe them; with
// a backward pass p->dln holds d(loss)/d(lnf), summed over the group, on return.
void vocab_ce(Model *m, Plan *p, const void *W, DType wdt, float *dW, float grad_scale, int backward);
void vocab_logprob(Model *m, Plan *p, const void *W, DType wdt, float *dW, float tau, const float *coef,
                   float *out_logp, float *out_stats);
// top_k > 0: the teacher's top k over the whole vocabulary, found over the group (through the host).
void vocab_distill(Model *m, Plan *p, const void *W, DType wdt, float *dW, Model *mt, Plan *pt, const void *Wt,
                   DType wdt_t, float tau, float beta, int top_k, float grad_scale, int backward, float *row_kl);

// Floats of a plan's vocab_scratch for chunks of `chunk` rows (0 without a vocabulary shard).
size_t vocab_scratch_floats(const ModelConfig *cfg, int chunk);

#endif
