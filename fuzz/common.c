// common.c: helpers the fuzz targets share (fuzz.h).
#include "fuzz.h"

#include "core/alloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[512];

// The directory holds only the flat files targets write.
static void remove_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *f;
    while (d && (f = readdir(d))) {
        if (f->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", tmpdir, f->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

const char *fuzz_tmpdir(void) {
    char *dir = tmpdir;
    if (!dir[0]) {
        // tmpfs when there is one: targets rewrite their files on every input.
        const char *t = getenv("TMPDIR");
        if (!t || !*t) t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof tmpdir, "%s/still-fuzz-XXXXXX", t);
        CHECK_MSG(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
        atexit(remove_tmpdir);
    }
    return dir;
}

void fuzz_write_file(const char *dir, const char *name, const void *data, size_t size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK_MSG(fd >= 0, "open %s: %s", path, strerror(errno));
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        CHECK_MSG(n > 0, "write %s: %s", path, strerror(errno));
        p += n;
        size -= (size_t)n;
    }
    close(fd);
}

char *fuzz_strndup(const uint8_t *data, size_t size) {
    char *s = xmalloc(size + 1);
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

const char *fuzz_root_path(const char *rel) {
    static char buf[4][1024];
    static int slot;
    const char *root = getenv(FUZZ_ENV_ROOT);
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", root && *root ? root : ".", rel);
    return b;
}

void fuzz_check_status(const char *target, Status st, const Err *e) {
    if (st < ST_OK || st > ST_ERUNTIME) {
        fprintf(stderr, "fuzz_%s: unknown status %d\n", target, (int)st);
        abort();
    }
    if (st != ST_OK && (!e->msg[0] || strnlen(e->msg, sizeof e->msg) == sizeof e->msg)) {
        fprintf(stderr, "fuzz_%s: status %s without a message\n", target, status_name(st));
        abort();
    }
}
