// cuda_loss.cu: the cross-entropy head fused with the LM head, in chunks of rows: per chunk one
// GEMM makes the chunk's logits in the caller's scratch (chunk, V), one block per row turns them
// into loss / accuracy / entropy and, for the backward pass, into dz in place; two GEMMs then
// accumulate dh += dz W and dW += dz^T h. The LM head is converted to the GEMM dtype once per
// call, not per chunk. At most `chunk` rows of logits exist at once (never (N, V)).
#include "cuda_common.cuh"

#define CE_THREADS 1024

// z (nr, V) logits of rows r0.. -> outputs; dz in place when backward.
__global__ void __launch_bounds__(CE_THREADS) ce_row_kernel(float *z, float *row_loss, float *row_correct,
                                                            float *row_entropy, const int32_t *targets,
                                                            const float *weights, float grad_scale, int backward,
                                                            int V, float cap) {
    __shared__ float shf[32];
    __shared__ int shi[32];
    const int r = blockIdx.x;
    float *zr = z + (size_t)r * V;
    const int tgt = targets[r];
    if (tgt == IGNORE_INDEX) {
        if (threadIdx.x == 0) {
            if (row_loss) row_loss[r] = 0.0f;
            if (row_correct) row_correct[r] = 0.0f;
            if (row_entropy) row_entropy[r] = 0.0f;
        }
        if (backward)
            for (int v = threadIdx.x; v < V; v += blockDim.x) zr[v] = 0.0f;
        return;
    }
    if (tgt < 0 || tgt >= V) {
        if (threadIdx.x == 0) printf("still: cuda ce_head: target %d at chunk row %d outside the vocabulary (%d)\n", tgt, r, V);
        __trap();
    }
    if (cap > 0.0f) {  // final-logit soft-capping, each thread its own entries
        for (int v = threadIdx.x; v < V; v += blockDim.x) zr[v] = cap * tanhf(zr[v] / cap);
        __syncthreads();
    }
    float bv = -INFINITY;
    int bi = INT32_MAX;
    if ((int)threadIdx.x < V) bv = zr[threadIdx.x], bi = threadIdx.x;
    for (int v = threadIdx.x + blockDim.x; v < V; v += blockDim.x)
        if (zr[v] > bv) bv = zr[v], bi = v;
    const int amax = block_argmax(bv, bi, shf, shi);
    const float mx = zr[amax];
    float se = 0.0f, sez = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float e = expf(zr[v] - mx);
        se += e;
        sez += e * zr[v];
    }
    se = block_sum(se, shf);
    sez = block_sum(sez, shf);
    const float lse = mx + logf(se);
    const float wr = weights ? weights[r] : 1.0f;
    const float zt = zr[tgt];
    if (threadIdx.x == 0) {
        if (row_loss) row_loss[r] = wr * (lse - zt);
        if (row_correct) row_correct[r] = amax == tgt ? 1.0f : 0.0f;
        if (row_entropy) row_entropy[r] = lse - sez / se;
    }
    if (!backward) return;
    __syncthreads();  // every thread has read zt and z[amax] before z becomes dz
    const float gw = grad_scale * wr;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float c = cap > 0.0f ? 1.0f - (zr[v] / cap) * (zr[v] / cap) : 1.0f;  // d capped / d raw
        zr[v] = gw * (expf(zr[v] - lse) - (v == tgt ? 1.0f : 0.0f)) * c;
    }
}

void cu_ce_head_cap(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                    const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                    float grad_scale, float softcap, float *scratch, int chunk, int N, int C, int V) {
    CHECK(chunk >= 1 && V >= 1 && softcap >= 0);
    CudaCtx *ctx = cu_ctx(be);
    if (dW) cu_weights_written(be, dW);
    const void *Wc = cu_weight_operand(be, CU_SCR_W, W, wdt, (size_t)V * C);
    float *z = scratch;  // (chunk, V)
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int nr = MIN(chunk, N - r0);
        const void *Hc = cu_operand(be, CU_SCR_A, h + (size_t)r0 * C, DT_F32, (size_t)nr * C);
        cu_gemm(be, 0, 1, nr, V, C, 1.0f, Hc, C, Wc, C, 0.0f, z, V);
        ce_row_kernel<<<nr, CE_THREADS, 0, ctx->stream>>>(z, row_loss ? row_loss + r0 : NULL,
                                                          row_correct ? row_correct + r0 : NULL,
                                                          row_entropy ? row_entropy + r0 : NULL, targets + r0,
                                                          weights ? weights + r0 : NULL, grad_scale, dh != NULL, V,
                                                          softcap);
        LAUNCH_CHECK();
        if (!dh) continue;
        const void *G = cu_operand(be, CU_SCR_C, z, DT_F32, (size_t)nr * V);
        cu_gemm(be, 0, 0, nr, C, V, 1.0f, G, V, Wc, C, 1.0f, dh + (size_t)r0 * C, C);
        if (dW) cu_gemm(be, 1, 0, V, C, nr, 1.0f, G, V, Hc, C, 1.0f, dW, C);
    }
}

void cu_ce_head(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights, float grad_scale,
                float *scratch, int chunk, int N, int C, int V) {
    cu_ce_head_cap(be, row_loss, row_correct, row_entropy, dh, dW, h, W, wdt, targets, weights, grad_scale, 0.0f,
                   scratch, chunk, N, C, V);
}
