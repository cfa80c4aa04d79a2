// metrics.h: what a training run reports: one JSON line per logging step in
// output_dir/metrics.jsonl (TRL's metric names), a progress bar with ETA on a TTY (plain lines
// otherwise) on stderr, and the loss curve drawn to an SVG at the end.
#ifndef STILL_METRICS_H
#define STILL_METRICS_H

#include "../core/common.h"
#include "../core/progress.h"

#include <cjson/cJSON.h>

typedef struct Metrics {
    char *path;        // output_dir/metrics.jsonl
    FILE *f;
    int open, write_failed;
    int lines;         // written by this run
    Progress bar;      // steps of this run (a resume's rate counts from where it started)
    int step, total;   // last drawn
    char status[128];  // "loss 2.31  reward 0.5": what the bar shows after the numbers
} Metrics;

double metrics_now(void);
// Open output_dir/metrics.jsonl. keep_until_step >= 0: keep the lines of an earlier run up to
// that step (resume) and append; < 0: start a new file.
Status metrics_open(Metrics *mt, const char *output_dir, int keep_until_step, int step0, Err *e);
void metrics_close(Metrics *mt);
// Append one JSON object as a line (flushed).
void metrics_write(Metrics *mt, const cJSON *obj);
// Progress after an optimizer step: a redrawn bar on a TTY; on other streams a plain line every
// ten seconds. status: what follows the numbers (the loss of metrics.jsonl's window...).
void metrics_progress(Metrics *mt, int step, int total, const char *status, int log_line);
// Progress inside a step: "what done/total" (micro-batches...), or the phase alone (total <= 0:
// "generating", "saving checkpoint-N"), drawn at once.
void metrics_tick(Metrics *mt, const char *what, int done, int total);
void metrics_clear_bar(Metrics *mt);
// Draw the "loss" (and "eval_loss") of a metrics.jsonl against "step" into an SVG file: round
// ticks, a dot for a single point, a legend for what is drawn only.
Status metrics_svg(const char *jsonl_path, const char *svg_path, Err *e);
// loss.svg into dir, and reward.svg (reward, eval_reward, reward_std: GRPO, RLOO) and kl.svg
// (kl_student_teacher, eval_kl_student_teacher, kl) when the run logged them.
Status metrics_plots(const char *jsonl_path, const char *dir, Err *e);

#endif
