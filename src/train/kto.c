// kto.c: KTO = unpaired rows with their KL rows (pref_data) + static-shape batches (pref_batch) +
// kto_loss (dpo_math) + the shared trainer loop.
#include "kto.h"

#include "../core/alloc.h"
#include "../core/log.h"
#include "pref_batch.h"
#include "pref_setup.h"
#include "preflight.h"

#include <math.h>
#include <string.h>

void kto_config_default(KtoConfig *c) {
    memset(c, 0, sizeof *c);
    c->dtype = -1, c->save_dtype = -1;
    c->data.max_length = 1024;
    c->pad_to_multiple_of = 128;
    c->per_device_train_batch_size = 8;
    c->loss = (KtoLossConfig){.type = KTO_LOSS_KTO, .beta = 0.1, .desirable_weight = 1.0, .undesirable_weight = 1.0};
    trainer_config_trl_default(&c->train, 1e-6);
}

// Per micro-batch sums over the ranks.
enum {
    K_LOSS, K_KL, K_NC, K_NR, K_REW_C, K_REW_R, K_LOGP_C, K_LOGP_R, K_ENT, K_TOK, K_LOGIT_C, K_TOK_C, K_LOGIT_R,
    K_TOK_R, K_NTOK, K_N
};

typedef struct Kto {
    KtoConfig *c;
    Model *m, *ref;
    UnpairedSet us;
    int kl;                    // the loss needs the KL estimate (kto)
    double *pre, *pre_kl;      // (n) precomputed reference log-probs (NULL: on the fly)
    Dist *dist, one;
    int W, R, B, n_batches, Tmax;
    SeqRows rows, klrows;      // (B, Tmax) each
    SeqScorer sc;
    int *idx, *label;          // (B)
    double *lp, *rf, *klp, *rkl, *g;  // (B)
    double *mb;                // (GA, K_N)
} Kto;

// Rows idx[0..n) into the main rows and their KL rows.
static void build_rows(Kto *k, const int *idx, int n) {
    seq_rows_reset(&k->rows);
    seq_rows_reset(&k->klrows);
    int L = k->c->data.max_length;
    for (int b = 0; b < n; b++) {
        const UnpairedExample *x = &k->us.ex[idx[b]];
        seq_rows_set(&k->rows, b, x->prompt, x->np, x->completion, x->nc, L, 0);
        if (k->kl) {
            const UnpairedExample *y = &k->us.ex[x->kl_src];
            seq_rows_set(&k->klrows, b, x->prompt, x->np, y->completion, y->nc, L, 0);
        }
    }
    seq_rows_finish(&k->rows, k->c->pad_to_multiple_of);
    seq_rows_finish(&k->klrows, k->c->pad_to_multiple_of);
}

static Status score_sums(Kto *k, Model *mm, SeqRows *s, double *out, Err *e) {
    TRY(seq_score(&k->sc, mm, PLAN_SCORE, s, 0, NULL, e));
    seq_sums(&k->sc, s, out);
    return ST_OK;
}

// This rank's rows of micro-batch j: chunk j * W + R of B consecutive rows.
static int rows_of(const Kto *k, int j, int *idx) {
    int n = 0;
    for (int b = 0; b < k->B; b++) {
        int i = (j * k->W + k->R) * k->B + b;
        if (i < k->us.n) idx[n++] = i;
    }
    return n;
}

static Status precompute(Kto *k, Err *e) {
    int n = k->us.n;
    k->pre = xcalloc((size_t)n, sizeof(double));
    k->pre_kl = xcalloc((size_t)n, sizeof(double));
    if (k->us.has_ref) {
        for (int i = 0; i < n; i++) k->pre[i] = k->us.ex[i].ref_logp, k->pre_kl[i] = k->us.ex[i].ref_kl_logp;
        log_info("reference log-probs: the dataset's ref_logps%s columns", k->kl ? " / ref_KL_logps" : "");
        return ST_OK;
    }
    for (int i0 = 0; i0 < n; i0 += k->B) {
        int m = MIN(k->B, n - i0);
        for (int b = 0; b < m; b++) k->idx[b] = i0 + b;
        build_rows(k, k->idx, m);
        TRY(score_sums(k, k->ref, &k->rows, k->rf, e));
        if (k->kl) TRY(score_sums(k, k->ref, &k->klrows, k->rkl, e));
        for (int b = 0; b < m; b++) k->pre[i0 + b] = k->rf[b], k->pre_kl[i0 + b] = k->kl ? k->rkl[b] : 0;
    }
    log_info("reference log-probs precomputed for %d rows", n);
    return ST_OK;
}

static Status micro_batch(Kto *k, Model *m, int j, double scale, double *x, Err *e) {
    const KtoConfig *c = k->c;
    int n = rows_of(k, j, k->idx);
    if (m->cfg.ep_part > 0) {  // expert parallel: every rank's rows of the shape of the global micro-batch's longest
        int L = c->data.max_length;
        k->rows.T_min = k->klrows.T_min = 1;
        for (int i = j * k->W * k->B; i < MIN(k->us.n, (j + 1) * k->W * k->B); i++) {
            const UnpairedExample *x = &k->us.ex[i];
            k->rows.T_min = MAX(k->rows.T_min, seq_row_tokens(x->np, x->nc, L));
            if (k->kl) k->klrows.T_min = MAX(k->klrows.T_min, seq_row_tokens(x->np, k->us.ex[x->kl_src].nc, L));
        }
    }
    build_rows(k, k->idx, n);
    SeqRows *s = &k->rows;
    if (k->pre) {
        for (int b = 0; b < n; b++) k->rf[b] = k->pre[k->idx[b]], k->rkl[b] = k->pre_kl[k->idx[b]];
    } else {
        TRY(score_sums(k, k->ref, s, k->rf, e));
        if (k->kl) TRY(score_sums(k, k->ref, &k->klrows, k->rkl, e));
    }
    double kl = 0;
    if (k->kl) {  // the policy's KL log-probs (no gradient), averaged over the ranks, clamped at 0
        TRY(score_sums(k, m, &k->klrows, k->klp, e));
        double d[2] = {0, n > 0};
        for (int b = 0; b < n; b++) d[0] += k->klp[b] - k->rkl[b];
        if (n) d[0] /= n;
        TRY(dist_allreduce_sum_host_d(k->dist, d, 2, e));
        kl = d[1] > 0 ? fmax(0, d[0] / d[1]) : 0;  // the mean of the ranks' means (ranks with rows)
    }
    Plan *p;
    TRY(seq_score(&k->sc, m, PLAN_TRAIN, s, 1, &p, e));
    seq_sums(&k->sc, s, k->lp);
    for (int b = 0; b < n; b++) k->label[b] = k->us.ex[k->idx[b]].label;
    double loss = kto_loss(&c->loss, n, k->lp, k->rf, k->label, kl, k->g);
    memset(k->sc.coef, 0, (size_t)s->R * s->T * sizeof(float));
    for (int b = 0; b < n; b++)
        for (int t = 0; t < s->T; t++) {
            size_t i = (size_t)b * s->T + t;
            if (s->targets[i] != IGNORE_INDEX) k->sc.coef[i] = (float)(scale * k->g[b] * s->tokw[i]);
        }
    seq_backward(&k->sc, m, p, s);
    x[K_LOSS] += loss, x[K_KL] = kl, x[K_NTOK] += s->n_tokens;
    for (int b = 0; b < n; b++) {
        int h = !k->label[b];
        x[h ? K_NR : K_NC] += 1;
        x[h ? K_REW_R : K_REW_C] += c->loss.beta * (k->lp[b] - k->rf[b]);
        x[h ? K_LOGP_R : K_LOGP_C] += k->lp[b];
        for (int t = 0; t < s->T; t++) {
            size_t i = (size_t)b * s->T + t;
            if (s->targets[i] == IGNORE_INDEX) continue;
            x[K_ENT] += k->sc.entropy[i], x[K_TOK] += 1;
            x[h ? K_LOGIT_R : K_LOGIT_C] += k->sc.stats[i * LOGPROB_STATS + LOGPROB_STAT_ZMEAN];
            x[h ? K_TOK_R : K_TOK_C] += 1;
        }
    }
    return ST_OK;
}

static Status kto_step(void *ctx, Model *m, int step, StepReport *r, Err *e) {
    Kto *k = ctx;
    int GA = MAX(1, k->c->train.grad_accum), spe = trainer_steps_per_epoch(k->n_batches, GA);
    int first = (step % spe) * GA, n_micro = MIN(GA, k->n_batches - first);
    double scale = 1.0 / ((double)n_micro * k->W);
    memset(k->mb, 0, (size_t)GA * K_N * sizeof(double));
    for (int g = 0; g < n_micro; g++) {
        TRY(micro_batch(k, m, first + g, scale, k->mb + (size_t)g * K_N, e));
        step_report_tick(r, "micro-batch", g + 1, n_micro);
    }
    for (int g = 0; g < n_micro; g++) k->mb[(size_t)g * K_N + K_KL] /= k->W;  // every rank holds the same kl
    TRY(dist_allreduce_sum_host_d(k->dist, k->mb, (size_t)n_micro * K_N, e));
    for (int g = 0; g < n_micro; g++) {
        const double *x = k->mb + (size_t)g * K_N;
        r->loss += x[K_LOSS] * scale;
        r->n_tokens += x[K_NTOK];
        step_report_add(r, "kl", x[K_KL], 1);
        step_report_add(r, "entropy", x[K_TOK] > 0 ? x[K_ENT] / x[K_TOK] : 0, 1);
        if (x[K_TOK_C] > 0) step_report_add(r, "logits/chosen", x[K_LOGIT_C] / x[K_TOK_C], 1);
        if (x[K_TOK_R] > 0) step_report_add(r, "logits/rejected", x[K_LOGIT_R] / x[K_TOK_R], 1);
        if (x[K_NC] > 0) {
            step_report_add(r, "rewards/chosen", x[K_REW_C] / x[K_NC], 1);
            step_report_add(r, "logps/chosen", x[K_LOGP_C] / x[K_NC], 1);
        }
        if (x[K_NR] > 0) {
            step_report_add(r, "rewards/rejected", x[K_REW_R] / x[K_NR], 1);
            step_report_add(r, "logps/rejected", x[K_LOGP_R] / x[K_NR], 1);
        }
        if (x[K_NC] > 0 && x[K_NR] > 0)
            step_report_add(r, "rewards/margins", x[K_REW_C] / x[K_NC] - x[K_REW_R] / x[K_NR], 1);
    }
    return ST_OK;
}

static void kto_free(Kto *k) {
    if (!k) return;
    if (k->ref) model_free(k->ref);
    unpaired_free(&k->us);
    seq_rows_free(&k->rows);
    seq_rows_free(&k->klrows);
    seq_scorer_free(&k->sc);
    free(k->pre), free(k->pre_kl), free(k->idx), free(k->label), free(k->lp), free(k->rf), free(k->klp), free(k->rkl);
    free(k->g), free(k->mb);
    free(k);
}

static Status load_data(KtoConfig *c, int vocab, int kl_batch, UnpairedSet *us, Err *e) {
    int needs_codec;
    TRY(unpaired_detect(c->dataset, &needs_codec, e));
    PrefCodec pcd;
    TRY(pref_codec_open(&pcd, c->model_dir, needs_codec, c->chat_template_kwargs, e));
    PrefConfig pc = c->data;
    pc.chat_template_kwargs = pcd.kwargs;
    pc.vocab_size = vocab;
    Status st = unpaired_load(c->dataset, &pc, pref_codec_get(&pcd), kl_batch, us, e);
    if (st == ST_OK) {
        log_info("dataset %s: %d rows, %d desirable, %d undesirable%s", c->dataset, us->n, us->n_desirable,
                 us->n - us->n_desirable, us->from_pairs ? " (unpaired from chosen / rejected pairs)" : "");
        if (us->n_dropped)
            log_warn("%s: %d rows dropped: the prompt alone has max_length %d tokens or more", c->dataset, us->n_dropped,
                     c->data.max_length);
        if (us->n_bad) log_warn("%s: %d bad rows skipped (--skip_bad_rows); the first: %s", c->dataset, us->n_bad, us->first_bad);
    }
    pref_codec_free(&pcd);
    return st;
}

static Status kto_create(KtoConfig *c, Model *m, Kto **out, Err *e) {
    *out = NULL;
    if (!(c->loss.beta > 0)) return err_set(e, ST_EINVAL, "--beta must be positive");
    int kl = c->loss.type == KTO_LOSS_KTO;
    if (kl && c->per_device_train_batch_size <= 1)
        return err_set(e, ST_EINVAL, "--per_device_train_batch_size must be > 1 for the kto loss: its KL term pairs "
                                     "each prompt with another row's completion of the same batch (as TRL)");
    if (c->per_device_train_batch_size < 1) return err_set(e, ST_EINVAL, "--per_device_train_batch_size must be positive");
    Kto *k = xcalloc(1, sizeof *k);
    k->c = c, k->m = m, k->kl = kl;
    if (c->dist) k->dist = c->dist;
    else dist_single(&k->one), k->dist = &k->one;
    k->W = k->dist->world, k->R = k->dist->rank, k->B = c->per_device_train_batch_size;
    Status st = load_data(c, m->cfg.vocab_size, kl ? k->B : 0, &k->us, e);
    if (st != ST_OK) {
        free(k);
        return st;
    }
    int n = k->us.n;
    st = pref_batch_count(c->dataset, "rows", n, k->B * k->W, c->drop_last, &k->n_batches, e);
    int longest = 1;
    for (int i = 0; i < n; i++) {
        const UnpairedExample *x = &k->us.ex[i];
        int nc = x->nc;
        if (kl) nc = MAX(nc, k->us.ex[x->kl_src].nc);
        longest = MAX(longest, seq_row_tokens(x->np, nc, c->data.max_length));
    }
    k->Tmax = round_up(longest, c->pad_to_multiple_of);
    int need_ref = !(c->precompute_ref_log_probs && k->us.has_ref);
    if (st == ST_OK && need_ref) st = pref_load_reference(c->ref_model_dir, c->model_dir, m, c->dtype, &k->ref, e);
    if (st != ST_OK) {
        kto_free(k);
        return st;
    }
    int B = k->B;
    seq_rows_init(&k->rows, B, k->Tmax);
    seq_rows_init(&k->klrows, B, k->Tmax);
    seq_scorer_init(&k->sc, m->be, B, k->Tmax);
    k->idx = xcalloc((size_t)B, sizeof(int));
    k->label = xcalloc((size_t)B, sizeof(int));
    double **bufs[] = {&k->lp, &k->rf, &k->klp, &k->rkl, &k->g};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) *bufs[i] = xcalloc((size_t)B, sizeof(double));
    k->mb = xcalloc((size_t)MAX(1, c->train.grad_accum) * K_N, sizeof(double));
    if (c->precompute_ref_log_probs) {
        st = precompute(k, e);
        if (st == ST_OK && k->ref) model_free(k->ref), k->ref = NULL;
    }
    if (st != ST_OK) {
        kto_free(k);
        return st;
    }
    *out = k;
    return ST_OK;
}

Status kto_run(KtoConfig *c, TrainResult *res, Err *e) {
    if (!c->dist || c->dist->rank == 0) TRY(preflight_output_dir(c->train.output_dir, e));
    PrefPolicy p;
    Kto *k = NULL;
    Status st = pref_policy_open(&p, &PREF_POLICY_SPEC(c), &c->dist, e);
    if (st == ST_OK) st = kto_create(c, p.m, &k, e);
    if (st == ST_OK) {
        log_info("kto: %d rows, %d per micro-batch x %d ranks, %d micro-batches per epoch, loss %s, beta %g", k->us.n,
                 k->B, k->W, k->n_batches, c->loss.type == KTO_LOSS_KTO ? "kto" : "apo_zero_unpaired", c->loss.beta);
        c->train.src_model_dir = c->model_dir;
        c->train.save_dtype = pref_save_dtype(c->save_dtype, c->dtype, p.m);
        int GA = MAX(1, c->train.grad_accum);
        StepSource src = {.ctx = k, .what = "rows", .n_items = k->us.n,
                          .steps_per_epoch = trainer_steps_per_epoch(k->n_batches, GA), .micro_batches = k->n_batches,
                          .batch_size = k->B, .grad_accum = GA, .step = kto_step, .dist = k->dist, .sharded_ok = 1,
                          .sharded_base_ok = 1};
        st = trainer_loop(p.m, &src, &c->train, res, e);
    }
    kto_free(k);
    pref_policy_close(&p, &c->dist);
    return st;
}
