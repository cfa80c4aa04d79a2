// cmd_demo.c: still demo — flags -> DemoConfig -> demo_run; the table and the commands on stdout.
#include "../core/alloc.h"
#include "../core/log.h"
#include "../demo/demo.h"
#include "cli_common.h"
#include "commands.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const ArgSpec specs[] = {
    {"output_dir", ARG_STR, "demo-out", "a fresh directory for everything (an earlier demo's output is replaced)"},
    {"quick", ARG_BOOL, "false", "the under-a-minute variant: smaller step counts (the tests run it)"},
    {"max_steps", ARG_INT, "0", "at most N optimizer steps per stage (0 = the demo's own; a smoke test)", "[0,inf)"},
    {NULL, 0, NULL, NULL},
};

// The binary as the printed commands spell it: ./still when that is what runs, else its path.
static char *self_path(void) {
    char self[PATH_MAX], here[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return xstrdup("still");
    self[n] = 0;
    if (realpath("still", here) && !strcmp(here, self)) return xstrdup("./still");
    return xstrdup(self);
}

static Status run(const Args *a, Err *e) {
    DemoConfig c = {.output_dir = args_str(a, "output_dir"), .backend = args_str(a, "device"),
                    .quick = args_bool(a, "quick"), .max_steps = (int)args_int(a, "max_steps"),
                    .seed = (uint64_t)args_int(a, "seed")};
    // A fixed thread count: the CPU backend's sums, hence the table, depend on it.
    c.threads = args_is_set(a, "threads") ? (int)args_int(a, "threads") : 2;
    if (c.threads <= 0) return err_set(e, ST_EINVAL, "--threads must be positive");
    if (args_is_set(a, "dtype"))
        return err_set(e, ST_EINVAL, "--dtype: the demo keeps every model in float32 (see its commands for --dtype)");
    // The stages' own logs are summarised by the demo; --log_level info shows them.
    if (!args_is_set(a, "log_level")) log_set_level(LOG_WARN);
    char *still = self_path();
    c.still = still;
    DemoReport r;
    Status st = demo_run(&c, &r, e);
    if (r.n_stages > 0) {
        demo_print_report(stdout, &c, &r);
        fflush(stdout);
        Err we = {0};
        if (demo_write_json(&c, &r, &we) != ST_OK) log_warn("%s", we.msg);
    }
    demo_report_free(&r);
    free(still);
    return st;
}

int cmd_demo(int argc, char **argv) {
    return cli_run("demo", "The whole system on a synthetic task it writes itself: a teacher trained with SFT, a "
                           "smaller student self-distilled (OPSD) and distilled on its own rollouts, then GRPO with an "
                           "exact-match reward.",
                   specs, argc, argv, run);
}
