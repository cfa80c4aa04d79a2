// cmd_demo.c: still demo — flags -> DemoConfig -> demo_run; the table and the commands on stdout.
#include "../core/alloc.h"
#include "../core/log.h"
#include "../demo/demo.h"
#include "../demo/pairs.h"
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
    {"pairs_from", ARG_STR, NULL, "only write the DPO stage's preference pairs from this still eval generations.jsonl "
                                  "(its samples of --pairs_prompts) to --pairs_output, and exit"},
    {"pairs_prompts", ARG_STR, NULL, "with --pairs_from: the prompts file sampled ({\"prompt\", \"answer\"} rows)"},
    {"pairs_output", ARG_STR, NULL, "with --pairs_from: the pairs file to write (JSONL prompt / chosen / rejected)"},
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

// --pairs_from: the DPO stage's pairs step alone (commands.sh runs it).
static Status write_pairs(const Args *a, Err *e) {
    PairsConfig c = {.generations = args_str(a, "pairs_from"), .prompts = args_str(a, "pairs_prompts"),
                     .output = args_str(a, "pairs_output"), .answer_key = "answer", .metric = "exact_match:answer"};
    if (!c.prompts || !c.output)
        return err_set(e, ST_EUSAGE, "--pairs_from needs --pairs_prompts FILE and --pairs_output FILE");
    static const char *const demo_flags[] = {"output_dir", "quick", "max_steps"};
    for (size_t i = 0; i < ARRAY_LEN(demo_flags); i++)
        if (args_is_set(a, demo_flags[i]))
            return err_set(e, ST_EUSAGE, "--pairs_from writes the pairs only: --%s does not apply", demo_flags[i]);
    int n;
    TRY(demo_write_pairs(&c, &n, e));
    fprintf(stderr, "still demo: %d preference pairs from %s: wrote %s\n", n, c.generations, c.output);
    return ST_OK;
}

static Status run(const Args *a, Err *e) {
    if (args_str(a, "pairs_from")) return write_pairs(a, e);
    if (args_str(a, "pairs_prompts") || args_str(a, "pairs_output"))
        return err_set(e, ST_EUSAGE, "--pairs_prompts and --pairs_output go with --pairs_from GENERATIONS");
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
                           "exact-match reward and DPO on its own wrong answers (in full and as a LoRA adapter).",
                   specs, argc, argv, run);
}
