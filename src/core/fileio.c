// fileio.c: whole-file reads, mmap, atomic writes.
#include "fileio.h"

#include "alloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

Status file_read_all(const char *path, char **out, size_t *len, Err *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(e, errno == ENOENT ? ST_ENOTFOUND : ST_EIO, "%s: cannot open: %s", path, strerror(errno));
    StrBuf sb = {0};
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sb_append(&sb, buf, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        sb_free(&sb);
        return err_set(e, ST_EIO, "%s: read error", path);
    }
    if (len) *len = sb.len;
    *out = sb_take(&sb);
    return ST_OK;
}

Status file_map(const char *path, MappedFile *m, Err *e) {
    memset(m, 0, sizeof *m);
    m->fd = -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return err_set(e, errno == ENOENT ? ST_ENOTFOUND : ST_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return err_set(e, ST_EIO, "%s: cannot stat: %s", path, strerror(errno));
    }
    m->size = (size_t)st.st_size;
    m->fd = fd;
    if (m->size == 0) {
        m->data = NULL;
        return ST_OK;
    }
    void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        m->fd = -1;
        return err_set(e, ST_EIO, "%s: cannot mmap: %s", path, strerror(errno));
    }
    m->data = p;
    return ST_OK;
}

void file_unmap(MappedFile *m) {
    if (m->data) munmap((void *)m->data, m->size);
    if (m->fd >= 0) close(m->fd);
    m->data = NULL;
    m->fd = -1;
}

Status atomic_open(AtomicFile *af, const char *path, Err *e) {
    memset(af, 0, sizeof *af);
    af->path = xstrdup(path);
    StrBuf sb = {0};
    sb_printf(&sb, "%s.tmp.%d", path, (int)getpid());
    af->tmp_path = sb_take(&sb);
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
        Status st = err_set(e, ST_EIO, "%s: cannot create: %s", af->tmp_path, strerror(errno));
        free(af->path);
        free(af->tmp_path);
        memset(af, 0, sizeof *af);
        return st;
    }
    return ST_OK;
}

static char *dir_of(const char *path) {
    char *copy = xstrdup(path);
    char *d = xstrdup(dirname(copy));
    free(copy);
    return d;
}

Status atomic_commit(AtomicFile *af, Err *e) {
    Status st = ST_OK;
    if (fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0)
        st = err_set(e, ST_EIO, "%s: write failed: %s", af->path, strerror(errno ? errno : EIO));
    if (fclose(af->f) != 0 && st == ST_OK)
        st = err_set(e, ST_EIO, "%s: close failed: %s", af->tmp_path, strerror(errno));
    af->f = NULL;
    if (st == ST_OK && rename(af->tmp_path, af->path) != 0)
        st = err_set(e, ST_EIO, "%s: rename failed: %s", af->path, strerror(errno));
    if (st != ST_OK) {
        unlink(af->tmp_path);
    } else {
        char *d = dir_of(af->path);
        st = dir_sync(d, e);
        free(d);
    }
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
    return st;
}

void atomic_abort(AtomicFile *af) {
    if (af->f) fclose(af->f);
    if (af->tmp_path) unlink(af->tmp_path);
    free(af->path);
    free(af->tmp_path);
    memset(af, 0, sizeof *af);
}

Status file_write_atomic(const char *path, const void *data, size_t len, Err *e) {
    AtomicFile af;
    TRY(atomic_open(&af, path, e));
    if (len && fwrite(data, 1, len, af.f) != len) {
        int err = errno;
        atomic_abort(&af);
        return err_set(e, ST_EIO, "%s: write failed: %s", path, strerror(err));
    }
    return atomic_commit(&af, e);
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

Status dir_create(const char *path, Err *e) {
    char *p = xstrdup(path);
    size_t n = strlen(p);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] == '/' || p[i] == '\0') {
            char c = p[i];
            p[i] = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                Status st = err_set(e, ST_EIO, "%s: cannot create directory: %s", p, strerror(errno));
                free(p);
                return st;
            }
            p[i] = c;
        }
    }
    free(p);
    if (!dir_exists(path)) return err_set(e, ST_EIO, "%s: exists and is not a directory", path);
    return ST_OK;
}

Status dir_sync(const char *path, Err *e) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return err_set(e, ST_EIO, "%s: cannot open directory: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0 && errno != EINVAL) return err_set(e, ST_EIO, "%s: fsync failed: %s", path, strerror(errno));
    return ST_OK;
}

char *path_join(const char *dir, const char *name) {
    StrBuf sb = {0};
    size_t n = strlen(dir);
    sb_puts(&sb, dir);
    if (n && dir[n - 1] != '/') sb_putc(&sb, '/');
    sb_puts(&sb, name);
    return sb_take(&sb);
}

// Through a 1 MiB buffer: copying an 11 MB tokenizer.json into every checkpoint holds no copy of it.
Status file_copy(const char *src, const char *dst, Err *e) {
    FILE *in = fopen(src, "rb");
    if (!in) return err_set(e, errno == ENOENT ? ST_ENOTFOUND : ST_EIO, "%s: cannot open: %s", src, strerror(errno));
    AtomicFile af;
    Status st = atomic_open(&af, dst, e);
    if (st != ST_OK) {
        fclose(in);
        return st;
    }
    enum { BUF = 1 << 20 };
    char *buf = xmalloc(BUF);
    size_t n;
    while (st == ST_OK && (n = fread(buf, 1, BUF, in)) > 0)
        if (fwrite(buf, 1, n, af.f) != n) st = err_set(e, ST_EIO, "%s: write failed: %s", dst, strerror(errno ? errno : EIO));
    if (st == ST_OK && ferror(in)) st = err_set(e, ST_EIO, "%s: read error", src);
    free(buf);
    fclose(in);
    if (st != ST_OK) {
        atomic_abort(&af);
        return st;
    }
    return atomic_commit(&af, e);
}

Status dir_remove_tree(const char *path, Err *e) {
    DIR *d = opendir(path);
    if (!d) return err_set(e, ST_EIO, "%s: cannot open directory: %s", path, strerror(errno));
    struct dirent *de;
    Status st = ST_OK;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *p = path_join(path, de->d_name);
        struct stat sst;
        if (lstat(p, &sst) == 0 && S_ISDIR(sst.st_mode)) {
            Status s2 = dir_remove_tree(p, e);
            if (s2 != ST_OK) st = s2;
        } else if (unlink(p) != 0) {
            st = err_set(e, ST_EIO, "%s: cannot remove: %s", p, strerror(errno));
        }
        free(p);
    }
    closedir(d);
    if (rmdir(path) != 0) st = err_set(e, ST_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return st;
}

Status dir_free_bytes(const char *path, uint64_t *out, Err *e) {
    struct statvfs sv;
    if (statvfs(path, &sv) != 0) return err_set(e, ST_EIO, "%s: cannot read free space: %s", path, strerror(errno));
    *out = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    return ST_OK;
}

// "<name>.tmp.<pid>" with a pid that is not a running process (nor this one).
static int stale_temp(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t) return 0;
    const char *p = t + 5;
    if (!*p) return 0;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9') return 0;
    long pid = strtol(p, NULL, 10);
    if (pid <= 0 || pid == (long)getpid()) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int dir_sweep_temp(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *p = path_join(dir, de->d_name);
        struct stat sst;
        if (lstat(p, &sst) == 0) {
            if (S_ISDIR(sst.st_mode) && depth > 0) n += dir_sweep_temp(p, depth - 1);
            else if (S_ISREG(sst.st_mode) && stale_temp(de->d_name) && unlink(p) == 0) n++;
        }
        free(p);
    }
    closedir(d);
    return n;
}

Status dir_check_writable(const char *dir, Err *e) {
    TRY(dir_create(dir, e));
    StrBuf sb = {0};
    sb_printf(&sb, "%s/.still-write-check.tmp.%d", dir, (int)getpid());
    char *p = sb_take(&sb);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    Status st = ST_OK;
    if (fd < 0 || write(fd, "ok\n", 3) != 3)
        st = err_set(e, ST_EIO, "%s is not writable: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(p);
    free(p);
    return st;
}

void fmt_bytes(char *buf, size_t n, double b) {
    static const char *u[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    int k = 0;
    while (b >= 1024 && k < 4) b /= 1024, k++;
    if (k == 0) snprintf(buf, n, "%.0f bytes", b);
    else snprintf(buf, n, "%.1f %s", b, u[k]);
}
