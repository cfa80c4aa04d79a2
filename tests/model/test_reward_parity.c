// test_reward_parity.c: `still score` and `still reward` against scripts/ref_reward.py (float64
// PyTorch from transformers' pooling and TRL's RewardTrainer loss): the reward of every sequence
// (pad ids inside and at the end of sequences, a sequence of pad ids only, padded rows of a
// partial batch), and the metrics of two optimizer steps (the second after one AdamW update, so
// the gradient is checked) for gradient accumulation with a margin column and centering, and for
// an epoch whose last step has one micro-batch with one pair, with an evaluation set in batches of
// 3 pairs (the last one shorter). The same rewards and gradient-accumulation case for the olmo2
// and phi3 classifiers (Olmo2ForSequenceClassification, Phi3ForSequenceClassification:
// tests/data/reward/rm_olmo2, rm_phi3, through scripts/ref_family.py's port of their forward).
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/json.h"
#include "model/safetensors.h"

#include <unistd.h>

static const char *bin(void) { return getenv("STILL_BIN") ? getenv("STILL_BIN") : "./still"; }

static StSet exp_set;
// the reward model under test and its class: tests/data/reward/rm, or a family's rm_<name>
static const char *rm_dir = "tests/data/reward/rm", *rm_class = "Qwen3ForSequenceClassification";

static double want(const char *key) {
    const StTensor *t = st_find(&exp_set, key);
    EXPECT_MSG(t != NULL, "expected.safetensors has no %s", key);
    return t ? ((const float *)t->data)[0] : NAN;
}

static double metric(const char *out_dir, const char *key, int step) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    char *text;
    size_t len;
    Err e = {0};
    if (file_read_all(path, &text, &len, &e) != ST_OK) return NAN;
    double v = NAN;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItem(o, "step"), *x = cJSON_GetObjectItem(o, key);
        if (cJSON_IsNumber(s) && s->valueint == step && cJSON_IsNumber(x)) v = x->valuedouble;
        cJSON_Delete(o);
    }
    free(text);
    return v;
}

static void close_to(const char *what, double got, double ref, double rel, double abs_floor) {
    EXPECT_MSG(fabs(got - ref) <= rel * fmax(fabs(ref), abs_floor), "%s: %.9g vs torch %.9g (rel tol %g)", what, got,
               ref, rel);
}

static void test_score_rows(void) {
    char tmpl[] = "/tmp/still-reward-parity-XXXXXX";
    EXPECT(mkdtemp(tmpl) != NULL);
    char cmd[1024], path[600];
    // batches of 3 rows over 10 sequences: the last batch is one sequence and two padded rows
    snprintf(cmd, sizeof cmd, "%s score --model %s --dataset tests/data/reward/pairs.jsonl --output "
                              "%s/s.jsonl --batch_size 3 --pad_to_multiple_of 8 --threads 2 2>%s/log", bin(), rm_dir, tmpl, tmpl);
    EXPECT_MSG(system(cmd) == 0, "still score failed: %s", cmd);
    snprintf(path, sizeof path, "%s/s.jsonl", tmpl);
    char *text;
    size_t len;
    Err e = {0};
    EXPECT_MSG(file_read_all(path, &text, &len, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    const StTensor *r = st_find(&exp_set, "rewards");
    EXPECT(r && r->numel == 10);
    const float *w = r->data;
    double scale = 0;
    for (int i = 0; i < 10; i++) scale = fmax(scale, fabs(w[i]));
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < 10; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *c = cJSON_GetObjectItem(o, "reward_chosen"), *j = cJSON_GetObjectItem(o, "reward_rejected");
        EXPECT_MSG(cJSON_IsNumber(c) && cJSON_IsNumber(j), "line %d: %s", n / 2, line);
        if (cJSON_IsNumber(c) && cJSON_IsNumber(j)) {
            EXPECT_MSG(fabs(c->valuedouble - w[n]) <= 1e-5 * scale, "pair %d chosen: %.9g vs torch %.9g", n / 2,
                       c->valuedouble, w[n]);
            EXPECT_MSG(fabs(j->valuedouble - w[n + 1]) <= 1e-5 * scale, "pair %d rejected: %.9g vs torch %.9g", n / 2,
                       j->valuedouble, w[n + 1]);
        }
        n += 2;
        cJSON_Delete(o);
    }
    EXPECT_MSG(n == 10, "%d rewards, expected 10", n);
    free(text);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    EXPECT(system(cmd) == 0);
}

static void run_case(const char *name) {
    cJSON *cases;
    Err e = {0};
    EXPECT_MSG(json_parse_file("tests/data/reward/cases.json", &cases, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(cases, "cases"), name);
    const cJSON *center = cJSON_GetObjectItem(c, "center"), *ev = cJSON_GetObjectItem(c, "eval");
    char tmpl[] = "/tmp/still-reward-parity-XXXXXX";
    EXPECT(mkdtemp(tmpl) != NULL);
    char cmd[2048], extra[512] = "", out[600];
    if (cJSON_IsNumber(center)) snprintf(extra, sizeof extra, "--center_rewards_coefficient %.17g", center->valuedouble);
    if (ev)  // evaluated after every step; the reference has the evaluation after step 1
        snprintf(extra, sizeof extra, "--eval_dataset tests/data/reward/%s --per_device_eval_batch_size %d "
                 "--eval_strategy steps --eval_steps 1", cJSON_GetObjectItem(ev, "file")->valuestring,
                 cJSON_GetObjectItem(ev, "B")->valueint);
    snprintf(cmd, sizeof cmd,
             "%s reward --model %s --dataset tests/data/reward/%s --output_dir %s/out --max_steps 2 "
             "--shuffle false --logging_steps 1 --save_strategy no --threads 2 --learning_rate %.17g --weight_decay "
             "%.17g --max_grad_norm 1 --per_device_train_batch_size %d --gradient_accumulation_steps %d "
             "--pad_to_multiple_of %d --gradient_checkpointing false %s 2>%s/log >/dev/null",
             bin(), rm_dir, cJSON_GetObjectItem(c, "file")->valuestring, tmpl, cJSON_GetObjectItem(c, "lr")->valuedouble,
             cJSON_GetObjectItem(c, "wd")->valuedouble, cJSON_GetObjectItem(c, "B")->valueint,
             cJSON_GetObjectItem(c, "GA")->valueint, cJSON_GetObjectItem(c, "pad")->valueint, extra, tmpl);
    int rc = system(cmd);
    EXPECT_MSG(rc == 0, "%s: still reward failed (rc %d): %s", name, rc, cmd);
    snprintf(out, sizeof out, "%s/out", tmpl);
    static const char *keys[] = {"loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward"};
    for (int step = 1; rc == 0 && step <= 2; step++) {
        char key[96], what[128];
        for (size_t k = 0; k < ARRAY_LEN(keys); k++) {
            snprintf(key, sizeof key, "%s.%s.%d", name, keys[k], step);
            snprintf(what, sizeof what, "%s step %d %s", name, step, keys[k]);
            // margin and mean_reward are differences / sums of rewards of size ~1 that may nearly
            // cancel: 1e-5 relative to that size
            close_to(what, metric(out, keys[k], step), want(key), 1e-5, 1.0);
        }
        snprintf(key, sizeof key, "%s.grad_norm.%d", name, step);
        snprintf(what, sizeof what, "%s step %d grad_norm", name, step);
        close_to(what, metric(out, "grad_norm", step), want(key), 1e-4, 1e-6);
        snprintf(key, sizeof key, "%s.num_tokens.%d", name, step);
        snprintf(what, sizeof what, "%s step %d num_tokens", name, step);
        close_to(what, metric(out, "num_tokens", step), want(key), 0, 1);
    }
    static const char *eval_keys[] = {"eval_loss", "eval_accuracy", "eval_margin", "eval_min_reward",
                                      "eval_mean_reward", "eval_max_reward"};
    for (size_t k = 0; rc == 0 && ev && k < ARRAY_LEN(eval_keys); k++) {
        char key[96], what[128];
        snprintf(key, sizeof key, "%s.%s.1", name, eval_keys[k]);
        snprintf(what, sizeof what, "%s evaluation after step 1: %s", name, eval_keys[k]);
        close_to(what, metric(out, eval_keys[k], 1), want(key), 1e-5, 1.0);
    }
    // the saved model is a classifier transformers loads as one
    snprintf(out, sizeof out, "%s/out/config.json", tmpl);
    cJSON *cfg = NULL;
    EXPECT_MSG(rc == 0 && json_parse_file(out, &cfg, &e) == ST_OK, "%s", e.msg);
    if (cfg) {
        const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItem(cfg, "architectures"), 0);
        EXPECT(cJSON_IsString(arch) && !strcmp(arch->valuestring, rm_class));
        EXPECT(cJSON_GetObjectItem(cfg, "num_labels")->valueint == 1);
        EXPECT(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(cfg, "id2label"), "0")));
        EXPECT(cJSON_GetObjectItem(cJSON_GetObjectItem(cfg, "label2id"), "LABEL_0")->valueint == 0);
        EXPECT(cJSON_GetObjectItem(cfg, "pad_token_id")->valueint == 0);
        cJSON_Delete(cfg);
    }
    cJSON_Delete(cases);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    EXPECT(system(cmd) == 0);
}

static void test_accumulation_margin_center(void) { run_case("ga"); }
static void test_partial_last_step(void) { run_case("partial"); }

// A family's classifier: its rewards and the "ga" case against the port.
static void family_rm(const char *dir, const char *cls) {
    char path[256];
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    StSet saved = exp_set;
    Err e = {0};
    EXPECT_MSG(st_open(path, &exp_set, &e) == ST_OK, "%s (make refs)", e.msg);
    if (!test_current_failed) {
        rm_dir = dir, rm_class = cls;
        test_score_rows();
        run_case("ga");
        st_close(&exp_set);
    }
    exp_set = saved;
    rm_dir = "tests/data/reward/rm", rm_class = "Qwen3ForSequenceClassification";
}

static void test_olmo2_classifier(void) { family_rm("tests/data/reward/rm_olmo2", "Olmo2ForSequenceClassification"); }
static void test_phi3_classifier(void) { family_rm("tests/data/reward/rm_phi3", "Phi3ForSequenceClassification"); }

int main(void) {
    Err e = {0};
    if (st_open("tests/data/reward/expected.safetensors", &exp_set, &e) != ST_OK) {
        printf("FAIL fixtures: %s (make refs)\n", e.msg);
        return 1;
    }
    RUN(test_score_rows);
    RUN(test_accumulation_margin_center);
    RUN(test_partial_last_step);
    RUN(test_olmo2_classifier);
    RUN(test_phi3_classifier);
    st_close(&exp_set);
    TEST_MAIN_END();
}
