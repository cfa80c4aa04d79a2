// gguf_write.c: the GGUF writer (ggml docs/gguf.md, version 3).
#include "gguf_write.h"

#include "../core/fileio.h"

#include <string.h>

static void put(StrBuf *sb, const void *p, size_t n) { sb_append(sb, p, n); }

static void put_u32(StrBuf *sb, uint32_t v) { put(sb, &v, 4); }
static void put_u64(StrBuf *sb, uint64_t v) { put(sb, &v, 8); }

static void put_str(StrBuf *sb, const char *s) {
    size_t n = strlen(s);
    put_u64(sb, n);
    put(sb, s, n);
}

static void key(GgufWriter *w, const char *k, uint32_t type) {
    put_str(&w->meta, k);
    put_u32(&w->meta, type);
    w->n_kv++;
}

void gguf_writer_init(GgufWriter *w, size_t alignment) {
    memset(w, 0, sizeof *w);
    w->alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    if (w->alignment != GGUF_DEFAULT_ALIGNMENT) gguf_w_u32(w, "general.alignment", (uint32_t)w->alignment);
}

void gguf_writer_free(GgufWriter *w) {
    sb_free(&w->meta);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    memset(w, 0, sizeof *w);
}

void gguf_w_str(GgufWriter *w, const char *k, const char *v) { key(w, k, GGUF_STRING), put_str(&w->meta, v); }
void gguf_w_u32(GgufWriter *w, const char *k, uint32_t v) { key(w, k, GGUF_U32), put_u32(&w->meta, v); }
void gguf_w_i32(GgufWriter *w, const char *k, int32_t v) { key(w, k, GGUF_I32), put(&w->meta, &v, 4); }
void gguf_w_f32(GgufWriter *w, const char *k, float v) { key(w, k, GGUF_F32), put(&w->meta, &v, 4); }

void gguf_w_bool(GgufWriter *w, const char *k, int v) {
    uint8_t b = v != 0;
    key(w, k, GGUF_BOOL);
    put(&w->meta, &b, 1);
}

void gguf_w_arr_str(GgufWriter *w, const char *k, const char *const *v, size_t n) {
    key(w, k, GGUF_ARRAY);
    put_u32(&w->meta, GGUF_STRING);
    put_u64(&w->meta, n);
    for (size_t i = 0; i < n; i++) put_str(&w->meta, v[i]);
}

void gguf_w_arr_i32(GgufWriter *w, const char *k, const int32_t *v, size_t n) {
    key(w, k, GGUF_ARRAY);
    put_u32(&w->meta, GGUF_I32);
    put_u64(&w->meta, n);
    put(&w->meta, v, n * 4);
}

void gguf_w_arr_f32(GgufWriter *w, const char *k, const float *v, size_t n) {
    key(w, k, GGUF_ARRAY);
    put_u32(&w->meta, GGUF_F32);
    put_u64(&w->meta, n);
    put(&w->meta, v, n * 4);
}

void gguf_w_tensor(GgufWriter *w, const char *name, int n_dims, const int64_t *ne, uint32_t type, const void *data) {
    if (w->n_t == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = xrealloc(w->t, (size_t)w->cap * sizeof *w->t);
    }
    GgufWTensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(name);
    t->n_dims = (uint32_t)n_dims;
    size_t numel = 1, be = 1, bb = 4;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    for (int d = 0; d < n_dims; d++) numel *= (size_t)ne[d];
    CHECK_MSG(gguf_type_info(type, &be, &bb) && ne[0] % (int64_t)be == 0, "gguf_w_tensor %s: type %u, ne0 %lld", name,
              type, (long long)ne[0]);
    t->type = type;
    t->nbytes = numel / be * bb;
    t->data = data;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

Status gguf_w_write(GgufWriter *w, const char *path, GgufFillFn fill, void *ctx, Err *e) {
    StrBuf head = {0};
    put_u32(&head, GGUF_MAGIC);
    put_u32(&head, 3);
    put_u64(&head, (uint64_t)w->n_t);
    put_u64(&head, w->n_kv);
    put(&head, w->meta.data ? w->meta.data : "", w->meta.len);
    size_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        const GgufWTensor *t = &w->t[i];
        put_str(&head, t->name);
        put_u32(&head, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&head, (uint64_t)t->ne[d]);
        put_u32(&head, t->type);
        put_u64(&head, off);
        off = align_up(off + t->nbytes, w->alignment);
    }
    static const char zeros[64] = {0};
    while (head.len % w->alignment) put(&head, zeros, MIN(sizeof zeros, align_up(head.len, w->alignment) - head.len));
    AtomicFile af;
    Status st = atomic_open(&af, path, e);
    if (st != ST_OK) {
        sb_free(&head);
        return st;
    }
    int ok = fwrite(head.data, 1, head.len, af.f) == head.len;
    sb_free(&head);
    void *stage = NULL;
    size_t cap = 0;
    for (int i = 0; i < w->n_t && ok && st == ST_OK; i++) {
        const GgufWTensor *t = &w->t[i];
        const void *src = t->data;
        if (!src) {
            CHECK_MSG(fill, "gguf_w_write: tensor %s has no data and no fill callback", t->name);
            if (t->nbytes > cap) {
                free(stage);
                stage = xmalloc(cap = t->nbytes);
            }
            st = fill(ctx, i, stage, e);
            src = stage;
        }
        size_t pad = align_up(t->nbytes, w->alignment) - t->nbytes;
        if (st == ST_OK) ok = fwrite(src, 1, t->nbytes, af.f) == t->nbytes;
        while (ok && st == ST_OK && pad) {
            size_t k = MIN(pad, sizeof zeros);
            ok = fwrite(zeros, 1, k, af.f) == k;
            pad -= k;
        }
    }
    free(stage);
    if (st == ST_OK && !ok) st = err_set(e, ST_EIO, "%s: write failed", path);
    if (st != ST_OK) {
        atomic_abort(&af);
        return st;
    }
    return atomic_commit(&af, e);
}
