// cpu_matmul.c: the linear layer on sgemm. fp32 weights go to sgemm directly; bf16/f16/Q8_0
// weights go forward through the AVX2 GEMM of cpu_gemm_avx2.c where the machine has it, else
// are converted to fp32 a tile of rows at a time in each thread's cache and multiplied there;
// backward converts a panel of rows at a time into backend scratch. For a handful of input
// rows (decode) a dot product per weight row is faster than sgemm (1x512x1536: fp32 0.21 ->
// 0.06 ms) and, for 16-bit weights, avoids writing and re-reading a converted panel.
#include "cpu.h"

#include <omp.h>

#define GEMV_MAX_ROWS 4  // at most this many input rows: one dot product per output

// out (N,OC) = inp (N,C) w^T + bias, one weight row at a time (16-bit rows converted once into a
// thread-local row), dotted with every input row.
static void matmul_forward_gemv(Backend *be, float *out, const float *inp, const void *w, DType wdt,
                                  const float *bias, int N, int C, int OC) {
    size_t stride = ((size_t)C + 15) / 16 * 16;
    float *rows = cpu_scratch(be, CPU_SCR_PANEL, (size_t)be->threads * stride * sizeof(float));
#pragma omp parallel num_threads(be->threads) if ((size_t)OC * C > 65536)
    {
        float *row = rows + (size_t)omp_get_thread_num() * stride;
#pragma omp for schedule(static)
        for (int o = 0; o < OC; o++) {
            const float *wr = row;
            if (wdt == DT_F32)
                wr = (const float *)w + (size_t)o * C;
            else
                cpu_convert_f32(row, w, wdt, (size_t)o * C, (size_t)C);
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C;
                float acc = 0;
#pragma omp simd reduction(+ : acc)
                for (int c = 0; c < C; c++) acc += x[c] * wr[c];
                out[(size_t)n * OC + o] = acc + (bias ? bias[o] : 0.0f);
            }
        }
    }
}

// Rows of a converted weight tile, a multiple of 16: about 1 MiB of fp32 (each sgemm call packs
// the whole input again, so a tile must hold enough rows to make that a small share; the tile
// itself is written and read back in cache), and no more than a thread's share of the rows.
static int tile_rows(int C, int OC, int threads) {
    int rows = (262144 / MAX(C, 1)) / 16 * 16;
    int share = ((OC + threads - 1) / threads + 15) / 16 * 16;
    return MIN(MAX(MIN(rows, share), 16), MAX(OC, 1));
}

// out (N,OC) = inp (N,C) w^T (+ out when beta = 1) for 16-bit / Q8_0 weights. Each thread takes
// tiles of rows of w, converts one into its own fp32 tile (which stays in its cache) and
// multiplies it there with a single-threaded sgemm: the weights are read once in their own
// dtype, and no converted panel goes out to memory and back. Every output element comes from
// one sgemm call, so the result does not depend on the thread count.
static void matmul_forward_tiles(Backend *be, float *out, const float *inp, const void *w, DType wdt, float beta,
                                 int N, int C, int OC) {
    int TP = tile_rows(C, OC, be->threads), tiles = (OC + TP - 1) / TP;
    int threads = MIN(be->threads, tiles);
    float *scr = cpu_scratch(be, CPU_SCR_PANEL, (size_t)threads * TP * C * sizeof(float));  // (threads, TP, C)
    if (threads <= 1) {  // one tile (sgemm may use the threads itself) or one thread: no parallel region
        for (int o0 = 0; o0 < OC; o0 += TP) {
            int p = MIN(TP, OC - o0);
            cpu_convert_f32(scr, w, wdt, (size_t)o0 * C, (size_t)p * C);
            cpu_sgemm(0, 1, N, p, C, 1.0f, inp, C, scr, C, beta, out + o0, OC);
        }
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        float *tile = scr + (size_t)omp_get_thread_num() * TP * C;
#pragma omp for schedule(static)
        for (int t = 0; t < tiles; t++) {
            int o0 = t * TP, p = MIN(TP, OC - o0);
            cpu_convert_f32(tile, w, wdt, (size_t)o0 * C, (size_t)p * C);
            cpu_sgemm(0, 1, N, p, C, 1.0f, inp, C, tile, C, beta, out + o0, OC);
        }
    }
}

// out (N,OC) = inp (N,C) w^T (+ out when beta = 1) for 16-bit / Q8_0 weights on the AVX2 GEMM
// of cpu_gemm_avx2.c: the input packed once (the threads split its micro-panels), then each
// thread a contiguous range of 16-column blocks of the output, converting its own weights into
// its own panel. No output depends on the thread count (cpu_gemm_avx2.c).
static void matmul_forward_gemm(Backend *be, float *out, const float *inp, const void *w, DType wdt, float beta,
                                int N, int C, int OC) {
#if defined(__x86_64__)
    int panels = (N + CPU_GEMM_MR - 1) / CPU_GEMM_MR, blocks = (OC + CPU_GEMM_NR - 1) / CPU_GEMM_NR;
    int threads = MIN(be->threads, blocks);
    size_t a_floats = ((size_t)panels * C * CPU_GEMM_MR + 15) / 16 * 16, b_floats = (size_t)CPU_GEMM_KC * CPU_GEMM_NR;
    float *ap = cpu_scratch(be, CPU_SCR_GEMM, (a_floats + (size_t)threads * b_floats) * sizeof(float));  // ap, then (threads, KC, NR)
    CpuGemmArgs g = {.out = out, .ap = ap, .w = w, .wdt = wdt, .beta = beta, .N = N, .C = C, .OC = OC};
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        cpu_gemm_pack_a_avx2(ap, inp, N, C, (int)((long)panels * t / nt), (int)((long)panels * (t + 1) / nt));
#pragma omp barrier
        int o0 = MIN(OC, (int)((long)blocks * t / nt) * CPU_GEMM_NR);
        int o1 = MIN(OC, (int)((long)blocks * (t + 1) / nt) * CPU_GEMM_NR);
        if (o0 < o1) cpu_gemm_cols_avx2(&g, ap + a_floats + (size_t)t * b_floats, o0, o1);
    }
#else
    (void)be, (void)out, (void)inp, (void)w, (void)wdt, (void)beta, (void)N, (void)C, (void)OC;
    CHECK(0);
#endif
}

// inp (N,C), w (OC,C) as wdt, bias (OC) or NULL -> out (N,OC) = inp w^T + bias
void cpu_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                        int C, int OC) {
    // decode-sized inputs with fp32 / bf16 / Q8_0 weights: the streaming kernel of cpu_gemv.c
    if (N <= CPU_GEMV_MAX_ROWS && (wdt == DT_F32 || wdt == DT_BF16 || (wdt == DT_Q8_0 && C % Q8_0_BLOCK == 0))) {
        cpu_gemv_forward(be, out, inp, w, wdt, bias, N, C, OC);
        return;
    }
    if (N <= GEMV_MAX_ROWS) {
        matmul_forward_gemv(be, out, inp, w, wdt, bias, N, C, OC);
        return;
    }
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * OC > 65536)
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    if (wdt == DT_F32) {
        cpu_sgemm(0, 1, N, OC, C, 1.0f, inp, C, (const float *)w, C, beta, out, OC);
        return;
    }
    if (cpu_ctx(be)->isa >= CPU_ISA_AVX2) matmul_forward_gemm(be, out, inp, w, wdt, beta, N, C, OC);
    else matmul_forward_tiles(be, out, inp, w, wdt, beta, N, C, OC);
}

// dinp (N,C) += dout w ; dw (OC,C) += dout^T inp ; dbias (OC) += colsum(dout)
void cpu_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const void *w, DType wdt, int N, int C, int OC) {
    if (dinp) {
        if (wdt == DT_F32) {
            cpu_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, (const float *)w, C, 1.0f, dinp, C);
        } else {
            int P = cpu_panel_rows(C, OC);
            float *panel = cpu_scratch(be, CPU_SCR_PANEL, (size_t)P * C * sizeof(float));
            for (int o0 = 0; o0 < OC; o0 += P) {
                int p = MIN(P, OC - o0);
                cpu_weight_rows(be, panel, w, wdt, (size_t)o0, (size_t)p, C);
                cpu_sgemm(0, 0, N, C, p, 1.0f, dout + o0, OC, panel, C, 1.0f, dinp, C);
            }
        }
    }
    if (dw) cpu_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) {
        // each thread owns a range of columns and walks the rows in order
        int parts = (size_t)N * OC > 65536 ? MIN(be->threads, OC) : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
        for (int part = 0; part < parts; part++) {
            size_t o0 = (size_t)OC * part / parts, o1 = (size_t)OC * (part + 1) / parts;
            for (int n = 0; n < N; n++) {
                const float *g = dout + (size_t)n * OC;
#pragma omp simd
                for (size_t o = o0; o < o1; o++) dbias[o] += g[o];
            }
        }
    }
}
