// test_sampler.c: the sort-free sampling ops (ref and cpu) against a sort-based reference written
// here with qsort, on random rows with forced ties; chi-square of the draws; greedy ties; cpu == ref.
#include "backend/backend.h"
#include "core/rng.h"
#include "test.h"

#include <stdint.h>

static Backend be_ref, be_cpu;
static int rows_reported = 0;  // the first few failing rows are described

// ---------------------------------------------------------------------------------------------
// The sort-based reference: HF's processors in order, with the tie rule of docs/sampling.md
// (descending value, ascending index) and the fixed-point masses the ops use.

typedef struct {
    float v;
    int i;
} ValIdx;

static int cmp_desc(const void *a, const void *b) {
    const ValIdx *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->i - y->i;
}

static int cmp_float_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

static uint64_t mass_fixed(float x, float m) {
    if (x == -INFINITY) return 0;
    return (uint64_t)(exp((double)x - (double)m) * 17592186044416.0 + 0.5);  // 2^44
}

// floor(fp32(1 - top_p) * Z) by a different exact route than the ops: double mantissa, 128 bits.
static uint64_t removable_mass(double top_p, uint64_t Z) {
    double thr = (double)(float)(1.0 - top_p);
    if (thr <= 0) return 0;
    if (thr >= 1) return Z;
    int ex;
    double fr = frexp(thr, &ex);
    unsigned __int128 M = (unsigned __int128)(uint64_t)ldexp(fr, 53);
    int sh = 53 - ex;
    if (sh >= 128) return 0;
    return (uint64_t)((M * Z) >> sh);
}

static float fmax_row(const float *x, int V) {
    float m = -INFINITY;
    for (int i = 0; i < V; i++) m = fmaxf(m, x[i]);
    return m;
}

// s (V) <- processed scores. Returns the greedy id for greedy rows, -1 for sampling rows.
static int reference_process(float *s, const float *logits, const SampleParams *p, const uint8_t *seen,
                             const int32_t *banned, int K, int V) {
    for (int i = 0; i < V; i++) {
        float v = logits[i];
        if (p->repetition_penalty != 1.0f && seen[i]) v = v < 0 ? v * p->repetition_penalty : v / p->repetition_penalty;
        s[i] = v;
    }
    for (int j = 0; j < K; j++)
        if (banned[j] >= 0 && banned[j] < V) s[banned[j]] = -INFINITY;
    if (!p->do_sample) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (s[i] > s[best]) best = i;
        return best;
    }
    for (int i = 0; i < V; i++) s[i] = s[i] / p->temperature;
    if (p->top_k > 0) {
        int k = p->top_k < V ? p->top_k : V;
        float *sorted = malloc((size_t)V * sizeof(float));
        memcpy(sorted, s, (size_t)V * sizeof(float));
        qsort(sorted, (size_t)V, sizeof(float), cmp_float_desc);
        float thr = sorted[k - 1];
        for (int i = 0; i < V; i++)
            if (s[i] < thr) s[i] = -INFINITY;
        free(sorted);
    }
    float m = fmax_row(s, V);
    if (p->top_p < 1.0 && m != -INFINITY) {
        ValIdx *o = malloc((size_t)V * sizeof(ValIdx));
        uint64_t Z = 0;
        for (int i = 0; i < V; i++) o[i] = (ValIdx){s[i], i}, Z += mass_fixed(s[i], m);
        qsort(o, (size_t)V, sizeof(ValIdx), cmp_desc);
        uint64_t keep = Z - removable_mass(p->top_p, Z), above = 0;
        for (int j = 0; j < V; j++) {
            int kept = keep == 0 ? j == 0 : above < keep;
            above += mass_fixed(o[j].v, m);
            if (!kept) s[o[j].i] = -INFINITY;
        }
        free(o);
    }
    if (p->min_p > 0.0f && m != -INFINITY)
        for (int i = 0; i < V; i++)
            if (s[i] != m && exp((double)s[i] - (double)m) < (double)p->min_p) s[i] = -INFINITY;
    return -1;
}

// log softmax(x)[id] in double
static double ref_log_softmax(const float *x, int V, int id) {
    float m = fmax_row(x, V);
    double z = 0;
    for (int i = 0; i < V; i++) z += x[i] == -INFINITY ? 0.0 : exp((double)x[i] - m);
    return (double)x[id] - m - log(z);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

// ---------------------------------------------------------------------------------------------
// Random rows: normal logits of random spread, often quantised to a few levels (forced ties).

static void random_logits(Rng *r, float *x, int V) {
    double sigma = 0.3 + 6.0 * rng_uniform_d(r);
    int quant = rng_below(r, 10) < 6;
    double step = quant ? (double)(1 + rng_below(r, 4)) * 0.5 : 0.0;
    for (int i = 0; i < V; i++) {
        double v = sigma * rng_normal(r);
        if (quant) v = step * floor(v / step + 0.5);
        x[i] = (float)v;
    }
    if (rng_below(r, 8) == 0) x[rng_below(r, V)] = -0.0f;
}

static void random_params(Rng *r, SampleParams *p, int V) {
    memset(p, 0, sizeof *p);
    p->do_sample = rng_below(r, 10) != 0;
    p->temperature = rng_below(r, 3) == 0 ? 1.0f : (float)(0.2 + 1.8 * rng_uniform_d(r));
    p->repetition_penalty = rng_below(r, 3) == 0 ? (float)(0.5 + 1.5 * rng_uniform_d(r)) : 1.0f;
    int kmode = (int)rng_below(r, 4);
    p->top_k = kmode == 0 ? 0 : kmode == 1 ? 1 + (int)rng_below(r, 5) : 1 + (int)rng_below(r, (uint64_t)V + 4);
    int pmode = (int)rng_below(r, 5);
    p->top_p = pmode == 0 ? 1.0 : pmode == 1 ? 0.95 : pmode == 2 ? 0.0 : rng_uniform_d(r);
    p->min_p = rng_below(r, 3) == 0 ? (float)(0.3 * rng_uniform_d(r)) : 0.0f;
}

typedef struct {
    int V, B, K;
    float *logits, *s_ref, *s_cpu, *s_inplace, *expect;
    float *lp_ref, *lp_cpu, *lpr_ref, *lpr_cpu;
    int32_t *id_ref, *id_cpu, *id_inplace, *banned;
    uint8_t *seen;
    double *u;
    SampleParams *params;
} Batch;

static Batch batch_new(int B, int V, int K) {
    Batch t = {.V = V, .B = B, .K = K};
    size_t n = (size_t)B * V;
    t.logits = malloc(n * 4), t.s_ref = malloc(n * 4), t.s_cpu = malloc(n * 4), t.s_inplace = malloc(n * 4);
    t.expect = malloc(n * 4);
    t.lp_ref = malloc(B * 4), t.lp_cpu = malloc(B * 4), t.lpr_ref = malloc(B * 4), t.lpr_cpu = malloc(B * 4);
    t.id_ref = malloc(B * 4), t.id_cpu = malloc(B * 4), t.id_inplace = malloc(B * 4);
    t.banned = malloc((size_t)B * K * 4 + 4), t.seen = calloc(n, 1), t.u = malloc(B * 8);
    t.params = malloc(B * sizeof(SampleParams));
    return t;
}

static void batch_free(Batch *t) {
    free(t->logits), free(t->s_ref), free(t->s_cpu), free(t->s_inplace), free(t->expect);
    free(t->lp_ref), free(t->lp_cpu), free(t->lpr_ref), free(t->lpr_cpu);
    free(t->id_ref), free(t->id_cpu), free(t->id_inplace), free(t->banned), free(t->seen), free(t->u);
    free(t->params);
}

static void batch_fill(Rng *r, Batch *t) {
    int B = t->B, V = t->V;
    for (int b = 0; b < B; b++) {
        random_logits(r, t->logits + (size_t)b * V, V);
        random_params(r, &t->params[b], V);
        t->u[b] = rng_uniform_d(r);
        for (int j = 0; j < t->K; j++)
            t->banned[b * t->K + j] = rng_below(r, 3) == 0 ? (int32_t)rng_below(r, V) : -1;
    }
    // seen ids through the op, with out-of-range ids that it must skip
    int T = 1 + (int)rng_below(r, 8);
    int32_t *hist = malloc((size_t)B * T * 4);
    for (int i = 0; i < B * T; i++) hist[i] = (int32_t)rng_below(r, V + 2) - 1;
    memset(t->seen, 0, (size_t)B * V);
    be_ref.sample_seen_update(&be_ref, t->seen, hist, B, T, V);
    free(hist);
}

// Runs ref, cpu, cpu in place and the reference on a batch; returns the number of failing rows.
static int batch_check(Batch *t) {
    int B = t->B, V = t->V, bad = 0;
    be_ref.sample_logits(&be_ref, t->id_ref, t->lp_ref, t->lpr_ref, t->s_ref, t->logits, t->params, t->u, t->seen,
                         t->banned, t->K, B, V);
    be_cpu.sample_logits(&be_cpu, t->id_cpu, t->lp_cpu, t->lpr_cpu, t->s_cpu, t->logits, t->params, t->u, t->seen,
                         t->banned, t->K, B, V);
    memcpy(t->s_inplace, t->logits, (size_t)B * V * 4);
    be_cpu.sample_logits(&be_cpu, t->id_inplace, NULL, NULL, t->s_inplace, t->s_inplace, t->params, t->u, t->seen,
                         t->banned, t->K, B, V);
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * V;
        const SampleParams *p = &t->params[b];
        int greedy = reference_process(t->expect + o, t->logits + o, p, t->seen + o, t->banned + b * t->K, t->K, V);
        int mism = 0;
        for (int i = 0; i < V; i++)
            mism += !same_bits(t->s_ref[o + i], t->expect[o + i]) || !same_bits(t->s_cpu[o + i], t->expect[o + i]) ||
                    !same_bits(t->s_inplace[o + i], t->expect[o + i]);
        int id = t->id_ref[b];
        int ok = !mism && id == t->id_cpu[b] && id == t->id_inplace[b] && id >= 0 && id < V;
        if (ok && greedy >= 0) ok = id == greedy;
        if (ok && fmax_row(t->expect + o, V) != -INFINITY) ok = t->expect[o + id] != -INFINITY;
        double lp = ref_log_softmax(t->expect + o, V, id);
        if (ok && isfinite(lp)) ok = fabs(t->lp_ref[b] - lp) <= 1e-5 * fmax(1, fabs(lp)) && t->lp_cpu[b] == t->lp_ref[b];
        if (ok) {
            float *raw = malloc((size_t)V * 4);
            for (int i = 0; i < V; i++) raw[i] = t->logits[o + i] / p->temperature;
            double lpr = ref_log_softmax(raw, V, id);
            ok = fabs(t->lpr_ref[b] - lpr) <= 1e-5 * fmax(1, fabs(lpr)) && t->lpr_cpu[b] == t->lpr_ref[b];
            free(raw);
        }
        if (!ok) {
            if (rows_reported++ < 3)
                printf("# row V=%d do_sample=%d T=%g k=%d p=%.17g min_p=%g rep=%g: %d score mismatches, ids ref %d cpu %d "
                       "inplace %d greedy %d, lp %g vs %g\n",
                       V, p->do_sample, p->temperature, p->top_k, p->top_p, p->min_p, p->repetition_penalty, mism, id,
                       t->id_cpu[b], t->id_inplace[b], greedy, t->lp_ref[b], lp);
            bad++;
        }
    }
    return bad;
}

static void test_filters_match_sorted_reference(void) {
    Rng r;
    rng_init(&r, 1234, 0);
    int rows = 0, bad = 0;
    while (rows < 3000) {
        int V = 2 + (int)floor(exp(rng_uniform_d(&r) * log(4095.0)));
        if (V > 4096) V = 4096;
        int B = 1 + (int)rng_below(&r, 4);
        Batch t = batch_new(B, V, 3);
        batch_fill(&r, &t);
        bad += batch_check(&t);
        rows += B;
        batch_free(&t);
    }
    EXPECT_MSG(bad == 0, "%d of %d rows differ from the sorted reference", bad, rows);
}

static void test_full_vocab_rows(void) {
    Rng r;
    rng_init(&r, 99, 0);
    const int V = 151936, B = 20;
    Batch t = batch_new(B, V, 4);
    batch_fill(&r, &t);
    for (int b = 0; b < B; b++) {  // Qwen3 defaults and variations on most rows
        SampleParams *p = &t.params[b];
        if (b % 4 == 0) *p = (SampleParams){.temperature = 0.6f, .repetition_penalty = 1.0f, .top_k = 20, .top_p = 0.95, .do_sample = 1};
        if (b % 4 == 1) p->top_k = 0, p->top_p = 0.9, p->do_sample = 1;
    }
    int bad = batch_check(&t);
    EXPECT_MSG(bad == 0, "%d of %d rows at V=%d differ", bad, B, V);
    batch_free(&t);
}

static void test_greedy_ties_first_index(void) {
    const int V = 9;
    float logits[2 * 9] = {1, 3, 0, 3, 3, -1, 2, 3, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                           -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    SampleParams p[2] = {{.temperature = 0.5f, .repetition_penalty = 1.0f, .top_k = 1, .top_p = 0.1},
                         {.temperature = 1.0f, .repetition_penalty = 1.0f}};
    float s[2 * 9], lp[2];
    int32_t ids[2];
    Backend *bes[2] = {&be_ref, &be_cpu};
    for (int k = 0; k < 2; k++) {
        bes[k]->sample_logits(bes[k], ids, lp, NULL, s, logits, p, NULL, NULL, NULL, 0, 2, V);
        EXPECT(ids[0] == 1);
        EXPECT(fabs(lp[0] - (3.0 - log(4 * exp(3.0) + exp(2.0) + exp(1.0) + 2 + exp(-1.0)))) < 1e-6);
        EXPECT(ids[1] == 0);  // an all -inf row (everything banned) answers id 0
        EXPECT(s[4] == 3.0f);  // greedy rows ignore the temperature
    }
}

static void test_top_k_keeps_ties(void) {
    const int V = 8;
    float logits[8] = {0, 2, 1, 2, 2, 1, 0, 1};
    SampleParams p = {.temperature = 1.0f, .repetition_penalty = 1.0f, .top_k = 4, .top_p = 1.0, .do_sample = 1};
    float s[8];
    int32_t id;
    double u = 0.999999;
    be_cpu.sample_logits(&be_cpu, &id, NULL, NULL, s, logits, &p, &u, NULL, NULL, 0, 1, V);
    // 4th largest is 1: every 1 and 2 stays
    for (int i = 0; i < V; i++) EXPECT((s[i] == -INFINITY) == (logits[i] == 0));
    EXPECT(id == 7);  // the last kept token in index order takes u -> 1
    p.top_k = 3;
    be_ref.sample_logits(&be_ref, &id, NULL, NULL, s, logits, &p, &u, NULL, NULL, 0, 1, V);
    for (int i = 0; i < V; i++) EXPECT((s[i] == -INFINITY) == (logits[i] != 2));
    p.top_k = 100;  // k > V: nothing removed
    be_ref.sample_logits(&be_ref, &id, NULL, NULL, s, logits, &p, &u, NULL, NULL, 0, 1, V);
    for (int i = 0; i < V; i++) EXPECT(s[i] == logits[i]);
}

static void test_top_p_boundary_ties(void) {
    // four equal tokens: top_p 0.5 keeps the two lowest indices (mass 0.5 reached with the
    // second); top_p 0.5000001 needs a third.
    float logits[6] = {-INFINITY, 1, 1, -INFINITY, 1, 1};
    SampleParams p = {.temperature = 1.0f, .repetition_penalty = 1.0f, .top_p = 0.5, .do_sample = 1};
    float s[6];
    int32_t id;
    double u = 0.0;
    Backend *bes[2] = {&be_ref, &be_cpu};
    for (int k = 0; k < 2; k++) {
        p.top_p = 0.5;
        bes[k]->sample_logits(bes[k], &id, NULL, NULL, s, logits, &p, &u, NULL, NULL, 0, 1, 6);
        EXPECT(s[1] == 1 && s[2] == 1 && s[4] == -INFINITY && s[5] == -INFINITY && s[0] == -INFINITY);
        p.top_p = 0.51;
        bes[k]->sample_logits(bes[k], &id, NULL, NULL, s, logits, &p, &u, NULL, NULL, 0, 1, 6);
        EXPECT(s[1] == 1 && s[2] == 1 && s[4] == 1 && s[5] == -INFINITY);
        p.top_p = 0.0;  // only the first maximum
        bes[k]->sample_logits(bes[k], &id, NULL, NULL, s, logits, &p, &u, NULL, NULL, 0, 1, 6);
        EXPECT(s[1] == 1 && s[2] == -INFINITY && s[4] == -INFINITY && id == 1);
    }
}

static void test_seen_update(void) {
    const int B = 2, T = 4, V = 5;
    uint8_t seen[10] = {0};
    int32_t ids[8] = {1, 1, 4, -100, 0, 5, 2, 2};
    be_cpu.sample_seen_update(&be_cpu, seen, ids, B, T, V);
    uint8_t want[10] = {0, 1, 0, 0, 1, 1, 0, 1, 0, 0};
    EXPECT(memcmp(seen, want, sizeof want) == 0);
    memset(seen, 0, sizeof seen);
    be_ref.sample_seen_update(&be_ref, seen, ids, B, T, V);
    EXPECT(memcmp(seen, want, sizeof want) == 0);
}

// ---------------------------------------------------------------------------------------------
// Chi-square of draws against the filtered distribution.

// Regularised upper incomplete gamma Q(a, x): series for x < a + 1, continued fraction otherwise.
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    double lg = lgamma(a);
    if (x < a + 1) {
        double sum = 1.0 / a, term = sum;
        for (int n = 1; n < 1000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - lg);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;  // modified Lentz
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

// Draws N tokens from one row (B copies per call, keyed uniforms) and returns the chi-square
// p-value against q (V); *outside counts draws of tokens with q = 0.
static double draw_pvalue(Backend *be, const float *row, const SampleParams *p, const double *q, int V, int N,
                          long *outside) {
    const int B = 1000;
    float *logits = malloc((size_t)B * V * 4), *s = malloc((size_t)B * V * 4);
    SampleParams *params = malloc(B * sizeof *params);
    int32_t *ids = malloc(B * 4);
    double *u = malloc(B * 8);
    long *count = calloc(V, sizeof(long));
    for (int b = 0; b < B; b++) memcpy(logits + (size_t)b * V, row, (size_t)V * 4), params[b] = *p;
    for (int call = 0; call < N / B; call++) {
        for (int b = 0; b < B; b++) u[b] = rng_keyed_uniform(7, (uint32_t)b, 0, (uint32_t)call, 0);
        be->sample_logits(be, ids, NULL, NULL, s, logits, params, u, NULL, NULL, 0, B, V);
        for (int b = 0; b < B; b++) count[ids[b]]++;
    }
    double chi = 0;
    int df = -1;
    *outside = 0;
    for (int i = 0; i < V; i++) {
        if (q[i] == 0) {
            *outside += count[i];
            continue;
        }
        double e = q[i] * (N / B * B);
        chi += (count[i] - e) * (count[i] - e) / e;
        df++;
    }
    free(logits), free(s), free(params), free(ids), free(u), free(count);
    return df > 0 ? gamma_q(df / 2.0, chi / 2.0) : 1.0;
}

static void test_chi_square_draws(void) {
    EXPECT(fabs(gamma_q(1.0, 2.0) - exp(-2.0)) < 1e-12);              // Q(1,x) = e^-x
    EXPECT(fabs(gamma_q(5.0, 3.0) - 0.8152632445237722) < 1e-9);      // chi2 sf(6, df=10)
    EXPECT(fabs(gamma_q(2.5, 20.0) - 1.493367900050396e-07) < 1e-13);  // chi2 sf(40, df=5)
    const int V = 48, N = 100000;
    float row[48];
    Rng r;
    rng_init(&r, 5, 0);
    for (int i = 0; i < V; i++) row[i] = (float)(0.5 * floor(2.0 * rng_normal(&r)));  // ties
    SampleParams p = {.temperature = 0.8f, .repetition_penalty = 1.0f, .min_p = 0.03f, .top_k = 30, .top_p = 0.9, .do_sample = 1};
    float s[48];
    reference_process(s, row, &p, NULL, NULL, 0, V);
    double q[48], z = 0, m = fmax_row(s, V);
    for (int i = 0; i < V; i++) z += q[i] = s[i] == -INFINITY ? 0 : exp((double)s[i] - m);
    int kept = 0;
    for (int i = 0; i < V; i++) q[i] /= z, kept += q[i] > 0;
    EXPECT_MSG(kept >= 5 && kept < 30, "the test row should keep a few tokens, kept %d", kept);
    Backend *bes[2] = {&be_ref, &be_cpu};
    for (int k = 0; k < 2; k++) {
        long outside;
        double pv = draw_pvalue(bes[k], row, &p, q, V, N, &outside);
        EXPECT_MSG(pv > 1e-3 && outside == 0, "%s: p-value %g, %ld draws outside the kept set", bes[k]->name, pv,
                   outside);
    }
    // The same statistic rejects the unfiltered distribution (the test has power).
    double q_raw[48];
    z = 0;
    for (int i = 0; i < V; i++) z += q_raw[i] = exp((double)(row[i] / p.temperature) - m);
    for (int i = 0; i < V; i++) q_raw[i] /= z;
    SampleParams p_plain = p;
    p_plain.top_k = 0, p_plain.top_p = 1.0, p_plain.min_p = 0;
    long outside;
    double pv_right = draw_pvalue(&be_cpu, row, &p_plain, q_raw, V, N, &outside);
    double pv_wrong = draw_pvalue(&be_cpu, row, &p, q_raw, V, N, &outside);
    EXPECT_MSG(pv_right > 1e-3 && pv_wrong < 1e-3, "plain sampling p %g, filtered vs plain p %g", pv_right, pv_wrong);
}

int main(void) {
    be_ref.name = "ref", be_cpu.name = "cpu";
    backend_ref_install_sampling(&be_ref);
    backend_cpu_install_sampling(&be_cpu);
    RUN(test_seen_update);
    RUN(test_greedy_ties_first_index);
    RUN(test_top_k_keeps_ties);
    RUN(test_top_p_boundary_ties);
    RUN(test_filters_match_sorted_reference);
    RUN(test_full_vocab_rows);
    RUN(test_chi_square_draws);
    TEST_MAIN_END();
}
