// read_bw.h: the machine's read bandwidth as the benches measure it (bench/gen_bench.c,
// bench/gemv_bench.c): every thread sums its part of a 1 GiB buffer with vector adds, best of 5.
#ifndef STILL_BENCH_READ_BW_H
#define STILL_BENCH_READ_BW_H

#include "core/alloc.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

static inline double bw_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Read bandwidth (GB/s): every thread sums its part of a 1 GiB buffer, best of 5 passes.
static inline double read_bandwidth(int threads) {
    size_t n = (size_t)1 << 28;  // floats
    float *buf = xaligned(n * sizeof(float));
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    double best = 1e30, sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bw_now(), total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
#ifdef __AVX2__
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            size_t i = i0;
            for (; i + 32 <= i1; i += 32) {
                a0 = _mm256_add_ps(a0, _mm256_load_ps(buf + i));
                a1 = _mm256_add_ps(a1, _mm256_load_ps(buf + i + 8));
                a2 = _mm256_add_ps(a2, _mm256_load_ps(buf + i + 16));
                a3 = _mm256_add_ps(a3, _mm256_load_ps(buf + i + 24));
            }
            float lanes[8];
            _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (int k = 0; k < 8; k++) total += lanes[k];
            for (; i < i1; i++) total += buf[i];
#else
            for (size_t i = i0; i < i1; i++) total += buf[i];
#endif
        }
        best = fmin(best, bw_now() - t0);
        sink += total;
    }
    free(buf);
    if (sink == 42) printf(" ");
    return (double)n * sizeof(float) / best / 1e9;
}

#endif
