// cpu_gemv_avx2.c: the kernels of cpu_gemv_kern.h for AVX2 + FMA (+ F16C), whatever -march the
// rest of the build has; cpu_gemv.c calls them only where cpuid reports these.
#include "cpu.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#define GEMV_FN(name) name##_avx2
#include "cpu_gemv_kern.h"
#endif
