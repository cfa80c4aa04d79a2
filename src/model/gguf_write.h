// gguf_write.h: writing GGUF version 3 files (metadata in the order added, tensor infos, data
// aligned to general.alignment), atomically.
#ifndef STILL_GGUF_WRITE_H
#define STILL_GGUF_WRITE_H

#include "../core/alloc.h"
#include "gguf.h"

typedef struct GgufWTensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];  // innermost first
    uint32_t type;
    size_t nbytes;
    const void *data;           // NULL: the fill callback supplies it
} GgufWTensor;

typedef struct GgufWriter {
    StrBuf meta;        // encoded key/value pairs
    uint64_t n_kv;
    GgufWTensor *t;     // (n_t)
    int n_t, cap;
    size_t alignment;
} GgufWriter;

// alignment: a power of two; it is written as general.alignment unless it is the default 32.
void gguf_writer_init(GgufWriter *w, size_t alignment);
void gguf_writer_free(GgufWriter *w);
void gguf_w_str(GgufWriter *w, const char *key, const char *v);
void gguf_w_u32(GgufWriter *w, const char *key, uint32_t v);
void gguf_w_i32(GgufWriter *w, const char *key, int32_t v);
void gguf_w_f32(GgufWriter *w, const char *key, float v);
void gguf_w_bool(GgufWriter *w, const char *key, int v);
void gguf_w_arr_str(GgufWriter *w, const char *key, const char *const *v, size_t n);
void gguf_w_arr_i32(GgufWriter *w, const char *key, const int32_t *v, size_t n);
void gguf_w_arr_f32(GgufWriter *w, const char *key, const float *v, size_t n);
// A tensor of n_dims dims ne (innermost first); data (may be NULL, see fill) is not copied and
// must live until the write.
void gguf_w_tensor(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, uint32_t type, const void *data);
// fill(ctx, i, dst, e) writes tensor i's nbytes into dst, for tensors added without data.
typedef Status (*GgufFillFn)(void *ctx, int i, void *dst, Err *e);
Status gguf_w_write(GgufWriter *w, const char *path, GgufFillFn fill, void *ctx, Err *e);

#endif
