// fileio.h: whole-file reads, read-only mappings, atomic writes (temp + fsync + rename + fsync dir).
#ifndef STILL_FILEIO_H
#define STILL_FILEIO_H

#include "common.h"

// Read a whole file; *out is NUL-terminated (len excludes the NUL). Caller frees.
Status file_read_all(const char *path, char **out, size_t *len, Err *e);

typedef struct MappedFile {
    const unsigned char *data;
    size_t size;
    int fd;
} MappedFile;

Status file_map(const char *path, MappedFile *m, Err *e);
void file_unmap(MappedFile *m);

// AtomicFile: write to "<path>.tmp.<pid>", then atomic_commit fsyncs, renames over path and
// fsyncs the directory. atomic_abort removes the temp file.
typedef struct AtomicFile {
    FILE *f;
    char *path;
    char *tmp_path;
} AtomicFile;

Status atomic_open(AtomicFile *af, const char *path, Err *e);
Status atomic_commit(AtomicFile *af, Err *e);
void atomic_abort(AtomicFile *af);
// One-shot: write len bytes to path atomically.
Status file_write_atomic(const char *path, const void *data, size_t len, Err *e);

int file_exists(const char *path);
int dir_exists(const char *path);
// mkdir -p
Status dir_create(const char *path, Err *e);
// fsync a directory (after renames inside it).
Status dir_sync(const char *path, Err *e);
// Join dir and name with one '/'. Caller frees.
char *path_join(const char *dir, const char *name);
// Copy a file atomically.
Status file_copy(const char *src, const char *dst, Err *e);
// Remove a directory tree (used for save_total_limit); errors ignored but returned.
Status dir_remove_tree(const char *path, Err *e);
// Bytes an unprivileged process may still write on the filesystem holding path (statvfs).
Status dir_free_bytes(const char *path, uint64_t *out, Err *e);
// Remove the temp files of atomic writes ("<name>.tmp.<pid>") that no running process owns, in
// dir and (depth > 0) its subdirectories. Returns how many were removed.
int dir_sweep_temp(const char *dir, int depth);
// Check that dir can be created and written (a probe file made and removed).
Status dir_check_writable(const char *dir, Err *e);
// "1.2 GiB": bytes for a message.
void fmt_bytes(char *buf, size_t n, double bytes);

#endif
