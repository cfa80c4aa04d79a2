// cpu_gemv.c: the linear layer for a few input rows (decode: N = batch <= CPU_GEMV_MAX_ROWS).
// Decoding one token is memory-bound: every weight is used N times, so the kernel's job is to
// stream the weight matrix from memory exactly once, at full bandwidth, and do the N
// multiply-adds on the way. Each thread owns a contiguous range of output rows; the kernels
// (cpu_gemv_kern.h, built for AVX-512 and for AVX2) walk it a block of rows at a time, bf16 and
// Q8_0 weights widened to fp32 in registers, never written back. The instruction set is chosen
// at run time (CpuCtx.isa): the best the machine has, capped by STILL_CPU_ISA or cpu_set_isa,
// so one binary runs everywhere and tests hold every path to ref on any machine. Without AVX2
// (or off x86-64) plain loops do the same single pass.
#include "cpu.h"

#include <omp.h>

CpuIsa cpu_isa_best(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return CPU_ISA_AVX512;
    if (avx2) return CPU_ISA_AVX2;
#endif
    return CPU_ISA_SCALAR;
}

static const char *const ISA_NAMES[] = {"scalar", "avx2", "avx512"};

const char *cpu_isa_name(CpuIsa isa) { return ISA_NAMES[isa]; }

int cpu_isa_parse(const char *name, CpuIsa *isa) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, ISA_NAMES[i])) {
            *isa = (CpuIsa)i;
            return 1;
        }
    return 0;
}

CpuIsa cpu_set_isa(Backend *be, CpuIsa want) {
    CpuIsa best = cpu_isa_best();
    cpu_ctx(be)->isa = want < best ? want : best;
    return cpu_ctx(be)->isa;
}

// No AVX2: plain loops (still one pass over the weights).
static void gemv_rows_scalar(const CpuGemvArgs *a, int o0, int o1) {
    int N = a->N, C = a->C;
    for (int o = o0; o < o1; o++) {
        float acc[CPU_GEMV_MAX_ROWS] = {0};
        if (a->wdt == DT_Q8_0) {
            int nb = C / Q8_0_BLOCK;
            for (int b = 0; b < nb; b++) {
                const BlockQ8_0 *blk = (const BlockQ8_0 *)a->w + (size_t)o * nb + b;
                float d = f16_to_f32(blk->d);
                for (int n = 0; n < N; n++) {
                    const float *x = a->inp + (size_t)n * C + (size_t)b * Q8_0_BLOCK;
                    float t = 0;
                    for (int j = 0; j < Q8_0_BLOCK; j++) t += (float)blk->qs[j] * x[j];
                    acc[n] += d * t;
                }
            }
        } else {
            for (int c = 0; c < C; c++) {
                size_t i = (size_t)o * C + c;
                float wv = a->wdt == DT_BF16 ? bf16_to_f32(((const uint16_t *)a->w)[i]) : ((const float *)a->w)[i];
                for (int n = 0; n < N; n++) acc[n] += wv * a->inp[(size_t)n * C + c];
            }
        }
        for (int n = 0; n < N; n++) a->out[(size_t)n * a->OC + o] = acc[n] + (a->bias ? a->bias[o] : 0.0f);
    }
}

static int gemv_dtype(DType wdt, int C) {
    return wdt == DT_F32 || wdt == DT_BF16 || (wdt == DT_Q8_0 && C % Q8_0_BLOCK == 0);
}

// The kernel for the backend's instruction set; xeo (scratch) filled for bf16 parts when any.
static void (*gemv_kernel(Backend *be, const float *inp, int N, int C, int any_bf16,
                          const float **xeo))(const CpuGemvArgs *, int, int) {
    *xeo = NULL;
#if defined(__x86_64__)
    CpuIsa isa = cpu_ctx(be)->isa;
    int vw = isa == CPU_ISA_AVX512 ? 16 : 8;
    if (isa != CPU_ISA_SCALAR && any_bf16 && C >= 2 * vw) {  // the inputs' even / odd halves
        float *x = cpu_scratch(be, CPU_SCR_GEMV, (size_t)N * C * sizeof(float));
        if (isa == CPU_ISA_AVX512) cpu_gemv_split_eo_avx512(x, inp, N, C);
        else cpu_gemv_split_eo_avx2(x, inp, N, C);
        *xeo = x;
    }
    if (isa == CPU_ISA_AVX512) return cpu_gemv_rows_avx512;
    if (isa == CPU_ISA_AVX2) return cpu_gemv_rows_avx2;
#else
    (void)be, (void)inp, (void)N, (void)C, (void)any_bf16;
#endif
    return gemv_rows_scalar;
}

// inp (N,C), w (OC,C) fp32, bf16 or Q8_0, bias (OC) or NULL -> out (N,OC) = inp w^T + bias,
// N <= CPU_GEMV_MAX_ROWS
void cpu_gemv_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                      int C, int OC) {
    CHECK(N >= 1 && N <= CPU_GEMV_MAX_ROWS && gemv_dtype(wdt, C));
    CpuGemvArgs a = {.out = out, .inp = inp, .bias = bias, .w = w, .wdt = wdt, .N = N, .C = C, .OC = OC};
    void (*rows)(const CpuGemvArgs *, int, int) = gemv_kernel(be, inp, N, C, wdt == DT_BF16, &a.xeo);
    int parts = (size_t)OC * C >= 65536 ? MIN(be->threads, OC) : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        // contiguous row ranges, boundaries on multiples of 4 rows
        int blocks = (OC + 3) / 4;
        int o0 = MIN(OC, (int)((long)blocks * part / parts) * 4), o1 = MIN(OC, (int)((long)blocks * (part + 1) / parts) * 4);
        rows(&a, o0, o1);
    }
}

// matmul_forward_multi: decode-sized inputs go through the kernels in one parallel region, each
// thread a contiguous range of the parts' rows taken end to end (4-row blocks), so the weights
// stream once and the threads meet once; every output row is computed as cpu_gemv_forward
// computes it (a row's sums never depend on the rows beside it). Otherwise one matmul each.
void cpu_matmul_forward_multi(Backend *be, const MatmulPart *parts, int count, const float *inp, int N, int C) {
    enum { MAXP = 8 };
    int ok = N >= 1 && N <= CPU_GEMV_MAX_ROWS && count <= MAXP, any_bf16 = 0;
    long blocks[MAXP + 1] = {0};  // blocks[i]: 4-row blocks before part i
    for (int i = 0; i < count && ok; i++) {
        ok = gemv_dtype(parts[i].wdt, C);
        any_bf16 |= parts[i].wdt == DT_BF16;
        blocks[i + 1] = blocks[i] + (parts[i].OC + 3) / 4;
    }
    if (!ok) {
        for (int i = 0; i < count; i++)
            cpu_matmul_forward(be, parts[i].out, inp, parts[i].w, parts[i].wdt, parts[i].bias, N, C, parts[i].OC);
        return;
    }
    CpuGemvArgs a[MAXP];
    const float *xeo;
    void (*rows)(const CpuGemvArgs *, int, int) = gemv_kernel(be, inp, N, C, any_bf16, &xeo);
    for (int i = 0; i < count; i++)
        a[i] = (CpuGemvArgs){.out = parts[i].out, .inp = inp, .xeo = parts[i].wdt == DT_BF16 ? xeo : NULL,
                             .bias = parts[i].bias, .w = parts[i].w, .wdt = parts[i].wdt, .N = N, .C = C,
                             .OC = parts[i].OC};
    long total = blocks[count];
    int nthr = (size_t)total * 4 * C >= 65536 ? (int)MIN((long)be->threads, total) : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (nthr > 1)
    for (int t = 0; t < nthr; t++) {
        long b0 = total * t / nthr, b1 = total * (t + 1) / nthr;  // this thread's blocks
        for (int i = 0; i < count; i++) {
            long lo = MAX(b0, blocks[i]), hi = MIN(b1, blocks[i + 1]);
            if (lo < hi)
                rows(&a[i], (int)MIN((lo - blocks[i]) * 4, (long)a[i].OC), (int)MIN((hi - blocks[i]) * 4, (long)a[i].OC));
        }
    }
}
