// reward.c: reward-model training = preference pairs + the score head + the shared loop.
#include "reward.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../model/qwen3.h"
#include "../tokenizer/chat.h"
#include "codec.h"
#include "preflight.h"
#include "tp.h"

#include <math.h>
#include <string.h>

// -log sigmoid(x) = softplus(-x), without overflow
static double neg_logsigmoid(double x) { return x >= 0 ? log1p(exp(-x)) : -x + log1p(exp(x)); }
static double sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }

double reward_bt_loss(const double *rc, const double *rr, const double *margin, int n, int has_center,
                      double center_coef, double scale, double *drc, double *drr) {
    double L = 0, C = 0;
    for (int i = 0; i < n; i++) {
        double d = rc[i] - rr[i] - (margin ? margin[i] : 0), s = rc[i] + rr[i];
        L += neg_logsigmoid(d);
        C += s * s;
        // d/dd -log sigmoid(d) = -(1 - sigmoid(d)) = -sigmoid(-d)
        double g = -sigmoid(-d) / n, gc = has_center ? center_coef * 2 * s / n : 0;
        if (drc) drc[i] = scale * (g + gc);
        if (drr) drr[i] = scale * (-g + gc);
    }
    return L / n + (has_center ? center_coef * C / n : 0);
}

// Per (micro-batch, rank) statistics, summed over the ranks (each rank fills its own slot).
enum { ST_HAS, ST_LOSS, ST_ACC, ST_MARGIN, ST_TOKENS, ST_RSUM, ST_RCOUNT, ST_RMIN, ST_RMAX, ST_N };

typedef struct RewardSource {
    const RewardConfig *c;
    const RewardPairs *pairs, *eval;  // eval may be NULL
    Dist *dist;
    int W, R, B, GA, EB;     // ranks, rank, pairs per micro-batch, micro-batches per step, eval pairs per batch
    int micro_batches;       // global micro-batches per epoch
    int pad_id;              // what pooling skips (-1: each row's last token)
    int *order, order_epoch; // (pairs) pair order of an epoch
    int Bmax, Tmax;          // buffers: the larger batch of B and EB pairs, the longest sequence of both sets
    int32_t *ids, *pos, *seg, *rows;  // (2 Bmax, Tmax), (2 Bmax)
    int *lens;               // (2 Bmax)
    const RewardPair **pp;   // (Bmax) this micro-batch's pairs (NULL past the end of the data)
    float *scores, *dscores; // (2 Bmax) NL = 1
    double *rc, *rr, *mg, *drc, *drr;  // (Bmax)
    double *stats;           // (GA, W, ST_N)
} RewardSource;

// Lay out batch `index` of set (this rank's B pairs of the global batch of W * B, in `order`, NULL:
// the file's): rows [0, B) chosen, [B, 2B) rejected; returns the real pairs (the last batch of an
// epoch may have fewer), which come first.
static int fill(RewardSource *s, const RewardPairs *set, const int *order, int B, int index, int *T_out) {
    int n = set->n, real = 0, T = 1;
    const RewardPair **pp = s->pp;
    for (int b = 0; b < B; b++) {
        int k = ((index * s->W) + s->R) * B + b;
        pp[b] = k < n ? &set->p[order ? order[k] : k] : NULL;
        real += pp[b] != NULL;
        s->lens[b] = pp[b] ? pp[b]->n_chosen : 0;
        s->lens[B + b] = pp[b] ? pp[b]->n_rejected : 0;
        T = MAX(T, MAX(s->lens[b], s->lens[B + b]));
        s->mg[b] = pp[b] ? pp[b]->margin : 0;
    }
    T = round_up(T, s->c->pad_to_multiple_of);
    for (int r = 0; r < 2 * B; r++) {
        const RewardPair *p = pp[r % B];
        const int32_t *src = !p ? NULL : r < B ? p->chosen : p->rejected;
        for (int t = 0; t < T; t++) {
            size_t o = (size_t)r * T + t;
            int live = t < s->lens[r];
            s->ids[o] = live ? src[t] : 0;
            s->pos[o] = live ? t : 0;
            s->seg[o] = live;
        }
    }
    *T_out = T;
    return real;
}

// One batch: forward, rewards, loss and (train: scale > 0) backward; its statistics into st (ST_N).
static Status micro_batch(RewardSource *s, Model *m, const RewardPairs *set, const int *order, int B, int index,
                          double scale, double *st, Err *e) {
    int T, n = fill(s, set, order, B, index, &T), train = scale > 0;
    // nothing of this rank in the last batch of the epoch: skipped, unless the parameters are
    // sharded (FSDP), whose gathers and reduce-scatters every rank joins (a pass on empty rows, its
    // gradient zero)
    if (n == 0 && !(m->hooks && m->hooks->materialize)) return ST_OK;
    Plan *p;
    int before = m->plans.n;
    PlanMode mode = train ? PLAN_TRAIN : PLAN_SCORE;
    TRY(plan_get(m, mode, 2 * B, T, &p, e));
    if (m->plans.n > before)
        log_info("plan %d built: %s B=%d T=%d, %.1f MiB", m->plans.n, plan_mode_name(mode), 2 * B, T,
                 p->bytes / 1048576.0);
    qwen3_set_inputs(m, p, s->ids, s->pos, s->seg, NULL, NULL);
    qwen3_forward(m, p);
    qwen3_cls_pool(s->ids, s->lens, 2 * B, T, s->pad_id, s->rows);
    qwen3_cls_scores(m, p, s->rows, s->scores);
    double acc = 0, mar = 0, rsum = 0, rmin = INFINITY, rmax = -INFINITY, tokens = 0;
    for (int b = 0; b < n; b++) {
        s->rc[b] = s->scores[b], s->rr[b] = s->scores[B + b];
        acc += s->rc[b] > s->rr[b];
        mar += s->rc[b] - s->rr[b];
        rsum += s->rc[b] + s->rr[b];
        rmin = fmin(rmin, fmin(s->rc[b], s->rr[b]));
        rmax = fmax(rmax, fmax(s->rc[b], s->rr[b]));
        tokens += s->lens[b] + s->lens[B + b];
    }
    double L = n ? reward_bt_loss(s->rc, s->rr, set->has_margin ? s->mg : NULL, n, s->c->has_center,
                                  s->c->center_rewards_coefficient, train ? scale : 1, s->drc, s->drr)
                 : 0;
    if (train) {
        for (int r = 0; r < 2 * B; r++) s->dscores[r] = 0;
        for (int b = 0; b < n; b++) s->dscores[b] = (float)s->drc[b], s->dscores[B + b] = (float)s->drr[b];
        qwen3_cls_backward(m, p, s->dscores);
    }
    if (n == 0) return ST_OK;
    st[ST_HAS] = 1, st[ST_LOSS] = L, st[ST_ACC] = acc / n, st[ST_MARGIN] = mar / n, st[ST_TOKENS] = tokens;
    st[ST_RSUM] = rsum, st[ST_RCOUNT] = 2 * n, st[ST_RMIN] = rmin, st[ST_RMAX] = rmax;
    return ST_OK;
}

// One batch's values over the ranks (x: (W, ST_N)): TRL gathers each rank's mean accuracy and
// margin and averages them, and every reward for min / mean / max. Returns the ranks with pairs.
typedef struct BatchStats {
    double loss, loss_by_pairs, pairs, acc, margin, rmin, rmean, rmax, tokens;
} BatchStats;

static int batch_stats(const double *x, int W, BatchStats *b) {
    double rsum = 0, rcount = 0;
    int ranks = 0;
    memset(b, 0, sizeof *b);
    b->rmin = INFINITY, b->rmax = -INFINITY;
    for (int w = 0; w < W; w++, x += ST_N) {
        if (!x[ST_HAS]) continue;
        ranks++;
        b->loss += x[ST_LOSS], b->acc += x[ST_ACC], b->margin += x[ST_MARGIN];
        b->loss_by_pairs += x[ST_LOSS] * x[ST_RCOUNT] / 2, b->pairs += x[ST_RCOUNT] / 2;
        rsum += x[ST_RSUM], rcount += x[ST_RCOUNT];
        b->rmin = fmin(b->rmin, x[ST_RMIN]), b->rmax = fmax(b->rmax, x[ST_RMAX]);
        b->tokens += x[ST_TOKENS];
    }
    if (!ranks) return 0;
    b->loss /= ranks, b->acc /= ranks, b->margin /= ranks, b->rmean = rsum / rcount;
    return ranks;
}

// Ranks with pairs in global batch `index` of W * B pairs of a set of n.
static int ranks_with_pairs(int index, int W, int B, int n) {
    int ranks = 0;
    for (int w = 0; w < W; w++) ranks += ((size_t)index * W + w) * B < (size_t)n;
    return ranks;
}

static Status reward_step(void *ctx, Model *m, int step, StepReport *r, Err *e) {
    RewardSource *s = ctx;
    int GA = s->GA, mb = s->micro_batches, spe = trainer_steps_per_epoch(mb, GA);
    int epoch = step / spe, first = (step % spe) * GA, n_micro = MIN(GA, mb - first);
    if (s->order_epoch != epoch) {
        batch_epoch_order(s->order, s->pairs->n, s->c->shuffle, s->c->train.seed, epoch);
        s->order_epoch = epoch;
    }
    memset(s->stats, 0, (size_t)GA * s->W * ST_N * sizeof(double));
    for (int g = 0; g < n_micro; g++) {
        // each rank's micro-batch mean, averaged over the ranks that have pairs in it (all but in
        // the last micro-batch of an epoch), over the step's micro-batches
        int ranks = ranks_with_pairs(first + g, s->W, s->B, s->pairs->n);
        double scale = 1.0 / ((double)n_micro * MAX(ranks, 1));
        TRY(micro_batch(s, m, s->pairs, s->order, s->B, first + g, scale,
                        s->stats + ((size_t)g * s->W + s->R) * ST_N, e));
        step_report_tick(r, "micro-batch", g + 1, n_micro);
    }
    TRY(dist_allreduce_sum_host_d(s->dist, s->stats, (size_t)GA * s->W * ST_N, e));
    for (int g = 0; g < n_micro; g++) {
        BatchStats b;
        if (!batch_stats(s->stats + (size_t)g * s->W * ST_N, s->W, &b)) continue;
        r->loss += b.loss / n_micro;
        r->n_tokens += b.tokens;
        step_report_add(r, "accuracy", b.acc, 1);
        step_report_add(r, "margin", b.margin, 1);
        step_report_add(r, "min_reward", b.rmin, 1);
        step_report_add(r, "mean_reward", b.rmean, 1);
        step_report_add(r, "max_reward", b.rmax, 1);
    }
    return ST_OK;
}

// Trainer.evaluation_loop over the eval pairs in file order: eval_loss the mean of every batch's
// loss repeated once per row (so batch means weighted by pairs), the metrics TRL's plain mean over
// batches of their per-batch values.
static Status reward_evaluate(void *ctx, Model *m, cJSON *o, double *eval_loss, Err *e) {
    RewardSource *s = ctx;
    int G = s->EB * s->W, nb = (s->eval->n + G - 1) / G;
    double *st = xcalloc((size_t)nb * s->W * ST_N, sizeof(double));
    Status rc = ST_OK;
    for (int k = 0; k < nb && rc == ST_OK; k++)
        rc = micro_batch(s, m, s->eval, NULL, s->EB, k, 0, st + ((size_t)k * s->W + s->R) * ST_N, e);
    if (rc == ST_OK) rc = dist_allreduce_sum_host_d(s->dist, st, (size_t)nb * s->W * ST_N, e);
    double lp = 0, pairs = 0, acc = 0, mar = 0, rmin = 0, rmean = 0, rmax = 0;
    int batches = 0;
    for (int k = 0; rc == ST_OK && k < nb; k++) {
        BatchStats b;
        if (!batch_stats(st + (size_t)k * s->W * ST_N, s->W, &b)) continue;
        lp += b.loss_by_pairs, pairs += b.pairs;
        acc += b.acc, mar += b.margin, rmin += b.rmin, rmean += b.rmean, rmax += b.rmax;
        batches++;
    }
    free(st);
    TRY(rc);
    *eval_loss = pairs > 0 ? lp / pairs : NAN;
    cJSON_AddNumberToObject(o, "eval_loss", *eval_loss);
    cJSON_AddNumberToObject(o, "eval_accuracy", acc / batches);
    cJSON_AddNumberToObject(o, "eval_margin", mar / batches);
    cJSON_AddNumberToObject(o, "eval_min_reward", rmin / batches);
    cJSON_AddNumberToObject(o, "eval_mean_reward", rmean / batches);
    cJSON_AddNumberToObject(o, "eval_max_reward", rmax / batches);
    return ST_OK;
}

static void source_free(RewardSource *s) {
    free(s->order), free(s->ids), free(s->pos), free(s->seg), free(s->rows), free(s->lens);
    free(s->scores), free(s->dscores), free(s->rc), free(s->rr), free(s->mg), free(s->drc), free(s->drr);
    free(s->stats), free(s->pp);
}

static Status check_config(const RewardConfig *c, Err *e) {
    if (c->batch_size <= 0 || c->train.grad_accum <= 0)
        return err_set(e, ST_EINVAL, "--per_device_train_batch_size and --gradient_accumulation_steps must be positive");
    if (c->train.peft.use_peft)
        return err_set(e, ST_EUNSUPPORTED, "--use_peft with still reward is not supported yet (full training only)");
    if (c->has_center && !isfinite(c->center_rewards_coefficient))
        return err_set(e, ST_EINVAL, "--center_rewards_coefficient must be a finite number");
    return ST_OK;
}

static int longest_of(const RewardPairs *set) {
    int longest = 1;
    for (int i = 0; set && i < set->n; i++) longest = MAX(longest, MAX(set->p[i].n_chosen, set->p[i].n_rejected));
    return longest;
}

static Status train(RewardConfig *c, Model *m, const RewardPairs *pairs, const RewardPairs *eval, int pad_id,
                    TrainResult *res, Err *e) {
    RewardSource s = {.c = c, .pairs = pairs, .eval = eval, .B = c->batch_size, .GA = c->train.grad_accum,
                      .EB = c->eval_batch_size > 0 ? c->eval_batch_size : 8, .pad_id = pad_id, .order_epoch = -1};
    Dist one;
    if (c->dist) s.dist = c->dist;
    else dist_single(&one), s.dist = &one;
    s.W = s.dist->world, s.R = s.dist->rank;
    int G = s.B * s.W;  // pairs per global micro-batch
    s.micro_batches = c->drop_last ? pairs->n / G : (pairs->n + G - 1) / G;
    if (s.micro_batches == 0)
        return err_set(e, ST_EINVAL, "%s has %d pairs, fewer than one batch of %d (drop_last)", c->dataset, pairs->n, G);
    s.Bmax = eval ? MAX(s.B, s.EB) : s.B;
    s.Tmax = round_up(MAX(longest_of(pairs), longest_of(eval)), c->pad_to_multiple_of);
    size_t N = (size_t)2 * s.Bmax * s.Tmax, B2 = (size_t)2 * s.Bmax;
    s.order = xmalloc((size_t)pairs->n * sizeof(int));
    s.ids = xmalloc(N * sizeof(int32_t)), s.pos = xmalloc(N * sizeof(int32_t)), s.seg = xmalloc(N * sizeof(int32_t));
    s.rows = xmalloc(B2 * sizeof(int32_t)), s.lens = xmalloc(B2 * sizeof(int));
    s.scores = xmalloc(B2 * sizeof(float)), s.dscores = xmalloc(B2 * sizeof(float));
    s.rc = xmalloc((size_t)s.Bmax * sizeof(double)), s.rr = xmalloc((size_t)s.Bmax * sizeof(double));
    s.mg = xmalloc((size_t)s.Bmax * sizeof(double)), s.drc = xmalloc((size_t)s.Bmax * sizeof(double));
    s.drr = xmalloc((size_t)s.Bmax * sizeof(double));
    s.stats = xmalloc((size_t)s.GA * s.W * ST_N * sizeof(double));
    s.pp = xmalloc((size_t)s.Bmax * sizeof(RewardPair *));
    StepSource src = {.ctx = &s, .what = "pairs", .n_items = pairs->n,
                      .steps_per_epoch = trainer_steps_per_epoch(s.micro_batches, s.GA),
                      .micro_batches = s.micro_batches, .batch_size = s.B, .grad_accum = s.GA, .step = reward_step,
                      .evaluate = eval ? reward_evaluate : NULL, .dist = s.dist, .sharded_ok = 1};
    Status st = trainer_loop(m, &src, &c->train, res, e);
    source_free(&s);
    return st;
}

Status reward_run(RewardConfig *c, TrainResult *res, Err *e) {
    TRY(check_config(c, e));
    if (!c->dist || c->dist->rank == 0) TRY(preflight_output_dir(c->train.output_dir, e));  // before any loading
    cJSON *kwargs = NULL;
    TRY(chat_kwargs_parse(c->chat_template_kwargs, &kwargs, e));
    c->data.chat_template_kwargs = kwargs;
    int is_pairs = 0, ids_only = 0;
    Status st = reward_data_detect(c->dataset, &is_pairs, &ids_only, e);
    if (st == ST_OK && !is_pairs)
        st = err_set(e, ST_EINVAL, "%s: reward training needs preference rows (\"chosen\" and \"rejected\", or "
                                   "\"chosen_ids\" and \"rejected_ids\")", c->dataset);
    // the tokenizer: required for text rows; its pad token (else EOS) is what pooling skips, as TRL
    // sets config.pad_token_id from it
    ModelCodec mc = {0};
    int have_codec = 0;
    char *tj = path_join(c->model_dir, "tokenizer.json");
    if (st == ST_OK && (!ids_only || file_exists(tj))) {
        st = model_codec_load(&mc, c->model_dir, c->eos_token, e);
        have_codec = st == ST_OK;
    }
    free(tj);
    if (st == ST_OK) c->data.vocab_size = preflight_vocab_size(c->model_dir);
    RewardPairs pairs = {0}, eval = {0};
    if (st == ST_OK) st = reward_data_load(c->dataset, &c->data, have_codec ? &mc.codec : NULL, &pairs, e);
    if (st == ST_OK && c->eval_dataset) {
        st = reward_data_load(c->eval_dataset, &c->data, have_codec ? &mc.codec : NULL, &eval, e);
        if (st == ST_OK) log_info("eval dataset %s: %d pairs, batches of %d", c->eval_dataset, eval.n, c->eval_batch_size);
    }
    if (st == ST_OK) {
        log_info("dataset %s: %d pairs (%s%s)", c->dataset, pairs.n,
                 pairs.pretokenised ? "chosen_ids / rejected_ids" : pairs.conversational ? "conversational" : "text",
                 pairs.has_margin ? ", margin" : "");
        if (pairs.n_dropped)
            log_info("%s: %d pairs longer than max_length %d dropped", c->dataset, pairs.n_dropped, c->data.max_length);
        if (pairs.n_bad)
            log_warn("%s: %d bad rows skipped (--skip_bad_rows); the first: %s", c->dataset, pairs.n_bad, pairs.first_bad);
    }
    Backend *be = NULL;
    Model *m = NULL;
    if (st == ST_OK) st = backend_create(c->backend, c->threads, &be, e);
    if (st == ST_OK) be->max_memory = c->max_memory;
    if (st == ST_OK && c->dist) st = dist_attach_backend(c->dist, be, e);
    int32_t pad = have_codec ? model_codec_pad_id(&mc) : -1;
    // a causal checkpoint gets a new score head (TRL loads it as AutoModelForSequenceClassification
    // with num_labels 1 after set_seed(seed))
    // --tp_size T: only this rank's part is read (tp.h)
    ModelPart part;
    ModelLoadOpts lo = {.classifier = 1, .num_labels = 1, .pad_token_id = pad, .seed = c->train.seed,
                        .part = c->dist ? tp_part(&part, c->dist) : NULL};
    if (st == ST_OK) st = model_load_opts(c->model_dir, be, DT_F32, &lo, &m, e);
    if (st == ST_OK) {
        if (pad >= 0) config_set_classifier(&m->cfg, 1, pad);  // saved with the model, as TRL saves it
        m->grad_ckpt = c->train.gradient_checkpointing;
        if (c->max_plans > 0) m->plans.max_plans = c->max_plans;
        log_info("reward model %s: %s, pad_token_id %d (pooled at the last token that is not it)", c->model_dir,
                 config_architecture(&m->cfg), m->cfg.pad_token_id);
        c->train.src_model_dir = c->model_dir;
        c->train.save_dtype = c->save_dtype >= 0 ? (DType)c->save_dtype
                              : c->dtype >= 0     ? (DType)c->dtype
                                                  : m->ckpt_dtype;
    }
    // --tp_size T: this rank's part of the model (tp.h; the score head whole on every rank), the
    // batches per data rank
    Tp tp = {0};
    Dist *world = c->dist, *dd = dist_data_axis(c->dist);
    if (st == ST_OK && dd != c->dist) st = tp_shard(&tp, &m, &c->dist->mesh->tp_axis, e);
    if (st == ST_OK) {
        c->dist = dd;
        st = train(c, m, &pairs, c->eval_dataset ? &eval : NULL, m->cfg.pad_token_id, res, e);
        c->dist = world;
    }
    tp_free(&tp, m);
    model_free(m);
    if (be) backend_destroy(be);
    reward_pairs_free(&pairs);
    reward_pairs_free(&eval);
    if (have_codec) model_codec_free(&mc);
    cJSON_Delete(kwargs);
    return st;
}
