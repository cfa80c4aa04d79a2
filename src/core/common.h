// common.h: status codes, the error record every fallible call fills, CHECK macros.
//
// Two tiers of errors (STYLE.md rule 5):
//  - input errors (files, JSON, flags, text) are returned: a function returns ST_OK or an
//    error code and writes a message naming the file / line / tensor into an Err;
//  - impossible-in-a-correct-program failures (malloc, CUDA, MPI) go through CHECK, which
//    prints file:line and aborts.
#ifndef STILL_COMMON_H
#define STILL_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
    ST_OK = 0,
    ST_EINVAL = 1,      // bad input: file contents, flags, text
    ST_EIO = 2,         // open/read/write failed
    ST_ENOMEM = 3,      // a memory estimate or allocation refused
    ST_EUNSUPPORTED = 4,// valid input that still does not handle yet
    ST_ENOTFOUND = 5,   // a file, tensor, key or model that is not there
    ST_ERUNTIME = 6,    // a failure while running (NaN loss, timeout, child died)
    ST_EINTR = 7,       // stopped by SIGINT / SIGTERM (after saving what resuming needs)
    ST_EUSAGE = 8,      // flag values that cannot go together (a usage error: exit 2, as a bad flag)
} Status;

#define ERR_MSG_MAX 2048

typedef struct Err {
    Status code;
    char msg[ERR_MSG_MAX];
} Err;

// err_set: record an error and return its code, so callers write `return err_set(e, ST_EINVAL, ...)`.
// e may be NULL (the message is then dropped).
Status err_set(Err *e, Status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// err_prefix: put context in front of an existing message ("model.safetensors: " + msg); returns e->code.
Status err_prefix(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(Err *e);
const char *status_name(Status s);

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "still: internal error at %s:%d: CHECK(%s) failed\n", __FILE__,    \
                    __LINE__, #cond);                                                          \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                   \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "still: internal error at %s:%d: CHECK(%s) failed: ", __FILE__,    \
                    __LINE__, #cond);                                                          \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

// TRY: propagate a non-OK status from a call that already filled the Err.
#define TRY(call)                                                                              \
    do {                                                                                       \
        Status try_st_ = (call);                                                               \
        if (try_st_ != ST_OK) return try_st_;                                                  \
    } while (0)

// Size arithmetic that cannot wrap: the product or sum, or SIZE_MAX when it does not fit in size_t
// (a memory check then refuses it).
static inline size_t size_mul(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
static inline size_t size_add(size_t a, size_t b) {
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
// n rounded up to a multiple of m (m <= 1: n itself): a padded length (--pad_to_multiple_of)
static inline int round_up(int n, int m) { return m > 1 ? (n + m - 1) / m * m : n; }
#define UNUSED(x) (void)(x)

#endif
