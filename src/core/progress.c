// progress.c: the progress bar / plain progress lines (see progress.h).
#include "progress.h"

#include "log.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void fmt_sig3(char *buf, unsigned n, double x) {
    if (!isfinite(x)) {
        snprintf(buf, n, "%g", x);
        return;
    }
    double a = fabs(x);
    if (a == 0) snprintf(buf, n, "0");
    else if (a >= 1e6 || a < 1e-3) snprintf(buf, n, "%.3g", x);
    else {
        int digits = 2 - (int)floor(log10(a));  // decimals that leave three significant digits
        if (digits < 0) {
            double p = pow(10, -digits);
            snprintf(buf, n, "%.0f", round(x / p) * p);
        } else {
            snprintf(buf, n, "%.*f", digits, x);
        }
    }
}

static void fmt_dur(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

void progress_begin(Progress *p, const char *label, const char *unit, long done0) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->unit = unit;
    p->tty = isatty(2);
    p->quiet = log_get_level() < LOG_INFO;
    p->t0 = p->last = progress_now();
    p->done0 = done0;
}

static void draw(Progress *p, long done, long total, const char *status, int final) {
    double now = progress_now(), el = now - p->t0;
    long run = done - p->done0;
    double rate = el > 0 ? run / el : 0;
    double eta = run > 0 && total > 0 ? el / run * (double)(total - done) : NAN;
    char se[32], sl[32], sr[32];
    fmt_dur(se, sizeof se, el);
    fmt_dur(sl, sizeof sl, eta);
    if (rate >= 1 || rate == 0) fmt_sig3(sr, sizeof sr, rate);
    else fmt_sig3(sr, sizeof sr, 1 / rate);
    const char *per = rate >= 1 || rate == 0 ? "/s" : " s each";
    char counts[64];
    if (total > 0) snprintf(counts, sizeof counts, "%ld/%ld", done, total);
    else snprintf(counts, sizeof counts, "%ld", done);
    if (p->tty && !final) {
        char bar[32] = "";
        if (total > 0) {
            int w = 20, fill = (int)((double)w * (double)done / (double)total);
            for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
            bar[w] = 0;
        }
        fprintf(stderr, "\r\033[K%s %s%s%s %s %s, %s%s %s%s%s%s", p->label, total > 0 ? "[" : "", bar,
                total > 0 ? "]" : "", counts, p->unit, sr, per, se, isfinite(eta) ? " ETA " : "", isfinite(eta) ? sl : "",
                status && *status ? "  " : "");
        if (status && *status) fputs(status, stderr);
        fflush(stderr);
        p->drawn = 1;
    } else if (!p->tty) {
        fprintf(stderr, "%s: %s %s, %s%s, %s elapsed%s%s%s%s\n", p->label, counts, p->unit, sr, per, se,
                isfinite(eta) && !final ? ", ETA " : "", isfinite(eta) && !final ? sl : "", status && *status ? "; " : "",
                status ? status : "");
    }
    p->last = now;
}

void progress_update(Progress *p, long done, long total, const char *status, int force) {
    if (p->quiet) return;
    double now = progress_now();
    if (p->tty ? (force || now - p->last >= 0.1) : (force || now - p->last >= 10.0)) draw(p, done, total, status, 0);
}

void progress_clear(Progress *p) {
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->drawn = 0;
    }
}

void progress_end(Progress *p, long done, long total, const char *status) {
    if (p->quiet) return;
    progress_clear(p);
    if (!p->tty && progress_now() - p->t0 >= 2.0) draw(p, done, total, status, 1);
}

void progress_gen_rows(void *user, int rows_done, int rows_total, int step) {
    char st[48] = "";
    if (step >= 0) snprintf(st, sizeof st, "decode step %d", step + 1);
    progress_update(user, rows_done, rows_total, st, 0);
}
