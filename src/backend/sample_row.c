// sample_row.c: the host sampler's row over a group of vocabulary shards (sample_row.h). The
// processors run fused in few passes: temperature, max and the top-digit histogram in one; exp
// skipped for removed tokens; after the first radix digit the few candidates left in this shard
// are compacted into a stack buffer so that later digits do not rescan the row.
#include "sample_row.h"

#include "sample_math.h"

#include <math.h>
#include <string.h>

#define SAMPLE_CAND 4096  // candidates kept on the stack after the first digit

// Radix digits of the 32-bit keys, most significant first. The first digit (sign, exponent, two
// mantissa bits) is wide so that the bucket holding a threshold is usually small enough to
// compact; the rest are bytes and a tail.
#define TOP_BITS 11
#define TOP_BINS (1 << TOP_BITS)
static const int digit_shift[3] = {13, 5, 0}, digit_bits[3] = {8, 8, 5};

// Every rank's n bytes of send, in rank order (send itself in a group of one).
static const void *gather(const SampleGroup *g, const void *send, size_t n) {
    if (g->T == 1) return send;
    g->gather(g->ctx, g->buf, send, n);
    return g->buf;
}

// v (n) summed over the group, in place.
static void sum_u64(const SampleGroup *g, uint64_t *v, int n) {
    if (g->T == 1) return;
    const uint64_t *all = gather(g, v, (size_t)n * sizeof(uint64_t));
    for (int i = 0; i < n; i++) {
        uint64_t s = 0;
        for (int r = 0; r < g->T; r++) s += all[(size_t)r * n + i];
        v[i] = s;
    }
}

static double sum_d(const SampleGroup *g, double x) {
    if (g->T == 1) return x;
    const double *all = gather(g, &x, sizeof x);
    double s = 0;
    for (int r = 0; r < g->T; r++) s += all[r];
    return s;
}

static float max_f(const SampleGroup *g, float x) {
    if (g->T == 1) return x;
    const float *all = gather(g, &x, sizeof x);
    float m = -INFINITY;
    for (int r = 0; r < g->T; r++) m = all[r] > m ? all[r] : m;
    return m;
}

// The first index (global id) of the maximum of x (V) over the whole row.
static int first_argmax(const SampleGroup *g, const float *x) {
    struct { float v; int32_t id; } me = {x[0], g->lo};
    for (int i = 1; i < g->V; i++)
        if (x[i] > me.v) me.v = x[i], me.id = g->lo + i;
    if (g->T == 1) return me.id;
    const char *all = gather(g, &me, sizeof me);
    float bv = -INFINITY;
    int id = 0;
    for (int r = 0; r < g->T; r++) {
        memcpy(&me, all + (size_t)r * sizeof me, sizeof me);
        if (r == 0 || me.v > bv) bv = me.v, id = me.id;  // strict: the lowest rank (lowest ids) on ties
    }
    return id;
}

// The value at global id x[id - lo] (fp32, on its owner), on every rank.
static float value_at(const SampleGroup *g, const float *x, int id) {
    if (g->T == 1) return x[id - g->lo];
    float v = id >= g->lo && id < g->lo + g->V ? x[id - g->lo] : 0.0f;
    const float *all = gather(g, &v, sizeof v);
    return all[id / g->V];  // the shards are equal: rank id / V owns id
}

// Walk count buckets from the top; returns the digit holding the need-th largest and reduces
// need by everything above it.
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

// The k-th largest key of the whole row, from this shard's top-digit histogram (local) and the
// group's (hist).
static uint32_t kth_key(const SampleGroup *g, const float *x, uint64_t k, const uint64_t *local,
                        const uint64_t *hist) {
    const int V = g->V;
    uint64_t need = k;
    int d = walk_counts(hist, TOP_BINS, &need);
    uint32_t prefix = (uint32_t)d << (32 - TOP_BITS), mask = ~0u << (32 - TOP_BITS);
    uint32_t cand[SAMPLE_CAND];
    int n = -1;
    if (local[d] <= SAMPLE_CAND) {
        n = 0;
        for (int i = 0; i < V; i++) {
            uint32_t key = sample_key(x[i]);
            if ((key & mask) == prefix) cand[n++] = key;
        }
    }
    for (int l = 0; l < 3; l++) {
        const int shift = digit_shift[l], nb = 1 << digit_bits[l];
        uint64_t cnt[256] = {0};
        if (n >= 0) {
            for (int j = 0; j < n; j++)
                if ((cand[j] & mask) == prefix) cnt[(cand[j] >> shift) & (nb - 1)]++;
        } else {
            for (int i = 0; i < V; i++) {
                uint32_t key = sample_key(x[i]);
                if ((key & mask) == prefix) cnt[(key >> shift) & (nb - 1)]++;
            }
        }
        sum_u64(g, cnt, nb);
        prefix |= (uint32_t)walk_counts(cnt, nb, &need) << shift;
        mask |= (uint32_t)(nb - 1) << shift;
    }
    return prefix;
}

// The top-p boundary key v* and the mass above it, from the group's top-digit mass histogram.
static uint32_t topp_key(const SampleGroup *g, const float *x, float m, uint64_t keep, const uint64_t *hist,
                         uint64_t *above) {
    const int V = g->V;
    *above = 0;
    int d = walk_mass(hist, TOP_BINS, above, keep);
    uint32_t prefix = (uint32_t)d << (32 - TOP_BITS), mask = ~0u << (32 - TOP_BITS);
    uint32_t ckey[SAMPLE_CAND];
    uint64_t cmass[SAMPLE_CAND];
    int n = 0;
    for (int i = 0; i < V; i++) {
        uint32_t key = sample_key(x[i]);
        if ((key & mask) != prefix) continue;
        if (n == SAMPLE_CAND) {
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
        sum_u64(g, mass, nb);
        prefix |= (uint32_t)walk_mass(mass, nb, above, keep) << shift;
        mask |= (uint32_t)(nb - 1) << shift;
    }
    return prefix;
}

// Top-p on s (V, at temperature, max m): everything below the boundary removed, and of the ties
// at it the first n of the whole row in index order kept (the ranks before this one hold the
// first ones).
static void top_p(const SampleGroup *g, float *s, float m, const SampleParams *p, uint64_t Z, uint64_t *pm) {
    const int V = g->V;
    sum_u64(g, &Z, 1);
    sum_u64(g, pm, TOP_BINS);
    uint64_t keep = sample_topp_keep(p->top_p, Z);
    if (keep == 0) {
        int top = first_argmax(g, s);
        for (int i = 0; i < V; i++)
            if (g->lo + i != top) s[i] = -INFINITY;
        return;
    }
    uint64_t above;
    uint32_t vstar = topp_key(g, s, m, keep, pm, &above);
    uint64_t e = 0, mine = 0;
    for (int i = 0; i < V; i++)
        if (sample_key(s[i]) == vstar) {
            if (!e) e = sample_mass(s[i], m);
            mine++;
        }
    uint64_t me[2] = {e, mine}, before = 0;
    const uint64_t *all = gather(g, me, sizeof me);
    for (int r = 0; r < g->T; r++) {
        if (!e && all[2 * r + 1]) e = all[2 * r];
        if (r < g->t) before += all[2 * r + 1];
    }
    uint64_t n = e ? (keep - above + e - 1) / e : 0, ties = before;  // e is 0 only after a failed exchange
    for (int i = 0; i < V; i++) {
        uint32_t key = sample_key(s[i]);
        if (key > vstar) continue;
        if (key == vstar && ties++ < n) continue;
        s[i] = -INFINITY;
    }
}

// The inverse-CDF draw at u over the kept tokens of s (at temperature, max m) whose masses sum
// to Zk in this shard: the global id.
static int draw(const SampleGroup *g, const float *s, float m, uint64_t Zk, double u) {
    const uint64_t *all = gather(g, &Zk, sizeof Zk);
    uint64_t total = 0, acc = 0;
    for (int r = 0; r < g->T; r++) {
        if (r < g->t) acc += all[r];
        total += all[r];
    }
    uint64_t target = sample_target(u, total);
    int32_t found = -1;
    if (Zk && acc <= target && target < acc + Zk)  // the draw lands in this shard
        for (int i = 0; i < g->V; i++) {
            if (s[i] == -INFINITY) continue;
            acc += sample_mass(s[i], m);
            found = g->lo + i;
            if (acc > target) break;
        }
    const int32_t *ids = gather(g, &found, sizeof found);
    int id = 0;
    for (int r = 0; r < g->T; r++)
        if (ids[r] >= 0) id = ids[r];
    return id;
}

void sample_row_group(const SampleGroup *g, int32_t *id_out, float *lp_out, float *lp_raw_out, float *s,
                      const float *logits, const SampleParams *p, double u, const uint8_t *seen,
                      const int32_t *banned, int K) {
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
    if (theta != 1.0f) {
        for (int i = 0; i < V; i++) s[i] = seen[lo + i] ? sample_penalize(logits[i], theta) : logits[i];
    } else if (s != logits) {
        memcpy(s, logits, (size_t)V * sizeof(float));
    }
    for (int j = 0; j < K; j++)
        if (banned[j] >= lo && banned[j] < lo + V) s[banned[j] - lo] = -INFINITY;

    int id;
    float norm_m = -INFINITY;  // log-prob normaliser (max, sum exp) when a pass computed it
    double norm_z = -1.0;
    if (!p->do_sample) {
        id = first_argmax(g, s);
    } else {
        const int use_k = p->top_k > 0 && p->top_k < (int64_t)V * g->T, use_p = p->top_p < 1.0;
        // temperature, max and the top-digit count histogram in one pass
        float m = -INFINITY;
        uint64_t cnt[TOP_BINS] = {0};
        for (int i = 0; i < V; i++) {
            float v = s[i] / T;
            s[i] = v;
            m = v > m ? v : m;
            if (use_k) cnt[sample_key(v) >> (32 - TOP_BITS)]++;
        }
        m = max_f(g, m);
        uint64_t Z = 0, pm[TOP_BINS] = {0};
        if (use_k) {
            uint64_t local_d[TOP_BINS];  // this shard's counts (cnt becomes the group's)
            if (g->T > 1) memcpy(local_d, cnt, sizeof cnt);
            sum_u64(g, cnt, TOP_BINS);
            uint32_t thr = kth_key(g, s, (uint64_t)p->top_k, g->T > 1 ? local_d : cnt, cnt);
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
        if (use_p && m != -INFINITY) top_p(g, s, m, p, Z, pm);
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
        norm_m = m, norm_z = sum_d(g, z);
        id = m != -INFINITY ? draw(g, s, m, Zk, u) : 0;
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
