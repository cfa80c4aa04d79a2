// gguf.h: reading llama.cpp's GGUF files (ggml docs/gguf.md, versions 2 and 3, little-endian):
// the metadata key/value pairs, the tensor directory, and dequantization of the tensor types
// still reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K). Everything in the header is validated
// against the file size before use: counts, string and array lengths, dimensions, types, offsets
// and alignment; errors name the file, the key or the tensor.
#ifndef STILL_GGUF_H
#define STILL_GGUF_H

#include "../core/common.h"
#include "../core/fileio.h"

#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC 0x46554747u  // "GGUF" read as a little-endian u32
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

// Metadata value types.
typedef enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_VALUE_TYPE_COUNT
} GgufValueType;

// ggml tensor types (the numbers of ggml.h); only these are read.
typedef enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q6_K = 14, GGML_BF16 = 30,
} GgmlType;

typedef struct GgufStr {
    const char *p;  // into the mapping, not NUL-terminated
    uint64_t len;
} GgufStr;

typedef struct GgufKV {
    char *key;
    uint32_t type;       // GgufValueType
    // Scalars: every integer type widened; floats as double; strings as a view.
    int64_t i;
    uint64_t u;
    double f;
    GgufStr str;
    // Arrays of scalars: raw little-endian elements in the mapping; arrays of strings: views.
    uint32_t arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;  // (arr_n * element size) for scalar arrays
    GgufStr *arr_str;         // (arr_n) for string arrays, else NULL
} GgufKV;

typedef struct GgufTensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];  // ne[0] is the innermost (contiguous) dimension; unused = 1
    uint32_t type;              // GgmlType
    uint64_t offset;            // relative to the data section
    size_t numel;
    size_t nbytes;
    const uint8_t *data;        // into the mapping
} GgufTensor;

typedef struct GgufFile {
    char *path;
    MappedFile map;
    uint32_t version;
    GgufKV *kv;          // (n_kv) in file order
    int n_kv;
    GgufTensor *tensors; // (n_tensors) in file order
    int n_tensors;
    size_t alignment;
    size_t data_offset;  // file offset of the data section
} GgufFile;

// 1 when path names a regular file whose first four bytes are "GGUF".
int gguf_is_file(const char *path);
// Map and parse path. On error nothing needs freeing.
Status gguf_open(const char *path, GgufFile *g, Err *e);
// Parse a buffer that outlives g (what names it in messages); g->map is left empty.
Status gguf_parse(const uint8_t *data, size_t size, const char *what, GgufFile *g, Err *e);
void gguf_close(GgufFile *g);

const GgufKV *gguf_find(const GgufFile *g, const char *key);
const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name);
// Typed getters: ST_ENOTFOUND when absent and !required (e untouched), ST_EINVAL naming the key
// when the type does not fit. Integers accept every integer type within range.
Status gguf_get_int(const GgufFile *g, const char *key, int required, int64_t *out, Err *e);
Status gguf_get_float(const GgufFile *g, const char *key, int required, double *out, Err *e);
Status gguf_get_bool(const GgufFile *g, const char *key, int required, int *out, Err *e);
// A NUL-terminated copy (caller frees).
Status gguf_get_str(const GgufFile *g, const char *key, int required, char **out, Err *e);
// An array of elem_type (any integer type for GGUF_I32 requests is not converted: exact type).
Status gguf_get_arr(const GgufFile *g, const char *key, uint32_t elem_type, int required, const GgufKV **out, Err *e);
// Integer element i of an integer array (any width).
int64_t gguf_arr_int(const GgufKV *kv, uint64_t i);

// Type table: name ("Q4_K"), elements per block and bytes per block; 0 for types not read.
const char *gguf_type_name(uint32_t type);
int gguf_type_info(uint32_t type, size_t *block_elems, size_t *block_bytes);
const char *gguf_value_type_name(uint32_t type);

// Dequantize n elements (a multiple of the type's block) of src into dst, as ggml's
// dequantize_row_* compute them (float32 arithmetic, no fused multiply-add).
void gguf_dequantize(uint32_t type, const void *src, float *dst, size_t n);

#endif
