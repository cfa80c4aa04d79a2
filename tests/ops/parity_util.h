// parity_util.h: device buffers with guard words and the norm-wise comparison that hold a
// backend (X) to the reference backend (R) in the parity tests.
#ifndef STILL_TESTS_PARITY_UTIL_H
#define STILL_TESTS_PARITY_UTIL_H

#include "ops_util.h"

static Backend *R, *X;

#define GUARD_WORDS 16

// Run a test on inputs from a random stream of its own, keyed by its name: the same inputs in
// every backend run, whatever ran before (one shared stream gave the bf16 run other inputs than
// the fp32 runs, and every run other inputs on a machine with other backends, so a tolerance
// checked on one machine held for other data on another).
static void run_own_stream(const char *name, void (*fn)(void)) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the name
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    rng_init(&ops_rng, 4321, h);
    test_run(name, fn);
}
#define RUN_OWN(fn) run_own_stream(#fn, fn)

// ---------------------------------------------------------------- device buffers with guards
// Guard word i after the buffer at dev: a signalling NaN (quiet bit clear) whose payload depends
// on the buffer, so neither arithmetic (which would quiet it) nor a copy of a neighbour's guard
// can write it back unchanged.
static uint32_t guard_word(const void *dev, int i) {
    return 0x7f800000u | 0x100000u | (uint32_t)((((uintptr_t)dev >> 6) * 31u + (uint32_t)i * 977u) & 0xfffffu);
}

static void put_guard(Backend *be, void *dev, size_t bytes) {
    uint32_t g[GUARD_WORDS];
    for (int i = 0; i < GUARD_WORDS; i++) g[i] = guard_word(dev, i);
    be->upload(be, (char *)dev + bytes, g, sizeof g);
}

// A device copy of host data (bytes), followed by guard words.
static void *dev_from(const void *host, size_t bytes) {
    void *d = X->alloc(X, bytes + GUARD_WORDS * 4);
    if (bytes) X->upload(X, d, host, bytes);
    put_guard(X, d, bytes);
    return d;
}

// A device buffer of n floats filled with NaN (a forward output), followed by guard words.
static float *dev_nan(size_t n) {
    uint32_t *h = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) h[i] = 0x7fc00001u;
    float *d = dev_from(h, n * 4);
    free(h);
    return d;
}

// Download n floats and check the guard words after them.
static float *dev_fetch(const char *what, const void *dev, size_t n) {
    float *h = xmalloc(n * 4 + GUARD_WORDS * 4);
    X->download(X, h, dev, n * 4 + GUARD_WORDS * 4);
    uint32_t g[GUARD_WORDS];
    memcpy(g, h + n, sizeof g);
    int ok = 1;
    for (int i = 0; i < GUARD_WORDS; i++) ok &= g[i] == guard_word(dev, i);
    EXPECT_MSG(ok, "%s: %s wrote past the end of its buffer (%zu floats)", what, X->name, n);
    return h;
}

// got (device, n floats) against want (host): norm-wise relative error <= tol, no NaN.
static void expect_close(const char *what, const void *got_dev, const float *want, size_t n, double tol) {
    float *got = dev_fetch(what, got_dev, n);
    double maxref = 0, maxerr = 0;
    size_t worst = 0, nan_at = (size_t)-1;
    for (size_t i = 0; i < n; i++) maxref = fmax(maxref, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i])) {
            if (nan_at == (size_t)-1) nan_at = i;
            continue;
        }
        double e = fabs((double)got[i] - want[i]);
        if (e > maxerr) maxerr = e, worst = i;
    }
    double rel = maxref > 0 ? maxerr / maxref : maxerr;
    if (getenv("OPS_VERBOSE")) printf("  %-34s rel err %.2e (tol %.0e)\n", what, rel, tol);
    EXPECT_MSG(nan_at == (size_t)-1, "%s: %s gives %g at [%zu], ref %g", what, X->name, got[nan_at == (size_t)-1 ? 0 : nan_at],
               nan_at, want[nan_at == (size_t)-1 ? 0 : nan_at]);
    EXPECT_MSG(rel <= tol, "%s: %s rel err %.3g > %.0g at [%zu]: %.8g vs ref %.8g", what, X->name, rel, tol, worst,
               got[worst], want[worst]);
    free(got);
}

// max |z_v| over one row's logits z = (h W^T) / tau, in double.
static double row_logit_scale(const float *h, const float *W, int C, int V, double tau) {
    double m = 0;
    for (int v = 0; v < V; v++) m = fmax(m, fabs(dot_d(h, W + (size_t)v * C, (size_t)C)));
    return m / tau;
}

// Entropies got (device, N) against want, rows of logits (h W^T) / tau: a row's entropy
// H = logsumexp(z) - E_p[z] is a difference of terms of its logits' size, so its rounding error
// is relative to max_v |z_v|, not to H (a peaked row has H << |z|; the 520-wide cases reach
// |z| ~ 500 at H ~ 0): each row held to tol of max(its max |z|, max |H|), NaN where want has none.
static void expect_close_entropy(const char *what, const void *got_dev, const float *want, const float *h,
                                 const float *W, int N, int C, int V, double tau, double tol) {
    float *got = dev_fetch(what, got_dev, (size_t)N);
    double hmax = 0, worst = 0;
    int at = 0;
    for (int n = 0; n < N; n++) hmax = fmax(hmax, fabs(want[n]));
    for (int n = 0; n < N; n++) {
        double scale = fmax(hmax, row_logit_scale(h + (size_t)n * C, W, C, V, tau));
        double err = isnan(got[n]) != isnan(want[n]) ? INFINITY : fabs((double)got[n] - want[n]) / fmax(scale, 1e-30);
        if (!(err <= worst)) worst = err, at = n;
    }
    if (getenv("OPS_VERBOSE")) printf("  %-34s rel err %.2e of the row's logit size (tol %.0e)\n", what, worst, tol);
    EXPECT_MSG(worst <= tol, "%s: %s row %d entropy %.8g vs ref %.8g: error %.3g of the row's logit size > %.0g", what,
               X->name, at, got[at], want[at], worst, tol);
    free(got);
}

static uint16_t *to_bf16(const float *x, size_t n) {
    uint16_t *b = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) b[i] = f32_to_bf16(x[i]);
    return b;
}

// x (n) as Q8_0 blocks (n a multiple of 32); NULL when it is not.
static inline BlockQ8_0 *to_q8_0(const float *x, size_t n) {
    if (n % Q8_0_BLOCK) return NULL;
    BlockQ8_0 *b = xmalloc(dtype_bytes(DT_Q8_0, n));
    q8_0_quantize(b, x, n);
    return b;
}

#endif
