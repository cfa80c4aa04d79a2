// gemv_bench.c: the decode-sized linear layer (N <= 8 input rows) on the cpu backend, as GB/s of
// weight bytes streamed, beside the machine's read bandwidth measured in the same process.
//   build/bench/gemv_bench [threads=all] [dtypes=f32,bf16,q8_0] [rows=1,8] [reps=5]
// One "step" is what a Qwen3-0.6B decode step multiplies: q, k, v, o, gate, up, down for 8
// layers (120M weights: far larger than any cache) and the LM head 151936 x 1024 alone. Each
// line: dtype, rows, the part, best time of the repeats, GB/s of weights and its share of the
// read bandwidth.
#include "backend/backend.h"
#include "core/alloc.h"
#include "core/dtype.h"
#include "bench_weights.h"
#include "read_bw.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// With one thread the clock is the process's CPU time, so time the machine gives to other work
// does not count (the bench is meant to run beside other jobs); with more, wall time.
static int cpu_clock;
static double clk(void) {
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


typedef struct {
    int oc, c;
} Shape;

// q, k, v, o, gate, up, down of one Qwen3-0.6B layer (hidden 1024, 16/8 heads of 128, MLP 3072)
static const Shape LAYER[] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048},
                              {3072, 1024}, {3072, 1024}, {1024, 3072}};
enum { NSHAPE = sizeof LAYER / sizeof LAYER[0], LAYERS = 8, VOCAB = 151936, HIDDEN = 1024 };

static BenchRng rng = BENCH_RNG_INIT;
static float rnd(void) { return bench_rnd(&rng); }
static void *make_weight(DType dt, int oc, int c) { return bench_weight(&rng, dt, oc, c); }

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    const char *dtypes = argc > 2 ? argv[2] : "f32,bf16,q8_0";
    const char *rows = argc > 3 ? argv[3] : "1,8";
    int reps = argc > 4 ? atoi(argv[4]) : 5;
    Backend *be;
    Err e;
    if (backend_create("cpu", threads, &be, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    threads = be->threads;
    double bw = read_bandwidth(threads);
    cpu_clock = threads == 1;
    printf("threads %d, read bandwidth %.2f GB/s, timed by %s\n", threads, bw, cpu_clock ? "CPU time" : "wall time");
    float *x = xaligned(8 * 3072 * sizeof(float)), *out = xaligned((size_t)8 * VOCAB * sizeof(float));
    for (int i = 0; i < 8 * 3072; i++) x[i] = rnd();
    for (const char *d = dtypes; *d;) {
        const char *end = strchr(d, ',');
        size_t len = end ? (size_t)(end - d) : strlen(d);
        DType dt = !strncmp(d, "f32", len) ? DT_F32 : !strncmp(d, "bf16", len) ? DT_BF16 : DT_Q8_0;
        void *w[LAYERS][NSHAPE];
        size_t layer_bytes = 0;
        for (int l = 0; l < LAYERS; l++)
            for (int s = 0; s < NSHAPE; s++) {
                w[l][s] = make_weight(dt, LAYER[s].oc, LAYER[s].c);
                layer_bytes += dtype_bytes(dt, (size_t)LAYER[s].oc * LAYER[s].c);
            }
        void *head = make_weight(dt, VOCAB, HIDDEN);
        size_t head_bytes = dtype_bytes(dt, (size_t)VOCAB * HIDDEN);
        for (const char *r = rows; *r;) {
            int N = atoi(r);
            double best_l = 1e30, best_h = 1e30;
            for (int rep = 0; rep <= reps; rep++) {  // the first pass warms up
                double t0 = clk();
                for (int l = 0; l < LAYERS; l++)
                    for (int s = 0; s < NSHAPE; s++)
                        be->matmul_forward(be, out, x, w[l][s], dt, NULL, N, LAYER[s].c, LAYER[s].oc);
                double t1 = clk();
                be->matmul_forward(be, out, x, head, dt, NULL, N, HIDDEN, VOCAB);
                double t2 = clk();
                if (rep > 0 && t1 - t0 < best_l) best_l = t1 - t0;
                if (rep > 0 && t2 - t1 < best_h) best_h = t2 - t1;
            }
            // in cache: the first 128 rows of the first layer's gate (bf16 256 KiB, fp32 512 KiB:
            // inside L2) again and again, so the kernel's arithmetic, not memory, bounds it
            double best_c = 1e30;
            size_t cache_bytes = dtype_bytes(dt, (size_t)128 * HIDDEN);
            for (int rep = 0; rep <= reps; rep++) {
                double t0 = clk();
                for (int k = 0; k < 200; k++) be->matmul_forward(be, out, x, w[0][4], dt, NULL, N, HIDDEN, 128);
                double t = (clk() - t0) / 200;
                if (rep > 0 && t < best_c) best_c = t;
            }
            double gl = layer_bytes / best_l * 1e-9, gh = head_bytes / best_h * 1e-9;
            printf("%-5.*s N=%d  layers %8.2f ms %7.2f GB/s (%3.0f%%)   lm_head %8.2f ms %7.2f GB/s (%3.0f%%)   in cache %7.2f GB/s\n",
                   (int)len, d, N, best_l * 1e3, gl, 100 * gl / bw, best_h * 1e3, gh, 100 * gh / bw, cache_bytes / best_c * 1e-9);
            fflush(stdout);
            const char *comma = strchr(r, ',');
            if (!comma) break;
            r = comma + 1;
        }
        for (int l = 0; l < LAYERS; l++)
            for (int s = 0; s < NSHAPE; s++) free(w[l][s]);
        free(head);
        d = end ? end + 1 : d + len;
    }
    free(x);
    free(out);
    backend_destroy(be);
    return 0;
}
