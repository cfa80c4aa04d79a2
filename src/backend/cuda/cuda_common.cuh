// cuda_common.cuh: what the CUDA backend's files share: the context (stream, cuBLAS handle,
// grow-only scratch, captured graphs), CHECK macros for CUDA and cuBLAS calls, block
// reductions, and the GEMM / operand-conversion helpers (cuda_ops.cu).
#ifndef STILL_CUDA_COMMON_CUH
#define STILL_CUDA_COMMON_CUH

extern "C" {
#include "../backend.h"
}

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// Calls that cannot fail in a correct program (STYLE.md rule 5): print file:line, the call and
// the error, then abort.
#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t cu_err_ = (call);                                                             \
        if (cu_err_ != cudaSuccess) {                                                             \
            fprintf(stderr, "still: CUDA error at %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, \
                    cudaGetErrorName(cu_err_), cudaGetErrorString(cu_err_));                      \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

#define CUBLAS_CHECK(call)                                                                          \
    do {                                                                                            \
        cublasStatus_t cb_st_ = (call);                                                             \
        if (cb_st_ != CUBLAS_STATUS_SUCCESS) {                                                      \
            fprintf(stderr, "still: cuBLAS error at %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #call, \
                    cublasGetStatusString(cb_st_), (int)cb_st_);                                    \
            abort();                                                                                \
        }                                                                                           \
    } while (0)

// After every launch: a bad configuration shows up here, not at some later call.
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// Grow-only scratch slots. A slot that grows keeps its old buffer until destroy, because a
// captured graph (or work still queued on the stream) may hold the old pointer.
typedef enum {
    CU_SCR_A = 0,  // first GEMM operand in compute dtype
    CU_SCR_B,      // second GEMM operand in compute dtype
    CU_SCR_C,      // a third operand (matmul backward: inp; ce_head: dz)
    CU_SCR_W,      // ce_head, logprob_head, distill_head: the (student's) LM head in compute dtype
    CU_SCR_W2,     // distill_head: the teacher's LM head in compute dtype
    CU_SCR_RED,    // partial sums of reductions, attention's D
    CU_SCR_COUNT
} CuScratchSlot;

typedef struct CuGraph {
    uint64_t key;
    cudaGraphExec_t exec;
} CuGraph;

typedef struct CuWeights CuWeights;  // cuda_weights.cu

typedef struct CudaCtx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;          // cuBLAS workspace (set explicitly so capture never allocates)
    size_t blas_ws_bytes;
    DType gemm_dt;          // DT_BF16 (default) or DT_F32: operand dtype of every GEMM
    int attn_mma;           // attention on the tensor cores (cuda_attention_mma.cu), else fp32
    void *scratch[CU_SCR_COUNT];
    size_t scratch_cap[CU_SCR_COUNT];
    void **retired;         // outgrown scratch buffers, freed at destroy
    int n_retired;
    double *host_d;         // pinned: sumsq's result
    double *dev_d;          // device: sumsq's result
    int capturing;          // inside graph_begin .. graph_end
    uint64_t capture_key;
    CuGraph *graphs;
    int n_graphs;
    int num_sms;
    size_t smem_optin;      // shared memory a block may opt in to (cudaDeviceProp)
    CuWeights *weights;     // bf16 copies of fp32 weights (cuda_weights.cu)
} CudaCtx;

static inline CudaCtx *cu_ctx(Backend *be) { return (CudaCtx *)be->ctx; }

// cuda.cu
void *cu_scratch(Backend *be, CuScratchSlot slot, size_t bytes);

// cuda_ops.cu: operands for GEMMs. cu_operand returns src itself when it is already in the
// compute dtype, else a converted copy in the scratch slot.
const void *cu_operand(Backend *be, CuScratchSlot slot, const void *src, DType sdt, size_t n);
// dst (n, ddt) = src (n, sdt), on the stream
void cu_convert(Backend *be, void *dst, DType ddt, const void *src, DType sdt, size_t n);

// cuda_weights.cu: a weight operand (matmul w, an LM head): with bf16 GEMMs an fp32 weight from
// be->alloc is read through its bf16 copy, made once and refreshed after writes; else cu_operand.
const void *cu_weight_operand(Backend *be, CuScratchSlot slot, const void *w, DType wdt, size_t n);
// Every op that may write weights calls this with its output: the copies of that allocation go stale.
void cu_weights_written(Backend *be, const void *p);
void cu_weights_refresh(Backend *be);  // convert stale copies (before recording or replaying a graph)
void cu_weights_on_alloc(Backend *be, void *p, size_t bytes);
void cu_weights_on_free(Backend *be, void *p);
void cu_weights_free_all(Backend *be);
// Row-major C (M,N) = alpha op(A) op(B) + beta C, op(A) (M,K), op(B) (K,N); A and B in
// ctx->gemm_dt, C fp32; lda/ldb/ldc are the row strides of the stored matrices.
void cu_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
             int ldb, float beta, float *C, int ldc);
// dst (C) += column sums over N rows of a (N,C), or of a*b*r[n] when b and r are given;
// deterministic (fixed partition, fixed order).
void cu_colsum_add(Backend *be, float *dst, const float *a, const float *b, const float *r, int N, int C);

static inline unsigned cu_blocks(size_t n, int threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > 65535u * 32u ? 65535u * 32u : b));
}

// ---- warp and block reductions (blockDim.x a multiple of 32, at most 1024) ----------------
template <typename T> __device__ inline T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block in a fixed tree (deterministic); every thread gets the result.
template <typename T> __device__ inline T block_sum(T v, T *sh /* 32 */) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    T r = lane < nw ? sh[lane] : (T)0;
    r = warp_sum(r);
    return r;
}

__device__ inline float block_max(float v, float *sh /* 32 */) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(r);
}

// (value, index) with the larger value, the smaller index on ties; NaN values never win.
__device__ inline void argmax_merge(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) v = v2, i = i2;
}
__device__ inline int block_argmax(float v, int i, float *shv, int *shi) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        argmax_merge(v, i, v2, i2);
    }
    __syncthreads();
    if (lane == 0) shv[w] = v, shi[w] = i;
    __syncthreads();
    v = lane < nw ? shv[lane] : -INFINITY;
    i = lane < nw ? shi[lane] : INT32_MAX;
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        argmax_merge(v, i, v2, i2);
    }
    return i;
}

// Weights and tables as fp32 whatever their storage (Q8_0: dequantized, fp16(d) * q).
__device__ inline float cu_wload(const void *w, DType dt, size_t i) {
    if (dt == DT_BF16) return __bfloat162float(((const __nv_bfloat16 *)w)[i]);
    if (dt == DT_Q8_0) {
        const BlockQ8_0 *b = (const BlockQ8_0 *)w + i / Q8_0_BLOCK;
        return __half2float(__ushort_as_half(b->d)) * (float)b->qs[i % Q8_0_BLOCK];
    }
    if (dt == DT_F16) return __half2float(((const __half *)w)[i]);
    return ((const float *)w)[i];
}

// Op entry points (C++ linkage inside the backend; only backend_cuda_create is extern "C").
void cu_embedding_forward(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C);
void cu_embedding_backward(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C);
void cu_rmsnorm_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
void cu_rmsnorm_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C);
void cu_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                       int C, int OC);
void cu_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const void *w, DType wdt, int N, int C, int OC);
void cu_rope_forward(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                     int HD, int RD);
void cu_rope_backward(Backend *be, float *dx, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                      int HD, int RD);
void cu_attention_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                          const int32_t *seg, int B, int T, int NH, int NKV, int HD);
void cu_attention_backward(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, const int32_t *seg, int B,
                           int T, int NH, int NKV, int HD);
void cu_attention_init(size_t smem_optin);  // the device's shared memory per block (opt-in)
// cuda_attention_mma.cu: the same ops with bf16 mma.sync (selected by ctx->attn_mma); D (B,NH,T)
// = dout . out comes from the caller
void cu_attention_mma_init(size_t smem_optin);
void cu_attention_mma_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                              const int32_t *seg, int B, int T, int NH, int NKV, int HD);
void cu_attention_mma_backward(Backend *be, float *dq, float *dk, float *dv, const float *D, const float *dout,
                               const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                               int B, int T, int NH, int NKV, int HD);
void cu_swiglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n);
void cu_swiglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                        size_t n);
void cu_add(Backend *be, float *out, const float *a, const float *b, size_t n);
void cu_scale(Backend *be, float *x, float s, size_t n);
void cu_dropout(Backend *be, float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt);
double cu_sumsq(Backend *be, const float *x, size_t n);
void cu_ce_head(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights, float grad_scale,
                float *scratch, int chunk, int N, int C, int V);
void cu_adamw(Backend *be, float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
              double eps, double wd, int t, float grad_scale);
void cu_sample_seen_update(Backend *be, uint8_t *seen, const int32_t *ids, int B, int T, int V);
void cu_sample_logits(Backend *be, int32_t *ids, float *logprob, float *logprob_raw, float *scores,
                      const float *logits, const SampleParams *params, const double *u, const uint8_t *seen,
                      const int32_t *banned, int K, int B, int V);
// cuda_kv.cu
void cu_kv_cache_write(Backend *be, float *kc, float *vc, const float *k, const float *v, const int32_t *start,
                       int B, int T, int NKV, int HD, int S);
void cu_attention_cached(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                         const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV, int HD, int S);
// cuda_heads.cu
void cu_logprob_head(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                     const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef, float tau,
                     float *scratch, int chunk, int N, int C, int V);
void cu_distill_head(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                     const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                     const int32_t *targets, const float *weights, float tau, float beta, int top_k, float grad_scale,
                     float *scratch_s, float *scratch_t, int chunk, int N, int Cs, int Ct, int V);
void cu_score_head(Backend *be, float *scores, float *dh, float *dW, const float *h, const void *W, DType wdt,
                   const int32_t *rows, const float *dscores, int B, int N, int C, int NL);
// The model-family ops (backend.h): attention with AttnOpts (cuda_attention.cu, cuda_kv.cu), the
// soft-capped heads (cuda_loss.cu, cuda_heads.cu); cuda_family.cu installs them with its own ops.
void cu_attention_forward_opt(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                              const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o);
void cu_attention_backward_opt(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                               const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                               int B, int T, int NH, int NKV, int HD, AttnOpts o);
void cu_attention_sinks_backward(Backend *be, float *dsinks, const float *dout, const float *out, const float *lse,
                                 const float *sinks, const int32_t *seg, int B, int T, int NH, int HD);
void cu_attention_cached_opt(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                             const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV, int HD, int S,
                             AttnOpts o);
void cu_kv_ring_write(Backend *be, float *kc, float *vc, const float *k, const float *v, const int32_t *start, int B,
                      int T, int NKV, int HD, int W);
void cu_attention_ring(Backend *be, float *out, const float *q, const float *kc, const float *vc, const float *k,
                       const float *v, const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV,
                       int HD, int S, AttnOpts o);
void cu_ce_head_cap(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                    const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                    float grad_scale, float softcap, float *scratch, int chunk, int N, int C, int V);
void cu_logprob_head_cap(Backend *be, float *row_logp, float *row_entropy, float *row_stats, float *dh, float *dW,
                         const float *h, const void *W, DType wdt, const int32_t *targets, const float *coef,
                         float tau, float softcap, float *scratch, int chunk, int N, int C, int V);
void cu_distill_head_cap(Backend *be, float *row_loss, float *row_kl, float *dh_s, float *dW_s, const float *h_s,
                         const void *W_s, DType wdt_s, const float *h_t, const void *W_t, DType wdt_t,
                         const int32_t *targets, const float *weights, float tau, float beta, int top_k,
                         float grad_scale, float softcap_s, float softcap_t, float *scratch_s, float *scratch_t,
                         int chunk, int N, int Cs, int Ct, int V);
void cu_install_family(Backend *be);
// cuda_moe.cu: installs the mixture-of-experts ops
void cu_install_moe(Backend *be);
// cuda_vocab.cu: installs the vocabulary-shard ops
void cu_install_vocab(Backend *be);

#endif
