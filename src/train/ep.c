// ep.c: a model whose experts are split over an expert-parallel group, the all-to-all exchange of
// the routed slots, and the gathered model (ep.h).
#include "ep.h"

#include "../core/alloc.h"
#include "../core/log.h"

#include <stdlib.h>
#include <string.h>

int ep_local_kind(TensorKind kind) {
    return kind == TK_EXP_G || kind == TK_EXP_U || kind == TK_EXP_D || kind == TK_XGU || kind == TK_XGU_B ||
           kind == TK_XD || kind == TK_XD_B;
}

// One tensor of all experts (gpt_oss): a rank holds El consecutive blocks of it under its name.
static int fused_kind(TensorKind kind) { return kind == TK_XGU || kind == TK_XGU_B || kind == TK_XD || kind == TK_XD_B; }

// The full model's tensor that local tensor lt (of config lc) is part of, and the element
// offset of lt's part in it: a per-expert tensor is the full one of its name, a fused one the
// blocks [ep_lo, ep_lo + El) of it.
static const TensorInfo *full_part(const TensorTable *ft, const TensorInfo *lt, const ModelConfig *lc, size_t *off) {
    const TensorInfo *t = tensors_find(ft, lt->name);
    int fused = fused_kind(lt->kind) && lc->ep_part > 0;
    *off = fused ? (size_t)lc->ep_lo * (lt->numel / (size_t)lc->ep_part) : 0;
    CHECK_MSG(t && t->kind == lt->kind && (fused ? t->numel == lt->numel / lc->ep_part * lc->num_experts
                                                 : t->numel == lt->numel),
              "tensor %s", lt->name);
    return t;
}

Status ep_check_model(const Model *m, int P, Err *e) {
    const ModelConfig *c = &m->cfg;
    const char *dir = m->dir ? m->dir : "the model";
    if (c->num_experts <= 0)
        return err_set(e, ST_EUSAGE, "--ep_size %d: %s (%s) has no experts to split", P, dir, c->model_type);
    if (c->num_experts % P)
        return err_set(e, ST_EUSAGE, "--ep_size %d: the %d experts of %s are not divisible by it (expert parallelism "
                                     "gives every rank the same number of experts)", P, c->num_experts, dir);
    if (m->lora || m->matrix_dtype != DT_F32)
        return err_set(e, ST_EUNSUPPORTED, "--ep_size %d: expert parallelism trains every weight in fp32 so far (no "
                                           "adapter, no bf16 / Q8_0 storage)", P);
    if (m->moe_capacity_factor > 0)
        return err_set(e, ST_EUNSUPPORTED, "--ep_size %d with --moe_capacity_factor: dropped slots are not exchanged; "
                                           "expert parallelism routes capacity-free", P);
    if (strcmp(m->be->name, "cpu") && strcmp(m->be->name, "ref"))
        return err_set(e, ST_EUNSUPPORTED, "--ep_size %d: the exchange of routed slots runs on host memory (cpu "
                                           "backend) so far, not on %s", P, m->be->name);
    return ST_OK;
}

// ---- the exchange --------------------------------------------------------------------------
// Slots a rank sends are its xs rows, sorted by expert: the block for rank p is the slots of p's
// experts, [offsets[p El], offsets[(p+1) El]). What a rank receives comes source-major (rank r's
// slots for expert 0, 1, ... of this rank, then rank r+1's); the experts want them expert-major
// (expert e's slots from rank 0, 1, ...): reorder moves one layout to the other.
// plan (P, El): plan[r El + e] slots from rank r for this rank's expert e.

static float *stage(Ep *ep, size_t n) {
    if (n > ep->cap) {
        free(ep->buf);
        ep->buf = xmalloc(MAX(n, 1) * sizeof(float));
        ep->cap = n;
    }
    return ep->buf;
}

// to_expert: source-major src -> expert-major dst; else the reverse. Rows of C floats.
static void reorder(float *dst, const float *src, const int32_t *plan, int P, int El, int C, int to_expert) {
    size_t sm = 0;  // the block's first row, source-major
    for (int r = 0; r < P; r++)
        for (int e = 0; e < El; e++) {
            size_t em = 0;  // expert-major: experts before e, then rank r's predecessors for e
            for (int e2 = 0; e2 < e; e2++)
                for (int r2 = 0; r2 < P; r2++) em += (size_t)plan[r2 * El + e2];
            for (int r2 = 0; r2 < r; r2++) em += (size_t)plan[r2 * El + e];
            size_t n = (size_t)plan[r * El + e] * C;
            if (to_expert) memcpy(dst + em * C, src + sm * C, n * sizeof(float));
            else memcpy(dst + sm * C, src + em * C, n * sizeof(float));
            sm += (size_t)plan[r * El + e];
        }
}

static void ep_move(void *ctx, int back, float *dst, const float *src, const int32_t *plan, const int32_t *offsets,
                    int C) {
    Ep *ep = ctx;
    if (ep->st != ST_OK) return;
    Dist *d = ep->d;
    int P = d->world, El = ep->El;
    size_t *xsn = xmalloc(2 * (size_t)P * sizeof(size_t)), *xln = xsn + P, total = 0;
    for (int p = 0; p < P; p++) {
        xsn[p] = (size_t)(offsets[(p + 1) * El] - offsets[p * El]) * C;  // this rank's slots for p's experts
        xln[p] = 0;
        for (int e = 0; e < El; e++) xln[p] += (size_t)plan[p * El + e];
        xln[p] *= (size_t)C;  // rank p's slots for this rank's experts
        total += xln[p];
    }
    float *buf = stage(ep, total);
    if (!back) {
        ep->st = dist_alltoallv_host_f(d, buf, xln, src, xsn, &ep->err);
        if (ep->st == ST_OK) reorder(dst, buf, plan, P, El, C, 1);
    } else {
        reorder(buf, src, plan, P, El, C, 0);
        ep->st = dist_alltoallv_host_f(d, dst, xsn, buf, xln, &ep->err);
    }
    free(xsn);
}

static int ep_dispatch(void *ctx, float *xl, int32_t *offl, int32_t *plan, const float *xs, const int32_t *offsets,
                       int S, int C) {
    Ep *ep = ctx;
    Dist *d = ep->d;
    int P = d->world, El = ep->El;
    memset(plan, 0, (size_t)P * El * sizeof(int32_t));
    memset(offl, 0, ((size_t)El + 1) * sizeof(int32_t));
    if (ep->st != ST_OK) return 0;
    CHECK_MSG(offsets[P * El] == S, "expert parallel: %d of %d slots kept (no capacity limit)", offsets[P * El], S);
    int32_t *send = xmalloc((size_t)P * El * sizeof(int32_t));  // slots for each expert of each rank
    for (int i = 0; i < P * El; i++) send[i] = offsets[i + 1] - offsets[i];
    ep->st = dist_alltoall_host_i(d, plan, send, (size_t)El, &ep->err);
    free(send);
    if (ep->st != ST_OK) {
        memset(plan, 0, (size_t)P * El * sizeof(int32_t));
        return 0;
    }
    size_t got = 0;  // the plan holds P S received slots: every rank's batch has this rank's shape
    for (int i = 0; i < P * El; i++) got += (size_t)plan[i];
    CHECK_MSG(got <= (size_t)P * S, "expert parallel: %zu slots received, room for %d (every rank's batch must have "
              "the same shape)", got, P * S);
    ep_move(ctx, 0, xl, xs, plan, offsets, C);
    for (int e = 0; e < El; e++) {
        offl[e + 1] = offl[e];
        for (int r = 0; r < P; r++) offl[e + 1] += plan[r * El + e];
    }
    return offl[El];
}

// ---- sharding and gathering ------------------------------------------------------------------

Status ep_shard(Ep *ep, Model **mp, Dist *d, int P, Err *e) {
    Model *m = *mp;
    memset(ep, 0, sizeof *ep);
    TRY(ep_check_model(m, P, e));
    CHECK(P >= 1 && d->world % P == 0);
    ep->R = d->world / P;
    ep->d = d;
    if (ep->R > 1) {  // groups of P consecutive ranks; the replicas of a shard: the ranks of one q
        Status st = dist_split(d, d->rank / P, d->rank % P, &ep->group, e);
        if (st == ST_OK) st = dist_split(d, d->rank % P, d->rank / P, &ep->reps, e);
        if (st != ST_OK) {
            dist_split_free(&ep->group), dist_split_free(&ep->reps);
            return st;
        }
        ep->d = &ep->group;
    }
    int q = ep->d->rank;
    ModelConfig lc = m->cfg;
    lc.ep_size = P;
    lc.ep_part = m->cfg.num_experts / P;
    lc.ep_lo = q * lc.ep_part;
    Model *l = model_alloc(&lc, m->be, m->matrix_dtype);
    l->dir = m->dir ? xstrdup(m->dir) : NULL;
    l->ckpt_dtype = m->ckpt_dtype;
    l->plans.max_plans = m->plans.max_plans;
    l->grad_ckpt = m->grad_ckpt;
    l->moe_capacity_factor = m->moe_capacity_factor;
    for (int i = 0; i < l->tt.n; i++) {
        size_t off;
        const TensorInfo *lt = &l->tt.t[i], *ft = full_part(&m->tt, lt, &lc, &off);
        CHECK_MSG(ft->dtype == DT_F32 && lt->dtype == DT_F32, "tensor %s", lt->name);
        m->be->copy(m->be, l->data[i], (const float *)m->data[ft - m->tt.t] + off, lt->numel * sizeof(float));
    }
    char reps[64] = "";
    if (ep->R > 1) snprintf(reps, sizeof reps, " (x %d data-parallel replicas, this one %d)", ep->R, ep->reps.rank);
    log_info("expert parallel over %d ranks%s: each holds %d of the %d experts of every sparse layer (here [%d, %d))",
             P, reps, lc.ep_part, m->cfg.num_experts, lc.ep_lo, lc.ep_lo + lc.ep_part);
    model_free(m);
    ep->El = lc.ep_part;
    ep->ex = (MoeExchange){.ctx = ep, .dispatch = ep_dispatch, .move = ep_move};
    ep->hooks = (ModelHooks){.moe_ex = &ep->ex};
    l->hooks = &ep->hooks;
    *mp = l;
    return ST_OK;
}

Status ep_open(Ep *ep, Model **m, Dist *world, const Dist *data_axis, int P, int zero_stage, Err *e) {
    memset(ep, 0, sizeof *ep);
    if (P <= 1) return ST_OK;
    int W = world ? world->world : 1;
    if (!world || W % P || data_axis != world || zero_stage != 0)
        return err_set(e, ST_EUSAGE, "--ep_size %d: expert parallelism runs on a multiple of that many ranks (ep_size x "
                                     "data-parallel replicas: mpirun -np %d, %d, ...; here %d), without --tp_size, "
                                     "--fsdp_size or --zero_stage so far", P, P, 2 * P, W);
    return ep_shard(ep, m, world, P, e);
}

// name with its expert index x replaced by x - from + to ("...experts.5.gate_proj.weight").
static void rename_expert(char *out, size_t cap, const char *name, int from, int to) {
    const char *p = strstr(name, ".experts.");
    CHECK_MSG(p, "no expert index in %s", name);
    p += strlen(".experts.");
    char *end;
    long x = strtol(p, &end, 10);
    snprintf(out, cap, "%.*s%ld%s", (int)(p - name), name, x - from + to, end);
}

static ModelConfig full_config(const ModelConfig *c) {
    ModelConfig f = *c;
    f.ep_size = f.ep_part = f.ep_lo = 0;
    return f;
}

Model *ep_full_model(const Model *m) {
    ModelConfig fc = full_config(&m->cfg);
    Model *f = model_alloc(&fc, m->be, DT_F32);
    f->ckpt_dtype = m->ckpt_dtype, f->dir = m->dir ? xstrdup(m->dir) : NULL;
    return f;
}

// Local tensors carry their global names: each is the full model's tensor of the same name.
void ep_slice_model(const Model *full, Model *m) {
    for (int i = 0; i < m->tt.n; i++) {
        size_t off;
        const TensorInfo *lt = &m->tt.t[i], *ft = full_part(&full->tt, lt, &m->cfg, &off);
        m->be->copy(m->be, m->data[i], (const float *)full->data[ft - full->tt.t] + off, lt->numel * sizeof(float));
    }
}

void ep_slice_flat(const Model *m, const Model *full, float *local, const float *full_flat) {
    for (int i = 0; i < m->tt.n; i++) {
        size_t off;
        const TensorInfo *lt = &m->tt.t[i], *ft = full_part(&full->tt, lt, &m->cfg, &off);
        memcpy(local + lt->goffset, full_flat + ft->goffset + off, lt->numel * sizeof(float));
    }
}

// Host floats in table order: full (ft's layout, on rank 0) from every rank's local (m's table):
// replicated tensors from rank 0, each expert slot from every rank (rank r's copy of local expert
// x is expert r El + (x - ep_lo)).
static Status gather_into(Ep *ep, const Model *m, const TensorTable *ft, float *full, const float *local, Err *e) {
    Dist *d = ep->d;
    int P = d->world, root = d->rank == 0;
    size_t *counts = xmalloc((size_t)P * sizeof(size_t));
    Status st = ST_OK;
    for (int i = 0; i < m->tt.n && st == ST_OK; i++) {
        const TensorInfo *lt = &m->tt.t[i];
        size_t n = lt->numel;
        int local_kind = ep_local_kind(lt->kind);
        float *all = root && local_kind ? xmalloc((size_t)P * n * sizeof(float)) : NULL;
        if (local_kind) {
            for (int r = 0; r < P; r++) counts[r] = n;
            st = dist_gather_host_f(d, all, local + lt->goffset, counts, e);
        }
        int fused = fused_kind(lt->kind);  // rank r's blocks: experts [r El, (r+1) El) of the tensor
        for (int r = 0; st == ST_OK && root && r < (local_kind ? P : 1); r++) {
            char name[sizeof lt->name];
            if (local_kind && !fused) rename_expert(name, sizeof name, lt->name, m->cfg.ep_lo, r * ep->El);
            else snprintf(name, sizeof name, "%s", lt->name);
            const TensorInfo *t = tensors_find(ft, name);
            CHECK_MSG(t && t->numel == (fused ? (size_t)P * n : n), "tensor %s", name);
            memcpy(full + t->goffset + (fused ? (size_t)r * n : 0), local_kind ? all + (size_t)r * n : local + lt->goffset,
                   n * sizeof(float));
        }
        free(all);
    }
    free(counts);
    return st;
}

Status ep_gather_flat(Ep *ep, const Model *m, float *full, const float *local, Err *e) {
    TensorTable ft = {0};
    int root = ep->d->rank == 0;
    if (root) {
        ModelConfig fc = full_config(&m->cfg);
        tensors_build(&ft, &fc, DT_F32);
    }
    Status st = gather_into(ep, m, &ft, full, local, e);
    if (root) tensors_free(&ft);
    return st;
}

Status ep_gather(Ep *ep, const Model *m, Model **full, Err *e) {
    int root = ep->d->rank == 0;
    Backend *be = m->be;
    *full = NULL;
    CHECK_MSG(m->matrix_dtype == DT_F32, "ep_gather: fp32 weights only");
    float *local = xmalloc(MAX(m->tt.n_params, 1) * sizeof(float));  // the weights in table order
    for (int i = 0; i < m->tt.n; i++)
        be->download(be, local + m->tt.t[i].goffset, m->data[i], m->tt.t[i].numel * sizeof(float));
    Model *f = root ? ep_full_model(m) : NULL;
    float *whole = root ? xmalloc(MAX(f->tt.n_params, 1) * sizeof(float)) : NULL;
    Status st = gather_into(ep, m, root ? &f->tt : NULL, whole, local, e);
    for (int i = 0; st == ST_OK && root && i < f->tt.n; i++)
        be->upload(be, f->data[i], whole + f->tt.t[i].goffset, f->tt.t[i].numel * sizeof(float));
    free(local);
    free(whole);
    if (st != ST_OK) {
        model_free(f);
        return st;
    }
    *full = f;
    return ST_OK;
}

Ep *ep_of(const Model *m) {
    return m && m->hooks && m->hooks->moe_ex && m->hooks->moe_ex->dispatch == ep_dispatch ? m->hooks->moe_ex->ctx : NULL;
}

Status ep_lockstep_max(void *ctx, int *v, int n, Err *e) {
    Ep *ep = ctx;
    Dist *d = ep->d;
    int P = d->world;
    int *all = xmalloc((size_t)P * n * sizeof(int));  // (P, n)
    Status st = dist_allgather_host(d, all, v, (size_t)n * sizeof(int), e);
    for (int r = 0; st == ST_OK && r < P; r++)
        for (int i = 0; i < n; i++) v[i] = MAX(v[i], all[(size_t)r * n + i]);
    free(all);
    return st;
}

Status ep_status(Ep *ep, Err *e) {
    if (ep->st != ST_OK) *e = ep->err;
    return ep->st;
}

Status ep_reduce_experts(Ep *ep, const Model *m, float *grads, double *ss_own, Err *e) {
    Backend *be = m->be;
    const TensorTable *tt = &m->tt;
    double ss = 0;
    for (int i = 0; i < tt->n;) {  // runs of expert tensors, all-reduced run by run
        if (!ep_local_kind(tt->t[i].kind)) {
            i++;
            continue;
        }
        int j = i;
        while (j < tt->n && ep_local_kind(tt->t[j].kind)) j++;
        size_t lo = tt->t[i].goffset, n = tt->t[j - 1].goffset + tt->t[j - 1].numel - lo;
        if (ep->R > 1) TRY(dist_allreduce_sum(&ep->reps, be, grads + lo, n, e));
        ss += be->sumsq(be, grads + lo, n);
        i = j;
    }
    TRY(dist_allreduce_sum_host_d(ep->d, &ss, 1, e));  // the group's experts, each once
    *ss_own = ss;
    return ST_OK;
}

void ep_free(Ep *ep, Model *m) {
    if (m && m->hooks == &ep->hooks) m->hooks = NULL;
    if (ep->R > 1) dist_split_free(&ep->group), dist_split_free(&ep->reps);
    free(ep->buf);
    memset(ep, 0, sizeof *ep);
}
