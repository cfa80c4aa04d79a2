// test_gemv.c: the cpu backend's decode-sized matmul (cpu_gemv.c, N <= 8 rows) against the
// reference matmul for every N, fp32, bf16 and Q8_0 weights, with and without bias, widths that are and
// are not multiples of the vector width, row counts that leave partial row blocks and thread
// ranges; guard words after the output must survive. Every instruction set the machine runs is
// tested (AVX-512, AVX2 and the plain loops, forced with cpu_set_isa); one it lacks is named as
// not run.
#include "ops_util.h"

#include "backend/cpu/cpu.h"
#include "core/dtype.h"

static void check(Backend *R, Backend *X, int N, int C, int OC, DType wdt, int with_bias) {
    size_t nw = (size_t)OC * C;
    float *inp = new_normal((size_t)N * C, 1), *wf = new_normal(nw, 0.5f), *bias = with_bias ? new_normal(OC, 1) : NULL;
    void *w = wf, *wb = NULL;
    if (wdt == DT_BF16) {
        uint16_t *h = xmalloc(nw * 2);
        for (size_t i = 0; i < nw; i++) h[i] = f32_to_bf16(wf[i]);
        w = wb = h;
    } else if (wdt == DT_Q8_0) {
        w = wb = xmalloc(dtype_bytes(DT_Q8_0, nw));
        q8_0_quantize(wb, wf, nw);
    }
    float *want = xmalloc((size_t)N * OC * 4), *got = xmalloc(((size_t)N * OC + 16) * 4);
    R->matmul_forward(R, want, inp, w, wdt, bias, N, C, OC);
    for (size_t i = 0; i < (size_t)N * OC + 16; i++) got[i] = i < (size_t)N * OC ? NAN : 777.0f;
    X->matmul_forward(X, got, inp, w, wdt, bias, N, C, OC);
    double err = 0, ref = 0;
    int guards = 1;
    for (size_t i = 0; i < (size_t)N * OC; i++) {
        err = isnan(got[i]) ? INFINITY : fmax(err, fabs((double)got[i] - want[i]));
        ref = fmax(ref, fabs(want[i]));
        if (isinf(err)) break;
    }
    for (int g = 0; g < 16; g++) guards &= got[(size_t)N * OC + g] == 777.0f;
    EXPECT_MSG(err <= 2e-5 * fmax(ref, 1e-3) && guards, "N=%d C=%d OC=%d %s bias=%d: error %.3g (max |ref| %.3g), guards %d",
               N, C, OC, dtype_st_name(wdt), with_bias, err, ref, guards);
    free(inp), free(wf), free(bias), free(wb), free(want), free(got);
}

static void gemv_against_ref(CpuIsa isa) {
    Backend *R = backend_ref_create(1), *X = backend_cpu_create(2);
    CHECK(cpu_set_isa(X, isa) == isa);
    int Cs[] = {1, 13, 16, 100, 1024}, OCs[] = {1, 5, 29, 300};
    for (int N = 1; N <= CPU_GEMV_MAX_ROWS; N++)
        for (size_t i = 0; i < sizeof Cs / sizeof *Cs; i++)
            for (size_t j = 0; j < sizeof OCs / sizeof *OCs; j++)
                for (int bf = 0; bf < 2; bf++) check(R, X, N, Cs[i], OCs[j], bf ? DT_BF16 : DT_F32, (int)(i + j + N) % 2);
    // Q8_0: rows of whole blocks
    int Cq[] = {32, 96, 1024};
    for (int N = 1; N <= CPU_GEMV_MAX_ROWS; N++)
        for (size_t i = 0; i < sizeof Cq / sizeof *Cq; i++)
            for (size_t j = 0; j < sizeof OCs / sizeof *OCs; j++) check(R, X, N, Cq[i], OCs[j], DT_Q8_0, (int)(i + j + N) % 2);
    backend_destroy(R);
    backend_destroy(X);
}

static void test_gemv_avx512(void) { gemv_against_ref(CPU_ISA_AVX512); }
static void test_gemv_avx2(void) { gemv_against_ref(CPU_ISA_AVX2); }
static void test_gemv_scalar(void) { gemv_against_ref(CPU_ISA_SCALAR); }

// matmul_forward_multi: every part's output equals its own matmul_forward's bit for bit, for
// decode-sized inputs (one pass) and larger ones (one matmul each), mixed weight dtypes, parts
// whose rows are not whole 4-row blocks, and thread ranges that cross parts.
static void test_matmul_multi(void) {
    Backend *X = backend_cpu_create(2);
    int Ns[] = {1, 2, 5, 8, 12}, OCs[] = {29, 300, 64}, C = 96;
    DType dts[] = {DT_BF16, DT_Q8_0, DT_F32};
    for (size_t k = 0; k < sizeof Ns / sizeof *Ns; k++)
        for (int shift = 0; shift < 3; shift++) {
            int N = Ns[k];
            float *inp = new_normal((size_t)N * C, 1);
            MatmulPart parts[3];
            float *want[3];
            void *w[3];
            for (int i = 0; i < 3; i++) {
                int OC = OCs[i];
                DType dt = dts[(i + shift) % 3];
                float *wf = new_normal((size_t)OC * C, 0.5f);
                if (dt == DT_BF16) {
                    uint16_t *h = xmalloc((size_t)OC * C * 2);
                    for (size_t j = 0; j < (size_t)OC * C; j++) h[j] = f32_to_bf16(wf[j]);
                    w[i] = h;
                    free(wf);
                } else if (dt == DT_Q8_0) {
                    w[i] = xmalloc(dtype_bytes(DT_Q8_0, (size_t)OC * C));
                    q8_0_quantize(w[i], wf, (size_t)OC * C);
                    free(wf);
                } else {
                    w[i] = wf;
                }
                float *bias = i == 1 ? new_normal(OC, 1) : NULL;
                parts[i] = (MatmulPart){.out = xmalloc((size_t)N * OC * 4), .w = w[i], .wdt = dt, .bias = bias, .OC = OC};
                want[i] = xmalloc((size_t)N * OC * 4);
                X->matmul_forward(X, want[i], inp, w[i], dt, bias, N, C, OC);
            }
            X->matmul_forward_multi(X, parts, 3, inp, N, C);
            for (int i = 0; i < 3; i++) {
                EXPECT_MSG(!memcmp(want[i], parts[i].out, (size_t)N * OCs[i] * 4), "N=%d part %d (%s, OC=%d) differs", N,
                           i, dtype_st_name(parts[i].wdt), OCs[i]);
                free(parts[i].out), free(want[i]), free(w[i]), free((void *)parts[i].bias);
            }
            free(inp);
        }
    backend_destroy(X);
}

// STILL_CPU_ISA caps the kernels at create; backend_create refuses a value it does not know.
static void test_isa_env(void) {
    setenv("STILL_CPU_ISA", "scalar", 1);
    Backend *X = backend_cpu_create(1);
    EXPECT_MSG(cpu_ctx(X)->isa == CPU_ISA_SCALAR, "STILL_CPU_ISA=scalar gave %s", cpu_isa_name(cpu_ctx(X)->isa));
    backend_destroy(X);
    setenv("STILL_CPU_ISA", "avx3", 1);
    Backend *be = NULL;
    Err e;
    EXPECT(backend_create("cpu", 1, &be, &e) == ST_EUSAGE && be == NULL && strstr(e.msg, "STILL_CPU_ISA=avx3"));
    unsetenv("STILL_CPU_ISA");
    X = backend_cpu_create(1);
    EXPECT(cpu_ctx(X)->isa == cpu_isa_best());
    backend_destroy(X);
}

int main(void) {
    rng_init(&ops_rng, 5, 0);
    CpuIsa best = cpu_isa_best();
    if (best >= CPU_ISA_AVX512) RUN(test_gemv_avx512);
    else printf("skip test_gemv_avx512: this machine has no AVX-512 (the kernels' AVX-512 path is not run here)\n");
    if (best >= CPU_ISA_AVX2) RUN(test_gemv_avx2);
    else printf("skip test_gemv_avx2: this machine has no AVX2 + FMA\n");
    RUN(test_gemv_scalar);
    RUN(test_matmul_multi);
    RUN(test_isa_env);
    TEST_MAIN_END();
}
