// cuda.cu: the CUDA backend's context (one stream, one cuBLAS handle, grow-only scratch),
// memory ops, captured graphs and op table. The ops live in cuda_ops.cu, cuda_attention.cu,
// cuda_loss.cu, cuda_sample.cu, cuda_kv.cu and cuda_heads.cu.
//
// Precision (ARCHITECTURE §3): buffers stay fp32 (activations, gradients, master weights,
// optimizer state); every GEMM converts its operands to bf16 and accumulates in fp32
// (cublasGemmEx, CUBLAS_COMPUTE_32F). STILL_CUDA_GEMM=fp32 keeps fp32 operands instead (the
// parity tests use it to hold every op to the reference at fp32 tolerances). Everything else
// (norms, rope, attention, softmax, the loss, AdamW, sampling) computes in fp32 or double.
#include "cuda_common.cuh"
#include "cuda.h"

#include <string.h>

void *cu_scratch(Backend *be, CuScratchSlot slot, size_t bytes) {
    CudaCtx *ctx = cu_ctx(be);
    if (bytes <= ctx->scratch_cap[slot]) return ctx->scratch[slot];
    CHECK_MSG(!ctx->capturing,
              "cuda: scratch slot %d must grow to %zu bytes while recording graph %llu; run the shape once "
              "before recording it",
              (int)slot, bytes, (unsigned long long)ctx->capture_key);
    if (ctx->scratch[slot]) {
        ctx->retired = (void **)realloc(ctx->retired, (size_t)(ctx->n_retired + 1) * sizeof(void *));
        CHECK(ctx->retired);
        ctx->retired[ctx->n_retired++] = ctx->scratch[slot];
    }
    size_t cap = bytes + bytes / 4 + 256;
    CUDA_CHECK(cudaMalloc(&ctx->scratch[slot], cap));
    ctx->scratch_cap[slot] = cap;
    return ctx->scratch[slot];
}

static void not_recording(CudaCtx *ctx, const char *what) {
    CHECK_MSG(!ctx->capturing, "cuda: %s while recording graph %llu (host transfers cannot be replayed)", what,
              (unsigned long long)ctx->capture_key);
}

static void *cuda_alloc(Backend *be, size_t bytes) {
    CudaCtx *ctx = cu_ctx(be);
    not_recording(ctx, "alloc");
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    CUDA_CHECK(cudaMalloc(&p, rounded));  // 256-byte aligned
    CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, ctx->stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    cu_weights_on_alloc(be, p, rounded);
    return p;
}

static void cuda_free(Backend *be, void *p) {
    if (!p) return;
    not_recording(cu_ctx(be), "free");
    CUDA_CHECK(cudaStreamSynchronize(cu_ctx(be)->stream));
    cu_weights_on_free(be, p);
    CUDA_CHECK(cudaFree(p));
}

static void cuda_upload(Backend *be, void *dst, const void *src, size_t bytes) {
    CudaCtx *ctx = cu_ctx(be);
    not_recording(ctx, "upload");
    if (!bytes) return;
    cu_weights_written(be, dst);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));  // the caller may free or reuse src at once
}

static void cuda_download(Backend *be, void *dst, const void *src, size_t bytes) {
    CudaCtx *ctx = cu_ctx(be);
    not_recording(ctx, "download");
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
}

static void cuda_zero(Backend *be, void *dst, size_t bytes) {
    if (bytes) cu_weights_written(be, dst);
    if (bytes) CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cu_ctx(be)->stream));
}

static void cuda_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) cu_weights_written(be, dst);
    if (bytes && dst != src) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_ctx(be)->stream));
}

static void cuda_sync(Backend *be) {
    CudaCtx *ctx = cu_ctx(be);
    not_recording(ctx, "sync");
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
}

// ---- captured graphs ----------------------------------------------------------------------
static CuGraph *find_graph(CudaCtx *ctx, uint64_t key) {
    for (int i = 0; i < ctx->n_graphs; i++)
        if (ctx->graphs[i].key == key) return &ctx->graphs[i];
    return NULL;
}

static void cuda_graph_begin(Backend *be, uint64_t key) {
    CudaCtx *ctx = cu_ctx(be);
    CHECK_MSG(!ctx->capturing, "cuda: graph_begin(%llu) while recording graph %llu", (unsigned long long)key,
              (unsigned long long)ctx->capture_key);
    cu_weights_refresh(be);  // the graph reads the copies; it never converts
    CUDA_CHECK(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    ctx->capturing = 1;
    ctx->capture_key = key;
}

static void cuda_graph_end(Backend *be, uint64_t key) {
    CudaCtx *ctx = cu_ctx(be);
    CHECK_MSG(ctx->capturing && ctx->capture_key == key, "cuda: graph_end(%llu) without graph_begin",
              (unsigned long long)key);
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamEndCapture(ctx->stream, &g));
    ctx->capturing = 0;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    CuGraph *old = find_graph(ctx, key);
    if (old) {
        CUDA_CHECK(cudaGraphExecDestroy(old->exec));
        old->exec = exec;
        return;
    }
    ctx->graphs = (CuGraph *)realloc(ctx->graphs, (size_t)(ctx->n_graphs + 1) * sizeof(CuGraph));
    CHECK(ctx->graphs);
    ctx->graphs[ctx->n_graphs++] = CuGraph{key, exec};
}

static int cuda_graph_launch(Backend *be, uint64_t key) {
    CudaCtx *ctx = cu_ctx(be);
    CuGraph *g = find_graph(ctx, key);
    if (!g) return 0;
    not_recording(ctx, "graph_launch");
    cu_weights_refresh(be);  // after an optimizer step: new weights into the copies the graph reads
    CUDA_CHECK(cudaGraphLaunch(g->exec, ctx->stream));
    return 1;
}

static void cuda_graph_drop(Backend *be, uint64_t key) {
    CudaCtx *ctx = cu_ctx(be);
    CuGraph *g = find_graph(ctx, key);
    if (!g) return;
    not_recording(ctx, "graph_drop");
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));  // a replay still queued may use it
    CUDA_CHECK(cudaGraphExecDestroy(g->exec));
    *g = ctx->graphs[--ctx->n_graphs];
}

static void cuda_destroy(Backend *be) {
    CudaCtx *ctx = cu_ctx(be);
    cudaStreamSynchronize(ctx->stream);
    for (int i = 0; i < ctx->n_graphs; i++) cudaGraphExecDestroy(ctx->graphs[i].exec);
    cu_weights_free_all(be);
    free(ctx->graphs);
    for (int i = 0; i < CU_SCR_COUNT; i++) cudaFree(ctx->scratch[i]);
    for (int i = 0; i < ctx->n_retired; i++) cudaFree(ctx->retired[i]);
    free(ctx->retired);
    cudaFree(ctx->blas_ws);
    cudaFree(ctx->dev_d);
    cudaFreeHost(ctx->host_d);
    cublasDestroy(ctx->blas);
    cudaStreamDestroy(ctx->stream);
    free(ctx);
    free(be);
}

#ifndef STILL_CUDA_ARCHS
#define STILL_CUDA_ARCHS "unknown"
#endif

#ifndef CUEMU_CUDA_RUNTIME_H
// A kernel that does nothing: whether the runtime finds an image of it for this GPU says whether
// the build holds machine code (or PTX it can compile) for the GPU's architecture.
__global__ static void cu_probe_kernel() {}
#endif

// The GPU must be one this build has kernels for (Makefile CUDA_ARCHS): refused at startup, not
// at the first launch.
static Status check_kernel_image(const cudaDeviceProp *prop, Err *e) {
#ifndef CUEMU_CUDA_RUNTIME_H
    cudaFuncAttributes fa;
    cudaError_t r = cudaFuncGetAttributes(&fa, cu_probe_kernel);
    if (r == cudaSuccess) return ST_OK;
    cudaGetLastError();  // clear it
    return err_set(e, ST_EUNSUPPORTED,
                   "--device cuda: this build has no kernels for %s (compute capability %d.%d; built for CUDA_ARCHS "
                   "%s): rebuild with make CUDA=1 CUDA_ARCHS=\"%d%d\" (%s)",
                   prop->name, prop->major, prop->minor, STILL_CUDA_ARCHS, prop->major, prop->minor,
                   cudaGetErrorString(r));
#else
    return ST_OK;
#endif
}

extern "C" Status backend_cuda_create(int threads, Backend **out, Err *e) {
    int n = 0;
    cudaError_t st = cudaGetDeviceCount(&n);
    if (st != cudaSuccess || n == 0)
        return err_set(e, ST_EUNSUPPORTED, "--device cuda: no usable CUDA GPU (cudaGetDeviceCount: %s)",
                       st != cudaSuccess ? cudaGetErrorString(st) : "0 devices");
    CudaCtx *ctx = (CudaCtx *)calloc(1, sizeof *ctx);
    Backend *be = (Backend *)calloc(1, sizeof *be);
    CHECK(ctx && be);
    const char *dev_env = getenv("STILL_CUDA_DEVICE");
    ctx->device = dev_env ? atoi(dev_env) : 0;
    if (ctx->device < 0 || ctx->device >= n) {
        free(ctx), free(be);
        return err_set(e, ST_EINVAL, "STILL_CUDA_DEVICE=%s: this machine has %d CUDA device(s)", dev_env, n);
    }
    CUDA_CHECK(cudaSetDevice(ctx->device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx->device));
    if (prop.major < 8) {
        free(ctx), free(be);
        return err_set(e, ST_EUNSUPPORTED, "--device cuda: %s has compute capability %d.%d; still needs 8.0 or newer",
                       prop.name, prop.major, prop.minor);
    }
    Status kst = check_kernel_image(&prop, e);
    if (kst != ST_OK) {
        free(ctx), free(be);
        return kst;
    }
    ctx->num_sms = prop.multiProcessorCount;
    ctx->smem_optin = prop.sharedMemPerBlockOptin;
    const char *graphs = getenv("STILL_CUDA_GRAPHS");
    if (graphs && strcmp(graphs, "0") && strcmp(graphs, "1")) {
        free(ctx), free(be);
        return err_set(e, ST_EINVAL, "STILL_CUDA_GRAPHS=%s: expected 1 (record plan steps as graphs, the default) or 0", graphs);
    }
    const char *g = getenv("STILL_CUDA_GEMM");
    ctx->gemm_dt = DT_BF16;
    if (g && !strcmp(g, "fp32")) ctx->gemm_dt = DT_F32;
    else if (g && strcmp(g, "bf16")) {
        free(ctx), free(be);
        return err_set(e, ST_EINVAL, "STILL_CUDA_GEMM=%s: expected bf16 or fp32", g);
    }
    // attention: tensor cores with bf16 operands unless every GEMM is fp32 (STILL_CUDA_ATTN overrides)
    const char *a = getenv("STILL_CUDA_ATTN");
    ctx->attn_mma = ctx->gemm_dt == DT_BF16;
    if (a && !strcmp(a, "mma")) ctx->attn_mma = 1;
    else if (a && !strcmp(a, "fp32")) ctx->attn_mma = 0;
    else if (a) {
        free(ctx), free(be);
        return err_set(e, ST_EINVAL, "STILL_CUDA_ATTN=%s: expected mma (bf16 tensor cores) or fp32", a);
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&ctx->blas));
    CUBLAS_CHECK(cublasSetStream(ctx->blas, ctx->stream));
    ctx->blas_ws_bytes = 32u << 20;
    CUDA_CHECK(cudaMalloc(&ctx->blas_ws, ctx->blas_ws_bytes));
    CUBLAS_CHECK(cublasSetWorkspace(ctx->blas, ctx->blas_ws, ctx->blas_ws_bytes));
    CUBLAS_CHECK(cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH));  // no TF32 behind our back
    CUDA_CHECK(cudaMallocHost(&ctx->host_d, sizeof(double)));
    CUDA_CHECK(cudaMalloc(&ctx->dev_d, sizeof(double)));
    cu_attention_init(ctx->smem_optin);

    be->name = "cuda";
    be->prefill_bucket = 128;
    be->host_memory = 0;
    be->ctx = ctx;
    be->threads = threads;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->zero = cuda_zero;
    be->copy = cuda_copy;
    be->sync = cuda_sync;
    be->destroy = cuda_destroy;
    be->embedding_forward = cu_embedding_forward;
    be->embedding_backward = cu_embedding_backward;
    be->rmsnorm_forward = cu_rmsnorm_forward;
    be->rmsnorm_backward = cu_rmsnorm_backward;
    be->matmul_forward = cu_matmul_forward;
    be->matmul_backward = cu_matmul_backward;
    be->rope_forward = cu_rope_forward;
    be->rope_backward = cu_rope_backward;
    be->attention_forward = cu_attention_forward;
    be->attention_backward = cu_attention_backward;
    be->swiglu_forward = cu_swiglu_forward;
    be->swiglu_backward = cu_swiglu_backward;
    be->add = cu_add;
    be->scale = cu_scale;
    be->dropout = cu_dropout;
    be->sumsq = cu_sumsq;
    be->ce_head = cu_ce_head;
    be->adamw = cu_adamw;
    be->sample_seen_update = cu_sample_seen_update;
    be->sample_logits = cu_sample_logits;
    be->kv_cache_write = cu_kv_cache_write;
    be->attention_cached = cu_attention_cached;
    be->logprob_head = cu_logprob_head;
    be->distill_head = cu_distill_head;
    be->score_head = cu_score_head;
    cu_install_family(be);
    cu_install_moe(be);
    cu_install_vocab(be);
    if (!graphs || strcmp(graphs, "0")) {  // STILL_CUDA_GRAPHS=0: every step runs eagerly
        be->graph_begin = cuda_graph_begin;
        be->graph_end = cuda_graph_end;
        be->graph_launch = cuda_graph_launch;
        be->graph_drop = cuda_graph_drop;
    }
    *out = be;
    return ST_OK;
}

extern "C" const char *backend_cuda_device_name(Backend *be, char *buf, size_t n) {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, cu_ctx(be)->device));
    snprintf(buf, n, "%s (%d SMs, %.0f GiB)", prop.name, prop.multiProcessorCount,
             prop.totalGlobalMem / 1073741824.0);
    return buf;
}

extern "C" void *backend_cuda_stream(Backend *be) { return (void *)cu_ctx(be)->stream; }

extern "C" const char *backend_cuda_gemm_dtype(Backend *be) { return cu_ctx(be)->gemm_dt == DT_BF16 ? "bf16" : "fp32"; }

extern "C" const char *backend_cuda_attention_kind(Backend *be) { return cu_ctx(be)->attn_mma ? "mma bf16" : "fp32"; }

// Dense bf16 GEMM rate of cuBLAS alone (operands already bf16, fp32 accumulate and output):
// the ceiling the benchmarks report MFU against, besides the datasheet's.
extern "C" double backend_cuda_gemm_tflops(Backend *be, int M, int N, int K, int reps) {
    CudaCtx *ctx = cu_ctx(be);
    __nv_bfloat16 *a, *b;
    float *c;
    CUDA_CHECK(cudaMalloc(&a, (size_t)M * K * 2));
    CUDA_CHECK(cudaMalloc(&b, (size_t)N * K * 2));
    CUDA_CHECK(cudaMalloc(&c, (size_t)M * N * 4));
    // random-looking data: zeros run faster than real inputs
    float *fa, *fb;
    CUDA_CHECK(cudaMalloc(&fa, (size_t)M * K * 4));
    CUDA_CHECK(cudaMalloc(&fb, (size_t)N * K * 4));
    float *h = (float *)malloc((size_t)(M > N ? M : N) * K * 4);
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)(M > N ? M : N) * K; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    CUDA_CHECK(cudaMemcpy(fa, h, (size_t)M * K * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(fb, h, (size_t)N * K * 4, cudaMemcpyHostToDevice));
    free(h);
    DType saved = ctx->gemm_dt;
    ctx->gemm_dt = DT_BF16;
    const void *ca = cu_operand(be, CU_SCR_A, fa, DT_F32, (size_t)M * K);
    CUDA_CHECK(cudaMemcpyAsync(a, ca, (size_t)M * K * 2, cudaMemcpyDeviceToDevice, ctx->stream));
    const void *cb = cu_operand(be, CU_SCR_A, fb, DT_F32, (size_t)N * K);
    CUDA_CHECK(cudaMemcpyAsync(b, cb, (size_t)N * K * 2, cudaMemcpyDeviceToDevice, ctx->stream));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int r = 0; r < 3; r++) cu_gemm(be, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
    CUDA_CHECK(cudaEventRecord(e0, ctx->stream));
    for (int r = 0; r < reps; r++) cu_gemm(be, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
    CUDA_CHECK(cudaEventRecord(e1, ctx->stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    ctx->gemm_dt = saved;
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(fa), cudaFree(fb);
    return 2.0 * M * N * K * reps / (ms * 1e-3) / 1e12;
}

// Achieved device-to-device copy bandwidth (bytes read + written per second), GB/s.
extern "C" double backend_cuda_copy_gbs(Backend *be, size_t bytes, int reps) {
    CudaCtx *ctx = cu_ctx(be);
    void *a, *b;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    CUDA_CHECK(cudaMemsetAsync(a, 1, bytes, ctx->stream));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
    CUDA_CHECK(cudaEventRecord(e0, ctx->stream));
    for (int r = 0; r < reps; r++) CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
    CUDA_CHECK(cudaEventRecord(e1, ctx->stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(a), cudaFree(b);
    return 2.0 * bytes * reps / (ms * 1e-3) / 1e9;
}
