// optim.c: AdamW steps, schedules and clipping; the arithmetic is the backend's adamw op.
#include "optim.h"

#include "../core/alloc.h"
#include "fsdp.h"
#include "ep.h"
#include "tp.h"

#include <math.h>
#include <string.h>

static const char *sched_names[] = {"linear", "cosine", "constant", "constant_with_warmup"};

Status optim_parse_schedule(const char *s, SchedType *out, Err *e) {
    for (size_t i = 0; i < ARRAY_LEN(sched_names); i++)
        if (!strcmp(s, sched_names[i])) return *out = (SchedType)i, ST_OK;
    return err_set(e, ST_EINVAL, "--lr_scheduler_type %s: expected linear, cosine, constant or constant_with_warmup", s);
}

const char *optim_schedule_name(SchedType s) { return sched_names[s]; }

int optim_warmup_steps(double warmup_steps, double warmup_ratio, int total_steps) {
    if (warmup_steps >= 1) return (int)warmup_steps;
    if (warmup_steps > 0) return (int)ceil(warmup_steps * total_steps);
    if (warmup_ratio > 0) return (int)ceil(warmup_ratio * total_steps);
    return 0;
}

double optim_lr_at(const OptimConfig *c, int done) {
    int w = c->warmup_steps, total = c->total_steps;
    double f = 1.0;
    if (c->sched == SCHED_CONSTANT) return c->lr;
    if (done < w) return c->lr * (double)done / (double)MAX(1, w);
    switch (c->sched) {
    case SCHED_LINEAR: f = MAX(0.0, (double)(total - done) / (double)MAX(1, total - w)); break;
    case SCHED_COSINE: {
        double progress = (double)(done - w) / (double)MAX(1, total - w);
        f = MAX(0.0, 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress)));
        break;
    }
    default: break;
    }
    return c->lr * f;
}

// Where flat element x (inside the tensor table) lives in the parameter buffer, in floats.
static size_t param_float_index(const TensorTable *tt, size_t x) {
    if (x >= tt->n_params) return tt->param_bytes / sizeof(float);
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        if (x >= t->goffset && x < t->goffset + t->numel) return t->offset / sizeof(float) + (x - t->goffset);
    }
    CHECK_MSG(0, "flat element %zu is in no tensor", x);
    return 0;
}

void optim_init(Optim *o, Model *m, const OptimConfig *cfg, Dist *dist, int zero_stage) {
    memset(o, 0, sizeof *o);
    CHECK(dist && (zero_stage == 0 || zero_stage == 1 || zero_stage == 3));
    o->cfg = *cfg;
    o->dist = dist;
    if (zero_stage == 3 && m->lora) {  // the base sharded; the adapter's gradient all-reduced over dist
        DistMesh *mesh = dist->mesh;
        CHECK(!mesh || mesh->tp == 1);
        FsdpPrefetch pf = {cfg->fsdp_forward_prefetch, cfg->fsdp_backward_prefetch};
        o->base = xcalloc(1, sizeof(Fsdp));
        fsdp_init(o->base, m, mesh ? &mesh->fsdp_axis : dist, NULL, pf);
        zero_stage = 0;
    }
    if (zero_stage == 3) {
        o->zero_stage = 3;
        o->fsdp = xcalloc(1, sizeof(Fsdp));
        DistMesh *mesh = dist->mesh;
        FsdpPrefetch pf = {cfg->fsdp_forward_prefetch, cfg->fsdp_backward_prefetch};
        fsdp_init(o->fsdp, m, mesh ? &mesh->fsdp_axis : dist, mesh ? &mesh->dp_axis : NULL, pf);
        o->n = o->hi = o->fsdp->n;
        size_t k = MAX(o->n, 1) * sizeof(float);
        o->m = m->be->alloc(m->be, k);
        o->v = m->be->alloc(m->be, k);
        m->be->zero(m->be, o->m, k);
        m->be->zero(m->be, o->v, k);
        return;
    }
    Trainable tr = model_trainable(m);
    const TensorTable *tt = tr.tt;
    o->n = tt->n_params;
    o->zero_stage = dist->world > 1 ? zero_stage : 0;
    o->hi = o->n;
    if (o->zero_stage == 1) {
        int W = dist->world;
        CHECK_MSG(tt->param_bytes % sizeof(float) == 0, "parameter buffer of %zu bytes", tt->param_bytes);
        dist_shard_range(dist, dist->rank, o->n, &o->lo, &o->hi);
        o->gcounts = xmalloc((size_t)W * sizeof(size_t));
        o->pcounts = xmalloc((size_t)W * sizeof(size_t));
        dist_shard_counts(dist, o->n, o->gcounts);
        // a rank's block in the parameter buffer runs from its first element to the next rank's
        // first (the alignment gaps between tensors ride along with the block before them)
        size_t start = 0;
        for (int r = 0; r < W; r++) {
            size_t lo, hi;
            dist_shard_range(dist, r + 1 < W ? r + 1 : r, o->n, &lo, &hi);
            size_t end = r + 1 < W ? param_float_index(tt, lo) : tt->param_bytes / sizeof(float);
            o->pcounts[r] = end - start;
            start = end;
        }
        o->gshard = m->be->alloc(m->be, MAX(o->hi - o->lo, 1) * sizeof(float));
    }
    size_t k = MAX(o->hi - o->lo, 1);
    o->m = m->be->alloc(m->be, k * sizeof(float));
    o->v = m->be->alloc(m->be, k * sizeof(float));
}

void optim_zero_grads(Optim *o, Model *m) {
    if (o->fsdp) {
        fsdp_zero_grads(o->fsdp);
        return;
    }
    Trainable tr = model_trainable(m);
    m->be->zero(m->be, tr.grads, tr.tt->n_params * sizeof(float));
}

void optim_free(Optim *o, Backend *be) {
    if (o->base) {
        fsdp_free(o->base);
        free(o->base);
        o->base = NULL;
    }
    if (o->fsdp) {
        fsdp_free(o->fsdp);
        free(o->fsdp);
        o->fsdp = NULL;
    }
    if (o->m) be->free(be, o->m);
    if (o->v) be->free(be, o->v);
    if (o->gshard) be->free(be, o->gshard);
    free(o->gcounts);
    free(o->pcounts);
    o->m = o->v = o->gshard = NULL;
    o->gcounts = o->pcounts = NULL;
}

size_t optim_state_bytes(const Optim *o) { return 2 * (o->hi - o->lo) * sizeof(float); }

// TP x FSDP, per piece of this rank's blocks: per-head norms summed over the tensor-parallel
// group; the squared norm counting replicated tensors (the same on every rank) once.
typedef struct TpPieces {
    Backend *be;
    const ModelConfig *cfg;
    float *g;
    Dist *tp;
    double ss;
    Status st;
    Err *e;
} TpPieces;

static void tp_piece(void *ctx, const TensorInfo *t, size_t elem, size_t at, size_t len) {
    TpPieces *c = ctx;
    (void)elem;
    if (c->st == ST_OK && tp_tensor_grad_summed(c->cfg, t))
        c->st = dist_allreduce_sum(c->tp, c->be, c->g + at, len, c->e);
    double s = c->be->sumsq(c->be, c->g + at, len);
    c->ss += tp_tensor_split_dim(c->cfg, t) >= 0 ? s : s / c->tp->world;
}

Status optim_reduce_grads(Optim *o, Model *m, double *grad_norm, Err *e) {
    Backend *be = m->be;
    float *grads = model_trainable(m).grads;
    Dist *d = o->dist;
    if (o->base) TRY(fsdp_status(o->base, e));  // a failed gather of the base inside a hook
    if (o->fsdp) {  // every layer's gradient is reduce-scattered already; replicas sum theirs
        Fsdp *f = o->fsdp;
        TRY(fsdp_status(f, e));
        if (f->dp) TRY(dist_allreduce_sum(f->dp, be, f->g, f->n, e));
        double ss;
        if (d->mesh && d->mesh->tp > 1) {  // TP x FSDP: the blocks of q_norm / k_norm summed over the group
            TpPieces c = {be, &m->cfg, f->g, &d->mesh->tp_axis, 0, ST_OK, e};
            fsdp_for_pieces(f, tp_piece, &c);
            TRY(c.st);
            TRY(dist_allreduce_sum_host_d(c.tp, &c.ss, 1, e));
            ss = c.ss;
        } else {
            ss = f->n ? be->sumsq(be, f->g, f->n) : 0.0;
        }
        TRY(dist_allreduce_sum_host_d(f->d, &ss, 1, e));
        *grad_norm = sqrt(ss);
        return ST_OK;
    }
    DistMesh *mesh = d->mesh;
    if (mesh && mesh->tp > 1) {  // ZeRO-0 over the data axis, then the norm over the whole model
        CHECK(o->zero_stage == 0);
        Dist *tp = &mesh->tp_axis;
        const TensorTable *tt = model_trainable(m).tt;
        for (int i = 0; i < tt->n; i++)  // per-head norms, an adapter's whole lora_A: each rank's share
            if (tp_tensor_grad_summed(&m->cfg, &tt->t[i]))
                TRY(dist_allreduce_sum(tp, be, grads + tt->t[i].goffset, tt->t[i].numel, e));
        TRY(dist_allreduce_sum(d, be, grads, o->n, e));
        double ss = 0;  // split tensors once per rank, replicated ones (the same on every rank) once
        for (int i = 0; i < tt->n; i++) {
            double s = be->sumsq(be, grads + tt->t[i].goffset, tt->t[i].numel);
            ss += tp_tensor_split_dim(&m->cfg, &tt->t[i]) >= 0 ? s : s / tp->world;
        }
        TRY(dist_allreduce_sum_host_d(tp, &ss, 1, e));
        *grad_norm = sqrt(ss);
        return ST_OK;
    }
    if (m->cfg.ep_part > 0) {  // expert parallel: the experts' gradients are whole in their group already
        CHECK(o->zero_stage == 0 && !m->lora && m->hooks && m->hooks->moe_ex);
        const TensorTable *tt = &m->tt;
        double ss_own = 0, ss = 0;
        TRY(ep_reduce_experts(m->hooks->moe_ex->ctx, m, grads, &ss_own, e));  // over the replicas
        for (int i = 0; i < tt->n;) {  // runs of tensors every rank holds, all-reduced run by run
            if (ep_local_kind(tt->t[i].kind)) {
                i++;
                continue;
            }
            int j = i;
            while (j < tt->n && !ep_local_kind(tt->t[j].kind)) j++;
            size_t lo = tt->t[i].goffset, n = tt->t[j - 1].goffset + tt->t[j - 1].numel - lo;
            TRY(dist_allreduce_sum(d, be, grads + lo, n, e));
            ss += be->sumsq(be, grads + lo, n);
            i = j;
        }
        *grad_norm = sqrt(ss + ss_own);
        return ST_OK;
    }
    if (o->zero_stage == 1) {
        size_t k = o->hi - o->lo;
        TRY(dist_reduce_scatter_sum(d, be, o->gshard, grads, o->gcounts, e));
        double ss = k ? be->sumsq(be, o->gshard, k) : 0.0;
        TRY(dist_allreduce_sum_host_d(d, &ss, 1, e));
        *grad_norm = sqrt(ss);
    } else {
        TRY(dist_allreduce_sum(d, be, grads, o->n, e));
        *grad_norm = sqrt(be->sumsq(be, grads, o->n));
    }
    return ST_OK;
}

typedef struct PieceStep {
    Optim *o;
    Backend *be;
    double rate;
    float clip;
} PieceStep;

static void adamw_piece(void *ctx, const TensorInfo *t, size_t elem, size_t at, size_t len) {
    PieceStep *c = ctx;
    Optim *o = c->o;
    Fsdp *f = o->fsdp;
    (void)elem;
    c->be->adamw(c->be, f->p + at, o->m + at, o->v + at, f->g + at, len, c->rate, o->cfg.beta1, o->cfg.beta2,
                 o->cfg.eps, t->decay ? o->cfg.weight_decay : 0.0, o->t, c->clip);
}

Status optim_apply(Optim *o, Model *m, double norm, double *lr, Err *e) {
    Backend *be = m->be;
    CHECK_MSG(m->lora || m->matrix_dtype == DT_F32, "training needs fp32 master weights");
    if (o->fsdp) {
        float clip = 1.0f;
        if (o->cfg.max_grad_norm > 0) {  // as below
            float coef = (float)o->cfg.max_grad_norm / ((float)norm + 1e-6f);
            clip = coef < 1.0f ? coef : 1.0f;
        }
        PieceStep c = {o, be, optim_lr_at(&o->cfg, o->t), clip};
        o->t++;
        fsdp_for_pieces(o->fsdp, adamw_piece, &c);
        fsdp_invalidate(o->fsdp);
        if (lr) *lr = c.rate;
        return ST_OK;
    }
    Trainable tr = model_trainable(m);
    // the summed gradient of [lo, hi) starts at g[lo]
    const float *g = o->zero_stage == 1 ? o->gshard - o->lo : tr.grads;
    float clip = 1.0f;
    if (o->cfg.max_grad_norm > 0) {
        // torch.nn.utils.clip_grad_norm_: coef = max_norm / (total + 1e-6), clamped to 1 (fp32)
        float coef = (float)o->cfg.max_grad_norm / ((float)norm + 1e-6f);
        clip = coef < 1.0f ? coef : 1.0f;
    }
    double rate = optim_lr_at(&o->cfg, o->t);
    o->t++;
    for (int i = 0; i < tr.tt->n; i++) {  // every tensor's part inside [lo, hi)
        const TensorInfo *ti = &tr.tt->t[i];
        size_t a = MAX(ti->goffset, o->lo), b = MIN(ti->goffset + ti->numel, o->hi);
        if (a >= b) continue;
        float *p = (float *)((char *)tr.params + ti->offset) + (a - ti->goffset);
        be->adamw(be, p, o->m + (a - o->lo), o->v + (a - o->lo), g + a, b - a, rate, o->cfg.beta1, o->cfg.beta2,
                  o->cfg.eps, ti->decay ? o->cfg.weight_decay : 0.0, o->t, clip);
    }
    if (o->zero_stage == 1) TRY(dist_allgather(o->dist, be, (float *)tr.params, o->pcounts, e));
    if (lr) *lr = rate;
    return ST_OK;
}

Status optim_step(Optim *o, Model *m, double *grad_norm, double *lr, Err *e) {
    double norm;
    TRY(optim_reduce_grads(o, m, &norm, e));
    if (grad_norm) *grad_norm = norm;
    return optim_apply(o, m, norm, lr, e);
}

Status optim_gather_state(Optim *o, Backend *be, float *mh, float *vh, Err *e) {
    Dist *d = o->dist;
    size_t k = o->hi - o->lo;
    if (o->fsdp) {
        TRY(fsdp_gather_flat(o->fsdp, mh, o->m, e));
        return fsdp_gather_flat(o->fsdp, vh, o->v, e);
    }
    if (o->zero_stage == 0) {
        if (d->rank == 0) {
            be->download(be, mh, o->m, o->n * sizeof(float));
            be->download(be, vh, o->v, o->n * sizeof(float));
        }
        return ST_OK;
    }
    float *h = xmalloc(MAX(k, 1) * sizeof(float));
    be->download(be, h, o->m, k * sizeof(float));
    Status st = dist_gather_host_f(d, mh, h, o->gcounts, e);
    if (st == ST_OK) {
        be->download(be, h, o->v, k * sizeof(float));
        st = dist_gather_host_f(d, vh, h, o->gcounts, e);
    }
    free(h);
    return st;
}

void optim_load_state(Optim *o, Backend *be, const float *mh, const float *vh) {
    if (o->fsdp) {
        fsdp_scatter_flat(o->fsdp, o->m, mh);
        fsdp_scatter_flat(o->fsdp, o->v, vh);
        return;
    }
    size_t k = o->hi - o->lo;
    be->upload(be, o->m, mh + o->lo, k * sizeof(float));
    be->upload(be, o->v, vh + o->lo, k * sizeof(float));
}
