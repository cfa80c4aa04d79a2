// ref_kv.c: reference KV-cache write and cached attention (the spec of the "KV cache / decode"
// ops of backend.h). One query at a time, scores and the weighted sum in double.
#include "ref.h"

#include "../../core/alloc.h"

#include <math.h>
#include <string.h>

// kc, vc (B,NKV,S,HD) at slots [start, start+T) = k, v (B,T,NKV,HD)
static void ref_kv_cache_write(Backend *be, float *kc, float *vc, const float *k, const float *v,
                               const int32_t *start_slot, int B, int T, int NKV, int HD, int S) {
    int start = *start_slot;
    CHECK(start >= 0 && start + T <= S);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NKV; h++) {
                size_t src = (((size_t)b * T + t) * NKV + h) * HD;
                size_t dst = (((size_t)b * NKV + h) * S + start + t) * HD;
                memcpy(kc + dst, k + src, (size_t)HD * sizeof(float));
                memcpy(vc + dst, v + src, (size_t)HD * sizeof(float));
            }
}

// q (B,T,NH,HD) at slots [start, start+T), kc vc (B,NKV,S,HD), kmask (B,S) -> out (B,T,NH,HD)
static void ref_attention_cached_opt(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                                     const int32_t *kmask, const int32_t *start_slot, int B, int T, int NH, int NKV,
                                     int HD, int S, AttnOpts o) {
    int start = *start_slot;
    CHECK(NKV > 0 && NH % NKV == 0 && start >= 0 && start + T <= S);
    int rep = NH / NKV;
    double scale = o.scale > 0 ? (double)o.scale : 1.0 / sqrt((double)HD), cap = o.softcap;
    int nkeys = start + T;
    double *sc = xmalloc((size_t)nkeys * sizeof *sc), *acc = xmalloc((size_t)HD * sizeof *acc);  // (nkeys), (HD)
    for (int b = 0; b < B; b++) {
        const int32_t *mb = kmask + (size_t)b * S;
        for (int h = 0; h < NH; h++) {
            int kh = h / rep;
            const float *kb = kc + ((size_t)b * NKV + kh) * S * HD, *vb = vc + ((size_t)b * NKV + kh) * S * HD;
            for (int t = 0; t < T; t++) {
                const float *qt = q + (((size_t)b * T + t) * NH + h) * HD;
                float *ot = out + (((size_t)b * T + t) * NH + h) * HD;
                int last = start + t, first = o.window > 0 ? MAX(0, last - o.window + 1) : 0;
                double mx = -INFINITY;
                for (int s = first; s <= last; s++) {
                    if (!mb[s]) continue;
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += (double)qt[i] * kb[(size_t)s * HD + i];
                    sc[s] = cap > 0 ? cap * tanh(scale * d / cap) : scale * d;
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int i = 0; i < HD; i++) acc[i] = 0;
                if (mx == -INFINITY) {  // nothing to attend: a padding query
                    for (int i = 0; i < HD; i++) ot[i] = 0.0f;
                    continue;
                }
                double sum = 0;
                for (int s = first; s <= last; s++) {
                    if (!mb[s]) continue;
                    double p = exp(sc[s] - mx);
                    sum += p;
                    for (int i = 0; i < HD; i++) acc[i] += p * vb[(size_t)s * HD + i];
                }
                for (int i = 0; i < HD; i++) ot[i] = (float)(acc[i] / sum);
            }
        }
    }
    free(sc);
    free(acc);
}

static void ref_attention_cached(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                                 const int32_t *kmask, const int32_t *start_slot, int B, int T, int NH, int NKV,
                                 int HD, int S) {
    ref_attention_cached_opt(be, out, q, kc, vc, kmask, start_slot, B, T, NH, NKV, HD, S, (AttnOpts){0});
}

// ---- windowed (ring) cache: slot s of a row lives at ring index s % W ---------------------------

// kc, vc (B,NKV,W,HD) at ring indices (start+t) % W = k, v (B,T,NKV,HD) for the chunk's last
// min(T, W) tokens (earlier ones would be overwritten within the chunk).
static void ref_kv_ring_write(Backend *be, float *kc, float *vc, const float *k, const float *v,
                              const int32_t *start_slot, int B, int T, int NKV, int HD, int W) {
    int start = *start_slot;
    CHECK(start >= 0 && W >= 1);
    for (int b = 0; b < B; b++)
        for (int t = MAX(0, T - W); t < T; t++)
            for (int h = 0; h < NKV; h++) {
                size_t src = (((size_t)b * T + t) * NKV + h) * HD;
                size_t dst = (((size_t)b * NKV + h) * W + (start + t) % W) * HD;
                memcpy(kc + dst, k + src, (size_t)HD * sizeof(float));
                memcpy(vc + dst, v + src, (size_t)HD * sizeof(float));
            }
}

// q (B,T,NH,HD) at slots [start, start+T); ring kc vc (B,NKV,W,HD) holding slots [start-W, start);
// the chunk's own k v (B,T,NKV,HD); kmask (B,S) by absolute slot -> out (B,T,NH,HD).
static void ref_attention_ring(Backend *be, float *out, const float *q, const float *kc, const float *vc,
                               const float *k, const float *v, const int32_t *kmask, const int32_t *start_slot, int B,
                               int T, int NH, int NKV, int HD, int S, AttnOpts o) {
    int start = *start_slot, W = o.window;
    CHECK(NKV > 0 && NH % NKV == 0 && start >= 0 && start + T <= S && W >= 1);
    int rep = NH / NKV;
    double scale = o.scale > 0 ? (double)o.scale : 1.0 / sqrt((double)HD), cap = o.softcap;
    double *sc = xmalloc((size_t)W * sizeof *sc), *acc = xmalloc((size_t)HD * sizeof *acc);  // (W), (HD)
    for (int b = 0; b < B; b++) {
        const int32_t *mb = kmask + (size_t)b * S;
        for (int h = 0; h < NH; h++) {
            int kh = h / rep;
            for (int t = 0; t < T; t++) {
                const float *qt = q + (((size_t)b * T + t) * NH + h) * HD;
                float *ot = out + (((size_t)b * T + t) * NH + h) * HD;
                int last = start + t, first = MAX(0, last - W + 1);
                double mx = -INFINITY;
                for (int s = first; s <= last; s++) {
                    if (!mb[s]) continue;
                    const float *ks = s < start ? kc + (((size_t)b * NKV + kh) * W + s % W) * HD
                                                : k + (((size_t)b * T + (s - start)) * NKV + kh) * HD;
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += (double)qt[i] * ks[i];
                    double x = scale * d;
                    sc[s - first] = cap > 0 ? cap * tanh(x / cap) : x;
                    if (sc[s - first] > mx) mx = sc[s - first];
                }
                for (int i = 0; i < HD; i++) acc[i] = 0;
                if (mx == -INFINITY) {
                    for (int i = 0; i < HD; i++) ot[i] = 0.0f;
                    continue;
                }
                double sum = 0;
                for (int s = first; s <= last; s++) {
                    if (!mb[s]) continue;
                    const float *vs = s < start ? vc + (((size_t)b * NKV + kh) * W + s % W) * HD
                                                : v + (((size_t)b * T + (s - start)) * NKV + kh) * HD;
                    double p = exp(sc[s - first] - mx);
                    sum += p;
                    for (int i = 0; i < HD; i++) acc[i] += p * vs[i];
                }
                for (int i = 0; i < HD; i++) ot[i] = (float)(acc[i] / sum);
            }
        }
    }
    free(sc);
    free(acc);
}

void backend_ref_install_kv(Backend *be) {
    be->kv_cache_write = ref_kv_cache_write;
    be->attention_cached = ref_attention_cached;
    be->attention_cached_opt = ref_attention_cached_opt;
    be->kv_ring_write = ref_kv_ring_write;
    be->attention_ring = ref_attention_ring;
}
