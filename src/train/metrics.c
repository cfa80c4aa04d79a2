// metrics.c: metrics.jsonl lines, the progress bar and the loss SVG.
#include "metrics.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double metrics_now(void) { return progress_now(); }

static int line_step(const char *line, size_t n) {
    cJSON *o = cJSON_ParseWithLength(line, n);
    int step = -1;
    const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    if (cJSON_IsNumber(s)) step = s->valueint;
    cJSON_Delete(o);
    return step;
}

Status metrics_open(Metrics *mt, const char *output_dir, int keep_until_step, int step0, Err *e) {
    memset(mt, 0, sizeof *mt);
    mt->path = path_join(output_dir, "metrics.jsonl");
    StrBuf kept = {0};
    if (keep_until_step >= 0 && file_exists(mt->path)) {
        char *text;
        size_t len;
        TRY(file_read_all(mt->path, &text, &len, e));
        for (size_t p = 0; p < len;) {
            size_t q = p;
            while (q < len && text[q] != '\n') q++;
            int s = line_step(text + p, q - p);
            if (q > p && s >= 0 && s <= keep_until_step) {
                sb_append(&kept, text + p, q - p);
                sb_putc(&kept, '\n');
            }
            p = q + 1;
        }
        free(text);
    }
    Status st = file_write_atomic(mt->path, kept.data ? kept.data : "", kept.len, e);
    sb_free(&kept);
    TRY(st);
    mt->f = fopen(mt->path, "a");
    if (!mt->f) return err_set(e, ST_EIO, "%s: cannot open for appending: %s", mt->path, strerror(errno));
    progress_begin(&mt->bar, "train", "steps", step0);
    mt->open = 1;
    return ST_OK;
}

void metrics_close(Metrics *mt) {
    if (mt->open) progress_clear(&mt->bar);
    if (mt->f) fclose(mt->f);
    free(mt->path);
    memset(mt, 0, sizeof *mt);
}

void metrics_write(Metrics *mt, const cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    mt->lines++;
    if (!mt->write_failed && (fprintf(mt->f, "%s\n", s) < 0 || fflush(mt->f) != 0)) {
        mt->write_failed = 1;  // training goes on; the message says why once
        progress_clear(&mt->bar);
        log_warn("%s: write failed: %s (metrics from here on are lost)", mt->path, strerror(errno));
    }
    free(s);
}

void metrics_progress(Metrics *mt, int step, int total, const char *status, int log_line) {
    mt->status[0] = 0;
    if (status) snprintf(mt->status, sizeof mt->status, "%s", status);
    progress_update(&mt->bar, step, total, mt->status, mt->bar.tty && log_line);
    mt->step = step, mt->total = total;
}

void metrics_tick(Metrics *mt, const char *what, int done, int total) {
    if (!mt->open) return;
    char st[160];
    if (total > 0) snprintf(st, sizeof st, "%s%s%s %d/%d", mt->status, mt->status[0] ? "  " : "", what, done, total);
    else snprintf(st, sizeof st, "%s%s%s", mt->status, mt->status[0] ? "  " : "", what);
    progress_update(&mt->bar, mt->step, mt->total, st, total <= 0);  // a new phase shows at once
}

void metrics_clear_bar(Metrics *mt) {
    if (mt->open) progress_clear(&mt->bar);
}

// ---- plots ---------------------------------------------------------------------------------

typedef struct Series {
    const char *key, *label, *color;
    double *x, *y;
    int n, cap;
} Series;

static void series_add(Series *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->x = xrealloc(s->x, (size_t)s->cap * sizeof(double));
        s->y = xrealloc(s->y, (size_t)s->cap * sizeof(double));
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

// The frame: plot area [PX0, PX1] x [PY0, PY1] in a W x H picture.
enum { W = 640, H = 400, PX0 = 72, PX1 = 620, PY0 = 36, PY1 = 340 };

// A round tick step (1, 2 or 5 times a power of ten) giving about `want` intervals over span.
static double tick_step(double span, int want) {
    double raw = span / want, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

// Axis range [lo, hi] widened to whole ticks; a single value gets a range around it.
static void axis_range(double *lo, double *hi, int want, int integer, double *step) {
    if (!(*hi > *lo)) {
        double c = *lo, pad = integer ? 1 : (fabs(c) > 0 ? fabs(c) * 0.1 : 1);
        *lo = c - pad, *hi = c + pad;
        if (integer && c >= 0 && *lo < 0) *lo = 0;
    }
    *step = tick_step(*hi - *lo, want);
    if (integer && *step < 1) *step = 1;
    *lo = floor(*lo / *step + 1e-9) * *step;
    *hi = ceil(*hi / *step - 1e-9) * *step;
}

// A tick label with the decimals its step needs ("0.25", "1500", "2e+05").
static void tick_label(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) >= 1e6 || dec > 6) snprintf(buf, n, "%g", v);
    else snprintf(buf, n, "%.*f", dec, v);
}

static double px_of(double x, double x0, double x1) { return PX0 + (PX1 - PX0) * (x - x0) / (x1 - x0); }
static double py_of(double y, double y0, double y1) { return PY1 - (PY1 - PY0) * (y - y0) / (y1 - y0); }

// A series as a polyline; with more points than pixel columns, each column keeps its first,
// lowest, highest and last point, so spikes stay visible at 10^5 points. One point: a dot.
static void draw_series(StrBuf *sb, const Series *s, double x0, double x1, double y0, double y1) {
    if (s->n == 1) {
        sb_printf(sb, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px_of(s->x[0], x0, x1),
                  py_of(s->y[0], y0, y1), s->color);
        return;
    }
    sb_printf(sb, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"",
              s->color);
    int col = -1;
    double first = 0, lo = 0, hi = 0, last = 0, cx = 0;
    for (int i = 0; i <= s->n; i++) {
        int c = i < s->n ? (int)px_of(s->x[i], x0, x1) : -2;
        if (c != col && col != -1) {
            double pts[4] = {first, lo, hi, last};
            int k = first == lo && lo == hi && hi == last ? 1 : 4;
            for (int j = 0; j < k; j++) sb_printf(sb, "%.1f,%.1f ", cx, py_of(pts[j], y0, y1));
        }
        if (i == s->n) break;
        if (c != col) col = c, first = lo = hi = s->y[i], cx = px_of(s->x[i], x0, x1);
        lo = fmin(lo, s->y[i]), hi = fmax(hi, s->y[i]), last = s->y[i];
    }
    sb_puts(sb, "\"/>\n");
}

static Status plot_svg(const char *path, const char *title, Series *ser, int ns, Err *e) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int k = 0; k < ns; k++)
        for (int i = 0; i < ser[k].n; i++) {
            x0 = fmin(x0, ser[k].x[i]), x1 = fmax(x1, ser[k].x[i]);
            y0 = fmin(y0, ser[k].y[i]), y1 = fmax(y1, ser[k].y[i]);
        }
    if (!isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    double xs, ys;
    axis_range(&x0, &x1, 6, 1, &xs);
    axis_range(&y0, &y1, 5, 0, &ys);
    StrBuf sb = {0};
    sb_printf(&sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                   "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
              W, H, W, H, W, H);
    for (double v = y0; v <= y1 + ys * 1e-6; v += ys) {
        char lab[32];
        tick_label(lab, sizeof lab, v, ys);
        double py = py_of(v, y0, y1);
        sb_printf(&sb, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", PX0, py, PX1, py);
        sb_printf(&sb, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", PX0 - 5, py + 4, lab);
    }
    for (double v = x0; v <= x1 + xs * 1e-6; v += xs) {
        char lab[32];
        tick_label(lab, sizeof lab, v, xs);
        double px = px_of(v, x0, x1);
        sb_printf(&sb, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e5e5e5\"/>\n", px, PY0, px, PY1);
        sb_printf(&sb, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", px, PY1 + 15, lab);
    }
    sb_printf(&sb, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"black\"/>\n", PX0, PY0,
              PX1 - PX0, PY1 - PY0);
    sb_printf(&sb, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (PX0 + PX1) / 2, H - 20);
    sb_printf(&sb, "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", (PX0 + PX1) / 2, title);
    int row = 0;
    for (int k = 0; k < ns; k++) {
        if (!ser[k].n) continue;
        draw_series(&sb, &ser[k], x0, x1, y0, y1);
        // legend: only what is drawn, top right inside the frame
        char lab[96];
        snprintf(lab, sizeof lab, "%s (%d point%s)", ser[k].label, ser[k].n, ser[k].n == 1 ? "" : "s");
        int ly = PY0 + 16 + 16 * row++, lx = PX1 - 8 - (int)(6.2 * (double)strlen(lab));  // about 6 px a character
        sb_printf(&sb, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx - 26,
                  ly - 4, lx - 6, ly - 4, ser[k].color);
        sb_printf(&sb, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", PX1 - 8, ly, lab);
    }
    sb_puts(&sb, "</svg>\n");
    Status st = file_write_atomic(path, sb.data, sb.len, e);
    sb_free(&sb);
    return st;
}

// Every line of a metrics.jsonl with "step" and the series' key, finite values only.
static Status read_series(const char *jsonl_path, Series *ser, int ns, Err *e) {
    char *text;
    size_t len;
    TRY(file_read_all(jsonl_path, &text, &len, e));
    for (size_t p = 0; p < len;) {
        size_t q = p;
        while (q < len && text[q] != '\n') q++;
        cJSON *o = q > p ? cJSON_ParseWithLength(text + p, q - p) : NULL;
        const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        for (int k = 0; cJSON_IsNumber(s) && k < ns; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, ser[k].key);
            if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) series_add(&ser[k], s->valuedouble, v->valuedouble);
        }
        cJSON_Delete(o);
        p = q + 1;
    }
    free(text);
    return ST_OK;
}

static void series_free(Series *ser, int ns) {
    for (int k = 0; k < ns; k++) free(ser[k].x), free(ser[k].y), ser[k].x = ser[k].y = NULL, ser[k].n = ser[k].cap = 0;
}

// One picture of some keys of a metrics.jsonl; written only when one of them has a value, unless always.
static Status plot_keys(const char *jsonl_path, const char *svg_path, const char *title, Series *ser, int ns,
                        int always, Err *e) {
    Status st = read_series(jsonl_path, ser, ns, e);
    int any = 0;
    for (int k = 0; k < ns; k++) any |= ser[k].n > 0;
    if (st == ST_OK && (any || always)) st = plot_svg(svg_path, title, ser, ns, e);
    series_free(ser, ns);
    return st;
}

Status metrics_svg(const char *jsonl_path, const char *svg_path, Err *e) {
    Series ser[2] = {{.key = "loss", .label = "train", .color = "#1f77b4"}, {.key = "eval_loss", .label = "eval", .color = "#ff7f0e"}};
    return plot_keys(jsonl_path, svg_path, "loss", ser, 2, 1, e);
}

Status metrics_plots(const char *jsonl_path, const char *dir, Err *e) {
    char *p = path_join(dir, "loss.svg");
    Status st = metrics_svg(jsonl_path, p, e);
    free(p);
    if (st == ST_OK) {
        Series ser[3] = {{.key = "reward", .label = "reward", .color = "#2ca02c"}, {.key = "eval_reward", .label = "eval reward", .color = "#ff7f0e"},
                         {.key = "reward_std", .label = "reward std", .color = "#9467bd"}};
        p = path_join(dir, "reward.svg");
        st = plot_keys(jsonl_path, p, "reward (mean over completions)", ser, 3, 0, e);
        free(p);
    }
    if (st == ST_OK) {
        Series ser[3] = {{.key = "kl_student_teacher", .label = "student-teacher KL", .color = "#d62728"},
                         {.key = "eval_kl_student_teacher", .label = "eval KL", .color = "#ff7f0e"}, {.key = "kl", .label = "KL to the reference", .color = "#8c564b"}};
        p = path_join(dir, "kl.svg");
        st = plot_keys(jsonl_path, p, "KL", ser, 3, 0, e);
        free(p);
    }
    return st;
}
