// cuda_kv.cu: the KV cache / decode ops (backend.h, spec in backend/ref/ref_kv.c). The cache write
// is a plain copy kernel. Cached attention runs one block per (row, query, head): keys are taken
// in tiles of KV_TILE, one key per thread (its score in shared memory), with the running max and
// sum of an online softmax; each thread owns output dims d = tid, tid + KV_TILE, ... of an fp32
// accumulator in shared memory. Masked keys and keys after the query's slot are skipped (score
// -inf, weight 0): whatever a masked or unwritten slot holds is never combined with a weight.
// The first slot `start` is read on the device (a captured decode step replays at the next slot
// after one upload); the host keeps it in range, and a kernel given one out of range does nothing.
#include "cuda_common.cuh"

#define KV_TILE 128

// kc, vc (B,NKV,S,HD) at slots [start, start+T) = k, v (B,T,NKV,HD); one thread per element.
__global__ void kv_write_kernel(float *kc, float *vc, const float *k, const float *v, const int32_t *start_slot, int B,
                                int T, int NKV, int HD, int S) {
    const int start = *start_slot;
    if (start < 0 || start + T > S) return;
    size_t n = (size_t)B * T * NKV * HD;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % HD);
        size_t r = i / HD;
        int h = (int)(r % NKV);
        r /= NKV;
        int t = (int)(r % T);
        int b = (int)(r / T);
        size_t dst = (((size_t)b * NKV + h) * S + start + t) * HD + d;
        kc[dst] = k[i];
        vc[dst] = v[i];
    }
}

void cu_kv_cache_write(Backend *be, float *kc, float *vc, const float *k, const float *v, const int32_t *start,
                       int B, int T, int NKV, int HD, int S) {
    CHECK(T <= S);
    size_t n = (size_t)B * T * NKV * HD;
    if (!n) return;
    kv_write_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(kc, vc, k, v, start, B, T, NKV, HD, S);
    LAUNCH_CHECK();
}

// Block (KV_TILE threads) per query: blockIdx.x = (b*T + t)*NH + h. Dynamic shared: q (HD), acc (HD).
// W > 0: sliding window (query slot p sees slots s > p - W); cap > 0: soft-capped scores. With
// knew != NULL the cache is a ring of W slots (slot s at s % W) holding the slots before start,
// and slots >= start are the chunk's own knew, vnew (B,T,NKV,HD) (attention_ring).
__global__ void __launch_bounds__(KV_TILE) attn_cached_kernel(float *out, const float *q, const float *kc,
                                                              const float *vc, const float *knew, const float *vnew,
                                                              const int32_t *kmask, const int32_t *start_slot, int T,
                                                              int NH, int NKV, int HD, int S, float scale, int W,
                                                              float cap) {
    extern __shared__ float sh_dyn[];
    float *qs = sh_dyn, *acc = sh_dyn + HD;
    __shared__ float p[KV_TILE];
    __shared__ float red[32];
    const int tid = threadIdx.x;
    const int start = *start_slot;
    if (start < 0 || start + T > S) return;  // uniform across the block
    const size_t qi = blockIdx.x;  // (b*T + t)*NH + h
    const int h = (int)(qi % NH);
    const int t = (int)((qi / NH) % T);
    const int b = (int)(qi / ((size_t)NH * T));
    const int kh = h / (NH / NKV);
    const float *qt = q + qi * HD;
    const int ring = knew != NULL, Sc = ring ? W : S;  // slots of the cache buffer
    const float *kb = kc + ((size_t)b * NKV + kh) * Sc * HD, *vb = vc + ((size_t)b * NKV + kh) * Sc * HD;
    const int32_t *mb = kmask + (size_t)b * S;
    for (int d = tid; d < HD; d += KV_TILE) qs[d] = qt[d], acc[d] = 0.0f;
    __syncthreads();
    const int nkeys = start + t + 1;                     // slots [first, start+t]
    const int first = W > 0 ? max(0, nkeys - W) : 0;
    float m = -INFINITY, l = 0.0f;    // running max and sum (the same in every thread)
    for (int s0 = first; s0 < nkeys; s0 += KV_TILE) {
        const int s = s0 + tid;
        float sc = -INFINITY;
        if (s < nkeys && mb[s]) {
            const float *ks = !ring ? kb + (size_t)s * HD
                              : s < start ? kb + (size_t)(s % W) * HD
                                          : knew + (((size_t)b * T + (s - start)) * NKV + kh) * HD;
            float dot = 0.0f;
            for (int i = 0; i < HD; i++) dot += qs[i] * ks[i];
            sc = dot * scale;
            if (cap > 0.0f) sc = cap * tanhf(sc / cap);
        }
        const float tmax = block_max(sc, red);
        if (tmax == -INFINITY) continue;  // the whole tile is masked (uniform across the block)
        const float mnew = fmaxf(m, tmax);
        const float e = sc == -INFINITY ? 0.0f : expf(sc - mnew);
        __syncthreads();  // every thread is past block_max's use of red and the previous tile's p
        p[tid] = e;
        const float tsum = block_sum(e, red);  // synchronises: p is complete
        const float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
        l = l * alpha + tsum;
        m = mnew;
        const int nt = min(KV_TILE, nkeys - s0);
        for (int d = tid; d < HD; d += KV_TILE) {
            float a = acc[d] * alpha;
            for (int j = 0; j < nt; j++) {
                const int sj = s0 + j;
                const float *vs = !ring ? vb + (size_t)sj * HD
                                  : sj < start ? vb + (size_t)(sj % W) * HD
                                               : vnew + (((size_t)b * T + (sj - start)) * NKV + kh) * HD;
                if (p[j] != 0.0f) a += p[j] * vs[d];
            }
            acc[d] = a;
        }
        __syncthreads();  // p and red are free for the next tile
    }
    float *ot = out + qi * HD;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no key to attend: out = 0
    for (int d = tid; d < HD; d += KV_TILE) ot[d] = m == -INFINITY ? 0.0f : acc[d] * inv;
}

static float kv_scale(AttnOpts o, int HD) { return o.scale > 0 ? o.scale : 1.0f / sqrtf((float)HD); }

static void launch_cached(Backend *be, float *out, const float *q, const float *kc, const float *vc, const float *k,
                          const float *v, const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV,
                          int HD, int S, AttnOpts o) {
    CHECK(NKV > 0 && NH % NKV == 0 && T <= S && HD >= 1);
    size_t nq = (size_t)B * T * NH;
    if (!nq) return;
    CHECK_MSG(nq <= 0x7fffffffu, "cuda attention_cached: %zu queries exceed one grid", nq);
    size_t shmem = (size_t)2 * HD * sizeof(float);
    CHECK_MSG(shmem <= 40000, "cuda attention_cached: head dim %d too large", HD);
    attn_cached_kernel<<<(unsigned)nq, KV_TILE, shmem, cu_ctx(be)->stream>>>(
        out, q, kc, vc, k, v, kmask, start, T, NH, NKV, HD, S, kv_scale(o, HD), o.window > 0 ? o.window : 0,
        o.softcap > 0 ? o.softcap : 0.0f);
    LAUNCH_CHECK();
}

void cu_attention_cached(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                         const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV, int HD, int S) {
    AttnOpts o = {0, 0.0f, 0.0f, 0};
    launch_cached(be, out, q, kc, vc, NULL, NULL, kmask, start, B, T, NH, NKV, HD, S, o);
}

void cu_attention_cached_opt(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                             const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV, int HD, int S,
                             AttnOpts o) {
    launch_cached(be, out, q, kc, vc, NULL, NULL, kmask, start, B, T, NH, NKV, HD, S, o);
}

void cu_attention_ring(Backend *be, float *out, const float *q, const float *kc, const float *vc, const float *k,
                       const float *v, const int32_t *kmask, const int32_t *start, int B, int T, int NH, int NKV,
                       int HD, int S, AttnOpts o) {
    CHECK(o.window >= 1);
    launch_cached(be, out, q, kc, vc, k, v, kmask, start, B, T, NH, NKV, HD, S, o);
}

// ring kc, vc (B,NKV,W,HD) at (start+t) % W = k, v (B,T,NKV,HD) for t >= T - W; one thread per element.
__global__ void kv_ring_write_kernel(float *kc, float *vc, const float *k, const float *v, const int32_t *start_slot,
                                     int B, int T, int NKV, int HD, int W) {
    const int start = *start_slot;
    if (start < 0) return;
    const int t_lo = max(0, T - W), Tn = T - t_lo;
    size_t n = (size_t)B * Tn * NKV * HD;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % HD);
        size_t r = i / HD;
        int h = (int)(r % NKV);
        r /= NKV;
        int t = t_lo + (int)(r % Tn);
        int b = (int)(r / Tn);
        size_t src = (((size_t)b * T + t) * NKV + h) * HD + d;
        size_t dst = (((size_t)b * NKV + h) * W + (start + t) % W) * HD + d;
        kc[dst] = k[src];
        vc[dst] = v[src];
    }
}

void cu_kv_ring_write(Backend *be, float *kc, float *vc, const float *k, const float *v, const int32_t *start, int B,
                      int T, int NKV, int HD, int W) {
    CHECK(W >= 1);
    size_t n = (size_t)B * MIN(T, W) * NKV * HD;
    if (!n) return;
    kv_ring_write_kernel<<<cu_blocks(n, 256), 256, 0, cu_ctx(be)->stream>>>(kc, vc, k, v, start, B, T, NKV, HD, W);
    LAUNCH_CHECK();
}
