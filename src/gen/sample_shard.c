// sample_shard.c: the sort-free sampler of backend.h (sample_logits) on vocabulary shards
// (sample_shard.h): each row the host sampler of backend/sample_row.c over the tensor-parallel
// group, whose exchanges are all-gathers of host bytes through the model's hook (every rank
// combines them in rank order: the same result everywhere).
#include "sample_shard.h"

#include "../backend/sample_row.h"
#include "../core/alloc.h"

// recv (T * n bytes) = every rank's send (n bytes), in rank order: the model's gather hook.
static void gather(void *ctx, void *recv, const void *send, size_t n) { model_gather(ctx, recv, send, n); }

void sample_shards(Model *m, int32_t *ids, float *logprob, float *logprob_raw, const float *logits,
                   const SampleParams *params, const double *u, const uint8_t *seen, const int32_t *banned, int K,
                   int B) {
    const ModelConfig *c = &m->cfg;
    CHECK_MSG(c->vocab_part > 0, "sample_shards: the model holds no vocabulary shard");
    SampleGroup g = {.T = c->vocab_size / c->vocab_part, .t = c->vocab_lo / c->vocab_part, .lo = c->vocab_lo,
                     .V = c->vocab_part, .gather = gather, .ctx = m};
    g.buf = xmalloc((size_t)g.T * SAMPLE_GROUP_BUF);
    float *s = xmalloc((size_t)g.V * sizeof(float));
    for (int b = 0; b < B; b++) {
        CHECK(params[b].repetition_penalty == 1.0f || seen);
        sample_row_group(&g, &ids[b], logprob ? &logprob[b] : NULL, logprob_raw ? &logprob_raw[b] : NULL, s,
                         logits + (size_t)b * g.V, &params[b], u ? u[b] : 0.0,
                         seen ? seen + (size_t)b * c->vocab_size : NULL, banned ? banned + (size_t)b * K : NULL, K);
    }
    free(s), free(g.buf);
}
