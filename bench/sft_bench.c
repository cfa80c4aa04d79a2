// sft_bench.c: SFT steps through the real pipeline (rows -> static batches -> trainer loop with
// AdamW) on a random model of a config.
//   build/bench/sft_bench CONFIG.json packed B T STEPS      full rows of T tokens (packed data)
//   build/bench/sft_bench CONFIG.json varlen B PAD STEPS    random lengths 16..400, padded to PAD
// Prints one JSON object on stdout: tokens/s, step time, plans built, wall time, peak RSS.
#include "core/alloc.h"
#include "core/rng.h"
#include "core/log.h"
#include "train/trainer.h"

#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: sft_bench CONFIG.json packed|varlen B T|PAD STEPS\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    int varlen = !strcmp(argv[2], "varlen"), B = atoi(argv[3]), TP = atoi(argv[4]), steps = atoi(argv[5]);
    Err e = {0};
    ModelConfig cfg;
    Backend *be;
    Model *m;
    if (config_load(argv[1], &cfg, &e) != ST_OK || backend_create("cpu", 0, &be, &e) != ST_OK ||
        model_create_random(&cfg, be, 1, &m, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    int n_ex = B * (steps + 1), V = m->cfg.vocab_size;
    Dataset d = {0};
    d.ex = xcalloc((size_t)n_ex, sizeof(Example));
    Rng r;
    rng_init(&r, 5, 0);
    for (int i = 0; i < n_ex; i++) {
        int n = varlen ? 16 + (int)rng_below(&r, 385) : TP;
        Example *x = &d.ex[d.n++];
        x->n = n;
        x->ids = xmalloc((size_t)n * sizeof(int32_t));
        x->mask = xmalloc((size_t)n);
        for (int t = 0; t < n; t++) x->ids[t] = (int32_t)rng_below(&r, (uint64_t)V), x->mask[t] = 1;
    }
    Rows rows;
    batch_make_rows(&rows, &d, PACK_NONE, 0);
    BatchConfig bc = {.B = B, .pad_to_multiple_of = varlen ? TP : 1, .shuffle = 1, .seed = 1};
    Batcher bt;
    batcher_init(&bt, &rows, &bc);
    char dir[] = "/tmp/still-sft-bench-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    TrainConfig tc = {.output_dir = dir, .grad_accum = 1, .max_steps = steps, .logging_steps = 1000000,
                      .save_dtype = DT_F32, .seed = 1};
    tc.opt = (OptimConfig){.lr = 2e-5, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .max_grad_norm = 1.0};
    TrainResult res;
    Status st = trainer_run(m, &bt, NULL, NULL, &tc, &res, &e);
    if (st != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"mode\": \"%s\", \"B\": %d, \"%s\": %d, \"steps\": %d, \"tok_s\": %.1f, \"step_s\": %.4f, "
           "\"wall_s\": %.2f, \"plans\": %d, \"plan_mib\": %.1f, \"peak_rss_mib\": %.1f}\n",
           argv[2], B, varlen ? "pad_to_multiple_of" : "T", TP, steps, res.tokens_per_second,
           res.train_seconds / steps, res.train_seconds, m->plans.n, m->plans.bytes / 1048576.0,
           ru.ru_maxrss / 1024.0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    batcher_free(&bt);
    batch_rows_free(&rows);
    data_free(&d);
    model_free(m);
    backend_destroy(be);
    return 0;
}
