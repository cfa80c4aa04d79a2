// grpo.c: GRPO and RLOO = prompts (rollout.h) + the generation engine + reward functions +
// rl_math + qwen3_logprob, plugged into the shared trainer loop as one StepSource.
#include "grpo.h"
#include "ep.h"
#include "tp.h"
#include "preflight.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "../core/log.h"
#include "../tokenizer/chat.h"
#include "../core/rng.h"
#include "../model/qwen3.h"
#include "../tokenizer/tokenizer.h"
#include "codec.h"
#include "metrics.h"

#include <math.h>
#include <string.h>

struct Grpo {
    GrpoConfig *c;
    Model *m;                // the policy (not owned)
    Model *ref;              // frozen initial weights (beta != 0)
    ModelCodec codec;
    cJSON *kwargs;
    PromptSet ps;
    char **ptext;            // (n prompts) prompt text decoded with skip_special_tokens
    RewardSet rs;
    GenConfig gen;
    int G, B, GA, mu, C;     // generations, completions per micro-batch, micro-batches, iterations, completion slots
    Dist *dist;              // never NULL (one's own when the config has none)
    Dist one;
    int W, R;                // world size, rank
    int n;                   // completions per round = W * B * GA
    int n_local;             // completions this rank generates = B * GA: rows [R * n_local, (R + 1) * n_local)
    int ppr;                 // prompts per round = n / G
    int rounds_per_epoch;
    int Tmax;                // longest scoring row (B, Tmax) any micro-batch can have
    int P_min;               // expert parallel: the longest prompt (every scoring batch (B, Tmax))
    int *perm, perm_epoch;   // (n prompts) prompt order of an epoch
    // the current round
    int round;               // -1: none
    int *prompt;             // (n) prompt index of each completion
    int32_t *ids;            // (n, C) completion ids
    int *len;                // (n) tokens generated
    int *mlen;               // (n) tokens counted by the completion mask (up to the first EOS)
    int *truncated;          // (n) 1 when the completion does not end with an EOS id
    double *rewards;         // (n, K)
    double *total;           // (n)
    double *adv;             // (n)
    float *mask;             // (n, C)
    float *ref_logp;         // (n, C) beta != 0
    float *old_logp;         // (n, C) log-probs at the weights the round was generated with
    int have_old;
    double num_items;        // mask sum of the round (dapo)
    int *order;              // (n) completions in micro-batch order (rank r: rows [r*B, (r+1)*B) of each W*B)
    int *mine;               // (B * GA) the rows this rank trains, ascending
    // per micro-batch buffers
    float *d_logp, *d_coef;  // (B * Tmax) device
    float *h_flat, *h_ent;   // (B * Tmax) host
    float *mb_logp, *mb_coef, *mb_mask, *mb_old, *mb_ref;  // (B, C)
    double *mb_adv, *mb_seq; // (B)
    double *mb_stats;        // (GA, 9) per micro-batch sums, summed over the ranks
    const int32_t **mb_p, **mb_c;  // (B) a scoring batch's prompts and completions
    int *mb_pl, *mb_cl;      // (B) their lengths
    // this rank's prompts of a generation round
    const int32_t **gen_p;   // (ppr / W)
    int *gen_pl, *gen_keys;  // (ppr / W)
};

void grpo_config_default(GrpoConfig *c, GrpoAlgo algo) {
    memset(c, 0, sizeof *c);
    c->algo = algo;
    c->dtype = -1, c->save_dtype = -1;
    c->shuffle_dataset = 1;
    c->reward_timeout = 60;
    c->num_generations = algo == GRPO_ALGO_RLOO ? 2 : 8;
    c->max_completion_length = 512;
    c->temperature = 1.0f, c->top_p = 1.0, c->top_k = 0, c->min_p = 0, c->repetition_penalty = 1.0f;
    c->pad_to_multiple_of = 128;
    c->per_device_train_batch_size = 8;
    c->beta = algo == GRPO_ALGO_RLOO ? 0.05 : 0.0;
    c->epsilon = 0.2, c->epsilon_high = -1;
    c->num_iterations = 1;
    c->scale_rewards = RL_SCALE_GROUP;
    c->loss_type = RL_LOSS_DAPO;
    trainer_config_trl_default(&c->train, 1e-6);
}

static const char *loss_name(const GrpoConfig *c) {
    static const char *names[] = {"grpo", "bnpo", "dr_grpo", "dapo"};
    return c->algo == GRPO_ALGO_RLOO ? "rloo" : names[c->loss_type];
}

int grpo_prompts(const Grpo *g) { return g->ps.n; }
const int *grpo_round_order(const Grpo *g) { return g->order; }
const double *grpo_round_advantages(const Grpo *g) { return g->adv; }

static int is_eos(const Grpo *g, int32_t id) {
    for (int k = 0; k < g->gen.n_eos; k++)
        if (g->gen.eos[k] == id) return 1;
    return 0;
}

// ---- log-probs of completion tokens ----------------------------------------------------------

// Rows rows[0..B) of the round as a scoring batch (B rows, T = padded longest prompt + C). A
// completion that mask_truncated_completions masks keeps only its prompt: TRL's attention_mask
// is cat(prompt_mask, completion_mask) with that row's completion_mask zeroed, which takes its
// tokens out of a mixture of experts' load-balancing loss (nothing else reads them: mask 0).
static Status build_batch(Grpo *g, const int *rows, ScoreBatch *sb, Err *e) {
    const int32_t **pp = g->mb_p, **cc = g->mb_c;
    int *pl = g->mb_pl, *cl = g->mb_cl;
    for (int b = 0; b < g->B; b++) {
        int i = rows[b];
        const PromptRow *pr = &g->ps.rows[g->prompt[i]];
        pp[b] = pr->ids, pl[b] = pr->n;
        cc[b] = g->ids + (size_t)i * g->C;
        cl[b] = g->c->mask_truncated_completions && g->truncated[i] ? 0 : g->mlen[i];
    }
    TRY(score_batch_build(sb, pp, pl, cc, cl, g->B, g->C, g->P_min, g->c->pad_to_multiple_of, g->gen.eos, g->gen.n_eos,
                          e));
    CHECK(sb->T <= g->Tmax && sb->B == g->B);
    return ST_OK;
}

// Flat head output (B*T) -> completion coordinates (B, C).
static void gather_completion(const ScoreBatch *sb, const float *flat, float *out, int C) {
    for (int b = 0; b < sb->B; b++)
        for (int k = 0; k < C; k++)
            out[(size_t)b * C + k] = k < sb->comp_len[b] ? flat[(size_t)b * sb->T + sb->P - 1 + k] : 0.0f;
}

static void scatter_completion(const ScoreBatch *sb, const float *in, float *flat, int C) {
    memset(flat, 0, (size_t)sb->B * sb->T * sizeof(float));
    for (int b = 0; b < sb->B; b++)
        for (int k = 0; k < C && k < sb->comp_len[b]; k++) flat[(size_t)b * sb->T + sb->P - 1 + k] = in[(size_t)b * C + k];
}

// Forward-only log-probs of the round's completions under model mm (the reference, or the
// policy at generation time) -> out (n, C).
static Status score_round(Grpo *g, Model *mm, float *out, Err *e) {
    Backend *be = mm->be;
    for (int s = 0; s < g->GA; s++) {
        const int *rows = g->mine + (size_t)s * g->B;  // (B)
        ScoreBatch sb = {0};
        TRY(build_batch(g, rows, &sb, e));
        Plan *p;
        Status st = plan_get(mm, PLAN_SCORE, sb.B, sb.T, &p, e);
        if (st == ST_OK) {
            qwen3_set_inputs(mm, p, sb.ids, sb.pos, sb.seg, sb.targets, NULL);
            qwen3_forward(mm, p);
            qwen3_logprob(mm, p, g->c->temperature, NULL, g->d_logp);
            be->download(be, g->h_flat, g->d_logp, (size_t)sb.B * sb.T * sizeof(float));
            gather_completion(&sb, g->h_flat, g->mb_logp, g->C);
            for (int b = 0; b < g->B; b++)
                memcpy(out + (size_t)rows[b] * g->C, g->mb_logp + (size_t)b * g->C, (size_t)g->C * sizeof(float));
        }
        score_batch_free(&sb);
        TRY(st);
    }
    return ST_OK;
}

// ---- a generation round ----------------------------------------------------------------------

static void prompt_order(Grpo *g, int epoch) {
    if (g->perm_epoch == epoch) return;
    int n = g->ps.n;
    for (int i = 0; i < n; i++) g->perm[i] = i;
    if (g->c->shuffle_dataset) {  // Fisher-Yates keyed by (seed, epoch)
        Rng r;
        rng_init(&r, g->c->train.seed, 2000u + (uint64_t)epoch);
        for (int i = n - 1; i > 0; i--) {
            int j = (int)rng_below(&r, (uint64_t)i + 1), t = g->perm[i];
            g->perm[i] = g->perm[j], g->perm[j] = t;
        }
    }
    g->perm_epoch = epoch;
}

static double nanmean(const double *x, int n, int stride) {
    double s = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[(size_t)i * stride])) s += x[(size_t)i * stride], k++;
    return k ? s / k : NAN;
}

// Bessel-corrected, NaN-aware (TRL's nanstd).
static double nanstd(const double *x, int n, int stride) {
    double mu = nanmean(x, n, stride), s = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[(size_t)i * stride])) s += (x[(size_t)i * stride] - mu) * (x[(size_t)i * stride] - mu), k++;
    return k > 1 ? sqrt(s / (k - 1)) : NAN;
}

// Masks, rewards, advantages and the micro-batch order of the round in g->ids / g->len.
static Status score_and_advantage(Grpo *g, int round, const double *given_rewards, StepReport *r, Err *e) {
    int n = g->n, K = g->rs.n, C = g->C;
    Tokenizer *tok = g->codec.tok;
    for (int i = 0; i < n; i++) {
        const int32_t *ids = g->ids + (size_t)i * C;
        g->mlen[i] = rollout_mask_len(ids, g->len[i], g->gen.eos, g->gen.n_eos);
        g->truncated[i] = !(g->mlen[i] > 0 && is_eos(g, ids[g->mlen[i] - 1]));
        int keep = !(g->c->mask_truncated_completions && g->truncated[i]);
        for (int k = 0; k < C; k++) g->mask[(size_t)i * C + k] = keep && k < g->mlen[i] ? 1.0f : 0.0f;
    }
    if (given_rewards) {
        memcpy(g->rewards, given_rewards, (size_t)n * K * sizeof(double));
    } else {  // each rank scores the completions it generated; the sums gather them (NaN stays NaN)
        int lo = g->R * g->n_local, nl = g->n_local;
        RewardInput *in = xcalloc((size_t)nl, sizeof(RewardInput));
        char **texts = xcalloc((size_t)nl, sizeof(char *));
        for (int q = 0; q < nl; q++) {
            int i = lo + q;
            const int32_t *ids = g->ids + (size_t)i * C;
            texts[q] = tokenizer_decode(tok, ids, (size_t)g->mlen[i], 1);
            in[q] = (RewardInput){.prompt = g->ptext[g->prompt[i]], .completion = texts[q], .ids = ids,
                                  .n_ids = g->mlen[i], .row = g->ps.rows[g->prompt[i]].row};
        }
        memset(g->rewards, 0, (size_t)n * K * sizeof(double));
        Status st = rewards_score(&g->rs, in, nl, g->rewards + (size_t)lo * K, e);
        for (int q = 0; q < nl; q++) free(texts[q]);
        free(texts);
        free(in);
        TRY(st);
        TRY(dist_allreduce_sum_host_d(g->dist, g->rewards, (size_t)n * K, e));
    }
    rl_reward_sum(g->total, g->rewards, g->rs.weights, n, K);
    int n_zero = 0;
    double reward_std;
    if (g->c->algo == GRPO_ALGO_GRPO) {
        rl_grpo_advantages(g->adv, g->total, n, g->G, g->c->scale_rewards, &n_zero);
        double s = 0;  // TRL's reward_std: the mean over completions of the std they were scaled by
        for (int q = 0; q < n / g->G; q++) {
            double sd = g->c->scale_rewards == RL_SCALE_BATCH ? nanstd(g->total, n, 1)
                                                              : nanstd(g->total + (size_t)q * g->G, g->G, 1);
            s += sd * g->G;
        }
        reward_std = s / n;
    } else {
        double *seq_kl = NULL;
        if (g->c->beta != 0) {  // log-probs exist for the rows this rank trains: gather the sums
            seq_kl = xcalloc((size_t)n, sizeof(double));
            double *all = xmalloc((size_t)n * sizeof(double));
            rl_rloo_seq_kl(all, g->old_logp, g->ref_logp, g->mask, n, C);
            for (int q = 0; q < g->B * g->GA; q++) seq_kl[g->mine[q]] = all[g->mine[q]];
            free(all);
            TRY(dist_allreduce_sum_host_d(g->dist, seq_kl, (size_t)n, e));
        }
        rl_rloo_advantages(g->adv, g->total, seq_kl, g->c->beta, g->c->has_reward_clip_range ? g->c->reward_clip_range : NULL,
                           g->c->normalize_advantages, n, g->G);
        free(seq_kl);
        for (int q = 0; q < n / g->G; q++) n_zero += nanstd(g->total + (size_t)q * g->G, g->G, 1) == 0 ? g->G : 0;
        reward_std = nanstd(g->total, n, 1);
    }
    g->num_items = 0;
    for (size_t i = 0; i < (size_t)n * C; i++) g->num_items += g->mask[i];
    // metrics of the round (TRL names)
    double ntok = 0, lsum = 0, lmin = 1e30, lmax = 0, tsum = 0, tmin = 1e30, tmax = 0;
    int nclip = 0, nterm = 0;
    for (int i = 0; i < n; i++) {
        ntok += g->ps.rows[g->prompt[i]].n + g->mlen[i];
        lsum += g->mlen[i], lmin = fmin(lmin, g->mlen[i]), lmax = fmax(lmax, g->mlen[i]);
        if (g->truncated[i]) nclip++;
        else nterm++, tsum += g->mlen[i], tmin = fmin(tmin, g->mlen[i]), tmax = fmax(tmax, g->mlen[i]);
    }
    r->n_tokens += ntok;
    step_report_add(r, "completions/mean_length", lsum / n, 1);
    step_report_add(r, "completions/min_length", lmin, 1);
    step_report_add(r, "completions/max_length", lmax, 1);
    step_report_add(r, "completions/clipped_ratio", (double)nclip / n, 1);
    step_report_add(r, "completions/mean_terminated_length", nterm ? tsum / nterm : 0, 1);
    step_report_add(r, "completions/min_terminated_length", nterm ? tmin : 0, 1);
    step_report_add(r, "completions/max_terminated_length", nterm ? tmax : 0, 1);
    for (int k = 0; k < K; k++) {
        RewardFn *f = &g->rs.fns[k];
        step_report_add(r, f->metric_mean, nanmean(g->rewards + k, n, K), 1);
        step_report_add(r, f->metric_std, nanstd(g->rewards + k, n, K), 1);
    }
    step_report_add(r, "reward", nanmean(g->total, n, 1), 1);
    step_report_add(r, "reward_std", reward_std, 1);
    step_report_add(r, "frac_reward_zero_std", (double)n_zero / n, 1);
    if (g->c->algo == GRPO_ALGO_RLOO && g->c->beta != 0) {
        double kl = 0;
        for (int q = 0; q < g->B * g->GA; q++)
            for (size_t k = (size_t)g->mine[q] * C; k < (size_t)(g->mine[q] + 1) * C; k++)
                kl += g->mask[k] * (g->old_logp[k] - g->ref_logp[k]);
        TRY(dist_allreduce_sum_host_d(g->dist, &kl, 1, e));
        step_report_add(r, "kl", kl / fmax(1.0, g->num_items), 1);
    }
    return ST_OK;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

// The micro-batch order: the round shuffled, keyed by (seed, round) (TRL shuffles the generation
// batch before splitting it into steps); this rank's rows of it.
static void round_order(Grpo *g, int round) {
    int n = g->n, B = g->B;
    for (int i = 0; i < n; i++) g->order[i] = i;
    Rng rg;
    rng_init(&rg, g->c->train.seed, 3000000u + (uint64_t)round);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(&rg, (uint64_t)i + 1), t = g->order[i];
        g->order[i] = g->order[j], g->order[j] = t;
    }
    for (int s = 0; s < g->GA; s++)
        for (int b = 0; b < B; b++) g->mine[s * B + b] = g->order[((size_t)s * g->W + g->R) * B + b];
    qsort(g->mine, (size_t)B * g->GA, sizeof(int), cmp_int);
}

// Reference (and, for RLOO's KL reward, generation-time) log-probs of the round, then rewards.
static Status finish_round(Grpo *g, int round, const double *given_rewards, StepReport *r, Err *e) {
    g->have_old = 0;
    round_order(g, round);
    // masks first: the scoring batches count completion tokens up to the first EOS
    for (int i = 0; i < g->n; i++) g->mlen[i] = rollout_mask_len(g->ids + (size_t)i * g->C, g->len[i], g->gen.eos, g->gen.n_eos);
    if (g->c->beta != 0) {
        TRY(score_round(g, g->ref, g->ref_logp, e));
        if (g->c->algo == GRPO_ALGO_RLOO) {
            TRY(score_round(g, g->m, g->old_logp, e));
            g->have_old = 1;
        }
    }
    TRY(score_and_advantage(g, round, given_rewards, r, e));
    g->round = round;
    return ST_OK;
}

static uint64_t round_seed(uint64_t seed, int round) {
    uint32_t ctr[4] = {(uint32_t)round, 0x67727030u, 0, 0}, out[4];
    philox4x32(out, seed, ctr);
    return ((uint64_t)out[0] << 32) | out[1];
}

// One line per completion of the round (TRL's log_completions, as a file): step, prompt index,
// completion ids and text, total reward and advantage.
static Status log_round(Grpo *g, int round, Err *e) {
    if (!g->c->log_completions || !dist_lead(g->dist)) return ST_OK;
    TRY(dir_create(g->c->train.output_dir, e));
    char *path = path_join(g->c->train.output_dir, "completions.jsonl");
    FILE *f = fopen(path, round == 0 ? "w" : "a");
    free(path);
    if (!f) return err_set(e, ST_EIO, "%s/completions.jsonl: cannot open for writing", g->c->train.output_dir);
    for (int i = 0; i < g->n; i++) {
        const int32_t *ids = g->ids + (size_t)i * g->C;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", round * g->mu + 1);
        cJSON_AddNumberToObject(o, "prompt_index", g->prompt[i]);
        cJSON_AddItemToObject(o, "completion_ids", cJSON_CreateIntArray(ids, g->len[i]));
        char *text = tokenizer_decode(g->codec.tok, ids, (size_t)g->mlen[i], 1);
        cJSON_AddStringToObject(o, "completion", text ? text : "");
        free(text);
        cJSON_AddNumberToObject(o, "reward", g->total[i]);
        cJSON_AddNumberToObject(o, "advantage", g->adv[i]);
        char *line = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", line);
        free(line);
        cJSON_Delete(o);
    }
    return fclose(f) == 0 ? ST_OK : err_set(e, ST_EIO, "%s/completions.jsonl: write failed", g->c->train.output_dir);
}

// This rank generates prompts [R * pl, (R + 1) * pl) of the round's ppr (pl = ppr / W), drawing
// as one process would (prompt keys offset by the first), then every rank gets every completion.
static Status generate_round(Grpo *g, int round, StepReport *r, Err *e) {
    int epoch = round / g->rounds_per_epoch, j = round % g->rounds_per_epoch;
    int npl = g->ppr / g->W, first = j * g->ppr + g->R * npl, lo = g->R * g->n_local;
    prompt_order(g, epoch);
    const int32_t **pp = g->gen_p;
    int *pl = g->gen_pl, *keys = g->gen_keys;
    for (int k = 0; k < npl; k++) {
        const PromptRow *pr = &g->ps.rows[g->perm[first + k]];
        pp[k] = pr->ids, pl[k] = pr->n, keys[k] = g->R * npl + k;
    }
    GenConfig gc = g->gen;
    gc.seed = round_seed(g->c->train.seed, round);
    gc.prompt_keys = keys;
    GenSeq *seqs = NULL;
    GenStats gs;
    TRY(gen_generate(g->m, &gc, pp, pl, npl, &seqs, &gs, e));
    for (int q = 0; q < g->n_local; q++) {
        GenSeq *s = &seqs[q];
        int i = lo + q;
        g->prompt[i] = g->perm[first + s->prompt_index];
        g->len[i] = MIN(s->n, g->C);
        memset(g->ids + (size_t)i * g->C, 0, (size_t)g->C * sizeof(int32_t));
        memcpy(g->ids + (size_t)i * g->C, s->ids, (size_t)g->len[i] * sizeof(int32_t));
    }
    gen_seqs_free(seqs, g->n_local);
    step_report_tick(r, "scoring rewards", 0, 0);
    if (g->W > 1) {  // equal shares: gather in place
        size_t nl = (size_t)g->n_local;
        TRY(dist_allgather_host(g->dist, g->prompt, g->prompt + lo, nl * sizeof(int), e));
        TRY(dist_allgather_host(g->dist, g->len, g->len + lo, nl * sizeof(int), e));
        TRY(dist_allgather_host(g->dist, g->ids, g->ids + (size_t)lo * g->C, nl * g->C * sizeof(int32_t), e));
    }
    TRY(finish_round(g, round, NULL, r, e));
    return log_round(g, round, e);
}

Status grpo_set_round(Grpo *g, int step, const int *prompt, const int32_t *const *ids, const int *lens,
                      const double *rewards, Err *e) {
    for (int i = 0; i < g->n; i++) {
        if (prompt[i] < 0 || prompt[i] >= g->ps.n)
            return err_set(e, ST_EINVAL, "round row %d: prompt %d outside [0, %d)", i, prompt[i], g->ps.n);
        if (lens[i] < 0 || lens[i] > g->C)
            return err_set(e, ST_EINVAL, "round row %d: %d completion tokens, max_completion_length %d", i, lens[i], g->C);
        g->prompt[i] = prompt[i];
        g->len[i] = lens[i];
        memcpy(g->ids + (size_t)i * g->C, ids[i], (size_t)lens[i] * sizeof(int32_t));
    }
    StepReport scratch;
    memset(&scratch, 0, sizeof scratch);
    return finish_round(g, step / g->mu, rewards, &scratch, e);
}

// ---- one optimizer step ------------------------------------------------------------------------

static Status grpo_step(void *ctx, Model *m, int step, StepReport *r, Err *e) {
    Grpo *g = ctx;
    const GrpoConfig *c = g->c;
    Backend *be = m->be;
    int round = step / g->mu, it = step % g->mu, B = g->B, C = g->C;
    double t0 = metrics_now();
    if (g->round != round) {
        if (it != 0)
            return err_set(e, ST_EINVAL, "step %d is iteration %d of generation round %d: a run can only resume at the "
                                         "start of a round (save_steps a multiple of num_iterations %d)", step + 1,
                           it + 1, round + 1, g->mu);
        step_report_tick(r, "generating completions", 0, 0);
        TRY(generate_round(g, round, r, e));
    }
    double t1 = metrics_now();
    // iteration 0 runs at the weights the round was generated with: old = sg(current), ratio 1
    int use_old = it > 0;
    int store_old = it == 0 && g->mu > 1;
    int two_pass = use_old || (c->algo == GRPO_ALGO_GRPO && c->beta != 0);
    RlLossConfig lc = {.loss_type = c->loss_type, .epsilon_low = c->epsilon,
                       .epsilon_high = c->epsilon_high >= 0 ? c->epsilon_high : c->epsilon,
                       .beta = c->algo == GRPO_ALGO_GRPO ? c->beta : 0, .max_completion_length = C,
                       .num_items = g->num_items, .num_processes = 1, .grad_accum = g->GA * g->W};
    // The ranks' gradients are summed: dapo divides by the round's global token count
    // (num_processes 1); the per-micro-batch means of the other losses also divide by W, as
    // DDP's gradient average does. Per micro-batch (global after the sum): loss, entropy sum,
    // mask sum, kl sum, loss mask sum, clip low / high / region sums, the load-balancing loss (MoE
    // with output_router_logits: each micro-batch adds router_aux_loss_coef * its forward's aux
    // / (GA W), the gradient through moe_aux_scale, as TRL's GRPO loss adds coef * aux / GA).
    double *mb = g->mb_stats;
    memset(mb, 0, (size_t)g->GA * 9 * sizeof(double));
    int aux = m->cfg.num_experts > 0 && m->cfg.output_router_logits;
    m->moe_aux_scale = 1.0 / ((double)g->GA * g->W);
    for (int s = 0; s < g->GA; s++) {
        const int *rows = g->order + ((size_t)s * g->W + g->R) * B;
        ScoreBatch sb = {0};
        TRY(build_batch(g, rows, &sb, e));
        Plan *p;
        int before = m->plans.n;
        Status st = plan_get(m, PLAN_TRAIN, sb.B, sb.T, &p, e);
        if (st != ST_OK) {
            score_batch_free(&sb);
            return st;
        }
        if (m->plans.n > before)
            log_info("plan %d built: train B=%d T=%d, %.1f MiB", m->plans.n, sb.B, sb.T, p->bytes / 1048576.0);
        for (int b = 0; b < B; b++) {
            int i = rows[b];
            memcpy(g->mb_mask + (size_t)b * C, g->mask + (size_t)i * C, (size_t)C * sizeof(float));
            if (c->beta != 0) memcpy(g->mb_ref + (size_t)b * C, g->ref_logp + (size_t)i * C, (size_t)C * sizeof(float));
            if (use_old) memcpy(g->mb_old + (size_t)b * C, g->old_logp + (size_t)i * C, (size_t)C * sizeof(float));
            g->mb_adv[b] = g->adv[i];
        }
        qwen3_set_inputs(m, p, sb.ids, sb.pos, sb.seg, sb.targets, NULL);
        qwen3_forward(m, p);
        double aux_mb = aux ? qwen3_moe_aux_loss(m, p) : 0;
        size_t N = (size_t)sb.B * sb.T;
        if (two_pass) {  // the coefficients depend on the log-probs: compute them first
            qwen3_logprob(m, p, c->temperature, NULL, g->d_logp);
            be->download(be, g->h_flat, g->d_logp, N * sizeof(float));
            gather_completion(&sb, g->h_flat, g->mb_logp, C);
        } else {
            memset(g->mb_logp, 0, (size_t)B * C * sizeof(float));  // unused: ratio 1, no KL
        }
        RlLossStats ls;
        if (c->algo == GRPO_ALGO_GRPO) {
            rl_grpo_loss(&lc, g->mb_coef, NULL, &ls, g->mb_logp, use_old ? g->mb_old : NULL, c->beta != 0 ? g->mb_ref : NULL,
                         NULL, g->mb_adv, g->mb_mask, B, C);
        } else {
            if (use_old) rl_seq_logp(g->mb_seq, g->mb_old, g->mb_mask, B, C);
            rl_rloo_loss(&lc, g->mb_coef, &ls, g->mb_logp, use_old ? g->mb_seq : NULL, g->mb_adv, g->mb_mask, B, C);
        }
        scatter_completion(&sb, g->mb_coef, g->h_flat, C);
        be->upload(be, g->d_coef, g->h_flat, N * sizeof(float));
        qwen3_logprob(m, p, c->temperature, g->d_coef, g->d_logp);
        if (store_old) {
            be->download(be, g->h_flat, g->d_logp, N * sizeof(float));
            gather_completion(&sb, g->h_flat, g->mb_logp, C);
            for (int b = 0; b < B; b++)
                memcpy(g->old_logp + (size_t)rows[b] * C, g->mb_logp + (size_t)b * C, (size_t)C * sizeof(float));
        }
        be->download(be, g->h_ent, p->row_entropy, N * sizeof(float));
        double hs = 0;
        gather_completion(&sb, g->h_ent, g->mb_logp, C);  // entropies in completion coordinates
        for (size_t k = 0; k < (size_t)B * C; k++) hs += g->mb_mask[k] * g->mb_logp[k];
        double msum = 0;
        for (size_t k = 0; k < (size_t)B * C; k++) msum += g->mb_mask[k];
        score_batch_free(&sb);
        double *x = mb + (size_t)s * 9;
        x[0] = ls.loss, x[1] = hs, x[2] = msum, x[3] = ls.kl_sum, x[4] = ls.mask_sum;
        x[5] = ls.clip_low_sum, x[6] = ls.clip_high_sum, x[7] = ls.clip_region_sum, x[8] = aux_mb;
        step_report_tick(r, "micro-batch", s + 1, g->GA);
    }
    TRY(dist_allreduce_sum_host_d(g->dist, mb, (size_t)g->GA * 9, e));
    for (int s = 0; s < g->GA; s++) {
        const double *x = mb + (size_t)s * 9;
        r->loss += x[0];
        if (aux) {  // x[8]: summed over the ranks
            double a = x[8] * m->moe_aux_scale;
            r->loss += m->cfg.router_aux_loss_coef * a;
            step_report_add(r, "aux_loss", a * g->GA, 1);
        }
        double den = fmax(1.0, x[4]);
        step_report_add(r, "entropy", x[1] / fmax(1.0, x[2]), 1);
        if (c->algo == GRPO_ALGO_GRPO && c->beta != 0) step_report_add(r, "kl", x[3] / den, 1);
        step_report_add(r, "clip_ratio/low_mean", x[5] / den, 1);
        step_report_add(r, "clip_ratio/high_mean", x[6] / den, 1);
        step_report_add(r, "clip_ratio/region_mean", x[7] / den, 1);
    }
    if (store_old) g->have_old = 1;
    double t2 = metrics_now();
    step_report_add(r, "time/generation", t1 - t0, 1);
    step_report_add(r, "time/training", t2 - t1, 1);
    return ST_OK;
}

StepSource grpo_source(Grpo *g) {
    StepSource s = {.ctx = g, .what = "prompts", .n_items = g->ps.n, .steps_per_epoch = g->rounds_per_epoch * g->mu,
                    .micro_batches = g->rounds_per_epoch * g->GA, .batch_size = g->B, .grad_accum = g->GA,
                    .step = grpo_step, .evaluate = NULL, .dist = g->dist, .sharded_ok = 1,
                    .sharded_base_ok = 1};
    return s;
}

// ---- setup -------------------------------------------------------------------------------------

Status grpo_check_config(const GrpoConfig *c, Err *e) {
    if (c->num_generations < 2)
        return err_set(e, ST_EUSAGE, "--num_generations %d: at least 2 completions per prompt are needed for a "
                                     "baseline", c->num_generations);
    if (c->per_device_train_batch_size <= 0 || c->train.grad_accum <= 0)
        return err_set(e, ST_EUSAGE, "--per_device_train_batch_size and --gradient_accumulation_steps must be positive");
    long long n = (long long)c->per_device_train_batch_size * c->train.grad_accum;
    int world = c->dist && c->dist->world > 1 ? c->dist->world : 1;
    if (n * world > (1 << 24))
        return err_set(e, ST_EUSAGE, "the generation batch (per_device_train_batch_size %d x gradient_accumulation_steps "
                                     "%d%s = %lld completions) is more than %d", c->per_device_train_batch_size,
                       c->train.grad_accum, world > 1 ? " x ranks" : "", n * world, 1 << 24);
    if (n % c->num_generations)
        return err_set(e, ST_EUSAGE, "the generation batch (per_device_train_batch_size %d x gradient_accumulation_steps "
                                     "%d = %lld completions%s) must be a multiple of --num_generations %d",
                       c->per_device_train_batch_size, c->train.grad_accum, n, world > 1 ? " per rank" : "",
                       c->num_generations);
    if (c->max_completion_length <= 0) return err_set(e, ST_EUSAGE, "--max_completion_length must be positive");
    if (c->num_iterations <= 0) return err_set(e, ST_EUSAGE, "--num_iterations must be positive");
    if (c->epsilon < 0) return err_set(e, ST_EUSAGE, "--epsilon must be >= 0");
    if (c->beta < 0) return err_set(e, ST_EUSAGE, "--beta must be >= 0");
    if (!(c->temperature > 0)) return err_set(e, ST_EUSAGE, "--temperature must be positive");
    return ST_OK;
}

Status grpo_create(GrpoConfig *c, Model *m, Grpo **out, Err *e) {
    *out = NULL;
    TRY(grpo_check_config(c, e));
    Grpo *g = xcalloc(1, sizeof *g);
    g->c = c, g->m = m, g->round = -1, g->perm_epoch = -1;
    g->G = c->num_generations, g->B = c->per_device_train_batch_size, g->GA = c->train.grad_accum;
    g->mu = c->num_iterations, g->C = c->max_completion_length;
    if (c->dist) g->dist = c->dist;
    else dist_single(&g->one), g->dist = &g->one;
    g->W = g->dist->world, g->R = g->dist->rank;
    g->n_local = g->B * g->GA, g->n = g->n_local * g->W, g->ppr = g->n / g->G;
    Status st = model_codec_load(&g->codec, c->model_dir, NULL, e);
    if (st != ST_OK) {
        free(g);
        return st;
    }
    if (st == ST_OK) st = chat_kwargs_parse(c->chat_template_kwargs, &g->kwargs, e);
    PromptConfig pc = {.chat_template_kwargs = g->kwargs, .max_prompt_length = c->max_prompt_length,
                       .skip_bad_rows = c->skip_bad_rows, .vocab_size = m->cfg.vocab_size};
    if (st == ST_OK) st = prompts_load(c->dataset, &pc, &g->codec.codec, &g->ps, e);
    if (st == ST_OK && g->ps.n < g->ppr)
        st = err_set(e, ST_EINVAL, "%s has %d prompts, fewer than one generation round needs (%d completions / "
                                   "num_generations %d = %d prompts)", c->dataset, g->ps.n, g->n, g->G, g->ppr);
    if (st == ST_OK) st = rewards_init(&g->rs, c->reward_specs, c->n_rewards, c->reward_weights, c->n_reward_weights,
                                       c->reward_timeout, e);
    if (st == ST_OK) st = prompts_check_rewards(&g->ps, &g->rs, c->dataset, e);
    if (st == ST_OK) {  // model: rewards, batched like the training micro-batches, on the policy's backend
        g->rs.chat_template_kwargs = g->kwargs;
        g->rs.model_batch_size = g->B;
        g->rs.model_pad_to_multiple_of = c->pad_to_multiple_of;
        st = rewards_load_models(&g->rs, m->be, c->dtype, e);
    }
    if (st == ST_OK && c->beta != 0 && m->lora) {  // PEFT: the reference is the base with the adapter off
        g->ref = peft_base_model(m);
        log_info("reference model: the base weights with the adapter off (no copy)");
    } else if (st == ST_OK && c->beta != 0) {
        st = model_load_frozen(c->model_dir, m->be, c->dtype, &g->ref, e);
        if (st == ST_OK) log_info("reference model: %s (frozen, %s weights)", c->model_dir, dtype_torch_name(g->ref->matrix_dtype));
    }
    if (st != ST_OK) {
        grpo_free(g);
        return st;
    }
    g->rounds_per_epoch = g->ps.n / g->ppr;
    int maxp = 1;
    g->ptext = xcalloc((size_t)g->ps.n, sizeof(char *));
    for (int i = 0; i < g->ps.n; i++) {
        maxp = MAX(maxp, g->ps.rows[i].n);
        g->ptext[i] = xstrdup(g->ps.rows[i].text ? g->ps.rows[i].text : "");
    }
    g->Tmax = round_up(maxp + g->C, c->pad_to_multiple_of);
    Ep *ep = ep_of(m);  // expert parallel: forward passes in lockstep, of one shape on every rank
    g->P_min = ep ? maxp : 0;
    // generation: TRL builds a GenerationConfig of its own (sampling on, its temperature and
    // filters); EOS ids: generation_config.json's list and the tokenizer's
    GenConfig *gc = &g->gen;
    gen_config_default(gc);
    st = gen_config_load(gc, c->model_dir, &m->cfg, e);
    int32_t teos = tokenizer_eos_id(g->codec.tok);
    if (st == ST_OK && teos >= 0) st = gen_config_add_eos(gc, teos, e);
    if (st == ST_OK) {
        if (gc->pad_token_id < 0) gc->pad_token_id = tokenizer_pad_id(g->codec.tok);
        gc->max_new_tokens = g->C, gc->max_length = 0, gc->min_new_tokens = 0;
        gc->do_sample = 1, gc->temperature = c->temperature, gc->top_k = c->top_k, gc->top_p = c->top_p;
        gc->min_p = c->min_p, gc->repetition_penalty = c->repetition_penalty, gc->no_repeat_ngram_size = 0;
        gc->num_return_sequences = g->G;
        gc->logprobs = GEN_LOGPROBS_NONE;
        gc->batch_size = c->decode_batch_size > 0 ? c->decode_batch_size : g->n_local;
        gc->pad_to_multiple_of = c->pad_to_multiple_of;
        gc->prefill_chunk_size = MAX(512, round_up(512, MAX(1, c->pad_to_multiple_of)));
        gc->max_cache_len = round_up(round_up(maxp, c->pad_to_multiple_of) + g->C, 128);  // one decode plan
        if (ep) gc->lockstep = ep_lockstep_max, gc->lockstep_ctx = ep;
        st = gen_config_check(gc, m->cfg.vocab_size, e);
    }
    if (st == ST_OK && gc->n_eos == 0) st = err_set(e, ST_EINVAL, "%s: no EOS id (generation_config.json, config.json or "
                                                                  "the tokenizer)", c->model_dir);
    if (st != ST_OK) {
        grpo_free(g);
        return st;
    }
    int n = g->n, C = g->C, K = g->rs.n;
    g->perm = xmalloc((size_t)g->ps.n * sizeof(int));
    g->prompt = xcalloc((size_t)n, sizeof(int));
    g->ids = xcalloc((size_t)n * C, sizeof(int32_t));
    g->len = xcalloc((size_t)n, sizeof(int));
    g->mlen = xcalloc((size_t)n, sizeof(int));
    g->truncated = xcalloc((size_t)n, sizeof(int));
    g->rewards = xcalloc((size_t)n * K, sizeof(double));
    g->total = xcalloc((size_t)n, sizeof(double));
    g->adv = xcalloc((size_t)n, sizeof(double));
    g->order = xcalloc((size_t)n, sizeof(int));
    g->mine = xcalloc((size_t)g->n_local, sizeof(int));
    g->mb_stats = xcalloc((size_t)g->GA * 9, sizeof(double));
    g->mask = xcalloc((size_t)n * C, sizeof(float));
    g->ref_logp = xcalloc((size_t)n * C, sizeof(float));
    g->old_logp = xcalloc((size_t)n * C, sizeof(float));
    size_t N = (size_t)g->B * g->Tmax;
    g->d_logp = m->be->alloc(m->be, N * sizeof(float));
    g->d_coef = m->be->alloc(m->be, N * sizeof(float));
    g->h_flat = xcalloc(N, sizeof(float));
    g->h_ent = xcalloc(N, sizeof(float));
    size_t BC = (size_t)g->B * C;
    g->mb_logp = xcalloc(BC, sizeof(float));
    g->mb_coef = xcalloc(BC, sizeof(float));
    g->mb_mask = xcalloc(BC, sizeof(float));
    g->mb_old = xcalloc(BC, sizeof(float));
    g->mb_ref = xcalloc(BC, sizeof(float));
    g->mb_adv = xcalloc((size_t)g->B, sizeof(double));
    g->mb_seq = xcalloc((size_t)g->B, sizeof(double));
    g->mb_p = xcalloc((size_t)g->B, sizeof *g->mb_p), g->mb_c = xcalloc((size_t)g->B, sizeof *g->mb_c);
    g->mb_pl = xcalloc((size_t)g->B, sizeof(int)), g->mb_cl = xcalloc((size_t)g->B, sizeof(int));
    size_t npl = (size_t)MAX(1, g->ppr / g->W);
    g->gen_p = xcalloc(npl, sizeof *g->gen_p);
    g->gen_pl = xcalloc(npl, sizeof(int)), g->gen_keys = xcalloc(npl, sizeof(int));
    *out = g;
    return ST_OK;
}

void grpo_free(Grpo *g) {
    if (!g) return;
    if (g->d_logp) g->m->be->free(g->m->be, g->d_logp);
    if (g->d_coef) g->m->be->free(g->m->be, g->d_coef);
    for (int i = 0; g->ptext && i < g->ps.n; i++) free(g->ptext[i]);
    free(g->ptext);
    rewards_free(&g->rs);
    prompts_free(&g->ps);
    model_free(g->ref);
    if (g->codec.tok) model_codec_free(&g->codec);
    cJSON_Delete(g->kwargs);
    free(g->perm), free(g->prompt), free(g->ids), free(g->len), free(g->mlen), free(g->truncated);
    free(g->rewards), free(g->total), free(g->adv), free(g->order), free(g->mask), free(g->ref_logp), free(g->old_logp);
    free(g->h_flat), free(g->h_ent), free(g->mb_logp), free(g->mb_coef), free(g->mb_mask), free(g->mb_old);
    free(g->mb_ref), free(g->mb_adv), free(g->mb_seq), free(g->mine), free(g->mb_stats);
    free(g->mb_p), free(g->mb_c), free(g->mb_pl), free(g->mb_cl), free(g->gen_p), free(g->gen_pl), free(g->gen_keys);
    free(g);
}

// The output directory, the prompts and the reward specs, before the model loads.
static Status grpo_preflight(const GrpoConfig *c, Err *e) {
    if (!c->dist || c->dist->rank == 0) TRY(preflight_output_dir(c->train.output_dir, e));
    cJSON *kwargs = NULL;
    TRY(chat_kwargs_parse(c->chat_template_kwargs, &kwargs, e));
    PromptConfig pc = {.chat_template_kwargs = kwargs, .max_prompt_length = c->max_prompt_length,
                       .skip_bad_rows = c->skip_bad_rows};
    Status st = preflight_prompts(c->dataset, &pc, c->model_dir, e);
    cJSON_Delete(kwargs);
    TRY(st);
    return preflight_rewards(c->reward_specs, c->n_rewards, c->reward_weights, c->n_reward_weights, c->reward_timeout,
                             e);
}

Status grpo_run(GrpoConfig *c, TrainResult *res, Err *e) {
    Backend *be = NULL;
    Model *m = NULL;
    Grpo *g = NULL;
    Status st = grpo_preflight(c, e);
    if (st == ST_OK) st = backend_create(c->backend, c->threads, &be, e);
    if (st == ST_OK) be->max_memory = c->max_memory;
    if (st == ST_OK && c->dist) st = dist_attach_backend(c->dist, be, e);
    // trained weights: fp32 masters (an adapter's base keeps its dtype)
    ModelPart part;  // --tp_size T: only this rank's part of the policy is read (tp.h)
    if (st == ST_OK)
        st = peft_load_model_part(c->model_dir, be, &c->train.peft, c->dtype, tp_part(&part, c->dist), &m, e);
    if (st == ST_OK) st = peft_prepare(m, &c->train.peft, c->train.gradient_checkpointing, c->train.seed, e);
    Tp tp = {0};  // --tp_size T: this rank's part of the policy (tp.h); rollouts and batches per data rank
    Dist *world = c->dist;
    if (st == ST_OK && dist_data_axis(c->dist) != c->dist) {
        st = tp_shard(&tp, &m, &c->dist->mesh->tp_axis, e);
        c->dist = dist_data_axis(c->dist);
    }
    Ep ep = {0};  // --ep_size P: this rank's experts of the policy (ep.h); the reference whole
    if (st == ST_OK) st = ep_open(&ep, &m, world, c->dist, c->ep_size, c->train.zero_stage, e);
    if (st == ST_OK) {
        if (c->max_plans > 0) m->plans.max_plans = c->max_plans;
        st = grpo_create(c, m, &g, e);
    }
    if (st == ST_OK) {
        log_info("%s: %d prompts, %d generations each, %d completions per round (%d x %d micro-batches x %d ranks), "
                 "max_completion_length %d, %d reward function%s, loss %s, beta %g",
                 c->algo == GRPO_ALGO_RLOO ? "rloo" : "grpo", g->ps.n, g->G, g->n, g->B, g->GA, g->W, g->C, g->rs.n,
                 g->rs.n == 1 ? "" : "s", loss_name(c), c->beta);
        c->train.src_model_dir = c->model_dir;
        c->train.save_dtype = c->save_dtype >= 0 ? (DType)c->save_dtype
                              : c->dtype >= 0 && c->dtype != DT_Q8_0 ? (DType)c->dtype
                                                  : m->ckpt_dtype;
        StepSource src = grpo_source(g);
        st = trainer_loop(m, &src, &c->train, res, e);
    }
    grpo_free(g);
    tp_free(&tp, m);
    ep_free(&ep, m);
    model_free(m);
    c->dist = world;
    if (be) backend_destroy(be);
    return st;
}
