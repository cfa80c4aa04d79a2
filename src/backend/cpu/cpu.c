// cpu.c: the CPU backend's context (thread count, grow-only scratch), memory ops, GEMM wrapper,
// weight-panel conversion and op table. The ops live in cpu_ops.c, cpu_matmul.c,
// cpu_attention.c and cpu_loss.c.
#include "cpu.h"

#include "../../core/alloc.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#ifdef STILL_OPENBLAS
#include <cblas.h>
#endif

void *cpu_scratch(Backend *be, CpuScratchSlot slot, size_t bytes) {
    CpuCtx *ctx = cpu_ctx(be);
    if (bytes > ctx->scratch_cap[slot]) {
        free(ctx->scratch[slot]);
        ctx->scratch[slot] = xaligned(bytes);
        ctx->scratch_cap[slot] = bytes;
    }
    return ctx->scratch[slot];
}

#ifdef STILL_OPENBLAS
void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // BLAS leaves C alone for K = 0 only when beta = 1
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
}
#else
// Without BLAS: a plain loop, parallel over rows of C unless already inside a parallel region.
void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && (size_t)M * N * K > 100000)
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float acc = 0;
            for (int k = 0; k < K; k++)
                acc += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                       (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            float *c = &C[(size_t)i * ldc + j];
            *c = alpha * acc + (beta == 0 ? 0.0f : beta * *c);
        }
    }
}
#endif

void cpu_weight_rows(Backend *be, float *dst, const void *w, DType wdt, size_t r0, size_t rows, int C) {
    size_t n = rows * C, off = r0 * C;
    int parts = n > 65536 ? be->threads : 1;
#pragma omp parallel for schedule(static) num_threads(be->threads) if (parts > 1)
    for (int part = 0; part < parts; part++) {
        size_t i0 = n * part / parts, i1 = n * (part + 1) / parts;
        cpu_convert_f32(dst + i0, w, wdt, off + i0, i1 - i0);
    }
}

// About 2M floats (8 MB) per panel: large enough for sgemm to run at full speed, small enough
// to stay a modest fraction of any model's memory.
int cpu_panel_rows(int C, int total) {
    int rows = (int)MAX(16, (2 << 20) / MAX(C, 1));
    return MIN(rows, total);
}

static void *cpu_alloc(Backend *be, size_t bytes) {
    void *p = xaligned(bytes);
    memset(p, 0, (bytes + 63) / 64 * 64);
    return p;
}

static void cpu_free(Backend *be, void *p) { free(p); }

static void cpu_memcpy(Backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_zero(Backend *be, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}

static void cpu_sync(Backend *be) {}

static void cpu_destroy(Backend *be) {
    CpuCtx *ctx = cpu_ctx(be);
    for (int i = 0; i < CPU_SCR_COUNT; i++) free(ctx->scratch[i]);
    free(ctx);
    free(be);
}

Backend *backend_cpu_create(int threads) {
    Backend *be = xcalloc(1, sizeof *be);
    CpuCtx *ctx = xcalloc(1, sizeof *ctx);
    ctx->threads = threads > 0 ? threads : omp_get_max_threads();
    ctx->isa = cpu_isa_best();
    CpuIsa cap;  // STILL_CPU_ISA caps the kernels' instruction set (backend_create refuses other values)
    const char *isa_env = getenv("STILL_CPU_ISA");
    if (isa_env && *isa_env && cpu_isa_parse(isa_env, &cap) && cap < ctx->isa) ctx->isa = cap;
#ifdef STILL_OPENBLAS
    openblas_set_num_threads(ctx->threads);
#endif
    be->name = "cpu";
    be->prefill_bucket = 16;
    be->host_memory = 1;
    be->ctx = ctx;
    be->threads = ctx->threads;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_memcpy;
    be->download = cpu_memcpy;
    be->zero = cpu_zero;
    be->copy = cpu_memcpy;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    be->embedding_forward = cpu_embedding_forward;
    be->embedding_backward = cpu_embedding_backward;
    be->rmsnorm_forward = cpu_rmsnorm_forward;
    be->rmsnorm_backward = cpu_rmsnorm_backward;
    be->matmul_forward = cpu_matmul_forward;
    be->matmul_forward_multi = cpu_matmul_forward_multi;
    be->matmul_backward = cpu_matmul_backward;
    be->rope_forward = cpu_rope_forward;
    be->rope_backward = cpu_rope_backward;
    be->attention_forward = cpu_attention_forward;
    be->attention_backward = cpu_attention_backward;
    be->swiglu_forward = cpu_swiglu_forward;
    be->swiglu_backward = cpu_swiglu_backward;
    be->add = cpu_add;
    be->scale = cpu_scale;
    be->dropout = cpu_dropout;
    be->sumsq = cpu_sumsq;
    be->ce_head = cpu_ce_head;
    be->adamw = cpu_adamw;
    backend_cpu_install_sampling(be);
    backend_cpu_install_kv(be);
    backend_cpu_install_family(be);
    backend_cpu_install_moe(be);
    backend_cpu_install_vocab(be);
    return be;
}
