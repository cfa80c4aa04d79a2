// test_kto_parity.c: two optimizer steps of kto_run against scripts/ref_kto.py (float64 PyTorch
// written from TRL's KTOTrainer): kl, the rewards / logps / logits metrics (only where TRL logs
// them), entropy, loss and gradient norm at step 1 and after one AdamW update, for the kto loss
// (a reference other than the policy; the policy itself, where the KL estimate clamps at 0),
// desirable / undesirable weights, apo_zero_unpaired, and preference pairs unpaired as TRL
// unpairs them. --precompute_ref_log_probs against the same numbers. Tolerance as
// test_dpo_parity.c.
#include "train_metrics.h"

#include "core/json.h"
#include "train/kto.h"

#include <unistd.h>

static cJSON *doc;

static double num(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static void run_case(const char *name, const char *backend, int precompute) {
    const cJSON *cs = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "cases"), name), *cc = cJSON_GetObjectItem(cs, "config");
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/still_kto_parity_%d_%s_%s%s", (int)getpid(), backend, name, precompute ? "_pre" : "");
    KtoConfig c;
    Err e = {0};
    kto_config_default(&c);
    c.model_dir = "tests/data/models/qwen3_tied";
    const cJSON *ref = cJSON_GetObjectItem(cc, "ref"), *ds = cJSON_GetObjectItem(cc, "dataset");
    c.ref_model_dir = ref ? "tests/data/models/qwen3_tied" : "tests/data/models/qwen3_untied";
    c.dataset = ds ? "tests/data/dpo/pairs.jsonl" : "tests/data/kto/rows.jsonl";
    c.backend = backend;
    c.threads = 2;
    c.data.max_length = (int)num(doc, "max_length", 0);
    c.pad_to_multiple_of = (int)num(doc, "pad_to_multiple_of", 0);
    c.per_device_train_batch_size = (int)num(doc, "B", 0);
    const cJSON *lt = cJSON_GetObjectItem(cc, "loss_type");
    if (lt) EXPECT(kto_parse_loss_type(lt->valuestring, &c.loss.type, &e) == ST_OK);
    c.loss.beta = num(cc, "beta", 0.1);
    c.loss.desirable_weight = num(cc, "desirable_weight", 1);
    c.loss.undesirable_weight = num(cc, "undesirable_weight", 1);
    c.precompute_ref_log_probs = precompute;
    TrainConfig *t = &c.train;
    t->output_dir = dir;
    t->grad_accum = (int)num(doc, "GA", 1);
    t->max_steps = (int)num(doc, "steps", 1);
    t->logging_steps = 1;
    t->save_steps = 0;
    t->opt.lr = num(doc, "learning_rate", 0);
    t->opt.beta1 = num(doc, "adam_beta1", 0), t->opt.beta2 = num(doc, "adam_beta2", 0);
    t->opt.eps = num(doc, "adam_epsilon", 0), t->opt.max_grad_norm = num(doc, "max_grad_norm", 0);
    t->opt.sched = SCHED_CONSTANT;
    TrainResult res;
    Status st = kto_run(&c, &res, &e);
    EXPECT_MSG(st == ST_OK, "%s (%s): %s", name, backend, e.msg);
    if (st != ST_OK) return;
    int n;
    cJSON **got = train_metrics_read(dir, &n);
    char what[160];
    snprintf(what, sizeof what, "%s (%s%s)", name, backend, precompute ? ", precomputed reference" : "");
    train_metrics_compare(what, got, n, cJSON_GetObjectItem(cs, "steps"), 1e-5, 0.1, c.loss.beta);
    train_metrics_free(got, n);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    EXPECT(system(cmd) == 0);
}

static void test_cpu(void) {
    int k = 0;
    for (const cJSON *cs = cJSON_GetObjectItem(doc, "cases")->child; cs; cs = cs->next, k++) run_case(cs->string, "cpu", 0);
    EXPECT(k == 5);
}

static void test_ref(void) { run_case("kto", "ref", 0); }

static void test_precompute(void) {
    run_case("kto", "cpu", 1);
    run_case("apo_zero_unpaired", "cpu", 1);
}

int main(void) {
    Err e = {0};
    if (json_parse_file("tests/data/kto/cases.json", &doc, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(test_cpu);
    RUN(test_ref);
    RUN(test_precompute);
    cJSON_Delete(doc);
    TEST_MAIN_END();
}
