// distill.c: on-policy distillation = prompts + student rollouts + teacher/student scoring through
// the loss heads + the shared loop. The math lives in the heads (docs/heads.md) and rl_math.
#include "distill.h"
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
#include "rl_math.h"

#include <math.h>
#include <string.h>

const char *DISTILL_OPSD_TEMPLATE =
    "{problem}\n\nHere is a reference solution to this problem:\n{solution}\n\n\nAfter understanding the reference "
    "solution and the rationale behind each step, now articulate your own step-by-step reasoning that derives the "
    "same final answer to the problem below:\n\nPlease reason step by step, and put your final answer within "
    "\\boxed{{}}.";

const char *distill_teacher_mode_name(TeacherMode m) {
    switch (m) {
    case TEACHER_MODEL: return "model";
    case TEACHER_FIXED: return "fixed";
    case TEACHER_EMA: return "ema";
    case TEACHER_LIVE: return "live";
    }
    return "?";
}

// ---- scoring one micro-batch ------------------------------------------------------------------

void distill_scorer_init(DistillScorer *s, Model *student, Model *teacher, const DistillLoss *loss, int B, int Tmax,
                         int C, int pad_to_multiple_of, const int32_t *eos, int n_eos) {
    memset(s, 0, sizeof *s);
    s->student = student, s->teacher = teacher, s->loss = *loss;
    s->B = B, s->Tmax = Tmax, s->C = C, s->pad_to_multiple_of = pad_to_multiple_of;
    CHECK(n_eos <= GEN_MAX_EOS);
    memcpy(s->eos, eos, (size_t)n_eos * sizeof(int32_t));
    s->n_eos = n_eos;
    size_t N = (size_t)B * Tmax;
    Backend *be = student->be;
    s->d_kl = be->alloc(be, N * sizeof(float));
    s->d_logp_s = be->alloc(be, N * sizeof(float));
    s->d_logp_t = be->alloc(be, N * sizeof(float));
    s->d_coef = be->alloc(be, N * sizeof(float));
    s->h_loss = xmalloc(N * sizeof(float));
    s->h_kl = xmalloc(N * sizeof(float));
    s->h_logp_s = xmalloc(N * sizeof(float));
    s->h_logp_t = xmalloc(N * sizeof(float));
    s->h_coef = xmalloc(N * sizeof(float));
    s->h_mask = xmalloc(N * sizeof(float));
    s->ids = xmalloc(N * sizeof(int32_t));
    s->pos = xmalloc(N * sizeof(int32_t));
    s->seg = xmalloc(N * sizeof(int32_t));
    s->targets = xmalloc(N * sizeof(int32_t));
    s->tids = xmalloc(N * sizeof(int32_t));
    s->tpos = xmalloc(N * sizeof(int32_t));
    s->tseg = xmalloc(N * sizeof(int32_t));
    s->row_kl = xmalloc((size_t)B * sizeof(double));
}

void distill_scorer_free(DistillScorer *s) {
    if (!s->student) return;
    Backend *be = s->student->be;
    be->free(be, s->d_kl), be->free(be, s->d_logp_s), be->free(be, s->d_logp_t), be->free(be, s->d_coef);
    free(s->h_loss), free(s->h_kl), free(s->h_logp_s), free(s->h_logp_t), free(s->h_coef), free(s->h_mask);
    free(s->ids), free(s->pos), free(s->seg), free(s->targets), free(s->tids), free(s->tpos), free(s->tseg);
    free(s->row_kl);
    memset(s, 0, sizeof *s);
}

// Copy sb's rows into B rows of (P, T), shifted right by P - sb->P so that every completion
// starts at P; rows beyond sb->B are empty.
static void place(const ScoreBatch *sb, int B, int P, int T, int32_t *ids, int32_t *pos, int32_t *seg, int32_t *tgt) {
    int d = P - sb->P;
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            size_t o = (size_t)r * T + t;
            int src = t - d;
            if (r >= sb->B || src < 0 || src >= sb->T) {
                ids[o] = 0, pos[o] = 0, seg[o] = 0;
                if (tgt) tgt[o] = IGNORE_INDEX;
                continue;
            }
            size_t i = (size_t)r * sb->T + src;
            ids[o] = sb->ids[i], pos[o] = sb->pos[i], seg[o] = sb->seg[i];
            if (tgt) tgt[o] = sb->targets[i];
        }
}

static Status get_plan(Model *m, PlanMode mode, int B, int T, Plan **p, Err *e) {
    int before = m->plans.n;
    TRY(plan_get(m, mode, B, T, p, e));
    if (m->plans.n > before)
        log_info("plan %d built: %s B=%d T=%d, %.1f MiB (plans total %.1f MiB)", m->plans.n, plan_mode_name(mode), B, T,
                 (*p)->bytes / 1048576.0, m->plans.bytes / 1048576.0);
    return ST_OK;
}

Status distill_score(DistillScorer *s, const int32_t *const *sprompts, const int *slens,
                     const int32_t *const *tprompts, const int *tlens, const int32_t *const *comps, const int *clens,
                     int n, double norm, int backward, DistillRows *out, Err *e) {
    memset(out, 0, sizeof *out);
    CHECK(n >= 1 && n <= s->B);
    ScoreBatch sb = {0}, tb = {0};
    int n_eos = s->whole ? 0 : s->n_eos;  // no EOS: the mask covers the whole completion
    TRY(score_batch_build(&sb, sprompts, slens, comps, clens, n, s->C, 0, s->pad_to_multiple_of, s->eos, n_eos, e));
    Status st = ST_OK;
    if (tprompts)
        st = score_batch_build(&tb, tprompts, tlens, comps, clens, n, s->C, 0, s->pad_to_multiple_of, s->eos, n_eos, e);
    int P = MAX(s->P_min, tprompts ? MAX(sb.P, tb.P) : sb.P), B = s->B;
    int T = round_up(P + s->C, s->pad_to_multiple_of);
    if (st == ST_OK && T > s->Tmax)
        st = err_set(e, ST_EINVAL, "a scoring row of %d positions exceeds the %d planned for (prompt %d + completion %d)",
                     T, s->Tmax, P, s->C);
    if (st == ST_OK) {
        place(&sb, B, P, T, s->ids, s->pos, s->seg, s->targets);
        if (tprompts) place(&tb, B, P, T, s->tids, s->tpos, s->tseg, NULL);
        for (int r = 0; r < n; r++) out->n_tokens += slens[r] + sb.comp_len[r];
        out->n_targets = sb.n_targets;
        out->T = T;
    }
    score_batch_free(&sb);
    if (tprompts) score_batch_free(&tb);
    TRY(st);

    Model *m = s->student, *mt = s->teacher;
    Backend *be = m->be;
    size_t N = (size_t)B * T;
    Plan *p, *pt;
    // teacher first: its plan may belong to the student model (live mode) and must not be reused
    TRY(get_plan(mt, PLAN_SCORE, B, T, &pt, e));
    // a live teacher holds the score plan of this shape: the student then takes the train plan
    TRY(get_plan(m, backward || mt == m ? PLAN_TRAIN : PLAN_SCORE, B, T, &p, e));
    CHECK(pt != p);
    if (tprompts) qwen3_set_inputs(mt, pt, s->tids, s->tpos, s->tseg, s->targets, NULL);
    else qwen3_set_inputs(mt, pt, s->ids, s->pos, s->seg, s->targets, NULL);
    double t0 = metrics_now();
    qwen3_forward(mt, pt);
    out->teacher_seconds = metrics_now() - t0;
    qwen3_set_inputs(m, p, s->ids, s->pos, s->seg, s->targets, NULL);
    qwen3_forward(m, p);
    if (backward) out->aux_loss = qwen3_moe_aux_loss(m, p);
    float inv = norm > 0 ? (float)(1.0 / norm) : 0.0f;
    const DistillLoss *L = &s->loss;
    if (L->kind == DISTILL_LOSS_JSD) {
        qwen3_distill_loss(m, p, mt, pt, L->tau, L->beta, L->top_k, inv, backward, s->d_kl);
        be->download(be, s->h_loss, p->row_loss, N * sizeof(float));
        be->download(be, s->h_kl, s->d_kl, N * sizeof(float));
        double l = 0;
        for (size_t i = 0; i < N; i++)
            if (s->targets[i] != IGNORE_INDEX) l += s->h_loss[i];
        out->loss = l * inv;
    } else {
        qwen3_logprob(mt, pt, L->tau, NULL, s->d_logp_t);
        qwen3_logprob(m, p, L->tau, NULL, s->d_logp_s);
        be->download(be, s->h_logp_t, s->d_logp_t, N * sizeof(float));
        be->download(be, s->h_logp_s, s->d_logp_s, N * sizeof(float));
        for (size_t i = 0; i < N; i++) s->h_mask[i] = s->targets[i] != IGNORE_INDEX;
        out->loss = rl_sampled_token_distill(s->h_coef, NULL, s->h_logp_s, s->h_logp_t, s->h_mask, N, norm > 0 ? norm : 1);
        if (backward) {
            be->upload(be, s->d_coef, s->h_coef, N * sizeof(float));
            qwen3_logprob(m, p, L->tau, s->d_coef, s->d_logp_s);
        }
        // the full-vocabulary KL metric, forward only
        qwen3_distill_loss(m, p, mt, pt, 1.0f, 1.0f, 0, 0.0f, 0, s->d_kl);
        be->download(be, s->h_kl, s->d_kl, N * sizeof(float));
    }
    for (int r = 0; r < B; r++) {
        double k = 0;
        int c = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)r * T + t;
            if (s->targets[i] == IGNORE_INDEX) continue;
            k += s->h_kl[i];
            c++;
        }
        out->kl_sum += k;
        s->row_kl[r] = c ? k / c : 0;
    }
    return ST_OK;
}

// ---- the step source ----------------------------------------------------------------------------

typedef enum { SRC_STUDENT = 0, SRC_TEACHER, SRC_DATASET } RowSource;
static const char *const SRC_NAMES[] = {"student", "teacher", "dataset"};

typedef struct DistillSource {
    const DistillConfig *cfg;
    DistillScorer sc;
    Model *teacher;            // separate model, fixed copy, EMA, or the student (live)
    TeacherMode mode;
    const PromptSet *ps, *eval;
    PromptRow *tp, *etp;       // teacher prompts per row (self-distillation), else NULL
    GenConfig gen;
    int B, GA, spe;
    Dist *dist;                // the ranks: a step is world * B * GA rows, this rank's B of every W * B
    int *order, order_epoch;   // (ps->n) this epoch's prompt order
    const Tokenizer *tok;
    FILE *rollouts;
    // one step's rows (B * GA), flat in micro-batch order
    int *row, *clen, *slen, *tlen;
    const int32_t **sp, **tpp, **cp;
    RowSource *kind;           // (GA)
    const int32_t **gp;        // (B * GA) prompts handed to gen_generate
    int *gl, *gidx;
    int *gkey;                 // (B * GA) generation keys: a row's place among the step's rows of its source
} DistillSource;

static void make_order(DistillSource *s, int epoch) {
    int n = s->ps->n;
    for (int i = 0; i < n; i++) s->order[i] = i;
    if (s->cfg->shuffle) {
        Rng r;
        rng_init(&r, s->cfg->train.seed, 0xd1571100u + (uint64_t)epoch);
        for (int i = n - 1; i > 0; i--) {
            int k = (int)rng_below(&r, (uint64_t)i + 1), t = s->order[i];
            s->order[i] = s->order[k], s->order[k] = t;
        }
    }
    s->order_epoch = epoch;
}

// teacher <- decay * teacher + (1 - decay) * student, in fp32 over the whole parameter buffer.
// The student's gradient buffer is the scratch: the loop zeroed it before the step and it is
// zeroed again here before any gradient lands in it.
static void ema_update(Model *t, Model *m, double decay) {
    Backend *be = m->be;
    size_t n = m->tt.n_params;
    CHECK(m->grads && t->tt.n_params == n && t->tt.param_bytes == n * sizeof(float) &&
          m->tt.param_bytes == n * sizeof(float));
    be->copy(be, m->grads, m->params, n * sizeof(float));
    be->scale(be, m->grads, (float)(1.0 - decay), n);
    be->scale(be, t->params, (float)decay, n);
    be->add(be, t->params, t->params, m->grads, n);
    be->zero(be, m->grads, n * sizeof(float));
}

static int has_eos(const int32_t *ids, int n, const int32_t *eos, int n_eos) {
    for (int t = 0; t < n; t++)
        for (int q = 0; q < n_eos; q++)
            if (ids[t] == eos[q]) return 1;
    return 0;
}

static uint64_t step_seed(uint64_t seed, uint64_t step) {
    return seed ^ (0x9E3779B97F4A7C15ull * (step + 1)) ^ 0xd157ull;
}

// Generate completions for the cnt prompts of s->gp / s->gl with model mdl into *seqs (freed by
// the caller).
static Status rollout(DistillSource *s, Model *mdl, int cnt, uint64_t seed, GenSeq **seqs, GenStats *gs, Err *e) {
    GenConfig g = s->gen;
    g.seed = seed;
    g.prompt_keys = s->gkey;
    if (g.batch_size <= 0) g.batch_size = cnt;
    Ep *ep = ep_of(mdl);  // expert parallel (the student, or a live teacher): decode steps in lockstep
    if (ep) g.lockstep = ep_lockstep_max, g.lockstep_ctx = ep;
    return gen_generate(mdl, &g, s->gp, s->gl, cnt, seqs, gs, e);
}

static void log_rollouts(DistillSource *s, int step, int g, int n) {
    if (!s->rollouts) return;
    for (int r = 0; r < n; r++) {
        int k = g * s->B + r, i = s->row[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "step", step + 1);
        cJSON_AddNumberToObject(o, "index", i);
        cJSON_AddStringToObject(o, "source", SRC_NAMES[s->kind[g]]);
        cJSON_AddStringToObject(o, "prompt", s->ps->rows[i].text ? s->ps->rows[i].text : "");
        if (s->tp) cJSON_AddStringToObject(o, "teacher_prompt", s->tp[i].text ? s->tp[i].text : "");
        char *text = s->tok ? tokenizer_decode(s->tok, s->cp[k], (size_t)s->clen[k], 0) : NULL;
        cJSON_AddStringToObject(o, "completion", text ? text : "");
        free(text);
        cJSON_AddItemToObject(o, "completion_ids", cJSON_CreateIntArray(s->cp[k], s->clen[k]));
        cJSON_AddNumberToObject(o, "kl_student_teacher", s->sc.row_kl[r]);
        char *line = cJSON_PrintUnformatted(o);
        fprintf(s->rollouts, "%s\n", line);
        free(line);
        cJSON_Delete(o);
    }
    fflush(s->rollouts);
}

static Status distill_step(void *ctx, Model *m, int step, StepReport *r, Err *e) {
    DistillSource *s = ctx;
    const DistillConfig *c = s->cfg;
    int B = s->B, GA = s->GA, R = B * GA, n = s->ps->n, W = s->dist->world, rank = s->dist->rank;
    int epoch = step / s->spe, j = step % s->spe;
    if (s->order_epoch != epoch) make_order(s, epoch);
    if (s->mode == TEACHER_EMA && step > 0) ema_update(s->teacher, m, c->teacher_ema_decay);
    for (int g = 0; g < GA; g++) {
        s->kind[g] = SRC_STUDENT;
        if (c->gkd && rng_keyed_uniform(c->train.seed, (uint32_t)step, (uint32_t)g, 0, 0x6b64u) > c->lmbda)
            s->kind[g] = c->seq_kd ? SRC_TEACHER : SRC_DATASET;
    }
    // local row k = g * B + b is row g * W * B + rank * B + b of the step's W * R; a short last step
    // of an epoch wraps to the epoch's start
    for (int k = 0; k < R; k++) {
        int i = s->order[((size_t)j * R * W + (size_t)(k / B) * W * B + (size_t)rank * B + k % B) % n];
        s->row[k] = i;
        s->sp[k] = s->ps->rows[i].ids, s->slen[k] = s->ps->rows[i].n;
        s->tpp[k] = s->tp ? s->tp[i].ids : s->sp[k];
        s->tlen[k] = s->tp ? s->tp[i].n : s->slen[k];
        s->cp[k] = s->ps->rows[i].completion;  // whole: --max_new_tokens limits generation only
        s->clen[k] = s->ps->rows[i].n_completion;
    }
    // rollouts: one generation call per source model over all its rows of the step
    GenSeq *seqs[2] = {NULL, NULL};
    int nseq[2] = {0, 0};
    double t0 = metrics_now();
    long gen_tokens = 0;
    Status st = ST_OK;
    for (int who = 0; who < 2 && st == ST_OK; who++) {
        int cnt = 0, before = 0;  // before: micro-batches of this source ahead of row k's
        for (int k = 0; k < R; k++) {
            if (k % B == 0 && k > 0 && (int)s->kind[k / B - 1] == who) before++;
            if ((int)s->kind[k / B] != who) continue;
            s->gp[cnt] = who == SRC_STUDENT ? s->sp[k] : s->tpp[k];
            s->gl[cnt] = who == SRC_STUDENT ? s->slen[k] : s->tlen[k];
            s->gkey[cnt] = (before * W + rank) * B + k % B;  // its place in one process's call
            s->gidx[cnt++] = k;
        }
        if (!cnt) continue;
        step_report_tick(r, who == SRC_STUDENT ? "generating (student)" : "generating (teacher)", 0, 0);
        GenStats gs;
        st = rollout(s, who == SRC_STUDENT ? m : s->teacher, cnt, step_seed(c->train.seed, (uint64_t)step) + who,
                     &seqs[who], &gs, e);
        if (st != ST_OK) break;
        nseq[who] = cnt;
        gen_tokens += gs.generated_tokens;
        for (int q = 0; q < cnt; q++) {
            int k = s->gidx[q];
            s->cp[k] = seqs[who][q].ids;
            s->clen[k] = seqs[who][q].n;
        }
    }
    double t_gen = metrics_now() - t0;
    // the step's normaliser: completion tokens (up to the first EOS) of every micro-batch
    double n_gen = 0, len_sum = 0, clipped = 0;
    for (int k = 0; k < R && st == ST_OK; k++) {
        int len = s->kind[k / B] == SRC_DATASET ? s->clen[k] : rollout_mask_len(s->cp[k], s->clen[k], s->sc.eos, s->sc.n_eos);
        n_gen += len;
        len_sum += len;
        clipped += !has_eos(s->cp[k], s->clen[k], s->sc.eos, s->sc.n_eos);
    }
    // over every rank: the normaliser before the backward, the metrics' sums
    double sums[3] = {n_gen, len_sum, clipped};
    if (st == ST_OK) st = dist_allreduce_sum_host_d(s->dist, sums, 3, e);
    n_gen = sums[0], len_sum = sums[1], clipped = sums[2];
    double t1 = metrics_now(), loss = 0, kl = 0, ntok = 0, ntgt = 0, t_teacher = 0, aux = 0;
    // the load-balancing loss (MoE, output_router_logits): the mean over the step's micro-batches
    // and ranks of each forward's, as still sft adds it (docs/models.md)
    m->moe_aux_scale = 1.0 / ((double)GA * W);
    for (int g = 0; g < GA && st == ST_OK; g++) {
        int k = g * B;
        DistillRows dr;
        s->sc.whole = s->kind[g] == SRC_DATASET;
        st = distill_score(&s->sc, s->sp + k, s->slen + k, s->tp ? s->tpp + k : NULL, s->tlen + k, s->cp + k,
                           s->clen + k, B, n_gen, 1, &dr, e);
        if (st != ST_OK) break;
        loss += dr.loss, kl += dr.kl_sum, ntok += dr.n_tokens, ntgt += dr.n_targets, t_teacher += dr.teacher_seconds;
        aux += dr.aux_loss;
        log_rollouts(s, step, g, B);
        step_report_tick(r, "teacher scoring and student micro-batch", g + 1, GA);
    }
    double t_train = metrics_now() - t1;
    for (int who = 0; who < 2; who++) gen_seqs_free(seqs[who], nseq[who]);
    TRY(st);
    double tot[5] = {loss, kl, ntok, ntgt, aux};
    TRY(dist_allreduce_sum_host_d(s->dist, tot, 5, e));
    loss = tot[0], kl = tot[1], ntok = tot[2], ntgt = tot[3], R *= W;
    r->loss = loss;
    if (m->cfg.num_experts > 0 && m->cfg.output_router_logits) {
        double a = tot[4] * m->moe_aux_scale;
        r->loss += m->cfg.router_aux_loss_coef * a;
        step_report_add(r, "aux_loss", a, 1);
    }
    r->n_tokens = ntok;
    step_report_add(r, "kl_student_teacher", ntgt > 0 ? kl / ntgt : 0, 1);
    step_report_add(r, "completions/mean_length", len_sum / R, 1);
    step_report_add(r, "completions/clipped_ratio", clipped / R, 1);
    if (gen_tokens > 0) step_report_add(r, "generation_tokens_per_second", t_gen > 0 ? gen_tokens / t_gen : 0, 1);
    step_report_add(r, "train_tokens_per_second", t_train > 0 ? ntok / t_train : 0, 1);
    step_report_add(r, "time/generation_s", t_gen, 1);
    step_report_add(r, "time/teacher_s", t_teacher, 1);
    step_report_add(r, "time/student_s", t_train - t_teacher, 1);
    return ST_OK;
}

// Generate for every eval prompt and score without a backward pass: eval_loss (the step loss's
// normalisation over the whole eval set) and eval_kl_student_teacher.
static Status distill_evaluate(void *ctx, Model *m, cJSON *o, double *eval_loss, Err *e) {
    DistillSource *s = ctx;
    const PromptSet *ev = s->eval;
    int n = ev->n, B = s->B;
    const int32_t **sp = xmalloc((size_t)n * sizeof *sp), **tp = xmalloc((size_t)n * sizeof *tp),
                  **cp = xmalloc((size_t)n * sizeof *cp);
    int *sl = xmalloc((size_t)n * sizeof(int)), *tl = xmalloc((size_t)n * sizeof(int)),
        *cl = xmalloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        sp[i] = ev->rows[i].ids, sl[i] = ev->rows[i].n;
        tp[i] = s->etp ? s->etp[i].ids : sp[i], tl[i] = s->etp ? s->etp[i].n : sl[i];
    }
    GenConfig g = s->gen;
    g.seed = step_seed(s->cfg->train.seed, 0xe7a1u);
    if (g.batch_size <= 0) g.batch_size = B;
    Ep *ep = ep_of(m);
    if (ep) g.lockstep = ep_lockstep_max, g.lockstep_ctx = ep;
    GenSeq *seqs = NULL;
    Status st = gen_generate(m, &g, sp, sl, n, &seqs, NULL, e);
    double n_gen = 0, loss = 0, kl = 0, ntgt = 0;
    if (st == ST_OK)
        for (int i = 0; i < n; i++) {
            cp[i] = seqs[i].ids, cl[i] = seqs[i].n;
            n_gen += rollout_mask_len(cp[i], cl[i], s->sc.eos, s->sc.n_eos);
        }
    s->sc.whole = 0;
    for (int i = 0; i < n && st == ST_OK; i += B) {
        DistillRows dr;
        int cnt = MIN(B, n - i);
        st = distill_score(&s->sc, sp + i, sl + i, s->etp ? tp + i : NULL, tl + i, cp + i, cl + i, cnt, n_gen, 0, &dr,
                           e);
        loss += dr.loss, kl += dr.kl_sum, ntgt += dr.n_targets;
    }
    if (st == ST_OK) {
        cJSON_AddNumberToObject(o, "eval_loss", loss);
        cJSON_AddNumberToObject(o, "eval_kl_student_teacher", ntgt > 0 ? kl / ntgt : 0);
        *eval_loss = loss;
    }
    if (seqs) gen_seqs_free(seqs, n);
    free(sp), free(tp), free(cp), free(sl), free(tl), free(cl);
    return st;
}

static Status save_ema(void *ctx, const char *dir, Err *e) {
    DistillSource *s = ctx;
    char *p = path_join(dir, "teacher_ema");
    Status st = model_save(s->teacher, p, DT_F32, e);
    free(p);
    return st;
}

static Status load_ema(void *ctx, const char *dir, Err *e) {
    DistillSource *s = ctx;
    char *p = path_join(dir, "teacher_ema");
    Model *t = NULL;
    Status st = model_load(p, s->teacher->be, DT_F32, &t, e);
    if (st != ST_OK) err_prefix(e, "%s: the EMA teacher of --teacher_mode ema: ", dir);
    free(p);
    TRY(st);
    t->plans.max_plans = s->teacher->plans.max_plans;
    model_free(s->teacher);
    s->teacher = s->sc.teacher = t;
    log_info("EMA teacher restored from %s/teacher_ema", dir);
    return ST_OK;
}

// ---- the command --------------------------------------------------------------------------------

// Teacher and student must tokenise identically: the same vocabulary and special tokens.
static Status same_tokenizer(const Tokenizer *a, const Tokenizer *b, const char *sd, const char *td, Err *e) {
    int32_t n = tokenizer_vocab_size(a), nb = tokenizer_vocab_size(b);
    if (n != nb)
        return err_set(e, ST_EINVAL, "the teacher's tokenizer (%s) has %d tokens, the student's (%s) %d: distillation "
                                     "needs one shared tokenizer", td, nb, sd, n);
    for (int32_t i = 0; i < n; i++) {
        const char *x = tokenizer_id_to_token(a, i), *y = tokenizer_id_to_token(b, i);
        if ((x || y) && (!x || !y || strcmp(x, y)))
            return err_set(e, ST_EINVAL, "the teacher's tokenizer (%s) differs from the student's (%s) at id %d: "
                                         "'%s' vs '%s'; distillation needs one shared tokenizer", td, sd, i,
                           y ? y : "(none)", x ? x : "(none)");
        if (tokenizer_is_special(a, i) != tokenizer_is_special(b, i))
            return err_set(e, ST_EINVAL, "token %d ('%s') is special in one tokenizer and not the other (student %s, "
                                         "teacher %s)", i, x ? x : "", sd, td);
    }
    if (tokenizer_eos_id(a) != tokenizer_eos_id(b) || tokenizer_bos_id(a) != tokenizer_bos_id(b) ||
        tokenizer_pad_id(a) != tokenizer_pad_id(b))
        return err_set(e, ST_EINVAL, "the teacher's special tokens (bos %d, eos %d, pad %d; %s) differ from the "
                                     "student's (bos %d, eos %d, pad %d; %s)", tokenizer_bos_id(b),
                       tokenizer_eos_id(b), tokenizer_pad_id(b), td, tokenizer_bos_id(a), tokenizer_eos_id(a),
                       tokenizer_pad_id(a), sd);
    return ST_OK;
}

static Status teacher_prompts(const PromptSet *ps, const char *tmpl, const PromptConfig *pc, const TextCodec *codec,
                              PromptRow **out, Err *e) {
    PromptRow *tp = xcalloc((size_t)ps->n, sizeof *tp);
    for (int i = 0; i < ps->n; i++) {
        Status st = prompts_render_template(ps, i, tmpl, pc, codec, &tp[i], e);
        if (st != ST_OK) {
            for (int k = 0; k < i; k++) prompt_row_free(&tp[k]);
            free(tp);
            return err_prefix(e, "--teacher_prompt_template: ");
        }
    }
    *out = tp;
    return ST_OK;
}

static void free_rows(PromptRow *tp, int n) {
    if (!tp) return;
    for (int i = 0; i < n; i++) prompt_row_free(&tp[i]);
    free(tp);
}

static int longest(const PromptSet *ps, const PromptRow *tp) {
    int L = 0;
    for (int i = 0; ps && i < ps->n; i++) {
        L = MAX(L, ps->rows[i].n);
        if (tp) L = MAX(L, tp[i].n);
    }
    return L;
}

static Status gkd_trim(PromptSet *ps, int max_length, const char *path, Err *e);

static Status load_prompts(const DistillConfig *c, const char *path, const ModelCodec *mc, const char *tmpl,
                           PromptSet *ps, PromptRow **tp, Err *e) {
    TRY(prompts_load(path, &c->prompts, &mc->codec, ps, e));
    log_info("%s: %d prompts%s", path, ps->n, ps->conversational ? " (conversational)" : "");
    if (ps->n == 0) return err_set(e, ST_EINVAL, "%s has no prompts", path);
    if (tmpl) TRY(teacher_prompts(ps, tmpl, &c->prompts, &mc->codec, tp, e));
    if (c->gkd && c->lmbda < 1 && !c->seq_kd)
        for (int i = 0; i < ps->n; i++)
            if (!ps->rows[i].completion)
                return err_set(e, ST_EINVAL, "%s: row %d has no completion (a \"messages\" row ending with an assistant "
                                             "message): --gkd with --lmbda %g trains on dataset completions a fraction "
                                             "of the time; use --lmbda 1 (always on-policy) or --seq_kd", path, i + 1,
                               c->lmbda);
    if (c->gkd && c->max_length > 0) TRY(gkd_trim(ps, c->max_length, path, e));
    return ST_OK;
}

// GKD (DataCollatorForChatML): a dataset prompt + completion longer than max_length keeps its last
// max_length tokens, so the prompt loses its oldest tokens; the completion is kept whole. A
// completion that fills max_length alone leaves no prompt: an error, as in TRL.
static Status gkd_trim(PromptSet *ps, int max_length, const char *path, Err *e) {
    int trimmed = 0;
    for (int i = 0; i < ps->n; i++) {
        PromptRow *r = &ps->rows[i];
        if (!r->completion || r->n + r->n_completion <= max_length) continue;
        int drop = r->n + r->n_completion - max_length;
        if (drop >= r->n)
            return err_set(e, ST_EINVAL, "%s: row %d: its completion (%d tokens) fills --max_length %d alone, leaving no "
                                         "prompt token to generate from (TRL refuses it too); raise --max_length",
                           path, i + 1, r->n_completion, max_length);
        memmove(r->ids, r->ids + drop, (size_t)(r->n - drop) * sizeof(int32_t));
        r->n -= drop;
        trimmed++;
    }
    if (trimmed) log_info("%s: %d prompts lost their oldest tokens to --max_length %d", path, trimmed, max_length);
    return ST_OK;
}

Status distill_run(DistillConfig *c, TrainResult *res, Err *e) {
    cJSON *kwargs = NULL;
    TRY(chat_kwargs_parse(c->chat_template_kwargs, &kwargs, e));
    if (kwargs) c->prompts.chat_template_kwargs = kwargs;
    int self = c->teacher_dir == NULL;
    ModelCodec mc = {0}, tmc = {0};
    Backend *be = NULL;
    Model *m = NULL, *t = NULL;
    PromptSet ps = {0}, eps = {0};
    PromptRow *tp = NULL, *etp = NULL;
    DistillSource s = {0};
    FILE *rf = NULL;
    Status st = model_codec_load(&mc, c->model_dir, c->eos_token, e);
    int have_mc = st == ST_OK, have_tmc = 0;
    if (st == ST_OK && !self) {
        st = model_codec_load(&tmc, c->teacher_dir, c->eos_token, e);
        have_tmc = st == ST_OK;
        if (st == ST_OK) st = same_tokenizer(mc.tok, tmc.tok, c->model_dir, c->teacher_dir, e);
    }
    // the output directory and the prompts before any model loads
    if (st == ST_OK && (!c->dist || c->dist->rank == 0)) st = preflight_output_dir(c->train.output_dir, e);
    const char *tmpl = self ? (c->teacher_prompt_template ? c->teacher_prompt_template : DISTILL_OPSD_TEMPLATE) : NULL;
    c->prompts.vocab_size = preflight_vocab_size(c->model_dir);
    if (st == ST_OK) st = load_prompts(c, c->dataset, &mc, tmpl, &ps, &tp, e);
    if (st == ST_OK && c->eval_dataset) st = load_prompts(c, c->eval_dataset, &mc, tmpl, &eps, &etp, e);
    if (st == ST_OK) st = backend_create(c->backend, c->threads, &be, e);
    if (st == ST_OK) be->max_memory = c->max_memory;
    if (st == ST_OK && c->dist) st = dist_attach_backend(c->dist, be, e);
    // trained weights: fp32 masters (an adapter's base keeps its dtype)
    ModelPart part;  // --tp_size T: only this rank's part of the student (and the teacher) is read (tp.h)
    const ModelPart *pp = tp_part(&part, c->dist);
    if (st == ST_OK) st = peft_load_model_part(c->model_dir, be, &c->train.peft, c->dtype, pp, &m, e);
    if (st == ST_OK && m->cfg.vocab_size != c->prompts.vocab_size)
        st = err_set(e, ST_EINVAL, "%s: config.json says vocab_size %d, the loaded model has %d", c->model_dir,
                     c->prompts.vocab_size, m->cfg.vocab_size);
    if (st == ST_OK) st = peft_prepare(m, &c->train.peft, c->train.gradient_checkpointing, c->train.seed, e);
    if (st == ST_OK && m->lora && self && c->teacher_mode == TEACHER_EMA)
        st = err_set(e, ST_EUNSUPPORTED, "--teacher_mode ema with --use_peft is not supported yet (fixed or live)");
    // --tp_size T: the student, and below the teacher, split over the tensor-parallel group (tp.h)
    Dist *tpd = dist_data_axis(c->dist) != c->dist ? &c->dist->mesh->tp_axis : NULL;
    Tp stp = {0}, ttp = {0};
    if (st == ST_OK && tpd) st = tp_shard(&stp, &m, tpd, e);
    Ep ep = {0};  // --ep_size P: the student's experts split over the ranks (ep.h); a teacher of its own whole
    if (st == ST_OK && c->ep_size > 1 && self && c->teacher_mode == TEACHER_EMA)
        st = err_set(e, ST_EUNSUPPORTED, "--ep_size %d with --teacher_mode ema: the EMA teacher averages the whole "
                                         "student, whose experts expert parallelism splits (fixed or live)", c->ep_size);
    if (st == ST_OK) st = ep_open(&ep, &m, c->dist, dist_data_axis(c->dist), c->ep_size, c->train.zero_stage, e);
    if (st == ST_OK) {
        if (c->max_plans > 0) m->plans.max_plans = c->max_plans;
        TeacherMode mode = self ? c->teacher_mode : TEACHER_MODEL;
        if (mode == TEACHER_LIVE) t = m;
        else if (self && m->lora) t = peft_base_model(m);  // the base with the adapter off: no second copy
        else if (mode == TEACHER_EMA) st = model_load_opts(c->model_dir, be, DT_F32, &(ModelLoadOpts){.part = pp}, &t, e);
        else
            st = model_load_opts(self ? c->model_dir : c->teacher_dir, be, (int)c->teacher_dtype,
                                 &(ModelLoadOpts){.frozen = 1, .part = pp}, &t, e);
        if (st == ST_OK && c->teacher_adapter && t != m) {
            st = tp_lora_load(t, c->teacher_adapter, e);  // a part (tensor parallel): its part of the adapter
            if (st == ST_OK) log_info("teacher adapter %s: LoRA r %d", c->teacher_adapter, t->lora->cfg.r);
        }
        if (st == ST_OK && t != m) {
            if (c->max_plans > 0) t->plans.max_plans = c->max_plans;
            if (t->cfg.vocab_size != m->cfg.vocab_size)
                st = err_set(e, ST_EINVAL, "the teacher (%s) has vocab_size %d, the student %d: distillation needs the "
                                           "same vocabulary (different tokenizers: TRL's GOLD trainer, not supported)",
                             c->teacher_dir, t->cfg.vocab_size, m->cfg.vocab_size);
            else if (t->shared)
                log_info("teacher: the student's frozen base with the adapter off (the same weights, no copy)");
            else
                log_info("teacher: %s (%s), %.1f M parameters, weights %.1f MiB in %s", self ? c->model_dir : c->teacher_dir,
                         self ? (mode == TEACHER_EMA ? "EMA of the student, fp32" : "frozen copy of the initial weights")
                              : "frozen",
                         t->tt.n_params / 1e6, t->tt.param_bytes / 1048576.0, dtype_torch_name(t->matrix_dtype));
        } else if (st == ST_OK) {
            log_info("teacher: the student's live weights (no extra memory)");
        }
        s.mode = mode;
        if (st == ST_OK && tpd && t != m) st = tp_shard(&ttp, &t, tpd, e);
    }
    // sampling: the trainer's settings over the student's EOS and pad ids
    GenConfig mg;
    gen_config_default(&mg);
    if (st == ST_OK) st = gen_config_load(&mg, c->model_dir, &m->cfg, e);
    if (st == ST_OK && tokenizer_eos_id(mc.tok) >= 0) st = gen_config_add_eos(&mg, tokenizer_eos_id(mc.tok), e);
    if (st == ST_OK && mc.codec.eos_id >= 0) st = gen_config_add_eos(&mg, mc.codec.eos_id, e);
    GenConfig g = c->gen;
    memcpy(g.eos, mg.eos, sizeof g.eos);
    g.n_eos = mg.n_eos;
    g.pad_token_id = mg.pad_token_id >= 0 ? mg.pad_token_id : tokenizer_pad_id(mc.tok);
    g.pad_to_multiple_of = c->pad_to_multiple_of;
    // GKD's coin changes how many rows a step generates: batches of one micro-batch keep one shape
    g.batch_size = c->generation_batch_size > 0 ? c->generation_batch_size : c->gkd ? c->B : 0;
    int C = g.max_new_tokens, mult = MAX(1, c->pad_to_multiple_of);
    // GKD trains on dataset completions whole: the completion region holds the longest of them
    if (st == ST_OK && c->gkd && c->lmbda < 1 && !c->seq_kd)
        for (int i = 0; i < ps.n; i++) C = MAX(C, ps.rows[i].n_completion);
    if (st == ST_OK && g.n_eos == 0)
        st = err_set(e, ST_EINVAL, "%s defines no EOS token (generation_config.json, config.json or the tokenizer): "
                                   "completions could never end", c->model_dir);
    if (st == ST_OK && g.prefill_chunk_size % mult) g.prefill_chunk_size = round_up(g.prefill_chunk_size, mult);
    int P = MAX(longest(&ps, tp), longest(c->eval_dataset ? &eps : NULL, etp));
    if (st == ST_OK) {
        g.max_cache_len = round_up(round_up(P, mult) + g.max_new_tokens, 128);
        st = gen_config_check(&g, m->cfg.vocab_size, e);
    }
    int B = c->B, GA = MAX(1, c->train.grad_accum);
    Dist one;
    if (c->dist) s.dist = dist_data_axis(c->dist);
    else dist_single(&one), s.dist = &one;
    int W = s.dist->world;
    if (st == ST_OK && c->log_rollouts && (!tpd || tpd->rank == 0)) {  // rank r > 0 writes its rows to FILE.rank<r>
        char *path = xmalloc(strlen(c->log_rollouts) + 32);
        if (s.dist->rank == 0) strcpy(path, c->log_rollouts);
        else sprintf(path, "%s.rank%d", c->log_rollouts, s.dist->rank);
        rf = fopen(path, c->train.resume ? "a" : "w");
        if (!rf) st = err_set(e, ST_EIO, "--log_rollouts %s: cannot open for writing", path);
        free(path);
    }
    if (st == ST_OK) {
        s.cfg = c, s.teacher = t, s.ps = &ps, s.eval = c->eval_dataset ? &eps : NULL, s.tp = tp, s.etp = etp;
        s.gen = g, s.B = B, s.GA = GA, s.tok = mc.tok, s.rollouts = rf, s.order_epoch = -1;
        s.spe = MAX(1, (ps.n + B * GA * W - 1) / (B * GA * W));
        size_t R = (size_t)B * GA;
        s.order = xmalloc((size_t)ps.n * sizeof(int));
        s.row = xmalloc(R * sizeof(int)), s.clen = xmalloc(R * sizeof(int)), s.slen = xmalloc(R * sizeof(int));
        s.tlen = xmalloc(R * sizeof(int)), s.gl = xmalloc(R * sizeof(int)), s.gidx = xmalloc(R * sizeof(int));
        s.sp = xmalloc(R * sizeof *s.sp), s.tpp = xmalloc(R * sizeof *s.tpp), s.cp = xmalloc(R * sizeof *s.cp);
        s.gp = xmalloc(R * sizeof *s.gp), s.gkey = xmalloc(R * sizeof(int));
        s.kind = xmalloc((size_t)GA * sizeof *s.kind);
        distill_scorer_init(&s.sc, m, t, &c->loss, B, round_up(P + C, mult), C, c->pad_to_multiple_of, g.eos, g.n_eos);
        if (ep_of(m)) s.sc.P_min = P;  // every rank's scoring batches (B, Tmax)
        log_info("distillation: loss %s (beta %g, top_k %d, temperature %g), teacher %s, %s rollouts: temperature %g, "
                 "top_p %g, top_k %d, max_completion_length %d%s", c->loss.kind == DISTILL_LOSS_JSD ? "jsd" :
                 "reverse_kl_sampled", c->loss.beta, c->loss.top_k, c->loss.tau, distill_teacher_mode_name(s.mode),
                 g.do_sample ? "sampled" : "greedy", g.temperature, g.top_p, g.top_k, g.max_new_tokens,
                 c->gkd ? (c->seq_kd ? " (GKD, seq_kd)" : " (GKD)") : "");
        c->train.src_model_dir = c->model_dir;
        c->train.save_dtype = c->save_dtype >= 0                      ? (DType)c->save_dtype
                              : c->dtype >= 0 && c->dtype != DT_Q8_0 ? (DType)c->dtype
                                                                     : m->ckpt_dtype;
        StepSource src = {.ctx = &s, .what = "prompts", .n_items = ps.n, .steps_per_epoch = s.spe,
                          .micro_batches = s.spe * GA, .batch_size = B, .grad_accum = GA, .step = distill_step,
                          .evaluate = c->eval_dataset ? distill_evaluate : NULL,
                          .save_state = s.mode == TEACHER_EMA ? save_ema : NULL,
                          .load_state = s.mode == TEACHER_EMA ? load_ema : NULL, .dist = s.dist,
                          .sharded_ok = s.mode != TEACHER_EMA};  // an EMA teacher reads the whole student
        st = trainer_loop(m, &src, &c->train, res, e);
        t = s.teacher;  // an EMA teacher may have been reloaded on resume
        if (st == ST_OK && t != m)
            log_info("teacher plans: %d, %.1f MiB; weights %.1f MiB", t->plans.n, t->plans.bytes / 1048576.0,
                     t->tt.param_bytes / 1048576.0);
        distill_scorer_free(&s.sc);
        free(s.order), free(s.row), free(s.clen), free(s.slen), free(s.tlen), free(s.gl), free(s.gidx);
        free(s.sp), free(s.tpp), free(s.cp), free(s.gp), free(s.kind), free(s.gkey);
    }
    if (rf) fclose(rf);
    free_rows(tp, ps.n);
    free_rows(etp, eps.n);
    prompts_free(&ps);
    prompts_free(&eps);
    if (t && t != m) tp_free(&ttp, t), model_free(t);
    tp_free(&stp, m);
    ep_free(&ep, m);
    model_free(m);
    if (be) backend_destroy(be);
    if (have_mc) model_codec_free(&mc);
    if (have_tmc) model_codec_free(&tmc);
    cJSON_Delete(kwargs);
    return st;
}
