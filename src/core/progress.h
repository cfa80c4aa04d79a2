// progress.h: what a person waiting sees on stderr. On a terminal one line redrawn in place --
// label, a bar, done/total, rate, elapsed and ETA, and a short status (loss, reward...) -- at most
// ten times a second; log lines clear it first (log.c). On other streams a plain line when ten
// seconds have passed since the last one (and at progress_end), so logs stay short.
#ifndef STILL_PROGRESS_H
#define STILL_PROGRESS_H

typedef struct Progress {
    const char *label;   // "sft", "generate", "eval", "load"...
    const char *unit;    // "steps", "prompts", "tensors": the rate's unit
    int tty;             // stderr is a terminal
    int quiet;           // draw nothing (another rank, or --log_level error)
    double t0, last;     // start, last drawn (s, monotonic)
    long done0;          // done at start (a resumed run's rate counts its own work only)
    int drawn;           // a bar is on screen
} Progress;

double progress_now(void);
void progress_begin(Progress *p, const char *label, const char *unit, long done0);
// done of total (total <= 0: unknown); status: a short text after the numbers (may be NULL);
// force: draw now (off a terminal too).
void progress_update(Progress *p, long done, long total, const char *status, int force);
// Clear the bar (a terminal) before printing something else.
void progress_clear(Progress *p);
// The last line: on a terminal the bar is cleared; elsewhere one plain line with the totals.
void progress_end(Progress *p, long done, long total, const char *status);
// GenConfig.on_progress for a Progress (user): rows done of the call, the decode step in the status.
void progress_gen_rows(void *user, int rows_done, int rows_total, int step);
// Three significant digits without an exponent for 0.001 <= |x| < 1e6 ("1.23", "45.6", "78900").
void fmt_sig3(char *buf, unsigned n, double x);

#endif
