// test_gemm.c: the cpu backend's prefill-sized matmul for bf16 / f16 / Q8_0 weights (the AVX2
// GEMM of cpu_gemm_avx2.c, and the converted tiles on sgemm it replaces, forced with
// cpu_set_isa) against the reference matmul: input rows, widths and output rows that are and
// are not multiples of the 6 x 16 tile, the 8-element conversion step and the 512-element K
// block; Q8_0 tables whose rows are not whole blocks; with bias (the kernel adds to out: beta = 1) and
// without (out starts as NaN, which beta = 0 must ignore); guard words after the output. Each
// output is held to the reference within 2e-5 of sum_k |x_k w_k| + |bias|, far below one
// product's share, and the GEMM's must be bit-identical for 1, 2 and 3 threads.
#include "ops_util.h"

#include "backend/cpu/cpu.h"
#include "core/dtype.h"

enum { GUARD = 16 };

static void *weights(const float *wf, size_t n, DType wdt) {
    void *w = xmalloc(dtype_bytes(wdt, n));
    if (wdt == DT_Q8_0) q8_0_quantize(w, wf, n);
    else
        for (size_t i = 0; i < n; i++) ((uint16_t *)w)[i] = wdt == DT_BF16 ? f32_to_bf16(wf[i]) : f32_to_f16(wf[i]);
    return w;
}

// out (N*OC + GUARD) from X, NaN where the op must write and 777 in the guards
static float *run(Backend *X, const float *inp, const void *w, DType wdt, const float *bias, int N, int C, int OC) {
    size_t n = (size_t)N * OC;
    float *got = xmalloc((n + GUARD) * sizeof(float));
    for (size_t i = 0; i < n + GUARD; i++) got[i] = i < n ? NAN : 777.0f;
    X->matmul_forward(X, got, inp, w, wdt, bias, N, C, OC);
    return got;
}

static void check(Backend *R, Backend *X[3], int N, int C, int OC, DType wdt, int with_bias, int same_threads) {
    size_t nw = (size_t)OC * C, n = (size_t)N * OC;
    float *inp = new_normal((size_t)N * C, 1), *wf = new_normal(nw, 0.5f), *bias = with_bias ? new_normal(OC, 1) : NULL;
    void *w = weights(wf, nw, wdt);
    float *wd = xmalloc(nw * sizeof(float));  // the weights as the kernels see them
    cpu_convert_f32(wd, w, wdt, 0, nw);
    float *want = xmalloc(n * sizeof(float));
    R->matmul_forward(R, want, inp, w, wdt, bias, N, C, OC);
    float *got[3];
    for (int t = 0; t < 3; t++) got[t] = run(X[t], inp, w, wdt, bias, N, C, OC);
    double worst = 0;  // error / tolerance
    size_t at = 0;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double mag = bias ? fabs(bias[o]) : 0;
            for (int c = 0; c < C; c++) mag += fabs((double)inp[(size_t)i * C + c] * wd[(size_t)o * C + c]);
            size_t k = (size_t)i * OC + o;
            double r = isnan(got[1][k]) ? INFINITY : fabs((double)got[1][k] - want[k]) / (2e-5 * mag + 1e-30);
            if (r > worst) worst = r, at = k;
        }
    int guards = 1, same = 1;  // same: required of the GEMM (the tiles' sgemm calls depend on the thread count)
    for (int t = 0; t < 3; t++)
        for (int g = 0; g < GUARD; g++) guards &= got[t][n + g] == 777.0f;
    for (int t = 0; t < 3 && same_threads; t += 2) same &= !memcmp(got[t], got[1], n * sizeof(float));
    EXPECT_MSG(worst <= 1.0 && guards && same,
               "%s N=%d C=%d OC=%d bias=%d: worst error %.3g of tolerance at %zu (got %.8g want %.8g), guards %d, "
               "1/2/3 threads identical %d",
               dtype_st_name(wdt), N, C, OC, with_bias, worst, at, got[1][at], want[at], guards, same);
    for (int t = 0; t < 3; t++) free(got[t]);
    free(inp), free(wf), free(bias), free(w), free(wd), free(want);
}

static void gemm_against_ref(CpuIsa isa) {
    Backend *R = backend_ref_create(1), *X[3];
    int gemm = isa >= CPU_ISA_AVX2;
    for (int t = 0; t < 3; t++) {
        X[t] = backend_cpu_create(t + 1);
        CHECK(cpu_set_isa(X[t], isa) == isa);
    }
    // N > CPU_GEMV_MAX_ROWS: this path for every dtype (f16 from N = 5)
    int Ns[] = {9, 13, 37}, Cs[] = {1, 7, 8, 13, 100, 256, 263, 520}, OCs[] = {1, 15, 16, 17, 50};
    DType dts[] = {DT_BF16, DT_F16, DT_Q8_0};
    int k = 0;
    for (size_t a = 0; a < sizeof Ns / sizeof *Ns; a++)
        for (size_t b = 0; b < sizeof Cs / sizeof *Cs; b++)
            for (size_t c = 0; c < sizeof OCs / sizeof *OCs; c++)
                for (size_t d = 0; d < sizeof dts / sizeof *dts; d++, k++)
                    if (dts[d] != DT_Q8_0 || (size_t)Cs[b] * OCs[c] % Q8_0_BLOCK == 0)  // Q8_0: whole blocks
                        check(R, X, Ns[a], Cs[b], OCs[c], dts[d], k % 2, gemm);
    check(R, X, 6, 64, 40, DT_F16, 1, gemm);  // f16 below the gemv cutoff still comes here
    check(R, X, 128, 1024, 70, DT_BF16, 0, gemm);  // a prefill shape: 2 K blocks, 22 row panels
    check(R, X, 128, 1024, 70, DT_Q8_0, 1, gemm);
    for (int t = 0; t < 3; t++) backend_destroy(X[t]);
    backend_destroy(R);
}

static void test_gemm_avx2(void) { gemm_against_ref(CPU_ISA_AVX2); }
static void test_tiles_scalar(void) { gemm_against_ref(CPU_ISA_SCALAR); }

int main(void) {
    rng_init(&ops_rng, 11, 0);
    if (cpu_isa_best() >= CPU_ISA_AVX2) RUN(test_gemm_avx2);
    else printf("skip test_gemm_avx2: this machine has no AVX2 + FMA (the GEMM is not run here)\n");
    RUN(test_tiles_scalar);
    TEST_MAIN_END();
}
