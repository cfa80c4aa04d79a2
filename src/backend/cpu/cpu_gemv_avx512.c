// cpu_gemv_avx512.c: the kernels of cpu_gemv_kern.h for AVX-512 (F, BW, VL) + FMA (+ F16C),
// whatever -march the rest of the build has; cpu_gemv.c calls them only where cpuid reports these.
#include "cpu.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#define GEMV_AVX512
#define GEMV_FN(name) name##_avx512
#include "cpu_gemv_kern.h"
#endif
