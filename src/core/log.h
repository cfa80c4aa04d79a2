// log.h: leveled logging to stderr. The log level is the only global mutable state in still.
#ifndef STILL_LOG_H
#define STILL_LOG_H

typedef enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 } LogLevel;

void log_set_level(LogLevel level);
LogLevel log_get_level(void);
// log_set_rank: set once at startup when distributed; lines then carry "[rank R]", and ranks
// other than 0 print only warnings and errors.
void log_set_rank(int rank, int world);
void log_msg(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
