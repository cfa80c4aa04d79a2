// ref_sample.c: the sampling ops, the spec. One row at a time, one plain pass per step of
// docs/sampling.md; thresholds by radix select on order-preserving keys (no sort anywhere).
#include "../backend.h"
#include "../sample_math.h"

#include <math.h>

// seen (B,V) |= onehot(ids (B,T))
static void ref_sample_seen_update(Backend *be, uint8_t *seen, const int32_t *ids, int B, int T, int V) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t id = ids[(size_t)b * T + t];
            if (id >= 0 && id < V) seen[(size_t)b * V + id] = 1;
        }
}

// The key of the k-th largest value of x (V), counting repeats (torch.topk's k-th value).
// Four passes of 8-bit digits, most significant first.
static uint32_t kth_largest_key(const float *x, int V, int k) {
    uint32_t prefix = 0, mask = 0;
    long need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        long cnt[256] = {0};
        for (int i = 0; i < V; i++) {
            uint32_t key = sample_key(x[i]);
            if ((key & mask) == prefix) cnt[(key >> shift) & 255]++;
        }
        int d = 255;
        for (; d > 0 && cnt[d] < need; d--) need -= cnt[d];
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
    }
    return prefix;
}

static float row_max(const float *x, int V) {
    float m = -INFINITY;
    for (int i = 0; i < V; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static int first_argmax(const float *x, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// log softmax(x)[id] with a double accumulator.
static float log_softmax_at(const float *x, int V, int id) {
    float m = row_max(x, V);
    if (m == -INFINITY) return -INFINITY;
    double z = 0.0;
    for (int i = 0; i < V; i++) z += sample_rel_exp(x[i], m);
    return (float)((double)x[id] - (double)m - log(z));
}

// Top-k: keep every score >= the k'-th largest (ties at the threshold kept).
static void top_k_filter(float *x, int V, int k) {
    if (k < 1) k = 1;
    if (k >= V) return;
    uint32_t thr = kth_largest_key(x, V, k);
    for (int i = 0; i < V; i++)
        if (sample_key(x[i]) < thr) x[i] = -INFINITY;
}

// Top-p on the renormalised survivors. Order: value descending, index ascending among equal
// values. Keep token j iff the mass strictly before it in that order is < keep.
static void top_p_filter(float *x, int V, double top_p) {
    float m = row_max(x, V);
    if (m == -INFINITY) return;
    uint64_t Z = 0;
    for (int i = 0; i < V; i++) Z += sample_mass(x[i], m);
    uint64_t keep = sample_topp_keep(top_p, Z);
    if (keep == 0) {  // only the first (lowest index) maximum survives
        int top = first_argmax(x, V);
        for (int i = 0; i < V; i++)
            if (i != top) x[i] = -INFINITY;
        return;
    }
    // Mass-weighted radix walk from the top: find the key v* of the token whose mass crosses
    // `keep`, and the mass `above` of all tokens with larger keys.
    uint32_t prefix = 0, mask = 0;
    uint64_t above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        uint64_t mass[256] = {0};
        for (int i = 0; i < V; i++) {
            uint32_t key = sample_key(x[i]);
            if ((key & mask) == prefix) mass[(key >> shift) & 255] += sample_mass(x[i], m);
        }
        int d = 255;
        for (; d > 0 && above + mass[d] < keep; d--) above += mass[d];
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
    }
    // Ties at v* all have the same mass e: the first n of them (by index) are kept, where n is
    // the least count with above + n*e >= keep.
    uint64_t e = 0;
    for (int i = 0; i < V && !e; i++)
        if (sample_key(x[i]) == prefix) e = sample_mass(x[i], m);
    uint64_t n = (keep - above + e - 1) / e;
    uint64_t seen_ties = 0;
    for (int i = 0; i < V; i++) {
        uint32_t key = sample_key(x[i]);
        if (key > prefix) continue;
        if (key == prefix && seen_ties < n) {
            seen_ties++;
            continue;
        }
        x[i] = -INFINITY;
    }
}

// Min-p: remove p < min_p * p_max, i.e. exp(x - max) < min_p. The maximum always stays.
static void min_p_filter(float *x, int V, float min_p) {
    float m = row_max(x, V);
    if (m == -INFINITY) return;
    for (int i = 0; i < V; i++)
        if (x[i] != m && sample_rel_exp(x[i], m) < (double)min_p) x[i] = -INFINITY;
}

// Inverse CDF in index order over the fixed-point masses.
static int draw(const float *x, int V, double u) {
    float m = row_max(x, V);
    if (m == -INFINITY) return 0;
    uint64_t Z = 0;
    for (int i = 0; i < V; i++) Z += sample_mass(x[i], m);
    uint64_t target = sample_target(u, Z), acc = 0;
    int last = 0;
    for (int i = 0; i < V; i++) {
        uint64_t e = sample_mass(x[i], m);
        if (!e) continue;
        acc += e;
        last = i;
        if (acc > target) return i;
    }
    return last;
}

static void sample_row(int32_t *id_out, float *lp_out, float *lp_raw_out, float *s, const float *logits,
                       const SampleParams *p, const double *u, const uint8_t *seen, const int32_t *banned, int K,
                       int V) {
    float lp_raw_lse_m = 0.0f;
    double lp_raw_z = 0.0;
    if (lp_raw_out) {  // raw log-softmax normaliser, before scores (maybe aliased) change
        float m = -INFINITY;
        for (int i = 0; i < V; i++) {
            float v = logits[i] / p->temperature;
            m = v > m ? v : m;
        }
        for (int i = 0; i < V; i++) lp_raw_z += sample_rel_exp(logits[i] / p->temperature, m);
        lp_raw_lse_m = m;
    }
    for (int i = 0; i < V; i++) {
        float v = logits[i];
        if (p->repetition_penalty != 1.0f && seen[i]) v = sample_penalize(v, p->repetition_penalty);
        s[i] = v;
    }
    for (int j = 0; j < K; j++)
        if (banned[j] >= 0 && banned[j] < V) s[banned[j]] = -INFINITY;

    int id;
    if (!p->do_sample) {
        id = first_argmax(s, V);
    } else {
        for (int i = 0; i < V; i++) s[i] = s[i] / p->temperature;
        if (p->top_k > 0) top_k_filter(s, V, p->top_k);
        if (p->top_p < 1.0) top_p_filter(s, V, p->top_p);
        if (p->min_p > 0.0f) min_p_filter(s, V, p->min_p);
        id = draw(s, V, *u);
    }
    *id_out = id;
    if (lp_out) *lp_out = log_softmax_at(s, V, id);
    if (lp_raw_out) {
        double x = (double)(logits[id] / p->temperature) - (double)lp_raw_lse_m;
        *lp_raw_out = lp_raw_lse_m == -INFINITY ? -INFINITY : (float)(x - log(lp_raw_z));
    }
}

static void ref_sample_logits(Backend *be, int32_t *ids, float *logprob, float *logprob_raw, float *scores,
                              const float *logits, const SampleParams *params, const double *u, const uint8_t *seen,
                              const int32_t *banned, int K, int B, int V) {
    CHECK_MSG(!(logprob_raw && scores == logits), "sample_logits: logprob_raw needs scores != logits");
    for (int b = 0; b < B; b++) {
        const SampleParams *p = &params[b];
        CHECK(p->repetition_penalty == 1.0f || seen);
        CHECK(!p->do_sample || u);
        sample_row(&ids[b], logprob ? &logprob[b] : NULL, logprob_raw ? &logprob_raw[b] : NULL,
                   scores + (size_t)b * V, logits + (size_t)b * V, p, u ? &u[b] : NULL,
                   seen ? seen + (size_t)b * V : NULL, banned ? banned + (size_t)b * K : NULL, K, V);
    }
}

void backend_ref_install_sampling(Backend *be) {
    be->sample_seen_update = ref_sample_seen_update;
    be->sample_logits = ref_sample_logits;
}
