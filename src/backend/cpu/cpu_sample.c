// cpu_sample.c: the sampling ops with OpenMP over rows. Same arithmetic as backend/ref (the
// shared keys and fixed-point masses of sample_math.h), fewer passes: the processors are fused
// into one pass, exp is skipped for removed tokens, and after the first radix digit the few
// candidates left are compacted into a small stack buffer so later digits do not rescan V.
#include "../backend.h"
#include "../sample_math.h"

#include <math.h>
#include <string.h>

#define CPU_SAMPLE_CAND 4096  // candidates kept on the stack per row after the first digit

static void cpu_sample_seen_update(Backend *be, uint8_t *seen, const int32_t *ids, int B, int T, int V) {
#pragma omp parallel for schedule(static) if (B > 1)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t id = ids[(size_t)b * T + t];
            if (id >= 0 && id < V) seen[(size_t)b * V + id] = 1;
        }
}

// Radix digits of the 32-bit keys, most significant first. The first digit (sign, exponent, two
// mantissa bits) is wide so that the bucket holding a threshold is usually small enough to
// compact; the rest are bytes and a tail.
#define TOP_BITS 11
#define TOP_BINS (1 << TOP_BITS)
static const int digit_shift[3] = {13, 5, 0}, digit_bits[3] = {8, 8, 5};

// Walk count buckets from the top; returns the digit holding the need-th largest and reduces
// need by everything above it.
static int walk_counts(const long *cnt, int nbins, long *need) {
    int d = nbins - 1;
    for (; d > 0 && cnt[d] < *need; d--) *need -= cnt[d];
    return d;
}

static int walk_mass(const uint64_t *mass, int nbins, uint64_t *above, uint64_t keep) {
    int d = nbins - 1;
    for (; d > 0 && *above + mass[d] < keep; d--) *above += mass[d];
    return d;
}

// k-th largest key given the top-digit histogram of x.
static uint32_t kth_key(const float *x, int V, long k, const long *hist) {
    long need = k;
    int d = walk_counts(hist, TOP_BINS, &need);
    uint32_t prefix = (uint32_t)d << (32 - TOP_BITS), mask = ~0u << (32 - TOP_BITS);
    uint32_t cand[CPU_SAMPLE_CAND];
    int n = -1;
    if (hist[d] <= CPU_SAMPLE_CAND) {
        n = 0;
        for (int i = 0; i < V; i++) {
            uint32_t key = sample_key(x[i]);
            if ((key & mask) == prefix) cand[n++] = key;
        }
    }
    for (int l = 0; l < 3; l++) {
        const int shift = digit_shift[l], nb = 1 << digit_bits[l];
        long cnt[256] = {0};
        if (n >= 0) {
            for (int j = 0; j < n; j++)
                if ((cand[j] & mask) == prefix) cnt[(cand[j] >> shift) & (nb - 1)]++;
        } else {
            for (int i = 0; i < V; i++) {
                uint32_t key = sample_key(x[i]);
                if ((key & mask) == prefix) cnt[(key >> shift) & (nb - 1)]++;
            }
        }
        prefix |= (uint32_t)walk_counts(cnt, nb, &need) << shift;
        mask |= (uint32_t)(nb - 1) << shift;
    }
    return prefix;
}

// Top-p boundary: key v* and the mass above it, given the top-digit mass histogram.
static uint32_t topp_key(const float *x, int V, float m, uint64_t keep, const uint64_t *hist, uint64_t *above) {
    *above = 0;
    int d = walk_mass(hist, TOP_BINS, above, keep);
    uint32_t prefix = (uint32_t)d << (32 - TOP_BITS), mask = ~0u << (32 - TOP_BITS);
    uint32_t ckey[CPU_SAMPLE_CAND];
    uint64_t cmass[CPU_SAMPLE_CAND];
    int n = 0;
    for (int i = 0; i < V; i++) {
        uint32_t key = sample_key(x[i]);
        if ((key & mask) != prefix) continue;
        if (n == CPU_SAMPLE_CAND) {
            n = -1;
            break;
        }
        ckey[n] = key;
        cmass[n++] = sample_mass(x[i], m);
    }
    for (int l = 0; l < 3; l++) {
        const int shift = digit_shift[l], nb = 1 << digit_bits[l];
        uint64_t mass[256] = {0};
        if (n >= 0) {
            for (int j = 0; j < n; j++)
                if ((ckey[j] & mask) == prefix) mass[(ckey[j] >> shift) & (nb - 1)] += cmass[j];
        } else {
            for (int i = 0; i < V; i++) {
                uint32_t key = sample_key(x[i]);
                if ((key & mask) == prefix) mass[(key >> shift) & (nb - 1)] += sample_mass(x[i], m);
            }
        }
        prefix |= (uint32_t)walk_mass(mass, nb, above, keep) << shift;
        mask |= (uint32_t)(nb - 1) << shift;
    }
    return prefix;
}

static int first_argmax(const float *x, int V) {
    int best = 0;
    float bv = x[0];
    for (int i = 1; i < V; i++)
        if (x[i] > bv) bv = x[i], best = i;
    return best;
}

static void sample_row(int32_t *id_out, float *lp_out, float *lp_raw_out, float *s, const float *logits,
                       const SampleParams *p, double u, const uint8_t *seen, const int32_t *banned, int K, int V) {
    const float T = p->temperature;
    float raw_m = -INFINITY;
    double raw_z = 0.0;
    if (lp_raw_out) {
        for (int i = 0; i < V; i++) {
            float v = logits[i] / T;
            raw_m = v > raw_m ? v : raw_m;
        }
        for (int i = 0; i < V; i++) raw_z += sample_rel_exp(logits[i] / T, raw_m);
    }
    const float theta = p->repetition_penalty;
    if (theta != 1.0f) {
        for (int i = 0; i < V; i++) s[i] = seen[i] ? sample_penalize(logits[i], theta) : logits[i];
    } else if (s != logits) {
        memcpy(s, logits, (size_t)V * sizeof(float));
    }
    for (int j = 0; j < K; j++)
        if (banned[j] >= 0 && banned[j] < V) s[banned[j]] = -INFINITY;

    int id;
    float norm_m = -INFINITY;  // log-prob normaliser (max, sum exp) when a pass computed it
    double norm_z = -1.0;
    if (!p->do_sample) {
        id = first_argmax(s, V);
    } else {
        const int use_k = p->top_k > 0 && p->top_k < V, use_p = p->top_p < 1.0;
        // temperature, max and the top-digit count histogram in one pass
        float m = -INFINITY;
        long cnt[TOP_BINS] = {0};
        for (int i = 0; i < V; i++) {
            float v = s[i] / T;
            s[i] = v;
            m = v > m ? v : m;
            if (use_k) cnt[sample_key(v) >> (32 - TOP_BITS)]++;
        }
        uint64_t Z = 0, pm[TOP_BINS] = {0};
        if (use_k) {
            uint32_t thr = kth_key(s, V, p->top_k, cnt);
            for (int i = 0; i < V; i++) {
                uint32_t key = sample_key(s[i]);
                if (key < thr) {
                    s[i] = -INFINITY;
                } else if (use_p) {
                    uint64_t e = sample_mass(s[i], m);
                    Z += e;
                    pm[key >> (32 - TOP_BITS)] += e;
                }
            }
        } else if (use_p) {
            for (int i = 0; i < V; i++) {
                uint64_t e = sample_mass(s[i], m);
                Z += e;
                pm[sample_key(s[i]) >> (32 - TOP_BITS)] += e;
            }
        }
        if (use_p && m != -INFINITY) {
            uint64_t keep = sample_topp_keep(p->top_p, Z);
            if (keep == 0) {
                int top = first_argmax(s, V);
                for (int i = 0; i < V; i++)
                    if (i != top) s[i] = -INFINITY;
            } else {
                uint64_t above;
                uint32_t vstar = topp_key(s, V, m, keep, pm, &above);
                uint64_t e = 0, n = 0, ties = 0;
                for (int i = 0; i < V; i++) {
                    uint32_t key = sample_key(s[i]);
                    if (key > vstar) continue;
                    if (key == vstar) {
                        if (!e) e = sample_mass(s[i], m), n = (keep - above + e - 1) / e;
                        if (ties < n) {
                            ties++;
                            continue;
                        }
                    }
                    s[i] = -INFINITY;
                }
            }
        }
        // min-p, the kept mass and the log-prob normaliser in one pass
        uint64_t Zk = 0;
        double z = 0.0;
        const double min_p = p->min_p;
        for (int i = 0; i < V; i++) {
            if (s[i] == -INFINITY) continue;
            double e = sample_rel_exp(s[i], m);
            if (e < min_p && s[i] != m) {
                s[i] = -INFINITY;
                continue;
            }
            Zk += (uint64_t)(e * 0x1p44 + 0.5);
            z += e;
        }
        norm_m = m, norm_z = z;
        id = 0;
        if (m != -INFINITY) {
            uint64_t target = sample_target(u, Zk), acc = 0;
            for (int i = 0; i < V; i++) {
                if (s[i] == -INFINITY) continue;
                acc += sample_mass(s[i], m);
                id = i;
                if (acc > target) break;
            }
        }
    }
    *id_out = id;
    if (lp_out) {
        if (norm_z < 0.0) {
            norm_m = s[id];  // greedy rows: id is the first maximum
            norm_z = 0.0;
            for (int i = 0; i < V; i++) norm_z += sample_rel_exp(s[i], norm_m);
        }
        *lp_out = norm_m == -INFINITY ? -INFINITY : (float)((double)s[id] - (double)norm_m - log(norm_z));
    }
    if (lp_raw_out)
        *lp_raw_out = raw_m == -INFINITY ? -INFINITY : (float)((double)(logits[id] / T) - (double)raw_m - log(raw_z));
}

static void cpu_sample_logits(Backend *be, int32_t *ids, float *logprob, float *logprob_raw, float *scores,
                              const float *logits, const SampleParams *params, const double *u, const uint8_t *seen,
                              const int32_t *banned, int K, int B, int V) {
    CHECK_MSG(!(logprob_raw && scores == logits), "sample_logits: logprob_raw needs scores != logits");
    for (int b = 0; b < B; b++) {
        CHECK(params[b].repetition_penalty == 1.0f || seen);
        CHECK(!params[b].do_sample || u);
    }
#pragma omp parallel for schedule(dynamic, 1) if (B > 1)
    for (int b = 0; b < B; b++)
        sample_row(&ids[b], logprob ? &logprob[b] : NULL, logprob_raw ? &logprob_raw[b] : NULL,
                   scores + (size_t)b * V, logits + (size_t)b * V, &params[b], u ? u[b] : 0.0,
                   seen ? seen + (size_t)b * V : NULL, banned ? banned + (size_t)b * K : NULL, K, V);
}

void backend_cpu_install_sampling(Backend *be) {
    be->sample_seen_update = cpu_sample_seen_update;
    be->sample_logits = cpu_sample_logits;
}
