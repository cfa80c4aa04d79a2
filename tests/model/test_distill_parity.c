// test_distill_parity.c: one distillation step on fixed rollouts (distill_score over GA
// micro-batches, the loss normalised by the step's completion tokens) against scripts/ref_distill.py
// (float64 PyTorch, TRL's _jsd_divergence with F.kl_div(log_target=True) and torch.logsumexp): the
// step loss, kl_student_teacher and the student's gradient norm for forward KL, JSD 0.5, reverse
// KL, temperatures != 1, teacher top-k, the sampled-token mode, and teacher prompts of other
// lengths than the student's (self-distillation's layout).
#include "test.h"

#include "core/alloc.h"
#include "core/json.h"
#include "train/distill.h"

#include <math.h>

static int32_t *ids_of(const cJSON *a, int *n) {
    *n = cJSON_GetArraySize(a);
    int32_t *v = xmalloc((size_t)(*n ? *n : 1) * sizeof(int32_t));
    int i = 0;
    for (const cJSON *x = a->child; x; x = x->next) v[i++] = x->valueint;
    return v;
}

static void run_backend(const char *backend) {
    cJSON *doc;
    Err e = {0};
    EXPECT_MSG(json_parse_file("tests/data/distill/cases.json", &doc, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    Backend *be;
    EXPECT_MSG(backend_create(backend, 2, &be, &e) == ST_OK, "%s", e.msg);
    Model *m, *t;
    EXPECT_MSG(model_load("tests/data/models/qwen3_tied", be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(model_load("tests/data/models/qwen3_untied", be, DT_F32, &t, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    model_alloc_grads(m);
    int B = cJSON_GetObjectItem(doc, "B")->valueint, GA = cJSON_GetObjectItem(doc, "GA")->valueint;
    int C = cJSON_GetObjectItem(doc, "max_completion_length")->valueint;
    int pad = cJSON_GetObjectItem(doc, "pad_to_multiple_of")->valueint;
    int n_eos;
    int32_t *eos = ids_of(cJSON_GetObjectItem(doc, "eos"), &n_eos);
    const cJSON *rows = cJSON_GetObjectItem(doc, "rows");
    int R = cJSON_GetArraySize(rows);
    EXPECT(R == B * GA);
    const int32_t **sp = xmalloc((size_t)R * sizeof *sp), **tp = xmalloc((size_t)R * sizeof *tp),
                  **cp = xmalloc((size_t)R * sizeof *cp);
    int *sl = xmalloc((size_t)R * sizeof(int)), *tl = xmalloc((size_t)R * sizeof(int)), *cl = xmalloc((size_t)R * sizeof(int));
    int P = 0;
    for (int r = 0; r < R; r++) {
        const cJSON *row = cJSON_GetArrayItem(rows, r);
        sp[r] = ids_of(cJSON_GetObjectItem(row, "prompt"), &sl[r]);
        tp[r] = ids_of(cJSON_GetObjectItem(row, "teacher_prompt"), &tl[r]);
        cp[r] = ids_of(cJSON_GetObjectItem(row, "completion"), &cl[r]);
        P = MAX(P, MAX(sl[r], tl[r]));
    }
    double n_gen = 0;
    for (int r = 0; r < R; r++) n_gen += rollout_mask_len(cp[r], cl[r], eos, n_eos);
    EXPECT(n_gen == cJSON_GetObjectItem(doc, "n_gen")->valuedouble);
    int cases = 0;
    for (const cJSON *c = cJSON_GetObjectItem(doc, "cases")->child; c; c = c->next) {
        DistillLoss L = {.kind = strcmp(cJSON_GetObjectItem(c, "loss_kind")->valuestring, "jsd") ? DISTILL_LOSS_SAMPLED
                                                                                                 : DISTILL_LOSS_JSD,
                         .beta = (float)cJSON_GetObjectItem(c, "beta")->valuedouble,
                         .top_k = cJSON_GetObjectItem(c, "top_k")->valueint,
                         .tau = (float)cJSON_GetObjectItem(c, "tau")->valuedouble};
        int self = cJSON_IsTrue(cJSON_GetObjectItem(c, "self_prompts"));
        DistillScorer sc;
        distill_scorer_init(&sc, m, t, &L, B, (P + C + pad - 1) / pad * pad, C, pad, eos, n_eos);
        be->zero(be, m->grads, m->tt.n_params * sizeof(float));
        double loss = 0, kl = 0, ntgt = 0;
        for (int g = 0; g < GA; g++) {
            DistillRows dr;
            Status st = distill_score(&sc, sp + g * B, sl + g * B, self ? tp + g * B : NULL, tl + g * B, cp + g * B,
                                      cl + g * B, B, n_gen, 1, &dr, &e);
            EXPECT_MSG(st == ST_OK, "%s: %s", c->string, e.msg);
            loss += dr.loss, kl += dr.kl_sum, ntgt += dr.n_targets;
        }
        double gn = sqrt(be->sumsq(be, m->grads, m->tt.n_params));
        double wl = cJSON_GetObjectItem(c, "loss")->valuedouble, wk = cJSON_GetObjectItem(c, "kl_student_teacher")->valuedouble,
               wg = cJSON_GetObjectItem(c, "grad_norm")->valuedouble;
        EXPECT_MSG(ntgt == n_gen, "%s: %g targets, %g expected", c->string, ntgt, n_gen);
        EXPECT_MSG(fabs(loss - wl) <= 2e-5 * fmax(1, fabs(wl)), "%s: loss %.9g vs torch %.9g", c->string, loss, wl);
        EXPECT_MSG(fabs(kl / ntgt - wk) <= 2e-5 * fmax(1, fabs(wk)), "%s: kl_student_teacher %.9g vs torch %.9g",
                   c->string, kl / ntgt, wk);
        EXPECT_MSG(fabs(gn - wg) <= 1e-4 * fmax(1e-3, fabs(wg)), "%s: grad norm %.9g vs torch %.9g", c->string, gn, wg);
        distill_scorer_free(&sc);
        cases++;
    }
    EXPECT(cases == 10);
    for (int r = 0; r < R; r++) free((void *)sp[r]), free((void *)tp[r]), free((void *)cp[r]);
    free(sp), free(tp), free(cp), free(sl), free(tl), free(cl), free(eos);
    model_free(t);
    model_free(m);
    backend_destroy(be);
    cJSON_Delete(doc);
}

static void test_cpu(void) { run_backend("cpu"); }
static void test_ref(void) { run_backend("ref"); }

int main(void) {
    RUN(test_cpu);
    RUN(test_ref);
    TEST_MAIN_END();
}
