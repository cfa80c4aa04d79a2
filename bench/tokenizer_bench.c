// tokenizer_bench.c: encode throughput of one tokenizer on a file, one thread, line by line
// (the way the transformers.js side is timed). Prints one JSON line.
//   tokenizer_bench TOKENIZER_DIR FILE [REPEAT]
#include "core/fileio.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tokenizer_bench TOKENIZER_DIR FILE [REPEAT]\n");
        return 2;
    }
    int repeat = argc > 3 ? atoi(argv[3]) : 1;
    Err e = {0};
    Tokenizer *tok;
    double t0 = now();
    if (tokenizer_load(argv[1], &tok, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    double load_s = now() - t0;
    char *text;
    size_t len;
    if (file_read_all(argv[2], &text, &len, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    TokenIds ids = {0};
    size_t tokens = 0;
    double best = 1e30;
    for (int r = 0; r < repeat; r++) {
        tokens = 0;
        double t1 = now();
        for (char *p = text, *nl; p < text + len; p = nl + 1) {
            nl = memchr(p, '\n', (size_t)(text + len - p));
            if (!nl) nl = text + len;
            ids.n = 0;
            if (tokenizer_encode(tok, p, (size_t)(nl - p), 0, &ids, &e) != ST_OK) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            tokens += ids.n;
        }
        double s = now() - t1;
        if (s < best) best = s;
    }
    printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": %.2f, \"load_seconds\": %.3f}\n", len, tokens,
           best, len / 1e6 / best, load_s);
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
    free(text);
    return 0;
}
