// gguf_quant.c: ggml block formats to float, as ggml's dequantize_row_* compute them. Every
// product and difference is rounded to float32 on its own (no fused multiply-add), so the
// values equal those of the numpy reference (scripts/ref_gguf.py) bit for bit.
//
//   Q8_0  32 weights: f16 d, i8 q[32]                          x = d * q
//   Q4_0  32 weights: f16 d, u8 qs[16]                         x[j] = d * (lo(qs[j]) - 8),
//                                                              x[j+16] = d * (hi(qs[j]) - 8)
//   Q4_K  256 weights: f16 d, f16 dmin, u8 scales[12] (8 pairs of 6-bit scale / min),
//         u8 qs[128]; per 64 weights two sub-blocks  x = (d*sc) * q - (dmin*m)
//   Q6_K  256 weights: u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits), i8 scales[16], f16 d;
//                                                              x = (d*sc) * (q - 32)
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "gguf.h"

#include "../core/dtype.h"

#include <string.h>

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

static void dq_q8_0(const uint8_t *b, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, b += 34, y += 32) {
        float d = f16_at(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d;
    }
}

static void dq_q4_0(const uint8_t *b, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, b += 18, y += 32) {
        float d = f16_at(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

// Scale and min j (0..7) of a Q4_K block's 12 packed bytes: 6 bits each, the first four pairs
// whole in bytes 0..7, the last four with their low 4 bits in bytes 8..11 and their top 2 bits in
// the top bits of bytes 0..7.
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dq_q4_k(const uint8_t *b, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, b += 144) {
        float d = f16_at(b), dmin = f16_at(b + 2);
        const uint8_t *scales = b + 4, *q = b + 16;
        for (int j = 0; j < 256; j += 64, q += 32) {
            uint8_t sc, m;
            scale_min_k4(j / 32, scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(j / 32 + 1, scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void dq_q6_k(const uint8_t *b, float *y, size_t nb) {
    for (size_t i = 0; i < nb; i++, b += 210) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16_at(b + 208);
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void gguf_dequantize(uint32_t type, const void *src, float *dst, size_t n) {
    const uint8_t *b = src;
    switch (type) {
    case GGML_F32: memcpy(dst, src, n * 4); break;
    case GGML_F16: dtype_convert(dst, DT_F32, src, DT_F16, n); break;
    case GGML_BF16: dtype_convert(dst, DT_F32, src, DT_BF16, n); break;
    case GGML_Q8_0: dq_q8_0(b, dst, n / 32); break;
    case GGML_Q4_0: dq_q4_0(b, dst, n / 32); break;
    case GGML_Q4_K: dq_q4_k(b, dst, n / 256); break;
    case GGML_Q6_K: dq_q6_k(b, dst, n / 256); break;
    default: CHECK_MSG(0, "gguf_dequantize: type %u", type);
    }
}
