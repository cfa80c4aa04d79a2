// meminfo.c: available memory from /proc and cgroups; size parsing.
#include "meminfo.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t read_meminfo_kb(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0, klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            kb = strtoull(line + klen + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

static size_t read_u64_file(const char *path, int *ok) {
    FILE *f = fopen(path, "r");
    *ok = 0;
    if (!f) return 0;
    char buf[64];
    size_t v = 0;
    if (fgets(buf, sizeof buf, f) && isdigit((unsigned char)buf[0])) {
        v = strtoull(buf, NULL, 10);
        *ok = 1;
    }
    fclose(f);
    return v;
}

size_t mem_available(void) {
    size_t avail = read_meminfo_kb("MemAvailable") * 1024;
    int ok1, ok2;
    size_t max = read_u64_file("/sys/fs/cgroup/memory.max", &ok1), cur = read_u64_file("/sys/fs/cgroup/memory.current", &ok2);
    if (ok1 && ok2 && max > cur) {
        size_t left = max - cur;
        if (!avail || left < avail) avail = left;
    }
    return avail;
}

size_t mem_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    return n == 2 ? (size_t)resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

size_t mem_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            kb = strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

void mem_release_mapped(const void *p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = ((uintptr_t)p + page - 1) / page * page, end = ((uintptr_t)p + n) / page * page;
    if (end > b) madvise((void *)b, end - b, MADV_DONTNEED);  // advice only: a failure changes nothing
}

int mem_parse_size(const char *s, size_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    while (*end == ' ') end++;
    double mult = 1;
    if (*end) {
        static const struct { const char *suffix; double mult; } units[] = {
            {"B", 1},         {"K", 1024.0},        {"KB", 1e3},  {"KIB", 1024.0},        {"M", 1048576.0},
            {"MB", 1e6},      {"MIB", 1048576.0},   {"G", 1073741824.0}, {"GB", 1e9}, {"GIB", 1073741824.0},
            {"T", 1099511627776.0}, {"TB", 1e12}, {"TIB", 1099511627776.0},
        };
        int found = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (!strcasecmp(end, units[i].suffix)) mult = units[i].mult, found = 1;
        if (!found) return -1;
    }
    *out = (size_t)(v * mult);
    return 0;
}

const char *mem_fmt(size_t bytes, char *buf, size_t n) {
    if (bytes >= ((size_t)1 << 30)) snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

Status mem_check(size_t need, size_t max_memory, const char *what, Err *e) {
    char a[32], b[32], c[32], d[32];
    if (max_memory > 0) {
        size_t rss = mem_rss();
        if (size_add(rss, need) > max_memory)
            return err_set(e, ST_ENOMEM, "%s needs %s, but --max_memory %s leaves %s (the process already holds %s)",
                           what, mem_fmt(need, a, sizeof a), mem_fmt(max_memory, b, sizeof b),
                           mem_fmt(max_memory > rss ? max_memory - rss : 0, c, sizeof c), mem_fmt(rss, d, sizeof d));
        return ST_OK;
    }
    size_t avail = mem_available();
    if (avail && need > avail)
        return err_set(e, ST_ENOMEM, "%s needs %s, but the machine has only %s available; use a smaller batch or "
                                     "sequence, --dtype bfloat16 for frozen weights, or a machine with more memory",
                       what, mem_fmt(need, a, sizeof a), mem_fmt(avail, b, sizeof b));
    return ST_OK;
}
