// st_diff.c: compare two safetensors files tensor by tensor (same names, shapes, F32 data).
//   st_diff [--norm] A.safetensors B.safetensors [TOL]
// Prints the largest absolute difference (and the tensor holding it) on stdout; exits 0 when it
// is <= TOL (default 0: identical values), 1 when larger, 2 when the files cannot be compared.
// --norm: the largest norm-wise relative difference of a tensor, |A - B| / |A|, instead.
// Test helper for runs that must end with the same weights (data-parallel equivalence). Weights
// after AdamW steps compare norm-wise: where a gradient is near adam_epsilon its update is
// lr * g / (|g| + eps), so a rounding-level difference of g (another summation order) moves that
// one element by up to ~lr, while a wrong batch or loss scale moves every element.
#include "model/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int norm = argc > 1 && !strcmp(argv[1], "--norm");
    argv += norm, argc -= norm;
    if (argc < 3) {
        fprintf(stderr, "usage: st_diff [--norm] A.safetensors B.safetensors [TOL]\n");
        return 2;
    }
    double tol = argc > 3 ? atof(argv[3]) : 0.0;
    Err e = {0};
    StSet a, b;
    if (st_open(argv[1], &a, &e) != ST_OK || st_open(argv[2], &b, &e) != ST_OK) {
        fprintf(stderr, "st_diff: %s\n", e.msg);
        return 2;
    }
    int rc = 0;
    double worst = 0;
    const char *where = "";
    if (a.n_tensors != b.n_tensors) {
        fprintf(stderr, "st_diff: %d tensors vs %d\n", a.n_tensors, b.n_tensors);
        rc = 2;
    }
    for (int i = 0; i < a.n_tensors && rc == 0; i++) {
        const StTensor *x = &a.tensors[i], *y = st_find(&b, x->name);
        if (!y || y->numel != x->numel || x->dtype != DT_F32 || y->dtype != DT_F32) {
            fprintf(stderr, "st_diff: %s: missing in %s, or not F32 of the same size\n", x->name, argv[2]);
            rc = 2;
            break;
        }
        const float *p = x->data, *q = y->data;
        double dd = 0, pp = 0;
        for (size_t k = 0; k < x->numel; k++) {
            double dlt = fabs((double)p[k] - (double)q[k]);
            dd += dlt * dlt, pp += (double)p[k] * p[k];
            if (!norm && !(dlt <= worst)) {  // NaN counts as the worst
                worst = isnan(dlt) ? INFINITY : dlt;
                where = x->name;
            }
        }
        double rel = sqrt(dd) / fmax(sqrt(pp), 1e-30);
        if (norm && !(rel <= worst)) {
            worst = isnan(rel) ? INFINITY : rel;
            where = x->name;
        }
    }
    if (rc == 0) {
        printf("%s %.3g (%s)\n", norm ? "max_norm_rel_diff" : "max_abs_diff", worst, where);
        rc = worst <= tol ? 0 : 1;
    }
    st_close(&a);
    st_close(&b);
    return rc;
}
