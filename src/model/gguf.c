// gguf.c: parsing a GGUF header (metadata, tensor directory) with every length checked.
//
// Layout: u32 magic, u32 version, u64 tensor_count, u64 kv_count, kv_count pairs (string key,
// u32 value type, value), tensor_count infos (string name, u32 n_dims, u64 ne[n_dims], u32 type,
// u64 offset), padding to general.alignment, then the data section. Strings are u64 length +
// bytes; arrays are u32 element type + u64 count + elements.
#include "gguf.h"

#include "../core/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Rd {
    const uint8_t *p;
    size_t size, pos;
    const char *what;
    Err *e;
} Rd;

static Status truncated(Rd *r, const char *field) {
    return err_set(r->e, ST_EINVAL, "%s: truncated GGUF file: %s at byte %zu runs past the end (%zu bytes)", r->what,
                   field, r->pos, r->size);
}

static Status rd_bytes(Rd *r, size_t n, const uint8_t **out, const char *field) {
    if (n > r->size - r->pos) return truncated(r, field);
    *out = r->p + r->pos;
    r->pos += n;
    return ST_OK;
}

static Status rd_u32(Rd *r, uint32_t *v, const char *field) {
    const uint8_t *b = NULL;
    TRY(rd_bytes(r, 4, &b, field));
    memcpy(v, b, 4);
    return ST_OK;
}

static Status rd_u64(Rd *r, uint64_t *v, const char *field) {
    const uint8_t *b = NULL;
    TRY(rd_bytes(r, 8, &b, field));
    memcpy(v, b, 8);
    return ST_OK;
}

static Status rd_str(Rd *r, GgufStr *s, const char *field) {
    uint64_t len;
    TRY(rd_u64(r, &len, field));
    if (len > r->size - r->pos) return truncated(r, field);
    s->p = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return ST_OK;
}

static const size_t scalar_size[GGUF_VALUE_TYPE_COUNT] = {
    [GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4, [GGUF_F32] = 4,
    [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

const char *gguf_value_type_name(uint32_t type) {
    static const char *names[GGUF_VALUE_TYPE_COUNT] = {"uint8", "int8", "uint16", "int16", "uint32", "int32",
                                                       "float32", "bool", "string", "array", "uint64", "int64",
                                                       "float64"};
    return type < GGUF_VALUE_TYPE_COUNT ? names[type] : "unknown";
}

static int is_int_type(uint32_t t) {
    return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 || t == GGUF_I32 ||
           t == GGUF_U64 || t == GGUF_I64;
}

// A float32 as the double of its shortest round-tripping decimal: 1e-06f reads as 1e-06, the
// value the converter started from (config.json's numbers are decimals).
static double f32_as_decimal(float v) {
    if (!isfinite(v)) return v;
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) return strtod(buf, NULL);
    }
    return v;
}

// Widen one scalar of type t at b.
static void scalar_read(uint32_t t, const uint8_t *b, int64_t *i, uint64_t *u, double *f) {
    *i = 0, *u = 0, *f = 0;
    switch (t) {
    case GGUF_U8: case GGUF_BOOL: *u = b[0]; *i = (int64_t)*u; break;
    case GGUF_I8: *i = (int8_t)b[0]; *u = (uint64_t)*i; break;
    case GGUF_U16: { uint16_t v; memcpy(&v, b, 2); *u = v; *i = v; break; }
    case GGUF_I16: { int16_t v; memcpy(&v, b, 2); *i = v; *u = (uint64_t)v; break; }
    case GGUF_U32: { uint32_t v; memcpy(&v, b, 4); *u = v; *i = v; break; }
    case GGUF_I32: { int32_t v; memcpy(&v, b, 4); *i = v; *u = (uint64_t)v; break; }
    case GGUF_U64: { memcpy(u, b, 8); *i = (int64_t)*u; break; }
    case GGUF_I64: { memcpy(i, b, 8); *u = (uint64_t)*i; break; }
    case GGUF_F32: { float v; memcpy(&v, b, 4); *f = f32_as_decimal(v); break; }
    case GGUF_F64: memcpy(f, b, 8); break;
    default: break;
    }
    *f = (t == GGUF_F32 || t == GGUF_F64) ? *f : (t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64 ? (double)*i : (double)*u);
}

// Skip one value of type t (nested arrays allowed up to a small depth); kv, when given, is filled.
static Status rd_value(Rd *r, uint32_t t, GgufKV *kv, int depth, const char *key) {
    char field[300];
    snprintf(field, sizeof field, "the value of \"%s\"", key);
    if (t >= GGUF_VALUE_TYPE_COUNT)
        return err_set(r->e, ST_EINVAL, "%s: metadata \"%s\" has unknown value type %u (expected 0..12)", r->what, key, t);
    if (t == GGUF_STRING) {
        GgufStr s;
        TRY(rd_str(r, &s, field));
        if (kv) kv->str = s;
        return ST_OK;
    }
    if (t != GGUF_ARRAY) {
        const uint8_t *b = NULL;
        TRY(rd_bytes(r, scalar_size[t], &b, field));
        if (kv) scalar_read(t, b, &kv->i, &kv->u, &kv->f);
        return ST_OK;
    }
    if (depth >= 4) return err_set(r->e, ST_EUNSUPPORTED, "%s: metadata \"%s\": arrays nested too deeply", r->what, key);
    uint32_t et;
    uint64_t n;
    TRY(rd_u32(r, &et, field));
    TRY(rd_u64(r, &n, field));
    if (et >= GGUF_VALUE_TYPE_COUNT)
        return err_set(r->e, ST_EINVAL, "%s: metadata \"%s\": array of unknown element type %u", r->what, key, et);
    size_t left = r->size - r->pos;
    // Every element takes at least one byte (strings and arrays at least 8): a count past what
    // the file can hold is refused before anything is allocated.
    size_t min_elem = et == GGUF_STRING || et == GGUF_ARRAY ? 8 : scalar_size[et];
    if (n > left / min_elem)
        return err_set(r->e, ST_EINVAL, "%s: metadata \"%s\": array of %llu %s elements does not fit in the file",
                       r->what, key, (unsigned long long)n, gguf_value_type_name(et));
    if (kv) {
        kv->arr_type = et;
        kv->arr_n = n;
        kv->arr_data = r->p + r->pos;
    }
    if (et != GGUF_STRING && et != GGUF_ARRAY) {
        r->pos += (size_t)n * scalar_size[et];
        return ST_OK;
    }
    if (kv && et == GGUF_STRING) kv->arr_str = xmalloc((size_t)(n ? n : 1) * sizeof(GgufStr));
    for (uint64_t k = 0; k < n; k++) {
        if (et == GGUF_STRING) {
            GgufStr s;
            TRY(rd_str(r, &s, field));
            if (kv) kv->arr_str[k] = s;
        } else {
            TRY(rd_value(r, GGUF_ARRAY, NULL, depth + 1, key));
        }
    }
    return ST_OK;
}

const char *gguf_type_name(uint32_t type) {
    switch (type) {
    case GGML_F32: return "F32";
    case GGML_F16: return "F16";
    case GGML_BF16: return "BF16";
    case GGML_Q8_0: return "Q8_0";
    case GGML_Q4_0: return "Q4_0";
    case GGML_Q4_K: return "Q4_K";
    case GGML_Q6_K: return "Q6_K";
    default: return NULL;
    }
}

int gguf_type_info(uint32_t type, size_t *block_elems, size_t *block_bytes) {
    size_t be = 0, bb = 0;
    switch (type) {
    case GGML_F32: be = 1, bb = 4; break;
    case GGML_F16: case GGML_BF16: be = 1, bb = 2; break;
    case GGML_Q8_0: be = 32, bb = 2 + 32; break;
    case GGML_Q4_0: be = 32, bb = 2 + 16; break;
    case GGML_Q4_K: be = 256, bb = 2 + 2 + 12 + 128; break;
    case GGML_Q6_K: be = 256, bb = 128 + 64 + 16 + 2; break;
    default: return 0;
    }
    if (block_elems) *block_elems = be;
    if (block_bytes) *block_bytes = bb;
    return 1;
}

// Names of ggml types still does not read, for the error message.
static const char *other_type_name(uint32_t t) {
    static const char *names[] = {[3] = "Q4_1", [6] = "Q5_0", [7] = "Q5_1", [9] = "Q8_1", [10] = "Q2_K",
                                  [11] = "Q3_K", [13] = "Q5_K", [15] = "Q8_K", [16] = "IQ2_XXS", [17] = "IQ2_XS",
                                  [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S", [22] = "IQ2_S",
                                  [23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32", [27] = "I64",
                                  [28] = "F64", [29] = "IQ1_M", [34] = "TQ1_0", [35] = "TQ2_0", [39] = "MXFP4"};
    return t < ARRAY_LEN(names) ? names[t] : NULL;
}

static Status parse_tensor(Rd *r, GgufTensor *t, int index) {
    char field[64];
    snprintf(field, sizeof field, "tensor info %d", index);
    GgufStr name;
    TRY(rd_str(r, &name, field));
    if (name.len == 0 || name.len > 255 || memchr(name.p, 0, name.len))
        return err_set(r->e, ST_EINVAL, "%s: tensor info %d: name must be 1 to 255 bytes without NUL", r->what, index);
    t->name = xstrndup(name.p, name.len);
    TRY(rd_u32(r, &t->n_dims, field));
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return err_set(r->e, ST_EINVAL, "%s: tensor \"%s\" has %u dimensions (expected 1 to %d)", r->what, t->name,
                       t->n_dims, GGUF_MAX_DIMS);
    size_t numel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        TRY(rd_u64(r, &v, field));
        if (v == 0 || v > ((uint64_t)1 << 40) || numel > ((size_t)1 << 46) / v)
            return err_set(r->e, ST_EINVAL, "%s: tensor \"%s\": dimension %u is %llu (expected 1 .. 2^40, at most 2^46 elements in all)",
                           r->what, t->name, d, (unsigned long long)v);
        t->ne[d] = (int64_t)v;
        numel *= (size_t)v;
    }
    t->numel = numel;
    TRY(rd_u32(r, &t->type, field));
    TRY(rd_u64(r, &t->offset, field));
    size_t be, bb;
    if (!gguf_type_info(t->type, &be, &bb)) {
        const char *other = other_type_name(t->type);
        if (other)
            return err_set(r->e, ST_EUNSUPPORTED, "%s: tensor \"%s\" has type %s, which is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)",
                           r->what, t->name, other);
        return err_set(r->e, ST_EINVAL, "%s: tensor \"%s\" has unknown ggml type %u", r->what, t->name, t->type);
    }
    if (t->ne[0] % (int64_t)be)
        return err_set(r->e, ST_EINVAL, "%s: tensor \"%s\" of type %s: its first dimension %lld is not a multiple of the block size %zu",
                       r->what, t->name, gguf_type_name(t->type), (long long)t->ne[0], be);
    t->nbytes = numel / be * bb;
    return ST_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static Status check_layout(GgufFile *g, size_t size, Err *e) {
    size_t data_size = size - g->data_offset;
    for (int i = 0; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return err_set(e, ST_EINVAL, "%s: tensor \"%s\": data offset %llu is not a multiple of the alignment %zu",
                           g->path, t->name, (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return err_set(e, ST_EINVAL, "%s: tensor \"%s\": data [%llu, %llu) lies outside the data section (%zu bytes)",
                           g->path, t->name, (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes),
                           data_size);
    }
    if (g->n_tensors < 2) return ST_OK;
    GgufTensor **by = xmalloc((size_t)g->n_tensors * sizeof *by);
    for (int i = 0; i < g->n_tensors; i++) by[i] = &g->tensors[i];
    qsort(by, (size_t)g->n_tensors, sizeof *by, cmp_offset);
    Status st = ST_OK;
    for (int i = 1; i < g->n_tensors && st == ST_OK; i++)
        if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset)
            st = err_set(e, ST_EINVAL, "%s: tensors \"%s\" and \"%s\" overlap in the data section", g->path,
                         by[i - 1]->name, by[i]->name);
    free(by);
    return st;
}

Status gguf_parse(const uint8_t *data, size_t size, const char *what, GgufFile *g, Err *e) {
    memset(g, 0, sizeof *g);
    g->path = xstrdup(what);
    g->map.fd = -1;
    Rd r = {data, size, 0, g->path, e};
    uint32_t magic;
    uint64_t n_tensors, n_kv;
    Status st = ST_OK;
    if (size < 4 || (memcpy(&magic, data, 4), magic != GGUF_MAGIC)) {
        st = err_set(e, ST_EINVAL, "%s: not a GGUF file (the first 4 bytes are not \"GGUF\")", g->path);
        goto fail;
    }
    r.pos = 4;
    if ((st = rd_u32(&r, &g->version, "the version")) != ST_OK) goto fail;
    if (g->version != 2 && g->version != 3) {
        st = g->version == 1 ? err_set(e, ST_EUNSUPPORTED, "%s: GGUF version 1 is not supported (versions 2 and 3)", g->path)
             : (g->version & 0xffff) == 0 ? err_set(e, ST_EUNSUPPORTED, "%s: a big-endian GGUF file is not supported", g->path)
                                          : err_set(e, ST_EINVAL, "%s: unknown GGUF version %u (expected 2 or 3)", g->path, g->version);
        goto fail;
    }
    if ((st = rd_u64(&r, &n_tensors, "the tensor count")) != ST_OK) goto fail;
    if ((st = rd_u64(&r, &n_kv, "the metadata count")) != ST_OK) goto fail;
    // A key/value pair takes at least 12 bytes and a tensor info at least 28.
    if (n_kv > (size - r.pos) / 12 || n_tensors > (size - r.pos) / 28 || n_kv > 1000000 || n_tensors > 1000000) {
        st = err_set(e, ST_EINVAL, "%s: header claims %llu metadata pairs and %llu tensors, more than the file (%zu bytes) can "
                     "hold: truncated or corrupt GGUF file", g->path, (unsigned long long)n_kv, (unsigned long long)n_tensors, size);
        goto fail;
    }
    g->kv = xcalloc((size_t)n_kv + 1, sizeof *g->kv);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        GgufKV *kv = &g->kv[g->n_kv];
        char field[64];
        snprintf(field, sizeof field, "metadata pair %llu", (unsigned long long)i);
        GgufStr key;
        if ((st = rd_str(&r, &key, field)) != ST_OK) goto fail;
        if (key.len == 0 || key.len > 65535 || memchr(key.p, 0, key.len)) {
            st = err_set(e, ST_EINVAL, "%s: metadata pair %llu: key must be 1 to 65535 bytes without NUL", g->path,
                         (unsigned long long)i);
            goto fail;
        }
        kv->key = xstrndup(key.p, key.len);
        g->n_kv++;
        if (gguf_find(g, kv->key) != kv) {
            st = err_set(e, ST_EINVAL, "%s: metadata key \"%s\" appears twice", g->path, kv->key);
            goto fail;
        }
        if ((st = rd_u32(&r, &kv->type, field)) != ST_OK) goto fail;
        if ((st = rd_value(&r, kv->type, kv, 0, kv->key)) != ST_OK) goto fail;
    }
    const GgufKV *al = gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_U32 || al->u == 0 || (al->u & (al->u - 1)) || al->u > 65536) {
            st = err_set(e, ST_EINVAL, "%s: general.alignment must be a uint32 power of two up to 65536", g->path);
            goto fail;
        }
        g->alignment = (size_t)al->u;
    }
    g->tensors = xcalloc((size_t)n_tensors + 1, sizeof *g->tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors++;
        if ((st = parse_tensor(&r, &g->tensors[i], (int)i)) != ST_OK) goto fail;
        if (gguf_find_tensor(g, g->tensors[i].name) != &g->tensors[i]) {
            st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" appears twice", g->path, g->tensors[i].name);
            goto fail;
        }
    }
    size_t off = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors && off > size) {
        st = err_set(e, ST_EINVAL, "%s: truncated GGUF file: the data section would start at byte %zu, past the end (%zu bytes)",
                     g->path, off, size);
        goto fail;
    }
    g->data_offset = MIN(off, size);
    if ((st = check_layout(g, size, e)) != ST_OK) goto fail;
    for (int i = 0; i < g->n_tensors; i++) g->tensors[i].data = data + g->data_offset + g->tensors[i].offset;
    return ST_OK;
fail:
    gguf_close(g);
    return st;
}

Status gguf_open(const char *path, GgufFile *g, Err *e) {
    MappedFile m;
    memset(g, 0, sizeof *g);
    g->map.fd = -1;  // gguf_close on a failed open closes nothing
    TRY(file_map(path, &m, e));
    Status st = gguf_parse(m.data, m.size, path, g, e);
    if (st != ST_OK) {
        file_unmap(&m);
        return st;
    }
    g->map = m;
    return ST_OK;
}

void gguf_close(GgufFile *g) {
    for (int i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].arr_str);
    }
    free(g->kv);
    for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    if (g->map.fd >= 0) file_unmap(&g->map);
    free(g->path);
    memset(g, 0, sizeof *g);
    g->map.fd = -1;
}

int gguf_is_file(const char *path) {
    if (!path || dir_exists(path)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint32_t magic = 0;
    size_t n = fread(&magic, 1, 4, f);
    fclose(f);
    return n == 4 && magic == GGUF_MAGIC;
}

const GgufKV *gguf_find(const GgufFile *g, const char *key) {
    for (int i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const GgufTensor *gguf_find_tensor(const GgufFile *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name && !strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static Status absent(const GgufFile *g, const char *key, int required, Err *e) {
    if (required) return err_set(e, ST_EINVAL, "%s: missing metadata key \"%s\"", g->path, key);
    return ST_ENOTFOUND;
}

static Status wrong_type(const GgufFile *g, const GgufKV *kv, const char *want, Err *e) {
    return err_set(e, ST_EINVAL, "%s: metadata \"%s\" is %s, expected %s", g->path, kv->key,
                   gguf_value_type_name(kv->type), want);
}

Status gguf_get_int(const GgufFile *g, const char *key, int required, int64_t *out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return absent(g, key, required, e);
    if (!is_int_type(kv->type)) return wrong_type(g, kv, "an integer", e);
    if (kv->type == GGUF_U64 && kv->u > (uint64_t)INT64_MAX) return wrong_type(g, kv, "an integer below 2^63", e);
    *out = kv->i;
    return ST_OK;
}

Status gguf_get_float(const GgufFile *g, const char *key, int required, double *out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return absent(g, key, required, e);
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64 && !is_int_type(kv->type)) return wrong_type(g, kv, "a number", e);
    *out = kv->f;
    return ST_OK;
}

Status gguf_get_bool(const GgufFile *g, const char *key, int required, int *out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return absent(g, key, required, e);
    if (kv->type != GGUF_BOOL) return wrong_type(g, kv, "a bool", e);
    *out = kv->u != 0;
    return ST_OK;
}

Status gguf_get_str(const GgufFile *g, const char *key, int required, char **out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return absent(g, key, required, e);
    if (kv->type != GGUF_STRING) return wrong_type(g, kv, "a string", e);
    if (memchr(kv->str.p, 0, kv->str.len)) return err_set(e, ST_EINVAL, "%s: metadata \"%s\" holds a NUL byte", g->path, key);
    *out = xstrndup(kv->str.p, kv->str.len);
    return ST_OK;
}

Status gguf_get_arr(const GgufFile *g, const char *key, uint32_t elem_type, int required, const GgufKV **out, Err *e) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return absent(g, key, required, e);
    int ok = kv->type == GGUF_ARRAY &&
             (kv->arr_type == elem_type || (is_int_type(elem_type) && is_int_type(kv->arr_type)));
    if (!ok) {
        char want[64];
        snprintf(want, sizeof want, "an array of %s", gguf_value_type_name(elem_type));
        return wrong_type(g, kv, want, e);
    }
    *out = kv;
    return ST_OK;
}

int64_t gguf_arr_int(const GgufKV *kv, uint64_t i) {
    int64_t v;
    uint64_t u;
    double f;
    scalar_read(kv->arr_type, kv->arr_data + (size_t)i * scalar_size[kv->arr_type], &v, &u, &f);
    return v;
}
