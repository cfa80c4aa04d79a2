// log.c: leveled logging to stderr.
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

// The level and rank are set once at startup; everything else is passed explicitly.
static LogLevel g_level = LOG_INFO;
static int g_rank = 0, g_world = 1;

void log_set_level(LogLevel level) { g_level = level; }
LogLevel log_get_level(void) { return g_level; }
void log_set_rank(int rank, int world) {
    g_rank = rank;
    g_world = world;
}

void log_msg(LogLevel level, const char *fmt, ...) {
    if (level > g_level) return;
    if (g_world > 1 && g_rank != 0 && level > LOG_WARN) return;  // rank 0 logs; others only warn and fail
    static const char *names[] = {"error", "warning", "", ""};
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (isatty(2)) fputs("\r\033[K", stderr);  // a progress bar on the line goes first (progress.h)
    if (g_world > 1)
        fprintf(stderr, "[rank %d] ", g_rank);
    if (level <= LOG_WARN)
        fprintf(stderr, "still: %s: %s\n", names[level], line);
    else
        fprintf(stderr, "%s\n", line);
}
