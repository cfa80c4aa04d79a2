// test_ref_grad.c: the reference backend (the spec) against central finite differences. Every
// backward op is checked through a random projection of its forward output, loss = sum(out * r),
// whose gradient with respect to out is r. Gradient buffers start non-zero so that `+=` is
// checked too (the analytic gradient is what the op added). Forward ops get independent checks
// of their own where a simple property pins them down (masking, isolated tokens, uniform scores).
//
// Tolerances: the ops compute in double but store fp32, so a loss difference carries ~1e-7
// relative noise per output; divided by a step of 1e-2 that is ~1e-5..1e-4 of the gradient.
// Nonlinear ops add truncation error ~eps^2 f'''. tol 2e-3 covers both with margin, while a
// wrong formula (a missing term, a transposed index) gives errors of order 1.
#include "ops_util.h"

static Backend *R;

// ---------------------------------------------------------------- rmsnorm
typedef struct {
    float *out, *rstd, *inp, *w, *r;
    int N, C;
    float eps;
} RmsCtx;

static double rms_loss(void *p) {
    RmsCtx *c = p;
    R->rmsnorm_forward(R, c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_rmsnorm(void) {
    int N = 5, C = 13;
    size_t nc = (size_t)N * C;
    RmsCtx c = {xmalloc(nc * 4), xmalloc(N * 4), new_normal(nc, 1.5f), new_normal(C, 1.0f), new_normal(nc, 1.0f),
                N, C, 1e-5f};
    rms_loss(&c);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)c.inp[n * C + i] * c.inp[n * C + i];
        EXPECT(test_rel_err(c.rstd[n], 1.0 / sqrt(ss / C + 1e-5), 1e-30) < 1e-6);
    }
    float *dinp0 = new_normal(nc, 1.0f), *dw0 = new_normal(C, 1.0f);
    float *dinp = new_copy(dinp0, nc), *dw = new_copy(dw0, C);
    R->rmsnorm_backward(R, dinp, dw, c.r, c.inp, c.w, c.rstd, N, C);
    float *gi = grad_delta(dinp, dinp0, nc), *gw = grad_delta(dw, dw0, C);
    gradcheck("rmsnorm dinp", rms_loss, &c, c.inp, nc, gi, 200, 1e-2, 2e-3, 1e-2);
    gradcheck("rmsnorm dw", rms_loss, &c, c.w, C, gw, 200, 1e-2, 2e-3, 1e-2);
    // NULL gradients are skipped
    R->rmsnorm_backward(R, NULL, NULL, c.r, c.inp, c.w, c.rstd, N, C);
    free(c.out), free(c.rstd), free(c.inp), free(c.w), free(c.r);
    free(dinp0), free(dw0), free(dinp), free(dw), free(gi), free(gw);
}

// ---------------------------------------------------------------- matmul
typedef struct {
    float *out, *inp, *w, *bias, *r;
    int N, C, OC;
} MmCtx;

static double mm_loss(void *p) {
    MmCtx *c = p;
    R->matmul_forward(R, c->out, c->inp, c->w, DT_F32, c->bias, c->N, c->C, c->OC);
    return dot_d(c->out, c->r, (size_t)c->N * c->OC);
}

static void test_matmul(void) {
    int N = 4, C = 7, OC = 5;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    MmCtx c = {xmalloc(no * 4), new_normal(ni, 1), new_normal(nw, 1), new_normal(OC, 1), new_normal(no, 1), N, C, OC};
    mm_loss(&c);
    // forward against a direct sum
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = c.bias[o];
            for (int i = 0; i < C; i++) acc += (double)c.inp[n * C + i] * c.w[o * C + i];
            EXPECT(test_rel_err(c.out[n * OC + o], acc, 1e-6) < 1e-6);
        }
    float *di0 = new_normal(ni, 1), *dw0 = new_normal(nw, 1), *db0 = new_normal(OC, 1);
    float *di = new_copy(di0, ni), *dw = new_copy(dw0, nw), *db = new_copy(db0, OC);
    R->matmul_backward(R, di, dw, db, c.r, c.inp, c.w, DT_F32, N, C, OC);
    float *gi = grad_delta(di, di0, ni), *gw = grad_delta(dw, dw0, nw), *gb = grad_delta(db, db0, OC);
    // linear in each input: no truncation error, so a large step and a tight tolerance
    gradcheck("matmul dinp", mm_loss, &c, c.inp, ni, gi, 200, 0.25, 1e-4, 1e-2);
    gradcheck("matmul dw", mm_loss, &c, c.w, nw, gw, 200, 0.25, 1e-4, 1e-2);
    gradcheck("matmul dbias", mm_loss, &c, c.bias, OC, gb, 200, 0.25, 1e-4, 1e-2);

    // bf16 weights: exactly the fp32 op on the bf16-rounded weights (double accumulation both ways)
    uint16_t *wb = xmalloc(nw * 2);
    float *wr = xmalloc(nw * 4), *o1 = xmalloc(no * 4), *o2 = xmalloc(no * 4);
    for (size_t i = 0; i < nw; i++) wb[i] = f32_to_bf16(c.w[i]), wr[i] = bf16_to_f32(wb[i]);
    R->matmul_forward(R, o1, c.inp, wb, DT_BF16, c.bias, N, C, OC);
    R->matmul_forward(R, o2, c.inp, wr, DT_F32, c.bias, N, C, OC);
    EXPECT(!memcmp(o1, o2, no * 4));
    float *d1 = xcalloc(ni, 4), *d2 = xcalloc(ni, 4);
    R->matmul_backward(R, d1, NULL, NULL, c.r, c.inp, wb, DT_BF16, N, C, OC);
    R->matmul_backward(R, d2, NULL, NULL, c.r, c.inp, wr, DT_F32, N, C, OC);
    EXPECT(!memcmp(d1, d2, ni * 4));
    free(wb), free(wr), free(o1), free(o2), free(d1), free(d2);
    free(c.out), free(c.inp), free(c.w), free(c.bias), free(c.r);
    free(di0), free(dw0), free(db0), free(di), free(dw), free(db), free(gi), free(gw), free(gb);
}

// ---------------------------------------------------------------- embedding
typedef struct {
    float *out, *wte, *r;
    int32_t *ids;
    int N, C;
} EmbCtx;

static double emb_loss(void *p) {
    EmbCtx *c = p;
    R->embedding_forward(R, c->out, c->ids, c->wte, DT_F32, c->N, c->C);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_embedding(void) {
    int N = 6, C = 5, V = 9;
    int32_t ids[6] = {3, 0, 8, 3, 5, 3};  // repeated ids accumulate
    EmbCtx c = {xmalloc(N * C * 4), new_normal((size_t)V * C, 1), new_normal((size_t)N * C, 1), ids, N, C};
    emb_loss(&c);
    for (int n = 0; n < N; n++) EXPECT(!memcmp(c.out + n * C, c.wte + ids[n] * C, C * 4));
    float *d0 = new_normal((size_t)V * C, 1), *d = new_copy(d0, (size_t)V * C);
    R->embedding_backward(R, d, c.r, ids, N, C);
    float *g = grad_delta(d, d0, (size_t)V * C);
    gradcheck("embedding dwte", emb_loss, &c, c.wte, (size_t)V * C, g, 200, 0.25, 1e-4, 1e-2);
    // bf16 table
    uint16_t *wb = xmalloc((size_t)V * C * 2);
    for (int i = 0; i < V * C; i++) wb[i] = f32_to_bf16(c.wte[i]);
    R->embedding_forward(R, c.out, ids, wb, DT_BF16, N, C);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) EXPECT(c.out[n * C + i] == bf16_to_f32(wb[ids[n] * C + i]));
    free(wb), free(c.out), free(c.wte), free(c.r), free(d0), free(d), free(g);
}

// ---------------------------------------------------------------- rope
typedef struct {
    float *x, *tmp, *inv_freq, *r;
    int32_t *pos;
    float mscale;
    int N, NH, HD, RD;
} RopeCtx;

static double rope_loss(void *p) {
    RopeCtx *c = p;
    size_t n = (size_t)c->N * c->NH * c->HD;
    memcpy(c->tmp, c->x, n * 4);
    R->rope_forward(R, c->tmp, c->pos, c->inv_freq, c->mscale, c->N, c->NH, c->HD, c->RD);
    return dot_d(c->tmp, c->r, n);
}

// RD = HD: every dim rotates; RD < HD (partial rotary): dims [RD, HD) pass through unscaled.
static void check_rope_grad(int HD, int RD) {
    int N = 5, NH = 3;
    size_t n = (size_t)N * NH * HD;
    int32_t pos[5] = {0, 1, 7, 1000, 40000};
    float inv_freq[8];
    for (int i = 0; i < RD / 2; i++) inv_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / RD)) * (i == 2 ? 0.25f : 1.0f);
    RopeCtx c = {new_normal(n, 1), xmalloc(n * 4), inv_freq, new_normal(n, 1), pos, 1.3f, N, NH, HD, RD};
    rope_loss(&c);
    // forward against the formula: pairs (i, i + RD/2) rotate by pos*inv_freq, scaled by mscale
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NH; h++) {
            size_t o = ((size_t)t * NH + h) * HD;
            for (int i = 0; i < RD / 2; i++) {
                double a = (float)pos[t] * inv_freq[i];
                double x0 = c.x[o + i], x1 = c.x[o + i + RD / 2];
                double e0 = 1.3 * (x0 * cos(a) - x1 * sin(a)), e1 = 1.3 * (x1 * cos(a) + x0 * sin(a));
                EXPECT(fabs(c.tmp[o + i] - e0) < 1e-5 && fabs(c.tmp[o + i + RD / 2] - e1) < 1e-5);
            }
            for (int i = RD; i < HD; i++) EXPECT(c.tmp[o + i] == c.x[o + i]);
        }
    float *g = new_copy(c.r, n);
    R->rope_backward(R, g, pos, inv_freq, 1.3f, N, NH, HD, RD);
    gradcheck("rope dx", rope_loss, &c, c.x, n, g, 300, 0.25, 1e-4, 1e-2);
    // at position 0 the rotation is the identity times mscale (the pass-through dims unscaled)
    for (int i = 0; i < NH * HD; i++) EXPECT(fabsf(c.tmp[i] - (i % HD < RD ? 1.3f : 1.0f) * c.x[i]) < 1e-6f);
    free(c.x), free(c.tmp), free(c.r), free(g);
}

static void test_rope(void) {
    check_rope_grad(10, 10);
    check_rope_grad(16, 12);
}

// ---------------------------------------------------------------- swiglu
typedef struct {
    float *out, *gate, *up, *r;
    size_t n;
} SwiCtx;

static double swi_loss(void *p) {
    SwiCtx *c = p;
    R->swiglu_forward(R, c->out, c->gate, c->up, c->n);
    return dot_d(c->out, c->r, c->n);
}

static void test_swiglu(void) {
    size_t n = 37;
    SwiCtx c = {xmalloc(n * 4), new_normal(n, 2.5f), new_normal(n, 1), new_normal(n, 1), n};
    swi_loss(&c);
    for (size_t i = 0; i < n; i++) {
        double g = c.gate[i];
        EXPECT(test_rel_err(c.out[i], g / (1 + exp(-g)) * c.up[i], 1e-6) < 1e-6);
    }
    float *dg0 = new_normal(n, 1), *du0 = new_normal(n, 1), *dg = new_copy(dg0, n), *du = new_copy(du0, n);
    R->swiglu_backward(R, dg, du, c.r, c.gate, c.up, n);
    float *gg = grad_delta(dg, dg0, n), *gu = grad_delta(du, du0, n);
    gradcheck("swiglu dgate", swi_loss, &c, c.gate, n, gg, 200, 1e-2, 2e-3, 1e-2);
    gradcheck("swiglu dup", swi_loss, &c, c.up, n, gu, 200, 0.25, 1e-4, 1e-2);
    free(c.out), free(c.gate), free(c.up), free(c.r), free(dg0), free(du0), free(dg), free(du), free(gg), free(gu);
}

// ---------------------------------------------------------------- attention
typedef struct {
    float *out, *lse, *q, *k, *v, *r;
    int32_t *seg;
    int B, T, NH, NKV, HD;
} AttCtx;

static double att_loss(void *p) {
    AttCtx *c = p;
    R->attention_forward(R, c->out, c->lse, c->q, c->k, c->v, c->seg, c->B, c->T, c->NH, c->NKV, c->HD);
    return dot_d(c->out, c->r, (size_t)c->B * c->T * c->NH * c->HD);
}

static void test_attention_grad(void) {
    // batch row 0: left padding; row 1: three packed documents; GQA with 3 query heads per kv head
    int B = 2, T = 7, NH = 6, NKV = 2, HD = 4;
    int32_t seg[14] = {0, 0, 1, 1, 1, 1, 1, /**/ 3, 3, 3, 5, 5, 7, 7};
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    AttCtx c = {xmalloc(nq * 4), xmalloc((size_t)B * NH * T * 4), new_normal(nq, 1), new_normal(nk, 1),
                new_normal(nk, 1), new_normal(nq, 1), seg, B, T, NH, NKV, HD};
    att_loss(&c);
    float *dq0 = new_normal(nq, 1), *dk0 = new_normal(nk, 1), *dv0 = new_normal(nk, 1);
    float *dq = new_copy(dq0, nq), *dk = new_copy(dk0, nk), *dv = new_copy(dv0, nk);
    R->attention_backward(R, dq, dk, dv, c.r, c.out, c.lse, c.q, c.k, c.v, seg, B, T, NH, NKV, HD);
    float *gq = grad_delta(dq, dq0, nq), *gk = grad_delta(dk, dk0, nk), *gv = grad_delta(dv, dv0, nk);
    gradcheck("attention dq", att_loss, &c, c.q, nq, gq, 400, 1e-2, 2e-3, 1e-2);
    gradcheck("attention dk", att_loss, &c, c.k, nk, gk, 400, 1e-2, 2e-3, 1e-2);
    gradcheck("attention dv", att_loss, &c, c.v, nk, gv, 400, 0.25, 1e-4, 1e-2);
    // padding keys and queries get exactly zero gradient
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < NKV * HD; i++) EXPECT(gk[s * NKV * HD + i] == 0 && gv[s * NKV * HD + i] == 0);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < NH * HD; i++) EXPECT(gq[s * NH * HD + i] == 0);
    free(c.out), free(c.lse), free(c.q), free(c.k), free(c.v), free(c.r);
    free(dq0), free(dk0), free(dv0), free(dq), free(dk), free(dv), free(gq), free(gk), free(gv);
}

// Forward properties that pin the op down independently of its backward.
static void test_attention_forward_properties(void) {
    int B = 1, T = 6, NH = 4, NKV = 2, HD = 3;
    int32_t seg[6] = {0, 2, 2, 9, 4, 4};  // pad, a two-token doc, an isolated token, a two-token doc
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    float *q = new_normal(nq, 1), *k = new_normal(nk, 1), *v = new_normal(nk, 1);
    float *out = xmalloc(nq * 4), *lse = xmalloc((size_t)NH * T * 4);
    for (int h = 0; h < NH; h++) q[(5 * NH + h) * HD + 0] = q[(5 * NH + h) * HD + 1] = q[(5 * NH + h) * HD + 2] = 0;
    fill_normal(out, nq, 1);
    R->attention_forward(R, out, lse, q, k, v, seg, B, T, NH, NKV, HD);
    double scale = 1 / sqrt((double)HD);
    for (int h = 0; h < NH; h++) {
        int kh = h / 2;
        // padding query: zeros
        for (int d = 0; d < HD; d++) EXPECT(out[(0 * NH + h) * HD + d] == 0.0f);
        EXPECT(lse[h * T + 0] == 0.0f);
        // first token of a document and an isolated token attend only themselves
        for (int t = 1; t <= 3; t += 2) {
            for (int d = 0; d < HD; d++) EXPECT(fabsf(out[(t * NH + h) * HD + d] - v[(t * NKV + kh) * HD + d]) < 1e-6f);
            double sc = scale * dot_d(q + (t * NH + h) * HD, k + (t * NKV + kh) * HD, HD);
            EXPECT(fabs(lse[h * T + t] - sc) < 1e-5);
        }
        // a zero query scores every key 0: the mean of the document's values, lse = log(count)
        for (int d = 0; d < HD; d++) {
            double mean = 0.5 * ((double)v[(4 * NKV + kh) * HD + d] + v[(5 * NKV + kh) * HD + d]);
            EXPECT(fabs(out[(5 * NH + h) * HD + d] - mean) < 1e-6);
        }
        EXPECT(fabs(lse[h * T + 5] - log(2.0)) < 1e-6);
    }
    // values of the padding and of other documents do not reach a query
    float *out2 = xmalloc(nq * 4);
    for (int d = 0; d < NKV * HD; d++) v[0 * NKV * HD + d] += 100, v[3 * NKV * HD + d] -= 50;
    R->attention_forward(R, out2, lse, q, k, v, seg, B, T, NH, NKV, HD);
    for (int t = 1; t < T; t++)
        if (t != 3)
            for (int i = 0; i < NH * HD; i++) EXPECT(out2[t * NH * HD + i] == out[t * NH * HD + i]);
    free(q), free(k), free(v), free(out), free(out2), free(lse);
}

// ---------------------------------------------------------------- cross-entropy head
typedef struct {
    float *loss, *correct, *entropy, *h, *W, *weights, *scratch;
    int32_t *targets;
    float grad_scale;
    int N, C, V, chunk;
} CeCtx;

static double ce_loss(void *p) {
    CeCtx *c = p;
    R->ce_head(R, c->loss, c->correct, c->entropy, NULL, NULL, c->h, c->W, DT_F32, c->targets, c->weights,
               c->grad_scale, c->scratch, c->chunk, c->N, c->C, c->V);
    double acc = 0;
    for (int n = 0; n < c->N; n++) acc += c->loss[n];
    return acc * c->grad_scale;
}

static void test_ce_head(void) {
    int N = 7, C = 5, V = 11, chunk = 3;
    int32_t targets[7] = {4, IGNORE_INDEX, 0, 10, 4, IGNORE_INDEX, 7};
    float weights[7] = {1.0f, 5.0f, 0.5f, 2.0f, 0.0f, 1.0f, 1.5f};
    CeCtx c = {xmalloc(N * 4), xmalloc(N * 4), xmalloc(N * 4), new_normal((size_t)N * C, 1),
               new_normal((size_t)V * C, 1), weights, xmalloc((size_t)chunk * (V + C) * 4), targets, 0.7f, N, C, V,
               chunk};
    // make row 2's target its argmax so row_correct has a 1 to find
    for (int i = 0; i < C; i++) c.W[0 * C + i] = 3 * c.h[2 * C + i];
    ce_loss(&c);
    for (int n = 0; n < N; n++) {
        if (targets[n] == IGNORE_INDEX) {
            EXPECT(c.loss[n] == 0 && c.correct[n] == 0 && c.entropy[n] == 0);
            continue;
        }
        double z[11], mx = -INFINITY, sum = 0, ent = 0;
        int am = 0;
        for (int v = 0; v < V; v++) {
            z[v] = dot_d(c.h + n * C, c.W + v * C, C);
            if (z[v] > mx) mx = z[v], am = v;
        }
        for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
        for (int v = 0; v < V; v++) {
            double lp = z[v] - mx - log(sum);
            ent -= exp(lp) * lp;
        }
        double nll = -(z[targets[n]] - mx - log(sum));
        EXPECT(test_rel_err(c.loss[n], weights[n] * nll, 1e-6) < 1e-5);
        EXPECT(c.correct[n] == (am == targets[n] ? 1.0f : 0.0f));
        EXPECT(test_rel_err(c.entropy[n], ent, 1e-6) < 1e-5);
    }
    EXPECT(c.correct[2] == 1.0f);
    size_t nh = (size_t)N * C, nw = (size_t)V * C;
    float *dh0 = new_normal(nh, 1), *dW0 = new_normal(nw, 1), *dh = new_copy(dh0, nh), *dW = new_copy(dW0, nw);
    R->ce_head(R, c.loss, c.correct, c.entropy, dh, dW, c.h, c.W, DT_F32, targets, weights, c.grad_scale, c.scratch,
               chunk, N, C, V);
    float *gh = grad_delta(dh, dh0, nh), *gW = grad_delta(dW, dW0, nw);
    gradcheck("ce_head dh", ce_loss, &c, c.h, nh, gh, 300, 1e-2, 2e-3, 1e-2);
    gradcheck("ce_head dW", ce_loss, &c, c.W, nw, gW, 300, 1e-2, 2e-3, 1e-2);
    for (int i = 0; i < C; i++) EXPECT(gh[1 * C + i] == 0 && gh[5 * C + i] == 0 && gh[4 * C + i] == 0);
    // NULL weights mean 1 each
    float ones[7] = {1, 1, 1, 1, 1, 1, 1}, l1[7], l2[7];
    R->ce_head(R, l1, NULL, NULL, NULL, NULL, c.h, c.W, DT_F32, targets, NULL, 1, c.scratch, chunk, N, C, V);
    R->ce_head(R, l2, NULL, NULL, NULL, NULL, c.h, c.W, DT_F32, targets, ones, 1, c.scratch, chunk, N, C, V);
    EXPECT(!memcmp(l1, l2, sizeof l1));
    free(c.loss), free(c.correct), free(c.entropy), free(c.h), free(c.W), free(c.scratch);
    free(dh0), free(dW0), free(dh), free(dW), free(gh), free(gW);
}

// ---------------------------------------------------------------- elementwise
static void test_elementwise(void) {
    size_t n = 19;
    float *a = new_normal(n, 1), *b = new_normal(n, 1), *o = xmalloc(n * 4), *a0 = new_copy(a, n);
    R->add(R, o, a, b, n);
    for (size_t i = 0; i < n; i++) EXPECT(o[i] == a[i] + b[i]);
    R->add(R, a, a, b, n);  // out may alias an input
    EXPECT(!memcmp(a, o, n * 4));
    R->scale(R, o, -0.5f, n);
    for (size_t i = 0; i < n; i++) EXPECT(o[i] == -0.5f * (a0[i] + b[i]));
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)b[i] * b[i];
    EXPECT(R->sumsq(R, b, n) == ss);
    free(a), free(b), free(o), free(a0);
}

int main(void) {
    rng_init(&ops_rng, 1234, 0);
    R = backend_ref_create(1);
    RUN(test_rmsnorm);
    RUN(test_matmul);
    RUN(test_embedding);
    RUN(test_rope);
    RUN(test_swiglu);
    RUN(test_attention_grad);
    RUN(test_attention_forward_properties);
    RUN(test_ce_head);
    RUN(test_elementwise);
    backend_destroy(R);
    TEST_MAIN_END();
}
