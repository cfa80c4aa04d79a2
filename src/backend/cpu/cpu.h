// cpu.h: the CPU backend's private interface: context with grow-only scratch, the GEMM wrapper
// and the op functions (each with the signature and semantics of its slot in backend.h).
//
// Determinism: for a fixed thread count every result is the same run to run. Reductions that
// cross threads write per-thread (or per-block) partials that are summed in a fixed order; no
// atomics. Work is split with static schedules only.
#ifndef STILL_BACKEND_CPU_H
#define STILL_BACKEND_CPU_H

#include "../backend.h"

#include <math.h>
#include <string.h>
#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#endif

// Scratch slots: each grows to the largest size asked for and is kept until destroy, so a
// steady-state step allocates nothing.
typedef enum {
    CPU_SCR_PANEL,     // fp32 copy of a panel of bf16/f16 weight rows
    CPU_SCR_PARTIAL,   // per-thread / per-block partial sums
    CPU_SCR_ATTN,      // per-thread attention score blocks
    CPU_SCR_ATTN_ACC,  // per-part dk/dv accumulators when kv heads are fewer than threads
    CPU_SCR_INDEX,     // int32 indices: attention key bounds, gathered ce rows
    CPU_SCR_GEMV,      // decode matmul: input rows with even / odd elements split (cpu_gemv.c)
    CPU_SCR_CAP,       // per-thread rows of soft-cap derivatives (the capped loss heads)
    CPU_SCR_NORMW,     // the woff + w weights of rmsnorm_*_off (cpu_family.c)
    CPU_SCR_GEMM,      // prefill matmul: the packed input and each thread's weight panel (cpu_gemm_avx2.c)
    CPU_SCR_COUNT
} CpuScratchSlot;

// Instruction sets of the kernels chosen at run time (cpu_gemv.c), best first below.
typedef enum { CPU_ISA_SCALAR, CPU_ISA_AVX2, CPU_ISA_AVX512 } CpuIsa;

typedef struct CpuCtx {
    int threads;
    CpuIsa isa;  // the decode kernels' instruction set: the best this machine runs, capped by STILL_CPU_ISA
    void *scratch[CPU_SCR_COUNT];
    size_t scratch_cap[CPU_SCR_COUNT];
} CpuCtx;

static inline CpuCtx *cpu_ctx(Backend *be) { return (CpuCtx *)be->ctx; }
// Scratch of at least `bytes` bytes in slot `slot` (64-byte aligned; contents unspecified).
void *cpu_scratch(Backend *be, CpuScratchSlot slot, size_t bytes);

// Row-major C (M,N) = alpha op(A) op(B) + beta C, op = transpose when ta / tb; beta == 0 ignores
// C's contents. OpenBLAS when built with it; called inside an OpenMP region it runs on the
// calling thread.
void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);

// An fp16 value (a Q8_0 scale) as fp32: one instruction with F16C.
static inline float cpu_f16_to_f32(uint16_t h) {
#if defined(__F16C__) && defined(__AVX2__)
    return _cvtsh_ss(h);
#else
    return f16_to_f32(h);
#endif
}

// dst (n) = elements [off, off + n) of a weight table stored as wdt, as fp32 (serial).
static inline void cpu_convert_f32(float *dst, const void *w, DType wdt, size_t off, size_t n) {
    if (wdt == DT_BF16) {
        const uint16_t *src = (const uint16_t *)w + off;
        uint32_t *d = (uint32_t *)dst;
#pragma omp simd
        for (size_t i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
    } else if (wdt == DT_F16) {
        const uint16_t *src = (const uint16_t *)w + off;
        for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
    } else if (wdt == DT_Q8_0) {  // any range: whole blocks in the middle, parts at the ends
        const BlockQ8_0 *b = (const BlockQ8_0 *)w;
        for (size_t i = 0; i < n;) {
            size_t k = (off + i) / Q8_0_BLOCK, j = (off + i) % Q8_0_BLOCK;
            size_t m = Q8_0_BLOCK - j < n - i ? Q8_0_BLOCK - j : n - i;
            float d = cpu_f16_to_f32(b[k].d), *o = dst + i;
            const int8_t *q = b[k].qs + j;
            if (m == Q8_0_BLOCK) {
#pragma omp simd
                for (int t = 0; t < Q8_0_BLOCK; t++) o[t] = d * (float)q[t];
            } else {
                for (size_t t = 0; t < m; t++) o[t] = d * (float)q[t];
            }
            i += m;
        }
    } else {
        memcpy(dst, (const float *)w + off, n * sizeof(float));
    }
}

// Rows [r0, r0 + rows) of a (.,C) weight table stored as wdt, as fp32 in dst (rows, C), using
// the backend's threads.
void cpu_weight_rows(Backend *be, float *dst, const void *w, DType wdt, size_t r0, size_t rows, int C);
// Rows of a bf16/f16 weight converted per panel: how many rows a panel holds for width C.
int cpu_panel_rows(int C, int total);

// expf without a libm call, so loops that use it vectorise: x clamped to [-87.3, 88] (below:
// exactly 0, so -inf gives 0), x = n ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor
// polynomial (truncation < 1e-8 relative), 2^n through the exponent bits. Relative error is a
// few ulp (tests/ops/test_backend_parity.c measures it). NaN gives NaN; 2^n is built from t's
// mantissa bits with unsigned arithmetic, so no input makes a float-to-int conversion undefined.
static inline float cpu_expf(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.0f ? 88.0f : x);
    float t = xc * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: rounds to an integer
    float n = t - 12582912.0f;
    float r = xc - n * 0.693145751953125f;  // ln 2 split in a part exact in fp32 and the rest
    r = r - n * 1.428606765330187e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t tbits;
    memcpy(&tbits, &t, 4);
    uint32_t bits = (tbits - 0x4B400000u + 127u) << 23;  // t = 1.5 * 2^23 + n: n sits in the low bits
    float scale;
    memcpy(&scale, &bits, 4);
    return x < -87.3f ? 0.0f : p * scale;
}

// cpu_ops.c
void cpu_embedding_forward(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C);
void cpu_embedding_backward(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C);
void cpu_rmsnorm_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps);
void cpu_rmsnorm_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          const float *rstd, int N, int C);
void cpu_rope_forward(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                      int HD, int RD);
void cpu_rope_backward(Backend *be, float *dx, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                       int HD, int RD);
void cpu_swiglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n);
void cpu_swiglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                         size_t n);
void cpu_add(Backend *be, float *out, const float *a, const float *b, size_t n);
void cpu_scale(Backend *be, float *x, float s, size_t n);
void cpu_dropout(Backend *be, float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt);
double cpu_sumsq(Backend *be, const float *x, size_t n);
void cpu_adamw(Backend *be, float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
               double eps, double wd, int t, float grad_scale);

// cpu_matmul.c
void cpu_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                        int C, int OC);
void cpu_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const void *w, DType wdt, int N, int C, int OC);

// cpu_gemv.c: decode-sized matmul (N <= CPU_GEMV_MAX_ROWS input rows; fp32, bf16 or Q8_0
// weights, Q8_0 rows a multiple of 32) streaming the weights once with AVX-512 / AVX2 FMA,
// the instruction set chosen at run time (CpuCtx.isa).
#define CPU_GEMV_MAX_ROWS 8
void cpu_gemv_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                      int C, int OC);
void cpu_matmul_forward_multi(Backend *be, const MatmulPart *parts, int count, const float *inp, int N, int C);
// The best instruction set this machine runs (cpuid), and a name's ("avx512", "avx2", "scalar")
// set: 0 when the name is none of them.
CpuIsa cpu_isa_best(void);
int cpu_isa_parse(const char *name, CpuIsa *isa);
const char *cpu_isa_name(CpuIsa isa);
// Sets the backend's kernels to `want` or, where this machine lacks it, the best below it;
// returns the set now used. (Tests run every path this way; STILL_CPU_ISA does it at create.)
CpuIsa cpu_set_isa(Backend *be, CpuIsa want);

// One decode-sized matmul for the kernels of cpu_gemv_kern.h: out (N,OC) = inp (N,C) w^T + bias;
// xeo (N,C): inp with each block of 2 VW elements as VW even then VW odd (bf16 weights), or NULL.
typedef struct {
    float *out;
    const float *inp, *xeo, *bias;
    const void *w;
    DType wdt;
    int N, C, OC;
} CpuGemvArgs;
// Output rows [o0, o1) on the calling thread; split_eo fills xeo (the instruction set's VW).
void cpu_gemv_rows_avx2(const CpuGemvArgs *a, int o0, int o1);
void cpu_gemv_rows_avx512(const CpuGemvArgs *a, int o0, int o1);
void cpu_gemv_split_eo_avx2(float *xeo, const float *inp, int N, int C);
void cpu_gemv_split_eo_avx512(float *xeo, const float *inp, int N, int C);

// cpu_gemm_avx2.c: prefill-sized matmul (N > CPU_GEMV_MAX_ROWS) for bf16 / f16 / Q8_0
// weights: out (N,OC) = inp (N,C) w^T (+ out when beta = 1), 6 x 16 register tiles over
// blocks of KC elements of C. ap (ceil(N / MR), C, MR): inp packed by cpu_gemm_pack_a_avx2.
#define CPU_GEMM_MR 6
#define CPU_GEMM_NR 16
#define CPU_GEMM_KC 512
typedef struct {
    float *out;
    const float *ap;
    const void *w;
    DType wdt;
    float beta;  // 0: out's contents are ignored; 1: added to
    int N, C, OC;
} CpuGemmArgs;
// Micro-panels [p0, p1) of ap; output columns [o0, o1) (o0 a multiple of CPU_GEMM_NR) with
// bp (CPU_GEMM_KC, CPU_GEMM_NR), 32-byte aligned, the calling thread's.
void cpu_gemm_pack_a_avx2(float *ap, const float *inp, int N, int C, int p0, int p1);
void cpu_gemm_cols_avx2(const CpuGemmArgs *g, float *bp, int o0, int o1);

// cpu_attention.c
void cpu_attention_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg, int B, int T, int NH, int NKV, int HD);
void cpu_attention_backward(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                            const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                            int B, int T, int NH, int NKV, int HD);

void cpu_attention_forward_opt(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                               const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o);
void cpu_attention_backward_opt(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                                const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                                int B, int T, int NH, int NKV, int HD, AttnOpts o);
void cpu_attention_sinks_backward(Backend *be, float *dsinks, const float *dout, const float *out, const float *lse,
                                  const float *sinks, const int32_t *seg, int B, int T, int NH, int HD);

// Final-logit soft-capping of one row of a loss head: z (V) = cap tanh(z / cap) and, when g is
// not NULL, g (V) = its derivative 1 - (z_capped / cap)^2 for the backward pass.
static inline void cpu_cap_row(float *z, float *g, int V, float cap) {
    float inv = 1.0f / cap;
    for (int j = 0; j < V; j++) {
        float t = tanhf(z[j] * inv);
        z[j] = cap * t;
        if (g) g[j] = 1.0f - t * t;
    }
}

// The capped heads' per-thread derivative rows: (threads, V) floats, or NULL without a cap.
static inline float *cpu_cap_scratch(Backend *be, float cap, int V) {
    return cap > 0 ? (float *)cpu_scratch(be, CPU_SCR_CAP, (size_t)be->threads * V * sizeof(float)) : NULL;
}

// cpu_loss.c
void cpu_ce_head_cap(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                     const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                     float grad_scale, float softcap, float *scratch, int chunk, int N, int C, int V);
void cpu_ce_head(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                 const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                 float grad_scale, float *scratch, int chunk, int N, int C, int V);

#endif
