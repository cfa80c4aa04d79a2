// sample_shard.h: sample_logits (backend.h) for a model that holds a shard of the vocabulary
// (cfg.vocab_part > 0, tensor parallelism: src/train/tp.c): every rank of the group calls it with
// its columns of the logits and gets the same ids, exactly the draws of the one-process sampler
// (docs/sampling.md; docs/distributed.md). Host memory throughout: logits (B, vocab_part) this
// rank's columns; seen (B, V) the whole rows (or NULL when every repetition_penalty is 1); banned
// (B, K) whole-vocabulary ids (entries outside [0, V) are padding), u (B) or NULL when no row
// samples; ids (B) out; logprob / logprob_raw (B) as sample_logits's, each may be NULL. The
// collectives run over the model's gather hook (model.h).
#ifndef STILL_SAMPLE_SHARD_H
#define STILL_SAMPLE_SHARD_H

#include "../model/model.h"

void sample_shards(Model *m, int32_t *ids, float *logprob, float *logprob_raw, const float *logits,
                   const SampleParams *params, const double *u, const uint8_t *seen, const int32_t *banned, int K,
                   int B);

#endif
