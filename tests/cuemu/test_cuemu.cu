// test_cuemu.cu: the CUDA emulator's own tests (tests/cuemu, docs/cuemu.md), built only by
// `make CUDA_EMU=1` and run by `make test-cuda-emu`. This file goes through cu2cpp.py like the
// backend: launches, __shared__ and extern __shared__ are the rewritten forms.
//   conversions: bf16 and f16 against nearest-even rounding worked out in double; every half value
//   warp collectives: shuffles (idx, up, down, xor, widths), votes, against host arithmetic
//   barriers and shared memory: a block tree reduction over static and dynamic shared memory
//   streams: work runs when the host waits; copies into pinned memory are stream-ordered
//   graphs: a replay reads inputs through device memory and keeps the scalars it captured; calls a
//           capture forbids fail and invalidate it
//   mma: mma.sync.aligned.m16n8k16 bf16 (inline PTX) in two warps against a host product, its
//        fragments placed by the PTX ISA's table written out here; in place (d = c) too
//   cuBLAS: GemmEx in every transpose, fp32 / bf16 operands, padded leading dims, alpha, beta
//   launch errors: block and shared-memory limits as cudaGetLastError reports them
//   faults (in a child process, which must abort with the message): divergent __syncthreads, a
//   thread exiting while others wait, shuffles outside the mask, divergent warp collectives,
//   writes past an allocation or dynamic shared memory, a host pointer as an argument, __trap,
//   a block larger than the kernel's __launch_bounds__, a graph replayed after a buffer it uses was
//   freed, host code dereferencing a device pointer, a kernel overflowing its thread's stack, an mma
//   in a warp missing lanes or reached at two sites, an inline PTX instruction the emulator lacks
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "test.h"

#define CK(call) EXPECT_MSG((call) == cudaSuccess, "%s", #call)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

// ---------------------------------------------------------------- conversions
// The bf16 nearest to f (ties to the even one), worked out in double: the candidates truncate f
// toward zero and step one away; an overflow candidate counts as 2^128, IEEE's rounding boundary.
static uint16_t bf16_nearest(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lo = u >> 16, hi = lo + 1;
    auto value = [](uint32_t b) {
        if ((b & 0x7fffu) == 0x7f80u) return (b & 0x8000u ? -1.0 : 1.0) * ldexp(1.0, 128);
        return (double)__uint_as_float(b << 16);
    };
    double d = f, dl = fabs(d - value(lo)), dh = fabs(value(hi) - d);
    if (dl < dh) return (uint16_t)lo;
    if (dh < dl) return (uint16_t)hi;
    return (uint16_t)(lo & 1 ? hi : lo);
}

static void test_bf16(void) {
    static const uint32_t special[] = {0,           0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x7f7f8000u,
                                       0x7f7f7fffu, 0x00000001u, 0x00008000u, 0x00018000u, 0x3f808000u, 0x3f818000u,
                                       0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x3f800000u};
    const int nspecial = (int)(sizeof special / sizeof special[0]);
    int bad = 0;
    for (int i = 0; i < 400000 && bad < 5; i++) {
        uint32_t u = i < nspecial ? special[i] : rnd32();
        float f = __uint_as_float(u);
        uint16_t got = __float2bfloat16_rn(f).__x;
        uint16_t want = isnan(f) ? 0x7fff : bf16_nearest(f);
        if (got != want) bad++, printf("  bf16(%08x): %04x, want %04x\n", u, got, want);
        __nv_bfloat16 b;
        b.__x = (uint16_t)u;
        float back = __bfloat162float(b);
        uint32_t bu;
        memcpy(&bu, &back, 4);
        if (bu != (u & 0xffffu) << 16) bad++, printf("  bf16 -> f32 of %04x: %08x\n", u & 0xffffu, bu);
    }
    EXPECT(bad == 0);
}

static void test_f16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {  // every half survives half -> float -> half
        __half x;
        x.__x = (uint16_t)h;
        float f = __half2float(x);
        uint16_t back = __float2half_rn(f).__x;
        if (isnan(f) ? back != ((h & 0x8000u) | 0x7fffu) : back != h) bad++;
    }
    EXPECT_MSG(bad == 0, "%d half values do not round-trip", bad);
    struct {
        float f;
        uint16_t h;
    } cases[] = {{1.0f, 0x3c00},
                 {65504.0f, 0x7bff},
                 {65519.0f, 0x7bff},
                 {65520.0f, 0x7c00},
                 {ldexpf(1, -24), 0x0001},
                 {ldexpf(1, -25), 0x0000},
                 {ldexpf(3, -26), 0x0001},
                 {ldexpf(3, -25), 0x0002},
                 {ldexpf(1, -14), 0x0400},
                 {-2.5f, 0xc100},
                 {1.0f + ldexpf(1, -11), 0x3c00},
                 {1.0f + ldexpf(3, -11), 0x3c02}};
    for (auto &c : cases) {
        uint16_t got = __float2half_rn(c.f).__x;
        EXPECT_MSG(got == c.h, "half(%a) = %04x, want %04x", c.f, got, c.h);
    }
}

// ---------------------------------------------------------------- warp collectives
#define NSHFL 9
__global__ void shuffle_kernel(int *out) {
    const int lane = threadIdx.x & 31, v = 100 * (int)threadIdx.x + 7;
    int *o = out + threadIdx.x * NSHFL;
    o[0] = __shfl_xor_sync(0xffffffffu, v, 1);
    o[1] = __shfl_xor_sync(0xffffffffu, v, 20, 16);  // beyond the 16-lane segment: own value
    o[2] = __shfl_up_sync(0xffffffffu, v, 3);
    o[3] = __shfl_down_sync(0xffffffffu, v, 5, 8);
    o[4] = __shfl_sync(0xffffffffu, v, 31 - lane);
    o[5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[6] = __any_sync(0xffffffffu, lane == 17) + 2 * __all_sync(0xffffffffu, lane < 32);
    double d = __shfl_sync(0xffffffffu, 0.5 + lane, 7);  // 8-byte values
    o[7] = (int)(2 * d);
    if (lane < 16)
        o[8] = __shfl_sync(0x0000ffffu, v, lane ^ 15);  // half-warp mask
    else
        o[8] = -1;
}

static void test_shuffles(void) {
    const int n = 64;
    int *d;
    CK(cudaMalloc(&d, n * NSHFL * sizeof(int)));
    shuffle_kernel<<<1, n>>>(d);
    CK(cudaGetLastError());
    std::vector<int> h(n * NSHFL);
    CK(cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    auto val = [](int t) { return 100 * t + 7; };
    int bad = 0;
    for (int t = 0; t < n; t++) {
        int lane = t & 31, base = t - lane, seg16 = lane & ~15, seg8 = lane & ~7;
        unsigned ballot = 0;
        for (int l = 0; l < 32; l++)
            if (l % 3 == 0) ballot |= 1u << l;
        int want[NSHFL] = {val(base + (lane ^ 1)),
                           val(base + ((lane ^ 20) >= seg16 + 16 ? lane : lane ^ 20)),
                           val(base + (lane < 3 ? lane : lane - 3)),
                           val(base + (lane + 5 >= seg8 + 8 ? lane : lane + 5)),
                           val(base + 31 - lane),
                           (int)ballot,
                           3,
                           2 * 7 + 1,
                           lane < 16 ? val(base + (lane ^ 15)) : -1};
        for (int k = 0; k < NSHFL; k++)
            if (h[t * NSHFL + k] != want[k]) {
                if (bad++ < 5) printf("  thread %d op %d: %d, want %d\n", t, k, h[t * NSHFL + k], want[k]);
            }
    }
    EXPECT(bad == 0);
    CK(cudaFree(d));
}

// ---------------------------------------------------------------- barriers and shared memory
// out[block] = sum of in over the block's 256 elements, by a tree in static shared memory, then
// the same through dynamic shared memory; both must agree.
__global__ void reduce_kernel(int *out, const int *in) {
    __shared__ int sh[256];
    extern __shared__ int dyn[];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    sh[t] = in[i];
    dyn[t] = 2 * in[i];
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s], dyn[t] += dyn[t + s];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = 2 * sh[0] == dyn[0] ? sh[0] : -1;
}

static void test_block_reduce(void) {
    const int blocks = 5, n = blocks * 256;
    std::vector<int> h(n);
    for (int i = 0; i < n; i++) h[i] = (int)(rnd32() % 1000);
    int *din, *dout;
    CK(cudaMalloc(&din, n * sizeof(int)));
    CK(cudaMalloc(&dout, blocks * sizeof(int)));
    CK(cudaMemcpy(din, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    reduce_kernel<<<blocks, 256, 256 * sizeof(int)>>>(dout, din);
    CK(cudaGetLastError());
    int got[blocks];
    CK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++) {
        int want = 0;
        for (int t = 0; t < 256; t++) want += h[b * 256 + t];
        EXPECT_MSG(got[b] == want, "block %d: %d, want %d", b, got[b], want);
    }
    CK(cudaFree(din));
    CK(cudaFree(dout));
}

// ---------------------------------------------------------------- streams and graphs
__global__ void axpb_kernel(float *out, const float *in, float a, float b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = a * in[i] + b;
}

static void test_stream_order(void) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d, *pinned;
    CK(cudaMalloc(&d, 4 * sizeof(float)));
    CK(cudaMallocHost(&pinned, 4 * sizeof(float)));
    float x[4] = {1, 2, 3, 4};
    CK(cudaMemcpyAsync(d, x, sizeof x, cudaMemcpyHostToDevice, s));
    x[0] = 100;  // pageable source: staged at the call, this write is not seen
    pinned[0] = -1;
    axpb_kernel<<<1, 32, 0, s>>>(d, d, 2.0f, 1.0f, 4);
    CK(cudaMemcpyAsync(pinned, d, 4 * sizeof(float), cudaMemcpyDeviceToHost, s));
    EXPECT_MSG(pinned[0] == -1, "the copy into pinned memory ran before the host waited (%g)", pinned[0]);
    CK(cudaStreamSynchronize(s));
    EXPECT_MSG(pinned[0] == 3 && pinned[3] == 9, "pinned %g %g, want 3 9", pinned[0], pinned[3]);
    CK(cudaFreeHost(pinned));
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
}

static void test_graph_replay(void) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int n = 100;
    float *in, *out, *copy, h[n];
    CK(cudaMalloc(&in, n * sizeof(float)));
    CK(cudaMalloc(&out, n * sizeof(float)));
    CK(cudaMalloc(&copy, n * sizeof(float)));
    for (int i = 0; i < n; i++) h[i] = (float)i;
    CK(cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice));
    CK(cudaMemset(out, 0, sizeof h));
    float a = 3.0f;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    axpb_kernel<<<2, 32, 0, s>>>(out, in, a, 0.5f, n);
    CK(cudaMemcpyAsync(copy, out, sizeof h, cudaMemcpyDeviceToDevice, s));
    CK(cudaMemsetAsync(in, 0, sizeof(float), s));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    a = 5.0f;  // the graph keeps the value it captured
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphDestroy(g));
    CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    EXPECT_MSG(h[7] == 0, "capturing ran the kernel (%g)", h[7]);
    for (int rep = 1; rep <= 2; rep++) {  // new inputs through device memory, then replay
        for (int i = 0; i < n; i++) h[i] = (float)(rep * i);
        CK(cudaMemcpy(in, h, sizeof h, cudaMemcpyHostToDevice));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(h, copy, sizeof h, cudaMemcpyDeviceToHost));
        EXPECT_MSG(h[7] == 3.0f * rep * 7 + 0.5f && h[n - 1] == 3.0f * rep * (n - 1) + 0.5f, "replay %d: %g", rep,
                   h[7]);
        CK(cudaMemcpy(h, in, sizeof(float), cudaMemcpyDeviceToHost));
        EXPECT_MSG(h[0] == 0, "replay %d: the captured memset did not run", rep);
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaFree(in));
    CK(cudaFree(out));
    CK(cudaFree(copy));
    CK(cudaStreamDestroy(s));
}

static void test_capture_forbids(void) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d, x[4] = {0};
    CK(cudaMalloc(&d, sizeof x));
    struct {
        const char *what;
        cudaError_t (*call)(cudaStream_t, float *, float *);
    } cases[] = {
        {"upload from pageable memory",
         [](cudaStream_t st, float *dev, float *host) {
             return cudaMemcpyAsync(dev, host, 16, cudaMemcpyHostToDevice, st);
         }},
        {"download to pageable memory",
         [](cudaStream_t st, float *dev, float *host) {
             return cudaMemcpyAsync(host, dev, 16, cudaMemcpyDeviceToHost, st);
         }},
        {"cudaStreamSynchronize", [](cudaStream_t st, float *, float *) { return cudaStreamSynchronize(st); }},
        {"cudaMalloc",
         [](cudaStream_t, float *, float *) {
             void *p;
             return cudaMalloc(&p, 64);
         }},
        {"cudaFree", [](cudaStream_t, float *dev, float *) { return cudaFree(dev); }},
    };
    for (auto &c : cases) {
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        axpb_kernel<<<1, 32, 0, s>>>(d, d, 1.0f, 0.0f, 4);
        cudaError_t e = c.call(s, d, x);
        EXPECT_MSG(e == cudaErrorStreamCaptureUnsupported, "%s while capturing: %s", c.what, cudaGetErrorName(e));
        axpb_kernel<<<1, 32, 0, s>>>(d, d, 1.0f, 0.0f, 4);
        EXPECT_MSG(cudaGetLastError() == cudaErrorStreamCaptureInvalidated, "%s: a launch after it", c.what);
        cudaGraph_t g = (cudaGraph_t)1;
        EXPECT_MSG(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && !g, "%s: end capture", c.what);
        cudaGetLastError();
    }
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
}

// ---------------------------------------------------------------- cuBLAS
static void test_gemm(void) {
    cublasHandle_t h;
    EXPECT(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
    const int m = 7, n = 5, k = 11, pad = 3;
    for (int dt = 0; dt < 2; dt++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int zero_beta = 0; zero_beta < 2; zero_beta++) {
                    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                    int lda = ar + pad, ldb = br + pad, ldc = m + pad;
                    size_t es = dt ? 2 : 4;
                    std::vector<float> A((size_t)lda * ac), B((size_t)ldb * bc), C((size_t)ldc * n);
                    for (float &x : A) x = (float)(rnd32() % 17) - 8;  // exact in bf16
                    for (float &x : B) x = (float)(rnd32() % 13) - 6;
                    for (float &x : C) x = zero_beta ? NAN : (float)(rnd32() % 9);
                    std::vector<unsigned char> Ab(A.size() * es), Bb(B.size() * es);
                    for (size_t i = 0; i < A.size(); i++)
                        if (dt)
                            ((__nv_bfloat16 *)Ab.data())[i] = __float2bfloat16_rn(A[i]);
                        else
                            ((float *)Ab.data())[i] = A[i];
                    for (size_t i = 0; i < B.size(); i++)
                        if (dt)
                            ((__nv_bfloat16 *)Bb.data())[i] = __float2bfloat16_rn(B[i]);
                        else
                            ((float *)Bb.data())[i] = B[i];
                    void *dA, *dB;
                    float *dC;
                    CK(cudaMalloc(&dA, Ab.size()));
                    CK(cudaMalloc(&dB, Bb.size()));
                    CK(cudaMalloc(&dC, C.size() * 4));
                    CK(cudaMemcpy(dA, Ab.data(), Ab.size(), cudaMemcpyHostToDevice));
                    CK(cudaMemcpy(dB, Bb.data(), Bb.size(), cudaMemcpyHostToDevice));
                    CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
                    float alpha = 0.5f, beta = zero_beta ? 0.0f : 2.0f;
                    cudaDataType_t t = dt ? CUDA_R_16BF : CUDA_R_32F;
                    cublasStatus_t st = cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                     m, n, k, &alpha, dA, t, lda, dB, t, ldb, &beta, dC, CUDA_R_32F,
                                                     ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                    EXPECT(st == CUBLAS_STATUS_SUCCESS);
                    std::vector<float> got(C.size());
                    CK(cudaMemcpy(got.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost));
                    int bad = 0;
                    for (int j = 0; j < n; j++)
                        for (int i = 0; i < ldc; i++) {
                            size_t ci = i + (size_t)j * ldc;
                            if (i >= m) {  // padding rows are never written
                                bad += !(isnan(got[ci]) ? isnan(C[ci]) : got[ci] == C[ci]);
                                continue;
                            }
                            double acc = 0;
                            for (int p = 0; p < k; p++)
                                acc += (double)A[ta ? p + (size_t)i * lda : i + (size_t)p * lda] *
                                       B[tb ? j + (size_t)p * ldb : p + (size_t)j * ldb];
                            double want = alpha * acc + (zero_beta ? 0.0 : beta * C[ci]);
                            bad += got[ci] != (float)want;  // small integers: exact
                        }
                    EXPECT_MSG(bad == 0, "gemm %s ta %d tb %d beta %g: %d wrong", dt ? "bf16" : "fp32", ta, tb, beta,
                               bad);
                    CK(cudaFree(dA));
                    CK(cudaFree(dB));
                    CK(cudaFree(dC));
                }
    float one = 1, zero = 0;
    EXPECT(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, nullptr, CUDA_R_32F, 3, nullptr, CUDA_R_32F, 4,
                        &zero, nullptr, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    EXPECT(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

// ---------------------------------------------------------------- launch errors
__global__ void dyn_kernel(float *out) {
    extern __shared__ float big[];
    big[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = big[31];
}

static void test_launch_errors(void) {
    float *d;
    CK(cudaMalloc(&d, 64));
    cudaGetLastError();
    dyn_kernel<<<1, 1025>>>(d);
    EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration);
    dyn_kernel<<<dim3(1, 70000), 32>>>(d);
    EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration);
    dyn_kernel<<<1, 32, 64 << 10>>>(d);  // more than 48 KiB needs the attribute
    EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
    CK(cudaFuncSetAttribute(dyn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
    dyn_kernel<<<1, 32, 64 << 10>>>(d);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaFree(d));
}

// ---------------------------------------------------------------- mma.sync (inline PTX)
// PTX ISA, mma.m16n8k16 with .bf16 A/B and .f32 C/D: lane = 4 g + q; register r of A holds
// A[g + 8 (r & 1)][2q + 8 (r >> 1) + {0, 1}], of B holds B[2q + 8 r + {0, 1}][g]; C/D element i is
// (g + 8 (i >> 1), 2q + (i & 1)). Lower 16 bits: the lower index.
__device__ uint32_t pair16(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }
// A (W,16,16) row-major bf16 bits, B (W,16,8) [k][n], C D (W,16,8): warp w multiplies its own
__global__ void mma_kernel(float *D, const uint16_t *A, const uint16_t *B, const float *C, int in_place) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, q = l & 3;
    const uint16_t *a = A + w * 256, *b = B + w * 128;
    const float *c = C + w * 128;
    uint32_t ra[4], rb[2];
    for (int r = 0; r < 4; r++) {
        int row = g + 8 * (r & 1), col = 2 * q + 8 * (r >> 1);
        ra[r] = pair16(a[row * 16 + col], a[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; r++) rb[r] = pair16(b[(2 * q + 8 * r) * 8 + g], b[(2 * q + 8 * r + 1) * 8 + g]);
    float rc[4], rd[4];
    for (int i = 0; i < 4; i++) rc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1)];
    if (in_place) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};"
                     : "=f"(rc[0]), "=f"(rc[1]), "=f"(rc[2]), "=f"(rc[3])
                     : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]),
                       "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
        for (int i = 0; i < 4; i++) rd[i] = rc[i];
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %11, %12, %13};\n"
                     : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
                     : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]),
                       "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
    }
    for (int i = 0; i < 4; i++) D[w * 128 + (g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1)] = rd[i];
}

static float bf16_value(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

static void test_mma(void) {
    const int W = 2;
    std::vector<uint16_t> A(W * 256), B(W * 128);
    std::vector<float> C(W * 128), D(W * 128);
    for (auto &x : A) x = __float2bfloat16_rn((float)(rnd32() % 2001) / 500.0f - 2.0f).__x;
    for (auto &x : B) x = __float2bfloat16_rn((float)(rnd32() % 2001) / 500.0f - 2.0f).__x;
    for (auto &x : C) x = (float)(rnd32() % 1001) / 100.0f - 5.0f;
    uint16_t *dA, *dB;
    float *dC, *dD;
    CK(cudaMalloc(&dA, A.size() * 2));
    CK(cudaMalloc(&dB, B.size() * 2));
    CK(cudaMalloc(&dC, C.size() * 4));
    CK(cudaMalloc(&dD, D.size() * 4));
    CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    for (int in_place = 0; in_place < 2; in_place++) {
        mma_kernel<<<1, 32 * W>>>(dD, dA, dB, dC, in_place);
        CK(cudaGetLastError());
        CK(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int w = 0; w < W; w++)
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 8; n++) {
                    double acc = C[w * 128 + m * 8 + n], mag = fabs(acc);
                    for (int k = 0; k < 16; k++) {
                        double p = (double)bf16_value(A[w * 256 + m * 16 + k]) * bf16_value(B[w * 128 + k * 8 + n]);
                        acc += p, mag += fabs(p);
                    }
                    worst = fmax(worst, fabs(D[w * 128 + m * 8 + n] - acc) / mag);
                }
        EXPECT_MSG(worst < 1e-6, "mma (in place %d): worst error %.3g of the terms' magnitude", in_place, worst);
    }
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    CK(cudaFree(dD));
}

// ---------------------------------------------------------------- faults (each in a child process)
__global__ void divergent_barrier_kernel(void) {
    if (threadIdx.x < 32)
        __syncthreads();
    else
        __syncthreads();
}
__global__ void early_exit_kernel(int *out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void shfl_outside_mask_kernel(int *out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)threadIdx.x, 20);
}
__global__ void shfl_exited_kernel(int *out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}
__global__ void shfl_diverged_kernel(int *out) {
    int v = threadIdx.x;
    if (threadIdx.x & 1)
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    else
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
__global__ void oob_kernel(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 0.0f;  // one past the end
}
__global__ void dyn_oob_kernel(void) {
    extern __shared__ float sm[];
    sm[threadIdx.x + 1] = 0.0f;
}
__global__ void trap_kernel(void) {
    if (threadIdx.x == 3) __trap();
}
__global__ void __launch_bounds__(64) bounded_kernel(float *out) { out[threadIdx.x] = 1.0f; }
__global__ void deep_kernel(float *out) {
    volatile float big[64 << 10];  // 256 KiB of locals: past a 64 KiB thread stack
    big[threadIdx.x] = 1.0f;
    out[threadIdx.x] = big[threadIdx.x];
}

__global__ void mma_fault_kernel(float *out, int diverge) {
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0};
    if (diverge && (threadIdx.x & 1))
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};"
                     : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                       "f"(c[2]), "f"(c[3]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%10,%11,%12,%13};"
                     : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                       "f"(c[2]), "f"(c[3]));
    out[threadIdx.x] = c[0];
}
__global__ void ptx_unknown_kernel(float *out) {
    float x;
    asm volatile("add.f32 %0, %1, %2;" : "=f"(x) : "f"(out[0]), "f"(out[1]));
    out[threadIdx.x] = x;
}

static void fault_mma_partial_warp(void) {
    float *d;
    cudaMalloc(&d, 32 * sizeof(float));
    mma_fault_kernel<<<1, 16>>>(d, 0);
}
static void fault_mma_diverged(void) {
    float *d;
    cudaMalloc(&d, 32 * sizeof(float));
    mma_fault_kernel<<<1, 32>>>(d, 1);
}
static void fault_ptx_unknown(void) {
    float *d;
    cudaMalloc(&d, 32 * sizeof(float));
    cudaMemset(d, 0, 32 * sizeof(float));
    ptx_unknown_kernel<<<1, 32>>>(d);
}

static void fault_divergent_barrier(void) { divergent_barrier_kernel<<<1, 64>>>(); }
static void fault_early_exit(void) {
    int *d;
    cudaMalloc(&d, 64 * sizeof(int));
    early_exit_kernel<<<1, 64>>>(d);
}
static void fault_shfl_outside_mask(void) {
    int *d;
    cudaMalloc(&d, 32 * sizeof(int));
    shfl_outside_mask_kernel<<<1, 32>>>(d);
}
static void fault_shfl_exited(void) {
    int *d;
    cudaMalloc(&d, 32 * sizeof(int));
    shfl_exited_kernel<<<1, 32>>>(d);
}
static void fault_shfl_diverged(void) {
    int *d;
    cudaMalloc(&d, 32 * sizeof(int));
    shfl_diverged_kernel<<<1, 32>>>(d);
}
static void fault_oob(void) {
    float *d;
    cudaMalloc(&d, 100 * sizeof(float));
    oob_kernel<<<4, 32>>>(d, 100);
}
static void fault_dyn_oob(void) { dyn_oob_kernel<<<1, 32, 32 * sizeof(float)>>>(); }
static void fault_host_pointer(void) {
    static float host[4];
    oob_kernel<<<1, 4>>>(host, 3);
}
static void fault_trap(void) { trap_kernel<<<2, 32>>>(); }
static void fault_replay_after_free(void) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *d;
    cudaMalloc(&d, 64 * sizeof(float));
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    axpb_kernel<<<1, 64, 0, s>>>(d, d, 2.0f, 1.0f, 64);
    cudaGraph_t g;
    cudaStreamEndCapture(s, &g);
    cudaGraphExec_t exec;
    cudaGraphInstantiate(&exec, g, 0);
    cudaFree(d);
    cudaGraphLaunch(exec, s);
    cudaStreamSynchronize(s);
}
static void fault_host_access(void) {
    float *d;
    cudaMalloc(&d, 64 * sizeof(float));
    cudaDeviceSynchronize();
    d[3] = 1.0f;  // a device pointer dereferenced on the host
}
static void fault_stack_overflow(void) {
    float *d;
    cudaMalloc(&d, 32 * sizeof(float));
    deep_kernel<<<1, 32>>>(d);
}
static void fault_launch_bounds(void) {
    float *d;
    cudaMalloc(&d, 128 * sizeof(float));
    bounded_kernel<<<1, 64>>>(d);
    cudaDeviceSynchronize();
    fprintf(stderr, "64 threads ran\n");
    bounded_kernel<<<1, 128>>>(d);
}

// fn must abort (SIGABRT) when the device is synchronised, saying one of the |-separated
// alternatives of `needle` on stderr.
static void expect_fault(const char *what, void (*fn)(void), const char *needle) {
    fflush(stdout);
    int fd[2];
    if (pipe(fd) != 0) {
        EXPECT(!"pipe");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        cudaDeviceSynchronize();
        _exit(0);
    }
    close(fd[1]);
    std::string err;
    char buf[4096];
    ssize_t r;
    while ((r = read(fd[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)r);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%s: the child did not abort (status %d)", what,
               status);
    bool found = false;  // needle: alternatives separated by |
    for (size_t a = 0, b; a <= strlen(needle); a = b + 1) {
        b = std::string(needle).find('|', a);
        if (b == std::string::npos) b = strlen(needle);
        found |= err.find(std::string(needle, a, b - a)) != std::string::npos;
    }
    EXPECT_MSG(found, "%s: \"%s\" lacks \"%s\"", what, err.c_str(), needle);
    if (getenv("CUEMU_VERBOSE")) printf("  %s: %s", what, err.c_str());
}

static void test_faults(void) {
    expect_fault("divergent __syncthreads", fault_divergent_barrier, "divergent __syncthreads");
    expect_fault("early exit before a barrier", fault_early_exit, "exited");
    expect_fault("shuffle from a lane outside the mask", fault_shfl_outside_mask, "not in the mask");
    expect_fault("shuffle naming exited lanes", fault_shfl_exited, "exited");
    expect_fault("lanes at different shuffles", fault_shfl_diverged, "diverge");
    // (under AddressSanitizer the red zones are poisoned and ASan reports the write)
    expect_fault("write past an allocation", fault_oob, "past the end|use-after-poison");
    expect_fault("write past dynamic shared memory", fault_dyn_oob, "dynamic shared memory");
    expect_fault("host pointer as an argument", fault_host_pointer, "points into no device allocation");
    expect_fault("__trap", fault_trap, "__trap()");
    expect_fault("replaying a graph after freeing its buffer", fault_replay_after_free,
                 "no device allocation any more");
    expect_fault("host code dereferencing device memory", fault_host_access, "host code touched device memory");
    expect_fault("a kernel overflowing its thread stack", fault_stack_overflow, "a thread overflowed its 64 KiB stack");
    expect_fault("more threads than __launch_bounds__", fault_launch_bounds, "over the kernel's __launch_bounds__(64)");
    expect_fault("mma in a warp of 16 lanes", fault_mma_partial_warp, "do not exist");
    expect_fault("mma reached at two sites", fault_mma_diverged, "diverge");
    expect_fault("inline PTX the emulator lacks", fault_ptx_unknown, "`add.f32` is not emulated");
}

int main(void) {
    RUN(test_bf16);
    RUN(test_f16);
    RUN(test_shuffles);
    RUN(test_block_reduce);
    RUN(test_stream_order);
    RUN(test_graph_replay);
    RUN(test_capture_forbids);
    RUN(test_mma);
    RUN(test_gemm);
    RUN(test_launch_errors);
    RUN(test_faults);
    TEST_MAIN_END();
}
