// test.h: the minimal test harness every C test uses. Each test prints "ok NAME" or
// "FAIL NAME: file:line: what"; tests/run.sh counts those lines. main() returns non-zero if
// anything failed, so a crash or an early exit is a failure too.
#ifndef STILL_TEST_H
#define STILL_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_total = 0, test_passed_total = 0, test_current_failed = 0;
static const char *test_current_name = "";

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (!test_current_failed)                                                              \
                printf("FAIL %s: %s:%d: %s\n", test_current_name, __FILE__, __LINE__, #cond);      \
            test_current_failed = 1;                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT_MSG(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (!test_current_failed) {                                                            \
                printf("FAIL %s: %s:%d: %s: ", test_current_name, __FILE__, __LINE__, #cond);      \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
            }                                                                                      \
            test_current_failed = 1;                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT_STR_CONTAINS(hay, needle)                                                           \
    EXPECT_MSG((hay) && strstr((hay), (needle)), "\"%s\" does not contain \"%s\"", (hay) ? (hay) : "(null)", (needle))

static inline void test_run(const char *name, void (*fn)(void)) {
    test_current_name = name;
    test_current_failed = 0;
    fn();
    if (test_current_failed) {
        test_failed_total++;
    } else {
        test_passed_total++;
        printf("ok %s\n", name);
    }
    fflush(stdout);
}

#define RUN(fn) test_run(#fn, fn)
#define TEST_MAIN_END() return test_failed_total ? 1 : (test_passed_total ? 0 : 1)

// Relative error of a against reference b with an absolute floor.
static inline double test_rel_err(double a, double b, double floor_) {
    return fabs(a - b) / fmax(fabs(b), floor_);
}

#endif
