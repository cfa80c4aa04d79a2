// metrics.c: metrics.jsonl lines, the progress bar and the loss SVG.
#include "metrics.h"

#include "../core/alloc.h"
#include "../core/fileio.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double metrics_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
    if (!mt->f) return err_set(e, ST_EIO, "%s: cannot open for appending", mt->path);
    mt->tty = isatty(2);
    mt->t0 = metrics_now();
    mt->step0 = step0;
    return ST_OK;
}

void metrics_close(Metrics *mt) {
    if (mt->bar_drawn) fputc('\n', stderr);
    if (mt->f) fclose(mt->f);
    free(mt->path);
    memset(mt, 0, sizeof *mt);
}

void metrics_write(Metrics *mt, const cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    fprintf(mt->f, "%s\n", s);
    fflush(mt->f);
    free(s);
}

static void fmt_dur(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

void metrics_progress(Metrics *mt, int step, int total, double loss, int log_line) {
    double el = metrics_now() - mt->t0;
    int done = step - mt->step0;
    double eta = done > 0 ? el / done * (total - step) : 0;
    char se[32], sl[32];
    fmt_dur(se, sizeof se, el);
    fmt_dur(sl, sizeof sl, eta);
    if (mt->tty) {
        int w = 30, fill = total > 0 ? (int)((double)w * step / total) : w;
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[w] = 0;
        fprintf(stderr, "\r[%s] %d/%d loss %.4f  %s elapsed, ETA %s ", bar, step, total, loss, se, sl);
        fflush(stderr);
        mt->bar_drawn = 1;
    } else if (log_line) {
        fprintf(stderr, "step %d/%d loss %.4f elapsed %s ETA %s\n", step, total, loss, se, sl);
    }
}

typedef struct Series {
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

static void draw_series(StrBuf *sb, const Series *s, const char *color, double x0, double x1, double y0, double y1) {
    if (!s->n) return;
    sb_printf(sb, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (int i = 0; i < s->n; i++) {
        double px = 60 + 560 * (s->x[i] - x0) / (x1 > x0 ? x1 - x0 : 1);
        double py = 330 - 300 * (s->y[i] - y0) / (y1 > y0 ? y1 - y0 : 1);
        sb_printf(sb, "%.1f,%.1f ", px, py);
    }
    sb_puts(sb, "\"/>\n");
}

Status metrics_svg(const char *jsonl_path, const char *svg_path, Err *e) {
    char *text;
    size_t len;
    TRY(file_read_all(jsonl_path, &text, &len, e));
    Series tr = {0}, ev = {0};
    for (size_t p = 0; p < len;) {
        size_t q = p;
        while (q < len && text[q] != '\n') q++;
        cJSON *o = cJSON_ParseWithLength(text + p, q - p);
        const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        const cJSON *l = o ? cJSON_GetObjectItemCaseSensitive(o, "loss") : NULL;
        const cJSON *el = o ? cJSON_GetObjectItemCaseSensitive(o, "eval_loss") : NULL;
        if (cJSON_IsNumber(s) && cJSON_IsNumber(l) && isfinite(l->valuedouble)) series_add(&tr, s->valuedouble, l->valuedouble);
        if (cJSON_IsNumber(s) && cJSON_IsNumber(el) && isfinite(el->valuedouble))
            series_add(&ev, s->valuedouble, el->valuedouble);
        cJSON_Delete(o);
        p = q + 1;
    }
    free(text);
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    const Series *all[2] = {&tr, &ev};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < all[k]->n; i++) {
            x0 = fmin(x0, all[k]->x[i]), x1 = fmax(x1, all[k]->x[i]);
            y0 = fmin(y0, all[k]->y[i]), y1 = fmax(y1, all[k]->y[i]);
        }
    if (!isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    if (y1 - y0 < 1e-9) y0 -= 0.5, y1 += 0.5;
    StrBuf sb = {0};
    sb_puts(&sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"380\" font-family=\"sans-serif\" "
                 "font-size=\"11\">\n<rect width=\"640\" height=\"380\" fill=\"white\"/>\n"
                 "<line x1=\"60\" y1=\"330\" x2=\"620\" y2=\"330\" stroke=\"black\"/>\n"
                 "<line x1=\"60\" y1=\"30\" x2=\"60\" y2=\"330\" stroke=\"black\"/>\n");
    for (int i = 0; i <= 4; i++) {
        double v = y0 + (y1 - y0) * i / 4, py = 330 - 75.0 * i;
        sb_printf(&sb, "<text x=\"55\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", py + 4, v);
        double sx = x0 + (x1 - x0) * i / 4, px = 60 + 140.0 * i;
        sb_printf(&sb, "<text x=\"%.1f\" y=\"345\" text-anchor=\"middle\">%.0f</text>\n", px, sx);
    }
    sb_puts(&sb, "<text x=\"340\" y=\"368\" text-anchor=\"middle\">step</text>\n"
                 "<text x=\"340\" y=\"18\" text-anchor=\"middle\">loss (blue: train, orange: eval)</text>\n");
    draw_series(&sb, &tr, "#1f77b4", x0, x1, y0, y1);
    draw_series(&sb, &ev, "#ff7f0e", x0, x1, y0, y1);
    sb_puts(&sb, "</svg>\n");
    Status st = file_write_atomic(svg_path, sb.data, sb.len, e);
    sb_free(&sb);
    free(tr.x), free(tr.y), free(ev.x), free(ev.y);
    return st;
}
