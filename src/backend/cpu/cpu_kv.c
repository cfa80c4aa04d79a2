// cpu_kv.c: KV-cache write and cached attention on sgemm (the "KV cache / decode" ops of
// backend.h). Cached attention runs as tasks over (batch row, query head, block of QB queries):
// the block's scores against its keys are one sgemm, the masked softmax a row loop, out = P V a
// second sgemm writing straight into the strided output. Keys before a row's first unmasked
// slot (left padding) and after the block's last query are never touched.
#include "cpu.h"

#include <math.h>
#include <omp.h>

#define KV_QB 64  // query rows per block

// kc, vc (B,NKV,S,HD) at slots [start, start+T) = k, v (B,T,NKV,HD)
static void cpu_kv_cache_write(Backend *be, float *kc, float *vc, const float *k, const float *v,
                               const int32_t *start_slot, int B, int T, int NKV, int HD, int S) {
    int start = *start_slot;
    CHECK(start >= 0 && start + T <= S);
    size_t row = (size_t)HD * sizeof(float);
#pragma omp parallel for collapse(2) schedule(static) num_threads(be->threads) if ((size_t)B * T * NKV * HD > 65536)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NKV; h++)
            for (int t = 0; t < T; t++) {
                size_t src = (((size_t)b * T + t) * NKV + h) * HD;
                size_t dst = (((size_t)b * NKV + h) * S + start + t) * HD;
                memcpy(kc + dst, k + src, row);
                memcpy(vc + dst, v + src, row);
            }
}

// One task: query head h of row b, queries [t0, t1) (slots start+t0 ..), keys from slot klo:
// kb, vb (nk, HD) hold slots klo, klo+1, ... and m (nk) their mask. W > 0: sliding window;
// cap > 0: soft-capped scores.
static void attend_block(float *out, const float *q, const float *kb, const float *vb, const int32_t *m, float *sc,
                         int T, int NH, int HD, int h, int b, int t0, int t1, int klo, int start, float scale, int W,
                         float cap) {
    int nq = t1 - t0, nk = start + t1 - klo;
    size_t ld = (size_t)NH * HD;
    const float *qh = q + ((size_t)b * T + t0) * ld + (size_t)h * HD;
    float *oh = out + ((size_t)b * T + t0) * ld + (size_t)h * HD;
    if (nk <= 0) {  // every query of the block is padding
        for (int i = 0; i < nq; i++) memset(oh + i * ld, 0, (size_t)HD * sizeof(float));
        return;
    }
    // sc (nq, nk) = scale * Qh Kb^T
    cpu_sgemm(0, 1, nq, nk, HD, scale, qh, (int)ld, kb, HD, 0.0f, sc, nk);
    for (int i = 0; i < nq; i++) {
        float *row = sc + (size_t)i * nk;
        int lim = start + t0 + i - klo;        // keys j <= lim are causal for this query
        int lo = W > 0 ? lim - W + 1 : 0;      // and j >= lo inside its window
        if (cap > 0) {
            float inv = 1.0f / cap;
            for (int j = 0; j < nk; j++) row[j] = cap * tanhf(row[j] * inv);
        }
        float mx = -INFINITY;
        for (int j = MAX(lo, 0); j <= lim; j++)
            if (m[j] && row[j] > mx) mx = row[j];
        if (mx == -INFINITY) {  // a padding query: nothing to attend
            for (int j = 0; j < nk; j++) row[j] = 0.0f;
            continue;
        }
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < nk; j++) {
            float e = (j <= lim && j >= lo && m[j]) ? cpu_expf(row[j] - mx) : 0.0f;
            row[j] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j < nk; j++) row[j] *= inv;
    }
    // out (nq, HD) strided by ld = P (nq, nk) V (nk, HD)
    cpu_sgemm(0, 0, nq, HD, nk, 1.0f, sc, nk, vb, HD, 0.0f, oh, (int)ld);
}

// The first unmasked slot of each row (B), below start + T.
static int32_t *first_keys(Backend *be, const int32_t *kmask, int B, int S, int end) {
    int32_t *klo = cpu_scratch(be, CPU_SCR_INDEX, (size_t)B * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        const int32_t *mb = kmask + (size_t)b * S;
        int s = 0;
        while (s < end && !mb[s]) s++;
        klo[b] = s;
    }
    return klo;
}

static float opt_scale(AttnOpts o, int HD) { return o.scale > 0 ? o.scale : (float)(1.0 / sqrt((double)HD)); }

// q (B,T,NH,HD) at slots [start, start+T), kc vc (B,NKV,S,HD), kmask (B,S) -> out (B,T,NH,HD)
static void cpu_attention_cached_opt(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                                     const int32_t *kmask, const int32_t *start_slot, int B, int T, int NH, int NKV,
                                     int HD, int S, AttnOpts o) {
    int start = *start_slot;
    CHECK(NKV > 0 && NH % NKV == 0 && start >= 0 && start + T <= S);
    int rep = NH / NKV, nblk = (T + KV_QB - 1) / KV_QB, nthr = be->threads, W = o.window;
    float scale = opt_scale(o, HD);
    int qb = MIN(T, KV_QB);
    const int32_t *klo = first_keys(be, kmask, B, S, start + T);
    size_t per = (size_t)qb * (start + T);
    float *scr = cpu_scratch(be, CPU_SCR_ATTN, (size_t)nthr * per * sizeof(float));
    long ntask = (long)B * NH * nblk;
#pragma omp parallel for schedule(static) num_threads(nthr) if (ntask > 1 && (size_t)T * (start + T) * HD > 4096)
    for (long task = 0; task < ntask; task++) {
        int blk = (int)(task % nblk), h = (int)(task / nblk % NH), b = (int)(task / nblk / NH);
        int t0 = blk * KV_QB, t1 = MIN(T, t0 + KV_QB), kh = h / rep;
        int lo = klo[b];
        if (W > 0) lo = MAX(lo, start + t0 - W + 1);  // no query of the block sees further back
        const float *kb = kc + ((size_t)b * NKV + kh) * S * HD, *vb = vc + ((size_t)b * NKV + kh) * S * HD;
        float *sc = scr + (size_t)omp_get_thread_num() * per;
        attend_block(out, q, kb + (size_t)lo * HD, vb + (size_t)lo * HD, kmask + (size_t)b * S + lo, sc, T, NH, HD,
                     h, b, t0, t1, lo, start, scale, W, o.softcap);
    }
}

static void cpu_attention_cached(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                                 const int32_t *kmask, const int32_t *start_slot, int B, int T, int NH, int NKV,
                                 int HD, int S) {
    cpu_attention_cached_opt(be, out, q, kc, vc, kmask, start_slot, B, T, NH, NKV, HD, S, (AttnOpts){0});
}

// ---- windowed (ring) cache: slot s of a row lives at ring index s % W ---------------------------

// kc, vc (B,NKV,W,HD) at ring indices (start+t) % W = k, v (B,T,NKV,HD), the chunk's last min(T, W)
static void cpu_kv_ring_write(Backend *be, float *kc, float *vc, const float *k, const float *v,
                              const int32_t *start_slot, int B, int T, int NKV, int HD, int W) {
    int start = *start_slot, t_lo = MAX(0, T - W);
    CHECK(start >= 0 && W >= 1);
    size_t row = (size_t)HD * sizeof(float);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NKV; h++)
            for (int t = t_lo; t < T; t++) {
                size_t src = (((size_t)b * T + t) * NKV + h) * HD;
                size_t dst = (((size_t)b * NKV + h) * W + (start + t) % W) * HD;
                memcpy(kc + dst, k + src, row);
                memcpy(vc + dst, v + src, row);
            }
}

// Ring attention: each task gathers its block's keys (slots lo .. start+t1-1, at most W + KV_QB
// of them) from the ring (slots < start) and the chunk (slots >= start) into scratch, then runs
// attend_block on them.
static void cpu_attention_ring(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                               const float *k, const float *v, const int32_t *kmask, const int32_t *start_slot, int B,
                               int T, int NH, int NKV, int HD, int S, AttnOpts o) {
    int start = *start_slot, W = o.window;
    CHECK(NKV > 0 && NH % NKV == 0 && start >= 0 && start + T <= S && W >= 1);
    int rep = NH / NKV, nblk = (T + KV_QB - 1) / KV_QB, nthr = be->threads;
    float scale = opt_scale(o, HD);
    int qb = MIN(T, KV_QB), maxk = W + qb;  // keys of one block: its window plus its queries
    const int32_t *klo = first_keys(be, kmask, B, S, start + T);
    size_t per = (size_t)qb * maxk + 2 * (size_t)maxk * HD + (size_t)maxk;  // scores, K, V, mask
    float *scr = cpu_scratch(be, CPU_SCR_ATTN, (size_t)nthr * per * sizeof(float));
    long ntask = (long)B * NH * nblk;
#pragma omp parallel for schedule(static) num_threads(nthr) if (ntask > 1 && (size_t)T * maxk * HD > 4096)
    for (long task = 0; task < ntask; task++) {
        int blk = (int)(task % nblk), h = (int)(task / nblk % NH), b = (int)(task / nblk / NH);
        int t0 = blk * KV_QB, t1 = MIN(T, t0 + KV_QB), kh = h / rep;
        int lo = MAX(klo[b], start + t0 - W + 1), hi = start + t1;  // slots [lo, hi)
        float *sc = scr + (size_t)omp_get_thread_num() * per, *K = sc + (size_t)qb * maxk, *V = K + (size_t)maxk * HD;
        int32_t *M = (int32_t *)(V + (size_t)maxk * HD);
        for (int s = lo; s < hi; s++) {
            const float *ks, *vs;
            if (s < start) {
                size_t r = (((size_t)b * NKV + kh) * W + s % W) * HD;
                ks = kc + r, vs = vc + r;
            } else {
                size_t r = (((size_t)b * T + (s - start)) * NKV + kh) * HD;
                ks = k + r, vs = v + r;
            }
            memcpy(K + (size_t)(s - lo) * HD, ks, (size_t)HD * sizeof(float));
            memcpy(V + (size_t)(s - lo) * HD, vs, (size_t)HD * sizeof(float));
            M[s - lo] = kmask[(size_t)b * S + s];
        }
        attend_block(out, q, K, V, M, sc, T, NH, HD, h, b, t0, t1, lo, start, scale, W, o.softcap);
    }
}

void backend_cpu_install_kv(Backend *be) {
    be->kv_cache_write = cpu_kv_cache_write;
    be->attention_cached = cpu_attention_cached;
    be->attention_cached_opt = cpu_attention_cached_opt;
    be->kv_ring_write = cpu_kv_ring_write;
    be->attention_ring = cpu_attention_ring;
}
