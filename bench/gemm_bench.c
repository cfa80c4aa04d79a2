// gemm_bench.c: the prefill-sized linear layer (N input rows, default 128) on the cpu backend,
// one matmul at a time at the Qwen3-0.6B projection shapes, fp32 weights on sgemm beside 16-bit
// / Q8_0 weights on the old path (converted tiles to sgemm: the backend capped at the scalar
// kernels) and on the AVX2 GEMM of cpu_gemm_avx2.c.
//   build/bench/gemm_bench [threads=1] [reps=20] [N=128] [dtypes=bf16]
// Each line: shape, variant, the minimum over the repeats of its user-space cycles (one thread:
// perf_event_open on this thread, so time given to other work does not count) and of its time
// (one thread: this thread's CPU time; more: wall time; the variants take turns in each round), GFLOP/s from that time (2 N C OC flops),
// flops per cycle, and its speed as a multiple of fp32 sgemm's (cycles with one thread where the
// machine has a cycle counter, time otherwise). Where perf_event_open is refused (a VM without
// hardware counters) cycles are left out and thread CPU time is the measure.
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "core/alloc.h"
#include "core/dtype.h"
#include "bench_weights.h"

#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int one_thread;
static double clk(void) {
    struct timespec ts;
    clock_gettime(one_thread ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A user-space cycle counter on this thread, or -1 where the kernel refuses one.
static int cycles_open(void) {
    struct perf_event_attr pa;
    memset(&pa, 0, sizeof pa);
    pa.size = sizeof pa;
    pa.type = PERF_TYPE_HARDWARE;
    pa.config = PERF_COUNT_HW_CPU_CYCLES;
    pa.exclude_kernel = 1;
    pa.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0);
}
static double cycles_read(int fd) {
    long long v = 0;
    if (fd < 0 || read(fd, &v, sizeof v) != sizeof v) return 0;
    return (double)v;
}

typedef struct {
    const char *name;
    int c, oc;
} Shape;

// one Qwen3-0.6B layer's projections (hidden 1024, 16/8 heads of 128, MLP 3072), gate and up as one
static const Shape SHAPES[] = {{"q", 1024, 2048}, {"kv", 1024, 1024}, {"o", 2048, 1024},
                               {"gate_up", 1024, 6144}, {"down", 3072, 1024}};
enum { NSHAPE = sizeof SHAPES / sizeof SHAPES[0] };

static BenchRng rng = BENCH_RNG_INIT;
static float rnd(void) { return bench_rnd(&rng); }
static void *make_weight(DType dt, int oc, int c) { return bench_weight(&rng, dt, oc, c); }

// One variant: weights, their dtype, the kernels' instruction set; its best cycles and seconds.
typedef struct {
    char name[24];
    void *w;
    DType dt;
    CpuIsa isa;
    double cyc, sec;
} Variant;

// reps rounds (after a warm-up round), each one call of every variant in turn, so that the
// variants meet the same load on a shared machine; each keeps its best.
static void time_all(Backend *be, int fd, float *out, const float *x, Variant *v, int nv, int N, const Shape *s,
                     int reps) {
    for (int i = 0; i < nv; i++) v[i].cyc = v[i].sec = 1e30;
    for (int r = 0; r <= reps; r++)
        for (int i = 0; i < nv; i++) {
            cpu_set_isa(be, v[i].isa);
            double c0 = cycles_read(fd), t0 = clk();
            be->matmul_forward(be, out, x, v[i].w, v[i].dt, NULL, N, s->c, s->oc);
            double t = clk() - t0, c = cycles_read(fd) - c0;
            if (r == 0) continue;
            if (c < v[i].cyc) v[i].cyc = c;
            if (t < v[i].sec) v[i].sec = t;
        }
}

// one result: cycles and flops per cycle only where they were counted
static void line(int fd, const Shape *s, const char *name, double cyc, double sec, double flops, double ratio) {
    printf("%-8s C %4d OC %4d  %-11s", s->name, s->c, s->oc, name);
    if (fd >= 0) printf(" %12.0f cycles %5.2f flop/cycle", cyc, flops / cyc);
    printf(" %8.3f ms %7.2f GFLOP/s  speed %.2fx of f32\n", sec * 1e3, flops / sec * 1e-9, ratio);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 20, N = argc > 3 ? atoi(argv[3]) : 128;
    const char *dtypes = argc > 4 ? argv[4] : "bf16";
    Backend *be;
    Err e;
    if (backend_create("cpu", threads, &be, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    threads = be->threads;
    one_thread = threads == 1;
    int fd = one_thread ? cycles_open() : -1;
    CpuIsa best = cpu_isa_best();
    printf("threads %d, N %d, best of %d, timed by %s, cycles %s, kernels %s\n", threads, N, reps,
           one_thread ? "thread CPU time" : "wall time", fd >= 0 ? "perf_event cycles:u" : "not counted (no hardware counter)",
           cpu_isa_name(best));
    float *x = xaligned((size_t)N * 3072 * sizeof(float)), *out = xaligned((size_t)N * 6144 * sizeof(float));
    for (size_t i = 0; i < (size_t)N * 3072; i++) x[i] = rnd();
    for (int si = 0; si < NSHAPE; si++) {
        const Shape *s = &SHAPES[si];
        double flops = 2.0 * N * s->c * s->oc;
        Variant v[1 + 2 * 3];
        int nv = 0;
        v[nv++] = (Variant){.name = "f32 sgemm", .w = make_weight(DT_F32, s->oc, s->c), .dt = DT_F32, .isa = best};
        for (const char *d = dtypes; *d && nv + 2 <= (int)(sizeof v / sizeof *v);) {
            const char *end = strchr(d, ',');
            int len = end ? (int)(end - d) : (int)strlen(d);
            DType dt = !strncmp(d, "bf16", len) ? DT_BF16 : !strncmp(d, "f16", len) ? DT_F16 : DT_Q8_0;
            void *w = make_weight(dt, s->oc, s->c);
            for (int k = 0; k < 2; k++) {  // the old tiles path (scalar kernels: no GEMM), then the GEMM
                v[nv] = (Variant){.w = w, .dt = dt, .isa = k ? best : CPU_ISA_SCALAR};
                snprintf(v[nv].name, sizeof v[nv].name, "%.*s %s", len, d, k ? "gemm" : "tiles");
                nv++;
            }
            d = end ? end + 1 : d + len;
        }
        time_all(be, fd, out, x, v, nv, N, s, reps);
        for (int i = 0; i < nv; i++)
            line(fd, s, v[i].name, v[i].cyc, v[i].sec, flops, fd >= 0 ? v[0].cyc / v[i].cyc : v[0].sec / v[i].sec);
        free(v[0].w);
        for (int i = 1; i < nv; i += 2) free(v[i].w);
        fflush(stdout);
    }
    if (fd >= 0) close(fd);
    free(x), free(out);
    backend_destroy(be);
    return 0;
}
