// test_grpo_torch.c: the GRPO and RLOO trainers' real step (grpo_source's step on rounds given
// through grpo_set_round, then optim_step) against scripts/ref_grpo.py, float64 PyTorch written
// from TRL's GRPOTrainer / RLOOTrainer: every loss_type (grpo, bnpo, dr_grpo, dapo), scale_rewards
// group / batch / none, epsilon and epsilon_high clipping on a second iteration of a round, the k3
// KL term against the reference (GRPO) and the k1 KL in the reward (RLOO, from a round generated
// at weights away from the reference), RLOO's normalize_advantages and reward_clip_range,
// mask_truncated_completions, unscorable completions, then torch's clip_grad_norm_ and AdamW.
// tests/data/grpo (make refs) holds the tiny Qwen3 checkpoint, the rounds and torch's numbers.
//
// Each case is two optimizer steps; each step is checked from the reference's state: before step
// 2 the weights and the moments are set to torch's after step 1 (the script rounds them to fp32
// before its own step 2), so that step 2 does not inherit step 1's differences. Per step: the
// advantages of a new round, the loss, the gradient norm, and per tensor the gradient (cosine >=
// COS_MIN and norm-wise relative error <= TOL_GRAD), the moments exp_avg / exp_avg_sq after the
// AdamW step (TOL_GRAD) and the update, on the elements where sqrt(v_hat) > 1e3 eps (TOL_UPDATE,
// cosine >= COS_MIN).
//
// Tolerances hold for any sgemm kernel, thread count or -march: fp32 forward and backward against
// float64 differ by rounding, ~1e-6 of a tensor's norm (observed up to 4.4e-6 for the gradients
// and moments); clipping decisions cannot flip, the script keeps every ratio 1e-4 away from a clip
// bound. The AdamW update lr m_hat / (sqrt(v_hat) + eps) turns rounding-level gradient
// differences into differences of order lr where sqrt(v_hat) is near eps, so the update is
// compared only where it is well-conditioned; the moments carry every element. What is left in
// the update is the fp32 rounding of the new weights, half an ulp of |p| <= ~2.5 against lr 3e-4
// (observed 1.2e-4 norm-wise). A wrong normaliser, sign, advantage, reference, clip bound or mask
// moves a gradient by far more than 1e-3.
#include "test.h"

#include "core/alloc.h"
#include "core/json.h"
#include "model/safetensors.h"
#include "train/codec.h"
#include "train/grpo.h"

#define DIR_ "tests/data/grpo"
#define COS_MIN 0.99999
#define TOL_GRAD 5e-5
#define TOL_UPDATE 1e-3

static cJSON *cases_json;

static double num(const cJSON *o, const char *k) { return cJSON_GetObjectItem(o, k)->valuedouble; }

static double scalar(const StSet *s, const char *name) {
    const StTensor *t = st_find(s, name);
    return t ? ((const float *)t->data)[0] : NAN;
}

// got against want (n): norm-wise relative error and cosine, over the elements where sel is
// NULL or nonzero.
static void compare(const float *got, const float *want, const unsigned char *sel, size_t n, double *rel, double *cos) {
    double d = 0, ww = 0, gg = 0, gw = 0;
    for (size_t k = 0; k < n; k++) {
        if (sel && !sel[k]) continue;
        double a = got[k], b = want[k];
        d += (a - b) * (a - b), ww += b * b, gg += a * a, gw += a * b;
    }
    *rel = sqrt(d) / fmax(sqrt(ww), 1e-300);
    *cos = ww > 0 && gg > 0 ? gw / sqrt(ww * gg) : (ww == gg ? 1.0 : 0.0);
}

typedef struct Run {
    const char *name;
    const cJSON *c;          // the case
    int n;                   // completions per round
    Model *m;
    Backend *be;
    Optim opt;
    Grpo *g;
    size_t np;
    float *grad, *p0, *p1, *mh, *vh;  // host (n_params) in table order (goffset)
    double worst_grad, worst_mom, worst_upd, min_cos;
} Run;

// Every tensor's parameter values (host, n_params in goffset order) from the device buffer.
static void download_params(Run *r, float *out) {
    Trainable tr = model_trainable(r->m);
    for (int i = 0; i < tr.tt->n; i++) {
        const TensorInfo *t = &tr.tt->t[i];
        r->be->download(r->be, out + t->goffset, (const char *)tr.params + t->offset, t->numel * sizeof(float));
    }
}

// torch's tensor "<prefix><name>" of every table entry into out (n_params, goffset order).
static int gather_ref(const Run *r, const StSet *ex, const char *prefix, float *out) {
    const TensorTable *tt = model_trainable(r->m).tt;
    for (int i = 0; i < tt->n; i++) {
        char name[200];
        snprintf(name, sizeof name, "%s%s", prefix, tt->t[i].name);
        const StTensor *t = st_find(ex, name);
        EXPECT_MSG(t && t->dtype == DT_F32 && t->numel == tt->t[i].numel, "%s: fixture has no %s of %zu floats",
                   r->name, name, tt->t[i].numel);
        if (!t || t->numel != tt->t[i].numel) return 0;
        memcpy(out + tt->t[i].goffset, t->data, t->numel * sizeof(float));
    }
    return 1;
}

// Give round k of the case to the trainer as the round of optimizer step `step`, and check the
// advantages it computes against torch's.
static void set_round(Run *r, const StSet *ex, int k, int step) {
    const cJSON *round = cJSON_GetArrayItem(cJSON_GetObjectItem(r->c, "rounds"), k);
    int n = r->n;
    int *prompt = xcalloc((size_t)n, sizeof(int)), *lens = xcalloc((size_t)n, sizeof(int));
    int32_t **ids = xcalloc((size_t)n, sizeof(int32_t *));
    double *rew = xcalloc((size_t)n * 2, sizeof(double));
    EXPECT_MSG(cJSON_GetArraySize(round) == n, "%s: round %d has %d rows, expected %d", r->name, k,
               cJSON_GetArraySize(round), n);
    for (int i = 0; i < n && i < cJSON_GetArraySize(round); i++) {
        const cJSON *row = cJSON_GetArrayItem(round, i), *cid = cJSON_GetObjectItem(row, "ids");
        prompt[i] = cJSON_GetObjectItem(row, "prompt")->valueint;
        lens[i] = cJSON_GetArraySize(cid);
        ids[i] = xcalloc((size_t)lens[i] + 1, sizeof(int32_t));
        for (int t = 0; t < lens[i]; t++) ids[i][t] = cJSON_GetArrayItem(cid, t)->valueint;
        for (int q = 0; q < 2; q++) {
            const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItem(row, "rewards"), q);
            rew[(size_t)i * 2 + q] = cJSON_IsNumber(v) ? v->valuedouble : NAN;  // null: the function returned None
        }
    }
    Err e = {0};
    EXPECT_MSG(grpo_set_round(r->g, step, prompt, (const int32_t *const *)ids, lens, rew, &e) == ST_OK, "%s: %s",
               r->name, e.msg);
    char name[64];
    snprintf(name, sizeof name, "round%d.advantages", k);
    const StTensor *want = st_find(ex, name);
    EXPECT_MSG(want && (int)want->numel == n, "%s: fixture has no %s", r->name, name);
    if (want && (int)want->numel == n) {
        const double *got = grpo_round_advantages(r->g);
        const float *w = want->data;
        double scale = 1e-3;
        for (int i = 0; i < n; i++) scale = fmax(scale, fabs(w[i]));
        for (int i = 0; i < n; i++)
            EXPECT_MSG(fabs(got[i] - w[i]) <= 1e-5 * scale, "%s: round %d advantage %d: %.9g, torch %.9g", r->name, k,
                       i, got[i], w[i]);
    }
    for (int i = 0; i < n; i++) free(ids[i]);
    free(ids), free(prompt), free(lens), free(rew);
}

// One optimizer step of the trainer against torch's step s (1 or 2).
static void check_step(Run *r, const StSet *ex, int s) {
    Err e = {0};
    char p[32];
    snprintf(p, sizeof p, "step%d.", s);
    const TensorTable *tt = model_trainable(r->m).tt;
    StepSource src = grpo_source(r->g);
    StepReport rep;
    memset(&rep, 0, sizeof rep);
    r->be->zero(r->be, r->m->grads, r->np * sizeof(float));
    download_params(r, r->p0);
    EXPECT_MSG(src.step(src.ctx, r->m, s - 1, &rep, &e) == ST_OK, "%s: step %d: %s", r->name, s, e.msg);
    r->be->download(r->be, r->grad, r->m->grads, r->np * sizeof(float));
    double gn = 0, lr = 0;
    EXPECT_MSG(optim_step(&r->opt, r->m, &gn, &lr, &e) == ST_OK, "%s: %s", r->name, e.msg);
    download_params(r, r->p1);
    EXPECT(optim_gather_state(&r->opt, r->be, r->mh, r->vh, &e) == ST_OK);
    char key[64];
    snprintf(key, sizeof key, "%sloss", p);
    double want_loss = scalar(ex, key);
    EXPECT_MSG(fabs(rep.loss - want_loss) <= 1e-5 * fmax(fabs(want_loss), 1.0), "%s: step %d loss %.9g, torch %.9g",
               r->name, s, rep.loss, want_loss);
    snprintf(key, sizeof key, "%sgrad_norm", p);
    double want_gn = scalar(ex, key);
    EXPECT_MSG(fabs(gn - want_gn) <= 1e-5 * want_gn, "%s: step %d grad_norm %.9g, torch %.9g", r->name, s, gn, want_gn);
    float *w = xmalloc(r->np * sizeof(float)), *wp = xmalloc(r->np * sizeof(float));
    float *wv = xmalloc(r->np * sizeof(float)), *du = xmalloc(r->np * sizeof(float));
    float *wu = xmalloc(r->np * sizeof(float));
    unsigned char *sel = xmalloc(r->np);
    double b2 = num(cases_json, "adam_beta2"), eps = num(cases_json, "adam_epsilon");
    double bc2 = 1 - pow(b2, s);
    struct { const char *what, *prefix; const float *got; } mom[3] = {
        {"gradient", "grad.", r->grad}, {"exp_avg", "exp_avg.", r->mh}, {"exp_avg_sq", "exp_avg_sq.", r->vh}};
    for (int q = 0; q < 3; q++) {
        char pre[48];
        snprintf(pre, sizeof pre, "%s%s", p, mom[q].prefix);
        if (!gather_ref(r, ex, pre, w)) goto out;
        if (q == 2) memcpy(wv, w, r->np * sizeof(float));
        for (int i = 0; i < tt->n; i++) {
            const TensorInfo *t = &tt->t[i];
            double rel, cos;
            compare(mom[q].got + t->goffset, w + t->goffset, NULL, t->numel, &rel, &cos);
            if (q == 0) r->min_cos = fmin(r->min_cos, cos), r->worst_grad = fmax(r->worst_grad, rel);
            else r->worst_mom = fmax(r->worst_mom, rel);
            EXPECT_MSG(rel <= TOL_GRAD && (q != 0 || cos >= COS_MIN), "%s: step %d %s of %s: rel err %.3g, cosine %.9f",
                       r->name, s, mom[q].what, t->name, rel, cos);
        }
    }
    // the update where it is well-conditioned: sqrt(v_hat) > 1e3 eps (torch's v)
    snprintf(key, sizeof key, "%sparam.", p);
    if (!gather_ref(r, ex, key, wp)) goto out;
    for (size_t k = 0; k < r->np; k++) {
        du[k] = r->p1[k] - r->p0[k], wu[k] = wp[k] - r->p0[k];
        sel[k] = sqrt(wv[k] / bc2) > 1e3 * eps;
    }
    size_t n_all = 0;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        size_t n_sel = 0;
        for (size_t k = 0; k < t->numel; k++) n_sel += sel[t->goffset + k];
        double rel, cos;
        compare(du + t->goffset, wu + t->goffset, sel + t->goffset, t->numel, &rel, &cos);
        r->worst_upd = fmax(r->worst_upd, rel);
        EXPECT_MSG(rel <= TOL_UPDATE && cos >= COS_MIN, "%s: step %d update of %s (%zu of %zu elements): rel err %.3g, "
                   "cosine %.9f", r->name, s, t->name, n_sel, t->numel, rel, cos);
        EXPECT_MSG(n_sel > 0, "%s: step %d %s: no element has sqrt(v_hat) > 1e3 eps", r->name, s, t->name);
        n_all += n_sel;
    }
    // the update check covers most of the model (it is not vacuous)
    EXPECT_MSG(n_all >= r->np / 2, "%s: step %d: only %zu of %zu elements have sqrt(v_hat) > 1e3 eps", r->name, s,
               n_all, r->np);
out:
    free(w), free(wp), free(wv), free(du), free(wu), free(sel);
}

// Load torch's weights and moments after step s into the model and the optimizer.
static void load_ref_state(Run *r, const StSet *ex, int s) {
    char pre[48];
    snprintf(pre, sizeof pre, "step%d.param.", s);
    if (!gather_ref(r, ex, pre, r->p1)) return;
    Trainable tr = model_trainable(r->m);
    for (int i = 0; i < tr.tt->n; i++) {
        const TensorInfo *t = &tr.tt->t[i];
        r->be->upload(r->be, (char *)tr.params + t->offset, r->p1 + t->goffset, t->numel * sizeof(float));
    }
    snprintf(pre, sizeof pre, "step%d.exp_avg.", s);
    if (!gather_ref(r, ex, pre, r->mh)) return;
    snprintf(pre, sizeof pre, "step%d.exp_avg_sq.", s);
    if (!gather_ref(r, ex, pre, r->vh)) return;
    optim_load_state(&r->opt, r->be, r->mh, r->vh);
}

static void run_case(const char *name) {
    Run r = {.name = name, .min_cos = 1};
    const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(cases_json, "cases"), name);
    EXPECT_MSG(c, "no case %s in " DIR_ "/cases.json", name);
    if (!c) return;
    r.c = c;
    Err e = {0};
    char path[256];
    snprintf(path, sizeof path, DIR_ "/%s.safetensors", name);
    StSet ex;
    EXPECT_MSG(st_open(path, &ex, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    CHECK(backend_create("cpu", 2, &r.be, &e) == ST_OK);
    EXPECT_MSG(model_load(DIR_ "/model", r.be, DT_F32, &r.m, &e) == ST_OK, "%s", e.msg);
    if (!r.m) goto done;
    GrpoConfig gc;
    const char *algo = cJSON_GetObjectItem(c, "algo")->valuestring;
    grpo_config_default(&gc, !strcmp(algo, "rloo") ? GRPO_ALGO_RLOO : GRPO_ALGO_GRPO);
    const char *specs[] = {"length:3", "regex:x"};  // never run: the rounds bring their rewards
    double weights[2];
    for (int q = 0; q < 2; q++) weights[q] = cJSON_GetArrayItem(cJSON_GetObjectItem(cases_json, "reward_weights"), q)->valuedouble;
    gc.model_dir = DIR_ "/model", gc.dataset = DIR_ "/prompts.jsonl", gc.backend = "cpu";
    gc.reward_specs = specs, gc.n_rewards = 2, gc.reward_weights = weights, gc.n_reward_weights = 2;
    gc.num_generations = (int)num(c, "G"), gc.per_device_train_batch_size = (int)num(c, "B");
    gc.train.grad_accum = (int)num(c, "GA"), gc.train.seed = 7;
    gc.max_completion_length = (int)num(cases_json, "max_completion_length");
    gc.temperature = (float)num(cases_json, "temperature");
    gc.pad_to_multiple_of = 8;
    gc.loss_type = (RlLossType)rl_loss_type_parse(cJSON_GetObjectItem(c, "loss_type")->valuestring);
    gc.scale_rewards = (RlScaleRewards)rl_scale_rewards_parse(cJSON_GetObjectItem(c, "scale_rewards")->valuestring);
    gc.beta = num(c, "beta"), gc.epsilon = num(c, "epsilon");
    const cJSON *eh = cJSON_GetObjectItem(c, "epsilon_high");
    gc.epsilon_high = cJSON_IsNumber(eh) ? eh->valuedouble : -1;
    gc.num_iterations = (int)num(c, "num_iterations");
    gc.mask_truncated_completions = cJSON_IsTrue(cJSON_GetObjectItem(c, "mask_truncated_completions"));
    gc.normalize_advantages = cJSON_IsTrue(cJSON_GetObjectItem(c, "normalize_advantages"));
    const cJSON *cr = cJSON_GetObjectItem(c, "reward_clip_range");
    if (cJSON_IsArray(cr)) {
        gc.has_reward_clip_range = 1;
        gc.reward_clip_range[0] = cJSON_GetArrayItem(cr, 0)->valuedouble;
        gc.reward_clip_range[1] = cJSON_GetArrayItem(cr, 1)->valuedouble;
    }
    r.n = gc.per_device_train_batch_size * gc.train.grad_accum;
    EXPECT_MSG(grpo_create(&gc, r.m, &r.g, &e) == ST_OK, "%s: %s", name, e.msg);
    if (!r.g) goto done;
    model_alloc_grads(r.m);
    r.np = r.m->tt.n_params;
    r.grad = xmalloc(r.np * sizeof(float)), r.p0 = xmalloc(r.np * sizeof(float)), r.p1 = xmalloc(r.np * sizeof(float));
    r.mh = xmalloc(r.np * sizeof(float)), r.vh = xmalloc(r.np * sizeof(float));
    OptimConfig oc = {.lr = num(cases_json, "lr"), .beta1 = num(cases_json, "adam_beta1"),
                      .beta2 = num(cases_json, "adam_beta2"), .eps = num(cases_json, "adam_epsilon"),
                      .weight_decay = num(cases_json, "weight_decay"), .max_grad_norm = num(cases_json, "max_grad_norm"),
                      .sched = SCHED_CONSTANT, .total_steps = 2};
    Dist one;
    dist_single(&one);
    optim_init(&r.opt, r.m, &oc, &one, 0);
    set_round(&r, &ex, 0, 0);
    check_step(&r, &ex, 1);
    load_ref_state(&r, &ex, 1);
    if (gc.num_iterations == 1) set_round(&r, &ex, 1, 1);  // a new round, generated at step 1's weights
    check_step(&r, &ex, 2);
    if (getenv("GRPO_TORCH_VERBOSE"))
        printf("  %-28s worst rel err: gradient %.2e (min cosine %.9f), moments %.2e, update %.2e\n", name,
               r.worst_grad, r.min_cos, r.worst_mom, r.worst_upd);
    optim_free(&r.opt, r.be);
    free(r.grad), free(r.p0), free(r.p1), free(r.mh), free(r.vh);
done:
    grpo_free(r.g);
    model_free(r.m);
    backend_destroy(r.be);
    st_close(&ex);
}

// The fixture's prompt ids are what the project's prompt loader makes of prompts.jsonl.
static void test_prompt_ids(void) {
    Err e = {0};
    ModelCodec mc;
    EXPECT_MSG(model_codec_load(&mc, DIR_ "/model", NULL, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    PromptConfig pc = {.vocab_size = 384};
    PromptSet ps = {0};
    EXPECT_MSG(prompts_load(DIR_ "/prompts.jsonl", &pc, &mc.codec, &ps, &e) == ST_OK, "%s", e.msg);
    const cJSON *want = cJSON_GetObjectItem(cases_json, "prompt_ids");
    EXPECT(ps.n == cJSON_GetArraySize(want));
    for (int i = 0; i < ps.n && i < cJSON_GetArraySize(want); i++) {
        const cJSON *w = cJSON_GetArrayItem(want, i);
        int same = ps.rows[i].n == cJSON_GetArraySize(w);
        for (int t = 0; same && t < ps.rows[i].n; t++) same = ps.rows[i].ids[t] == cJSON_GetArrayItem(w, t)->valueint;
        EXPECT_MSG(same, "prompt %d: the loader's ids differ from the fixture's", i);
    }
    prompts_free(&ps);
    model_codec_free(&mc);
}

static void test_grpo_beta_iter2(void) { run_case("grpo_beta_iter2"); }
static void test_bnpo_batch_iter2(void) { run_case("bnpo_batch_iter2"); }
static void test_dr_grpo_none_beta(void) { run_case("dr_grpo_none_beta"); }
static void test_dapo_masked_iter2(void) { run_case("dapo_masked_iter2"); }
static void test_rloo_beta(void) { run_case("rloo_beta"); }
static void test_rloo_normalize_clip_iter2(void) { run_case("rloo_normalize_clip_iter2"); }

int main(void) {
    Err e = {0};
    if (json_parse_file(DIR_ "/cases.json", &cases_json, &e) != ST_OK) {
        printf("FAIL grpo_torch: %s\n", e.msg);
        return 1;
    }
    RUN(test_prompt_ids);
    RUN(test_grpo_beta_iter2);
    RUN(test_bnpo_batch_iter2);
    RUN(test_dr_grpo_none_beta);
    RUN(test_dapo_masked_iter2);
    RUN(test_rloo_beta);
    RUN(test_rloo_normalize_clip_iter2);
    cJSON_Delete(cases_json);
    TEST_MAIN_END();
}
