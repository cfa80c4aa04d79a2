// test_backend_parity.c: every op of every backend this build can create (except ref) against
// the reference backend, forward and backward, on awkward shapes: T = 1, sizes that are no
// multiple of any tile (N=7, C=13, OC=29, V=1031, HD=10), head dims up to 256, GQA (NH=6, NKV=2),
// left padding, packed and recurring segments, odd chunks, fp32 and bf16 weights. Every buffer
// the op writes is followed by guard words that must come back untouched; forward outputs start
// as NaN so that `=` must overwrite every element; gradients start random so that `+=` is checked.
// Also: AdamW on every backend (ref included) against torch.optim.AdamW's formula written out
// in double, sumsq, run-to-run determinism, and (cuda, bf16 GEMMs) that GEMMs see fp32 weights
// through bf16 copies refreshed after every write.
//
// Tolerances, as max |got - ref| / max |ref| over a buffer (norm-wise, because the backends
// sum in a different order and a sum that cancels has error relative to its terms):
//   TOL_EW 2e-6: elementwise ops (a few fp32 ulp; exp and sin/cos by different routines)
//   TOL_RED 2e-5: ops that reduce in fp32 over up to ~5000 terms (matmul, rmsnorm, attention,
//                 ce_head, whose logits feed exp) against double accumulation
//   TOL_BF16 1e-2: GEMMs with bf16 operands and fp32 accumulation (cuda's default, ARCHITECTURE
//                 §3): each operand is rounded to 8 significant bits (relative error <= 2^-9), so
//                 each product is off by up to ~2^-8 and a random-signed sum of them by ~2^-9 of
//                 the sum's scale; 1e-2 leaves room for the max over a buffer, while a wrong index
//                 or transpose gives errors of order 1. Applies to matmul and the ce_head outputs
//                 (logits go through the bf16 GEMM); ce's argmax is then compared only on rows whose
//                 top-2 logit gap exceeds the bf16 error bound.
//   TOL_ATT_BF16 3e-2: cuda's tensor-core attention (bf16 mma, fp32 accumulation; its default with
//                 bf16 GEMMs): q, k, v and dout enter as bf16 (relative error <= 2^-9 each), so a
//                 score of unit-variance inputs errs by ~2^-9 * sqrt(2) ~ 3e-3 in the exponent and each
//                 probability by as much relatively; P and dS are rounded to bf16 once more for the
//                 second product (P V, dS K, P^T dout, dS^T q). Measured 1e-3..7.5e-3 norm-wise over
//                 the shapes of test_attention; a wrong fragment index, mask or tile edge gives 0.3..1.
//
// The ce_head entropy, H = logsumexp(z) - E_p[z], is a difference of terms of the logits' size
// (row 2 of each case predicts its target with a logit of |h|^2 ~ C at H ~ 0), so each row's error
// is relative to max(its max |z|, max |H|) (expect_close_entropy), at TOL_RED / TOL_BF16
// (measured 7e-7 / 1.1e-3 on the emulator). Every test draws its inputs from a stream of its own
// (RUN_OWN, keyed by its name): the cpu, cuda fp32 and cuda bf16 runs see the same inputs whatever
// ran before (one shared stream gave each run, and a machine without a backend, other data).
//
// The cuda backend runs twice: with STILL_CUDA_GEMM=fp32 (fp32 GEMM operands and the fp32 attention
// kernels: every op held to the fp32 tolerances above) and with its bf16 default (the GEMM ops at
// TOL_BF16, the tensor-core attention at TOL_ATT_BF16). The sampling ops
// run on every backend against ref: same ids and processed scores (bit for bit: the fixed-point
// arithmetic of sample_math.h), log-probs within 1e-5.
#include "parity_util.h"

#include "backend/cpu/cpu.h"

#define TOL_EW 2e-6
#define TOL_RED 2e-5
#define TOL_BF16 1e-2
#define TOL_ATT_BF16 3e-2

// Every backend held to ref; gemm: STILL_CUDA_GEMM for the run (NULL: leave it alone).
typedef struct {
    const char *name, *gemm;
} BackendRun;
static const BackendRun backend_runs[] = {{"cpu", NULL}, {"cuda", "fp32"}, {"cuda", "bf16"}};
static const char *backend_names[] = {"cpu", "cuda"};
static double tol_gemm = TOL_RED;  // tolerance of the GEMM-based ops in this run
static double tol_attn = TOL_RED;  // tolerance of attention in this run
static int gemm_bf16 = 0;          // this run's GEMMs round operands to bf16
// ---------------------------------------------------------------- ops
static void check_embedding(int N, int C, int V, DType wdt) {
    char what[96];
    int32_t *ids = xmalloc(N * 4);
    for (int n = 0; n < N; n++) ids[n] = (int32_t)rng_below(&ops_rng, (uint64_t)(n % 3 == 2 ? 3 : V));  // repeats
    float *wte = new_normal((size_t)V * C, 1), *dout = new_normal((size_t)N * C, 1);
    uint16_t *wb = to_bf16(wte, (size_t)V * C);
    BlockQ8_0 *wq = to_q8_0(wte, (size_t)V * C);
    const void *w = wdt == DT_BF16 ? (const void *)wb : wdt == DT_Q8_0 ? (const void *)wq : wte;
    size_t wbytes = dtype_bytes(wdt, (size_t)V * C);
    float *out = xmalloc((size_t)N * C * 4), *dwte = new_normal((size_t)V * C, 1);
    float *d_out = dev_nan((size_t)N * C), *d_dwte = dev_from(dwte, (size_t)V * C * 4);
    int32_t *d_ids = dev_from(ids, N * 4);
    void *d_w = dev_from(w, wbytes);
    float *d_dout = dev_from(dout, (size_t)N * C * 4);
    R->embedding_forward(R, out, ids, w, wdt, N, C);
    X->embedding_forward(X, d_out, d_ids, d_w, wdt, N, C);
    snprintf(what, sizeof what, "embedding fwd N%d C%d %s", N, C, dtype_st_name(wdt));
    expect_close(what, d_out, out, (size_t)N * C, 0);
    R->embedding_backward(R, dwte, dout, ids, N, C);
    X->embedding_backward(X, d_dwte, d_dout, d_ids, N, C);
    snprintf(what, sizeof what, "embedding bwd N%d C%d", N, C);
    expect_close(what, d_dwte, dwte, (size_t)V * C, TOL_EW);
    X->free(X, d_out), X->free(X, d_dwte), X->free(X, d_ids), X->free(X, d_w), X->free(X, d_dout);
    free(ids), free(wte), free(dout), free(wb), free(wq), free(out), free(dwte);
}

static void test_embedding(void) {
    check_embedding(7, 13, 29, DT_F32);
    check_embedding(1, 13, 29, DT_BF16);
    check_embedding(300, 77, 50, DT_BF16);  // large enough for the parallel paths
    Rng saved = ops_rng;  // Q8_0 cases draw from their own stream: the other cases keep their inputs
    rng_init(&ops_rng, 808, 0);
    check_embedding(9, 64, 29, DT_Q8_0);
    ops_rng = saved;
}

static void check_rmsnorm(int N, int C) {
    char what[96];
    size_t nc = (size_t)N * C;
    float *inp = new_normal(nc, 2), *w = new_normal(C, 1), *dout = new_normal(nc, 1);
    float *out = xmalloc(nc * 4), *rstd = xmalloc(N * 4), *dinp = new_normal(nc, 1), *dw = new_normal(C, 1);
    float *d_inp = dev_from(inp, nc * 4), *d_w = dev_from(w, C * 4), *d_dout = dev_from(dout, nc * 4);
    float *d_out = dev_nan(nc), *d_rstd = dev_nan(N), *d_dinp = dev_from(dinp, nc * 4), *d_dw = dev_from(dw, C * 4);
    R->rmsnorm_forward(R, out, rstd, inp, w, N, C, 1e-6f);
    X->rmsnorm_forward(X, d_out, d_rstd, d_inp, d_w, N, C, 1e-6f);
    snprintf(what, sizeof what, "rmsnorm fwd N%d C%d", N, C);
    expect_close(what, d_out, out, nc, TOL_RED);
    expect_close(what, d_rstd, rstd, N, TOL_RED);
    // backward from the reference's rstd on both, so only the backward op differs
    float *d_rstd_ref = dev_from(rstd, N * 4);
    R->rmsnorm_backward(R, dinp, dw, dout, inp, w, rstd, N, C);
    X->rmsnorm_backward(X, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd_ref, N, C);
    snprintf(what, sizeof what, "rmsnorm bwd dinp N%d C%d", N, C);
    expect_close(what, d_dinp, dinp, nc, TOL_RED);
    snprintf(what, sizeof what, "rmsnorm bwd dw N%d C%d", N, C);
    expect_close(what, d_dw, dw, C, TOL_RED);
    X->free(X, d_inp), X->free(X, d_w), X->free(X, d_dout), X->free(X, d_out), X->free(X, d_rstd);
    X->free(X, d_dinp), X->free(X, d_dw), X->free(X, d_rstd_ref);
    free(inp), free(w), free(dout), free(out), free(rstd), free(dinp), free(dw);
}

static void test_rmsnorm(void) {
    check_rmsnorm(7, 13);
    check_rmsnorm(1, 10);
    check_rmsnorm(300, 77);
}

static void check_matmul(int N, int C, int OC, DType wdt, int with_bias) {
    char what[96];
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *inp = new_normal(ni, 1), *w = new_normal(nw, 1), *bias = with_bias ? new_normal(OC, 1) : NULL;
    float *dout = new_normal(no, 1);
    uint16_t *wb = to_bf16(w, nw);
    BlockQ8_0 *wq = to_q8_0(w, nw);
    const void *wp = wdt == DT_BF16 ? (const void *)wb : wdt == DT_Q8_0 ? (const void *)wq : w;
    float *out = xmalloc(no * 4), *dinp = new_normal(ni, 1), *dw = new_normal(nw, 1), *db = new_normal(OC, 1);
    float *d_inp = dev_from(inp, ni * 4), *d_bias = bias ? dev_from(bias, OC * 4) : NULL;
    void *d_w = dev_from(wp, dtype_bytes(wdt, nw));
    float *d_dout = dev_from(dout, no * 4), *d_out = dev_nan(no);
    float *d_dinp = dev_from(dinp, ni * 4), *d_dw = dev_from(dw, nw * 4), *d_db = dev_from(db, OC * 4);
    R->matmul_forward(R, out, inp, wp, wdt, bias, N, C, OC);
    X->matmul_forward(X, d_out, d_inp, d_w, wdt, d_bias, N, C, OC);
    snprintf(what, sizeof what, "matmul fwd %dx%dx%d %s%s", N, C, OC, dtype_st_name(wdt), bias ? " bias" : "");
    expect_close(what, d_out, out, no, tol_gemm);
    R->matmul_backward(R, dinp, dw, bias ? db : NULL, dout, inp, wp, wdt, N, C, OC);
    X->matmul_backward(X, d_dinp, d_dw, bias ? d_db : NULL, d_dout, d_inp, d_w, wdt, N, C, OC);
    snprintf(what, sizeof what, "matmul bwd dinp %dx%dx%d %s", N, C, OC, dtype_st_name(wdt));
    expect_close(what, d_dinp, dinp, ni, tol_gemm);
    snprintf(what, sizeof what, "matmul bwd dw %dx%dx%d", N, C, OC);
    expect_close(what, d_dw, dw, nw, tol_gemm);
    snprintf(what, sizeof what, "matmul bwd dbias %dx%dx%d", N, C, OC);
    expect_close(what, d_db, db, OC, TOL_RED);  // untouched when bias is NULL
    // NULL gradients: only dw
    R->matmul_backward(R, NULL, dw, NULL, dout, inp, wp, wdt, N, C, OC);
    X->matmul_backward(X, NULL, d_dw, NULL, d_dout, d_inp, d_w, wdt, N, C, OC);
    snprintf(what, sizeof what, "matmul bwd dw only %dx%dx%d", N, C, OC);
    expect_close(what, d_dw, dw, nw, tol_gemm);
    X->free(X, d_inp), X->free(X, d_w), X->free(X, d_dout), X->free(X, d_out), X->free(X, d_dinp), X->free(X, d_dw);
    X->free(X, d_db);
    if (d_bias) X->free(X, d_bias);
    free(inp), free(w), free(bias), free(dout), free(wb), free(wq), free(out), free(dinp), free(dw), free(db);
}

static void test_matmul(void) {
    check_matmul(7, 13, 29, DT_F32, 1);
    check_matmul(7, 13, 29, DT_BF16, 0);
    check_matmul(1, 13, 29, DT_F32, 0);
    check_matmul(1, 13, 29, DT_BF16, 1);   // decode-sized: the fused bf16 path
    check_matmul(3, 100, 700, DT_BF16, 1);
    check_matmul(9, 1000, 2200, DT_BF16, 0);  // more than one converted panel (2M floats each)
    check_matmul(64, 96, 33, DT_F32, 1);
    // Q8_0 weights (the frozen base of an adapter has a backward too): decode-sized (cpu_gemv.c,
    // cuda's warp-per-row kernel) with and without bias, and through converted tiles / operands
    Rng saved = ops_rng;
    rng_init(&ops_rng, 808, 1);
    check_matmul(1, 64, 29, DT_Q8_0, 1);
    check_matmul(8, 96, 300, DT_Q8_0, 0);
    check_matmul(20, 128, 50, DT_Q8_0, 1);
    ops_rng = saved;
}

static void check_rope(int N, int NH, int HD, int RD, float mscale) {
    char what[96];
    size_t n = (size_t)N * NH * HD;
    int32_t *pos = xmalloc(N * 4);
    for (int i = 0; i < N; i++) pos[i] = i == N - 1 ? 40000 : (int32_t)rng_below(&ops_rng, 3000);
    float *inv = xmalloc(RD / 2 * 4);
    for (int i = 0; i < RD / 2; i++) inv[i] = (float)(1.0 / pow(1e6, 2.0 * i / RD));
    float *x = new_normal(n, 1), *d_x = dev_from(x, n * 4), *d_inv = dev_from(inv, RD / 2 * 4);
    int32_t *d_pos = dev_from(pos, N * 4);
    R->rope_forward(R, x, pos, inv, mscale, N, NH, HD, RD);
    X->rope_forward(X, d_x, d_pos, d_inv, mscale, N, NH, HD, RD);
    snprintf(what, sizeof what, "rope fwd N%d NH%d HD%d RD%d", N, NH, HD, RD);
    expect_close(what, d_x, x, n, TOL_EW);
    R->rope_backward(R, x, pos, inv, mscale, N, NH, HD, RD);
    X->rope_backward(X, d_x, d_pos, d_inv, mscale, N, NH, HD, RD);
    snprintf(what, sizeof what, "rope bwd N%d NH%d HD%d RD%d", N, NH, HD, RD);
    expect_close(what, d_x, x, n, TOL_EW);
    X->free(X, d_x), X->free(X, d_inv), X->free(X, d_pos);
    free(pos), free(inv), free(x);
}

static void test_rope(void) {
    check_rope(7, 6, 10, 10, 1.0f);
    check_rope(1, 2, 4, 4, 1.25f);
    check_rope(200, 4, 64, 64, 1.1f);
    check_rope(9, 3, 12, 8, 1.2f);     // partial rotary: dims [8, 12) pass through
    check_rope(33, 2, 64, 48, 1.0f);
}

static void check_attention(int B, int T, int NH, int NKV, int HD, const int32_t *seg, const char *label) {
    char what[128];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD, nl = (size_t)B * NH * T;
    float *q = new_normal(nq, 1), *k = new_normal(nk, 1), *v = new_normal(nk, 1), *dout = new_normal(nq, 1);
    float *out = xmalloc(nq * 4), *lse = xmalloc(nl * 4);
    float *dq = new_normal(nq, 1), *dk = new_normal(nk, 1), *dv = new_normal(nk, 1);
    float *d_q = dev_from(q, nq * 4), *d_k = dev_from(k, nk * 4), *d_v = dev_from(v, nk * 4);
    float *d_dout = dev_from(dout, nq * 4), *d_out = dev_nan(nq), *d_lse = dev_nan(nl);
    float *d_dq = dev_from(dq, nq * 4), *d_dk = dev_from(dk, nk * 4), *d_dv = dev_from(dv, nk * 4);
    int32_t *d_seg = dev_from(seg, (size_t)B * T * 4);
    R->attention_forward(R, out, lse, q, k, v, seg, B, T, NH, NKV, HD);
    X->attention_forward(X, d_out, d_lse, d_q, d_k, d_v, d_seg, B, T, NH, NKV, HD);
    snprintf(what, sizeof what, "attention fwd out %s", label);
    expect_close(what, d_out, out, nq, tol_attn);
    snprintf(what, sizeof what, "attention fwd lse %s", label);
    expect_close(what, d_lse, lse, nl, tol_attn);
    // backward from the reference's out and lse on both
    float *d_out_ref = dev_from(out, nq * 4), *d_lse_ref = dev_from(lse, nl * 4);
    R->attention_backward(R, dq, dk, dv, dout, out, lse, q, k, v, seg, B, T, NH, NKV, HD);
    X->attention_backward(X, d_dq, d_dk, d_dv, d_dout, d_out_ref, d_lse_ref, d_q, d_k, d_v, d_seg, B, T, NH, NKV, HD);
    snprintf(what, sizeof what, "attention bwd dq %s", label);
    expect_close(what, d_dq, dq, nq, tol_attn);
    snprintf(what, sizeof what, "attention bwd dk %s", label);
    expect_close(what, d_dk, dk, nk, tol_attn);
    snprintf(what, sizeof what, "attention bwd dv %s", label);
    expect_close(what, d_dv, dv, nk, tol_attn);
    // only dk (dq and dv NULL)
    R->attention_backward(R, NULL, dk, NULL, dout, out, lse, q, k, v, seg, B, T, NH, NKV, HD);
    X->attention_backward(X, NULL, d_dk, NULL, d_dout, d_out_ref, d_lse_ref, d_q, d_k, d_v, d_seg, B, T, NH, NKV, HD);
    snprintf(what, sizeof what, "attention bwd dk only %s", label);
    expect_close(what, d_dk, dk, nk, tol_attn);
    X->free(X, d_q), X->free(X, d_k), X->free(X, d_v), X->free(X, d_dout), X->free(X, d_out), X->free(X, d_lse);
    X->free(X, d_dq), X->free(X, d_dk), X->free(X, d_dv), X->free(X, d_seg), X->free(X, d_out_ref);
    X->free(X, d_lse_ref);
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
}

static void test_attention(void) {
    int32_t one[2] = {1, 4};
    check_attention(2, 1, 6, 2, 10, one, "T1");
    int32_t seg7[14] = {0, 0, 0, 1, 1, 1, 1, /**/ 2, 2, 2, 3, 3, 4, 4};
    check_attention(2, 7, 6, 2, 10, seg7, "T7 pad+packed");
    check_attention(1, 7, 6, 6, 10, seg7 + 7, "T7 no GQA");
    // T=150: more than one query block (64), a fully padded block, documents across block edges,
    // a segment id that recurs after another (it is still one document for the mask)
    int T = 150;
    int32_t *seg = xmalloc(2 * T * 4);
    for (int t = 0; t < T; t++) seg[t] = t < 70 ? 0 : (t < 100 ? 5 : (t < 140 ? 6 : 5));
    for (int t = 0; t < T; t++) seg[T + t] = 1 + t / 37;
    check_attention(2, T, 6, 2, 10, seg, "T150 B2 NKV2");
    check_attention(1, T, 4, 1, 16, seg, "T150 B1 NKV1");  // fewer kv groups than threads
    // head dims past one warp (Qwen3's is 128): cuda's kernels for 2, 4 and 8 dims per lane
    check_attention(1, 40, 4, 2, 72, seg + T, "T40 HD72");
    check_attention(1, 40, 4, 2, 128, seg + T, "T40 HD128");
    check_attention(1, 40, 2, 1, 256, seg, "T40 HD256 padded");
    check_attention(1, 40, 2, 1, 256, seg + T, "T40 HD256");  // two blocks of 128 output dims (mma)
    check_attention(1, 70, 4, 2, 64, seg + T, "T70 HD64");    // two key tiles, 8 output tiles (mma)
    free(seg);
}

static void check_swiglu(size_t n) {
    char what[96];
    float *g = new_normal(n, 3), *u = new_normal(n, 1), *dout = new_normal(n, 1);
    g[0] = -95.0f, g[1] = 95.0f, g[2] = 0.0f;  // saturated and zero gates
    float *out = xmalloc(n * 4), *dg = new_normal(n, 1), *du = new_normal(n, 1);
    float *d_g = dev_from(g, n * 4), *d_u = dev_from(u, n * 4), *d_dout = dev_from(dout, n * 4);
    float *d_out = dev_nan(n), *d_dg = dev_from(dg, n * 4), *d_du = dev_from(du, n * 4);
    R->swiglu_forward(R, out, g, u, n);
    X->swiglu_forward(X, d_out, d_g, d_u, n);
    snprintf(what, sizeof what, "swiglu fwd n%zu", n);
    expect_close(what, d_out, out, n, TOL_EW);
    R->swiglu_backward(R, dg, du, dout, g, u, n);
    X->swiglu_backward(X, d_dg, d_du, d_dout, d_g, d_u, n);
    snprintf(what, sizeof what, "swiglu bwd dgate n%zu", n);
    expect_close(what, d_dg, dg, n, TOL_EW);
    snprintf(what, sizeof what, "swiglu bwd dup n%zu", n);
    expect_close(what, d_du, du, n, TOL_EW);
    X->free(X, d_g), X->free(X, d_u), X->free(X, d_dout), X->free(X, d_out), X->free(X, d_dg), X->free(X, d_du);
    free(g), free(u), free(dout), free(out), free(dg), free(du);
}

static void test_swiglu(void) {
    check_swiglu(1037);
    check_swiglu(40001);
}

static void check_elementwise(size_t n) {
    char what[96];
    float *a = new_normal(n, 1), *b = new_normal(n, 1), *out = xmalloc(n * 4);
    float *d_a = dev_from(a, n * 4), *d_b = dev_from(b, n * 4), *d_out = dev_nan(n);
    R->add(R, out, a, b, n);
    X->add(X, d_out, d_a, d_b, n);
    snprintf(what, sizeof what, "add n%zu", n);
    expect_close(what, d_out, out, n, 0);
    R->add(R, a, a, b, n);  // aliased output
    X->add(X, d_a, d_a, d_b, n);
    snprintf(what, sizeof what, "add aliased n%zu", n);
    expect_close(what, d_a, a, n, 0);
    R->scale(R, a, 0.37f, n);
    X->scale(X, d_a, 0.37f, n);
    snprintf(what, sizeof what, "scale n%zu", n);
    expect_close(what, d_a, a, n, 0);
    double want = R->sumsq(R, a, n), got = X->sumsq(X, d_a, n);
    EXPECT_MSG(test_rel_err(got, want, 1e-300) < 1e-12, "sumsq n%zu: %s %.17g vs ref %.17g", n, X->name, got, want);
    // dropout: the same mask bit for bit (out of place, then in place), about 1 - p kept
    uint64_t key = 0x1234567890abcdefull + n;
    uint64_t *d_key = dev_from(&key, sizeof key);
    R->dropout(R, out, b, n, 0.25f, &key, 7);
    X->dropout(X, d_out, d_b, n, 0.25f, d_key, 7);
    snprintf(what, sizeof what, "dropout n%zu", n);
    expect_close(what, d_out, out, n, 0);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) kept += out[i] != 0.0f;
    EXPECT_MSG(n < 1000 || fabs((double)kept / n - 0.75) < 0.02, "dropout n%zu kept %zu", n, kept);
    R->dropout(R, a, a, n, 0.25f, &key, 8);
    X->dropout(X, d_a, d_a, n, 0.25f, d_key, 8);
    snprintf(what, sizeof what, "dropout aliased n%zu", n);
    expect_close(what, d_a, a, n, 0);
    X->free(X, d_key);
    float *chk = dev_fetch("elementwise guards", d_b, n);
    free(chk);
    X->free(X, d_a), X->free(X, d_b), X->free(X, d_out);
    free(a), free(b), free(out);
}

static void test_elementwise(void) {
    check_elementwise(1037);
    check_elementwise(70001);
    check_elementwise(1);
}

// ---------------------------------------------------------------- cross-entropy head
typedef struct {
    int N, C, V, chunk;
    DType wdt;
    int grads;  // 0: forward only, 1: dh only, 2: dh and dW
    int with_weights;
} CeCase;

// 1 when the top-2 gap of logits h W^T (in double) exceeds what bf16 operands can move them:
// |dz_v| <= 2^-7 sum_c |h_c W_vc| (each operand rounded by <= 2^-9 relative, with room to spare).
static int ce_argmax_clear(const float *h, const float *W, DType wdt, int C, int V) {
    double z1 = -INFINITY, z2 = -INFINITY, b1 = 0, b2 = 0;
    for (int v = 0; v < V; v++) {
        double z = 0, a = 0;
        for (int c = 0; c < C; c++) {
            double w = wdt == DT_BF16 ? bf16_to_f32(f32_to_bf16(W[(size_t)v * C + c])) : W[(size_t)v * C + c];
            z += h[c] * w;
            a += fabs(h[c] * w);
        }
        if (z > z1) z2 = z1, b2 = b1, z1 = z, b1 = a;
        else if (z > z2) z2 = z, b2 = a;
    }
    return z1 - z2 > ldexp(b1 + b2, -7);
}

static void check_ce(CeCase cc) {
    char what[128], label[96];
    int N = cc.N, C = cc.C, V = cc.V;
    snprintf(label, sizeof label, "N%d C%d V%d chunk%d %s grads%d%s", N, C, V, cc.chunk, dtype_st_name(cc.wdt),
             cc.grads, cc.with_weights ? " weights" : "");
    size_t nh = (size_t)N * C, nw = (size_t)V * C, ns = (size_t)cc.chunk * (V + C);
    float *h = new_normal(nh, 1), *W = new_normal(nw, 0.5f), *weights = xmalloc(N * 4);
    int32_t *targets = xmalloc(N * 4);
    for (int n = 0; n < N; n++) {
        targets[n] = n % 4 == 1 ? IGNORE_INDEX : (int32_t)rng_below(&ops_rng, V);
        weights[n] = n % 5 == 3 ? 0.0f : 0.25f + rng_uniform(&ops_rng);
    }
    targets[0] = V - 1;
    // row 2 predicts its target (argmax hits): the target's row of W is row 2's hidden state
    if (N > 2 && targets[2] != IGNORE_INDEX)
        for (int c = 0; c < C; c++) W[(size_t)targets[2] * C + c] = h[2 * C + c];
    uint16_t *Wb = to_bf16(W, nw);
    const void *Wp = cc.wdt == DT_BF16 ? (const void *)Wb : W;
    const float *wts = cc.with_weights ? weights : NULL;
    float *loss = xmalloc(N * 4), *corr = xmalloc(N * 4), *ent = xmalloc(N * 4), *scratch = xmalloc(ns * 4);
    float *dh = new_normal(nh, 1), *dW = new_normal(nw, 1);
    float *d_h = dev_from(h, nh * 4), *d_wts = dev_from(weights, N * 4);
    void *d_W = dev_from(Wp, nw * dtype_size(cc.wdt));
    int32_t *d_t = dev_from(targets, N * 4);
    float *d_loss = dev_nan(N), *d_corr = dev_nan(N), *d_ent = dev_nan(N), *d_scr = dev_nan(ns);
    float *d_dh = dev_from(dh, nh * 4), *d_dW = dev_from(dW, nw * 4);
    R->ce_head(R, loss, corr, ent, cc.grads ? dh : NULL, cc.grads == 2 ? dW : NULL, h, Wp, cc.wdt, targets, wts, 0.3f,
               scratch, cc.chunk, N, C, V);
    X->ce_head(X, d_loss, d_corr, d_ent, cc.grads ? d_dh : NULL, cc.grads == 2 ? d_dW : NULL, d_h, d_W, cc.wdt, d_t,
               cc.with_weights ? d_wts : NULL, 0.3f, d_scr, cc.chunk, N, C, V);
    snprintf(what, sizeof what, "ce loss %s", label);
    expect_close(what, d_loss, loss, N, tol_gemm);
    snprintf(what, sizeof what, "ce correct %s", label);
    if (!gemm_bf16) {
        expect_close(what, d_corr, corr, N, 0);
    } else {
        float *got = dev_fetch(what, d_corr, N);
        for (int n = 0; n < N; n++)
            if (targets[n] != IGNORE_INDEX && ce_argmax_clear(h + (size_t)n * C, W, cc.wdt, C, V))
                EXPECT_MSG(got[n] == corr[n], "%s: row %d correct %g vs ref %g (clear top-2 gap)", what, n, got[n],
                           corr[n]);
        free(got);
    }
    snprintf(what, sizeof what, "ce entropy %s", label);
    expect_close_entropy(what, d_ent, ent, h, W, N, C, V, 1.0, tol_gemm);
    snprintf(what, sizeof what, "ce dh %s", label);
    expect_close(what, d_dh, dh, nh, tol_gemm);
    snprintf(what, sizeof what, "ce dW %s", label);
    expect_close(what, d_dW, dW, nw, tol_gemm);
    free(dev_fetch("ce scratch", d_scr, ns));  // the op stays inside (chunk, V + C)
    EXPECT(N <= 2 || targets[2] == IGNORE_INDEX || corr[2] == 1.0f);
    // every output may be NULL
    X->ce_head(X, NULL, NULL, NULL, NULL, NULL, d_h, d_W, cc.wdt, d_t, NULL, 1.0f, d_scr, cc.chunk, N, C, V);
    X->free(X, d_h), X->free(X, d_wts), X->free(X, d_W), X->free(X, d_t), X->free(X, d_loss), X->free(X, d_corr);
    X->free(X, d_ent), X->free(X, d_scr), X->free(X, d_dh), X->free(X, d_dW);
    free(h), free(W), free(weights), free(targets), free(Wb), free(loss), free(corr), free(ent), free(scratch);
    free(dh), free(dW);
}

static void test_ce_head(void) {
    check_ce((CeCase){9, 13, 1031, 4, DT_F32, 2, 1});
    check_ce((CeCase){9, 13, 1031, 3, DT_BF16, 2, 1});
    check_ce((CeCase){9, 13, 1031, 20, DT_F32, 1, 0});
    check_ce((CeCase){9, 13, 1031, 1, DT_BF16, 0, 1});
    check_ce((CeCase){1, 13, 1031, 7, DT_F32, 2, 1});
    check_ce((CeCase){2, 16, 64, 5, DT_F32, 2, 1});  // row 1 ignored: a chunk of one row
    check_ce((CeCase){3, 520, 4099, 2, DT_BF16, 2, 1});  // more than one converted panel
}

// ---------------------------------------------------------------- bf16 copies of fp32 weights
// cuda with bf16 GEMMs reads fp32 weights through bf16 copies made once (cuda_weights.cu): after
// each way the op table can write weights (upload, AdamW on part of the buffer, copy, scale, add)
// and in a graph replayed after an optimizer step, a GEMM must see the new weights. Two weights
// share one allocation, as the parameters do.
static void mirror_check(const float *x, const float *d_x, const float *w, const float *d_w, size_t nw, int N, int C,
                         int OC, float *d_out, const char *label) {
    char what[96];
    float *out = xmalloc((size_t)N * OC * 4);
    for (int k = 0; k < 2; k++) {
        R->matmul_forward(R, out, x, w + k * nw, DT_F32, NULL, N, C, OC);
        X->matmul_forward(X, d_out, d_x, d_w + k * nw, DT_F32, NULL, N, C, OC);
        snprintf(what, sizeof what, "weights after %s, tensor %d", label, k);
        expect_close(what, d_out, out, (size_t)N * OC, tol_gemm);
    }
    free(out);
}

static void test_weight_copies(void) {
    const int N = 5, C = 24, OC = 9;
    const size_t nw = (size_t)OC * C, n = 2 * nw;
    float *x = new_normal((size_t)N * C, 1), *w = new_normal(n, 1), *g = new_normal(n, 1);
    float *m = xcalloc(n, 4), *v = xcalloc(n, 4), *out = xmalloc((size_t)N * OC * 4);
    float *d_x = dev_from(x, (size_t)N * C * 4), *d_w = dev_from(w, n * 4), *d_g = dev_from(g, n * 4);
    float *d_m = dev_from(m, n * 4), *d_v = dev_from(v, n * 4), *d_out = dev_nan((size_t)N * OC);
    mirror_check(x, d_x, w, d_w, nw, N, C, OC, d_out, "upload");
    float *w2 = new_normal(n, 1);
    memcpy(w, w2, n * 4);
    X->upload(X, d_w, w2, n * 4);
    mirror_check(x, d_x, w, d_w, nw, N, C, OC, d_out, "a second upload");
    // AdamW over the first tensor only (one shard): lr 0.5 moves every weight by ~0.5
    R->adamw(R, w, m, v, g, nw, 0.5, 0.9, 0.999, 1e-8, 0.0, 1, 1.0f);
    X->adamw(X, d_w, d_m, d_v, d_g, nw, 0.5, 0.9, 0.999, 1e-8, 0.0, 1, 1.0f);
    mirror_check(x, d_x, w, d_w, nw, N, C, OC, d_out, "adamw on one tensor");
    float *d_w2 = dev_from(w2, n * 4);
    X->copy(X, d_w + nw, d_w2, nw * 4);  // the second tensor = the first of w2
    memcpy(w + nw, w2, nw * 4);
    mirror_check(x, d_x, w, d_w, nw, N, C, OC, d_out, "copy");
    X->scale(X, d_w, -2.0f, n);
    for (size_t i = 0; i < n; i++) w[i] *= -2.0f;
    mirror_check(x, d_x, w, d_w, nw, N, C, OC, d_out, "scale");
    X->add(X, d_w, d_w, d_w2, n);
    for (size_t i = 0; i < n; i++) w[i] += w2[i];
    mirror_check(x, d_x, w, d_w, nw, N, C, OC, d_out, "add");
    if (X->graph_begin) {  // a recorded GEMM replayed after AdamW reads the new weights
        X->graph_begin(X, 0x77);
        X->matmul_forward(X, d_out, d_x, d_w, DT_F32, NULL, N, C, OC);
        X->graph_end(X, 0x77);
        for (int step = 2; step <= 3; step++) {
            R->adamw(R, w, m, v, g, n, 0.5, 0.9, 0.999, 1e-8, 0.0, step, 1.0f);
            X->adamw(X, d_w, d_m, d_v, d_g, n, 0.5, 0.9, 0.999, 1e-8, 0.0, step, 1.0f);
            EXPECT(X->graph_launch(X, 0x77));
            R->matmul_forward(R, out, x, w, DT_F32, NULL, N, C, OC);
            expect_close("weights after adamw, in a graph replay", d_out, out, (size_t)N * OC, tol_gemm);
        }
        X->graph_drop(X, 0x77);
    }
    X->free(X, d_x), X->free(X, d_w), X->free(X, d_g), X->free(X, d_m), X->free(X, d_v), X->free(X, d_out);
    X->free(X, d_w2);
    free(x), free(w), free(g), free(m), free(v), free(out), free(w2);
}

// ---------------------------------------------------------------- determinism
static void test_determinism(void) {
    int B = 1, T = 150, NH = 4, NKV = 1, HD = 16, N = 9, C = 13, V = 1031, chunk = 4;
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD, nl = (size_t)B * NH * T;
    float *buf[3];
    for (int rep = 0; rep < 2; rep++) {
        rng_init(&ops_rng, 99, 0);
        int32_t *seg = xmalloc(T * 4);
        for (int t = 0; t < T; t++) seg[t] = t < 20 ? 0 : 1 + t / 50;
        float *q = new_normal(nq, 1), *k = new_normal(nk, 1), *v = new_normal(nk, 1), *dout = new_normal(nq, 1);
        float *h = new_normal((size_t)N * C, 1), *W = new_normal((size_t)V * C, 1);
        int32_t tg[9] = {1, 5, IGNORE_INDEX, 7, 1030, 0, 3, 3, 9};
        float *d_q = dev_from(q, nq * 4), *d_k = dev_from(k, nk * 4), *d_v = dev_from(v, nk * 4);
        float *d_dout = dev_from(dout, nq * 4), *d_out = dev_nan(nq), *d_lse = dev_nan(nl);
        float *d_dq = dev_from(q, nq * 4), *d_dk = dev_from(k, nk * 4), *d_dv = dev_from(v, nk * 4);
        int32_t *d_seg = dev_from(seg, T * 4), *d_tg = dev_from(tg, sizeof tg);
        float *d_h = dev_from(h, (size_t)N * C * 4), *d_W = dev_from(W, (size_t)V * C * 4);
        float *d_dh = dev_from(h, (size_t)N * C * 4), *d_dW = dev_from(W, (size_t)V * C * 4);
        float *d_scr = dev_nan((size_t)chunk * (V + C)), *d_loss = dev_nan(N);
        X->attention_forward(X, d_out, d_lse, d_q, d_k, d_v, d_seg, B, T, NH, NKV, HD);
        X->attention_backward(X, d_dq, d_dk, d_dv, d_dout, d_out, d_lse, d_q, d_k, d_v, d_seg, B, T, NH, NKV, HD);
        X->ce_head(X, d_loss, NULL, NULL, d_dh, d_dW, d_h, d_W, DT_F32, d_tg, NULL, 0.5f, d_scr, chunk, N, C, V);
        size_t n = 2 * nq + 2 * nk + N + (size_t)N * C + (size_t)V * C;
        float *all = xmalloc(n * 4), *p = all;
        X->download(X, p, d_out, nq * 4), p += nq;
        X->download(X, p, d_dq, nq * 4), p += nq;
        X->download(X, p, d_dk, nk * 4), p += nk;
        X->download(X, p, d_dv, nk * 4), p += nk;
        X->download(X, p, d_loss, N * 4), p += N;
        X->download(X, p, d_dh, (size_t)N * C * 4), p += (size_t)N * C;
        X->download(X, p, d_dW, (size_t)V * C * 4);
        buf[rep] = all;
        buf[2] = (float *)(uintptr_t)n;
        void *ds[] = {d_q, d_k, d_v, d_dout, d_out, d_lse, d_dq, d_dk, d_dv, d_seg, d_tg, d_h, d_W, d_dh, d_dW, d_scr, d_loss};
        for (size_t i = 0; i < ARRAY_LEN(ds); i++) X->free(X, ds[i]);
        free(seg), free(q), free(k), free(v), free(dout), free(h), free(W);
    }
    EXPECT_MSG(!memcmp(buf[0], buf[1], (size_t)(uintptr_t)buf[2] * 4), "%s: two identical runs differ", X->name);
    free(buf[0]), free(buf[1]);
}

// ---------------------------------------------------------------- sampling ops
// Rows of normal logits, often quantised to a few levels (ties at every threshold), with random
// processors per row; the ref op is the spec (itself held to a sort-based reference and to
// PyTorch by test_sampler*). ids and scores must match bit for bit, log-probs within 1e-5.
static void random_sample_params(SampleParams *p, int V) {
    memset(p, 0, sizeof *p);
    p->do_sample = rng_below(&ops_rng, 8) != 0;
    p->temperature = rng_below(&ops_rng, 3) == 0 ? 1.0f : (float)(0.2 + 1.8 * rng_uniform(&ops_rng));
    p->repetition_penalty = rng_below(&ops_rng, 3) == 0 ? (float)(0.5 + 1.5 * rng_uniform(&ops_rng)) : 1.0f;
    int km = (int)rng_below(&ops_rng, 4);
    p->top_k = km == 0 ? 0 : km == 1 ? 1 + (int)rng_below(&ops_rng, 5) : 1 + (int)rng_below(&ops_rng, (uint64_t)V + 4);
    int pm = (int)rng_below(&ops_rng, 5);
    p->top_p = pm == 0 ? 1.0 : pm == 1 ? 0.95 : pm == 2 ? 0.0 : rng_uniform(&ops_rng);
    p->min_p = rng_below(&ops_rng, 3) == 0 ? (float)(0.3 * rng_uniform(&ops_rng)) : 0.0f;
}

static void check_sampling(int B, int V, int K, int inplace) {
    char what[96];
    snprintf(what, sizeof what, "sample B%d V%d K%d%s", B, V, K, inplace ? " in place" : "");
    size_t n = (size_t)B * V;
    float *logits = xmalloc(n * 4), *s_ref = xmalloc(n * 4), *lp = xmalloc(B * 4), *lpr = xmalloc(B * 4);
    int32_t *ids = xmalloc(B * 4), *banned = xmalloc((size_t)B * K * 4 + 4);
    SampleParams *params = xmalloc(B * sizeof *params);
    double *u = xmalloc(B * 8);
    uint8_t *seen = xcalloc(n, 1);
    int T = 5;
    int32_t *hist = xmalloc((size_t)B * T * 4);
    for (int b = 0; b < B; b++) {
        double sigma = 0.3 + 6.0 * rng_uniform(&ops_rng), step = rng_below(&ops_rng, 2) ? 0.5 : 0.0;
        for (int i = 0; i < V; i++) {
            double x = sigma * rng_normal(&ops_rng);
            logits[(size_t)b * V + i] = (float)(step > 0 ? step * floor(x / step + 0.5) : x);
        }
        random_sample_params(&params[b], V);
        u[b] = rng_uniform(&ops_rng);
        for (int j = 0; j < K; j++) banned[b * K + j] = rng_below(&ops_rng, 3) == 0 ? (int32_t)rng_below(&ops_rng, V) : -1;
        for (int t = 0; t < T; t++) hist[b * T + t] = (int32_t)rng_below(&ops_rng, (uint64_t)V + 2) - 1;
    }
    R->sample_seen_update(R, seen, hist, B, T, V);
    R->sample_logits(R, ids, lp, inplace ? NULL : lpr, s_ref, logits, params, u, seen, banned, K, B, V);

    uint8_t *d_seen = X->alloc(X, n + GUARD_WORDS * 4);
    put_guard(X, d_seen, n);
    int32_t *d_hist = dev_from(hist, (size_t)B * T * 4), *d_banned = dev_from(banned, (size_t)B * K * 4);
    float *d_logits = dev_from(logits, n * 4), *d_s = inplace ? d_logits : dev_nan(n);
    int32_t *d_ids = (int32_t *)dev_nan(B);
    float *d_lp = dev_nan(B), *d_lpr = dev_nan(B);
    SampleParams *d_params = dev_from(params, B * sizeof *params);
    double *d_u = dev_from(u, B * 8);
    X->sample_seen_update(X, d_seen, d_hist, B, T, V);
    uint8_t *seen_got = xmalloc(n);
    X->download(X, seen_got, d_seen, n);
    EXPECT_MSG(!memcmp(seen_got, seen, n), "%s: seen differs from ref", what);
    X->sample_logits(X, d_ids, d_lp, inplace ? NULL : d_lpr, d_s, d_logits, d_params, d_u, d_seen, d_banned, K, B, V);
    float *ids_got = dev_fetch(what, d_ids, B), *s_got = dev_fetch(what, d_s, n), *lp_got = dev_fetch(what, d_lp, B);
    float *lpr_got = dev_fetch(what, d_lpr, B);
    int bad = 0;
    for (int b = 0; b < B; b++) {
        int32_t id;
        memcpy(&id, &ids_got[b], 4);
        int same_s = !memcmp(s_got + (size_t)b * V, s_ref + (size_t)b * V, (size_t)V * 4);
        int lp_ok = fabs(lp_got[b] - lp[b]) <= 1e-5 * (1 + fabs(lp[b])) || (isinf(lp[b]) && lp_got[b] == lp[b]);
        int lpr_ok = inplace || fabs(lpr_got[b] - lpr[b]) <= 1e-5 * (1 + fabs(lpr[b])) ||
                     (isinf(lpr[b]) && lpr_got[b] == lpr[b]);
        if (id != ids[b] || !same_s || !lp_ok || !lpr_ok) {
            if (bad++ < 3)
                printf("  %s row %d (do_sample %d T %g pen %g k %d p %g min_p %g): id %d vs ref %d, scores %s, "
                       "logprob %.8g vs %.8g, raw %.8g vs %.8g\n",
                       what, b, params[b].do_sample, params[b].temperature, params[b].repetition_penalty,
                       params[b].top_k, params[b].top_p, params[b].min_p, id, ids[b], same_s ? "equal" : "differ",
                       lp_got[b], lp[b], lpr_got[b], lpr[b]);
        }
    }
    EXPECT_MSG(bad == 0, "%s: %d of %d rows differ from ref", what, bad, B);
    free(dev_fetch(what, d_s == d_logits ? d_logits : d_s, n));
    void *ds[] = {d_seen, d_hist, d_banned, d_logits, d_ids, d_lp, d_lpr, d_params, d_u};
    for (size_t i = 0; i < ARRAY_LEN(ds); i++) X->free(X, ds[i]);
    if (!inplace) X->free(X, d_s);
    free(logits), free(s_ref), free(lp), free(lpr), free(ids), free(banned), free(params), free(u), free(seen);
    free(hist), free(seen_got), free(ids_got), free(s_got), free(lp_got), free(lpr_got);
}

static void test_sampling(void) {
    check_sampling(16, 1031, 3, 0);
    check_sampling(16, 1031, 0, 1);
    check_sampling(33, 5, 2, 0);        // V smaller than a warp
    check_sampling(4, 151936, 4, 0);    // a real vocabulary: more than one scan tile per thread
}

// ---------------------------------------------------------------- AdamW and sumsq on every backend
// torch.optim.AdamW (torch/optim/adamw.py, single-tensor path), written out in double:
//   param.mul_(1 - lr * weight_decay)
//   exp_avg.lerp_(grad, 1 - beta1)           ; m = b1 m + (1 - b1) g
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   bias_correction1 = 1 - beta1 ** step ; bias_correction2 = 1 - beta2 ** step
//   step_size = lr / bias_correction1
//   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
// with the gradient multiplied by grad_scale first (clipping / loss scaling).
static void adamw_double(double *p, double *m, double *v, const float *g, size_t n, double lr, double b1, double b2,
                         double eps, double wd, int t, double gs) {
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] * gs;
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

// Each step starts the double formula from the backend's own fp32 state, so the comparison
// measures one step's arithmetic: p within a few ulp of |p| plus 1e-5 of the step size lr, m and
// v within 1e-6 relative. The hyperparameters are doubles, as torch's Python floats are.
static void check_adamw(Backend *be) {
    size_t n = 1037;
    const double lr = (float)1e-2;
    float *p = new_normal(n, 1), *m = xcalloc(n, 4), *v = xcalloc(n, 4), *g = xmalloc(n * 4), *m_old = xmalloc(n * 4);
    double *pd = xmalloc(n * 8), *md = xmalloc(n * 8), *vd = xmalloc(n * 8);
    float *d_p = be->alloc(be, n * 4), *d_m = be->alloc(be, n * 4), *d_v = be->alloc(be, n * 4);
    float *d_g = be->alloc(be, n * 4);
    be->upload(be, d_p, p, n * 4);  // m and v start at zero: alloc zero-fills
    double worst = 0;
    for (int t = 1; t <= 4; t++) {
        for (size_t i = 0; i < n; i++) pd[i] = p[i], md[i] = m[i], vd[i] = v[i], m_old[i] = m[i];
        fill_normal(g, n, t == 3 ? 1e-4f : 1.0f);  // a step of tiny gradients: eps matters
        be->upload(be, d_g, g, n * 4);
        be->adamw(be, d_p, d_m, d_v, d_g, n, lr, 0.9, 0.999, 1e-8, 0.1, t, 0.5f);
        adamw_double(pd, md, vd, g, n, lr, 0.9, 0.999, 1e-8, 0.1, t, 0.5);
        be->download(be, p, d_p, n * 4);
        be->download(be, m, d_m, n * 4);
        be->download(be, v, d_v, n * 4);
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs(p[i] - pd[i]) / (5e-7 * fabs(pd[i]) + 1e-5 * lr));
            // m = b1 m + (1 - b1) g can cancel: its error is relative to the terms
            worst = fmax(worst, fabs(m[i] - md[i]) / (1e-6 * (fabs(m_old[i]) + 0.1 * 0.5 * fabs(g[i])) + 1e-30));
            worst = fmax(worst, fabs(v[i] - vd[i]) / (1e-6 * fabs(vd[i]) + 1e-30));
        }
    }
    if (getenv("OPS_VERBOSE")) printf("  adamw on %s: worst error / allowed %.3g\n", be->name, worst);
    EXPECT_MSG(worst <= 1, "adamw on %s: worst error / allowed %.3g", be->name, worst);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)p[i] * p[i];
    EXPECT_MSG(test_rel_err(be->sumsq(be, d_p, n), ss, 1e-300) < 1e-12, "sumsq on %s", be->name);
    be->free(be, d_p), be->free(be, d_m), be->free(be, d_v), be->free(be, d_g);
    free(p), free(m), free(v), free(pd), free(md), free(vd), free(g), free(m_old);
}

static void test_adamw_all_backends(void) {
    check_adamw(R);
    for (size_t i = 0; i < ARRAY_LEN(backend_names); i++) {
        Backend *be = NULL;
        Err e = {0};
        if (backend_create(backend_names[i], 2, &be, &e) != ST_OK) {
            printf("skip adamw %s: %s\n", backend_names[i], e.msg);
            continue;
        }
        check_adamw(be);
        backend_destroy(be);
    }
}

// cpu_expf, which the cpu backend's softmax, SwiGLU and attention use, against exp in double.
static void test_cpu_expf(void) {
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + 175.0f * i / 200000.0f;
        worst = fmax(worst, test_rel_err(cpu_expf(x), exp((double)x), 1e-300));
    }
    EXPECT_MSG(worst < 5e-7, "cpu_expf worst relative error %.3g", worst);
    EXPECT(cpu_expf(-INFINITY) == 0.0f && cpu_expf(-100.0f) == 0.0f && cpu_expf(0.0f) == 1.0f);
}

int main(void) {
    R = backend_ref_create(1);
    backend_ref_install_sampling(R);
    RUN_OWN(test_adamw_all_backends);
    RUN_OWN(test_cpu_expf);
    for (size_t i = 0; i < ARRAY_LEN(backend_runs); i++) {
        const BackendRun *br = &backend_runs[i];
        Err e = {0};
        if (br->gemm) setenv("STILL_CUDA_GEMM", br->gemm, 1);
        Status st = backend_create(br->name, 2, &X, &e);
        if (br->gemm) unsetenv("STILL_CUDA_GEMM");
        if (st != ST_OK) {
            printf("skip parity %s%s%s: %s\n", br->name, br->gemm ? " gemm " : "", br->gemm ? br->gemm : "", e.msg);
            continue;
        }
        gemm_bf16 = br->gemm && !strcmp(br->gemm, "bf16");
        tol_gemm = gemm_bf16 ? TOL_BF16 : TOL_RED;
        tol_attn = gemm_bf16 ? TOL_ATT_BF16 : TOL_RED;
        printf("# backend %s%s%s\n", X->name, br->gemm ? " gemm " : "", br->gemm ? br->gemm : "");
        if (gemm_bf16) {  // only the GEMM-based ops differ from the fp32 run
            RUN_OWN(test_matmul);
            RUN_OWN(test_ce_head);
            RUN_OWN(test_determinism);
            RUN_OWN(test_attention);  // the tensor-core kernels
            RUN_OWN(test_weight_copies);
            backend_destroy(X);
            continue;
        }
        RUN_OWN(test_embedding);
        RUN_OWN(test_rmsnorm);
        RUN_OWN(test_matmul);
        RUN_OWN(test_rope);
        RUN_OWN(test_attention);
        RUN_OWN(test_swiglu);
        RUN_OWN(test_elementwise);
        RUN_OWN(test_ce_head);
        RUN_OWN(test_determinism);
        RUN_OWN(test_sampling);
        backend_destroy(X);
    }
    backend_destroy(R);
    TEST_MAIN_END();
}
