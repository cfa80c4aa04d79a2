// ref.h: the reference backend's ops (backend/ref is the spec: scalar loops, double
// accumulators). Each op has the signature and semantics of its slot in backend.h.
#ifndef STILL_BACKEND_REF_H
#define STILL_BACKEND_REF_H

#include "../backend.h"

// Element i of a weight table stored as wdt (F32, BF16, F16 or Q8_0), as fp32: a Q8_0 weight is
// dequantized (fp16(d) * q) and then used as any fp32 weight.
static inline float ref_wload(const void *w, DType wdt, size_t i) {
    switch (wdt) {
    case DT_F32: return ((const float *)w)[i];
    case DT_BF16: return bf16_to_f32(((const uint16_t *)w)[i]);
    case DT_Q8_0: return q8_0_get((const BlockQ8_0 *)w, i);
    default: return f16_to_f32(((const uint16_t *)w)[i]);
    }
}

// ref_ops.c
void ref_embedding_forward(Backend *be, float *out, const int32_t *ids, const void *wte, DType wdt, int N, int C);
void ref_embedding_backward(Backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C);
void ref_rmsnorm_forward(Backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps);
void ref_rmsnorm_backward(Backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          const float *rstd, int N, int C);
void ref_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt, const float *bias, int N,
                        int C, int OC);
void ref_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                         const void *w, DType wdt, int N, int C, int OC);
void ref_rope_forward(Backend *be, float *x, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                      int HD, int RD);
void ref_rope_backward(Backend *be, float *dx, const int32_t *pos, const float *inv_freq, float mscale, int N, int NH,
                       int HD, int RD);
void ref_swiglu_forward(Backend *be, float *out, const float *gate, const float *up, size_t n);
void ref_swiglu_backward(Backend *be, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                         size_t n);
void ref_add(Backend *be, float *out, const float *a, const float *b, size_t n);
void ref_scale(Backend *be, float *x, float s, size_t n);
void ref_dropout(Backend *be, float *out, const float *inp, size_t n, float p, const uint64_t *key, uint64_t salt);
double ref_sumsq(Backend *be, const float *x, size_t n);
void ref_adamw(Backend *be, float *p, float *m, float *v, const float *g, size_t n, double lr, double b1, double b2,
               double eps, double wd, int t, float grad_scale);

// ref_attention.c
void ref_attention_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg, int B, int T, int NH, int NKV, int HD);
void ref_attention_backward(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                            const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                            int B, int T, int NH, int NKV, int HD);
void ref_attention_forward_opt(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                               const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o);
void ref_attention_backward_opt(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                                const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                                int B, int T, int NH, int NKV, int HD, AttnOpts o);
void ref_attention_sinks_backward(Backend *be, float *dsinks, const float *dout, const float *out, const float *lse,
                                  const float *sinks, const int32_t *seg, int B, int T, int NH, int HD);

// ref_loss.c
void ref_ce_head(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                 const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                 float grad_scale, float *scratch, int chunk, int N, int C, int V);
void ref_ce_head_cap(Backend *be, float *row_loss, float *row_correct, float *row_entropy, float *dh, float *dW,
                     const float *h, const void *W, DType wdt, const int32_t *targets, const float *weights,
                     float grad_scale, float softcap, float *scratch, int chunk, int N, int C, int V);

#endif
