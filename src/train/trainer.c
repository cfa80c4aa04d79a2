// trainer.c: the loop.
#include "trainer.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../core/meminfo.h"
#include "../model/lora.h"
#include "../model/qwen3.h"
#include "ep.h"
#include "fsdp.h"
#include "tp.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

void trainer_config_trl_default(TrainConfig *t, double lr) {
    t->grad_accum = 1;
    t->num_train_epochs = 3;
    t->max_steps = -1;
    t->opt = (OptimConfig){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .max_grad_norm = 1.0,
                           .sched = SCHED_LINEAR};
    t->logging_steps = 10;
    t->save_steps = 500;
}

int trainer_steps_per_epoch(int micro_batches, int grad_accum) {
    return MAX(1, (micro_batches + grad_accum - 1) / grad_accum);
}

// plan_get, reporting every newly built shape.
static Status get_plan(Model *m, PlanMode mode, int B, int T, Plan **p, Err *e) {
    int before = m->plans.n;
    TRY(plan_get(m, mode, B, T, p, e));
    if (m->plans.n > before)
        log_info("plan %d built: %s B=%d T=%d, %.1f MiB (plans total %.1f MiB)", m->plans.n, plan_mode_name(mode), B, T,
                 (*p)->bytes / 1048576.0, m->plans.bytes / 1048576.0);
    return ST_OK;
}

typedef struct RowStats {
    float *loss, *correct, *entropy;  // (B * Tmax) host
} RowStats;

static void stats_init(RowStats *rs, size_t n) {
    rs->loss = xmalloc(n * sizeof(float));
    rs->correct = xmalloc(n * sizeof(float));
    rs->entropy = xmalloc(n * sizeof(float));
}

static void stats_free(RowStats *rs) { free(rs->loss), free(rs->correct), free(rs->entropy); }

// Sum the per-row outputs over target rows: loss sum, correct count, entropy sum.
static void sum_rows(Model *m, Plan *p, const HostBatch *hb, RowStats *rs, double *loss, double *correct,
                     double *entropy) {
    Backend *be = m->be;
    size_t N = (size_t)hb->B * hb->T;
    be->download(be, rs->loss, p->row_loss, N * sizeof(float));
    be->download(be, rs->correct, p->row_correct, N * sizeof(float));
    be->download(be, rs->entropy, p->row_entropy, N * sizeof(float));
    double l = 0, c = 0, h = 0;
    for (size_t i = 0; i < N; i++) {
        if (hb->targets[i] == IGNORE_INDEX) continue;
        l += rs->loss[i];
        c += rs->correct[i];
        h += rs->entropy[i];
    }
    *loss = l, *correct = c, *entropy = h;
}

// Evaluation as transformers' Trainer.evaluation_loop and TRL's SFTTrainer compute it. Each
// batch's loss is its own mean over label tokens (prediction_step passes no num_items_in_batch);
// every batch mean is repeated once per row (`losses.repeat(eval_batch_size)`, the last batch cut
// to the dataset's remainder by gather_for_metrics) and eval_loss is their mean: batch means
// weighted by rows. Per rank, the rank's own batch mean counts its real rows (accelerate gathers
// each rank's mean). Accuracy and entropy are TRL's per-batch ratios over the whole global batch
// (counts gathered from every rank), then the plain mean over batches (SFTTrainer.log).
Status trainer_evaluate(Model *m, Batcher *eval, Dist *d, double *loss, double *accuracy, double *entropy, Err *e) {
    HostBatch hb;
    host_batch_init(&hb, eval);
    RowStats rs;
    stats_init(&rs, (size_t)eval->cfg.B * eval->Tmax);
    int nb = eval->n_batches;
    enum { WLOSS, ROWS, ENT, TGT, CORRECT, NSTAT };
    double *acc = xcalloc((size_t)nb * NSTAT, sizeof(double));  // (nb, NSTAT) summed over ranks
    Status st = ST_OK;
    int ep = m->hooks && m->hooks->moe_ex;  // expert parallel: every rank runs every forward (collective)
    for (int i = 0; i < nb && st == ST_OK; i++) {
        batcher_fill(eval, 0, i, &hb);
        if (hb.n_targets == 0 && !ep) continue;  // no row of this rank in the last batch: it weighs nothing
        Plan *p;
        st = get_plan(m, PLAN_SCORE, hb.B, hb.T, &p, e);
        if (st != ST_OK) break;
        qwen3_set_inputs(m, p, hb.ids, hb.pos, hb.seg, hb.targets, NULL);
        qwen3_forward(m, p);
        qwen3_ce_loss(m, p, 1.0f, 0);
        double l, c, h;
        sum_rows(m, p, &hb, &rs, &l, &c, &h);
        double *a = acc + (size_t)i * NSTAT;
        if (hb.n_targets == 0) continue;
        a[WLOSS] = l / hb.n_targets * hb.n_rows, a[ROWS] = hb.n_rows;
        a[ENT] = h, a[TGT] = hb.n_targets, a[CORRECT] = c;
    }
    host_batch_free(&hb);
    stats_free(&rs);
    if (st == ST_OK && d) st = dist_allreduce_sum_host_d(d, acc, (size_t)nb * NSTAT, e);
    double wl = 0, rows = 0, ent = 0, cor = 0;
    int counted = 0;
    for (int i = 0; i < nb; i++) {
        const double *a = acc + (size_t)i * NSTAT;
        if (a[TGT] <= 0) continue;
        wl += a[WLOSS], rows += a[ROWS];
        ent += a[ENT] / a[TGT], cor += a[CORRECT] / a[TGT];
        counted++;
    }
    free(acc);
    TRY(st);
    *loss = rows > 0 ? wl / rows : NAN;
    if (accuracy) *accuracy = counted ? cor / counted : NAN;
    if (entropy) *entropy = counted ? ent / counted : NAN;
    return ST_OK;
}

void step_report_tick(const StepReport *r, const char *what, int done, int total) {
    if (r->tick) r->tick(r->tick_ctx, what, done, total);
}

void step_report_add(StepReport *r, const char *name, double value, double weight) {
    for (int i = 0; i < r->n_metrics; i++)
        if (!strcmp(r->names[i], name)) {
            r->sums[i] += value;
            r->counts[i] += weight;
            return;
        }
    CHECK(r->n_metrics < STEP_MAX_METRICS);
    r->names[r->n_metrics] = name;
    r->sums[r->n_metrics] = value;
    r->counts[r->n_metrics] = weight;
    r->n_metrics++;
}

// ---- SFT: batches of rows, cross-entropy over the targets ------------------------------------

#define SFT_SUMS 5  // per micro-batch: loss, correct, entropy, targets, aux loss

typedef struct SftSource {
    Batcher *train, *eval;  // this rank's shards
    Dist *dist;
    int grad_accum;
    HostBatch *hb;  // (grad_accum)
    double *sums;   // (grad_accum, SFT_SUMS)
    RowStats rs;
} SftSource;

static Status sft_step(void *ctx, Model *m, int step, StepReport *r, Err *e) {
    SftSource *s = ctx;
    Batcher *train = s->train;
    int GA = s->grad_accum, mb = train->n_batches, spe = trainer_steps_per_epoch(mb, GA);
    int epoch = step / spe, j = step % spe;
    int first = j * GA, n_micro = MIN(GA, mb - first);
    double counts[2] = {0, 0};  // targets, tokens
    for (int g = 0; g < n_micro; g++) {
        batcher_fill(train, epoch, first + g, &s->hb[g]);
        counts[0] += s->hb[g].n_targets;
        counts[1] += s->hb[g].n_tokens;
    }
    // TRL: the loss of a step is the token mean over every micro-batch of the step on every rank
    // (average_tokens_across_devices), so the count is summed before the backward.
    TRY(dist_allreduce_sum_host_d(s->dist, counts, 2, e));
    float scale = counts[0] > 0 ? 1.0f / (float)counts[0] : 0.0f;
    // On a backend that records steps as graphs the micro-batch runs with scale 1 (a recorded step
    // cannot take a new scalar) and the accumulated gradient is scaled once afterwards.
    // With the load-balancing loss (MoE, output_router_logits) micro-batches run eagerly: its
    // gradient is not scaled by the token count, which a recorded step could not tell apart.
    int aux = m->cfg.num_experts > 0 && m->cfg.output_router_logits;
    int recorded = m->be->graph_begin != NULL && !m->hooks && !aux;
    // the aux loss of the step: the mean over micro-batches (and ranks) of each forward's
    m->moe_aux_scale = 1.0 / ((double)n_micro * (s->dist ? s->dist->world : 1));
    for (int g = 0; g < n_micro; g++) {
        HostBatch *hb = &s->hb[g];
        Plan *p;
        TRY(get_plan(m, PLAN_TRAIN, hb->B, hb->T, &p, e));
        qwen3_set_inputs(m, p, hb->ids, hb->pos, hb->seg, hb->targets, NULL);
        if (recorded) {
            qwen3_train_micro(m, p);
        } else {
            qwen3_forward(m, p);
            qwen3_ce_loss(m, p, scale, 1);
        }
        double *x = &s->sums[SFT_SUMS * g];
        sum_rows(m, p, hb, &s->rs, &x[0], &x[1], &x[2]);
        x[3] = hb->n_targets;
        x[4] = aux ? qwen3_moe_aux_loss(m, p) : 0;
        step_report_tick(r, "micro-batch", g + 1, n_micro);
    }
    if (recorded) {
        Trainable tr = model_trainable(m);
        m->be->scale(m->be, tr.grads, scale, tr.tt->n_params);
    }
    TRY(dist_allreduce_sum_host_d(s->dist, s->sums, SFT_SUMS * (size_t)n_micro, e));
    for (int g = 0; g < n_micro; g++) {
        const double *x = &s->sums[SFT_SUMS * g];
        r->loss += x[0] * scale;
        if (aux) {  // x[4]: summed over ranks; the loss adds coef * the mean over micro-batches and ranks
            double a = x[4] * m->moe_aux_scale;
            r->loss += m->cfg.router_aux_loss_coef * a;
            step_report_add(r, "aux_loss", a * n_micro, 1);
        }
        if (x[3] > 0) {
            step_report_add(r, "mean_token_accuracy", x[1] / x[3], 1);
            step_report_add(r, "entropy", x[2] / x[3], 1);
        }
    }
    r->n_tokens = counts[1];
    return ST_OK;
}

static Status sft_evaluate(void *ctx, Model *m, cJSON *o, double *eval_loss, Err *e) {
    SftSource *s = ctx;
    double l, a, h;
    TRY(trainer_evaluate(m, s->eval, s->dist, &l, &a, &h, e));
    cJSON_AddNumberToObject(o, "eval_loss", l);
    cJSON_AddNumberToObject(o, "eval_mean_token_accuracy", a);
    cJSON_AddNumberToObject(o, "eval_entropy", h);
    *eval_loss = l;
    return ST_OK;
}

Status trainer_run(Model *m, Batcher *train, Batcher *eval, Dist *d, const TrainConfig *cfg, TrainResult *res,
                   Err *e) {
    int GA = MAX(1, cfg->grad_accum), mb = train->n_batches;
    if (mb == 0)
        return err_set(e, ST_EINVAL, "the training set has %d rows, fewer than one batch of %d (drop_last)",
                       train->rows->n, train->cfg.B * train->cfg.world);
    Dist one;
    if (!d) dist_single(&one), d = &one;
    SftSource s = {.train = train, .eval = eval, .dist = d, .grad_accum = GA};
    s.hb = xcalloc((size_t)GA, sizeof(HostBatch));
    s.sums = xcalloc(SFT_SUMS * (size_t)GA, sizeof(double));
    for (int g = 0; g < GA; g++) host_batch_init(&s.hb[g], train);
    stats_init(&s.rs, (size_t)train->cfg.B * train->Tmax);
    StepSource src = {.ctx = &s, .what = "rows", .n_items = train->rows->n,
                      .steps_per_epoch = trainer_steps_per_epoch(mb, GA), .micro_batches = mb,
                      .batch_size = train->cfg.B, .grad_accum = GA, .step = sft_step,
                      .evaluate = eval ? sft_evaluate : NULL, .dist = d, .sharded_ok = 1,
                      .sharded_base_ok = 1};
    Status st = trainer_loop(m, &src, cfg, res, e);
    for (int g = 0; g < GA; g++) host_batch_free(&s.hb[g]);
    free(s.hb);
    free(s.sums);
    stats_free(&s.rs);
    return st;
}

// ---- the loop ----------------------------------------------------------------------------

typedef struct LogWindow {
    double loss_sum;  // sum of step losses
    int steps;
    StepReport acc;   // metric sums and counts over the window
} LogWindow;

static void window_add(LogWindow *w, const StepReport *r) {
    w->loss_sum += r->loss;
    w->steps++;
    for (int i = 0; i < r->n_metrics; i++) {
        step_report_add(&w->acc, r->names[i], r->sums[i], r->counts[i]);
    }
}

// Every rank evaluates its shard; rank 0 writes the line.
static Status run_eval_and_log(Model *m, StepSource *src, Metrics *mt, int lead, int step, double epoch, double *out,
                               Err *e) {
    cJSON *o = cJSON_CreateObject();
    double l = NAN;
    Status st = src->evaluate(src->ctx, m, o, &l, e);
    if (st == ST_OK) {
        cJSON_AddNumberToObject(o, "epoch", epoch);
        cJSON_AddNumberToObject(o, "step", step);
        if (lead) metrics_write(mt, o);
        log_info("step %d: eval_loss %.6f", step, l);
        *out = l;
    }
    cJSON_Delete(o);
    return st;
}

// The moments of a split model (tensor or expert parallel) gathered into the whole model's layout:
// *fmh, *fvh (whole's n_params, allocated where whole is, i.e. on the writer) from mo (device
// moments through host copies); mo then points at them.
typedef Status (*GatherFlat)(void *ctx, const Model *m, float *full, const float *local, Err *e);
static Status gather_flat_tp(void *ctx, const Model *m, float *full, const float *local, Err *e) {
    return tp_gather_flat(ctx, m, full, local, e);
}
static Status gather_flat_ep(void *ctx, const Model *m, float *full, const float *local, Err *e) {
    return ep_gather_flat(ctx, m, full, local, e);
}
static Status gather_moments(const Model *m, const Model *whole, CkptMoments *mo, GatherFlat gather, void *ctx,
                             float **fmh, float **fvh, Err *e) {
    size_t n = model_trainable(m).tt->n_params;  // the model's, or its adapter's
    const float *lm = mo->m, *lv = mo->v;
    float *hm = NULL, *hv = NULL;
    if (mo->on_device) {
        lm = hm = xmalloc(n * sizeof(float)), lv = hv = xmalloc(n * sizeof(float));
        m->be->download(m->be, hm, mo->m, n * sizeof(float));
        m->be->download(m->be, hv, mo->v, n * sizeof(float));
    }
    if (whole) {
        *fmh = xmalloc(model_trainable(whole).tt->n_params * sizeof(float));
        *fvh = xmalloc(model_trainable(whole).tt->n_params * sizeof(float));
    }
    Status st = gather(ctx, m, *fmh, lm, e);
    if (st == ST_OK) st = gather(ctx, m, *fvh, lv, e);
    free(hm), free(hv);
    *mo = (CkptMoments){*fmh, *fvh, 0};
    return st;
}

// Every rank calls it; rank 0 writes the checkpoint, streaming the moments from the optimizer's
// buffers (with ZeRO-1 on several ranks they are gathered to rank 0 first); all ranks learn
// whether it worked. *secs accumulates the time spent.
static Status save_checkpoint(Model *m, Optim *opt, Dist *d, StepSource *src, const TrainConfig *cfg,
                              const TrainState *ts, Metrics *mt, double *secs, Err *e) {
    double t0 = metrics_now();
    float *mh = NULL, *vh = NULL;
    CkptMoments mo = {opt->m, opt->v, 1}, *mop = cfg->save_only_model ? NULL : &mo;
    Status st = opt->fsdp ? fsdp_full_begin(opt->fsdp, 0, e) : ST_OK;  // the weights whole on rank 0
    if (st == ST_OK && mop && ((opt->zero_stage == 1 && d->world > 1) || opt->fsdp)) {
        if (d->rank == 0) {
            mh = xmalloc(model_trainable(m).tt->n_params * sizeof(float));
            vh = xmalloc(model_trainable(m).tt->n_params * sizeof(float));
        }
        st = optim_gather_state(opt, m->be, mh, vh, e);
        mo = (CkptMoments){mh, vh, 0};
    }
    // tensor parallel: the model and the moments gathered over the writer's group
    Tp *tp = m->hooks && m->hooks->reduce ? m->hooks->reduce_ctx : NULL;
    Model *whole = NULL;
    float *fmh = NULL, *fvh = NULL;
    if (st == ST_OK && tp && d->rank == 0) {
        st = tp_gather(tp, m, &whole, e);
        if (st == ST_OK && mop) st = gather_moments(m, whole, &mo, gather_flat_tp, tp, &fmh, &fvh, e);
    }
    // expert parallel: every rank's experts, and their moments, gathered to rank 0
    Ep *ep = m->hooks && m->hooks->moe_ex ? m->hooks->moe_ex->ctx : NULL;
    if (st == ST_OK && ep) {
        st = ep_gather(ep, m, &whole, e);
        if (st == ST_OK && mop) st = gather_moments(m, whole, &mo, gather_flat_ep, ep, &fmh, &fvh, e);
    }
    if (st == ST_OK && dist_lead(d)) {
        if (mt) {
            char what[64];
            snprintf(what, sizeof what, "saving checkpoint-%d", ts->step);
            metrics_tick(mt, what, 0, 0);
        }
        st = checkpoint_save_ex(cfg->output_dir, whole ? whole : m, mop, ts, cfg->save_dtype, cfg->src_model_dir,
                                src->save_state, src->ctx, e);
        if (st == ST_OK) st = checkpoint_prune(cfg->output_dir, cfg->save_total_limit, e);
    }
    model_free(whole);
    free(fmh);
    free(fvh);
    free(mh);
    free(vh);
    if (opt->fsdp) fsdp_full_end(opt->fsdp, 0);
    *secs += metrics_now() - t0;
    return dist_agree(d, st, e);
}

// Has a SIGINT / SIGTERM asked the run to stop? With several ranks, any rank's signal stops all
// of them at the same step.
static Status stop_requested(const TrainConfig *cfg, Dist *d, int *stop, Err *e) {
    double x = cfg->stop && *cfg->stop ? 1 : 0;
    if (d->world > 1) TRY(dist_allreduce_sum_host_d(d, &x, 1, e));
    *stop = x > 0;
    return ST_OK;
}

// What the bar shows: the loss of the logging window so far (at a logging step exactly
// metrics.jsonl's value), and the window's reward (GRPO, RLOO) or KL (distillation).
static void bar_status(char *buf, size_t n, const LogWindow *w) {
    int k = snprintf(buf, n, "loss %.4f", w->loss_sum / w->steps);
    static const char *extra[] = {"reward", "kl_student_teacher"};
    for (size_t j = 0; j < ARRAY_LEN(extra); j++)
        for (int i = 0; i < w->acc.n_metrics; i++)
            if (!strcmp(w->acc.names[i], extra[j]) && w->acc.counts[i] > 0 && k < (int)n)
                k += snprintf(buf + k, n - (size_t)k, "  %s %.4f", j ? "kl" : "reward", w->acc.sums[i] / w->acc.counts[i]);
}

static void tick(void *ctx, const char *what, int done, int total) { metrics_tick(ctx, what, done, total); }

// One metrics.jsonl line for the logging window that ends at this step.
static void log_window(Metrics *mt, const LogWindow *win, const TrainState *ts, int spe, double gnorm, double lr,
                       double tokens_run, double el, int plans) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "loss", win->loss_sum / win->steps);
    cJSON_AddNumberToObject(o, "grad_norm", gnorm);
    cJSON_AddNumberToObject(o, "learning_rate", lr);
    cJSON_AddNumberToObject(o, "epoch", (double)ts->step / spe);
    cJSON_AddNumberToObject(o, "num_tokens", ts->num_tokens);
    for (int i = 0; i < win->acc.n_metrics; i++)
        cJSON_AddNumberToObject(o, win->acc.names[i], win->acc.counts[i] > 0 ? win->acc.sums[i] / win->acc.counts[i] : NAN);
    cJSON_AddNumberToObject(o, "tokens_per_second", el > 0 ? tokens_run / el : 0);
    cJSON_AddNumberToObject(o, "plans", plans);
    cJSON_AddNumberToObject(o, "step", ts->step);
    metrics_write(mt, o);
    cJSON_Delete(o);
}

// The curves of metrics.jsonl drawn into output_dir: loss.svg, and reward.svg / kl.svg when the
// run logged a reward (GRPO, RLOO) or a KL (distillation).
static Status write_plots(const char *output_dir, Err *e) {
    char *jp = path_join(output_dir, "metrics.jsonl");
    Status st = metrics_plots(jp, output_dir, e);
    free(jp);
    return st;
}

// Rank 0 reads the checkpoint (weights, complete moments, state) and broadcasts it; every rank
// keeps its block of the moments, so any number of ranks resumes with the same global batch.
// The source's own state (load_state) is read by every rank from the same directory (on several
// nodes, a filesystem they share).
static Status resume_from(Model *m, Optim *opt, Dist *d, StepSource *src, const TrainConfig *cfg, TrainState *ts,
                          Err *e) {
    Trainable tr = model_trainable(m);
    size_t n = tr.tt->n_params;
    // One process on host memory reads the moments straight into the optimizer's buffers; otherwise
    // through host copies that rank 0 broadcasts and every rank takes its block of.
    int direct = d->world == 1 && m->be->host_memory && !opt->fsdp && !(m->hooks && m->hooks->reduce);
    // ZeRO-3: every tensor whole on every rank while the checkpoint is read and broadcast
    TRY(opt->fsdp ? fsdp_full_begin(opt->fsdp, 1, e) : ST_OK);
    tr = model_trainable(m);
    float *mh = direct ? opt->m : xmalloc(n * sizeof(float)), *vh = direct ? opt->v : xmalloc(n * sizeof(float));
    char *dir = NULL;
    TrainState saved = {0};
    Status st = ST_OK;
    // expert parallel: every rank reads the whole checkpoint and keeps its part (its own experts)
    int ep = m->hooks && m->hooks->moe_ex;
    if (d->rank == 0 || ep) {
        if (!strcmp(cfg->resume, "latest") || !strcmp(cfg->resume, "true"))
            st = checkpoint_latest(cfg->output_dir, &dir, e);
        else
            dir = xstrdup(cfg->resume);
        Tp *tp = m->hooks && m->hooks->reduce ? m->hooks->reduce_ctx : NULL;
        if (st == ST_OK && ep) {
            Model *whole = ep_full_model(m);
            size_t fn = whole->tt.n_params;
            float *fmh = xmalloc(fn * sizeof(float)), *fvh = xmalloc(fn * sizeof(float));
            st = checkpoint_load(dir, whole, fmh, fvh, &saved, e);
            if (st == ST_OK) {
                ep_slice_model(whole, m);
                ep_slice_flat(m, whole, mh, fmh);
                ep_slice_flat(m, whole, vh, fvh);
            }
            free(fmh), free(fvh);
            model_free(whole);
        } else if (st == ST_OK && tp) {  // only this rank's part of the checkpoint (weights and moments)
            st = tp_load_checkpoint(tp, dir, m, mh, vh, &saved, e);
        } else if (st == ST_OK) {
            st = checkpoint_load(dir, m, mh, vh, &saved, e);
        }
        int global = ts->batch_size * d->world, saved_global = saved.batch_size * MAX(1, saved.world);
        if (st == ST_OK && (saved.micro_batches != ts->micro_batches || saved_global != global ||
                            saved.grad_accum != ts->grad_accum || saved.seed != cfg->seed))
            st = err_set(e, ST_EINVAL, "%s was written with %d micro-batches per epoch of %d rows (%d per rank x %d "
                                       "ranks), gradient accumulation %d, seed %llu; this run has %d, %d (%d x %d), %d, "
                                       "%llu: resume needs the same data, global batch and seed", dir,
                         saved.micro_batches, saved_global, saved.batch_size, MAX(1, saved.world), saved.grad_accum,
                         (unsigned long long)saved.seed, ts->micro_batches, global, ts->batch_size, d->world,
                         ts->grad_accum, (unsigned long long)cfg->seed);
        if (st == ST_OK && d->rank == 0) {
            log_info("resuming from %s at step %d of %d", dir, saved.step, ts->total_steps);
            if (MAX(1, saved.world) != d->world)
                log_info("%s was written by %d rank(s); optimizer state re-sharded over %d", dir, MAX(1, saved.world),
                         d->world);
        }
    }
    st = dist_agree(d, st, e);
    if (st == ST_OK && d->world > 1 && !ep) {
        // weights through host memory (any backend), then the moments and the state
        void *ph = xmalloc(tr.tt->param_bytes);
        if (d->rank == 0) m->be->download(m->be, ph, tr.params, tr.tt->param_bytes);
        st = dist_bcast_host(d, ph, tr.tt->param_bytes, e);
        if (st == ST_OK && d->rank != 0) m->be->upload(m->be, tr.params, ph, tr.tt->param_bytes);
        free(ph);
        if (st == ST_OK) st = dist_bcast_host(d, mh, n * sizeof(float), e);
        if (st == ST_OK) st = dist_bcast_host(d, vh, n * sizeof(float), e);
        if (st == ST_OK) st = dist_bcast_host(d, &saved, sizeof saved, e);
        if (st == ST_OK && src->load_state) {  // the directory's name, for every rank
            char path[4096] = "";
            if (d->rank == 0) snprintf(path, sizeof path, "%s", dir);
            st = dist_bcast_host(d, path, sizeof path, e);
            if (st == ST_OK && d->rank != 0) free(dir), dir = xstrdup(path);
        }
    }
    if (st == ST_OK && src->load_state) st = dist_agree(d, src->load_state(src->ctx, dir, e), e);
    if (st == ST_OK) {
        if (!direct) optim_load_state(opt, m->be, mh, vh);
        opt->t = saved.step;
        ts->step = saved.step;
        ts->num_tokens = saved.num_tokens;
    }
    if (!direct) free(mh), free(vh);
    if (opt->fsdp) fsdp_full_end(opt->fsdp, st == ST_OK);
    free(dir);
    return st;
}

Status trainer_check_mesh(const Model *m, const Dist *d, Err *e) {
    const DistMesh *mesh = d ? d->mesh : NULL;
    if (!mesh || mesh->tp == 1) return ST_OK;
    if (m->hooks && m->hooks->reduce) return ST_OK;  // split by tp_shard (checked there)
    const ModelConfig *c = &m->cfg;
    int T = mesh->tp;
    struct { const char *what; int n; } dims[] = {
        {"num_attention_heads", c->num_attention_heads}, {"num_key_value_heads", c->num_key_value_heads},
        {"intermediate_size", c->intermediate_size}, {"vocab_size", c->vocab_size}};
    for (size_t i = 0; i < ARRAY_LEN(dims); i++)
        if (dims[i].n % T)
            return err_set(e, ST_EUSAGE, "--tp_size %d: %s %d of %s is not divisible by it (tensor parallelism splits "
                                         "heads, kv-heads, the MLP and the vocabulary evenly)", T, dims[i].what,
                           dims[i].n, m->dir ? m->dir : "the model");
    return err_set(e, ST_EUNSUPPORTED, "--tp_size %d: tensor parallelism is not implemented yet for this command "
                                       "(sft, dpo, kto, grpo, rloo, distill, reward and generate have it)", T);
}

Status trainer_loop(Model *m, StepSource *src, const TrainConfig *cfg, TrainResult *res, Err *e) {
    memset(res, 0, sizeof *res);
    res->eval_loss = NAN;
    res->train_loss = NAN;
    CHECK(m->lora || m->matrix_dtype == DT_F32);  // trained weights: fp32 (an adapter always is)
    Dist one, *d = src->dist;
    if (!d) dist_single(&one), d = &one;
    Tp *tp = m->hooks && m->hooks->reduce ? m->hooks->reduce_ctx : NULL;  // tensor parallel (tp.h)
    Ep *ep = m->hooks && m->hooks->moe_ex ? m->hooks->moe_ex->ctx : NULL;   // expert parallel (ep.h)
    int lead = dist_lead(d);  // rank 0 logs and writes files (of the data axis and its TP group)
    int spe = MAX(1, src->steps_per_epoch);
    int total = cfg->max_steps > 0 ? cfg->max_steps : (int)ceil(cfg->num_train_epochs * spe);
    if (total <= 0) return err_set(e, ST_EINVAL, "nothing to train: 0 steps (num_train_epochs %g)", cfg->num_train_epochs);
    if (cfg->zero_stage != 0 && cfg->zero_stage != 1 && cfg->zero_stage != 3)
        return err_set(e, ST_EUNSUPPORTED, "--zero_stage %d is not supported (0, 1 or 3)", cfg->zero_stage);
    TRY(trainer_check_mesh(m, d, e));
    if (cfg->zero_stage == 3 && !src->sharded_ok)
        return err_set(e, ST_EUNSUPPORTED, "--zero_stage 3 / --fsdp_size is not supported yet here (sft, dpo, kto, "
                                           "grpo, rloo, reward and distill without an EMA teacher have it); use "
                                           "--zero_stage 0 or 1");
    if (cfg->zero_stage == 3 && m->lora && !src->sharded_base_ok)
        return err_set(e, ST_EUNSUPPORTED, "--zero_stage 3 / --fsdp_size with an adapter (--use_peft) is supported in "
                                           "sft, dpo, kto, grpo and rloo only so far; use --zero_stage 0 or 1");
    if (cfg->zero_stage == 3) TRY(fsdp_check_model(m, e));
    int save_every = cfg->save_per_epoch ? spe : cfg->save_steps;  // <= 0: no intermediate checkpoints
    if (tp && cfg->zero_stage == 1)
        return err_set(e, ST_EUNSUPPORTED, "--tp_size %d: tensor parallelism trains with --zero_stage 0 or 3 (FSDP)",
                       tp->d->world);
    OptimConfig oc = cfg->opt;
    oc.total_steps = total;
    oc.warmup_steps = optim_warmup_steps(cfg->warmup_steps, cfg->warmup_ratio, total);
    if (cfg->zero_stage == 3 && m->lora) {  // the base's blocks and working layers; the adapter's training state
        size_t w = (size_t)(d->mesh ? d->mesh->fsdp : d->world), ln, rn, n = model_trainable(m).tt->n_params;
        fsdp_unit_floats(&m->tt, &ln, &rn);
        FsdpPrefetch pf = {w > 1 && cfg->opt.fsdp_forward_prefetch, w > 1 && cfg->opt.fsdp_backward_prefetch};
        TRY(mem_check((m->tt.param_bytes + w - 1) / w + fsdp_work_bytes(ln, rn, pf, 1) + 3 * n * sizeof(float),
                      m->be->max_memory, "the sharded frozen base (ZeRO-3) and the adapter's gradients and AdamW "
                      "moments", e));
    } else if (cfg->zero_stage == 3) {  // blocks of params, gradients, moments; working buffers: a layer and its
                                 // gradient per slot (two with prefetch), the rest and its gradient
        size_t n = m->tt.n_params, w = (size_t)(d->mesh ? d->mesh->fsdp : d->world), k = (n + w - 1) / w, ln, rn;
        fsdp_unit_floats(&m->tt, &ln, &rn);
        FsdpPrefetch pf = {w > 1 && cfg->opt.fsdp_forward_prefetch, w > 1 && cfg->opt.fsdp_backward_prefetch};
        TRY(mem_check(3 * k * sizeof(float) + fsdp_work_bytes(ln, rn, pf, 0), m->be->max_memory,
                      "sharded training state (ZeRO-3 gradients, AdamW moments and working buffers)", e));
    } else if (!model_trainable(m).grads) {  // gradients, and AdamW moments (+ the reduced gradient) of this rank's block
        size_t n = model_trainable(m).tt->n_params, w = (size_t)d->world, k = cfg->zero_stage == 1 && w > 1 ? (n + w - 1) / w : n;
        TRY(mem_check((n + (cfg->zero_stage == 1 && w > 1 ? 3 : 2) * k) * sizeof(float), m->be->max_memory,
                      "training state (fp32 gradients and AdamW moments)", e));
    }
    if (cfg->zero_stage != 3 || m->lora) model_alloc_grads(m);
    Optim opt;
    optim_init(&opt, m, &oc, d, cfg->zero_stage);
    char *metrics_path = path_join(cfg->output_dir, "metrics.jsonl");
    TrainState ts = {.total_steps = total, .steps_per_epoch = spe, .micro_batches = src->micro_batches,
                     .batch_size = src->batch_size, .grad_accum = src->grad_accum, .seed = cfg->seed,
                     .world = d->world, .logging_steps = cfg->logging_steps, .eval_steps = cfg->eval_steps,
                     .save_steps = save_every, .metrics_path = metrics_path};
    Status st = lead ? dir_create(cfg->output_dir, e) : ST_OK;
    if (st == ST_OK && lead) {  // what a run killed while saving left behind
        int swept = dir_sweep_temp(cfg->output_dir, 1);
        if (swept) log_info("removed %d temporary file%s an earlier run left in %s", swept, swept == 1 ? "" : "s",
                            cfg->output_dir);
    }
    st = dist_agree(d, st, e);
    if (st == ST_OK && d->world > 1) {  // what each rank holds (tests read this line)
        double *bytes = xcalloc((size_t)d->world, sizeof(double));
        bytes[d->rank] = (double)optim_state_bytes(&opt);
        st = dist_allreduce_sum_host_d(d, bytes, (size_t)d->world, e);
        char line[1024];
        int k = snprintf(line, sizeof line, "optimizer state (ZeRO-%d):", opt.zero_stage);
        for (int r = 0; r < d->world && k < (int)sizeof line; r++)
            k += snprintf(line + k, sizeof line - (size_t)k, " rank %d %.0f bytes%s", r, bytes[r],
                          r + 1 < d->world ? "," : "");
        if (st == ST_OK) log_info("%d ranks, %d rows per rank per micro-batch; %s", d->world, src->batch_size, line);
        free(bytes);
    }
    if (st == ST_OK && opt.fsdp) {  // what sharding leaves on each rank (tests read this line)
        double *bytes = xcalloc((size_t)d->world, sizeof(double));
        bytes[d->rank] = 4.0 * (double)opt.fsdp->n * sizeof(float);
        st = dist_allreduce_sum_host_d(d, bytes, (size_t)d->world, e);
        char line[1024];
        int k = snprintf(line, sizeof line, "sharded parameters, gradients and AdamW moments (ZeRO-3 over %d ranks):",
                         opt.fsdp->d->world);
        for (int r = 0; r < d->world && k < (int)sizeof line; r++)
            k += snprintf(line + k, sizeof line - (size_t)k, " rank %d %.0f bytes%s", r, bytes[r],
                          r + 1 < d->world ? "," : "");
        if (st == ST_OK)
            log_info("%s; working buffers %.0f bytes", line, (double)fsdp_bytes(opt.fsdp) - bytes[d->rank]);
        free(bytes);
    }
    if (st == ST_OK && opt.base) {  // what sharding the frozen base leaves on each rank (tests read this line)
        double *bytes = xcalloc((size_t)d->world, sizeof(double));
        bytes[d->rank] = (double)opt.base->n * sizeof(float);
        st = dist_allreduce_sum_host_d(d, bytes, (size_t)d->world, e);
        char line[1024];
        int k = snprintf(line, sizeof line, "frozen base sharded (ZeRO-3 over %d ranks) of %zu bytes:",
                         opt.base->d->world, m->tt.param_bytes);
        for (int r = 0; r < d->world && k < (int)sizeof line; r++)
            k += snprintf(line + k, sizeof line - (size_t)k, " rank %d %.0f bytes%s", r, bytes[r],
                          r + 1 < d->world ? "," : "");
        if (st == ST_OK)
            log_info("%s; working buffers %.0f bytes", line, (double)fsdp_bytes(opt.base) - bytes[d->rank]);
        free(bytes);
    }
    if (st == ST_OK && cfg->resume) st = resume_from(m, &opt, d, src, cfg, &ts, e);
    Metrics mt = {0};
    if (st == ST_OK && lead) st = metrics_open(&mt, cfg->output_dir, cfg->resume ? ts.step : -1, ts.step, e);
    st = dist_agree(d, st, e);
    if (st != ST_OK) {
        metrics_close(&mt);
        optim_free(&opt, m->be);
        free(metrics_path);
        return st;
    }
    log_info("training: %d %s, %d micro-batches of %d per epoch, %d steps per epoch (gradient accumulation %d), "
             "%d steps, warmup %d, lr %g (%s)", src->n_items, src->what, src->micro_batches,
             src->batch_size * d->world, spe, src->grad_accum, total, oc.warmup_steps, oc.lr,
             optim_schedule_name(oc.sched));

    LogWindow win = {0};
    double t_start = metrics_now(), tokens_run = 0, loss_run = 0, save_secs = 0, gnorm = NAN, lr = 0;
    int step0 = ts.step, saved_at = -1, stop = 0;
    res->step0 = step0;
    while (st == ST_OK && ts.step < total) {
        StepReport rep;
        memset(&rep, 0, sizeof rep);
        if (lead) rep.tick = tick, rep.tick_ctx = &mt;
        optim_zero_grads(&opt, m);
        if (m->lora) m->lora->step = ts.step, m->lora->calls = 0;  // dropout masks keyed by the step
        st = src->step(src->ctx, m, ts.step, &rep, e);
        if (st == ST_OK && opt.fsdp) st = fsdp_status(opt.fsdp, e);
        if (st == ST_OK && tp) st = tp_status(tp, e);
        if (st == ST_OK && ep) st = ep_status(ep, e);
        if (st != ST_OK) break;
        // The gradient summed over the ranks first: the loss and the norm are global, so every rank
        // takes the same branch. NaN/Inf: stop naming the step, or skip its update.
        gnorm = NAN, lr = optim_lr_at(&opt.cfg, opt.t);
        if (isfinite(rep.loss)) st = optim_reduce_grads(&opt, m, &gnorm, e);
        if (st != ST_OK) break;
        if (!isfinite(rep.loss) || !isfinite(gnorm)) {
            const char *what = !isfinite(rep.loss) ? "the loss" : "the gradient norm";
            double val = !isfinite(rep.loss) ? rep.loss : gnorm;
            if (!cfg->skip_nonfinite) {
                st = err_set(e, ST_ERUNTIME, "step %d: %s is %g; lower --learning_rate, check the data, or pass "
                                             "--skip_nonfinite to skip such steps", ts.step + 1, what, val);
                break;
            }
            log_warn("step %d: %s is %g: skipping this step's update (--skip_nonfinite)", ts.step + 1, what, val);
            res->skipped_steps++;
        } else {
            st = optim_apply(&opt, m, gnorm, &lr, e);
            if (st != ST_OK) break;
            loss_run += rep.loss;
        }
        ts.step++;
        res->steps_run++;
        ts.num_tokens += rep.n_tokens;
        tokens_run += rep.n_tokens;
        window_add(&win, &rep);
        int log_now = (cfg->logging_steps > 0 && ts.step % cfg->logging_steps == 0) ||
                      (cfg->logging_first_step && ts.step == 1) || ts.step == total;
        double win_loss = win.loss_sum / win.steps;
        char status[128];
        bar_status(status, sizeof status, &win);
        if (log_now && lead)
            log_window(&mt, &win, &ts, spe, gnorm, lr, tokens_run, metrics_now() - t_start - save_secs, m->plans.n);
        if (log_now) {
            res->last_loss = win_loss;
            memset(&win, 0, sizeof win);
        }
        if (lead) metrics_progress(&mt, ts.step, total, status, log_now);
        if (src->evaluate && cfg->eval_steps > 0 && ts.step % cfg->eval_steps == 0)
            st = run_eval_and_log(m, src, &mt, lead, ts.step, (double)ts.step / spe, &res->eval_loss, e);
        if (st == ST_OK && save_every > 0 && ts.step % save_every == 0 && ts.step < total) {
            st = save_checkpoint(m, &opt, d, src, cfg, &ts, lead ? &mt : NULL, &save_secs, e);
            saved_at = ts.step;
        }
        if (st == ST_OK) st = stop_requested(cfg, d, &stop, e);
        if (st != ST_OK || stop) break;
        if (cfg->stop_after_steps > 0 && res->steps_run >= cfg->stop_after_steps) break;
    }
    double secs = metrics_now() - t_start;
    res->steps = ts.step;
    res->train_seconds = secs;
    res->tokens_per_second = secs - save_secs > 0 ? tokens_run / (secs - save_secs) : 0;
    res->train_loss = res->steps_run > res->skipped_steps ? loss_run / (res->steps_run - res->skipped_steps) : NAN;
    int finished = st == ST_OK && ts.step >= total;
    if (st == ST_OK && stop && !finished) {
        // SIGINT / SIGTERM: the step is done; what resuming needs is written, then the run ends
        if (win.steps && lead)
            log_window(&mt, &win, &ts, spe, gnorm, lr, tokens_run, secs - save_secs, m->plans.n);
        if (lead) metrics_clear_bar(&mt);
        if (saved_at != ts.step && ts.step > 0) st = save_checkpoint(m, &opt, d, src, cfg, &ts, lead ? &mt : NULL, &save_secs, e);
        metrics_close(&mt);
        if (st == ST_OK && lead && ts.step > step0) st = write_plots(cfg->output_dir, e);
        st = dist_agree(d, st, e);
        if (st == ST_OK) {
            if (ts.step > 0)
                st = err_set(e, ST_EINTR, "interrupted at step %d; resume with --resume_from_checkpoint latest", ts.step);
            else
                st = err_set(e, ST_EINTR, "interrupted before the first step; nothing was saved");
        }
        optim_free(&opt, m->be);
        free(metrics_path);
        return st;
    }
    // no evaluation after the last step unless it falls on eval_steps (as Trainer's DefaultFlowCallback)
    if (finished && st == ST_OK && save_every > 0)
        st = save_checkpoint(m, &opt, d, src, cfg, &ts, lead ? &mt : NULL, &save_secs, e);
    if (finished && st == ST_OK && opt.fsdp) st = fsdp_full_begin(opt.fsdp, 0, e);  // whole on rank 0
    Model *whole = NULL;  // tensor parallel: the gathered model on the group's rank 0
    if (finished && st == ST_OK && tp && d->rank == 0)  // the writer's group (with FSDP: the ranks holding it whole)
        st = tp_gather(tp, m, &whole, e);
    if (finished && st == ST_OK && ep) st = ep_gather(ep, m, &whole, e);  // every rank's experts on rank 0
    if (finished && st == ST_OK && lead) {  // the final model: once on disk
        double t0 = metrics_now();
        char name[64];
        snprintf(name, sizeof name, "checkpoint-%d", ts.step);
        char *ck = path_join(cfg->output_dir, name);
        if (save_every > 0 && checkpoint_is_complete(ck)) st = checkpoint_publish(ck, cfg->output_dir, e);
        else st = checkpoint_write_model(cfg->output_dir, whole ? whole : m, cfg->save_dtype, cfg->src_model_dir, e);
        free(ck);
        save_secs += metrics_now() - t0;
    }
    if (opt.fsdp) fsdp_full_end(opt.fsdp, 0);
    model_free(whole);
    if (st != ST_OK && lead && mt.open && !cfg->resume && mt.lines == 0) unlink(metrics_path);  // a failed start leaves no empty file
    metrics_close(&mt);
    res->save_seconds = save_secs;
    res->train_seconds = secs = metrics_now() - t_start;
    if (finished && st == ST_OK && lead) {
        st = write_plots(cfg->output_dir, e);
        char rate[32];
        fmt_sig3(rate, sizeof rate, res->tokens_per_second);
        log_info("trained %d steps (%d to %d) in %.1f s: %.1f s training, %.1f s saving; %s tokens/s; train_loss %.6g; "
                 "%d plans, %.1f MiB, %d steps recorded as graphs; wrote %s (%s)",
                 res->steps_run, step0 + 1, ts.step, secs, secs - save_secs, save_secs, rate, res->train_loss,
                 m->plans.n, m->plans.bytes / 1048576.0, m->plans.graphs, cfg->output_dir,
                 m->lora ? "LoRA adapter, float32" : dtype_torch_name(cfg->save_dtype));
        if (opt.fsdp) {  // this rank's prefetch counters (tests/e2e/dist_fsdp.sh: overlap happened, or none)
            char line[256];
            fsdp_overlap_line(opt.fsdp, line, sizeof line);
            log_info("%s", line);
        }
    }
    if (finished) st = dist_agree(d, st, e);
    optim_free(&opt, m->be);
    free(metrics_path);
    return st;
}
