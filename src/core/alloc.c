// alloc.c: checked allocation, arena, string buffer.
#include "alloc.h"
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die_oom(size_t n, const char *file, int line) {
    fprintf(stderr, "still: out of memory allocating %zu bytes at %s:%d\n", n, file, line);
    abort();
}

void *xmalloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) die_oom(n, file, line);
    return p;
}

void *xcalloc_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die_oom(n * size, file, line);
    return p;
}

void *xrealloc_at(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) die_oom(n, file, line);
    return q;
}

char *xstrdup_at(const char *s, const char *file, int line) {
    size_t n = strlen(s);
    char *p = xmalloc_at(n + 1, file, line);
    memcpy(p, s, n + 1);
    return p;
}

char *xstrndup_at(const char *s, size_t n, const char *file, int line) {
    char *p = xmalloc_at(n + 1, file, line);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void *xaligned_at(size_t n, const char *file, int line) {
    void *p = NULL;
    size_t rounded = (n + 63) / 64 * 64;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) die_oom(n, file, line);
    return p;
}

void *arena_take(Arena *a, size_t bytes) {
    size_t off = size_mul(size_add(a->size, 63) / 64, 64);
    a->size = size_add(off, bytes);  // SIZE_MAX once it does not fit: only measuring can get there
    if (!a->base) return NULL;
    if (a->size > a->cap) {
        fprintf(stderr, "still: internal error: arena overflow (%zu > %zu)\n", a->size, a->cap);
        abort();
    }
    return a->base + off;
}

static void sb_reserve(StrBuf *sb, size_t extra) {
    if (sb->len + extra + 1 <= sb->cap) return;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1) cap *= 2;
    sb->data = xrealloc(sb->data, cap);
    sb->cap = cap;
}

void sb_append(StrBuf *sb, const char *s, size_t n) {
    sb_reserve(sb, n);
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void sb_puts(StrBuf *sb, const char *s) { sb_append(sb, s, strlen(s)); }

void sb_putc(StrBuf *sb, char c) { sb_append(sb, &c, 1); }

void sb_printf(StrBuf *sb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sb_reserve(sb, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void sb_free(StrBuf *sb) {
    free(sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
}

char *sb_take(StrBuf *sb) {
    if (!sb->data) return xstrdup("");
    char *p = sb->data;
    sb->data = NULL;
    sb->len = sb->cap = 0;
    return p;
}
