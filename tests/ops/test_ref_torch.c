// test_ref_torch.c: the reference backend against PyTorch (float64) on the committed fixture
// tests/data/ops/ops_ref.bin, written by scripts/ref_ops.py (regenerate: scripts/refs_ops.sh).
// Inputs are fp32, torch computes in float64, the reference backend in double with fp32
// storage: every output agrees to a few fp32 ulp, so the bound is 1e-5 of each buffer's largest
// magnitude.
#include "torch_fixture.h"

#define FIXTURE "tests/data/ops/ops_ref.bin"
#define TOL 1e-5

static Backend *R;

static void test_attention_vs_torch(void) {
    int32_t *d = I("attn.dims");
    int B = d[0], T = d[1], NH = d[2], NKV = d[3], HD = d[4];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    float *out = xmalloc(nq * 4), *lse = xmalloc((size_t)B * NH * T * 4);
    float *dq = xcalloc(nq, 4), *dk = xcalloc(nk, 4), *dv = xcalloc(nk, 4);
    R->attention_forward(R, out, lse, F("attn.q"), F("attn.k"), F("attn.v"), I("attn.seg"), B, T, NH, NKV, HD);
    expect_ref("attn.out", out, nq);
    expect_ref("attn.lse", lse, (size_t)B * NH * T);
    R->attention_backward(R, dq, dk, dv, F("attn.dout"), out, lse, F("attn.q"), F("attn.k"), F("attn.v"),
                          I("attn.seg"), B, T, NH, NKV, HD);
    expect_ref("attn.dq", dq, nq);
    expect_ref("attn.dk", dk, nk);
    expect_ref("attn.dv", dv, nk);
    free(out), free(lse), free(dq), free(dk), free(dv);
}

static void test_rmsnorm_vs_torch(void) {
    int32_t *d = I("rms.dims");
    int N = d[0], C = d[1];
    float *out = xmalloc((size_t)N * C * 4), *rstd = xmalloc(N * 4), *dinp = xcalloc((size_t)N * C, 4);
    float *dw = xcalloc(C, 4);
    R->rmsnorm_forward(R, out, rstd, F("rms.inp"), F("rms.w"), N, C, 1e-6f);
    expect_ref("rms.out", out, (size_t)N * C);
    expect_ref("rms.rstd", rstd, N);
    R->rmsnorm_backward(R, dinp, dw, F("rms.dout"), F("rms.inp"), F("rms.w"), rstd, N, C);
    expect_ref("rms.dinp", dinp, (size_t)N * C);
    expect_ref("rms.dw", dw, C);
    free(out), free(rstd), free(dinp), free(dw);
}

static void test_rope_vs_torch(void) {
    int32_t *d = I("rope.dims");
    int N = d[0], NH = d[1], HD = d[2];
    size_t n = (size_t)N * NH * HD;
    float mscale = F("rope.mscale")[0];
    float *x = new_copy(F("rope.x"), n), *g = new_copy(F("rope.dout"), n);
    R->rope_forward(R, x, I("rope.pos"), F("rope.inv_freq"), mscale, N, NH, HD, HD);
    expect_ref("rope.out", x, n);
    R->rope_backward(R, g, I("rope.pos"), F("rope.inv_freq"), mscale, N, NH, HD, HD);
    expect_ref("rope.dx", g, n);
    free(x), free(g);
}

static void test_swiglu_vs_torch(void) {
    size_t n = (size_t)I("swiglu.dims")[0];
    float *out = xmalloc(n * 4), *dg = xcalloc(n, 4), *du = xcalloc(n, 4);
    R->swiglu_forward(R, out, F("swiglu.gate"), F("swiglu.up"), n);
    expect_ref("swiglu.out", out, n);
    R->swiglu_backward(R, dg, du, F("swiglu.dout"), F("swiglu.gate"), F("swiglu.up"), n);
    expect_ref("swiglu.dgate", dg, n);
    expect_ref("swiglu.dup", du, n);
    free(out), free(dg), free(du);
}

static void test_ce_vs_torch(void) {
    int32_t *d = I("ce.dims");
    int N = d[0], C = d[1], V = d[2], chunk = 4;
    float *loss = xmalloc(N * 4), *corr = xmalloc(N * 4), *ent = xmalloc(N * 4);
    float *dh = xcalloc((size_t)N * C, 4), *dW = xcalloc((size_t)V * C, 4);
    float *scratch = xmalloc((size_t)chunk * (V + C) * 4);
    R->ce_head(R, loss, corr, ent, dh, dW, F("ce.h"), F("ce.W"), DT_F32, I("ce.targets"), F("ce.weights"),
               F("ce.grad_scale")[0], scratch, chunk, N, C, V);
    expect_ref("ce.loss", loss, N);
    expect_ref("ce.entropy", ent, N);
    expect_ref("ce.correct", corr, N);
    expect_ref("ce.dh", dh, (size_t)N * C);
    expect_ref("ce.dW", dW, (size_t)V * C);
    free(loss), free(corr), free(ent), free(dh), free(dW), free(scratch);
}

// Attention sinks with a window, as GPT-OSS's eager attention computes them (scripts/ref_ops.py).
static void test_attention_sinks_vs_torch(void) {
    int32_t *d = I("sink.dims");
    int B = d[0], T = d[1], NH = d[2], NKV = d[3], HD = d[4];
    size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    AttnOpts o = {d[5], 0, 0, 0, F("sink.sinks")};
    float *out = xmalloc(nq * 4), *lse = xmalloc((size_t)B * NH * T * 4);
    float *dq = xcalloc(nq, 4), *dk = xcalloc(nk, 4), *dv = xcalloc(nk, 4), *ds = xcalloc(NH, 4);
    R->attention_forward_opt(R, out, lse, F("sink.q"), F("sink.k"), F("sink.v"), I("sink.seg"), B, T, NH, NKV, HD, o);
    expect_ref("sink.out", out, nq);
    expect_ref("sink.lse", lse, (size_t)B * NH * T);
    R->attention_backward_opt(R, dq, dk, dv, F("sink.dout"), out, lse, F("sink.q"), F("sink.k"), F("sink.v"),
                              I("sink.seg"), B, T, NH, NKV, HD, o);
    R->attention_sinks_backward(R, ds, F("sink.dout"), out, lse, o.sinks, I("sink.seg"), B, T, NH, HD);
    expect_ref("sink.dq", dq, nq);
    expect_ref("sink.dk", dk, nk);
    expect_ref("sink.dv", dv, nk);
    expect_ref("sink.dsinks", ds, NH);
    free(out), free(lse), free(dq), free(dk), free(dv), free(ds);
}

int main(void) {
    if (!fixture_load(FIXTURE, TOL)) {
        printf("FAIL fixture: cannot read %s (regenerate with scripts/refs_ops.sh)\n", FIXTURE);
        return 1;
    }
    R = backend_ref_create(1);
    RUN(test_attention_vs_torch);
    RUN(test_rmsnorm_vs_torch);
    RUN(test_rope_vs_torch);
    RUN(test_swiglu_vs_torch);
    RUN(test_ce_vs_torch);
    RUN(test_attention_sinks_vs_torch);
    backend_destroy(R);
    fixture_free();
    TEST_MAIN_END();
}
