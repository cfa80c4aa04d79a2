// trainer.c: the loop.
#include "trainer.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../core/meminfo.h"
#include "../model/qwen3.h"

#include <math.h>
#include <string.h>

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

Status trainer_evaluate(Model *m, Batcher *eval, double *loss, double *accuracy, double *entropy, Err *e) {
    HostBatch hb;
    host_batch_init(&hb, eval);
    RowStats rs;
    stats_init(&rs, (size_t)eval->cfg.B * eval->Tmax);
    double L = 0, Cc = 0, H = 0, n = 0;
    Status st = ST_OK;
    for (int i = 0; i < eval->n_batches && st == ST_OK; i++) {
        batcher_fill(eval, 0, i, &hb);
        Plan *p;
        st = get_plan(m, PLAN_SCORE, hb.B, hb.T, &p, e);
        if (st != ST_OK) break;
        qwen3_set_inputs(m, p, hb.ids, hb.pos, hb.seg, hb.targets, NULL);
        qwen3_forward(m, p);
        qwen3_ce_loss(m, p, 1.0f, 0);
        double l, c, h;
        sum_rows(m, p, &hb, &rs, &l, &c, &h);
        L += l, Cc += c, H += h, n += hb.n_targets;
    }
    host_batch_free(&hb);
    stats_free(&rs);
    TRY(st);
    *loss = n > 0 ? L / n : NAN;
    if (accuracy) *accuracy = n > 0 ? Cc / n : NAN;
    if (entropy) *entropy = n > 0 ? H / n : NAN;
    return ST_OK;
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

typedef struct SftSource {
    Batcher *train, *eval;
    int grad_accum;
    HostBatch *hb;  // (grad_accum)
    RowStats rs;
} SftSource;

static Status sft_step(void *ctx, Model *m, int step, StepReport *r, Err *e) {
    SftSource *s = ctx;
    Batcher *train = s->train;
    int GA = s->grad_accum, mb = train->n_batches, spe = trainer_steps_per_epoch(mb, GA);
    int epoch = step / spe, j = step % spe;
    int first = j * GA, n_micro = MIN(GA, mb - first);
    int n_targets = 0, n_tok = 0;
    for (int g = 0; g < n_micro; g++) {
        batcher_fill(train, epoch, first + g, &s->hb[g]);
        n_targets += s->hb[g].n_targets;
        n_tok += s->hb[g].n_tokens;
    }
    // TRL: the loss of a step is the token mean over every micro-batch of the step.
    float scale = n_targets > 0 ? 1.0f / (float)n_targets : 0.0f;
    for (int g = 0; g < n_micro; g++) {
        HostBatch *hb = &s->hb[g];
        Plan *p;
        TRY(get_plan(m, PLAN_TRAIN, hb->B, hb->T, &p, e));
        qwen3_set_inputs(m, p, hb->ids, hb->pos, hb->seg, hb->targets, NULL);
        qwen3_forward(m, p);
        qwen3_ce_loss(m, p, scale, 1);
        double l, c, h;
        sum_rows(m, p, hb, &s->rs, &l, &c, &h);
        r->loss += l * scale;
        if (hb->n_targets > 0) {
            step_report_add(r, "mean_token_accuracy", c / hb->n_targets, 1);
            step_report_add(r, "entropy", h / hb->n_targets, 1);
        }
    }
    r->n_tokens = n_tok;
    return ST_OK;
}

static Status sft_evaluate(void *ctx, Model *m, cJSON *o, double *eval_loss, Err *e) {
    SftSource *s = ctx;
    double l, a, h;
    TRY(trainer_evaluate(m, s->eval, &l, &a, &h, e));
    cJSON_AddNumberToObject(o, "eval_loss", l);
    cJSON_AddNumberToObject(o, "eval_mean_token_accuracy", a);
    cJSON_AddNumberToObject(o, "eval_entropy", h);
    *eval_loss = l;
    return ST_OK;
}

Status trainer_run(Model *m, Batcher *train, Batcher *eval, const TrainConfig *cfg, TrainResult *res, Err *e) {
    int GA = MAX(1, cfg->grad_accum), mb = train->n_batches;
    if (mb == 0)
        return err_set(e, ST_EINVAL, "the training set has %d rows, fewer than one batch of %d (drop_last)",
                       train->rows->n, train->cfg.B);
    SftSource s = {.train = train, .eval = eval, .grad_accum = GA};
    s.hb = xcalloc((size_t)GA, sizeof(HostBatch));
    for (int g = 0; g < GA; g++) host_batch_init(&s.hb[g], train);
    stats_init(&s.rs, (size_t)train->cfg.B * train->Tmax);
    StepSource src = {.ctx = &s, .what = "rows", .n_items = train->rows->n,
                      .steps_per_epoch = trainer_steps_per_epoch(mb, GA), .micro_batches = mb,
                      .batch_size = train->cfg.B, .grad_accum = GA, .step = sft_step,
                      .evaluate = eval ? sft_evaluate : NULL};
    Status st = trainer_loop(m, &src, cfg, res, e);
    for (int g = 0; g < GA; g++) host_batch_free(&s.hb[g]);
    free(s.hb);
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

static Status run_eval_and_log(Model *m, StepSource *src, Metrics *mt, int step, double epoch, double *out, Err *e) {
    cJSON *o = cJSON_CreateObject();
    double l = NAN;
    Status st = src->evaluate(src->ctx, m, o, &l, e);
    if (st == ST_OK) {
        cJSON_AddNumberToObject(o, "epoch", epoch);
        cJSON_AddNumberToObject(o, "step", step);
        metrics_write(mt, o);
        log_info("step %d: eval_loss %.6f", step, l);
        *out = l;
    }
    cJSON_Delete(o);
    return st;
}

Status trainer_loop(Model *m, StepSource *src, const TrainConfig *cfg, TrainResult *res, Err *e) {
    memset(res, 0, sizeof *res);
    res->eval_loss = NAN;
    CHECK(m->matrix_dtype == DT_F32);
    int spe = MAX(1, src->steps_per_epoch);
    int total = cfg->max_steps > 0 ? cfg->max_steps : (int)ceil(cfg->num_train_epochs * spe);
    if (total <= 0) return err_set(e, ST_EINVAL, "nothing to train: 0 steps (num_train_epochs %g)", cfg->num_train_epochs);
    OptimConfig oc = cfg->opt;
    oc.total_steps = total;
    oc.warmup_steps = optim_warmup_steps(cfg->warmup_steps, cfg->warmup_ratio, total);
    if (!m->grads)
        TRY(mem_check(m->tt.n_params * sizeof(float) * 3, m->be->max_memory,
                      "training state (fp32 gradients and AdamW moments)", e));
    model_alloc_grads(m);
    Optim opt;
    optim_init(&opt, m, &oc);
    TrainState ts = {.total_steps = total, .steps_per_epoch = spe, .micro_batches = src->micro_batches,
                     .batch_size = src->batch_size, .grad_accum = src->grad_accum, .seed = cfg->seed};
    Status st = dir_create(cfg->output_dir, e);
    char *resume_dir = NULL;
    if (st == ST_OK && cfg->resume) {
        if (!strcmp(cfg->resume, "latest") || !strcmp(cfg->resume, "true"))
            st = checkpoint_latest(cfg->output_dir, &resume_dir, e);
        else
            resume_dir = xstrdup(cfg->resume);
        TrainState saved;
        if (st == ST_OK) st = checkpoint_load(resume_dir, m, &opt, &saved, e);
        if (st == ST_OK && (saved.micro_batches != ts.micro_batches || saved.batch_size != ts.batch_size ||
                            saved.grad_accum != ts.grad_accum || saved.seed != cfg->seed))
            st = err_set(e, ST_EINVAL, "%s was written with %d micro-batches per epoch of %d, gradient "
                                       "accumulation %d, seed %llu; this run has %d, %d, %d, %llu: resume needs the "
                                       "same data, batch and seed flags", resume_dir, saved.micro_batches,
                         saved.batch_size, saved.grad_accum, (unsigned long long)saved.seed, ts.micro_batches,
                         ts.batch_size, ts.grad_accum, (unsigned long long)cfg->seed);
        if (st == ST_OK && src->load_state) st = src->load_state(src->ctx, resume_dir, e);
        if (st == ST_OK) {
            ts.step = saved.step;
            ts.num_tokens = saved.num_tokens;
            log_info("resuming from %s at step %d of %d", resume_dir, ts.step, total);
        }
    }
    Metrics mt = {0};
    if (st == ST_OK) st = metrics_open(&mt, cfg->output_dir, cfg->resume ? ts.step : -1, ts.step, e);
    if (st != ST_OK) {
        free(resume_dir);
        optim_free(&opt, m->be);
        return st;
    }
    log_info("training: %d %s, %d micro-batches of %d per epoch, %d steps per epoch (gradient accumulation %d), "
             "%d steps, warmup %d, lr %g (%s)", src->n_items, src->what, src->micro_batches, src->batch_size, spe,
             src->grad_accum, total, oc.warmup_steps, oc.lr, optim_schedule_name(oc.sched));

    LogWindow win = {0};
    double t_start = metrics_now(), tokens_run = 0;
    int steps_run = 0;
    while (st == ST_OK && ts.step < total) {
        StepReport rep;
        memset(&rep, 0, sizeof rep);
        m->be->zero(m->be, m->grads, m->tt.n_params * sizeof(float));
        st = src->step(src->ctx, m, ts.step, &rep, e);
        if (st != ST_OK) break;
        if (!isfinite(rep.loss)) {
            st = err_set(e, ST_ERUNTIME, "step %d: the loss is %g; lower --learning_rate or check the data", ts.step + 1,
                         rep.loss);
            break;
        }
        double gnorm, lr;
        optim_step(&opt, m, &gnorm, &lr);
        ts.step++;
        steps_run++;
        ts.num_tokens += rep.n_tokens;
        tokens_run += rep.n_tokens;
        window_add(&win, &rep);
        int log_now = (cfg->logging_steps > 0 && ts.step % cfg->logging_steps == 0) ||
                      (cfg->logging_first_step && ts.step == 1) || ts.step == total;
        if (log_now) {
            double el = metrics_now() - t_start;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "loss", win.loss_sum / win.steps);
            cJSON_AddNumberToObject(o, "grad_norm", gnorm);
            cJSON_AddNumberToObject(o, "learning_rate", lr);
            cJSON_AddNumberToObject(o, "epoch", (double)ts.step / spe);
            cJSON_AddNumberToObject(o, "num_tokens", ts.num_tokens);
            for (int i = 0; i < win.acc.n_metrics; i++)
                cJSON_AddNumberToObject(o, win.acc.names[i],
                                        win.acc.counts[i] > 0 ? win.acc.sums[i] / win.acc.counts[i] : NAN);
            cJSON_AddNumberToObject(o, "tokens_per_second", el > 0 ? tokens_run / el : 0);
            cJSON_AddNumberToObject(o, "plans", m->plans.n);
            cJSON_AddNumberToObject(o, "step", ts.step);
            metrics_write(&mt, o);
            cJSON_Delete(o);
            res->last_loss = win.loss_sum / win.steps;
            memset(&win, 0, sizeof win);
        }
        metrics_progress(&mt, ts.step, total, rep.loss, log_now);
        if (src->evaluate && cfg->eval_steps > 0 && ts.step % cfg->eval_steps == 0)
            st = run_eval_and_log(m, src, &mt, ts.step, (double)ts.step / spe, &res->eval_loss, e);
        if (st == ST_OK && cfg->save_steps > 0 && ts.step % cfg->save_steps == 0 && ts.step < total) {
            st = checkpoint_save_ex(cfg->output_dir, m, cfg->save_only_model ? NULL : &opt, &ts, cfg->save_dtype,
                                    cfg->src_model_dir, src->save_state, src->ctx, e);
            if (st == ST_OK) st = checkpoint_prune(cfg->output_dir, cfg->save_total_limit, e);
        }
        if (cfg->stop_after_steps > 0 && steps_run >= cfg->stop_after_steps) break;
    }
    double secs = metrics_now() - t_start;
    res->steps = ts.step;
    res->train_seconds = secs;
    res->tokens_per_second = secs > 0 ? tokens_run / secs : 0;
    int finished = st == ST_OK && ts.step >= total;
    if (finished && src->evaluate && (cfg->eval_steps <= 0 || ts.step % cfg->eval_steps != 0))
        st = run_eval_and_log(m, src, &mt, ts.step, (double)ts.step / spe, &res->eval_loss, e);
    if (finished && st == ST_OK && cfg->save_steps > 0) {
        st = checkpoint_save_ex(cfg->output_dir, m, cfg->save_only_model ? NULL : &opt, &ts, cfg->save_dtype,
                                cfg->src_model_dir, src->save_state, src->ctx, e);
        if (st == ST_OK) st = checkpoint_prune(cfg->output_dir, cfg->save_total_limit, e);
    }
    if (finished && st == ST_OK) st = checkpoint_write_model(cfg->output_dir, m, cfg->save_dtype, cfg->src_model_dir, e);
    metrics_close(&mt);
    if (finished && st == ST_OK) {
        char *jp = path_join(cfg->output_dir, "metrics.jsonl"), *sp = path_join(cfg->output_dir, "loss.svg");
        st = metrics_svg(jp, sp, e);
        free(jp);
        free(sp);
        log_info("trained %d steps in %.1f s (%.0f tokens/s); %d plans, %.1f MiB; wrote %s (%s)", ts.step, secs,
                 res->tokens_per_second, m->plans.n, m->plans.bytes / 1048576.0, cfg->output_dir,
                 dtype_torch_name(cfg->save_dtype));
    }
    free(resume_dir);
    optim_free(&opt, m->be);
    return st;
}
