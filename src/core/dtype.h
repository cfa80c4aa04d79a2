// dtype.h: storage dtypes and bf16/f16 <-> f32 conversion (round to nearest even).
#ifndef STILL_DTYPE_H
#define STILL_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2 } DType;

static inline size_t dtype_size(DType t) { return t == DT_F32 ? 4 : 2; }
// Safetensors / HF spellings: "F32", "BF16", "F16".
const char *dtype_st_name(DType t);
// torch_dtype / --dtype spellings: "float32", "bfloat16", "float16".
const char *dtype_torch_name(DType t);
// Accepts both spellings (and "fp32", "bf16", "fp16"). Returns 0 on success.
int dtype_parse(const char *s, DType *out);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Convert n elements between dtypes (dst and src must not overlap).
void dtype_convert(void *dst, DType dt, const void *src, DType st, size_t n);

#endif
