// test_family_parity.c: the model-family ops of backend.h (docs/models.md): attention with
// AttnOpts (sliding window, soft-cap, scale) in training (forward, backward) and cached /
// windowed-ring generation, attention sinks (GPT-OSS) in all of them, RMSNorm with an offset weight, the gelu_pytorch_tanh GeGLU,
// soft-capping, the soft-capped loss heads and RMSNorm over a feature dimension split in parts.
//
// First the reference backend (the spec) on its own: backward ops against central finite
// differences of their forward ops (ops_util.h's gradcheck, tolerances as in test_ref_grad.c: fp32
// outputs of double sums, step 1e-2, tol 2e-3), the window rule against a brute-force count of the
// keys each query sees, the plain ops as the limits of the new ones (window >= T, cap -> inf,
// woff 0), and the ring cache against a full cache holding the same keys, chunk by chunk across
// the window boundary (exact: the same keys in the same order, in double).
// Then every other backend against ref on awkward shapes (parity_util.h: NaN-filled outputs,
// random gradients for `+=`, guard words), at the tolerances of test_backend_parity.c:
//   TOL_EW 2e-6 elementwise, TOL_RED 2e-5 fp32 reductions; with cuda's bf16 GEMMs the heads at
//   TOL_BF16 1e-2 (their logits go through the bf16 GEMM). Attention with any AttnOpts other
//   than the plain ones runs cuda's fp32 kernels in both GEMM modes, so it is held to TOL_RED; the
//   plain ones (scale 1/sqrt(HD), no window, no cap) take the tensor-core kernels with bf16 GEMMs,
//   held to test_backend_parity.c's TOL_ATT_BF16 3e-2 there.
#include "parity_util.h"

#define TOL_EW 2e-6
#define TOL_RED 2e-5
#define TOL_BF16 1e-2

typedef struct {
    const char *name, *gemm;
} BackendRun;
static const BackendRun backend_runs[] = {{"cpu", NULL}, {"cuda", "fp32"}, {"cuda", "bf16"}};
static double tol_gemm = TOL_RED;
static double tol_plain = TOL_RED;  // attention whose AttnOpts are the plain ones (cuda bf16: the mma kernels)

// ================================================================ the reference on its own
typedef struct {
    float *out, *lse, *q, *k, *v, *r;
    const int32_t *seg;
    int B, T, NH, NKV, HD;
    AttnOpts o;
} AttCtx;

static double att_loss(void *p) {
    AttCtx *c = p;
    R->attention_forward_opt(R, c->out, c->lse, c->q, c->k, c->v, c->seg, c->B, c->T, c->NH, c->NKV, c->HD, c->o);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * c->NH * c->HD);
}

// The reference backward with opts against finite differences of its forward.
static void ref_attention_grad(AttnOpts o, const char *label) {
    int B = 2, T = 9, NH = 4, NKV = 2, HD = 5;
    int32_t seg[18] = {0, 0, 1, 1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 2, 2, 2, 2, 2, 2};
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    AttCtx c = {xmalloc(nq * 4), xmalloc((size_t)B * NH * T * 4), new_normal(nq, 1.5f), new_normal(nk, 1.5f),
                new_normal(nk, 1), new_normal(nq, 1), seg, B, T, NH, NKV, HD, o};
    att_loss(&c);
    float *dq0 = new_normal(nq, 1), *dk0 = new_normal(nk, 1), *dv0 = new_normal(nk, 1);
    float *dq = new_copy(dq0, nq), *dk = new_copy(dk0, nk), *dv = new_copy(dv0, nk);
    R->attention_backward_opt(R, dq, dk, dv, c.r, c.out, c.lse, c.q, c.k, c.v, seg, B, T, NH, NKV, HD, o);
    float *gq = grad_delta(dq, dq0, nq), *gk = grad_delta(dk, dk0, nk), *gv = grad_delta(dv, dv0, nk);
    char what[96];
    snprintf(what, sizeof what, "ref attention dq %s", label);
    gradcheck(what, att_loss, &c, c.q, nq, gq, 150, 1e-2, 2e-3, 1e-2);
    snprintf(what, sizeof what, "ref attention dk %s", label);
    gradcheck(what, att_loss, &c, c.k, nk, gk, 150, 1e-2, 2e-3, 1e-2);
    snprintf(what, sizeof what, "ref attention dv %s", label);
    gradcheck(what, att_loss, &c, c.v, nk, gv, 150, 1e-2, 2e-3, 1e-2);
    free(c.out), free(c.lse), free(c.q), free(c.k), free(c.v), free(c.r);
    free(dq0), free(dk0), free(dv0), free(dq), free(dk), free(dv), free(gq), free(gk), free(gv);
}

static double att_sink_loss(void *p) { return att_loss(p); }

// Attention sinks (AttnOpts.sinks): dq, dk, dv through the unchanged backward (lse holds the sink
// term) and dsinks from attention_sinks_backward, each against finite differences of the forward.
static void ref_attention_sinks_grad(AttnOpts o, const char *label) {
    int B = 2, T = 9, NH = 4, NKV = 2, HD = 5;
    int32_t seg[18] = {0, 0, 1, 1, 1, 1, 1, 1, 1, /**/ 1, 1, 1, 2, 2, 2, 2, 2, 2};
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    float *sinks = new_normal(NH, 1.5f);
    o.sinks = sinks;
    AttCtx c = {xmalloc(nq * 4), xmalloc((size_t)B * NH * T * 4), new_normal(nq, 1.5f), new_normal(nk, 1.5f),
                new_normal(nk, 1), new_normal(nq, 1), seg, B, T, NH, NKV, HD, o};
    att_sink_loss(&c);
    float *dq0 = new_normal(nq, 1), *dk0 = new_normal(nk, 1), *dv0 = new_normal(nk, 1), *ds0 = new_normal(NH, 1);
    float *dq = new_copy(dq0, nq), *dk = new_copy(dk0, nk), *dv = new_copy(dv0, nk), *ds = new_copy(ds0, NH);
    R->attention_backward_opt(R, dq, dk, dv, c.r, c.out, c.lse, c.q, c.k, c.v, seg, B, T, NH, NKV, HD, o);
    R->attention_sinks_backward(R, ds, c.r, c.out, c.lse, sinks, seg, B, T, NH, HD);
    float *gq = grad_delta(dq, dq0, nq), *gk = grad_delta(dk, dk0, nk), *gv = grad_delta(dv, dv0, nk);
    float *gs = grad_delta(ds, ds0, NH);
    char what[96];
    snprintf(what, sizeof what, "ref sink attention dq %s", label);
    gradcheck(what, att_sink_loss, &c, c.q, nq, gq, 150, 1e-2, 2e-3, 1e-2);
    snprintf(what, sizeof what, "ref sink attention dk %s", label);
    gradcheck(what, att_sink_loss, &c, c.k, nk, gk, 150, 1e-2, 2e-3, 1e-2);
    snprintf(what, sizeof what, "ref sink attention dv %s", label);
    gradcheck(what, att_sink_loss, &c, c.v, nk, gv, 150, 1e-2, 2e-3, 1e-2);
    snprintf(what, sizeof what, "ref sink attention dsinks %s", label);
    gradcheck(what, att_sink_loss, &c, sinks, NH, gs, NH, 1e-2, 2e-3, 1e-2);
    double gmax = 0;
    for (int h = 0; h < NH; h++) gmax = fmax(gmax, fabs(gs[h]));
    EXPECT_MSG(gmax > 1e-3, "ref dsinks %s is %.3g: the sinks barely reach the loss", label, gmax);
    free(c.out), free(c.lse), free(c.q), free(c.k), free(c.v), free(c.r), free(sinks);
    free(dq0), free(dk0), free(dv0), free(ds0), free(dq), free(dk), free(dv), free(ds), free(gq), free(gk), free(gv);
    free(gs);
}

static void test_ref_attention_grad(void) {
    ref_attention_sinks_grad((AttnOpts){0}, "global");
    ref_attention_sinks_grad((AttnOpts){3, 0, 0, 0, NULL}, "window 3");
    ref_attention_grad((AttnOpts){3, 0, 0, 0}, "window 3");
    ref_attention_grad((AttnOpts){0, 2.5f, 0, 0}, "softcap 2.5");
    ref_attention_grad((AttnOpts){4, 1.5f, 0.3f, 0}, "window 4 softcap 1.5 scale 0.3");
}

// Forward: brute force in the test (double), with the rule written out: key s visible to query t
// iff same non-zero segment, s <= t, t - s < W; score cap tanh(scale q.k / cap).
static void test_ref_attention_forward_rule(void) {
    int B = 1, T = 12, NH = 2, NKV = 1, HD = 4;
    int32_t seg[12] = {0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2};
    AttnOpts o = {3, 4.0f, 0.7f, 0};
    size_t nq = (size_t)T * NH * HD, nk = (size_t)T * NKV * HD;
    float *q = new_normal(nq, 2), *k = new_normal(nk, 2), *v = new_normal(nk, 1);
    float *out = xmalloc(nq * 4), *lse = xmalloc((size_t)NH * T * 4);
    R->attention_forward_opt(R, out, lse, q, k, v, seg, B, T, NH, NKV, HD, o);
    double worst = 0;
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++) {
            double sc[12], mx = -INFINITY, sum = 0, acc[4] = {0};
            int n = 0;
            for (int s = 0; s < T; s++) {
                int vis = seg[t] != 0 && seg[s] == seg[t] && s <= t && t - s < o.window;
                sc[s] = -INFINITY;
                if (!vis) continue;
                n++;
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)q[(t * NH + h) * HD + i] * k[s * HD + i];
                sc[s] = o.softcap * tanh(o.scale * d / o.softcap);
                mx = fmax(mx, sc[s]);
            }
            EXPECT(seg[t] == 0 || (n >= 1 && n <= o.window));
            for (int s = 0; s < T; s++)
                if (sc[s] > -INFINITY) sum += exp(sc[s] - mx);
            for (int s = 0; s < T; s++)
                for (int i = 0; i < HD && sc[s] > -INFINITY; i++) acc[i] += exp(sc[s] - mx) / sum * v[s * HD + i];
            for (int i = 0; i < HD; i++) worst = fmax(worst, fabs(acc[i] - out[(t * NH + h) * HD + i]));
            if (seg[t]) worst = fmax(worst, fabs(mx + log(sum) - lse[h * T + t]));
        }
    EXPECT_MSG(worst < 1e-5, "ref windowed soft-capped attention vs brute force: %.3g", worst);
    // with sinks: p_s = exp(x_s) / (sum_j exp(x_j) + exp(sink_h)), lse = log of that denominator
    float sinks[2] = {1.7f, -0.4f};
    AttnOpts os = {3, 0, 0.7f, 0, sinks};
    R->attention_forward_opt(R, out, lse, q, k, v, seg, B, T, NH, NKV, HD, os);
    worst = 0;
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++) {
            if (!seg[t]) continue;
            double sc[12], den = exp(sinks[h]), acc[4] = {0};
            for (int s = 0; s < T; s++) {
                sc[s] = -INFINITY;
                if (!(seg[s] == seg[t] && s <= t && t - s < os.window)) continue;
                double d = 0;
                for (int i = 0; i < HD; i++) d += (double)q[(t * NH + h) * HD + i] * k[s * HD + i];
                sc[s] = os.scale * d;
                den += exp(sc[s]);
            }
            for (int s = 0; s < T; s++)
                for (int i = 0; i < HD && sc[s] > -INFINITY; i++) acc[i] += exp(sc[s]) / den * v[s * HD + i];
            for (int i = 0; i < HD; i++) worst = fmax(worst, fabs(acc[i] - out[(t * NH + h) * HD + i]));
            worst = fmax(worst, fabs(log(den) - lse[h * T + t]));
        }
    EXPECT_MSG(worst < 1e-5, "ref attention with sinks vs brute force: %.3g", worst);
    // the plain op is the limit: window >= T, cap far above the scores, scale 1/sqrt(HD)
    float *out2 = xmalloc(nq * 4), *lse2 = xmalloc((size_t)NH * T * 4);
    R->attention_forward(R, out, lse, q, k, v, seg, B, T, NH, NKV, HD);
    R->attention_forward_opt(R, out2, lse2, q, k, v, seg, B, T, NH, NKV, HD, (AttnOpts){T, 1e7f, 0.5f, 0});
    double e = 0;
    for (size_t i = 0; i < nq; i++) e = fmax(e, fabs(out[i] - out2[i]));
    EXPECT_MSG(e < 1e-6, "window T, cap 1e7, scale 1/sqrt(HD) differs from plain attention by %.3g", e);
    free(q), free(k), free(v), free(out), free(lse), free(out2), free(lse2);
}

// ---- elementwise and norm ops through finite differences
typedef struct {
    float *out, *rstd, *inp, *w, *up, *r;
    int N, C;
    float woff;
} EwCtx;

static double rmsoff_loss(void *p) {
    EwCtx *c = p;
    R->rmsnorm_forward_off(R, c->out, c->rstd, c->inp, c->w, c->woff, c->N, c->C, 1e-6f);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static double geglu_loss(void *p) {
    EwCtx *c = p;
    R->geglu_forward(R, c->out, c->inp, c->up, (size_t)c->N * c->C);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static double softcap_loss(void *p) {
    EwCtx *c = p;
    size_t n = (size_t)c->N * c->C;
    memcpy(c->out, c->inp, n * 4);
    R->softcap_forward(R, c->out, 3.0f, n);
    return dot_d(c->out, c->r, n);
}

static void test_ref_elementwise_grad(void) {
    int N = 4, C = 11;
    size_t n = (size_t)N * C;
    EwCtx c = {xmalloc(n * 4), xmalloc(N * 4), new_normal(n, 2), new_normal(C, 0.3f), new_normal(n, 1),
               new_normal(n, 1), N, C, 1.0f};
    rmsoff_loss(&c);
    float *dx0 = new_normal(n, 1), *dw0 = new_normal(C, 1), *dx = new_copy(dx0, n), *dw = new_copy(dw0, C);
    R->rmsnorm_backward_off(R, dx, dw, c.r, c.inp, c.w, 1.0f, c.rstd, N, C);
    float *gx = grad_delta(dx, dx0, n), *gw = grad_delta(dw, dw0, C);
    gradcheck("ref rmsnorm_off dinp", rmsoff_loss, &c, c.inp, n, gx, 200, 1e-2, 2e-3, 1e-2);
    gradcheck("ref rmsnorm_off dw", rmsoff_loss, &c, c.w, C, gw, 200, 1e-2, 2e-3, 1e-2);
    // (1 + w) is rmsnorm with weights 1 + w
    float *w1 = xmalloc(C * 4), *o2 = xmalloc(n * 4), *r2 = xmalloc(N * 4);
    for (int i = 0; i < C; i++) w1[i] = 1.0f + c.w[i];
    R->rmsnorm_forward(R, o2, r2, c.inp, w1, N, C, 1e-6f);
    rmsoff_loss(&c);
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(o2[i] - c.out[i]));
    EXPECT_MSG(e < 1e-6, "rmsnorm_off(w, 1) vs rmsnorm(1 + w): %.3g", e);
    free(gx), free(gw);
    // geglu
    geglu_loss(&c);
    float *du0 = new_normal(n, 1), *du = new_copy(du0, n);
    memcpy(dx, dx0, n * 4);
    R->geglu_backward(R, dx, du, c.r, c.inp, c.up, n);
    gx = grad_delta(dx, dx0, n);
    float *gu = grad_delta(du, du0, n);
    gradcheck("ref geglu dgate", geglu_loss, &c, c.inp, n, gx, 200, 1e-2, 2e-3, 1e-2);
    gradcheck("ref geglu dup", geglu_loss, &c, c.up, n, gu, 200, 1e-2, 2e-3, 1e-2);
    // gelu_tanh at known points: gelu_tanh(1) = 0.8411919906, gelu_tanh(-2) = -0.04540230591
    float g2[2] = {1.0f, -2.0f}, u2[2] = {1.0f, 1.0f}, o[2];
    R->geglu_forward(R, o, g2, u2, 2);
    EXPECT_MSG(fabs(o[0] - 0.8411919906) < 1e-6 && fabs(o[1] + 0.04540230591) < 1e-7, "gelu_tanh(1) %.9g (-2) %.9g",
               o[0], o[1]);
    free(gx), free(gu);
    // softcap: backward from the capped values
    softcap_loss(&c);
    float *g = new_copy(c.r, n);
    R->softcap_backward(R, g, c.out, 3.0f, n);
    gradcheck("ref softcap", softcap_loss, &c, c.inp, n, g, 200, 1e-2, 2e-3, 1e-2);
    free(g);
    free(c.out), free(c.rstd), free(c.inp), free(c.w), free(c.up), free(c.r), free(dx0), free(dw0), free(dx), free(dw);
    free(du0), free(du), free(w1), free(o2), free(r2);
}

// ---- the capped heads through finite differences of their own losses
typedef struct {
    float *h, *W, *h_t, *W_t, *w, *coef, *loss, *scratch, *scratch_t;
    int32_t *tgt;
    int N, C, V, kind;  // kind: 0 ce, 1 logprob, 2 distill
    float cap, cap_t;
} HeadCtx;

static double head_loss(void *p) {
    HeadCtx *c = p;
    if (c->kind == 0)
        R->ce_head_cap(R, c->loss, NULL, NULL, NULL, NULL, c->h, c->W, DT_F32, c->tgt, c->w, 1.0f, c->cap, c->scratch,
                       3, c->N, c->C, c->V);
    else if (c->kind == 1)
        R->logprob_head_cap(R, c->loss, NULL, NULL, NULL, NULL, c->h, c->W, DT_F32, c->tgt, NULL, 0.7f, c->cap,
                            c->scratch, 3, c->N, c->C, c->V);
    else
        R->distill_head_cap(R, c->loss, NULL, NULL, NULL, c->h, c->W, DT_F32, c->h_t, c->W_t, DT_F32, c->tgt, c->w,
                            0.8f, 0.4f, 0, 1.0f, c->cap, c->cap_t, c->scratch, c->scratch_t, 3, c->N, c->C, c->C,
                            c->V);
    double s = 0;
    for (int r = 0; r < c->N; r++) s += (c->kind == 1 ? c->coef[r] : 1.0) * c->loss[r];
    return s;
}

static void ref_head_grad(int kind, const char *label) {
    int N = 5, C = 6, V = 17;
    HeadCtx c = {new_normal((size_t)N * C, 1.5f), new_normal((size_t)V * C, 1.5f), new_normal((size_t)N * C, 1.5f),
                 new_normal((size_t)V * C, 1.5f), new_normal(N, 1), new_normal(N, 1), xmalloc(N * 4),
                 xmalloc((size_t)(V + C) * 3 * 4), xmalloc((size_t)(V + C) * 3 * 4), xmalloc(N * 4), N, C, V, kind,
                 3.0f, 2.0f};
    for (int r = 0; r < N; r++) c.tgt[r] = r == 2 ? IGNORE_INDEX : (int32_t)rng_below(&ops_rng, (uint64_t)V);
    float *dh0 = new_normal((size_t)N * C, 1), *dW0 = new_normal((size_t)V * C, 1);
    float *dh = new_copy(dh0, (size_t)N * C), *dW = new_copy(dW0, (size_t)V * C);
    if (kind == 0)
        R->ce_head_cap(R, c.loss, NULL, NULL, dh, dW, c.h, c.W, DT_F32, c.tgt, c.w, 1.0f, c.cap, c.scratch, 3, N, C, V);
    else if (kind == 1)
        R->logprob_head_cap(R, c.loss, NULL, NULL, dh, dW, c.h, c.W, DT_F32, c.tgt, c.coef, 0.7f, c.cap, c.scratch, 3,
                            N, C, V);
    else
        R->distill_head_cap(R, c.loss, NULL, dh, dW, c.h, c.W, DT_F32, c.h_t, c.W_t, DT_F32, c.tgt, c.w, 0.8f, 0.4f, 0,
                            1.0f, c.cap, c.cap_t, c.scratch, c.scratch_t, 3, N, C, C, V);
    float *gh = grad_delta(dh, dh0, (size_t)N * C), *gW = grad_delta(dW, dW0, (size_t)V * C);
    char what[96];
    // The loss is a sum of fp32 row outputs of size ~3 (ulp ~2.4e-7 each), so a difference quotient
    // at step 2e-2 carries ~1.5e-5 of noise: components below 0.2 of the largest gradient are held
    // to 2e-3 of that floor (~5e-5) instead of their own size (a larger step only adds tanh's
    // truncation error). A wrong chain factor moves the large components by far more.
    snprintf(what, sizeof what, "ref %s dh", label);
    gradcheck(what, head_loss, &c, c.h, (size_t)N * C, gh, 200, 2e-2, 2e-3, 0.2);
    snprintf(what, sizeof what, "ref %s dW", label);
    gradcheck(what, head_loss, &c, c.W, (size_t)V * C, gW, 200, 2e-2, 2e-3, 0.2);
    // the cap bounds every logit: a loss / log-prob computed by hand from capped logits
    if (kind == 0) {
        head_loss(&c);
        int r = 0;
        double z[17], mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) {
            z[v] = c.cap * tanh(dot_d(c.h + r * C, c.W + v * C, (size_t)C) / c.cap);
            mx = fmax(mx, z[v]);
        }
        for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
        double want = c.w[r] * (mx + log(sum) - z[c.tgt[r]]);
        EXPECT_MSG(fabs(c.loss[r] - want) < 1e-5 * fmax(1, fabs(want)), "ce_head_cap row 0 loss %.8g, by hand %.8g",
                   c.loss[r], want);
    }
    free(c.h), free(c.W), free(c.h_t), free(c.W_t), free(c.w), free(c.coef), free(c.loss), free(c.scratch);
    free(c.scratch_t), free(c.tgt), free(dh0), free(dW0), free(dh), free(dW), free(gh), free(gW);
}

static void test_ref_heads_grad(void) {
    ref_head_grad(0, "ce_head_cap");
    ref_head_grad(1, "logprob_head_cap");
    ref_head_grad(2, "distill_head_cap");
}

// ---- ring cache = full cache, chunk by chunk across the window boundary
// Runs chunks of the given sizes through be (ring: kv_ring_write after attention_ring; full:
// kv_cache_write then attention_cached_opt); out (B, total, NH, HD) collects every chunk's output.
typedef struct {
    int B, NH, NKV, HD, S, W;
    float softcap;
    const float *sinks;    // (NH) host copy or NULL
    const int32_t *kmask;  // (B,S)
    const float *q, *k, *v;  // (B,S,NH,HD), (B,S,NKV,HD): every slot's q, k, v
} RingCase;

static void slice(float *dst, const float *src, int B, int S, int t0, int T, int width) {
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * T * width, src + ((size_t)b * S + t0) * width, (size_t)T * width * 4);
}

static void run_chunks(Backend *be, int ring, const RingCase *c, const int *chunks, int nchunks, float *out_host) {
    int B = c->B, NH = c->NH, NKV = c->NKV, HD = c->HD, S = c->S, W = c->W;
    AttnOpts o = {W, c->softcap, 0, 0, NULL};
    float *dsinks = c->sinks ? be->alloc(be, (size_t)NH * 4) : NULL;
    if (dsinks) be->upload(be, dsinks, c->sinks, (size_t)NH * 4), o.sinks = dsinks;
    size_t ncache = (size_t)B * NKV * (ring ? W : S) * HD;
    int maxT = 0;
    for (int i = 0; i < nchunks; i++) maxT = MAX(maxT, chunks[i]);
    float *kc = be->alloc(be, ncache * 4), *vc = be->alloc(be, ncache * 4);
    float *hq = xmalloc((size_t)B * maxT * NH * HD * 4), *hk = xmalloc((size_t)B * maxT * NKV * HD * 4);
    float *hv = xmalloc((size_t)B * maxT * NKV * HD * 4), *ho = xmalloc((size_t)B * maxT * NH * HD * 4);
    float *dq = be->alloc(be, (size_t)B * maxT * NH * HD * 4), *dk = be->alloc(be, (size_t)B * maxT * NKV * HD * 4);
    float *dv = be->alloc(be, (size_t)B * maxT * NKV * HD * 4), *dout = be->alloc(be, (size_t)B * maxT * NH * HD * 4);
    int32_t *dmask = be->alloc(be, (size_t)B * S * 4), *dstart = be->alloc(be, 4);
    be->upload(be, dmask, c->kmask, (size_t)B * S * 4);
    int start = 0;
    for (int i = 0; i < nchunks; i++) {
        int T = chunks[i];
        slice(hq, c->q, B, S, start, T, NH * HD);
        slice(hk, c->k, B, S, start, T, NKV * HD);
        slice(hv, c->v, B, S, start, T, NKV * HD);
        be->upload(be, dq, hq, (size_t)B * T * NH * HD * 4);
        be->upload(be, dk, hk, (size_t)B * T * NKV * HD * 4);
        be->upload(be, dv, hv, (size_t)B * T * NKV * HD * 4);
        be->upload(be, dstart, &start, 4);
        if (ring) {
            be->attention_ring(be, dout, dq, kc, vc, dk, dv, dmask, dstart, B, T, NH, NKV, HD, S, o);
            be->kv_ring_write(be, kc, vc, dk, dv, dstart, B, T, NKV, HD, W);
        } else {
            be->kv_cache_write(be, kc, vc, dk, dv, dstart, B, T, NKV, HD, S);
            be->attention_cached_opt(be, dout, dq, kc, vc, dmask, dstart, B, T, NH, NKV, HD, S, o);
        }
        be->download(be, ho, dout, (size_t)B * T * NH * HD * 4);
        for (int b = 0; b < B; b++)
            memcpy(out_host + ((size_t)b * S + start) * NH * HD, ho + (size_t)b * T * NH * HD, (size_t)T * NH * HD * 4);
        start += T;
    }
    be->free(be, kc), be->free(be, vc), be->free(be, dq), be->free(be, dk), be->free(be, dv), be->free(be, dout);
    be->free(be, dmask), be->free(be, dstart);
    if (dsinks) be->free(be, dsinks);
    free(hq), free(hk), free(hv), free(ho);
}

static RingCase ring_case(int B, int NH, int NKV, int HD, int S, int W, float cap, int32_t *kmask, const int *pads) {
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) kmask[b * S + s] = s >= pads[b];
    RingCase c = {B, NH, NKV, HD, S, W, cap, NULL, kmask, new_normal((size_t)B * S * NH * HD, 1.5f),
                  new_normal((size_t)B * S * NKV * HD, 1.5f), new_normal((size_t)B * S * NKV * HD, 1)};
    return c;
}

static void free_ring_case(RingCase *c) { free((void *)c->q), free((void *)c->k), free((void *)c->v); }

// chunk schedules: a prefill longer than the window then decode steps; prefill chunks shorter and
// longer than the window; every chunk a decode step from slot 0
static const int sched_a[] = {13, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // 23 slots
static const int sched_b[] = {3, 7, 2, 9, 1, 1};                    // 23 slots
static const int sched_c[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

static void test_ref_ring_equals_full(void) {
    int32_t kmask[2 * 23];
    int pads[2] = {0, 6};
    const int *scheds[3] = {sched_a, sched_b, sched_c};
    int nsched[3] = {ARRAY_LEN(sched_a), ARRAY_LEN(sched_b), ARRAY_LEN(sched_c)};
    int windows[3] = {1, 5, 30};
    for (int wi = 0; wi < 3; wi++) {
        RingCase c = ring_case(2, 4, 2, 6, 23, windows[wi], wi == 1 ? 2.0f : 0.0f, kmask, pads);
        float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
        if (wi != 1) c.sinks = sinks;  // windows 1 and 30 with sinks
        size_t n = (size_t)2 * 23 * 4 * 6;
        float *full = xmalloc(n * 4), *ring = xmalloc(n * 4);
        for (int si = 0; si < 3; si++) {
            run_chunks(R, 0, &c, scheds[si], nsched[si], full);
            run_chunks(R, 1, &c, scheds[si], nsched[si], ring);
            double e = 0;
            for (size_t i = 0; i < n; i++) e = fmax(e, fabs(full[i] - ring[i]));
            EXPECT_MSG(e == 0, "ref ring W%d schedule %d differs from the full cache by %.3g", windows[wi], si, e);
        }
        // and the full cache with the window = training attention with the window (prompt at start 0,
        // the mask as segment ids): the same keys, sinks and caps in both
        AttnOpts o = {c.W, c.softcap, 0, 0, c.sinks};
        float *lse = xmalloc((size_t)2 * 4 * 23 * 4);
        R->attention_forward_opt(R, ring, lse, c.q, c.k, c.v, kmask, 2, 23, 4, 2, 6, o);
        double e = 0;
        for (size_t i = 0; i < n; i++) e = fmax(e, fabs(full[i] - ring[i]));
        EXPECT_MSG(e < 1e-6, "ref cached W%d differs from training attention by %.3g", windows[wi], e);
        free(lse);
        free(full), free(ring);
        free_ring_case(&c);
    }
}

// ================================================================ every backend against ref
static void check_attention_opt_s(int B, int T, int NH, int NKV, int HD, const int32_t *seg, AttnOpts o,
                                  int with_sinks, const char *label) {
    char what[128];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD, nl = (size_t)B * NH * T;
    // sinks: the reference reads the host copy, X its device copy (AttnOpts.sinks is device memory)
    float *sinks = with_sinks ? new_normal(NH, 1.5f) : NULL, *d_sinks = sinks ? dev_from(sinks, NH * 4) : NULL;
    AttnOpts ox = o;
    o.sinks = sinks, ox.sinks = d_sinks;
    float *q = new_normal(nq, 1.5f), *k = new_normal(nk, 1.5f), *v = new_normal(nk, 1), *dout = new_normal(nq, 1);
    float *out = xmalloc(nq * 4), *lse = xmalloc(nl * 4);
    float *dq = new_normal(nq, 1), *dk = new_normal(nk, 1), *dv = new_normal(nk, 1);
    float *d_q = dev_from(q, nq * 4), *d_k = dev_from(k, nk * 4), *d_v = dev_from(v, nk * 4);
    float *d_dout = dev_from(dout, nq * 4), *d_out = dev_nan(nq), *d_lse = dev_nan(nl);
    float *d_dq = dev_from(dq, nq * 4), *d_dk = dev_from(dk, nk * 4), *d_dv = dev_from(dv, nk * 4);
    int32_t *d_seg = dev_from(seg, (size_t)B * T * 4);
    int plain = !sinks && o.window <= 0 && o.softcap <= 0 && (o.scale <= 0 || o.scale == (float)(1.0 / sqrt((double)HD)));
    double tol = plain ? tol_plain : TOL_RED;
    R->attention_forward_opt(R, out, lse, q, k, v, seg, B, T, NH, NKV, HD, o);
    X->attention_forward_opt(X, d_out, d_lse, d_q, d_k, d_v, d_seg, B, T, NH, NKV, HD, ox);
    snprintf(what, sizeof what, "attention_opt fwd out %s", label);
    expect_close(what, d_out, out, nq, tol);
    snprintf(what, sizeof what, "attention_opt fwd lse %s", label);
    expect_close(what, d_lse, lse, nl, tol);
    float *d_out_ref = dev_from(out, nq * 4), *d_lse_ref = dev_from(lse, nl * 4);
    R->attention_backward_opt(R, dq, dk, dv, dout, out, lse, q, k, v, seg, B, T, NH, NKV, HD, o);
    X->attention_backward_opt(X, d_dq, d_dk, d_dv, d_dout, d_out_ref, d_lse_ref, d_q, d_k, d_v, d_seg, B, T, NH, NKV,
                              HD, ox);
    if (sinks) {
        float *ds = new_normal(NH, 1), *d_ds = dev_from(ds, NH * 4);
        R->attention_sinks_backward(R, ds, dout, out, lse, sinks, seg, B, T, NH, HD);
        X->attention_sinks_backward(X, d_ds, d_dout, d_out_ref, d_lse_ref, d_sinks, d_seg, B, T, NH, HD);
        snprintf(what, sizeof what, "attention_sinks_backward %s", label);
        expect_close(what, d_ds, ds, NH, TOL_RED);
        X->free(X, d_ds), free(ds);
    }
    snprintf(what, sizeof what, "attention_opt bwd dq %s", label);
    expect_close(what, d_dq, dq, nq, tol);
    snprintf(what, sizeof what, "attention_opt bwd dk %s", label);
    expect_close(what, d_dk, dk, nk, tol);
    snprintf(what, sizeof what, "attention_opt bwd dv %s", label);
    expect_close(what, d_dv, dv, nk, tol);
    X->free(X, d_q), X->free(X, d_k), X->free(X, d_v), X->free(X, d_dout), X->free(X, d_out), X->free(X, d_lse);
    X->free(X, d_dq), X->free(X, d_dk), X->free(X, d_dv), X->free(X, d_seg), X->free(X, d_out_ref);
    X->free(X, d_lse_ref);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
    if (sinks) X->free(X, d_sinks), free(sinks);
}

static void check_attention_opt(int B, int T, int NH, int NKV, int HD, const int32_t *seg, AttnOpts o,
                                const char *label) {
    check_attention_opt_s(B, T, NH, NKV, HD, seg, o, 0, label);
}

static void test_attention_opt(void) {
    int32_t seg7[14] = {0, 0, 0, 1, 1, 1, 1, /**/ 2, 2, 2, 3, 3, 4, 4};
    check_attention_opt(2, 7, 6, 2, 10, seg7, (AttnOpts){2, 0, 0, 0}, "T7 window 2");
    check_attention_opt(2, 7, 6, 2, 10, seg7, (AttnOpts){0, 3.0f, 0, 0}, "T7 softcap 3");
    check_attention_opt(1, 1, 6, 2, 10, seg7 + 7, (AttnOpts){1, 3.0f, 0.25f, 0}, "T1 window 1");
    int T = 150;
    int32_t *seg = xmalloc(2 * T * 4);
    for (int t = 0; t < T; t++) seg[t] = t < 20 ? 0 : (t < 100 ? 5 : (t < 140 ? 6 : 5));
    for (int t = 0; t < T; t++) seg[T + t] = 1 + t / 77;
    // windows across query blocks and key tiles (cpu 128 queries, cuda 16 / 32), recurring segment
    check_attention_opt(2, T, 6, 2, 10, seg, (AttnOpts){33, 0, 0, 0}, "T150 window 33");
    check_attention_opt(2, T, 4, 1, 16, seg, (AttnOpts){70, 20.0f, 0.2f, 0}, "T150 window 70 cap 20 scale .2");
    check_attention_opt(1, 70, 4, 2, 64, seg + T, (AttnOpts){17, 50.0f, 0.0625f, 0}, "T70 HD64 window 17 cap 50");
    check_attention_opt(1, 40, 2, 1, 256, seg, (AttnOpts){0, 0, 0.0625f, 0}, "T40 HD256 scale 1/16 (plain)");
    check_attention_opt(1, 40, 2, 1, 256, seg, (AttnOpts){0, 0, 0.05f, 0}, "T40 HD256 scale .05");
    // attention sinks: global (on cuda the fp32 kernels, not the tensor-core ones), windowed, HD 64
    check_attention_opt_s(2, 7, 6, 2, 10, seg7, (AttnOpts){0}, 1, "T7 sinks");
    check_attention_opt_s(2, T, 6, 2, 10, seg, (AttnOpts){33, 0, 0, 0, NULL}, 1, "T150 window 33 sinks");
    check_attention_opt_s(1, 70, 4, 2, 64, seg + T, (AttnOpts){0}, 1, "T70 HD64 sinks");
    free(seg);
}

// Cached attention (full cache with the window) and the ring, each against ref on the same chunks.
static void check_ring_s(int B, int NH, int NKV, int HD, int W, float cap, int with_sinks, const int *pads,
                         const int *sched, int n, const char *label) {
    int S = 0;
    for (int i = 0; i < n; i++) S += sched[i];
    int32_t *kmask = xmalloc((size_t)B * S * 4);
    RingCase c = ring_case(B, NH, NKV, HD, S, W, cap, kmask, pads);
    float *sinks = with_sinks ? new_normal(NH, 1.5f) : NULL;
    c.sinks = sinks;
    size_t no = (size_t)B * S * NH * HD;
    float *want = xmalloc(no * 4), *got = xmalloc(no * 4);
    char what[128];
    for (int ring = 0; ring < 2; ring++) {
        run_chunks(R, ring, &c, sched, n, want);
        run_chunks(X, ring, &c, sched, n, got);
        double e = 0, ref = 0;
        for (size_t i = 0; i < no; i++) e = fmax(e, fabs((double)got[i] - want[i])), ref = fmax(ref, fabs(want[i]));
        snprintf(what, sizeof what, "%s %s", ring ? "attention_ring" : "attention_cached_opt", label);
        EXPECT_MSG(e <= TOL_RED * ref, "%s on %s: rel err %.3g", what, X->name, e / ref);
    }
    free(want), free(got), free(kmask), free(sinks);
    free_ring_case(&c);
}

static void check_ring(int B, int NH, int NKV, int HD, int W, float cap, const int *pads, const int *sched, int n,
                       const char *label) {
    check_ring_s(B, NH, NKV, HD, W, cap, 0, pads, sched, n, label);
}

// The split RMSNorm (tensor parallelism): rows of D = C0 + C1 features held as two parts; the
// parts' statistics summed (the group's all-reduce) give each part the plain rmsnorm's outputs
// and input gradients of its columns, and its columns' weight gradient.
static void test_ref_rmsnorm_part(void) {
    int N = 5, C0 = 7, C1 = 4, D = C0 + C1;
    size_t n = (size_t)N * D;
    float *inp = new_normal(n, 2), *w = new_normal(D, 0.5f), *dout = new_normal(n, 1);
    float *out = xmalloc(n * 4), *rstd = xmalloc(N * 4), *dinp = new_normal(n, 1), *dw = new_normal(D, 1);
    float *pdinp = new_copy(dinp, n), *pdw = new_copy(dw, D), *pout = xmalloc(n * 4), *prstd = xmalloc(2 * N * 4);
    R->rmsnorm_forward(R, out, rstd, inp, w, N, D, 1e-6f);
    R->rmsnorm_backward(R, dinp, dw, dout, inp, w, rstd, N, D);
    int lo[2] = {0, C0}, Cs[2] = {C0, C1};
    float *part[2][4];  // inp, dout, dinp, out of each part, (N, C)
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 4; b++) part[k][b] = xmalloc((size_t)N * Cs[k] * 4);
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < N; r++)
            for (int c = 0; c < Cs[k]; c++) {
                size_t i = (size_t)r * D + lo[k] + c, j = (size_t)r * Cs[k] + c;
                part[k][0][j] = inp[i], part[k][1][j] = dout[i], part[k][2][j] = pdinp[i];
            }
    float ss[2][8], dot[2][8];
    for (int k = 0; k < 2; k++) {
        R->rmsnorm_part_stat(R, ss[k], part[k][0], part[k][0], NULL, N, Cs[k]);
        R->rmsnorm_part_stat(R, dot[k], part[k][1], part[k][0], w + lo[k], N, Cs[k]);
    }
    for (int r = 0; r < N; r++) ss[0][r] = ss[1][r] = ss[0][r] + ss[1][r], dot[0][r] = dot[1][r] = dot[0][r] + dot[1][r];
    for (int k = 0; k < 2; k++) {
        float *rs = prstd + (size_t)k * N;
        memcpy(rs, ss[k], N * 4);  // in place: rstd aliases ss
        R->rmsnorm_part_forward(R, part[k][3], rs, part[k][0], w + lo[k], rs, N, Cs[k], D, 1e-6f);
        R->rmsnorm_part_backward(R, part[k][2], pdw + lo[k], part[k][1], part[k][0], w + lo[k], rs, dot[k], N, Cs[k],
                                 D);
    }
    double eo = 0, er = 0, ed = 0, ew = 0;
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < N; r++) {
            er = fmax(er, fabs(prstd[(size_t)k * N + r] - rstd[r]) / rstd[r]);
            for (int c = 0; c < Cs[k]; c++) {
                size_t i = (size_t)r * D + lo[k] + c, j = (size_t)r * Cs[k] + c;
                eo = fmax(eo, fabs(part[k][3][j] - out[i]));
                ed = fmax(ed, fabs(part[k][2][j] - dinp[i]));
            }
        }
    for (int c = 0; c < D; c++) ew = fmax(ew, fabs(pdw[c] - dw[c]));
    EXPECT_MSG(eo < 1e-5 && er < 1e-6 && ed < 1e-5 && ew < 1e-5,
               "rmsnorm over two parts vs whole: out %.3g rstd %.3g dinp %.3g dw %.3g", eo, er, ed, ew);
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 4; b++) free(part[k][b]);
    free(inp), free(w), free(dout), free(out), free(rstd), free(dinp), free(dw), free(pdinp), free(pdw), free(pout);
    free(prstd);
}

static void test_kv_window(void) {
    int pads2[2] = {0, 6}, pads3[3] = {2, 0, 23};  // the last row all padding
    check_ring(2, 4, 2, 6, 5, 0, pads2, sched_a, ARRAY_LEN(sched_a), "W5 prefill 13 + decode");
    check_ring(2, 4, 2, 6, 5, 2.0f, pads2, sched_b, ARRAY_LEN(sched_b), "W5 cap 2 chunks 3 7 2 9 1 1");
    check_ring(3, 6, 2, 10, 1, 0, pads3, sched_a, ARRAY_LEN(sched_a), "W1");
    check_ring(2, 4, 2, 6, 40, 0, pads2, sched_b, ARRAY_LEN(sched_b), "W40 > cache");
    static const int big[] = {150, 1, 1, 1};  // more than one cpu query block, tiles of 128 keys on cuda
    int pads1[1] = {3};
    check_ring(1, 2, 1, 72, 130, 0, pads1, big, ARRAY_LEN(big), "W130 HD72 prefill 150");
    check_ring_s(2, 4, 2, 6, 5, 0, 1, pads2, sched_a, ARRAY_LEN(sched_a), "W5 sinks prefill 13 + decode");
    check_ring_s(3, 6, 2, 10, 40, 0, 1, pads3, sched_b, ARRAY_LEN(sched_b), "W40 sinks (global) chunks");
}

static void test_elementwise_family(void) {
    char what[96];
    int dims[3][2] = {{7, 13}, {1, 10}, {300, 77}};
    for (int i = 0; i < 3; i++) {
        int N = dims[i][0], C = dims[i][1];
        size_t nc = (size_t)N * C;
        float *inp = new_normal(nc, 2), *w = new_normal(C, 0.3f), *dout = new_normal(nc, 1);
        float *out = xmalloc(nc * 4), *rstd = xmalloc(N * 4), *dinp = new_normal(nc, 1), *dw = new_normal(C, 1);
        float *d_inp = dev_from(inp, nc * 4), *d_w = dev_from(w, C * 4), *d_dout = dev_from(dout, nc * 4);
        float *d_out = dev_nan(nc), *d_rstd = dev_nan(N), *d_dinp = dev_from(dinp, nc * 4), *d_dw = dev_from(dw, C * 4);
        R->rmsnorm_forward_off(R, out, rstd, inp, w, 1.0f, N, C, 1e-6f);
        X->rmsnorm_forward_off(X, d_out, d_rstd, d_inp, d_w, 1.0f, N, C, 1e-6f);
        snprintf(what, sizeof what, "rmsnorm_off fwd N%d C%d", N, C);
        expect_close(what, d_out, out, nc, TOL_RED);
        expect_close(what, d_rstd, rstd, N, TOL_RED);
        float *d_rstd_ref = dev_from(rstd, N * 4);
        R->rmsnorm_backward_off(R, dinp, dw, dout, inp, w, 1.0f, rstd, N, C);
        X->rmsnorm_backward_off(X, d_dinp, d_dw, d_dout, d_inp, d_w, 1.0f, d_rstd_ref, N, C);
        snprintf(what, sizeof what, "rmsnorm_off bwd dinp N%d C%d", N, C);
        expect_close(what, d_dinp, dinp, nc, TOL_RED);
        snprintf(what, sizeof what, "rmsnorm_off bwd dw N%d C%d", N, C);
        expect_close(what, d_dw, dw, C, TOL_RED);
        // the split norm's ops, D = 3 C (another rank's features), rstd aliasing ss
        float *st = xmalloc(N * 4), *d_st = dev_nan(N);
        R->rmsnorm_part_stat(R, st, dout, inp, w, N, C);
        X->rmsnorm_part_stat(X, d_st, d_dout, d_inp, d_w, N, C);
        snprintf(what, sizeof what, "rmsnorm_part_stat N%d C%d", N, C);
        expect_close(what, d_st, st, N, TOL_RED);
        R->rmsnorm_part_stat(R, st, inp, inp, NULL, N, C);
        X->rmsnorm_part_stat(X, d_st, d_inp, d_inp, NULL, N, C);
        expect_close(what, d_st, st, N, TOL_RED);
        for (int r = 0; r < N; r++) st[r] *= 3.0f;
        X->upload(X, d_st, st, N * 4);
        R->rmsnorm_part_forward(R, out, st, inp, w, st, N, C, 3 * C, 1e-6f);
        X->rmsnorm_part_forward(X, d_out, d_st, d_inp, d_w, d_st, N, C, 3 * C, 1e-6f);
        snprintf(what, sizeof what, "rmsnorm_part_forward N%d C%d", N, C);
        expect_close(what, d_out, out, nc, TOL_RED);
        expect_close(what, d_st, st, N, TOL_RED);
        float *pdot = new_normal(N, 3), *d_pdot = dev_from(pdot, N * 4), *d_pr = dev_from(st, N * 4);
        R->rmsnorm_part_backward(R, dinp, dw, dout, inp, w, st, pdot, N, C, 3 * C);
        X->rmsnorm_part_backward(X, d_dinp, d_dw, d_dout, d_inp, d_w, d_pr, d_pdot, N, C, 3 * C);
        snprintf(what, sizeof what, "rmsnorm_part_backward dinp N%d C%d", N, C);
        expect_close(what, d_dinp, dinp, nc, TOL_RED);
        snprintf(what, sizeof what, "rmsnorm_part_backward dw N%d C%d", N, C);
        expect_close(what, d_dw, dw, C, TOL_RED);
        X->free(X, d_st), X->free(X, d_pdot), X->free(X, d_pr);
        free(st), free(pdot);
        // geglu: gate = inp, up = dout
        R->geglu_forward(R, out, inp, dout, nc);
        X->geglu_forward(X, d_out, d_inp, d_dout, nc);
        snprintf(what, sizeof what, "geglu fwd n%zu", nc);
        expect_close(what, d_out, out, nc, TOL_EW);
        float *dup = new_normal(nc, 1), *d_dup = dev_from(dup, nc * 4);
        R->geglu_backward(R, dinp, dup, dout, inp, dout, nc);
        X->geglu_backward(X, d_dinp, d_dup, d_dout, d_inp, d_dout, nc);
        snprintf(what, sizeof what, "geglu bwd dgate n%zu", nc);
        expect_close(what, d_dinp, dinp, nc, TOL_EW * 4);  // an accumulate of three fp32 products
        snprintf(what, sizeof what, "geglu bwd dup n%zu", nc);
        expect_close(what, d_dup, dup, nc, TOL_EW * 4);
        // softcap in place, and its backward from the capped values
        float *x = new_copy(inp, nc), *d_x = dev_from(inp, nc * 4);
        R->softcap_forward(R, x, 1.5f, nc);
        X->softcap_forward(X, d_x, 1.5f, nc);
        snprintf(what, sizeof what, "softcap fwd n%zu", nc);
        expect_close(what, d_x, x, nc, TOL_EW);
        float *d_xref = dev_from(x, nc * 4);
        R->softcap_backward(R, dup, x, 1.5f, nc);
        X->softcap_backward(X, d_dup, d_xref, 1.5f, nc);
        snprintf(what, sizeof what, "softcap bwd n%zu", nc);
        expect_close(what, d_dup, dup, nc, TOL_EW * 4);
        X->free(X, d_inp), X->free(X, d_w), X->free(X, d_dout), X->free(X, d_out), X->free(X, d_rstd);
        X->free(X, d_dinp), X->free(X, d_dw), X->free(X, d_rstd_ref), X->free(X, d_dup), X->free(X, d_x);
        X->free(X, d_xref);
        free(inp), free(w), free(dout), free(out), free(rstd), free(dinp), free(dw), free(dup), free(x);
    }
}

// The three capped heads against ref: forward outputs, dh and dW, on rows with an ignored one,
// chunks that do not divide N, fp32 and bf16 weights.
static void check_heads_cap(int N, int C, int V, int chunk, DType wdt, float cap) {
    char what[128];
    size_t nh = (size_t)N * C, nw = (size_t)V * C;
    float *h = new_normal(nh, 1), *W = new_normal(nw, 1), *ht = new_normal(nh, 1), *Wt = new_normal(nw, 1);
    float *wts = new_normal(N, 1), *coef = new_normal(N, 1);
    int32_t *tgt = xmalloc(N * 4);
    for (int r = 0; r < N; r++) tgt[r] = r % 4 == 1 ? IGNORE_INDEX : (int32_t)rng_below(&ops_rng, (uint64_t)V);
    uint16_t *Wb = to_bf16(W, nw), *Wtb = to_bf16(Wt, nw);
    if (wdt == DT_BF16) {  // the reference reads the same rounded weights
        for (size_t i = 0; i < nw; i++) W[i] = bf16_to_f32(Wb[i]), Wt[i] = bf16_to_f32(Wtb[i]);
    }
    const void *Wp = wdt == DT_BF16 ? (const void *)Wb : W, *Wtp = wdt == DT_BF16 ? (const void *)Wtb : Wt;
    size_t wbytes = dtype_bytes(wdt, nw);
    float *d_h = dev_from(h, nh * 4), *d_ht = dev_from(ht, nh * 4), *d_w = dev_from(wts, N * 4);
    float *d_coef = dev_from(coef, N * 4);
    void *d_W = dev_from(Wp, wbytes), *d_Wt = dev_from(Wtp, wbytes);
    int32_t *d_tgt = dev_from(tgt, N * 4);
    size_t ns = (size_t)chunk * (V + C);
    float *scr = xmalloc(ns * 4), *scr2 = xmalloc(ns * 4), *d_scr = X->alloc(X, ns * 4), *d_scr2 = X->alloc(X, ns * 4);
    float *l = xmalloc(N * 4), *l2 = xmalloc(N * 4), *d_l = dev_nan(N), *d_l2 = dev_nan(N);
    float *dh = new_normal(nh, 1), *dW = new_normal(nw, 1);
    float *d_dh = dev_from(dh, nh * 4), *d_dW = dev_from(dW, nw * 4);
    const char *dn = dtype_st_name(wdt);
    // ce
    R->ce_head_cap(R, l, NULL, l2, dh, dW, h, W, DT_F32, tgt, wts, 0.5f, cap, scr, chunk, N, C, V);
    X->ce_head_cap(X, d_l, NULL, d_l2, d_dh, d_dW, d_h, d_W, wdt, d_tgt, d_w, 0.5f, cap, d_scr, chunk, N, C, V);
    snprintf(what, sizeof what, "ce_head_cap loss N%d V%d cap %g %s", N, V, cap, dn);
    expect_close(what, d_l, l, N, tol_gemm);
    snprintf(what, sizeof what, "ce_head_cap entropy N%d V%d cap %g %s", N, V, cap, dn);
    expect_close_entropy(what, d_l2, l2, h, W, N, C, V, 1.0, tol_gemm);
    snprintf(what, sizeof what, "ce_head_cap dh N%d V%d cap %g %s", N, V, cap, dn);
    expect_close(what, d_dh, dh, nh, tol_gemm);
    snprintf(what, sizeof what, "ce_head_cap dW N%d V%d cap %g %s", N, V, cap, dn);
    expect_close(what, d_dW, dW, nw, tol_gemm);
    // logprob
    R->logprob_head_cap(R, l, l2, NULL, dh, dW, h, W, DT_F32, tgt, coef, 0.7f, cap, scr, chunk, N, C, V);
    X->logprob_head_cap(X, d_l, d_l2, NULL, d_dh, d_dW, d_h, d_W, wdt, d_tgt, d_coef, 0.7f, cap, d_scr, chunk, N, C, V);
    snprintf(what, sizeof what, "logprob_head_cap logp N%d V%d cap %g %s", N, V, cap, dn);
    expect_close(what, d_l, l, N, tol_gemm);
    snprintf(what, sizeof what, "logprob_head_cap entropy N%d V%d cap %g %s", N, V, cap, dn);
    expect_close_entropy(what, d_l2, l2, h, W, N, C, V, 0.7, tol_gemm);
    snprintf(what, sizeof what, "logprob_head_cap dh N%d V%d cap %g %s", N, V, cap, dn);
    expect_close(what, d_dh, dh, nh, tol_gemm);
    snprintf(what, sizeof what, "logprob_head_cap dW N%d V%d cap %g %s", N, V, cap, dn);
    expect_close(what, d_dW, dW, nw, tol_gemm);
    // distill: student capped at cap, teacher at 2 cap; beta 0.5 and top-k
    for (int k = 0; k < 2; k++) {
        int top_k = k ? 5 : 0;
        R->distill_head_cap(R, l, l2, dh, dW, h, W, DT_F32, ht, Wt, DT_F32, tgt, wts, 0.9f, 0.5f, top_k, 0.5f, cap,
                            2 * cap, scr, scr2, chunk, N, C, C, V);
        X->distill_head_cap(X, d_l, d_l2, d_dh, d_dW, d_h, d_W, wdt, d_ht, d_Wt, wdt, d_tgt, d_w, 0.9f, 0.5f, top_k,
                            0.5f, cap, 2 * cap, d_scr, d_scr2, chunk, N, C, C, V);
        snprintf(what, sizeof what, "distill_head_cap loss top%d N%d cap %g %s", top_k, N, cap, dn);
        expect_close(what, d_l, l, N, tol_gemm);
        snprintf(what, sizeof what, "distill_head_cap kl top%d N%d cap %g %s", top_k, N, cap, dn);
        expect_close(what, d_l2, l2, N, tol_gemm);
        snprintf(what, sizeof what, "distill_head_cap dh top%d N%d cap %g %s", top_k, N, cap, dn);
        expect_close(what, d_dh, dh, nh, tol_gemm);
        snprintf(what, sizeof what, "distill_head_cap dW top%d N%d cap %g %s", top_k, N, cap, dn);
        expect_close(what, d_dW, dW, nw, tol_gemm);
    }
    X->free(X, d_h), X->free(X, d_ht), X->free(X, d_w), X->free(X, d_coef), X->free(X, d_W), X->free(X, d_Wt);
    X->free(X, d_tgt), X->free(X, d_scr), X->free(X, d_scr2), X->free(X, d_l), X->free(X, d_l2), X->free(X, d_dh);
    X->free(X, d_dW);
    free(h), free(W), free(ht), free(Wt), free(wts), free(coef), free(tgt), free(Wb), free(Wtb), free(scr), free(scr2);
    free(l), free(l2), free(dh), free(dW);
}

static void test_heads_cap(void) {
    check_heads_cap(9, 13, 1031, 4, DT_F32, 1.5f);  // |z| ~ 3.6 >> cap: deep in the tanh
    check_heads_cap(9, 13, 1031, 20, DT_BF16, 30.0f);
    check_heads_cap(1, 16, 64, 3, DT_F32, 5.0f);
    check_heads_cap(9, 13, 1031, 4, DT_F32, 0.0f);  // 0 = the plain heads
}

int main(void) {
    R = backend_ref_create(1);
    backend_ref_install_sampling(R);
    backend_ref_install_heads(R);
    RUN_OWN(test_ref_attention_grad);
    RUN_OWN(test_ref_attention_forward_rule);
    RUN_OWN(test_ref_elementwise_grad);
    RUN_OWN(test_ref_heads_grad);
    RUN_OWN(test_ref_ring_equals_full);
    RUN_OWN(test_ref_rmsnorm_part);
    for (size_t i = 0; i < ARRAY_LEN(backend_runs); i++) {
        const BackendRun *br = &backend_runs[i];
        Err e = {0};
        if (br->gemm) setenv("STILL_CUDA_GEMM", br->gemm, 1);
        Status st = backend_create(br->name, 2, &X, &e);
        if (br->gemm) unsetenv("STILL_CUDA_GEMM");
        if (st != ST_OK) {
            printf("skip family parity %s%s%s: %s\n", br->name, br->gemm ? " gemm " : "", br->gemm ? br->gemm : "",
                   e.msg);
            continue;
        }
        int bf16 = br->gemm && !strcmp(br->gemm, "bf16");
        tol_gemm = bf16 ? TOL_BF16 : TOL_RED;
        tol_plain = bf16 ? 3e-2 : TOL_RED;
        printf("# backend %s%s%s\n", X->name, br->gemm ? " gemm " : "", br->gemm ? br->gemm : "");
        RUN_OWN(test_attention_opt);  // bf16 too: AttnOpts run the fp32 kernels
        RUN_OWN(test_heads_cap);
        if (!bf16) {
            RUN_OWN(test_kv_window);
            RUN_OWN(test_elementwise_family);
        }
        backend_destroy(X);
    }
    backend_destroy(R);
    TEST_MAIN_END();
}
