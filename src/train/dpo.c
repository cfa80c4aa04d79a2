// dpo.c: DPO = preference pairs (pref_data) + one concatenated static-shape batch per micro-batch
// (pref_batch) + dpo_math + the shared trainer loop.
#include "dpo.h"

#include "../core/alloc.h"
#include "../core/log.h"
#include "pref_batch.h"
#include "pref_setup.h"
#include "preflight.h"

#include <math.h>
#include <string.h>

void dpo_config_default(DpoConfig *c) {
    memset(c, 0, sizeof *c);
    c->dtype = -1, c->save_dtype = -1;
    c->data.max_length = 1024;
    c->pad_to_multiple_of = 128;
    c->per_device_train_batch_size = 8;
    c->shuffle = 1;
    c->loss = (DpoLossConfig){.n_types = 1, .type = {DPO_SIGMOID}, .weight = {1.0}, .beta = 0.1,
                              .discopop_tau = 0.05, .fdiv = DPO_F_REVERSE_KL, .f_alpha = 0.5};
    trainer_config_trl_default(&c->train, 1e-6);
}

// Per micro-batch sums, summed over the ranks (TRL gathers every value before averaging).
enum {
    S_LOSS, S_REW_C, S_REW_R, S_ACC, S_MARGIN, S_LOGP_C, S_LOGP_R, S_PAIRS, S_ENT, S_TOK, S_LOGIT_C, S_TOK_C,
    S_LOGIT_R, S_TOK_R, S_CORRECT, S_NTOK, S_N
};

typedef struct Dpo {
    DpoConfig *c;
    Model *m;                  // the policy (not owned)
    Model *ref;                // the reference (NULL when every ref log-prob is precomputed)
    PrefSet ps;
    double *pre_c, *pre_r;     // (n) precomputed reference log-probs (NULL: on the fly)
    Dist *dist, one;
    int W, R, B, n_batches, Tmax;
    int *order, order_epoch;   // (n) pair order of the current epoch
    int *idx;                  // (B) this micro-batch's pairs
    SeqRows rows;              // (2B, Tmax): chosen rows [0, B), rejected rows [B, 2B)
    SeqScorer sc;
    double *seq, *ref_seq;     // (2B) policy / reference sequence log-probs
    double *lp_c, *lp_r, *rf_c, *rf_r, *len_c, *len_r, *wpo, *g_c, *g_r, *scratch;  // (B) each; scratch 3B
    double *mb;                // (GA, S_N)
} Dpo;

// LD-DPO weights: targets past the shorter completion of the pair (chosen vs rejected) count ld_alpha.
static void ld_weights(const DpoConfig *c, SeqRows *s, int B) {
    if (!c->has_ld_alpha) return;
    for (int b = 0; b < B; b++) {
        int shared = MIN(s->tlen[b], s->tlen[B + b]);
        for (int h = 0; h < 2; h++) {
            int r = h * B + b, k = 0;
            for (int t = 0; t < s->T; t++) {
                size_t i = (size_t)r * s->T + t;
                if (s->targets[i] == IGNORE_INDEX) continue;
                if (++k > shared) s->tokw[i] = (float)c->ld_alpha;
            }
        }
    }
}

// Rows of pairs idx[0..n) into s (2B rows: chosen [0, B), rejected [B, 2B); the rest empty).
static void build_rows(const Dpo *d, SeqRows *s, int B, const int *idx, int n) {
    seq_rows_reset(s);
    const PrefConfig *pc = &d->c->data;
    for (int b = 0; b < n; b++) {
        const PrefExample *x = &d->ps.ex[idx[b]];
        seq_rows_set(s, b, x->prompt, x->np, x->chosen, x->nc, pc->max_length, pc->keep_end);
        seq_rows_set(s, B + b, x->prompt, x->np, x->rejected, x->nr, pc->max_length, pc->keep_end);
    }
    seq_rows_finish(s, d->c->pad_to_multiple_of);
    ld_weights(d->c, s, B);
}

// Precompute the reference log-probs of every pair in dataset order, PB pairs at a time.
static Status precompute(Dpo *d, Err *e) {
    int n = d->ps.n, PB = d->c->precompute_ref_batch_size > 0 ? d->c->precompute_ref_batch_size : d->B;
    d->pre_c = xcalloc((size_t)n, sizeof(double));
    d->pre_r = xcalloc((size_t)n, sizeof(double));
    if (d->ps.has_ref) {
        for (int i = 0; i < n; i++) d->pre_c[i] = d->ps.ex[i].ref_chosen, d->pre_r[i] = d->ps.ex[i].ref_rejected;
        log_info("reference log-probs: the dataset's ref_chosen_logps / ref_rejected_logps columns");
        return ST_OK;
    }
    SeqRows rows;
    SeqScorer sc;
    seq_rows_init(&rows, 2 * PB, d->Tmax);
    seq_scorer_init(&sc, d->ref->be, 2 * PB, d->Tmax);
    int *idx = xmalloc((size_t)PB * sizeof(int));
    double *seq = xmalloc(2 * (size_t)PB * sizeof(double));
    Status st = ST_OK;
    for (int i0 = 0; i0 < n && st == ST_OK; i0 += PB) {
        int k = MIN(PB, n - i0);
        for (int b = 0; b < k; b++) idx[b] = i0 + b;
        build_rows(d, &rows, PB, idx, k);
        st = seq_score(&sc, d->ref, PLAN_SCORE, &rows, 0, NULL, e);
        if (st == ST_OK) seq_sums(&sc, &rows, seq);
        for (int b = 0; st == ST_OK && b < k; b++) d->pre_c[i0 + b] = seq[b], d->pre_r[i0 + b] = seq[PB + b];
    }
    free(idx), free(seq);
    seq_rows_free(&rows);
    seq_scorer_free(&sc);
    if (st == ST_OK) log_info("reference log-probs precomputed for %d pairs (batches of %d)", n, PB);
    return st;
}

static void ensure_order(Dpo *d, int epoch) {
    if (d->order_epoch == epoch) return;
    batch_epoch_order(d->order, d->ps.n, d->c->shuffle, d->c->train.seed, epoch);
    d->order_epoch = epoch;
}

// One micro-batch (global index j of the epoch): this rank's pairs, forward, loss, backward.
// scale = 1 / (micro-batches of the step * ranks). Sums into x (S_N).
static Status micro_batch(Dpo *d, Model *m, int epoch, int j, double scale, double *x, Err *e) {
    const DpoConfig *c = d->c;
    int B = d->B, *idx = d->idx, n = 0;
    ensure_order(d, epoch);
    for (int b = 0; b < B; b++) {
        int k = (j * d->W + d->R) * B + b;
        if (k < d->ps.n) idx[n++] = d->order[k];
    }
    SeqRows *s = &d->rows;
    if (m->cfg.ep_part > 0) {  // expert parallel: every rank's rows of the shape of the global micro-batch's longest
        s->T_min = 1;
        for (int k = j * d->W * B; k < MIN(d->ps.n, (j + 1) * d->W * B); k++) {
            const PrefExample *x = &d->ps.ex[d->order[k]];
            s->T_min = MAX(s->T_min, seq_row_tokens(x->np, MAX(x->nc, x->nr), c->data.max_length));
        }
    }
    build_rows(d, s, B, idx, n);
    if (!d->pre_c) {
        TRY(seq_score(&d->sc, d->ref, PLAN_SCORE, s, 0, NULL, e));
        seq_sums(&d->sc, s, d->ref_seq);
    }
    Plan *p;
    TRY(seq_score(&d->sc, m, PLAN_TRAIN, s, 1, &p, e));
    seq_sums(&d->sc, s, d->seq);
    const float *st = d->sc.stats, *lp = d->sc.logp, *ent = d->sc.entropy;
    double sft_sum = 0, sft_n = 0;
    for (int h = 0; h < 2; h++)
        for (int b = 0; b < n; b++) {
            int r = h * B + b;
            double wsum = 0;
            for (int t = 0; t < s->T; t++) {
                size_t i = (size_t)r * s->T + t;
                if (s->targets[i] == IGNORE_INDEX) continue;
                const float *q = st + i * LOGPROB_STATS;
                x[S_ENT] += ent[i], x[S_TOK] += 1;
                x[h ? S_LOGIT_R : S_LOGIT_C] += q[LOGPROB_STAT_ZMEAN];
                x[h ? S_TOK_R : S_TOK_C] += 1;
                if (!h) x[S_CORRECT] += q[LOGPROB_STAT_CORRECT], sft_sum -= lp[i], sft_n += 1;
                wsum += (double)lp[i] - q[LOGPROB_STAT_LSE2];
            }
            double w = exp(wsum / MAX(1, s->tlen[r]));  // WPO: exp(mean aligned log-prob)
            if (h) d->wpo[b] *= w;
            else d->wpo[b] = w;
        }
    for (int b = 0; b < n; b++) {
        d->lp_c[b] = d->seq[b], d->lp_r[b] = d->seq[B + b];
        d->rf_c[b] = d->pre_c ? d->pre_c[idx[b]] : d->ref_seq[b];
        d->rf_r[b] = d->pre_c ? d->pre_r[idx[b]] : d->ref_seq[B + b];
        d->len_c[b] = s->len[b], d->len_r[b] = s->len[B + b];
    }
    DpoPairs pr = {.n = n, .logp_c = d->lp_c, .logp_r = d->lp_r, .ref_c = d->rf_c, .ref_r = d->rf_r,
                   .len_c = d->len_c, .len_r = d->len_r, .wpo = c->loss.use_weighting ? d->wpo : NULL,
                   .sft_nll = sft_n > 0 ? sft_sum / sft_n : 0};
    double dsft = 0;
    double loss = dpo_loss(&c->loss, &pr, d->g_c, d->g_r, &dsft, d->scratch);
    // coefficients d (scale * loss) / d logp_t: the sequence's derivative times the token's weight,
    // plus the sft term's -1 / (chosen targets) on chosen tokens
    memset(d->sc.coef, 0, (size_t)s->R * s->T * sizeof(float));
    for (int h = 0; h < 2; h++)
        for (int b = 0; b < n; b++) {
            int r = h * B + b;
            double g = h ? d->g_r[b] : d->g_c[b], gs = !h && sft_n > 0 ? -dsft / sft_n : 0;
            for (int t = 0; t < s->T; t++) {
                size_t i = (size_t)r * s->T + t;
                if (s->targets[i] == IGNORE_INDEX) continue;
                d->sc.coef[i] = (float)(scale * (g * s->tokw[i] + gs));
            }
        }
    seq_backward(&d->sc, m, p, s);
    x[S_LOSS] += loss;
    for (int b = 0; b < n; b++) {
        double rc = dpo_reward(c->loss.beta, d->lp_c[b], d->rf_c[b]), rr = dpo_reward(c->loss.beta, d->lp_r[b], d->rf_r[b]);
        x[S_REW_C] += rc, x[S_REW_R] += rr, x[S_ACC] += rc > rr, x[S_MARGIN] += rc - rr;
        x[S_LOGP_C] += d->lp_c[b], x[S_LOGP_R] += d->lp_r[b];
    }
    x[S_PAIRS] += n;
    x[S_NTOK] += s->n_tokens;
    return ST_OK;
}

static Status dpo_step(void *ctx, Model *m, int step, StepReport *r, Err *e) {
    Dpo *d = ctx;
    int GA = MAX(1, d->c->train.grad_accum), spe = trainer_steps_per_epoch(d->n_batches, GA);
    int epoch = step / spe, first = (step % spe) * GA, n_micro = MIN(GA, d->n_batches - first);
    double scale = 1.0 / ((double)n_micro * d->W);
    memset(d->mb, 0, (size_t)GA * S_N * sizeof(double));
    for (int g = 0; g < n_micro; g++) {
        TRY(micro_batch(d, m, epoch, first + g, scale, d->mb + (size_t)g * S_N, e));
        step_report_tick(r, "micro-batch", g + 1, n_micro);
    }
    TRY(dist_allreduce_sum_host_d(d->dist, d->mb, (size_t)n_micro * S_N, e));
    for (int g = 0; g < n_micro; g++) {
        const double *x = d->mb + (size_t)g * S_N;
        double np = fmax(1, x[S_PAIRS]);
        r->loss += x[S_LOSS] * scale;
        r->n_tokens += x[S_NTOK];
        step_report_add(r, "rewards/chosen", x[S_REW_C] / np, 1);
        step_report_add(r, "rewards/rejected", x[S_REW_R] / np, 1);
        step_report_add(r, "rewards/accuracies", x[S_ACC] / np, 1);
        step_report_add(r, "rewards/margins", x[S_MARGIN] / np, 1);
        step_report_add(r, "logps/chosen", x[S_LOGP_C] / np, 1);
        step_report_add(r, "logps/rejected", x[S_LOGP_R] / np, 1);
        step_report_add(r, "logits/chosen", x[S_TOK_C] > 0 ? x[S_LOGIT_C] / x[S_TOK_C] : 0, 1);
        step_report_add(r, "logits/rejected", x[S_TOK_R] > 0 ? x[S_LOGIT_R] / x[S_TOK_R] : 0, 1);
        step_report_add(r, "entropy", x[S_TOK] > 0 ? x[S_ENT] / x[S_TOK] : 0, 1);
        step_report_add(r, "mean_token_accuracy", x[S_TOK_C] > 0 ? x[S_CORRECT] / x[S_TOK_C] : 0, 1);
    }
    return ST_OK;
}

static void dpo_free(Dpo *d) {
    if (!d) return;
    if (d->ref && d->ref != d->m) model_free(d->ref);
    pref_free(&d->ps);
    seq_rows_free(&d->rows);
    seq_scorer_free(&d->sc);
    free(d->pre_c), free(d->pre_r), free(d->order), free(d->idx), free(d->seq), free(d->ref_seq), free(d->lp_c), free(d->lp_r);
    free(d->rf_c), free(d->rf_r), free(d->len_c), free(d->len_r), free(d->wpo), free(d->g_c), free(d->g_r);
    free(d->scratch), free(d->mb);
    free(d);
}

static Status load_data(DpoConfig *c, int vocab, PrefSet *ps, Err *e) {
    int needs_codec;
    TRY(pref_detect(c->dataset, &needs_codec, e));
    PrefCodec pcd;
    TRY(pref_codec_open(&pcd, c->model_dir, needs_codec, c->chat_template_kwargs, e));
    PrefConfig pc = c->data;
    pc.chat_template_kwargs = pcd.kwargs;
    pc.vocab_size = vocab;
    Status st = pref_load(c->dataset, &pc, pref_codec_get(&pcd), ps, e);
    if (st == ST_OK) {
        log_info("dataset %s: %d pairs (%s%s%s)", c->dataset, ps->n, ps->tokenised ? "pre-tokenised" : "text",
                 ps->conversational ? ", conversational" : "", ps->implicit_prompt ? ", implicit prompt" : "");
        if (ps->n_dropped)
            log_warn("%s: %d pairs dropped: the prompt alone has max_length %d tokens or more", c->dataset, ps->n_dropped,
                     c->data.max_length);
        if (ps->n_bad) log_warn("%s: %d bad rows skipped (--skip_bad_rows); the first: %s", c->dataset, ps->n_bad, ps->first_bad);
    }
    pref_codec_free(&pcd);
    return st;
}

static Status dpo_create(DpoConfig *c, Model *m, Dpo **out, Err *e) {
    *out = NULL;
    TRY(dpo_check_config(&c->loss, e));
    if (c->per_device_train_batch_size < 1)
        return err_set(e, ST_EINVAL, "--per_device_train_batch_size must be positive");
    if (c->has_ld_alpha && !(c->ld_alpha >= 0 && c->ld_alpha <= 1))
        return err_set(e, ST_EINVAL, "--ld_alpha %g: must lie in [0, 1]", c->ld_alpha);
    Dpo *d = xcalloc(1, sizeof *d);
    d->c = c, d->m = m, d->order_epoch = -1;
    if (c->dist) d->dist = c->dist;
    else dist_single(&d->one), d->dist = &d->one;
    d->W = d->dist->world, d->R = d->dist->rank, d->B = c->per_device_train_batch_size;
    Status st = load_data(c, m->cfg.vocab_size, &d->ps, e);
    if (st != ST_OK) {
        free(d);
        return st;
    }
    int n = d->ps.n;
    st = pref_batch_count(c->dataset, "pairs", n, d->B * d->W, c->drop_last, &d->n_batches, e);
    int longest = 1;
    for (int i = 0; i < n; i++) {
        const PrefExample *x = &d->ps.ex[i];
        longest = MAX(longest, seq_row_tokens(x->np, MAX(x->nc, x->nr), c->data.max_length));
    }
    d->Tmax = round_up(longest, c->pad_to_multiple_of);
    int need_ref = !(c->precompute_ref_log_probs && d->ps.has_ref);
    if (st == ST_OK && need_ref) st = pref_load_reference(c->ref_model_dir, c->model_dir, m, c->dtype, &d->ref, e);
    if (st != ST_OK) {
        dpo_free(d);
        return st;
    }
    int B = d->B;
    seq_rows_init(&d->rows, 2 * B, d->Tmax);
    seq_scorer_init(&d->sc, m->be, 2 * B, d->Tmax);
    d->order = xmalloc((size_t)n * sizeof(int));
    d->idx = xmalloc((size_t)B * sizeof(int));
    d->seq = xcalloc(2 * (size_t)B, sizeof(double));
    d->ref_seq = xcalloc(2 * (size_t)B, sizeof(double));
    double **bufs[] = {&d->lp_c, &d->lp_r, &d->rf_c, &d->rf_r, &d->len_c, &d->len_r, &d->wpo, &d->g_c, &d->g_r};
    for (size_t k = 0; k < ARRAY_LEN(bufs); k++) *bufs[k] = xcalloc((size_t)B, sizeof(double));
    d->scratch = xcalloc(3 * (size_t)B, sizeof(double));
    d->mb = xcalloc((size_t)MAX(1, c->train.grad_accum) * S_N, sizeof(double));
    if (c->precompute_ref_log_probs) {
        st = precompute(d, e);
        if (st == ST_OK && d->ref) {  // not needed any more
            model_free(d->ref);
            d->ref = NULL;
        }
    } else if (d->ps.has_ref) {
        log_info("the dataset's ref_*_logps columns are not used without --precompute_ref_log_probs (as TRL)");
    }
    if (st != ST_OK) {
        dpo_free(d);
        return st;
    }
    *out = d;
    return ST_OK;
}

Status dpo_run(DpoConfig *c, TrainResult *res, Err *e) {
    if (!c->dist || c->dist->rank == 0) TRY(preflight_output_dir(c->train.output_dir, e));
    PrefPolicy p;
    Dpo *d = NULL;
    Status st = pref_policy_open(&p, &PREF_POLICY_SPEC(c), &c->dist, e);
    if (st == ST_OK) st = dpo_create(c, p.m, &d, e);
    if (st == ST_OK) {
        char types[256];
        int k = 0;
        for (int i = 0; i < c->loss.n_types && k < (int)sizeof types - 32; i++)
            k += snprintf(types + k, sizeof types - (size_t)k, "%s%s", i ? "," : "", dpo_loss_name(c->loss.type[i]));
        log_info("dpo: %d pairs, %d per micro-batch x %d ranks, %d micro-batches per epoch, loss %s, beta %g", d->ps.n,
                 d->B, d->W, d->n_batches, types, c->loss.beta);
        c->train.src_model_dir = c->model_dir;
        c->train.save_dtype = pref_save_dtype(c->save_dtype, c->dtype, p.m);
        int GA = MAX(1, c->train.grad_accum);
        StepSource src = {.ctx = d, .what = "pairs", .n_items = d->ps.n,
                          .steps_per_epoch = trainer_steps_per_epoch(d->n_batches, GA), .micro_batches = d->n_batches,
                          .batch_size = d->B, .grad_accum = GA, .step = dpo_step, .dist = d->dist, .sharded_ok = 1,
                          .sharded_base_ok = 1};
        st = trainer_loop(p.m, &src, &c->train, res, e);
    }
    dpo_free(d);
    pref_policy_close(&p, &c->dist);
    return st;
}
