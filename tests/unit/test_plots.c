// test_plots.c: loss.svg / reward.svg / kl.svg drawn from metrics.jsonl files of 1 to 10^5
// points: a single point is drawn, tick labels are round numbers, every label lies inside the
// picture, the legend names only what is drawn, and 10^5 points stay a small file.
#include "test.h"

#include "core/fileio.h"
#include "train/metrics.h"

#include <unistd.h>

static char dir[256];

static char *write_jsonl(const char *name, int n, double (*loss)(int), int with_eval, const char *extra) {
    char *p = path_join(dir, name);
    FILE *f = fopen(p, "w");
    for (int i = 1; i <= n; i++) {
        fprintf(f, "{\"loss\":%.9g,\"step\":%d", loss(i), i);
        if (extra) fprintf(f, ",\"%s\":%.6g", extra, 0.5 + 0.1 * sin(i));
        fprintf(f, "}\n");
        if (with_eval && i % 10 == 0) fprintf(f, "{\"eval_loss\":%.9g,\"step\":%d}\n", loss(i) + 0.1, i);
    }
    fclose(f);
    return p;
}

static char *draw(const char *jsonl) {
    char svg[512], *text = NULL;
    snprintf(svg, sizeof svg, "%s.svg", jsonl);  // KEEP_PLOTS=1 keeps them to look at
    Err e = {0};
    EXPECT_MSG(metrics_svg(jsonl, svg, &e) == ST_OK, "%s", e.msg);
    EXPECT(file_read_all(svg, &text, NULL, &e) == ST_OK);
    return text;
}

// Every <text x=".." y=".."> inside the 640 x 400 picture, and every numeric label a round
// number: at most 3 significant digits.
static void check_labels(const char *svg) {
    int n = 0;
    for (const char *p = strstr(svg, "<text"); p; p = strstr(p + 1, "<text")) {
        double x = -1, y = -1;
        const char *px = strstr(p, "x=\""), *py = strstr(p, "y=\"");
        if (px) x = atof(px + 3);
        if (py) y = atof(py + 3);
        EXPECT_MSG(x >= 0 && x <= 640 && y >= 10 && y <= 400, "label at %g,%g", x, y);
        const char *t = strchr(p, '>') + 1;
        char *end;
        double v = strtod(t, &end);
        if (end != t && *end == '<') {  // a tick label
            n++;
            int sig = 0, started = 0;
            for (const char *c = t; c < end; c++)
                if (*c >= '0' && *c <= '9') {
                    if (*c != '0') started = 1;
                    if (started) sig++;
                }
            // trailing zeros of integers are not significant
            for (const char *c = end - 1; c > t && *c == '0' && !memchr(t, '.', (size_t)(end - t)); c--) sig--;
            EXPECT_MSG(sig <= 3, "tick label \"%.*s\" (%g) is not round", (int)(end - t), t, v);
        }
    }
    EXPECT_MSG(n >= 4, "%d tick labels", n);
}

static double constant(int i) { return 2.0 + 0 * i; }
static double falling(int i) { return 3.0 / (1 + 0.01 * i); }
static double negative(int i) { return -0.0023 * i; }
static double noisy(int i) { return 2 + 1 / (1 + 1e-3 * i) + 0.05 * sin(0.37 * i) + (i == 77777 ? 5 : 0); }

static void test_single_point(void) {
    char *j = write_jsonl("one.jsonl", 1, constant, 0, NULL), *svg = draw(j);
    EXPECT_STR_CONTAINS(svg, "<circle");
    EXPECT(!strstr(svg, "eval"));
    EXPECT_STR_CONTAINS(svg, "train (1 point)");
    check_labels(svg);
    free(j), free(svg);
}

static void test_negative_values_inside(void) {
    char *j = write_jsonl("neg.jsonl", 7, negative, 0, NULL), *svg = draw(j);
    EXPECT_STR_CONTAINS(svg, "<polyline");
    EXPECT_STR_CONTAINS(svg, ">-0.0");
    check_labels(svg);
    free(j), free(svg);
}

static void test_eval_in_legend_only_when_drawn(void) {
    char *j = write_jsonl("ev.jsonl", 50, falling, 1, NULL), *svg = draw(j);
    EXPECT_STR_CONTAINS(svg, "eval (5 points)");
    EXPECT_STR_CONTAINS(svg, "train (50 points)");
    check_labels(svg);
    free(j), free(svg);
}

static void test_hundred_thousand_points(void) {
    char *j = write_jsonl("big.jsonl", 100000, noisy, 0, NULL), *svg = draw(j);
    size_t n = strlen(svg);
    EXPECT_MSG(n < 200000, "%zu bytes", n);
    EXPECT_STR_CONTAINS(svg, "100000 points");
    // the one spike of +5 at step 77777 is still drawn: the only point in the upper half of the
    // frame (y < 188), everything else is below 3.1
    int high = 0;
    const char *pts = strstr(svg, "points=\"");
    for (const char *p = pts ? pts + 8 : NULL; p && *p && *p != '"';) {
        char *end;
        strtod(p, &end);
        if (*end != ',') break;
        double y = strtod(end + 1, &end);
        high += y < 188;
        p = end + (*end == ' ');
    }
    EXPECT_MSG(high >= 1 && high <= 4, "%d points in the upper half", high);
    check_labels(svg);
    free(j), free(svg);
}

static void test_reward_and_kl_plots(void) {
    char *j = write_jsonl("rl.jsonl", 20, falling, 0, "reward");
    Err e = {0};
    EXPECT_MSG(metrics_plots(j, dir, &e) == ST_OK, "%s", e.msg);
    char *r = path_join(dir, "reward.svg"), *k = path_join(dir, "kl.svg"), *text = NULL;
    EXPECT(file_exists(r));
    EXPECT(!file_exists(k));  // nothing logged a KL
    if (file_read_all(r, &text, NULL, &e) == ST_OK) {
        EXPECT_STR_CONTAINS(text, "reward (20 points)");
        check_labels(text);
    }
    free(text), free(j), unlink(r);
    j = write_jsonl("kd.jsonl", 20, falling, 0, "kl_student_teacher");
    EXPECT(metrics_plots(j, dir, &e) == ST_OK);
    EXPECT(file_exists(k) && !file_exists(r));
    free(j), free(r), free(k);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/still_plots_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_single_point);
    RUN(test_negative_values_inside);
    RUN(test_eval_in_legend_only_when_drawn);
    RUN(test_hundred_thousand_points);
    RUN(test_reward_and_kl_plots);
    Err e = {0};
    if (!getenv("KEEP_PLOTS")) dir_remove_tree(dir, &e);
    else printf("# plots kept in %s\n", dir);
    TEST_MAIN_END();
}
