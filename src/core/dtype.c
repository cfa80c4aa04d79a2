// dtype.c: dtype names and conversions.
#include "dtype.h"

#include <math.h>

const char *dtype_st_name(DType t) {
    switch (t) {
    case DT_F32: return "F32";
    case DT_BF16: return "BF16";
    case DT_F16: return "F16";
    case DT_Q8_0: return "Q8_0";
    }
    return "?";
}

const char *dtype_torch_name(DType t) {
    switch (t) {
    case DT_F32: return "float32";
    case DT_BF16: return "bfloat16";
    case DT_F16: return "float16";
    case DT_Q8_0: return "q8_0";
    }
    return "?";
}

int dtype_parse(const char *s, DType *out) {
    if (!strcmp(s, "F32") || !strcmp(s, "float32") || !strcmp(s, "fp32") || !strcmp(s, "float")) return *out = DT_F32, 0;
    if (!strcmp(s, "BF16") || !strcmp(s, "bfloat16") || !strcmp(s, "bf16")) return *out = DT_BF16, 0;
    if (!strcmp(s, "F16") || !strcmp(s, "float16") || !strcmp(s, "fp16") || !strcmp(s, "half")) return *out = DT_F16, 0;
    return -1;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else {  // subnormal
            float f = ldexpf((float)mant, -24);
            memcpy(&u, &f, 4);
            u |= sign;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < 6.103515625e-05f) {  // subnormal half: round to multiple of 2^-24
        uint32_t m = (uint32_t)lrintf(a * 16777216.0f);
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((u >> 23) & 0xff) - 112, mant = u & 0x7fffff;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

void q8_0_quantize(BlockQ8_0 *dst, const float *x, size_t n) {
    for (size_t b = 0; b < n / Q8_0_BLOCK; b++) {
        const float *xb = x + b * Q8_0_BLOCK;
        float amax = 0.0f;
        for (int j = 0; j < Q8_0_BLOCK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = f32_to_f16(d);
        for (int j = 0; j < Q8_0_BLOCK; j++) dst[b].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void dtype_convert(void *dst, DType dt, const void *src, DType st, size_t n) {
    if (dt == st) {
        memcpy(dst, src, dtype_bytes(dt, n));
        return;
    }
    if (dt == DT_Q8_0 || st == DT_Q8_0) {  // through fp32, one block at a time (blocks are independent)
        long nb = (long)(n / Q8_0_BLOCK);
#pragma omp parallel for schedule(static) if (nb > 4096)
        for (long b = 0; b < nb; b++) {
            float f[Q8_0_BLOCK];
            size_t i0 = (size_t)b * Q8_0_BLOCK;
            if (st == DT_Q8_0) {
                for (int j = 0; j < Q8_0_BLOCK; j++) f[j] = q8_0_get((const BlockQ8_0 *)src + b, (size_t)j);
            } else {
                dtype_convert(f, DT_F32, (const char *)src + i0 * dtype_size(st), st, Q8_0_BLOCK);
            }
            if (dt == DT_Q8_0) q8_0_quantize((BlockQ8_0 *)dst + b, f, Q8_0_BLOCK);
            else dtype_convert((char *)dst + i0 * dtype_size(dt), dt, f, DT_F32, Q8_0_BLOCK);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float f;
        if (st == DT_F32) f = ((const float *)src)[i];
        else if (st == DT_BF16) f = bf16_to_f32(((const uint16_t *)src)[i]);
        else f = f16_to_f32(((const uint16_t *)src)[i]);
        if (dt == DT_F32) ((float *)dst)[i] = f;
        else if (dt == DT_BF16) ((uint16_t *)dst)[i] = f32_to_bf16(f);
        else ((uint16_t *)dst)[i] = f32_to_f16(f);
    }
}
