// cuemu.h: the device side of the CUDA emulator (tests/cuemu, docs/cuemu.md). CUDA sources are
// rewritten by cu2cpp.py (launches, __shared__, #pragma unroll) and compiled as host C++ against
// these shim headers; cuemu.cpp runs every block's threads as coroutines on the calling thread.
//
// Built-in variables, barriers, warp collectives, atomics, the device math CUDA adds, and the
// launcher that `kernel<<<grid, block, shmem, stream>>>(args...)` becomes:
//   cuemu_launch("kernel", __FILE__, __LINE__, kernel, grid, block, shmem, stream)(args...)
// The arguments are converted to the kernel's parameter types as in a call and kept by value
// (a captured graph replays them as they were at launch).
#ifndef CUEMU_H
#define CUEMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

// ---- qualifiers ---------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
// __launch_bounds__ is rewritten by cu2cpp.py into a check at the top of the kernel's body.
void cuemu_launch_bounds(int max_threads, const char *file, int line);
// __shared__ is rewritten by cu2cpp.py (static storage, poisoned per block); left undefined here
// so that a declaration the rewrite missed fails to compile instead of running unchecked.

// ---- built-in variables -------------------------------------------------------------------------
struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

extern const uint3 *cuemu_thread_idx;  // the running thread's
extern uint3 cuemu_block_idx;
extern dim3 cuemu_block_dim, cuemu_grid_dim;

#define threadIdx (*cuemu_thread_idx)
#define blockIdx (static_cast<const uint3 &>(cuemu_block_idx))
#define blockDim (static_cast<const dim3 &>(cuemu_block_dim))
#define gridDim (static_cast<const dim3 &>(cuemu_grid_dim))
static constexpr int warpSize = 32;

// ---- barriers and warp collectives --------------------------------------------------------------
void cuemu_syncthreads(const char *file, int line);
[[noreturn]] void cuemu_trap(const char *file, int line);
#define __syncthreads() cuemu_syncthreads(__FILE__, __LINE__)
#define __trap() cuemu_trap(__FILE__, __LINE__)
#define __threadfence() ((void)0)
#define __threadfence_block() ((void)0)

enum CuemuWarpOp {
    CUEMU_SHFL_IDX,
    CUEMU_SHFL_UP,
    CUEMU_SHFL_DOWN,
    CUEMU_SHFL_XOR,
    CUEMU_BALLOT,
    CUEMU_ANY,
    CUEMU_ALL,
    CUEMU_SYNCWARP,
    CUEMU_MMA,  // mma.sync.aligned (cuemu_asm): every lane of the warp, its fragments in Thread
};

// Every lane of `mask` must arrive at the same collective (same op, mask and source line); the
// value is the 8 bytes of the lane's operand, the result the partner's (or the vote).
uint64_t cuemu_warp_op(int op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line);

template <typename T> inline T cuemu_shfl(int op, unsigned mask, T v, int arg, int width, const char *file, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = cuemu_warp_op(op, mask, bits, arg, width, file, line);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}
template <typename T> inline T cuemu_shfl_idx(const char *f, int l, unsigned mask, T v, int src, int width = 32) {
    return cuemu_shfl(CUEMU_SHFL_IDX, mask, v, src, width, f, l);
}
template <typename T> inline T cuemu_shfl_up(const char *f, int l, unsigned mask, T v, unsigned d, int width = 32) {
    return cuemu_shfl(CUEMU_SHFL_UP, mask, v, (int)d, width, f, l);
}
template <typename T> inline T cuemu_shfl_down(const char *f, int l, unsigned mask, T v, unsigned d, int width = 32) {
    return cuemu_shfl(CUEMU_SHFL_DOWN, mask, v, (int)d, width, f, l);
}
template <typename T> inline T cuemu_shfl_xor(const char *f, int l, unsigned mask, T v, int lm, int width = 32) {
    return cuemu_shfl(CUEMU_SHFL_XOR, mask, v, lm, width, f, l);
}
#define __shfl_sync(...) cuemu_shfl_idx(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) cuemu_shfl_up(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) cuemu_shfl_down(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) cuemu_shfl_xor(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred)                                                                                      \
    ((unsigned)cuemu_warp_op(CUEMU_BALLOT, (mask), (pred) ? 1u : 0u, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, pred) ((int)cuemu_warp_op(CUEMU_ANY, (mask), (pred) ? 1u : 0u, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, pred) ((int)cuemu_warp_op(CUEMU_ALL, (mask), (pred) ? 1u : 0u, 0, 32, __FILE__, __LINE__))
#define __syncwarp(...) cuemu_syncwarp(__FILE__, __LINE__, ##__VA_ARGS__)
inline void cuemu_syncwarp(const char *f, int l, unsigned mask = 0xffffffffu) {
    cuemu_warp_op(CUEMU_SYNCWARP, mask, 0, 0, 32, f, l);
}

// ---- inline PTX (cu2cpp.py rewrites `asm volatile(...)` into cuemu_asm) --------------------------
// The template is read at run time; the instructions the emulator knows (cuemu.cpp, cuemu_asm) run
// with the operand layout the PTX ISA gives them; any other instruction stops the kernel naming it.
// Operands: "=f" float / "=r" 32-bit outputs, "f" / "r" inputs, numbered %0.. outputs first.
struct CuemuAsmOut {
    void *p;
    char kind;  // 'f' or 'r'
};
struct CuemuAsmIn {
    uint32_t bits;
    char kind;
};
inline CuemuAsmOut cuemu_asm_out_f(float *p) { return {p, 'f'}; }
inline CuemuAsmOut cuemu_asm_out_r(uint32_t *p) { return {p, 'r'}; }
inline CuemuAsmIn cuemu_asm_in_f(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return {b, 'f'};
}
template <typename T> inline CuemuAsmIn cuemu_asm_in_r(T x) {
    static_assert(std::is_integral<T>::value && sizeof(T) == 4, "an \"r\" asm operand is a 32-bit integer");
    return {(uint32_t)x, 'r'};
}
void cuemu_asm(const char *ptx, const char *file, int line, std::initializer_list<CuemuAsmOut> outs,
               std::initializer_list<CuemuAsmIn> ins);

// ---- shared memory (cu2cpp.py) --------------------------------------------------------------------
// A static __shared__ variable becomes function-local static storage; the first thread of a block
// to reach its declaration poisons it (0xff bytes: NaN, -1), as shared memory starts undefined.
void cuemu_shared_enter(void *p, size_t bytes, const char *name);
#define CUEMU_SHARED(x) cuemu_shared_enter((void *)&(x), sizeof(x), #x)
// `extern __shared__ T name[]`: the launch's dynamic shared memory (poisoned per block).
void *cuemu_dyn_shared(void);

// ---- atomics: blocks and threads never run at once, so a read-modify-write is atomic ------------
#define CUEMU_ATOMIC(name, expr)                                                                                       \
    template <typename T> inline T name(T *a, T v) {                                                                   \
        T old = *a;                                                                                                    \
        *a = (expr);                                                                                                   \
        return old;                                                                                                    \
    }
CUEMU_ATOMIC(cuemu_atomic_add, old + v)
CUEMU_ATOMIC(cuemu_atomic_max, old < v ? v : old)
CUEMU_ATOMIC(cuemu_atomic_min, v < old ? v : old)
CUEMU_ATOMIC(cuemu_atomic_exch, v)
#undef CUEMU_ATOMIC
#define CUEMU_ATOMIC_OVERLOADS(name, impl)                                                                             \
    inline int name(int *a, int v) { return impl(a, v); }                                                              \
    inline unsigned name(unsigned *a, unsigned v) { return impl(a, v); }                                               \
    inline unsigned long long name(unsigned long long *a, unsigned long long v) { return impl(a, v); }
CUEMU_ATOMIC_OVERLOADS(atomicAdd, cuemu_atomic_add)
CUEMU_ATOMIC_OVERLOADS(atomicMax, cuemu_atomic_max)
CUEMU_ATOMIC_OVERLOADS(atomicMin, cuemu_atomic_min)
CUEMU_ATOMIC_OVERLOADS(atomicExch, cuemu_atomic_exch)
#undef CUEMU_ATOMIC_OVERLOADS
inline float atomicAdd(float *a, float v) { return cuemu_atomic_add(a, v); }
inline double atomicAdd(double *a, double v) { return cuemu_atomic_add(a, v); }
inline int atomicCAS(int *a, int cmp, int v) {
    int old = *a;
    if (old == cmp) *a = v;
    return old;
}
inline unsigned long long atomicCAS(unsigned long long *a, unsigned long long cmp, unsigned long long v) {
    unsigned long long old = *a;
    if (old == cmp) *a = v;
    return old;
}

// ---- integer intrinsics and the math CUDA adds to the C library ----------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }

#define CUEMU_MINMAX(T)                                                                                                \
    inline T min(T a, T b) { return b < a ? b : a; }                                                                   \
    inline T max(T a, T b) { return a < b ? b : a; }
CUEMU_MINMAX(int)
CUEMU_MINMAX(unsigned)
CUEMU_MINMAX(long)
CUEMU_MINMAX(unsigned long)
CUEMU_MINMAX(long long)
CUEMU_MINMAX(unsigned long long)
#undef CUEMU_MINMAX
// CUDA's mixed signed / unsigned overloads compare as unsigned.
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// The fast intrinsics run as the accurate functions (docs/cuemu.md: what is not emulated).
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
template <typename T> inline T __ldg(const T *p) { return *p; }
inline int __float_as_int(float x) {
    int i;
    memcpy(&i, &x, 4);
    return i;
}
inline float __int_as_float(int i) {
    float x;
    memcpy(&x, &i, 4);
    return x;
}
inline unsigned __float_as_uint(float x) { return (unsigned)__float_as_int(x); }
inline float __uint_as_float(unsigned u) { return __int_as_float((int)u); }

// ---- kernel launch ----------------------------------------------------------------------------------
typedef struct CUstream_st *cudaStream_t;

void cuemu_submit_kernel(const char *name, const char *file, int line, const void *func, dim3 grid, dim3 block,
                         size_t shmem, cudaStream_t stream, std::function<void()> body,
                         std::vector<const void *> ptr_args);

template <typename T> inline void cuemu_collect_ptr(std::vector<const void *> &v, const T &x) {
    if constexpr (std::is_pointer<T>::value)
        v.push_back((const void *)x);
    else
        v.push_back(nullptr);
}

template <typename... P> struct CuemuLauncher {
    void (*kernel)(P...);
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    void operator()(P... args) const {
        auto tuple = std::make_shared<const std::tuple<P...>>(args...);
        std::vector<const void *> ptrs;
        (cuemu_collect_ptr(ptrs, args), ...);
        void (*k)(P...) = kernel;
        cuemu_submit_kernel(
            name, file, line, reinterpret_cast<const void *>(k), grid, block, shmem, stream,
            [k, tuple]() { std::apply(k, *tuple); }, std::move(ptrs));
    }
};

template <typename... P>
inline CuemuLauncher<P...> cuemu_launch(const char *name, const char *file, int line, void (*kernel)(P...), dim3 grid,
                                        dim3 block, size_t shmem, cudaStream_t stream) {
    return CuemuLauncher<P...>{kernel, name, file, line, grid, block, shmem, stream};
}

#endif
