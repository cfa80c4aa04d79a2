// dtype.h: storage dtypes, bf16/f16 <-> f32 conversion (round to nearest even) and the Q8_0
// block format.
#ifndef STILL_DTYPE_H
#define STILL_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// DT_Q8_0: GGUF's Q8_0 (ggml's block_q8_0): each run of 32 consecutive elements of a row is one
// 34-byte block, an fp16 scale d then 32 int8 q, x = d * q (docs/generate.md). Only 2-D weights
// of models that are run, not trained, are stored so; rows are a multiple of 32 elements.
typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2, DT_Q8_0 = 3 } DType;

#define Q8_0_BLOCK 32
typedef struct BlockQ8_0 {
    uint16_t d;              // fp16 scale
    int8_t qs[Q8_0_BLOCK];   // quants
} BlockQ8_0;
#ifdef __cplusplus
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 blocks are 34 bytes, as in GGUF");
#else
_Static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 blocks are 34 bytes, as in GGUF");
#endif

// Bytes per element of the elementwise dtypes (F32, BF16, F16); Q8_0 has none (dtype_bytes).
static inline size_t dtype_size(DType t) { return t == DT_F32 ? 4 : 2; }
// Bytes of n elements stored as t (n a multiple of Q8_0_BLOCK for Q8_0).
static inline size_t dtype_bytes(DType t, size_t n) {
    return t == DT_Q8_0 ? n / Q8_0_BLOCK * sizeof(BlockQ8_0) : n * dtype_size(t);
}
// Safetensors / HF spellings: "F32", "BF16", "F16" ("Q8_0" in messages).
const char *dtype_st_name(DType t);
// torch_dtype / --dtype spellings: "float32", "bfloat16", "float16", "q8_0".
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

// Q8_0 as ggml's reference quantize_row_q8_0: per block of 32, amax = max |x|, d = amax / 127,
// q = round(x * (1/d)) (halves away from zero; q = 0 when d = 0), the scale stored as fp16(d).
// x (n) -> dst (n / 32 blocks); n a multiple of 32.
void q8_0_quantize(BlockQ8_0 *dst, const float *x, size_t n);
// Element i of a Q8_0 table: fp16(d) * q, exact in fp32.
static inline float q8_0_get(const BlockQ8_0 *b, size_t i) {
    return f16_to_f32(b[i / Q8_0_BLOCK].d) * (float)b[i / Q8_0_BLOCK].qs[i % Q8_0_BLOCK];
}

// Convert n elements between dtypes (dst and src must not overlap). Q8_0 on either side: n a
// multiple of 32, both starting at a block.
void dtype_convert(void *dst, DType dt, const void *src, DType st, size_t n);

#endif
