// sample_shard.c: the sort-free sampler of backend.h (sample_logits) on vocabulary shards
// (sample_shard.h). Each rank of a tensor-parallel group holds rows [lo, lo + V) of every row of
// logits; every threshold the one-process sampler finds by a radix walk over the whole row is
// found here by the same walk over histograms summed over the group, and every sum it takes is
// the sum of the shards' sums. Token masses are the fixed-point integers of sample_math.h, so
// their sums, the top-k and top-p thresholds, the kept ties (in index order: the ranks' counts
// before this one) and the inverse-CDF draw are the one-process sampler's exactly; only the
// log-probs' double sums are added in another order. The exchanges are all-gathers of host bytes
// through the model's hook (every rank combines them in rank order: the same result everywhere).
#include "sample_shard.h"

#include "../backend/sample_math.h"
#include "../core/alloc.h"

#include <math.h>
#include <string.h>

#define TOP_BITS 11
#define TOP_BINS (1 << TOP_BITS)
static const int digit_shift[3] = {13, 5, 0}, digit_bits[3] = {8, 8, 5};

typedef struct Shards {
    Model *m;
    int lo, V, T, t;
    void *buf;  // (T * largest exchange) host bytes
} Shards;

// recv (T * n bytes) = every rank's send (n bytes), in rank order.
static const void *gather(Shards *g, const void *send, size_t n) {
    model_gather(g->m, g->buf, send, n);
    return g->buf;
}

static void sum_u64(Shards *g, uint64_t *v, int n) {
    const uint64_t *all = gather(g, v, (size_t)n * sizeof(uint64_t));
    for (int i = 0; i < n; i++) {
        uint64_t s = 0;
        for (int r = 0; r < g->T; r++) s += all[(size_t)r * n + i];
        v[i] = s;
    }
}

static double sum_d(Shards *g, double x) {
    const double *all = gather(g, &x, sizeof x);
    double s = 0;
    for (int r = 0; r < g->T; r++) s += all[r];
    return s;
}

static float max_f(Shards *g, float x) {
    const float *all = gather(g, &x, sizeof x);
    float m = -INFINITY;
    for (int r = 0; r < g->T; r++) m = all[r] > m ? all[r] : m;
    return m;
}

// The first index of the maximum of x (V) over the whole row (global id), and the maximum.
static int first_argmax(Shards *g, const float *x, float *best) {
    struct { float v; int32_t id; } me = {x[0], g->lo};
    for (int i = 1; i < g->V; i++)
        if (x[i] > me.v) me.v = x[i], me.id = g->lo + i;
    const char *all = gather(g, &me, sizeof me);
    float bv = -INFINITY;
    int id = 0;
    for (int r = 0; r < g->T; r++) {
        memcpy(&me, all + (size_t)r * sizeof me, sizeof me);
        if (r == 0 || me.v > bv) bv = me.v, id = me.id;  // strict: the lowest rank (lowest ids) on ties
    }
    if (best) *best = bv;
    return id;
}

// The value (fp32, on its owner) at global id, on every rank.
static float value_at(Shards *g, const float *x, int id) {
    float v = id >= g->lo && id < g->lo + g->V ? x[id - g->lo] : 0.0f;
    const float *all = gather(g, &v, sizeof v);
    return all[id / g->V];  // the shards are equal: rank id / V owns id
}

static int walk_counts(const uint64_t *cnt, int nbins, uint64_t *need) {
    int d = nbins - 1;
    for (; d > 0 && cnt[d] < *need; d--) *need -= cnt[d];
    return d;
}

static int walk_mass(const uint64_t *mass, int nbins, uint64_t *above, uint64_t keep) {
    int d = nbins - 1;
    for (; d > 0 && *above + mass[d] < keep; d--) *above += mass[d];
    return d;
}

// The k-th largest key of the whole row.
static uint32_t kth_key(Shards *g, const float *x, uint64_t k, uint64_t *hist) {
    uint64_t need = k;
    for (int i = 0; i < g->V; i++) hist[sample_key(x[i]) >> (32 - TOP_BITS)]++;
    sum_u64(g, hist, TOP_BINS);
    int d = walk_counts(hist, TOP_BINS, &need);
    uint32_t prefix = (uint32_t)d << (32 - TOP_BITS), mask = ~0u << (32 - TOP_BITS);
    for (int l = 0; l < 3; l++) {
        const int shift = digit_shift[l], nb = 1 << digit_bits[l];
        uint64_t cnt[256] = {0};
        for (int i = 0; i < g->V; i++) {
            uint32_t key = sample_key(x[i]);
            if ((key & mask) == prefix) cnt[(key >> shift) & (nb - 1)]++;
        }
        sum_u64(g, cnt, nb);
        prefix |= (uint32_t)walk_counts(cnt, nb, &need) << shift;
        mask |= (uint32_t)(nb - 1) << shift;
    }
    return prefix;
}

// The top-p boundary key and the mass above it, from the summed top-digit mass histogram.
static uint32_t topp_key(Shards *g, const float *x, float m, uint64_t keep, const uint64_t *hist, uint64_t *above) {
    *above = 0;
    int d = walk_mass(hist, TOP_BINS, above, keep);
    uint32_t prefix = (uint32_t)d << (32 - TOP_BITS), mask = ~0u << (32 - TOP_BITS);
    for (int l = 0; l < 3; l++) {
        const int shift = digit_shift[l], nb = 1 << digit_bits[l];
        uint64_t mass[256] = {0};
        for (int i = 0; i < g->V; i++) {
            uint32_t key = sample_key(x[i]);
            if ((key & mask) == prefix) mass[(key >> shift) & (nb - 1)] += sample_mass(x[i], m);
        }
        sum_u64(g, mass, nb);
        prefix |= (uint32_t)walk_mass(mass, nb, above, keep) << shift;
        mask |= (uint32_t)(nb - 1) << shift;
    }
    return prefix;
}

// One row (the shard's columns of it): sample_row of backend/cpu/cpu_sample.c over the group.
static void sample_row(Shards *g, int32_t *id_out, float *lp_out, float *lp_raw_out, float *s, const float *logits,
                       const SampleParams *p, double u, const uint8_t *seen, const int32_t *banned, int K,
                       uint64_t *hist) {
    const int V = g->V, lo = g->lo;
    const float T = p->temperature;
    float raw_m = -INFINITY;
    double raw_z = 0.0;
    if (lp_raw_out) {
        for (int i = 0; i < V; i++) {
            float v = logits[i] / T;
            raw_m = v > raw_m ? v : raw_m;
        }
        raw_m = max_f(g, raw_m);
        for (int i = 0; i < V; i++) raw_z += sample_rel_exp(logits[i] / T, raw_m);
        raw_z = sum_d(g, raw_z);
    }
    const float theta = p->repetition_penalty;
    for (int i = 0; i < V; i++) s[i] = theta != 1.0f && seen[lo + i] ? sample_penalize(logits[i], theta) : logits[i];
    for (int j = 0; j < K; j++)
        if (banned[j] >= lo && banned[j] < lo + V) s[banned[j] - lo] = -INFINITY;

    int id;
    float norm_m = -INFINITY;
    double norm_z = -1.0;
    if (!p->do_sample) {
        id = first_argmax(g, s, NULL);
    } else {
        const int use_k = p->top_k > 0 && p->top_k < g->V * g->T, use_p = p->top_p < 1.0;
        float m = -INFINITY;
        for (int i = 0; i < V; i++) {
            s[i] = s[i] / T;
            m = s[i] > m ? s[i] : m;
        }
        m = max_f(g, m);
        uint64_t Z = 0;
        memset(hist, 0, TOP_BINS * sizeof(uint64_t));
        if (use_k) {
            uint32_t thr = kth_key(g, s, (uint64_t)p->top_k, hist);
            memset(hist, 0, TOP_BINS * sizeof(uint64_t));
            for (int i = 0; i < V; i++) {
                uint32_t key = sample_key(s[i]);
                if (key < thr) {
                    s[i] = -INFINITY;
                } else if (use_p) {
                    uint64_t e = sample_mass(s[i], m);
                    Z += e;
                    hist[key >> (32 - TOP_BITS)] += e;
                }
            }
        } else if (use_p) {
            for (int i = 0; i < V; i++) {
                uint64_t e = sample_mass(s[i], m);
                Z += e;
                hist[sample_key(s[i]) >> (32 - TOP_BITS)] += e;
            }
        }
        if (use_p && m != -INFINITY) {
            sum_u64(g, &Z, 1);
            sum_u64(g, hist, TOP_BINS);
            uint64_t keep = sample_topp_keep(p->top_p, Z);
            if (keep == 0) {
                int top = first_argmax(g, s, NULL);
                for (int i = 0; i < V; i++)
                    if (lo + i != top) s[i] = -INFINITY;
            } else {
                uint64_t above;
                uint32_t vstar = topp_key(g, s, m, keep, hist, &above);
                uint64_t e = 0, n = 0, mine = 0;
                for (int i = 0; i < V; i++)
                    if (sample_key(s[i]) == vstar) {
                        if (!e) e = sample_mass(s[i], m);
                        mine++;
                    }
                // the ties' mass and how many of them the row keeps; the first n in index order
                uint64_t me[2] = {e, mine};
                const uint64_t *all = gather(g, me, sizeof me);
                uint64_t before = 0;
                for (int r = 0; r < g->T; r++) {
                    if (!e && all[2 * r + 1]) e = all[2 * r];
                    if (r < g->t) before += all[2 * r + 1];
                }
                n = e ? (keep - above + e - 1) / e : 0;  // e is 0 only after a failed exchange
                uint64_t ties = before;
                for (int i = 0; i < V; i++) {
                    uint32_t key = sample_key(s[i]);
                    if (key > vstar) continue;
                    if (key == vstar && ties++ < n) continue;
                    s[i] = -INFINITY;
                }
            }
        }
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
        norm_m = m, norm_z = sum_d(g, z);
        id = 0;
        if (m != -INFINITY) {
            const uint64_t *all = gather(g, &Zk, sizeof Zk);
            uint64_t total = 0, acc = 0;
            for (int r = 0; r < g->T; r++) {
                if (r < g->t) acc += all[r];
                total += all[r];
            }
            uint64_t target = sample_target(u, total);
            int32_t found = -1;
            if (Zk && acc <= target && target < acc + Zk)  // the draw lands in this shard
                for (int i = 0; i < V; i++) {
                    if (s[i] == -INFINITY) continue;
                    acc += sample_mass(s[i], m);
                    found = lo + i;
                    if (acc > target) break;
                }
            const int32_t *ids = gather(g, &found, sizeof found);
            for (int r = 0; r < g->T; r++)
                if (ids[r] >= 0) id = ids[r];
        }
    }
    *id_out = id;
    if (lp_out) {
        float sid = value_at(g, s, id);
        if (norm_z < 0.0) {  // greedy rows: id is the first maximum
            norm_m = sid;
            norm_z = 0.0;
            for (int i = 0; i < V; i++) norm_z += sample_rel_exp(s[i], norm_m);
            norm_z = sum_d(g, norm_z);
        }
        *lp_out = norm_m == -INFINITY ? -INFINITY : (float)((double)sid - (double)norm_m - log(norm_z));
    }
    if (lp_raw_out) {
        float lid = value_at(g, logits, id);
        *lp_raw_out = raw_m == -INFINITY ? -INFINITY : (float)((double)(lid / T) - (double)raw_m - log(raw_z));
    }
}

void sample_shards(Model *m, int32_t *ids, float *logprob, float *logprob_raw, const float *logits,
                   const SampleParams *params, const double *u, const uint8_t *seen, const int32_t *banned, int K,
                   int B) {
    const ModelConfig *c = &m->cfg;
    CHECK_MSG(c->vocab_part > 0, "sample_shards: the model holds no vocabulary shard");
    Shards g = {m, c->vocab_lo, c->vocab_part, c->vocab_size / c->vocab_part, c->vocab_lo / c->vocab_part, NULL};
    g.buf = xmalloc((size_t)g.T * TOP_BINS * sizeof(uint64_t));
    float *s = xmalloc((size_t)g.V * sizeof(float));
    uint64_t *hist = xmalloc(TOP_BINS * sizeof(uint64_t));
    for (int b = 0; b < B; b++) {
        CHECK(params[b].repetition_penalty == 1.0f || seen);
        sample_row(&g, &ids[b], logprob ? &logprob[b] : NULL, logprob_raw ? &logprob_raw[b] : NULL, s,
                   logits + (size_t)b * g.V, &params[b], u ? u[b] : 0.0, seen ? seen + (size_t)b * c->vocab_size : NULL,
                   banned ? banned + (size_t)b * K : NULL, K, hist);
    }
    free(s), free(hist), free(g.buf);
}
