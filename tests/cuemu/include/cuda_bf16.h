// cuda_bf16.h (CUDA emulator, tests/cuemu): __nv_bfloat16 with CUDA's conversions bit for bit:
// float -> bf16 rounds to nearest even, any NaN becomes the canonical 0x7fff; bf16 -> float is
// exact.
#ifndef CUEMU_CUDA_BF16_H
#define CUEMU_CUDA_BF16_H

#include "cuemu.h"

inline unsigned short cuemu_f32_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    explicit __nv_bfloat16(float f) : __x(cuemu_f32_to_bf16_bits(f)) {}
    operator float() const {
        uint32_t u = (uint32_t)__x << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 h;
    h.__x = u;
    return h;
}

#endif
