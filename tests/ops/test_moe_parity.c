// test_moe_parity.c: the mixture-of-experts ops of every backend this build can create (except
// ref) against the reference backend, with the guard words and NaN-filled forward outputs of
// parity_util.h (gradients start random so that `+=` is checked). Shapes are awkward: N = 1
// (decode) and 37 tokens, E = 11 experts of which some get no token, K = 1, 3, widths off every
// tile (C = 37, OC = 21), capacities that drop slots, rows with tied logits, padding tokens in
// the load-balancing statistics, fp32 and bf16 experts, with and without biases.
//
// Integer outputs (top-k indices, the dispatch) must be equal. Tolerances, norm-wise:
//   TOL_EW 2e-6: routing weights, gather / combine (exp in fp32 or double; sums of <= K terms)
//   TOL_RED 2e-5: the grouped GEMM and the aux statistics (fp32 sums over up to ~40 terms
//                 against double), as TOL_RED of test_backend_parity.c
// The moe kernels use no cuBLAS, so the cuda backend runs once, whatever STILL_CUDA_GEMM says.
#include "parity_util.h"

#define TOL_EW 2e-6
#define TOL_RED 2e-5

static const char *backends[] = {"cpu", "cuda"};

static int32_t *dev_i32(const int32_t *h, size_t n) { return dev_from(h, n * 4); }

// Down n int32 from the device, guards checked.
static int32_t *fetch_i32(const char *what, const void *d, size_t n) { return (int32_t *)dev_fetch(what, d, n); }

// Random logits (N,E); every third row has ties (values from a small set).
static float *tie_logits(int N, int E) {
    float *l = new_normal((size_t)N * E, 1.5f);
    for (int n = 0; n < N; n += 3)
        for (int e = 0; e < E; e++) l[(size_t)n * E + e] = (float)(rng_below(&ops_rng, 3)) * 0.5f;
    return l;
}

static void check_route(int N, int E, int K, int norm) {
    char what[96];
    float *l = tie_logits(N, E), *w = xmalloc((size_t)N * K * 4), *dw = new_normal((size_t)N * K, 1);
    float *dl = new_normal((size_t)N * E, 1);
    int32_t *idx = xmalloc((size_t)N * K * 4);
    float *d_l = dev_from(l, (size_t)N * E * 4), *d_w = dev_nan((size_t)N * K), *d_dw = dev_from(dw, (size_t)N * K * 4);
    float *d_dl = dev_from(dl, (size_t)N * E * 4);
    int32_t *d_idx = (int32_t *)dev_nan((size_t)N * K);
    R->moe_route_forward(R, idx, w, l, N, E, K, norm);
    X->moe_route_forward(X, d_idx, d_w, d_l, N, E, K, norm);
    int32_t *got = fetch_i32("route idx", d_idx, (size_t)N * K);
    EXPECT_MSG(!memcmp(got, idx, (size_t)N * K * 4), "route N%d E%d K%d norm%d: %s picks other experts", N, E, K, norm,
               X->name);
    snprintf(what, sizeof what, "route w N%d E%d K%d norm%d", N, E, K, norm);
    expect_close(what, d_w, w, (size_t)N * K, TOL_EW);
    R->moe_route_backward(R, dl, dw, l, idx, N, E, K, norm);
    X->moe_route_backward(X, d_dl, d_dw, d_l, d_idx, N, E, K, norm);
    snprintf(what, sizeof what, "route dlogits N%d E%d K%d norm%d", N, E, K, norm);
    expect_close(what, d_dl, dl, (size_t)N * E, TOL_EW);
    free(got), free(l), free(w), free(dw), free(dl), free(idx);
    X->free(X, d_l), X->free(X, d_w), X->free(X, d_dw), X->free(X, d_dl), X->free(X, d_idx);
}

static void test_route(void) {
    check_route(37, 11, 3, 0);
    check_route(37, 11, 3, 1);
    check_route(1, 11, 1, 0);
    check_route(5, 8, 8, 1);  // K = E
    check_route(20, 64, 8, 1);
}

typedef struct {
    int N, E, K, C, OC, capacity, bias;
    DType wdt;
} MoeCase;

// The whole dispatch / expert / combine path, forward and backward, op by op.
static void check_experts(MoeCase mc) {
    char what[128], label[96];
    int N = mc.N, E = mc.E, K = mc.K, C = mc.C, OC = mc.OC, S = N * K;
    snprintf(label, sizeof label, "N%d E%d K%d C%d OC%d cap%d bias%d %s", N, E, K, C, OC, mc.capacity, mc.bias,
             dtype_st_name(mc.wdt));
    // routing: experts 0 and E-1 never chosen (empty groups at both ends), the rest random
    int32_t *idx = xmalloc((size_t)S * 4);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            int e;
            int again;
            do {
                e = 1 + (int)rng_below(&ops_rng, (uint64_t)(E - 2));
                again = 0;
                for (int j = 0; j < k; j++) again |= idx[(size_t)n * K + j] == e;
            } while (again);
            idx[(size_t)n * K + k] = e;
        }
    int32_t *offsets = xmalloc((size_t)(E + 1) * 4), *slot_token = xmalloc((size_t)S * 4),
            *token_slot = xmalloc((size_t)S * 4), dropped = -7;
    int32_t *d_idx = dev_i32(idx, S), *d_off = (int32_t *)dev_nan(E + 1), *d_st = (int32_t *)dev_nan(S),
            *d_ts = (int32_t *)dev_nan(S), *d_drop = (int32_t *)dev_nan(1);
    R->moe_dispatch(R, offsets, slot_token, token_slot, &dropped, idx, N, E, K, mc.capacity);
    X->moe_dispatch(X, d_off, d_st, d_ts, d_drop, d_idx, N, E, K, mc.capacity);
    int32_t *g_off = fetch_i32("offsets", d_off, E + 1), *g_st = fetch_i32("slot_token", d_st, S),
            *g_ts = fetch_i32("token_slot", d_ts, S), *g_drop = fetch_i32("dropped", d_drop, 1);
    EXPECT_MSG(!memcmp(g_off, offsets, (size_t)(E + 1) * 4), "dispatch offsets %s", label);
    EXPECT_MSG(!memcmp(g_st, slot_token, (size_t)S * 4), "dispatch slot_token %s", label);
    EXPECT_MSG(!memcmp(g_ts, token_slot, (size_t)S * 4), "dispatch token_slot %s", label);
    EXPECT_MSG(*g_drop == dropped, "dispatch dropped %d vs ref %d, %s", *g_drop, dropped, label);
    free(g_off), free(g_st), free(g_ts), free(g_drop);

    // gather
    float *x = new_normal((size_t)N * C, 1), *xs = xmalloc((size_t)S * C * 4);
    float *d_x = dev_from(x, (size_t)N * C * 4), *d_xs = dev_nan((size_t)S * C);
    R->moe_gather(R, xs, x, slot_token, offsets, S, E, C);
    X->moe_gather(X, d_xs, d_x, d_st, d_off, S, E, C);
    snprintf(what, sizeof what, "gather %s", label);
    expect_close(what, d_xs, xs, (size_t)S * C, 0);

    // grouped GEMM
    size_t nw = (size_t)E * OC * C;
    float *w = new_normal(nw, 0.3f), *bias = new_normal((size_t)E * OC, 1), *y = xmalloc((size_t)S * OC * 4);
    uint16_t *wb = to_bf16(w, nw);
    const void *wp = mc.wdt == DT_BF16 ? (const void *)wb : w;
    void *d_w = dev_from(wp, dtype_bytes(mc.wdt, nw));
    float *d_b = dev_from(bias, (size_t)E * OC * 4), *d_y = dev_nan((size_t)S * OC);
    R->moe_grouped_matmul_forward(R, y, xs, wp, mc.wdt, mc.bias ? bias : NULL, offsets, S, E, C, OC);
    X->moe_grouped_matmul_forward(X, d_y, d_xs, d_w, mc.wdt, mc.bias ? d_b : NULL, d_off, S, E, C, OC);
    snprintf(what, sizeof what, "grouped matmul fwd %s", label);
    expect_close(what, d_y, y, (size_t)S * OC, TOL_RED);

    // combine
    float *rw = xmalloc((size_t)S * 4), *out = xmalloc((size_t)N * OC * 4);
    fill_uniform(rw, (size_t)S, 0.05f, 1.0f);
    float *d_rw = dev_from(rw, (size_t)S * 4), *d_out = dev_nan((size_t)N * OC);
    R->moe_combine_forward(R, out, y, rw, token_slot, N, K, OC);
    X->moe_combine_forward(X, d_out, d_y, d_rw, d_ts, N, K, OC);
    snprintf(what, sizeof what, "combine fwd %s", label);
    expect_close(what, d_out, out, (size_t)N * OC, TOL_EW);

    // backward: combine, grouped GEMM, gather
    float *dout = new_normal((size_t)N * OC, 1), *dy = new_normal((size_t)S * OC, 1), *drw = new_normal((size_t)S, 1);
    float *d_dout = dev_from(dout, (size_t)N * OC * 4), *d_dy = dev_from(dy, (size_t)S * OC * 4),
          *d_drw = dev_from(drw, (size_t)S * 4);
    R->moe_combine_backward(R, dy, drw, dout, y, rw, token_slot, N, K, OC);
    X->moe_combine_backward(X, d_dy, d_drw, d_dout, d_y, d_rw, d_ts, N, K, OC);
    snprintf(what, sizeof what, "combine dys %s", label);
    expect_close(what, d_dy, dy, (size_t)S * OC, TOL_EW);
    snprintf(what, sizeof what, "combine dw %s", label);
    expect_close(what, d_drw, drw, (size_t)S, TOL_RED);
    float *dxs = new_normal((size_t)S * C, 1), *dw = new_normal(nw, 1), *db = new_normal((size_t)E * OC, 1);
    float *d_dxs = dev_from(dxs, (size_t)S * C * 4), *d_dw = dev_from(dw, nw * 4),
          *d_db = dev_from(db, (size_t)E * OC * 4);
    R->moe_grouped_matmul_backward(R, dxs, dw, mc.bias ? db : NULL, dy, xs, wp, mc.wdt, offsets, S, E, C, OC);
    X->moe_grouped_matmul_backward(X, d_dxs, d_dw, mc.bias ? d_db : NULL, d_dy, d_xs, d_w, mc.wdt, d_off, S, E, C,
                                   OC);
    snprintf(what, sizeof what, "grouped matmul dinp %s", label);
    expect_close(what, d_dxs, dxs, (size_t)S * C, TOL_RED);
    snprintf(what, sizeof what, "grouped matmul dw %s", label);
    expect_close(what, d_dw, dw, nw, TOL_RED);
    snprintf(what, sizeof what, "grouped matmul dbias %s", label);
    expect_close(what, d_db, db, (size_t)E * OC, TOL_RED);
    float *dx = new_normal((size_t)N * C, 1), *d_dx = dev_from(dx, (size_t)N * C * 4);
    R->moe_gather_backward(R, dx, dxs, token_slot, N, K, C);
    X->moe_gather_backward(X, d_dx, d_dxs, d_ts, N, K, C);
    snprintf(what, sizeof what, "gather backward %s", label);
    expect_close(what, d_dx, dx, (size_t)N * C, TOL_EW);

    free(idx), free(offsets), free(slot_token), free(token_slot), free(x), free(xs), free(w), free(bias), free(y);
    free(wb), free(rw), free(out), free(dout), free(dy), free(drw), free(dxs), free(dw), free(db), free(dx);
    X->free(X, d_idx), X->free(X, d_off), X->free(X, d_st), X->free(X, d_ts), X->free(X, d_drop), X->free(X, d_x);
    X->free(X, d_xs), X->free(X, d_w), X->free(X, d_b), X->free(X, d_y), X->free(X, d_rw), X->free(X, d_out);
    X->free(X, d_dout), X->free(X, d_dy), X->free(X, d_drw), X->free(X, d_dxs), X->free(X, d_dw), X->free(X, d_db);
    X->free(X, d_dx);
}

static void test_experts(void) {
    check_experts((MoeCase){37, 11, 3, 37, 21, 0, 0, DT_F32});
    check_experts((MoeCase){37, 11, 3, 37, 21, 0, 1, DT_BF16});
    check_experts((MoeCase){37, 11, 3, 21, 37, 7, 1, DT_F32});  // capacity 7: slots dropped
    check_experts((MoeCase){1, 11, 3, 37, 21, 0, 0, DT_F32});   // decode: one token
    check_experts((MoeCase){23, 6, 1, 16, 32, 0, 1, DT_F32});   // K = 1, tile-sized widths
}

static void check_aux(int N, int E, int K, int with_seg) {
    char what[96];
    float *l = tie_logits(N, E), *w = xmalloc((size_t)N * K * 4), *stats = new_normal((size_t)2 * E + 1, 1);
    int32_t *idx = xmalloc((size_t)N * K * 4), *seg = xmalloc((size_t)N * 4);
    for (int n = 0; n < N; n++) seg[n] = n % 4 == 1 ? 0 : 1 + n / 10;
    R->moe_route_forward(R, idx, w, l, N, E, K, 0);
    stats[2 * E] = 3.0f;  // a previous layer's tokens
    float *d_l = dev_from(l, (size_t)N * E * 4), *d_stats = dev_from(stats, ((size_t)2 * E + 1) * 4);
    int32_t *d_idx = dev_i32(idx, (size_t)N * K), *d_seg = dev_i32(seg, N);
    R->moe_aux_stats(R, stats, l, idx, with_seg ? seg : NULL, N, E, K);
    X->moe_aux_stats(X, d_stats, d_l, d_idx, with_seg ? d_seg : NULL, N, E, K);
    snprintf(what, sizeof what, "aux stats N%d E%d K%d seg%d", N, E, K, with_seg);
    expect_close(what, d_stats, stats, (size_t)2 * E + 1, TOL_RED);
    float *dl = new_normal((size_t)N * E, 1), *d_dl = dev_from(dl, (size_t)N * E * 4);
    for (int e = 0; e < E; e++) stats[e] = fabsf(stats[e]);  // counts are >= 0
    X->upload(X, d_stats, stats, ((size_t)2 * E + 1) * 4);
    R->moe_aux_backward(R, dl, l, with_seg ? seg : NULL, stats, 0.7f, N, E);
    X->moe_aux_backward(X, d_dl, d_l, with_seg ? d_seg : NULL, d_stats, 0.7f, N, E);
    snprintf(what, sizeof what, "aux backward N%d E%d seg%d", N, E, with_seg);
    expect_close(what, d_dl, dl, (size_t)N * E, TOL_EW);
    free(l), free(w), free(stats), free(idx), free(seg), free(dl);
    X->free(X, d_l), X->free(X, d_stats), X->free(X, d_idx), X->free(X, d_seg), X->free(X, d_dl);
}

static void test_aux(void) {
    check_aux(37, 11, 3, 1);
    check_aux(37, 11, 2, 0);
    check_aux(1, 8, 2, 1);
}

// GPT-OSS's clamped SwiGLU over interleaved gate / up: values spread over [-8, 8] so that both
// clamps (limit 7, and a small limit 1) hold some of them; an exact limit value included.
static void check_swiglu_clamp(size_t n, float limit) {
    char what[96];
    float *gu = new_normal(2 * n, 3.5f), *out = xmalloc(n * 4), *dout = new_normal(n, 1), *dgu = new_normal(2 * n, 1);
    gu[0] = limit, gu[1] = -limit;
    float *d_gu = dev_from(gu, 2 * n * 4), *d_out = dev_nan(n), *d_dout = dev_from(dout, n * 4);
    float *d_dgu = dev_from(dgu, 2 * n * 4);
    R->swiglu_clamp_forward(R, out, gu, 1.702f, limit, n);
    X->swiglu_clamp_forward(X, d_out, d_gu, 1.702f, limit, n);
    snprintf(what, sizeof what, "swiglu_clamp fwd n%zu limit %g", n, limit);
    expect_close(what, d_out, out, n, TOL_EW);
    R->swiglu_clamp_backward(R, dgu, dout, gu, 1.702f, limit, n);
    X->swiglu_clamp_backward(X, d_dgu, d_dout, d_gu, 1.702f, limit, n);
    snprintf(what, sizeof what, "swiglu_clamp bwd n%zu limit %g", n, limit);
    expect_close(what, d_dgu, dgu, 2 * n, TOL_EW);
    free(gu), free(out), free(dout), free(dgu);
    X->free(X, d_gu), X->free(X, d_out), X->free(X, d_dout), X->free(X, d_dgu);
}

static void test_swiglu_clamp(void) {
    check_swiglu_clamp(37 * 21, 7.0f);
    check_swiglu_clamp(1, 1.0f);
    check_swiglu_clamp(40000, 1.0f);  // past the cpu loop's threading threshold
}

int main(void) {
    (void)expect_close_entropy;  // parity_util.h's, for the heads tests
    R = backend_ref_create(1);
    for (size_t i = 0; i < ARRAY_LEN(backends); i++) {
        Err e = {0};
        if (backend_create(backends[i], 2, &X, &e) != ST_OK) {
            printf("skip moe parity %s: %s\n", backends[i], e.msg);
            continue;
        }
        printf("# backend %s\n", X->name);
        RUN_OWN(test_route);
        RUN_OWN(test_experts);
        RUN_OWN(test_aux);
        RUN_OWN(test_swiglu_clamp);
        backend_destroy(X);
    }
    backend_destroy(R);
    TEST_MAIN_END();
}
