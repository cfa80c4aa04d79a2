// cuda_ops.cu: GEMM helpers and the embedding, RMSNorm, linear, RoPE, SwiGLU, elementwise and
// AdamW ops. Forward writes with `=`, backward accumulates with `+=` (backend.h); every
// reduction has a fixed partition and order, so two runs give the same bits.
#include "cuda_common.cuh"

#include "../dropout_math.h"

// ---- operand conversion and GEMM ------------------------------------------------------------
__global__ void convert_kernel(void *dst, DType ddt, const void *src, DType sdt, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = cu_wload(src, sdt, i);
        if (ddt == DT_BF16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x);
        else ((float *)dst)[i] = x;
    }
}

void cu_convert(Backend *be, void *dst, DType ddt, const void *src, DType sdt, size_t n) {
    convert_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(dst, ddt, src, sdt, n);
    LAUNCH_CHECK();
}

const void *cu_operand(Backend *be, CuScratchSlot slot, const void *src, DType sdt, size_t n) {
    CudaCtx *ctx = cu_ctx(be);
    if (sdt == ctx->gemm_dt) return src;
    void *dst = cu_scratch(be, slot, n * dtype_size(ctx->gemm_dt));
    cu_convert(be, dst, ctx->gemm_dt, src, sdt, n);
    return dst;
}

void cu_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
             int ldb, float beta, float *C, int ldc) {
    CudaCtx *ctx = cu_ctx(be);
    if (M <= 0 || N <= 0) return;
    cudaDataType_t t = ctx->gemm_dt == DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    CUBLAS_CHECK(cublasGemmEx(ctx->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                              B, t, ldb, A, t, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

// Column sums: block (32, 8) covers 32 columns of one row range; partial[chunk][c].
__global__ void colsum_partial_kernel(float *partial, const float *a, const float *b, const float *r, int N, int C,
                                      int rows_per_chunk) {
    __shared__ float sh[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    int n0 = chunk * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    float acc = 0.0f;
    if (c < C)
        for (int n = n0 + threadIdx.y; n < n1; n += 8) {
            size_t i = (size_t)n * C + c;
            acc += b ? a[i] * b[i] * r[n] : a[i];
        }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = 0.0f;
        for (int j = 0; j < 8; j++) s += sh[j][threadIdx.x];
        partial[(size_t)chunk * C + c] = s;
    }
}

__global__ void colsum_final_kernel(float *dst, const float *partial, int chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += partial[(size_t)k * C + c];
    dst[c] += s;
}

void cu_colsum_add(Backend *be, float *dst, const float *a, const float *b, const float *r, int N, int C) {
    CudaCtx *ctx = cu_ctx(be);
    if (N <= 0 || C <= 0) return;
    // The partition depends on (N, C) only, never on the device.
    int chunks = (N + 63) / 64;
    int col_blocks = (C + 31) / 32;
    while (chunks > 1 && (size_t)chunks * col_blocks > 4096) chunks = (chunks + 1) / 2;
    int rows = (N + chunks - 1) / chunks;
    chunks = (N + rows - 1) / rows;
    float *partial = (float *)cu_scratch(be, CU_SCR_RED, (size_t)chunks * C * sizeof(float));
    colsum_partial_kernel<<<dim3(col_blocks, chunks), dim3(32, 8), 0, ctx->stream>>>(partial, a, b, r, N, C, rows);
    LAUNCH_CHECK();
    colsum_final_kernel<<<(C + 255) / 256, 256, 0, ctx->stream>>>(dst, partial, chunks, C);
    LAUNCH_CHECK();
}

// ---- embedding ------------------------------------------------------------------------------
// ids (N), wte (V,C) -> out (N,C)
__global__ void embedding_fwd_kernel(float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, c = i % C;
        out[i] = cu_wload(wte, wdt, (size_t)ids[n] * C + c);
    }
}

void cu_embedding_forward(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C) {
    embedding_fwd_kernel<<<cu_blocks((size_t)N * C, 256), 256, 0, cu_ctx(be)->stream>>>(out, ids, wte, wdt, N, C);
    LAUNCH_CHECK();
}

// dwte (V,C) += scatter of dout (N,C): one thread per column walks the rows in order, so
// repeated ids add in the reference's order (deterministic, no atomics).
__global__ void embedding_bwd_kernel(float *dwte, const float *dout, const int32_t *ids, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int n = 0; n < N; n++) {
        float *d = dwte + (size_t)ids[n] * C + c;
        *d += dout[(size_t)n * C + c];
    }
}

void cu_embedding_backward(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C) {
    cu_weights_written(be, dwte);
    embedding_bwd_kernel<<<(C + 63) / 64, 64, 0, cu_ctx(be)->stream>>>(dwte, dout, ids, N, C);
    LAUNCH_CHECK();
}

// ---- RMSNorm: one warp per row ----------------------------------------------------------------
// inp (N,C), w (C) -> out (N,C), rstd (N)
__global__ void rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    ss = warp_sum(ss);
    float r = 1.0f / sqrtf(ss / C + eps);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = x[c] * r * w[c];
    if (lane == 0) rstd[row] = r;
}

void cu_rmsnorm_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps) {
    rmsnorm_fwd_kernel<<<(N + 7) / 8, 256, 0, cu_ctx(be)->stream>>>(out, rstd, inp, w, N, C, eps);
    LAUNCH_CHECK();
}

// dx_j += r (g_j w_j - x_j r^2 mean_i(g_i w_i x_i))
__global__ void rmsnorm_bwd_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                   const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += g[c] * w[c] * x[c];
    dot = warp_sum(dot);
    float r = rstd[row], k = r * r * dot / C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) dx[c] += r * (g[c] * w[c] - x[c] * k);
}

void cu_rmsnorm_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C) {
    if (dinp) {
        rmsnorm_bwd_kernel<<<(N + 7) / 8, 256, 0, cu_ctx(be)->stream>>>(dinp, dout, inp, w, rstd, N, C);
        LAUNCH_CHECK();
    }
    if (dw) cu_weights_written(be, dw), cu_colsum_add(be, dw, dout, inp, rstd, N, C);
}

// ---- linear ---------------------------------------------------------------------------------
__global__ void bias_add_kernel(float *out, const float *bias, int N, int OC) {
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

// Q8_0 weights against a few input rows (decode): one warp per output row, lane j takes blocks
// j, j + 32, ... of the row, so each block's 34 bytes are read once for all N rows; per block
// t = q . x in fp32, acc += d * t; the warp sums its lanes in a fixed tree (shuffles).
// inp (N,C), w (OC,C) Q8_0, bias (OC) or NULL -> out (N,OC); N <= CU_GEMV_Q8_ROWS, C % 32 == 0.
#define CU_GEMV_Q8_ROWS 8
__global__ void gemv_q8_kernel(float *out, const float *inp, const BlockQ8_0 *w, const float *bias, int N, int C,
                               int OC) {
    int o = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (o >= OC) return;  // whole warps leave together
    int nb = C / Q8_0_BLOCK;
    float acc[CU_GEMV_Q8_ROWS];
    for (int n = 0; n < CU_GEMV_Q8_ROWS; n++) acc[n] = 0.0f;
    for (int b = lane; b < nb; b += 32) {
        const BlockQ8_0 *blk = w + (size_t)o * nb + b;
        float d = __half2float(__ushort_as_half(blk->d));
        float q[Q8_0_BLOCK];
        for (int j = 0; j < Q8_0_BLOCK; j++) q[j] = (float)blk->qs[j];
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C + (size_t)b * Q8_0_BLOCK;
            float t = 0.0f;
            for (int j = 0; j < Q8_0_BLOCK; j++) t = fmaf(q[j], x[j], t);
            acc[n] = fmaf(d, t, acc[n]);
        }
    }
    for (int n = 0; n < N; n++) {
        float v = acc[n];
        for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
        if (lane == 0) out[(size_t)n * OC + o] = v + (bias ? bias[o] : 0.0f);
    }
}

// inp (N,C), w (OC,C), bias (OC) or NULL -> out (N,OC)
void cu_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                       int C, int OC) {
    if (wdt == DT_Q8_0 && N <= CU_GEMV_Q8_ROWS && C % Q8_0_BLOCK == 0) {
        const int warps = 8;
        gemv_q8_kernel<<<(OC + warps - 1) / warps, warps * 32, 0, cu_ctx(be)->stream>>>(
            out, inp, (const BlockQ8_0 *)w, bias, N, C, OC);
        LAUNCH_CHECK();
        return;
    }
    const void *A = cu_operand(be, CU_SCR_A, inp, DT_F32, (size_t)N * C);
    const void *Bw = cu_weight_operand(be, CU_SCR_B, w, wdt, (size_t)OC * C);
    cu_gemm(be, 0, 1, N, OC, C, 1.0f, A, C, Bw, C, 0.0f, out, OC);
    if (bias) {
        bias_add_kernel<<<cu_blocks((size_t)N * OC, 256), 256, 0, cu_ctx(be)->stream>>>(out, bias, N, OC);
        LAUNCH_CHECK();
    }
}

// dinp (N,C) += dout w ; dw (OC,C) += dout^T inp ; dbias (OC) += colsum(dout)
void cu_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const void *w, DType wdt, int N, int C, int OC) {
    const void *G = (dinp || dw) ? cu_operand(be, CU_SCR_A, dout, DT_F32, (size_t)N * OC) : NULL;
    if (dinp) {
        const void *Bw = cu_weight_operand(be, CU_SCR_B, w, wdt, (size_t)OC * C);
        cu_gemm(be, 0, 0, N, C, OC, 1.0f, G, OC, Bw, C, 1.0f, dinp, C);
    }
    if (dw) {
        cu_weights_written(be, dw);
        const void *X = cu_operand(be, CU_SCR_C, inp, DT_F32, (size_t)N * C);
        cu_gemm(be, 1, 0, OC, C, N, 1.0f, G, OC, X, C, 1.0f, dw, C);
    }
    if (dbias) cu_colsum_add(be, dbias, dout, NULL, NULL, N, OC);
}

// ---- RoPE: one thread per (row, frequency); cos/sin in double as the reference --------------
__global__ void rope_kernel(float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH, int HD,
                            int RD, int dir) {
    int half = RD / 2;
    size_t total = (size_t)N * half;
    for (size_t id = blockIdx.x * (size_t)blockDim.x + threadIdx.x; id < total; id += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(id / half), i = (int)(id % half);
        float angle = (float)pos[n] * inv_freq[i];
        double sn, cs;
        sincos((double)angle, &sn, &cs);
        double c = cs * mscale, s = dir * sn * mscale;
        for (int h = 0; h < NH; h++) {
            float *xh = x + ((size_t)n * NH + h) * HD;
            double a = xh[i], b = xh[i + half];
            xh[i] = (float)(a * c - b * s);
            xh[i + half] = (float)(b * c + a * s);
        }
    }
}

void cu_rope_forward(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                     int HD, int RD) {
    rope_kernel<<<cu_blocks((size_t)N * (RD / 2), 128), 128, 0, cu_ctx(be)->stream>>>(x, pos, inv_freq, mscale, N, NH,
                                                                                     HD, RD, +1);
    LAUNCH_CHECK();
}

void cu_rope_backward(Backend *be, float *dx, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                      int HD, int RD) {
    rope_kernel<<<cu_blocks((size_t)N * (RD / 2), 128), 128, 0, cu_ctx(be)->stream>>>(dx, pos, inv_freq, mscale, N,
                                                                                     NH, HD, RD, -1);
    LAUNCH_CHECK();
}

// ---- SwiGLU and elementwise -----------------------------------------------------------------
#define GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void swiglu_fwd_kernel(float *out, const float *gate, const float *up, size_t n) {
    GRID_LOOP(i, n) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void swiglu_bwd_kernel(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                  size_t n) {
    GRID_LOOP(i, n) {
        float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        if (dgate) dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (dup) dup[i] += dout[i] * g * s;
    }
}

void cu_swiglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n) {
    swiglu_fwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(out, gate, up, n);
    LAUNCH_CHECK();
}

void cu_swiglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                        size_t n) {
    swiglu_bwd_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(dgate, dup, dout, gate, up, n);
    LAUNCH_CHECK();
}

__global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_LOOP(i, n) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float *x, float s, size_t n) {
    GRID_LOOP(i, n) x[i] *= s;
}

void cu_add(Backend *be, float *out, const float *a, const float *b, size_t n) {
    cu_weights_written(be, out);
    add_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(out, a, b, n);
    LAUNCH_CHECK();
}

void cu_scale(Backend *be, float *x, float s, size_t n) {
    cu_weights_written(be, x);
    scale_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(x, s, n);
    LAUNCH_CHECK();
}

__global__ void dropout_kernel(float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt) {
    float s = dropout_scale(p);
    uint64_t k = *key;
    GRID_LOOP(i, n) out[i] = dropout_keep(k, salt, i, p) ? inp[i] * s : 0.0f;
}

void cu_dropout(Backend *be, float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt) {
    cu_weights_written(be, out);
    dropout_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(out, inp, n, p, key, salt);
    LAUNCH_CHECK();
}

// sum of squares in double: fixed grid of 256 blocks, then one block over the partials.
#define SUMSQ_BLOCKS 256
__global__ void sumsq_partial_kernel(double *partial, const float *x, size_t n) {
    __shared__ double sh[32];
    double acc = 0.0;
    GRID_LOOP(i, n) acc += (double)x[i] * x[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sumsq_final_kernel(double *out, const double *partial, int n) {
    __shared__ double sh[32];
    double acc = threadIdx.x < (unsigned)n ? partial[threadIdx.x] : 0.0;
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

double cu_sumsq(Backend *be, const float *x, size_t n) {
    CudaCtx *ctx = cu_ctx(be);
    CHECK_MSG(!ctx->capturing, "cuda: sumsq returns to the host and cannot be recorded in a graph");
    double *partial = (double *)cu_scratch(be, CU_SCR_RED, SUMSQ_BLOCKS * sizeof(double));
    sumsq_partial_kernel<<<SUMSQ_BLOCKS, 256, 0, ctx->stream>>>(partial, x, n);
    LAUNCH_CHECK();
    sumsq_final_kernel<<<1, SUMSQ_BLOCKS, 0, ctx->stream>>>(ctx->dev_d, partial, SUMSQ_BLOCKS);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpyAsync(ctx->host_d, ctx->dev_d, sizeof(double), cudaMemcpyDeviceToHost, ctx->stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
    return *ctx->host_d;
}

// ---- AdamW: torch.optim.AdamW, in double as the reference; m and v stored as fp32 ------------
__global__ void adamw_kernel(float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
                             double eps, double wd, double step, double sbc2, double gs) {
    GRID_LOOP(i, n) {
        double gi = (double)g[i] * gs;
        double pi = (double)p[i] * (1.0 - lr * wd);
        float mi = (float)(b1 * m[i] + (1.0 - b1) * gi);
        float vi = (float)(b2 * v[i] + (1.0 - b2) * gi * gi);
        m[i] = mi;
        v[i] = vi;
        p[i] = (float)(pi - step * mi / (sqrt((double)vi) / sbc2 + eps));
    }
}

void cu_adamw(Backend *be, float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
              double eps, double wd, int t, float grad_scale) {
    CHECK(t >= 1);
    cu_weights_written(be, p);
    double bc1 = 1.0 - pow((double)b1, t), bc2 = 1.0 - pow((double)b2, t);
    adamw_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(p, m, v, g, n, lr, b1, b2, eps, wd, lr / bc1,
                                                                     sqrt(bc2), (double)grad_scale);
    LAUNCH_CHECK();
}
