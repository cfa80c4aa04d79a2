// test_dpo_parity.c: two optimizer steps of dpo_run against scripts/ref_dpo.py (float64 PyTorch
// written from TRL's DPOTrainer): every metric TRL logs, the loss and the gradient norm at step 1
// (initial weights, a reference model other than the policy) and at step 2 (after one AdamW update,
// so step 1's gradient is checked through the update), for every loss type, a multi-loss mix,
// f-divergences, LD-DPO, WPO and keep_end truncation. Also: --precompute_ref_log_probs gives the
// same metrics as the reference on the fly.
//
// Tolerance: 1e-5 relative with a floor of 1e-1 on the scale (|got - want| <= 1e-5 max(|want|, 0.1));
// a reward's scale is beta |logps| (it is a difference of two log-prob sums):
// the run is fp32 (sgemm, fp32 head) against float64. Adam's epsilon is 1e-4 in the fixtures, so
// its first update lr * g / (|g| + eps) is linear in the small gradient entries: step 2 checks
// the gradient's size, not only its signs.
#include "train_metrics.h"

#include "core/json.h"
#include "train/dpo.h"

#include <unistd.h>

static cJSON *doc;

static double num(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

// The config of a case (DPOConfig fields of cases.json) -> c; output into dir.
static void case_config(DpoConfig *c, const cJSON *cc, const char *backend, const char *dir, Err *e) {
    dpo_config_default(c);
    c->model_dir = "tests/data/models/qwen3_tied";
    const cJSON *ref = cJSON_GetObjectItem(cc, "ref");
    c->ref_model_dir = ref && !strcmp(ref->valuestring, "policy") ? "tests/data/models/qwen3_tied"
                                                                  : "tests/data/models/qwen3_untied";
    c->dataset = "tests/data/dpo/pairs.jsonl";
    c->backend = backend;
    c->threads = 2;
    c->data.max_length = (int)num(doc, "max_length", 0);
    c->pad_to_multiple_of = (int)num(doc, "pad_to_multiple_of", 0);
    c->per_device_train_batch_size = (int)num(doc, "B", 0);
    c->shuffle = 0;
    DpoLossConfig *l = &c->loss;
    const cJSON *types = cJSON_GetObjectItem(cc, "loss_type"), *w = cJSON_GetObjectItem(cc, "loss_weights");
    if (types) {
        l->n_types = 0;
        for (const cJSON *t = types->child; t; t = t->next) {
            EXPECT(dpo_parse_loss_type(t->valuestring, &l->type[l->n_types], e) == ST_OK);
            l->weight[l->n_types] = w ? cJSON_GetArrayItem(w, l->n_types)->valuedouble : 1.0;
            l->n_types++;
        }
    }
    l->beta = num(cc, "beta", 0.1);
    l->label_smoothing = num(cc, "label_smoothing", 0);
    l->f_alpha = num(cc, "f_alpha_divergence_coef", 0.5);
    const cJSON *f = cJSON_GetObjectItem(cc, "f_divergence_type");
    if (f) EXPECT(dpo_parse_fdiv(f->valuestring, &l->fdiv, e) == ST_OK);
    l->use_weighting = cJSON_IsTrue(cJSON_GetObjectItem(cc, "use_weighting"));
    c->has_ld_alpha = cJSON_GetObjectItem(cc, "ld_alpha") != NULL;
    c->ld_alpha = num(cc, "ld_alpha", 0);
    const cJSON *tm = cJSON_GetObjectItem(cc, "truncation_mode");
    c->data.keep_end = tm && !strcmp(tm->valuestring, "keep_end");
    TrainConfig *t = &c->train;
    t->output_dir = dir;
    t->grad_accum = (int)num(doc, "GA", 1);
    t->max_steps = (int)num(doc, "steps", 1);
    t->logging_steps = 1;
    t->save_steps = 0;
    t->opt.lr = num(doc, "learning_rate", 0);
    t->opt.beta1 = num(doc, "adam_beta1", 0), t->opt.beta2 = num(doc, "adam_beta2", 0);
    t->opt.eps = num(doc, "adam_epsilon", 0), t->opt.max_grad_norm = num(doc, "max_grad_norm", 0);
    t->opt.sched = SCHED_CONSTANT;
    t->opt.weight_decay = 0;
}

static void run_case(const char *name, const cJSON *cs, const char *backend, int precompute) {
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/still_dpo_parity_%d_%s_%s%s", (int)getpid(), backend, name, precompute ? "_pre" : "");
    DpoConfig c;
    Err e = {0};
    case_config(&c, cJSON_GetObjectItem(cs, "config"), backend, dir, &e);
    c.precompute_ref_log_probs = precompute;
    c.precompute_ref_batch_size = precompute ? 3 : 0;
    TrainResult res;
    Status st = dpo_run(&c, &res, &e);
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
    for (const cJSON *cs = cJSON_GetObjectItem(doc, "cases")->child; cs; cs = cs->next, k++) run_case(cs->string, cs, "cpu", 0);
    EXPECT(k == 22);
}

static void test_ref(void) {  // the spec backend on a few cases (it is slow)
    static const char *some[] = {"sigmoid", "ipo", "aot", "sft", "wpo"};
    for (size_t i = 0; i < ARRAY_LEN(some); i++) run_case(some[i], cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "cases"), some[i]), "ref", 0);
}

static void test_precompute(void) {  // the reference's log-probs computed once (batches of 3 pairs)
    static const char *some[] = {"sigmoid", "ld_alpha", "keep_end"};
    for (size_t i = 0; i < ARRAY_LEN(some); i++)
        run_case(some[i], cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "cases"), some[i]), "cpu", 1);
}

int main(void) {
    Err e = {0};
    if (json_parse_file("tests/data/dpo/cases.json", &doc, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(test_cpu);
    RUN(test_ref);
    RUN(test_precompute);
    cJSON_Delete(doc);
    TEST_MAIN_END();
}
