// ops_util.h: helpers shared by the op tests: seeded random inputs, double dot products and a
// central finite-difference gradient check.
#ifndef STILL_TESTS_OPS_UTIL_H
#define STILL_TESTS_OPS_UTIL_H

#include "test.h"

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/rng.h"

static Rng ops_rng;

static inline void fill_normal(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(&ops_rng);
}

static inline void fill_uniform(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&ops_rng);
}

static inline float *new_normal(size_t n, float scale) {
    float *x = xmalloc(n * sizeof *x);
    fill_normal(x, n, scale);
    return x;
}

static inline float *new_copy(const float *src, size_t n) {
    float *x = xmalloc(n * sizeof *x);
    memcpy(x, src, n * sizeof *x);
    return x;
}

static inline double dot_d(const float *a, const float *b, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

// ana (n) = after - before: what a backward op accumulated into a gradient buffer.
static inline float *grad_delta(const float *after, const float *before, size_t n) {
    float *d = xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = (float)((double)after[i] - before[i]);
    return d;
}

typedef double (*LossFn)(void *ctx);

// Central differences of loss() with respect to x[i] for up to max_coords coordinates (all of
// them when n is small, else an even spread), against the analytic gradient ana. The step is
// measured after rounding to fp32 so the difference quotient uses the step actually taken.
// An error counts when |num - ana| > tol * max(|ana|, |num|, floor * max|ana|): the floor keeps
// near-zero components from demanding more relative accuracy than fp32 outputs can give.
// Returns the worst error ratio (error / allowed); <= 1 passes.
static inline double gradcheck(const char *what, LossFn loss, void *ctx, float *x, size_t n, const float *ana,
                               size_t max_coords, double eps, double tol, double floor_) {
    double gmax = 0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(ana[i]));
    size_t stride = n <= max_coords ? 1 : n / max_coords;
    double worst = 0;
    size_t worst_i = 0;
    double worst_num = 0;
    for (size_t i = 0; i < n; i += stride) {
        float x0 = x[i];
        float xp = (float)(x0 + eps), xm = (float)(x0 - eps);
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = x0;
        double num = (lp - lm) / ((double)xp - xm);
        double allowed = tol * fmax(fmax(fabs(ana[i]), fabs(num)), floor_ * gmax);
        if (allowed == 0) allowed = 1e-30;
        double ratio = fabs(num - ana[i]) / allowed;
        if (ratio > worst) worst = ratio, worst_i = i, worst_num = num;
    }
    if (getenv("OPS_VERBOSE")) printf("  %-20s worst error / allowed = %.3g\n", what, worst);
    EXPECT_MSG(worst <= 1.0, "%s: d/dx[%zu] analytic %.7g vs numeric %.7g (max |grad| %.3g, tol %.1g)", what,
               worst_i, ana[worst_i], worst_num, gmax, tol);
    return worst;
}

#endif
