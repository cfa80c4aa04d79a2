// cpu_sample.c: the sampling ops with OpenMP over rows, each row the host sampler of
// backend/sample_row.c as a group of one shard. Same arithmetic as backend/ref (the shared keys
// and fixed-point masses of sample_math.h), fewer passes (sample_row.c).
#include "../backend.h"
#include "../sample_row.h"

static void cpu_sample_seen_update(Backend *be, uint8_t *seen, const int32_t *ids, int B, int T, int V) {
#pragma omp parallel for schedule(static) if (B > 1)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t id = ids[(size_t)b * T + t];
            if (id >= 0 && id < V) seen[(size_t)b * V + id] = 1;
        }
}

static void cpu_sample_logits(Backend *be, int32_t *ids, float *logprob, float *logprob_raw, float *scores,
                              const float *logits, const SampleParams *params, const double *u, const uint8_t *seen,
                              const int32_t *banned, int K, int B, int V) {
    CHECK_MSG(!(logprob_raw && scores == logits), "sample_logits: logprob_raw needs scores != logits");
    for (int b = 0; b < B; b++) {
        CHECK(params[b].repetition_penalty == 1.0f || seen);
        CHECK(!params[b].do_sample || u);
    }
    const SampleGroup one = {.T = 1, .t = 0, .lo = 0, .V = V};
#pragma omp parallel for schedule(dynamic, 1) if (B > 1)
    for (int b = 0; b < B; b++)
        sample_row_group(&one, &ids[b], logprob ? &logprob[b] : NULL, logprob_raw ? &logprob_raw[b] : NULL,
                         scores + (size_t)b * V, logits + (size_t)b * V, &params[b], u ? u[b] : 0.0,
                         seen ? seen + (size_t)b * V : NULL, banned ? banned + (size_t)b * K : NULL, K);
}

void backend_cpu_install_sampling(Backend *be) {
    be->sample_seen_update = cpu_sample_seen_update;
    be->sample_logits = cpu_sample_logits;
}
