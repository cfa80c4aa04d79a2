// fuzz_args_config.c: the input is the text of a --config file (JSON when it starts with '{',
// else YAML), parsed by args_parse under a short command line that also sets flags.
#include "fuzz.h"

#include "args_specs.h"
#include "core/log.h"

#include <stdio.h>

Status fuzz_args_config(const uint8_t *data, size_t size, Err *e) {
    log_set_level(LOG_ERROR);
    const char *dir = fuzz_tmpdir();
    fuzz_write_file(dir, "config.yaml", data, size);
    char path[1100];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    char *argv[] = {"--config", path, "--reward", "len", "--no_do_sample", "pos", NULL};
    Args a;
    Status st = args_parse(&a, "fuzz", fuzz_arg_specs, 6, argv, e);
    if (st == ST_OK) fuzz_args_read_all(&a);
    args_free(&a);
    return st;
}

FUZZ_ENTRY(args_config)
