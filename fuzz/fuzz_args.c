// fuzz_args.c: the input is a command line, one argument per line (a NUL byte also ends an
// argument). A --config argument is skipped here, since it names a file to read
// (fuzz_args_config covers config files).
#include "fuzz.h"

#include "args_specs.h"
#include "core/alloc.h"
#include "core/log.h"

#include <string.h>

#define FUZZ_MAX_ARGS 256

Status fuzz_args(const uint8_t *data, size_t size, Err *e) {
    log_set_level(LOG_ERROR);
    char *buf = fuzz_strndup(data, size);
    char *argv[FUZZ_MAX_ARGS + 1];
    int argc = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && argc < FUZZ_MAX_ARGS; i++) {
        if (i < size && buf[i] != '\n' && buf[i] != '\0') continue;
        buf[i] = '\0';
        argv[argc++] = buf + start;
        start = i + 1;
    }
    argv[argc] = NULL;
    Status st = ST_OK;
    for (int i = 0; i < argc; i++) {
        char name[16];
        snprintf(name, sizeof name, "%s", argv[i]);
        for (char *q = name; *q; q++)
            if (*q == '-') *q = '_';
        if (!strcmp(name, "__config") || !strncmp(name, "__config=", 9)) goto done;
    }
    Args a;
    st = args_parse(&a, "fuzz", fuzz_arg_specs, argc, argv, e);
    if (st == ST_OK) fuzz_args_read_all(&a);
    args_free(&a);
done:
    free(buf);
    return st;
}

FUZZ_ENTRY(args)
