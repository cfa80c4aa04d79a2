// test_grpo.c: GRPO / RLOO at the trainer level.
//  - one optimizer step on fixed rollouts: the loss and every parameter gradient equal an
//    independent computation (each completion scored alone, unpadded, by qwen3_logprob; the loss
//    by rl_math on hand-specified completion masks) for every loss_type, GRPO with the k3 KL and
//    clipping on a second iteration, and RLOO; completions end at either of two EOS ids;
//  - a toy task with a 0/1 verifiable reward: a tiny model's mean reward over the last 10 steps
//    beats the first 10 steps' by at least 0.1 (GRPO and RLOO).
#include "test.h"

#include "core/alloc.h"
#include "core/rng.h"
#include "model/qwen3.h"
#include "train/codec.h"
#include "train/grpo.h"

#include <unistd.h>

static char tmpdir[64];
static char model_dir[128], prompts_path[128];

// A tiny model with the byte-level tokenizer (EOS ids: 2 from generation_config.json, 258 =
// <|im_end|> the tokenizer's) and a prompt file.
static int setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/still-grpo-XXXXXX");
    if (!mkdtemp(tmpdir)) return 0;
    snprintf(model_dir, sizeof model_dir, "%s/m", tmpdir);
    snprintf(prompts_path, sizeof prompts_path, "%s/p.jsonl", tmpdir);
    const char *bin = getenv("STILL_BIN") ? getenv("STILL_BIN") : "./still";
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s init --model_config tests/data/models/qwen3_tied/config.json --output_dir %s --tokenizer "
             "tests/data/sft/tok --seed 3 2>/dev/null",
             bin, model_dir);
    if (system(cmd) != 0) return 0;
    FILE *f = fopen(prompts_path, "w");
    if (!f) return 0;
    for (int i = 0; i < 16; i++) fprintf(f, "{\"prompt\": \"Q%d: say a digit%s\", \"answer\": %d}\n", i, i % 3 ? "" : "!", i % 10);
    fclose(f);
    return 1;
}

#define G 4
#define BMB 4   // completions per micro-batch
#define GA 2
#define NR (BMB * GA)
#define CMAX 6

// Fixed completions: ids 3..255 (bytes) with EOS ids 2 and 258 placed by hand; mlen = the
// completion mask length a reader computes by hand (up to and including the first EOS).
static const int32_t comp[NR][CMAX] = {
    {40, 41, 258, 50, 51, 52},  // EOS 258 in the middle: 3 tokens
    {60, 61, 62, 63, 64, 65},   // truncated: 6
    {70, 2, 71, 72, 0, 0},      // EOS 2: 2
    {80, 81, 82, 83, 2, 0},     // 5
    {90, 258, 0, 0, 0, 0},      // 2
    {100, 101, 102, 103, 104, 105},  // truncated: 6
    {110, 111, 112, 2, 0, 0},   // 4
    {258, 0, 0, 0, 0, 0},       // only EOS: 1
};
static const int clen[NR] = {6, 6, 4, 5, 2, 6, 4, 1};
static const int mlen[NR] = {3, 6, 2, 5, 2, 6, 4, 1};
static const int trunc_[NR] = {0, 1, 0, 0, 0, 1, 0, 0};
static const int prompt_of[NR] = {5, 5, 5, 5, 2, 2, 2, 2};
static const double rew[NR][2] = {{1, 0.5}, {0, NAN}, {0, 0.25}, {1, 0}, {0, 1}, {1, 1}, {NAN, NAN}, {0, 0.5}};

// Log-probs (CMAX) of completion r alone at the model's current weights; with coef (CMAX) also
// accumulates d(sum coef logp) into m->grads. One unpadded row: T = prompt + mask length.
static void score_alone(Model *m, const int32_t *prompt, int pl, int r, float tau, const float *coef, float *logp) {
    Err e = {0};
    int T = pl + mlen[r];
    Plan *p;
    CHECK(plan_get(m, PLAN_TRAIN, 1, T, &p, &e) == ST_OK);
    int32_t ids[64], pos[64], seg[64], tgt[64];
    for (int t = 0; t < T; t++) {
        ids[t] = t < pl ? prompt[t] : comp[r][t - pl];
        pos[t] = t, seg[t] = 1;
        tgt[t] = t >= pl - 1 && t < T - 1 ? comp[r][t - pl + 1] : IGNORE_INDEX;
    }
    qwen3_set_inputs(m, p, ids, pos, seg, tgt, NULL);
    qwen3_forward(m, p);
    Backend *be = m->be;
    float *d = be->alloc(be, (size_t)T * sizeof(float)), *dc = NULL, h[64];
    if (coef) {
        float hc[64] = {0};
        for (int k = 0; k < mlen[r]; k++) hc[pl - 1 + k] = coef[k];
        dc = be->alloc(be, (size_t)T * sizeof(float));
        be->upload(be, dc, hc, (size_t)T * sizeof(float));
    }
    qwen3_logprob(m, p, tau, dc, d);
    be->download(be, h, d, (size_t)T * sizeof(float));
    for (int k = 0; k < CMAX; k++) logp[k] = k < mlen[r] ? h[pl - 1 + k] : 0;
    be->free(be, d);
    if (dc) be->free(be, dc);
}

typedef struct Case {
    const char *name;
    GrpoAlgo algo;
    RlLossType loss_type;
    double beta;
    int iterations;       // check the step of this iteration (1 or 2)
    int mask_truncated;
} Case;

static void check_case(const Case *cs) {
    Err e = {0};
    Backend *be;
    CHECK(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load(model_dir, be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    if (!m) return;
    GrpoConfig c;
    grpo_config_default(&c, cs->algo);
    const char *specs[] = {"length:3", "regex:x"};  // not run: the rewards are given
    c.model_dir = model_dir, c.dataset = prompts_path;
    c.reward_specs = specs, c.n_rewards = 2;
    double w[] = {1.0, 0.5};
    c.reward_weights = w, c.n_reward_weights = 2;
    c.num_generations = G, c.max_completion_length = CMAX, c.per_device_train_batch_size = BMB;
    c.train.grad_accum = GA, c.train.seed = 7;
    c.pad_to_multiple_of = 16, c.temperature = 0.7f;
    c.loss_type = cs->loss_type, c.beta = cs->beta, c.num_iterations = cs->iterations;
    c.epsilon = 0.05, c.epsilon_high = 0.08;
    c.mask_truncated_completions = cs->mask_truncated;
    Grpo *g = NULL;
    EXPECT_MSG(grpo_create(&c, m, &g, &e) == ST_OK, "%s", e.msg);
    if (!g) {
        model_free(m);
        backend_destroy(be);
        return;
    }
    // the independent computation at the initial weights
    float logp0[NR][CMAX], mask[NR][CMAX];
    PromptSet ps = {0};
    {
        ModelCodec mc;
        CHECK(model_codec_load(&mc, model_dir, NULL, &e) == ST_OK);
        PromptConfig pc = {.vocab_size = m->cfg.vocab_size};
        CHECK(prompts_load(prompts_path, &pc, &mc.codec, &ps, &e) == ST_OK);
        model_codec_free(&mc);
    }
    for (int r = 0; r < NR; r++) {
        const PromptRow *pr = &ps.rows[prompt_of[r]];
        score_alone(m, pr->ids, pr->n, r, c.temperature, NULL, logp0[r]);
        for (int k = 0; k < CMAX; k++) mask[r][k] = k < mlen[r] && !(cs->mask_truncated && trunc_[r]) ? 1.0f : 0.0f;
    }
    double total[NR], adv[NR], rflat[NR * 2];
    for (int r = 0; r < NR; r++) rflat[2 * r] = rew[r][0], rflat[2 * r + 1] = rew[r][1];
    rl_reward_sum(total, rflat, w, NR, 2);
    if (cs->algo == GRPO_ALGO_GRPO) {
        rl_grpo_advantages(adv, total, NR, G, RL_SCALE_GROUP, NULL);
    } else {  // RLOO: k1 KL of the generation-time log-probs against the reference (equal here: 0)
        double seq_kl[NR] = {0};
        rl_rloo_advantages(adv, total, seq_kl, cs->beta, NULL, 0, NR, G);
    }
    const int32_t *ids[NR];
    for (int r = 0; r < NR; r++) ids[r] = comp[r];
    EXPECT_MSG(grpo_set_round(g, 0, prompt_of, ids, clen, rflat, &e) == ST_OK, "%s", e.msg);
    for (int r = 0; r < NR; r++)
        EXPECT_MSG(fabs(grpo_round_advantages(g)[r] - adv[r]) < 1e-12, "advantage %d: %g vs %g", r,
                   grpo_round_advantages(g)[r], adv[r]);
    StepSource src = grpo_source(g);
    model_alloc_grads(m);
    size_t np = m->tt.n_params;
    float *got = xmalloc(np * sizeof(float)), *want = xmalloc(np * sizeof(float));
    StepReport rep;
    Optim opt;
    OptimConfig oc = {.lr = 0.02, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .sched = SCHED_CONSTANT, .total_steps = 2};
    Dist one;
    dist_single(&one);
    optim_init(&opt, m, &oc, &one, 0);
    for (int step = 0; step < cs->iterations; step++) {
        memset(&rep, 0, sizeof rep);
        be->zero(be, m->grads, np * sizeof(float));
        EXPECT_MSG(src.step(src.ctx, m, step, &rep, &e) == ST_OK, "%s", e.msg);
        if (step + 1 < cs->iterations) {  // move the weights: the next iteration has ratios != 1
            double gn, lr;
            EXPECT(optim_step(&opt, m, &gn, &lr, &e) == ST_OK);
        }
    }
    be->download(be, got, m->grads, np * sizeof(float));
    // expected loss and gradient: micro-batches in the trainer's order, each completion scored alone
    int it = cs->iterations - 1;
    const int *order = grpo_round_order(g);
    double want_loss = 0, msum = 0;
    for (int r = 0; r < NR; r++)
        for (int k = 0; k < CMAX; k++) msum += mask[r][k];
    RlLossConfig lc = {.loss_type = cs->loss_type, .epsilon_low = 0.05, .epsilon_high = 0.08,
                       .beta = cs->algo == GRPO_ALGO_GRPO ? cs->beta : 0, .max_completion_length = CMAX,
                       .num_items = msum, .num_processes = 1, .grad_accum = GA};
    float lp[NR][CMAX], coef[NR][CMAX];
    for (int r = 0; r < NR; r++) {
        const PromptRow *pr = &ps.rows[prompt_of[r]];
        score_alone(m, pr->ids, pr->n, r, c.temperature, NULL, lp[r]);  // at the current weights
    }
    double clip_region = 0;
    for (int s = 0; s < GA; s++) {
        float mb_lp[BMB * CMAX], mb_old[BMB * CMAX], mb_mask[BMB * CMAX], mb_coef[BMB * CMAX];
        double mb_adv[BMB], old_seq[BMB];
        for (int b = 0; b < BMB; b++) {
            int r = order[s * BMB + b];
            memcpy(mb_lp + b * CMAX, lp[r], sizeof lp[r]);
            memcpy(mb_old + b * CMAX, logp0[r], sizeof logp0[r]);
            memcpy(mb_mask + b * CMAX, mask[r], sizeof mask[r]);
            mb_adv[b] = adv[r];
        }
        RlLossStats st;
        if (cs->algo == GRPO_ALGO_GRPO) {
            // the reference is the initial weights: its log-probs are logp0
            rl_grpo_loss(&lc, mb_coef, NULL, &st, mb_lp, it ? mb_old : NULL, mb_old, NULL, mb_adv, mb_mask, BMB, CMAX);
        } else {
            rl_seq_logp(old_seq, mb_old, mb_mask, BMB, CMAX);
            rl_rloo_loss(&lc, mb_coef, &st, mb_lp, it ? old_seq : NULL, mb_adv, mb_mask, BMB, CMAX);
        }
        want_loss += st.loss;
        clip_region += st.clip_region_sum;
        for (int b = 0; b < BMB; b++) memcpy(coef[order[s * BMB + b]], mb_coef + b * CMAX, sizeof coef[0]);
    }
    EXPECT_MSG(test_rel_err(rep.loss, want_loss, 1e-6) < 1e-4, "%s: loss %.9g, want %.9g", cs->name, rep.loss, want_loss);
    be->zero(be, m->grads, np * sizeof(float));
    for (int r = 0; r < NR; r++) {
        const PromptRow *pr = &ps.rows[prompt_of[r]];
        float tmp[CMAX];
        score_alone(m, pr->ids, pr->n, r, c.temperature, coef[r], tmp);
    }
    be->download(be, want, m->grads, np * sizeof(float));
    double dmax = 0, gmax = 0;
    for (size_t i = 0; i < np; i++) dmax = fmax(dmax, fabs(got[i] - want[i])), gmax = fmax(gmax, fabs(want[i]));
    EXPECT_MSG(gmax > 0 && dmax <= 2e-4 * gmax, "%s: gradient max diff %g, max |grad| %g", cs->name, dmax, gmax);
    if (it > 0) EXPECT_MSG(clip_region > 0, "%s: no token was clipped: the check would not see clipping", cs->name);
    optim_free(&opt, be);
    free(got), free(want);
    prompts_free(&ps);
    grpo_free(g);
    model_free(m);
    backend_destroy(be);
}

static void test_step_equals_rl_math(void) {
    static const Case cases[] = {
        {"dapo", GRPO_ALGO_GRPO, RL_LOSS_DAPO, 0, 1, 0},
        {"grpo", GRPO_ALGO_GRPO, RL_LOSS_GRPO, 0, 1, 0},
        {"bnpo", GRPO_ALGO_GRPO, RL_LOSS_BNPO, 0, 1, 0},
        {"dr_grpo", GRPO_ALGO_GRPO, RL_LOSS_DR_GRPO, 0, 1, 0},
        {"dapo_masked_truncated", GRPO_ALGO_GRPO, RL_LOSS_DAPO, 0, 1, 1},
        {"dapo_beta_iteration2", GRPO_ALGO_GRPO, RL_LOSS_DAPO, 0.04, 2, 0},
        {"grpo_beta_iteration2", GRPO_ALGO_GRPO, RL_LOSS_GRPO, 0.1, 2, 1},
        {"rloo", GRPO_ALGO_RLOO, RL_LOSS_DAPO, 0.05, 1, 0},
        {"rloo_iteration2", GRPO_ALGO_RLOO, RL_LOSS_DAPO, 0.05, 2, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) check_case(&cases[i]);
}

static double mean_reward(const char *metrics, int from, int to) {
    FILE *f = fopen(metrics, "r");
    if (!f) return NAN;
    char line[8192];
    double s = 0;
    int n = 0, step = 0;
    while (fgets(line, sizeof line, f)) {
        step++;
        const char *p = strstr(line, "\"reward\":");
        if (!p || step <= from || step > to) continue;
        s += atof(p + 9), n++;
    }
    fclose(f);
    return n ? s / n : NAN;
}

// Reward 1 for a completion containing a digit (about 1 in 5 at the start), 40 steps.
static void toy_task(GrpoAlgo algo) {
    GrpoConfig c;
    grpo_config_default(&c, algo);
    const char *specs[] = {"regex:[0-9]"};
    char out[160];
    snprintf(out, sizeof out, "%s/out_%d", tmpdir, (int)algo);
    c.model_dir = model_dir, c.dataset = prompts_path, c.backend = "cpu", c.threads = 1;
    c.reward_specs = specs, c.n_rewards = 1;
    c.num_generations = algo == GRPO_ALGO_RLOO ? 4 : 8;
    c.max_completion_length = 8, c.per_device_train_batch_size = 32, c.pad_to_multiple_of = 16;
    c.train.output_dir = out, c.train.max_steps = 40, c.train.logging_steps = 1, c.train.save_steps = 0;
    c.train.opt.lr = 3e-3, c.train.opt.sched = SCHED_CONSTANT, c.train.seed = 42;
    TrainResult res;
    Err e = {0};
    EXPECT_MSG(grpo_run(&c, &res, &e) == ST_OK, "%s", e.msg);
    char path[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    double first = mean_reward(path, 0, 10), last = mean_reward(path, 30, 40);
    EXPECT_MSG(last - first >= 0.1, "mean reward of the first 10 steps %.3f, of the last 10 %.3f", first, last);
    printf("# %s: mean reward steps 1-10 %.3f, 31-40 %.3f\n", algo == GRPO_ALGO_RLOO ? "rloo" : "grpo", first, last);
}

static void test_toy_task_grpo(void) { toy_task(GRPO_ALGO_GRPO); }
static void test_toy_task_rloo(void) { toy_task(GRPO_ALGO_RLOO); }

int main(void) {
    if (!setup()) {
        printf("FAIL setup: could not create the tiny model with still init\n");
        return 1;
    }
    RUN(test_step_equals_rl_math);
    RUN(test_toy_task_grpo);
    RUN(test_toy_task_rloo);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
