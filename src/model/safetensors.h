// safetensors.h: reading (single file or sharded with model.safetensors.index.json, mmap) and
// writing (what transformers loads: "__metadata__": {"format": "pt"}, contiguous data laid out
// and listed as the safetensors crate does -- F32, then BF16, then F16, by name within a dtype --
// header padded to 8 bytes, so identical tensors give byte-identical files; written atomically).
#ifndef STILL_SAFETENSORS_H
#define STILL_SAFETENSORS_H

#include "../core/common.h"
#include "../core/dtype.h"
#include "../core/fileio.h"

#define ST_MAX_DIMS 8

typedef struct StTensor {
    char *name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    const void *data;   // into the mapping
    size_t nbytes;
    int file_index;     // which shard
} StTensor;

typedef struct StSet {
    StTensor *tensors;  // (n_tensors), sorted by name
    int n_tensors;
    MappedFile *files;  // (n_files) shards
    char **file_paths;
    int n_files;
    void **owned;       // (n_owned) aligned copies of tensors whose bytes are misaligned in the file
    int n_owned;
} StSet;

// Open one .safetensors file, or a directory holding model.safetensors or a sharded
// model.safetensors.index.json. Every header is validated: truncated file, header length past
// end of file, bad JSON, unknown dtype, offsets out of range or overlapping, shape/size
// mismatch, duplicate names. Messages name the file and the tensor.
Status st_open(const char *path, StSet *set, Err *e);
const StTensor *st_find(const StSet *set, const char *name);
// Bytes [begin, begin + n) of a tensor have been copied (converted) and are not read again: drop
// their pages of the mapping from the resident set, so weights are not resident twice while a
// model loads (nothing for a tensor held as an aligned copy).
void st_release(const StSet *set, const StTensor *t, size_t begin, size_t n);
void st_close(StSet *set);

typedef struct StWriteTensor {
    const char *name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;   // host memory, nbytes = numel * dtype_size
} StWriteTensor;

// Write tensors (any order; laid out as above) to path atomically. metadata: extra
// string pairs for "__metadata__" besides "format": "pt" (may be NULL).
Status st_write(const char *path, const StWriteTensor *tensors, int n, const char *const *metadata_kv, int n_kv,
                Err *e);
// The same with data from a callback instead of StWriteTensor.data: fill(ctx, i, begin, count,
// dst) writes elements [begin, begin + count) of tensors[i] (in its dtype) into dst. Tensors go
// out piece by piece (8 MiB at a time), so saving never holds a second copy of what it writes.
typedef Status (*StFillFn)(void *ctx, int i, size_t begin, size_t count, void *dst, Err *e);
Status st_write_stream(const char *path, const StWriteTensor *tensors, int n, StFillFn fill, void *ctx,
                       const char *const *metadata_kv, int n_kv, Err *e);

#endif
