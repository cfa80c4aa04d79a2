// safetensors.c: read (mmap, strict validation) and write (deterministic, atomic) safetensors.
//
// Format: u64 little-endian header length N, N bytes of JSON
// {"__metadata__": {str: str}, name: {"dtype": D, "shape": [..], "data_offsets": [b, e]}, ...},
// then the data; offsets are relative to the first byte after the header.
#include "safetensors.h"

#include "../core/meminfo.h"

#include "../core/alloc.h"
#include "../core/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

// The Rust safetensors crate refuses headers above 100 MB; so do we.
#define ST_MAX_HEADER ((uint64_t)100000000)

static const char *const other_dtypes[] = {"BOOL", "U8",      "I8",       "I16",      "U16",      "I32",      "U32",
                                           "I64",  "U64",     "F64",      "F8_E4M3",  "F8_E5M2",  "F8_E8M0",  "F4",
                                           "F6_E2M3", "F6_E3M2", "C64"};

static Status parse_dtype_name(const char *s, const char *file, const char *tensor, DType *out, Err *e) {
    if (!strcmp(s, "F32")) return *out = DT_F32, ST_OK;
    if (!strcmp(s, "BF16")) return *out = DT_BF16, ST_OK;
    if (!strcmp(s, "F16")) return *out = DT_F16, ST_OK;
    for (size_t i = 0; i < ARRAY_LEN(other_dtypes); i++)
        if (!strcmp(s, other_dtypes[i]))
            return err_set(e, ST_EUNSUPPORTED, "%s: tensor \"%s\" has dtype %s, which is not supported (F32, BF16, F16)",
                           file, tensor, s);
    return err_set(e, ST_EINVAL, "%s: tensor \"%s\" has unknown dtype \"%s\" (expected F32, BF16 or F16)", file, tensor,
                   s);
}

// A JSON number that is a non-negative integer up to 2^53.
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

// One header entry -> t (name and data filled by the caller). data_size: bytes after the header.
static Status parse_entry(const cJSON *v, const char *file, size_t data_size, StTensor *t, size_t *begin, Err *e) {
    const char *name = v->string;
    if (!cJSON_IsObject(v)) return err_set(e, ST_EINVAL, "%s: tensor \"%s\": expected an object", file, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    if (!dt) return err_set(e, ST_EINVAL, "%s: tensor \"%s\": missing field \"dtype\"", file, name);
    if (!sh) return err_set(e, ST_EINVAL, "%s: tensor \"%s\": missing field \"shape\"", file, name);
    if (!off) return err_set(e, ST_EINVAL, "%s: tensor \"%s\": missing field \"data_offsets\"", file, name);
    if (!cJSON_IsString(dt)) return err_set(e, ST_EINVAL, "%s: tensor \"%s\": \"dtype\" must be a string", file, name);
    TRY(parse_dtype_name(dt->valuestring, file, name, &t->dtype, e));
    if (!cJSON_IsArray(sh))
        return err_set(e, ST_EINVAL, "%s: tensor \"%s\": \"shape\" must be a list of integers", file, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS)
        return err_set(e, ST_EUNSUPPORTED, "%s: tensor \"%s\" has %d dimensions (at most %d)", file, name, nd,
                       ST_MAX_DIMS);
    t->ndim = nd;
    size_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_uint(cJSON_GetArrayItem(sh, i), &d))
            return err_set(e, ST_EINVAL, "%s: tensor \"%s\": \"shape\" must be a list of non-negative integers", file,
                           name);
        t->shape[i] = (int64_t)d;
        if (d && numel > SIZE_MAX / d) overflow = 1;
        numel *= d;
    }
    if (overflow || numel > SIZE_MAX / 4)
        return err_set(e, ST_EINVAL, "%s: tensor \"%s\": shape is too large", file, name);
    t->numel = numel;
    t->nbytes = numel * dtype_size(t->dtype);
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(off, 1), &en))
        return err_set(e, ST_EINVAL, "%s: tensor \"%s\": \"data_offsets\" must be two non-negative integers", file,
                       name);
    if (b > en)
        return err_set(e, ST_EINVAL, "%s: tensor \"%s\": data_offsets [%llu, %llu] begin after they end", file, name,
                       (unsigned long long)b, (unsigned long long)en);
    if (en > data_size)
        return err_set(e, ST_EINVAL,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] out of range (the data section has %zu bytes)",
                       file, name, (unsigned long long)b, (unsigned long long)en, data_size);
    if (en - b != t->nbytes)
        return err_set(e, ST_EINVAL,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, but shape and dtype %s need %zu",
                       file, name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b),
                       dtype_st_name(t->dtype), t->nbytes);
    *begin = (size_t)b;
    return ST_OK;
}

typedef struct Range {
    size_t begin, end;
    int idx;
} Range;

static int cmp_range(const void *a, const void *b) {
    const Range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

static void free_tensors(StTensor *ts, int n) {
    for (int i = 0; i < n; i++) free(ts[i].name);
    free(ts);
}

// Parse and validate one mapped file's header; appends its tensors to *ts (n, cap).
static Status parse_file(const MappedFile *m, const char *file, int file_index, StTensor **ts, int *n, int *cap,
                         Err *e) {
    if (m->size < 8)
        return err_set(e, ST_EINVAL, "%s: file is %zu bytes, too short for a safetensors header (8-byte length)", file,
                       m->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | m->data[i];
    if (hlen > ST_MAX_HEADER)
        return err_set(e, ST_EINVAL, "%s: header length %llu is larger than the 100 MB limit (not a safetensors file?)",
                       file, (unsigned long long)hlen);
    if (hlen > m->size - 8)
        return err_set(e, ST_EINVAL, "%s: header length %llu runs past the end of the file (%zu bytes)", file,
                       (unsigned long long)hlen, m->size);
    const char *hdr = (const char *)m->data + 8;
    if (hlen < 2 || hdr[0] != '{')
        return err_set(e, ST_EINVAL, "%s: header is not a JSON object", file);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root) {
        size_t off = end ? (size_t)(end - hdr) : 0;
        return err_set(e, ST_EINVAL, "%s: header is not valid JSON (near byte %zu of the header)", file, off);
    }
    Status st = ST_OK;
    for (const char *p = end; p < hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
            st = err_set(e, ST_EINVAL, "%s: header has trailing bytes after the JSON object", file);
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        st = err_set(e, ST_EINVAL, "%s: header is not a JSON object", file);
        goto done;
    }
    const size_t data_size = m->size - 8 - (size_t)hlen;
    const unsigned char *data = m->data + 8 + hlen;
    int first = *n, count = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        if (!strcmp(v->string, "__metadata__")) {
            if (!cJSON_IsObject(v)) {
                st = err_set(e, ST_EINVAL, "%s: \"__metadata__\" must be an object of strings", file);
                goto done;
            }
            const cJSON *mv;
            cJSON_ArrayForEach(mv, v) {
                if (!cJSON_IsString(mv)) {
                    st = err_set(e, ST_EINVAL, "%s: \"__metadata__\" value \"%s\" must be a string", file, mv->string);
                    goto done;
                }
            }
            continue;
        }
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *ts = xrealloc(*ts, (size_t)*cap * sizeof **ts);
        }
        StTensor *t = &(*ts)[*n];
        memset(t, 0, sizeof *t);
        size_t begin = 0;
        st = parse_entry(v, file, data_size, t, &begin, e);
        if (st != ST_OK) goto done;
        t->name = xstrdup(v->string);
        t->data = data + begin;
        t->file_index = file_index;
        (*n)++;
        count++;
    }
    // Overlap: sort this file's non-empty ranges by start.
    Range *r = xmalloc((size_t)(count ? count : 1) * sizeof *r);
    int nr = 0;
    for (int i = first; i < *n; i++) {
        StTensor *t = &(*ts)[i];
        if (!t->nbytes) continue;
        size_t b = (size_t)((const unsigned char *)t->data - data);
        r[nr++] = (Range){b, b + t->nbytes, i};
    }
    qsort(r, (size_t)nr, sizeof *r, cmp_range);
    for (int i = 1; i < nr; i++) {
        if (r[i].begin < r[i - 1].end) {
            st = err_set(e, ST_EINVAL, "%s: tensors \"%s\" [%zu, %zu] and \"%s\" [%zu, %zu] overlap", file,
                         (*ts)[r[i - 1].idx].name, r[i - 1].begin, r[i - 1].end, (*ts)[r[i].idx].name, r[i].begin,
                         r[i].end);
            break;
        }
    }
    free(r);
done:
    cJSON_Delete(root);
    return st;
}

// Tensors whose data is not aligned to their element size (files from old writers without
// header padding) would be read through misaligned pointers; those get an aligned copy.
static void align_tensors(StSet *set) {
    for (int i = 0; i < set->n_tensors; i++) {
        StTensor *t = &set->tensors[i];
        if ((uintptr_t)t->data % dtype_size(t->dtype) == 0) continue;
        void *copy = xaligned(t->nbytes);
        memcpy(copy, t->data, t->nbytes);
        t->data = copy;
        set->owned = xrealloc(set->owned, (size_t)(set->n_owned + 1) * sizeof *set->owned);
        set->owned[set->n_owned++] = copy;
    }
}

static Status add_file(StSet *set, const char *path, Err *e) {
    int fi = set->n_files;
    set->files = xrealloc(set->files, (size_t)(fi + 1) * sizeof *set->files);
    set->file_paths = xrealloc(set->file_paths, (size_t)(fi + 1) * sizeof *set->file_paths);
    TRY(file_map(path, &set->files[fi], e));
    set->file_paths[fi] = xstrdup(path);
    set->n_files++;
    return ST_OK;
}

static Status finish(StSet *set, Err *e) {
    qsort(set->tensors, (size_t)set->n_tensors, sizeof *set->tensors, cmp_tensor);
    for (int i = 1; i < set->n_tensors; i++) {
        if (!strcmp(set->tensors[i].name, set->tensors[i - 1].name)) {
            const StTensor *a = &set->tensors[i - 1], *b = &set->tensors[i];
            if (a->file_index == b->file_index)
                return err_set(e, ST_EINVAL, "%s: tensor \"%s\" appears twice in the header",
                               set->file_paths[a->file_index], a->name);
            return err_set(e, ST_EINVAL, "tensor \"%s\" appears in two shards: %s and %s", a->name,
                           set->file_paths[a->file_index], set->file_paths[b->file_index]);
        }
    }
    align_tensors(set);
    return ST_OK;
}

static Status open_single(const char *path, StSet *set, Err *e) {
    TRY(add_file(set, path, e));
    int cap = 0;
    TRY(parse_file(&set->files[0], path, 0, &set->tensors, &set->n_tensors, &cap, e));
    return finish(set, e);
}

static int is_index_path(const char *path) {
    size_t n = strlen(path);
    return n >= 11 && !strcmp(path + n - 11, ".index.json");
}

static int bad_shard_name(const char *s) {
    if (!*s || s[0] == '/') return 1;
    for (const char *p = s; *p; p++) {
        if (p[0] == '.' && p[1] == '.' && (p == s || p[-1] == '/') && (p[2] == '/' || p[2] == '\0')) return 1;
    }
    return 0;
}

static Status open_index(const char *index_path, StSet *set, Err *e) {
    cJSON *root;
    TRY(json_parse_file(index_path, &root, e));
    Status st = ST_OK;
    char *dir = xstrdup(index_path);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else dir[0] = '\0';
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const cJSON *v;
    int cap = 0;
    if (!cJSON_IsObject(root) || !wm || !cJSON_IsObject(wm)) {
        st = err_set(e, ST_EINVAL, "%s: missing field \"weight_map\" (an object of tensor name -> shard file)",
                     index_path);
        goto done;
    }
    cJSON_ArrayForEach(v, wm) {
        if (!cJSON_IsString(v) || bad_shard_name(v->valuestring)) {
            st = err_set(e, ST_EINVAL, "%s: weight_map[\"%s\"] must name a shard file in the same directory",
                         index_path, v->string);
            goto done;
        }
        int fi = -1;
        for (int i = 0; i < set->n_files; i++)
            if (!strcmp(set->file_paths[i] + strlen(dir), v->valuestring)) fi = i;
        if (fi >= 0) continue;
        StrBuf sb = {0};
        sb_printf(&sb, "%s%s", dir, v->valuestring);
        char *shard = sb_take(&sb);
        st = add_file(set, shard, e);
        if (st != ST_OK) {
            if (st == ST_ENOTFOUND)
                err_set(e, ST_ENOTFOUND, "%s: shard \"%s\" (for tensor \"%s\") is missing: %s not found", index_path,
                        v->valuestring, v->string, shard);
            free(shard);
            goto done;
        }
        free(shard);
        fi = set->n_files - 1;
        st = parse_file(&set->files[fi], set->file_paths[fi], fi, &set->tensors, &set->n_tensors, &cap, e);
        if (st != ST_OK) goto done;
    }
    st = finish(set, e);
    if (st != ST_OK) goto done;
    // Every mapped tensor must be in the shard the index names.
    cJSON_ArrayForEach(v, wm) {
        const StTensor *t = st_find(set, v->string);
        const char *want = v->valuestring;
        if (!t) {
            st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" is mapped to shard \"%s\" but is not in it", index_path,
                         v->string, want);
            goto done;
        }
        const char *have = set->file_paths[t->file_index] + strlen(dir);
        if (strcmp(have, want)) {
            st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" is mapped to shard \"%s\" but is in \"%s\"", index_path,
                         v->string, want, have);
            goto done;
        }
    }
done:
    free(dir);
    cJSON_Delete(root);
    return st;
}

Status st_open(const char *path, StSet *set, Err *e) {
    memset(set, 0, sizeof *set);
    Status st;
    if (dir_exists(path)) {
        char *single = path_join(path, "model.safetensors");
        char *index = path_join(path, "model.safetensors.index.json");
        if (file_exists(single)) st = open_single(single, set, e);
        else if (file_exists(index)) st = open_index(index, set, e);
        else
            st = err_set(e, ST_ENOTFOUND, "%s: no model.safetensors or model.safetensors.index.json in this directory",
                         path);
        free(single);
        free(index);
    } else if (is_index_path(path)) {
        st = open_index(path, set, e);
    } else {
        st = open_single(path, set, e);
    }
    if (st != ST_OK) st_close(set);
    return st;
}

const StTensor *st_find(const StSet *set, const char *name) {
    int lo = 0, hi = set->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(set->tensors[mid].name, name);
        if (!c) return &set->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

void st_release(const StSet *set, const StTensor *t, size_t begin, size_t n) {
    const MappedFile *f = &set->files[t->file_index];
    const unsigned char *p = t->data;
    if (p >= f->data && p + t->nbytes <= f->data + f->size && begin + n <= t->nbytes)  // in the mapping
        mem_release_mapped(p + begin, n);
}

void st_close(StSet *set) {
    free_tensors(set->tensors, set->n_tensors);
    for (int i = 0; i < set->n_files; i++) {
        file_unmap(&set->files[i]);
        free(set->file_paths[i]);
    }
    for (int i = 0; i < set->n_owned; i++) free(set->owned[i]);
    free(set->owned);
    free(set->files);
    free(set->file_paths);
    memset(set, 0, sizeof *set);
}

// ------------------------------------------------------------------------------------ writing

static void json_escape(StrBuf *sb, const char *s) {
    sb_putc(sb, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            sb_putc(sb, '\\');
            sb_putc(sb, (char)*p);
        } else if (*p < 0x20) {
            sb_printf(sb, "\\u%04x", *p);
        } else {
            sb_putc(sb, (char)*p);
        }
    }
    sb_putc(sb, '"');
}

typedef struct WriteOrder {
    const StWriteTensor *t;
    size_t nbytes, begin;
    int index;  // in the caller's array
} WriteOrder;

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

// Rank of a dtype in the Rust crate's layout order (F32, then BF16, then F16).
static int dtype_rank(DType t) { return t == DT_F32 ? 0 : t == DT_BF16 ? 1 : 2; }

// Layout order, as the safetensors crate writes it: wider dtypes first, then by name, so every
// tensor starts aligned to its element size (the header is padded to 8) without gaps, which
// readers reject. The header lists tensors in the same order; for a single-dtype checkpoint
// that is name order.
static int cmp_write(const void *a, const void *b) {
    const WriteOrder *x = a, *y = b;
    int rx = dtype_rank(x->t->dtype), ry = dtype_rank(y->t->dtype);
    if (rx != ry) return rx < ry ? -1 : 1;
    return strcmp(x->t->name, y->t->name);
}

// Tensor data goes out in pieces of at most this many bytes when it is filled by a callback.
#define ST_STREAM_CHUNK (8u << 20)

// One tensor's bytes: straight from t->data, or (fill) piece by piece through buf.
static int write_data(FILE *f, const StWriteTensor *t, int index, size_t nbytes, StFillFn fill, void *ctx, void *buf,
                      Status *st, Err *e) {
    if (!fill) return fwrite(t->data, 1, nbytes, f) == nbytes;
    size_t es = dtype_size(t->dtype), per = MAX((size_t)1, ST_STREAM_CHUNK / es), numel = nbytes / es;
    for (size_t b = 0; b < numel; b += per) {
        size_t k = MIN(per, numel - b);
        *st = fill(ctx, index, b, k, buf, e);
        if (*st != ST_OK) return 0;
        if (fwrite(buf, es, k, f) != k) return 0;
    }
    return 1;
}

Status st_write(const char *path, const StWriteTensor *tensors, int n, const char *const *metadata_kv, int n_kv,
                Err *e) {
    return st_write_stream(path, tensors, n, NULL, NULL, metadata_kv, n_kv, e);
}

Status st_write_stream(const char *path, const StWriteTensor *tensors, int n, StFillFn fill, void *ctx,
                       const char *const *metadata_kv, int n_kv, Err *e) {
    WriteOrder *w = xcalloc((size_t)(n ? n : 1), sizeof *w);
    StrBuf hdr = {0};
    Status st = ST_OK;
    for (int i = 0; i < n; i++) {
        const StWriteTensor *t = &tensors[i];
        if (!t->name || !t->name[0] || !strcmp(t->name, "__metadata__")) {
            st = err_set(e, ST_EINVAL, "%s: tensor %d has an empty or reserved name", path, i);
            goto done;
        }
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) {
            st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" has %d dimensions (0..%d)", path, t->name, t->ndim,
                         ST_MAX_DIMS);
            goto done;
        }
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) {
                st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" has a negative dimension", path, t->name);
                goto done;
            }
            numel *= (size_t)t->shape[d];
        }
        w[i] = (WriteOrder){t, numel * dtype_size(t->dtype), 0, i};
        if (w[i].nbytes && !t->data && !fill) {
            st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" has no data", path, t->name);
            goto done;
        }
    }
    qsort(w, (size_t)n, sizeof *w, cmp_write);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        w[i].begin = off;
        off += w[i].nbytes;
    }
    // The same name under two dtypes lands in two groups: check names on their own.
    const char **names = xmalloc((size_t)(n ? n : 1) * sizeof *names);
    for (int i = 0; i < n; i++) names[i] = w[i].t->name;
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 1; i < n && st == ST_OK; i++)
        if (!strcmp(names[i], names[i - 1])) st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" given twice", path, names[i]);
    free(names);
    if (st != ST_OK) goto done;
    int has_format = 0;
    for (int k = 0; k < n_kv; k++) has_format |= !strcmp(metadata_kv[2 * k], "format");
    sb_puts(&hdr, "{\"__metadata__\":{");
    if (!has_format) sb_puts(&hdr, "\"format\":\"pt\"");
    for (int k = 0; k < n_kv; k++) {
        if (k || !has_format) sb_putc(&hdr, ',');
        json_escape(&hdr, metadata_kv[2 * k]);
        sb_putc(&hdr, ':');
        json_escape(&hdr, metadata_kv[2 * k + 1]);
    }
    sb_putc(&hdr, '}');
    for (int i = 0; i < n; i++) {
        const StWriteTensor *t = w[i].t;
        sb_putc(&hdr, ',');
        json_escape(&hdr, t->name);
        sb_printf(&hdr, ":{\"dtype\":\"%s\",\"shape\":[", dtype_st_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) sb_printf(&hdr, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        sb_printf(&hdr, "],\"data_offsets\":[%zu,%zu]}", w[i].begin, w[i].begin + w[i].nbytes);
    }
    sb_putc(&hdr, '}');
    while (hdr.len % 8) sb_putc(&hdr, ' ');

    AtomicFile af;
    st = atomic_open(&af, path, e);
    if (st != ST_OK) goto done;
    unsigned char len8[8];
    uint64_t hl = hdr.len;
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hl >> (8 * i));
    int ok = fwrite(len8, 1, 8, af.f) == 8 && fwrite(hdr.data, 1, hdr.len, af.f) == hdr.len;
    void *buf = fill ? xmalloc(ST_STREAM_CHUNK) : NULL;
    for (int i = 0; ok && i < n; i++)
        if (w[i].nbytes) ok = write_data(af.f, w[i].t, w[i].index, w[i].nbytes, fill, ctx, buf, &st, e);
    free(buf);
    if (!ok) {
        int err = errno;
        atomic_abort(&af);
        if (st == ST_OK) st = err_set(e, ST_EIO, "%s: write failed: %s", path, strerror(err ? err : EIO));
        goto done;
    }
    st = atomic_commit(&af, e);
done:
    sb_free(&hdr);
    free(w);
    return st;
}
