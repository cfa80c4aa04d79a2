// train_metrics.h: a run's metrics.jsonl against a torch reference's per-step metrics (the
// preference trainers' parity tests). Header-only helpers for test programs.
#ifndef STILL_TEST_TRAIN_METRICS_H
#define STILL_TEST_TRAIN_METRICS_H

#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

// The step lines of dir/metrics.jsonl (at most 16) -> *n lines, each to cJSON_Delete.
static cJSON **train_metrics_read(const char *dir, int *n) {
    char *p = path_join(dir, "metrics.jsonl"), *text;
    size_t len;
    Err e = {0};
    *n = 0;
    cJSON **out = xcalloc(16, sizeof(cJSON *));
    if (file_read_all(p, &text, &len, &e) != ST_OK) {
        free(p);
        return out;
    }
    for (char *s = strtok(text, "\n"); s && *n < 16; s = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(s);
        if (o && cJSON_GetObjectItem(o, "step")) out[(*n)++] = o;
        else cJSON_Delete(o);
    }
    free(text), free(p);
    return out;
}

static void train_metrics_free(cJSON **v, int n) {
    for (int i = 0; i < n; i++) cJSON_Delete(v[i]);
    free(v);
}

// beta * |logps| of the reference step: the size a reward's fp32 error has (a reward is
// beta (logp - ref), a difference of two sums of token log-probs); |logps| for KTO's kl.
static double train_metrics_reward_scale(const cJSON *ws, const char *key, double beta) {
    const cJSON *c = cJSON_GetObjectItem(ws, "logps/chosen"), *r = cJSON_GetObjectItem(ws, "logps/rejected");
    double sc = c ? beta * fabs(c->valuedouble) : 0, sr = r ? beta * fabs(r->valuedouble) : 0;
    if (!strcmp(key, "rewards/chosen")) return sc;
    if (!strcmp(key, "rewards/rejected")) return sr;
    if (!strcmp(key, "rewards/margins")) return fmax(sc, sr);
    if (!strcmp(key, "kl")) return fmax(sc, sr) / beta;  // KTO's: a mean of log-prob sum differences
    return 0;
}

// Every key of every reference step (an array of objects) held to |got - want| <= tol *
// max(|want|, floor, and for the rewards beta |logps|); the run's line must have it.
static void train_metrics_compare(const char *what, cJSON **got, int n, const cJSON *want, double tol, double floor,
                                  double beta) {
    EXPECT_MSG(n == cJSON_GetArraySize(want), "%s: %d logged steps, %d expected", what, n, cJSON_GetArraySize(want));
    for (int s = 0; s < n && s < cJSON_GetArraySize(want); s++) {
        const cJSON *ws = cJSON_GetArrayItem(want, s);
        for (const cJSON *w = ws->child; w; w = w->next) {
            const cJSON *g = cJSON_GetObjectItem(got[s], w->string);
            EXPECT_MSG(cJSON_IsNumber(g), "%s step %d: no %s in metrics.jsonl", what, s + 1, w->string);
            if (!cJSON_IsNumber(g)) continue;
            double x = w->valuedouble, scale = fmax(fmax(fabs(x), floor), train_metrics_reward_scale(ws, w->string, beta));
            EXPECT_MSG(fabs(g->valuedouble - x) <= tol * scale, "%s step %d %s: %.9g vs torch %.9g", what, s + 1,
                       w->string, g->valuedouble, x);
        }
    }
}

#endif
