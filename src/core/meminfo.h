// meminfo.h: how much memory the machine can still give, so that still refuses a model or a
// plan it cannot hold with a message giving both numbers, instead of being OOM-killed mid-run.
#ifndef STILL_MEMINFO_H
#define STILL_MEMINFO_H

#include "common.h"

// Bytes the process may still allocate: MemAvailable from /proc/meminfo, lowered by a cgroup v2
// memory.max limit when one applies. 0 when unknown.
size_t mem_available(void);
// Resident set size of this process (bytes), 0 when unknown.
size_t mem_rss(void);
// Peak resident set size of this process so far (VmHWM of /proc/self/status, bytes), 0 when unknown.
size_t mem_peak_rss(void);
// Tell the kernel that [p, p + n) of a read-only file mapping is not needed now: its pages leave
// the resident set (whole pages inside the range only; a later read faults them in again).
void mem_release_mapped(const void *p, size_t n);
// Parse "8GiB", "500MB", "1.5G", "1073741824" (bytes). Returns 0 on success.
int mem_parse_size(const char *s, size_t *out);
// Refuse an allocation of `need` bytes for `what` when it would not fit: into max_memory (a
// budget for the whole process, 0 = none) given the current RSS, or into what the machine has
// available. The message names what, both numbers and the flag to change.
Status mem_check(size_t need, size_t max_memory, const char *what, Err *e);
// "1.5 GiB", "300.0 MiB" into buf.
const char *mem_fmt(size_t bytes, char *buf, size_t n);

#endif
