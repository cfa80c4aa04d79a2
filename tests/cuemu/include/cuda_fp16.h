// cuda_fp16.h (CUDA emulator, tests/cuemu): __half with IEEE binary16 conversions: half -> float
// exact (subnormals, inf, NaN), float -> half rounding to nearest even.
#ifndef CUEMU_CUDA_FP16_H
#define CUEMU_CUDA_FP16_H

#include "cuemu.h"

inline float cuemu_f16_bits_to_f32(unsigned short h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 31u, man = h & 1023u, u;
    if (exp == 31) {
        u = sign | 0x7f800000u | man << 13;  // inf, NaN (payload kept)
    } else if (exp == 0) {
        float f = ldexpf((float)man, -24);  // zero or subnormal: exact
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | (exp + 112) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline unsigned short cuemu_f32_to_f16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7fffu);   // NaN: canonical, as CUDA
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to inf
    if (a < 0x38800000u) {  // below the smallest normal half: a multiple of 2^-24, rounded to even
        float q = nearbyintf(fabsf(f) * 16777216.0f);  // default rounding mode: nearest even
        return (unsigned short)(sign | (unsigned short)q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped bits to nearest even
    return (unsigned short)(sign | (((r >> 23) - 112) << 10 | ((r >> 13) & 1023u)));
}

struct __half {
    unsigned short __x;
    __half() = default;
    explicit __half(float f) : __x(cuemu_f32_to_f16_bits(f)) {}
    operator float() const { return cuemu_f16_bits_to_f32(__x); }
};

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return (float)h; }
inline __half __ushort_as_half(unsigned short u) {
    __half h;
    h.__x = u;
    return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.__x; }

#endif
