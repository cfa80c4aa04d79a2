// ref_attention.c: reference causal self-attention with GQA and segment masks. One query at a
// time, every score in double; the backward pass recomputes probabilities from the saved lse.
#include "ref.h"

#include "../../core/alloc.h"

#include <math.h>

// Query t attends key s iff s <= t, seg[s] == seg[t] != 0 and, with a window W > 0, t - s < W.
static int attends(const int32_t *segb, int t, int s, int W) {
    return s <= t && segb[t] != 0 && segb[s] == segb[t] && (W <= 0 || t - s < W);
}

static double opt_scale(AttnOpts o, int HD) { return o.scale > 0 ? (double)o.scale : 1.0 / sqrt((double)HD); }

// The score of a raw scaled product x: x, or cap tanh(x / cap) with a soft-cap.
static double capped(double x, double cap) { return cap > 0 ? cap * tanh(x / cap) : x; }
// d score / d x at the score s = capped(x): 1 - (s / cap)^2 with a soft-cap, else 1.
static double capped_grad(double s, double cap) { return cap > 0 ? 1.0 - (s / cap) * (s / cap) : 1.0; }

static double dot(const float *a, const float *b, int n) {
    double acc = 0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

// q (B,T,NH,HD), k v (B,T,NKV,HD), seg (B,T) -> out (B,T,NH,HD), lse (B,NH,T)
void ref_attention_forward_opt(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                               const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o) {
    CHECK(NKV > 0 && NH % NKV == 0);
    int rep = NH / NKV;
    double scale = opt_scale(o, HD), cap = o.softcap;
    double *sc = xmalloc((size_t)T * sizeof *sc), *acc = xmalloc((size_t)HD * sizeof *acc);  // (T), (HD): one query
    for (int b = 0; b < B; b++) {
        const int32_t *segb = seg + (size_t)b * T;
        for (int h = 0; h < NH; h++) {
            int kh = h / rep;
            for (int t = 0; t < T; t++) {
                const float *qt = q + (((size_t)b * T + t) * NH + h) * HD;
                float *ot = out + (((size_t)b * T + t) * NH + h) * HD;
                float *lt = lse + ((size_t)b * NH + h) * T + t;
                if (segb[t] == 0) {
                    for (int d = 0; d < HD; d++) ot[d] = 0.0f;
                    *lt = 0.0f;
                    continue;
                }
                double mx = -INFINITY;
                for (int s = 0; s <= t; s++) {
                    sc[s] = attends(segb, t, s, o.window)
                                ? capped(scale * dot(qt, k + (((size_t)b * T + s) * NKV + kh) * HD, HD), cap)
                                : -INFINITY;
                    if (sc[s] > mx) mx = sc[s];
                }
                double sum = 0;
                for (int s = 0; s <= t; s++) sum += exp(sc[s] - mx);
                double l = mx + log(sum);
                for (int d = 0; d < HD; d++) acc[d] = 0;
                for (int s = 0; s <= t; s++) {
                    double p = exp(sc[s] - l);
                    if (p == 0) continue;
                    const float *vs = v + (((size_t)b * T + s) * NKV + kh) * HD;
                    for (int d = 0; d < HD; d++) acc[d] += p * vs[d];
                }
                for (int d = 0; d < HD; d++) ot[d] = (float)acc[d];
                *lt = (float)l;
            }
        }
    }
    free(sc);
    free(acc);
}

// The backward pass's inputs, so that helpers can index them.
typedef struct {
    const float *dout, *out, *lse, *q, *k, *v;
    int T, NH, NKV, HD, rep;
    double scale, cap;
} AttnBwd;

static size_t qidx(const AttnBwd *a, int b, int t, int h) { return (((size_t)b * a->T + t) * a->NH + h) * a->HD; }
static size_t kidx(const AttnBwd *a, int b, int s, int kh) { return (((size_t)b * a->T + s) * a->NKV + kh) * a->HD; }

// P_ts and dS_ts (the gradient of the raw scaled product, through the soft-cap) for query head h
// of batch row b.
static void prob_ds(const AttnBwd *a, int b, int h, int t, int s, double *p, double *ds) {
    size_t qi = qidx(a, b, t, h), ks = kidx(a, b, s, h / a->rep);
    double l = a->lse[((size_t)b * a->NH + h) * a->T + t];
    double sc = capped(a->scale * dot(a->q + qi, a->k + ks, a->HD), a->cap);
    *p = exp(sc - l);
    *ds = *p * (dot(a->dout + qi, a->v + ks, a->HD) - dot(a->dout + qi, a->out + qi, a->HD)) * capped_grad(sc, a->cap);
}

// With P_ts = exp(scale q_t.k_s - lse_t) and D_t = dout_t . out_t:
//   dS_ts = P_ts (dout_t . v_s - D_t); dq_t += scale sum_s dS_ts k_s; dk_s += scale sum_t dS_ts q_t;
//   dv_s += sum_t P_ts dout_t.
// Two passes so that every gradient element is one double sum: queries outer for dq, keys outer
// (over the query heads of the key's group) for dk and dv.
// dq (B,T,NH,HD) +=, dk dv (B,T,NKV,HD) +=
void ref_attention_backward_opt(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                                const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                                int B, int T, int NH, int NKV, int HD, AttnOpts o) {
    CHECK(NKV > 0 && NH % NKV == 0);
    AttnBwd a = {dout, out, lse, q, k, v, T, NH, NKV, HD, NH / NKV, opt_scale(o, HD), o.softcap};
    double *acc_a = xmalloc((size_t)HD * sizeof *acc_a), *acc_b = xmalloc((size_t)HD * sizeof *acc_b);  // (HD) each
    for (int b = 0; b < B; b++) {
        const int32_t *segb = seg + (size_t)b * T;
        for (int h = 0; h < NH && dq; h++) {
            for (int t = 0; t < T; t++) {
                if (segb[t] == 0) continue;
                for (int d = 0; d < HD; d++) acc_a[d] = 0;
                for (int s = 0; s <= t; s++) {
                    if (!attends(segb, t, s, o.window)) continue;
                    double p, ds;
                    prob_ds(&a, b, h, t, s, &p, &ds);
                    const float *ks = k + kidx(&a, b, s, h / a.rep);
                    for (int d = 0; d < HD; d++) acc_a[d] += ds * ks[d];
                }
                float *dqt = dq + qidx(&a, b, t, h);
                for (int d = 0; d < HD; d++) dqt[d] = (float)(dqt[d] + a.scale * acc_a[d]);
            }
        }
        for (int kh = 0; kh < NKV && (dk || dv); kh++) {
            for (int s = 0; s < T; s++) {
                if (segb[s] == 0) continue;
                for (int d = 0; d < HD; d++) acc_a[d] = acc_b[d] = 0;
                for (int h = kh * a.rep; h < (kh + 1) * a.rep; h++) {
                    for (int t = s; t < T; t++) {
                        if (!attends(segb, t, s, o.window)) continue;
                        double p, ds;
                        prob_ds(&a, b, h, t, s, &p, &ds);
                        const float *qt = q + qidx(&a, b, t, h), *gt = dout + qidx(&a, b, t, h);
                        for (int d = 0; d < HD; d++) {
                            acc_a[d] += ds * qt[d];
                            acc_b[d] += p * gt[d];
                        }
                    }
                }
                size_t ks = kidx(&a, b, s, kh);
                if (dk)
                    for (int d = 0; d < HD; d++) dk[ks + d] = (float)(dk[ks + d] + a.scale * acc_a[d]);
                if (dv)
                    for (int d = 0; d < HD; d++) dv[ks + d] = (float)(dv[ks + d] + acc_b[d]);
            }
        }
    }
    free(acc_a);
    free(acc_b);
}

void ref_attention_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg, int B, int T, int NH, int NKV, int HD) {
    ref_attention_forward_opt(be, out, lse, q, k, v, seg, B, T, NH, NKV, HD, (AttnOpts){0});
}

void ref_attention_backward(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                            const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                            int B, int T, int NH, int NKV, int HD) {
    ref_attention_backward_opt(be, dq, dk, dv, dout, out, lse, q, k, v, seg, B, T, NH, NKV, HD, (AttnOpts){0});
}
