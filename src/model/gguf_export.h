// gguf_export.h: a model as llama.cpp's converter (convert_hf_to_gguf.py) writes it: metadata
// keys, tensor names, reversed dims, llama's Q/K row permutation, Llama 3 rope factors, and the
// weights in F32, F16, BF16 or Q8_0 (docs/gguf.md).
#ifndef STILL_GGUF_EXPORT_H
#define STILL_GGUF_EXPORT_H

#include "gguf_write.h"
#include "model.h"

typedef struct GgufExport {
    const Model *m;
    uint32_t outtype;    // GGML_F32, GGML_F16, GGML_BF16 or GGML_Q8_0 for 2-D weights
    int *src;            // (n written tensors) model table index, or -1 for rope_freqs.weight
    int n;
    float *rope_freqs;   // (head_dim / 2) Llama 3 factors, or NULL
    float *stage, *stage2;  // (largest tensor) host copies
    size_t cap;
} GgufExport;

// Add m's metadata (general.*, ARCH.*) and tensor infos to w; the data comes from
// gguf_export_fill when w is written. outtype as above; matrices whose rows do not split into
// Q8_0 blocks are written F16, as the converter does. Sequence classifiers are refused.
Status gguf_export_begin(GgufExport *x, const Model *m, uint32_t outtype, const char *name, GgufWriter *w, Err *e);
Status gguf_export_fill(void *ctx, int i, void *dst, Err *e);
void gguf_export_end(GgufExport *x);

// ggml's quantize_row_q8_0_ref: per 32 values d = max|x| / 127, q = round(x / d), d in f16.
void gguf_quantize_q8_0(void *dst, const float *x, size_t n);

#endif
