// cuda_sample.cu: the sampling ops on the device, one block per row. The arithmetic is
// sample_math.h's, compiled for the device, and every step is the reference's (ref_sample.c):
// penalties and bans, then greedy argmax or temperature, top-k (radix select of the k-th key),
// top-p (mass-weighted radix walk on fixed-point masses, ties kept in index order), min-p and
// the inverse-CDF draw in index order. Integer masses add exactly in any order, so the kept sets
// and the drawn id are the reference's for the same u; only the log-probs (double sums) may
// differ in the last bits. Only ids and log-probs need to cross to the host.
#include "cuda_common.cuh"

extern "C" {
#include "../sample_math.h"
}

#define SAMPLE_THREADS 1024
typedef unsigned long long u64;

// seen (B,V) |= onehot(ids (B,T))
__global__ void seen_update_kernel(uint8_t *seen, const int32_t *ids, int B, int T, int V) {
    size_t n = (size_t)B * T;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int32_t id = ids[i];
        if (id >= 0 && id < V) seen[(i / T) * V + id] = 1;
    }
}

void cu_sample_seen_update(Backend *be, uint8_t *seen, const int32_t *ids, int B, int T, int V) {
    if ((size_t)B * T == 0) return;
    seen_update_kernel<<<cu_blocks((size_t)B * T, 256), 256, 0, cu_ctx(be)->stream>>>(seen, ids, B, T, V);
    LAUNCH_CHECK();
}

// Inclusive scan over the block in thread order; *total gets the block's sum.
__device__ u64 block_scan(u64 v, u64 *sh /* 33 */, u64 *total) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        u64 n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    __syncthreads();
    if (lane == 31) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        u64 x = lane < nw ? sh[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            u64 n = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += n;
        }
        sh[lane] = x;
    }
    __syncthreads();
    *total = sh[nw - 1];
    return v + (w > 0 ? sh[w - 1] : 0);
}

__device__ int block_min_int(int v, int *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    int r = lane < nw ? sh[lane] : INT32_MAX;
    for (int o = 16; o > 0; o >>= 1) r = min(r, __shfl_xor_sync(0xffffffffu, r, o));
    return r;
}

// First index of the maximum of s (V); 0 when every score is -inf.
__device__ int first_argmax(const float *s, int V, float *shf, int *shi) {
    float bv = -INFINITY;
    int bi = INT32_MAX;
    if ((int)threadIdx.x < V) bv = s[threadIdx.x], bi = threadIdx.x;
    for (int i = threadIdx.x + blockDim.x; i < V; i += blockDim.x)
        if (s[i] > bv) bv = s[i], bi = i;
    return block_argmax(bv, bi, shf, shi);
}

// Radix walk over the 32-bit keys, four 8-bit digits from the top. by_mass = 0: the key of the
// need-th largest score (counting repeats). by_mass = 1: the key v* at which the descending mass
// reaches `need` (= keep), with the mass of larger keys in *above.
__device__ uint32_t radix_walk(const float *s, int V, int by_mass, float m, u64 need, u64 *above, u64 *hist,
                               uint32_t *sh_prefix, u64 *sh_acc) {
    uint32_t prefix = 0, mask = 0;
    u64 acc = 0;  // counts: need left; mass: above
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int j = threadIdx.x; j < 256; j += blockDim.x) hist[j] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            uint32_t key = sample_key(s[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], by_mass ? (u64)sample_mass(s[i], m) : 1ull);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int d = 255;
            if (by_mass) {
                for (; d > 0 && acc + hist[d] < need; d--) acc += hist[d];
            } else {
                for (; d > 0 && hist[d] < need; d--) need -= hist[d];
            }
            *sh_prefix = prefix | (uint32_t)d << shift;
            *sh_acc = by_mass ? acc : need;
        }
        __syncthreads();
        prefix = *sh_prefix;
        if (by_mass) acc = *sh_acc;
        else need = *sh_acc;
        mask |= 255u << shift;
        __syncthreads();
    }
    if (above) *above = acc;
    return prefix;
}

__global__ void __launch_bounds__(SAMPLE_THREADS) sample_kernel(int32_t *ids, float *logprob, float *logprob_raw,
                                                               float *scores, const float *logits,
                                                               const SampleParams *params, const double *u,
                                                               const uint8_t *seen, const int32_t *banned, int K,
                                                               int V) {
    __shared__ float shf[32];
    __shared__ int shi[32];
    __shared__ double shd[32];
    __shared__ u64 shu[33];
    __shared__ u64 hist[256];
    __shared__ uint32_t sh_prefix;
    __shared__ u64 sh_acc, sh_e;
    const int b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const SampleParams p = params[b];
    const float Tm = p.temperature;
    const float *L = logits + (size_t)b * V;
    float *S = scores + (size_t)b * V;

    float raw_m = -INFINITY;
    double raw_z = 0.0;
    if (logprob_raw) {  // the raw log-softmax normaliser (scores != logits here)
        float mx = -INFINITY;
        for (int i = tid; i < V; i += nt) mx = fmaxf(mx, L[i] / Tm);
        raw_m = block_max(mx, shf);
        double z = 0.0;
        for (int i = tid; i < V; i += nt) z += sample_rel_exp(L[i] / Tm, raw_m);
        raw_z = block_sum(z, shd);
    }
    const float theta = p.repetition_penalty;
    const uint8_t *sn = seen ? seen + (size_t)b * V : NULL;
    for (int i = tid; i < V; i += nt) {
        float v = L[i];
        if (theta != 1.0f && sn[i]) v = sample_penalize(v, theta);
        S[i] = v;
    }
    __syncthreads();
    for (int j = tid; j < K; j += nt) {
        int32_t id = banned[(size_t)b * K + j];
        if (id >= 0 && id < V) S[id] = -INFINITY;
    }
    __syncthreads();

    int id;
    float norm_m;
    if (!p.do_sample) {
        id = first_argmax(S, V, shf, shi);
        norm_m = S[id];
    } else {
        float mx = -INFINITY;
        for (int i = tid; i < V; i += nt) {
            float v = S[i] / Tm;
            S[i] = v;
            mx = fmaxf(mx, v);
        }
        const float m = block_max(mx, shf);  // syncs: S is visible to the block
        if (p.top_k > 0 && p.top_k < V) {
            uint32_t thr = radix_walk(S, V, 0, m, (u64)p.top_k, NULL, hist, &sh_prefix, &sh_acc);
            for (int i = tid; i < V; i += nt)
                if (sample_key(S[i]) < thr) S[i] = -INFINITY;
            __syncthreads();
        }
        if (p.top_p < 1.0 && m != -INFINITY) {
            u64 z = 0;
            for (int i = tid; i < V; i += nt) z += sample_mass(S[i], m);
            const u64 Z = block_sum(z, shu);
            const u64 keep = sample_topp_keep(p.top_p, Z);
            if (keep == 0) {  // only the first maximum survives
                int top = first_argmax(S, V, shf, shi);
                __syncthreads();
                for (int i = tid; i < V; i += nt)
                    if (i != top) S[i] = -INFINITY;
            } else {
                u64 above = 0;
                const uint32_t vstar = radix_walk(S, V, 1, m, keep, &above, hist, &sh_prefix, &sh_acc);
                // ties at v* share one mass e: keep the first n by index, n = ceil((keep - above) / e)
                for (int i = tid; i < V; i += nt)
                    if (sample_key(S[i]) == vstar) sh_e = sample_mass(S[i], m);  // equal values: one e
                __syncthreads();
                const u64 e = sh_e, n = (keep - above + e - 1) / e;
                u64 before = 0;
                for (int base = 0; base < V; base += nt) {
                    int i = base + tid;
                    uint32_t key = i < V ? sample_key(S[i]) : 0;
                    u64 flag = i < V && key == vstar, tile;
                    u64 rank = before + block_scan(flag, shu, &tile) - flag;  // ties before i
                    if (i < V && !(key > vstar || (key == vstar && rank < n))) S[i] = -INFINITY;
                    before += tile;
                }
            }
            __syncthreads();
        }
        if (p.min_p > 0.0f && m != -INFINITY) {
            for (int i = tid; i < V; i += nt)
                if (S[i] != m && sample_rel_exp(S[i], m) < (double)p.min_p) S[i] = -INFINITY;
            __syncthreads();
        }
        id = 0;
        if (m != -INFINITY) {
            u64 z = 0;
            for (int i = tid; i < V; i += nt) z += sample_mass(S[i], m);
            const u64 Zk = block_sum(z, shu);
            const u64 target = sample_target(u[b], Zk);
            u64 before = 0;
            for (int base = 0; base < V; base += nt) {
                int i = base + tid;
                u64 e = i < V ? sample_mass(S[i], m) : 0, tile;
                u64 incl = before + block_scan(e, shu, &tile);
                int found = block_min_int(e != 0 && incl > target ? i : INT32_MAX, shi);
                if (found != INT32_MAX) {
                    id = found;
                    break;
                }
                before += tile;
            }
        }
        norm_m = m;
    }
    if (logprob) {
        double z = 0.0;
        for (int i = tid; i < V; i += nt) z += sample_rel_exp(S[i], norm_m);
        z = block_sum(z, shd);
        if (tid == 0)
            logprob[b] = norm_m == -INFINITY ? -INFINITY : (float)((double)S[id] - (double)norm_m - log(z));
    }
    if (logprob_raw && tid == 0)
        logprob_raw[b] = raw_m == -INFINITY ? -INFINITY : (float)((double)(L[id] / Tm) - (double)raw_m - log(raw_z));
    if (tid == 0) ids[b] = id;
}

void cu_sample_logits(Backend *be, int32_t *ids, float *logprob, float *logprob_raw, float *scores,
                      const float *logits, const SampleParams *params, const double *u, const uint8_t *seen,
                      const int32_t *banned, int K, int B, int V) {
    CHECK_MSG(!(logprob_raw && scores == logits), "sample_logits: logprob_raw needs scores != logits");
    CHECK_MSG(V >= 1 && V <= (1 << 20), "sample_logits: V = %d (fixed-point masses need V <= 2^20)", V);
    if (B <= 0) return;
    // params, u and seen live on the device: which rows need seen / u is checked there (a row
    // with a repetition penalty and no seen reads NULL and faults rather than guessing).
    sample_kernel<<<B, SAMPLE_THREADS, 0, cu_ctx(be)->stream>>>(ids, logprob, logprob_raw, scores, logits, params, u,
                                                                seen, K > 0 ? banned : NULL, K, V);
    LAUNCH_CHECK();
}
