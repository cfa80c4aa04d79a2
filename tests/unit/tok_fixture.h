// tok_fixture.h: helpers shared by the tokenizer tests: unpack the committed reference
// tokenizers (tests/data/tokenizer/NAME/tokenizer.json.gz) into the build directory.
#ifndef STILL_TOK_FIXTURE_H
#define STILL_TOK_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Directory holding NAME's tokenizer.json + tokenizer_config.json, or NULL (message printed).
static inline const char *tok_fixture_dir(const char *name) {
    static char dir[4][512];
    static int slot = 0;
    const char *build = getenv("STILL_BUILD") ? getenv("STILL_BUILD") : "build";
    char *d = dir[slot++ & 3];
    snprintf(d, 512, "%s/tokdata/%s", build, name);
    char json[700], cmd[2400];
    snprintf(json, sizeof json, "%s/tokenizer.json", d);
    struct stat st_gz, st_json;
    char gz[600];
    snprintf(gz, sizeof gz, "tests/data/tokenizer/%s/tokenizer.json.gz", name);
    if (stat(gz, &st_gz) != 0) {
        printf("FAIL fixture_%s: %s is missing\n", name, gz);
        return NULL;
    }
    if (stat(json, &st_json) != 0 || st_json.st_mtime < st_gz.st_mtime) {
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s' && gzip -dc '%s' > '%s.tmp.%d' && mv '%s.tmp.%d' '%s' && "
                 "cp tests/data/tokenizer/%s/tokenizer_config.json '%s/'",
                 d, gz, json, (int)getpid(), json, (int)getpid(), json, name, d);
        if (system(cmd) != 0) {
            printf("FAIL fixture_%s: could not unpack %s\n", name, gz);
            return NULL;
        }
    }
    return d;
}

#endif
