// alloc.h: checked allocation (a failed malloc aborts with file:line) and a bump arena.
#ifndef STILL_ALLOC_H
#define STILL_ALLOC_H

#include <stddef.h>

void *xmalloc_at(size_t n, const char *file, int line);
void *xcalloc_at(size_t n, size_t size, const char *file, int line);
void *xrealloc_at(void *p, size_t n, const char *file, int line);
char *xstrdup_at(const char *s, const char *file, int line);
char *xstrndup_at(const char *s, size_t n, const char *file, int line);
// 64-byte aligned; free with free().
void *xaligned_at(size_t n, const char *file, int line);

#define xmalloc(n) xmalloc_at((n), __FILE__, __LINE__)
#define xcalloc(n, s) xcalloc_at((n), (s), __FILE__, __LINE__)
#define xrealloc(p, n) xrealloc_at((p), (n), __FILE__, __LINE__)
#define xstrdup(s) xstrdup_at((s), __FILE__, __LINE__)
#define xstrndup(s, n) xstrndup_at((s), (n), __FILE__, __LINE__)
#define xaligned(n) xaligned_at((n), __FILE__, __LINE__)

// Arena: offsets carved out of one block, in 64-byte aligned pieces. Plans use it to size
// every activation buffer first (arena_reserve on a NULL base) and then to place them.
typedef struct Arena {
    char *base;    // NULL while measuring
    size_t size;   // bytes in use
    size_t cap;    // bytes available (0 while measuring)
} Arena;

void *arena_take(Arena *a, size_t bytes);

// Growable byte buffer for building strings.
typedef struct StrBuf {
    char *data;
    size_t len, cap;
} StrBuf;

void sb_append(StrBuf *sb, const char *s, size_t n);
void sb_puts(StrBuf *sb, const char *s);
void sb_printf(StrBuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_putc(StrBuf *sb, char c);
void sb_free(StrBuf *sb);
// Detach the NUL-terminated string (caller frees); the StrBuf is reset.
char *sb_take(StrBuf *sb);

#endif
