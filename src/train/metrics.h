// metrics.h: what a training run reports: one JSON line per logging step in
// output_dir/metrics.jsonl (TRL's metric names), a progress bar with ETA on a TTY (plain lines
// otherwise) on stderr, and the loss curve drawn to an SVG at the end.
#ifndef STILL_METRICS_H
#define STILL_METRICS_H

#include "../core/common.h"

#include <cjson/cJSON.h>

typedef struct Metrics {
    char *path;        // output_dir/metrics.jsonl
    FILE *f;
    int tty;           // stderr is a terminal: redraw one progress line
    double t0;         // wall clock at start (s)
    int step0;         // step the run (or resume) started from
    int bar_drawn;
} Metrics;

double metrics_now(void);
// Open output_dir/metrics.jsonl. keep_until_step >= 0: keep the lines of an earlier run up to
// that step (resume) and append; < 0: start a new file.
Status metrics_open(Metrics *mt, const char *output_dir, int keep_until_step, int step0, Err *e);
void metrics_close(Metrics *mt);
// Append one JSON object as a line (flushed).
void metrics_write(Metrics *mt, const cJSON *obj);
// Progress: a redrawn bar on a TTY; on other streams a plain line (only when `log_line`).
void metrics_progress(Metrics *mt, int step, int total, double loss, int log_line);
// Draw the "loss" (and "eval_loss") of a metrics.jsonl against "step" into an SVG file.
Status metrics_svg(const char *jsonl_path, const char *svg_path, Err *e);

#endif
