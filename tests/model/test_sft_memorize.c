// test_sft_memorize.c: after at most 200 SFT steps a tiny model reproduces, by greedy decoding,
// all 8 completions of an 8-example prompt-completion set exactly. Greedy decoding here is
// repeated score-plan forwards + argmax of the last position's logits.
#include "test.h"

#include "core/alloc.h"
#include "core/rng.h"
#include "model/qwen3.h"

#include <unistd.h>

#define NEX 8

static void test_memorize_8_completions(void) {
    char tmpl[] = "/tmp/still-sft-mem-XXXXXX";
    EXPECT(mkdtemp(tmpl) != NULL);
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/data.jsonl", tmpl);
    FILE *f = fopen(path, "w");
    int32_t ids[NEX][16];
    int n[NEX], np[NEX];
    Rng r;
    rng_init(&r, 11, 0);
    for (int i = 0; i < NEX; i++) {
        n[i] = 8 + (int)rng_below(&r, 6);
        np[i] = 3;
        fprintf(f, "{\"input_ids\": [");
        for (int t = 0; t < n[i]; t++) {
            ids[i][t] = t == 0 ? 10 + i : 3 + (int32_t)rng_below(&r, 380);  // distinct first tokens
            fprintf(f, "%s%d", t ? ", " : "", ids[i][t]);
        }
        fprintf(f, "], \"completion_mask\": [");
        for (int t = 0; t < n[i]; t++) fprintf(f, "%s%d", t ? ", " : "", t >= np[i]);
        fprintf(f, "]}\n");
    }
    fclose(f);
    const char *bin = getenv("STILL_BIN") ? getenv("STILL_BIN") : "./still";
    snprintf(cmd, sizeof cmd,
             "%s sft --model tests/data/models/qwen3_tied --dataset %s --output_dir %s/out --max_steps 150 "
             "--learning_rate 3e-3 --per_device_train_batch_size 4 --pad_to_multiple_of 16 --save_strategy no "
             "--lr_scheduler_type constant --threads 2 --logging_steps 50 --completion_only_loss true 2>%s/log >/dev/null",
             bin, path, tmpl, tmpl);
    EXPECT_MSG(system(cmd) == 0, "still sft failed");
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 2, &be, &e) == ST_OK);
    Model *m = NULL;
    snprintf(path, sizeof path, "%s/out", tmpl);
    EXPECT_MSG(model_load(path, be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    if (!m) return;
    int T = 16, V = m->cfg.vocab_size, exact = 0;
    Plan *p;
    EXPECT(plan_get(m, PLAN_SCORE, 1, T, &p, &e) == ST_OK);
    float *dev = be->alloc(be, (size_t)V * sizeof(float)), *lg = xmalloc((size_t)V * sizeof(float));
    for (int i = 0; i < NEX; i++) {
        int32_t seq[16] = {0}, pos[16] = {0}, seg[16] = {0};
        int len = np[i], ok = 1;
        memcpy(seq, ids[i], (size_t)len * sizeof(int32_t));
        while (len < n[i]) {
            for (int t = 0; t < T; t++) pos[t] = t < len ? t : 0, seg[t] = t < len;
            qwen3_set_inputs(m, p, seq, pos, seg, NULL, NULL);
            qwen3_forward(m, p);
            qwen3_logits(m, p, len - 1, 1, dev);
            be->download(be, lg, dev, (size_t)V * sizeof(float));
            int best = 0;
            for (int v = 1; v < V; v++)
                if (lg[v] > lg[best]) best = v;
            ok &= best == ids[i][len];
            seq[len++] = best;
        }
        exact += ok;
    }
    EXPECT_MSG(exact == NEX, "%d of %d completions reproduced", exact, NEX);
    be->free(be, dev);
    free(lg);
    model_free(m);
    backend_destroy(be);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    EXPECT(system(cmd) == 0);
}

int main(void) {
    RUN(test_memorize_8_completions);
    TEST_MAIN_END();
}
