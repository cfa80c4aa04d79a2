// fsdp.c: sharded parameters, gradients and their gathering around each layer (fsdp.h).
#include "fsdp.h"

#include "../core/alloc.h"

#include <string.h>

Status fsdp_check_model(const Model *m, Err *e) {
    if (m->lora) return err_set(e, ST_EUNSUPPORTED, "--zero_stage 3 / --fsdp_size with an adapter (--use_peft) is not "
                                                    "supported yet; LoRA trains with --zero_stage 0 or 1");
    if (m->frozen || !m->params || m->matrix_dtype != DT_F32)
        return err_set(e, ST_EUNSUPPORTED, "--zero_stage 3 needs fp32 weights of the model's own (got %s)",
                       dtype_torch_name(m->matrix_dtype));
    return ST_OK;
}

static size_t floats_at(const TensorTable *tt, int i) {  // where entry i starts (the end for i == n)
    return (i < tt->n ? tt->t[i].offset : tt->param_bytes) / sizeof(float);
}

static void build_units(Fsdp *f) {
    const TensorTable *tt = &f->m->tt;
    f->u = xcalloc((size_t)f->L + 1, sizeof(FsdpUnit));
    f->unit_of = xmalloc((size_t)tt->n * sizeof(int));
    f->upos = xmalloc((size_t)tt->n * sizeof(size_t));
    for (int i = 0; i < tt->n; i++) {
        int u = tt->t[i].layer >= 0 ? tt->t[i].layer : f->L;
        FsdpUnit *x = &f->u[u];
        f->unit_of[i] = u;
        size_t at = floats_at(tt, i), end = floats_at(tt, i + 1);  // the gap after a tensor rides with it
        if (!(i > 0 && f->unit_of[i - 1] == u)) {  // a new segment
            CHECK_MSG(x->nseg < 2, "tensor %s: a unit of more than two runs of tensors", tt->t[i].name);
            x->seg_at[x->nseg] = at;
            x->seg_n[x->nseg] = 0;
            x->nseg++;
        }
        f->upos[i] = x->n;
        x->seg_n[x->nseg - 1] += end - at;
        x->n += end - at;
    }
    int F = MAX(1, f->d->world);
    for (int u = 0; u <= f->L; u++) {
        FsdpUnit *x = &f->u[u];
        dist_shard_range(f->d, f->d->rank, x->n, &x->lo, &x->hi);
        x->counts = xmalloc((size_t)F * sizeof(size_t));
        dist_shard_counts(f->d, x->n, x->counts);
        x->at = f->n;
        f->n += x->hi - x->lo;
    }
}

// Copy this rank's block of unit u between the shard buffer and a full parameter buffer.
static void block_copy(Fsdp *f, int u, float *full, int to_shard) {
    Backend *be = f->m->be;
    const FsdpUnit *x = &f->u[u];
    size_t base = 0;
    for (int s = 0; s < x->nseg; s++) {
        size_t a = MAX(base, x->lo), b = MIN(base + x->seg_n[s], x->hi);
        if (a < b) {
            float *full_p = full + x->seg_at[s] + (a - base), *shard_p = f->p + x->at + (a - x->lo);
            if (to_shard) be->copy(be, shard_p, full_p, (b - a) * sizeof(float));
            else be->copy(be, full_p, shard_p, (b - a) * sizeof(float));
        }
        base += x->seg_n[s];
    }
}

// The tensors of unit u read from buf and accumulate into gbuf (NULL: unavailable).
static void point(Fsdp *f, int u, float *buf, float *gbuf) {
    Model *m = f->m;
    for (int i = 0; i < m->tt.n; i++) {
        if (f->unit_of[i] != u) continue;
        m->data[i] = buf ? buf + f->upos[i] : NULL;
        m->gdata[i] = gbuf ? gbuf + f->upos[i] : NULL;
    }
}

static void gather(Fsdp *f, int u, float *buf) {
    if (f->st != ST_OK) return;
    Backend *be = f->m->be;
    const FsdpUnit *x = &f->u[u];
    if (x->hi > x->lo) be->copy(be, buf + x->lo, f->p + x->at, (x->hi - x->lo) * sizeof(float));
    f->st = dist_allgather(f->d, be, buf, x->counts, &f->err);
}

static void materialize(void *ctx, Model *m, int layer) {
    Fsdp *f = ctx;
    (void)m;
    if (layer < 0) {
        if (f->rest_ok) return;
        gather(f, f->L, f->rest);
        point(f, f->L, f->rest, f->grest);
        f->rest_ok = 1;
        return;
    }
    if (f->layer_at == layer) return;
    if (f->layer_at >= 0) point(f, f->layer_at, NULL, NULL);
    gather(f, layer, f->work);
    point(f, layer, f->work, f->gwork);
    f->layer_at = layer;
}

// The unit's gradient summed over the FSDP axis into this rank's block (added to what earlier
// micro-batches left there); the working gradient is zeroed for the next use.
static void grads_done(void *ctx, Model *m, int layer) {
    Fsdp *f = ctx;
    Backend *be = m->be;
    int u = layer < 0 ? f->L : layer;
    const FsdpUnit *x = &f->u[u];
    float *gbuf = layer < 0 ? f->grest : f->gwork;
    size_t k = x->hi - x->lo;
    if (f->st == ST_OK) f->st = dist_reduce_scatter_sum(f->d, be, f->tmp, gbuf, x->counts, &f->err);
    if (f->st == ST_OK && k) be->add(be, f->g + x->at, f->g + x->at, f->tmp, k);
    be->zero(be, gbuf, x->n * sizeof(float));
}

void fsdp_init(Fsdp *f, Model *m, Dist *d, Dist *dp) {
    memset(f, 0, sizeof *f);
    CHECK(m->params && !m->lora && m->matrix_dtype == DT_F32 && (!m->hooks || !m->hooks->materialize));
    f->d = d, f->dp = dp && dp->world > 1 ? dp : NULL, f->m = m;
    f->L = m->tt.n_layers;
    build_units(f);
    Backend *be = m->be;
    size_t layer_n = 1, block_n = 1;
    for (int u = 0; u <= f->L; u++) {
        if (u < f->L) layer_n = MAX(layer_n, f->u[u].n);
        block_n = MAX(block_n, f->u[u].hi - f->u[u].lo);
    }
    f->p = be->alloc(be, MAX(f->n, 1) * sizeof(float));
    f->g = be->alloc(be, MAX(f->n, 1) * sizeof(float));
    for (int u = 0; u <= f->L; u++) block_copy(f, u, m->params, 1);
    be->free(be, m->params);
    m->params = NULL;
    f->work = be->alloc(be, layer_n * sizeof(float));
    f->gwork = be->alloc(be, layer_n * sizeof(float));
    f->rest = be->alloc(be, MAX(f->u[f->L].n, 1) * sizeof(float));
    f->grest = be->alloc(be, MAX(f->u[f->L].n, 1) * sizeof(float));
    f->tmp = be->alloc(be, block_n * sizeof(float));
    be->zero(be, f->gwork, layer_n * sizeof(float));
    be->zero(be, f->grest, MAX(f->u[f->L].n, 1) * sizeof(float));
    be->zero(be, f->g, MAX(f->n, 1) * sizeof(float));
    m->gdata = xcalloc((size_t)m->tt.n, sizeof(float *));
    for (int i = 0; i < m->tt.n; i++) m->data[i] = NULL;
    f->layer_at = -1;
    f->hooks = (ModelHooks){.ctx = f, .materialize = materialize, .grads_done = grads_done};
    if (m->hooks) f->hooks.reduce = m->hooks->reduce, f->hooks.reduce_ctx = m->hooks->reduce_ctx;  // TP x FSDP
    f->prev = m->hooks;
    m->hooks = &f->hooks;
}

void fsdp_free(Fsdp *f) {
    if (!f->m) return;
    Model *m = f->m;
    Backend *be = m->be;
    if (f->full) fsdp_full_end(f, 0);
    float *bufs[] = {f->p, f->g, f->work, f->gwork, f->rest, f->grest, f->tmp};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
        if (bufs[i]) be->free(be, bufs[i]);
    for (int i = 0; i < m->tt.n; i++) m->data[i] = NULL;
    free(m->gdata);
    m->gdata = NULL;
    m->hooks = f->prev;
    for (int u = 0; u <= f->L; u++) free(f->u[u].counts);
    free(f->u), free(f->unit_of), free(f->upos);
    memset(f, 0, sizeof *f);
}

Status fsdp_status(Fsdp *f, Err *e) {
    if (f->st != ST_OK) *e = f->err;
    return f->st;
}

void fsdp_zero_grads(Fsdp *f) { f->m->be->zero(f->m->be, f->g, MAX(f->n, 1) * sizeof(float)); }

void fsdp_invalidate(Fsdp *f) {
    if (f->layer_at >= 0) point(f, f->layer_at, NULL, NULL);
    if (f->rest_ok) point(f, f->L, NULL, NULL);
    f->layer_at = -1;
    f->rest_ok = 0;
}

Status fsdp_full_begin(Fsdp *f, int all, Err *e) {
    Model *m = f->m;
    Backend *be = m->be;
    CHECK(!f->full);
    fsdp_invalidate(f);
    int have = all || f->d->rank == 0;
    size_t nf = m->tt.param_bytes / sizeof(float);
    float *full = have ? be->alloc(be, MAX(nf, 1) * sizeof(float)) : NULL;
    for (int u = 0; u <= f->L && f->st == ST_OK; u++) {
        float *buf = u < f->L ? f->work : f->rest;
        gather(f, u, buf);
        const FsdpUnit *x = &f->u[u];
        size_t base = 0;
        for (int s = 0; s < x->nseg && have; s++) {
            be->copy(be, full + x->seg_at[s], buf + base, x->seg_n[s] * sizeof(float));
            base += x->seg_n[s];
        }
    }
    if (f->st != ST_OK) {
        if (full) be->free(be, full);
        return fsdp_status(f, e);
    }
    f->full = full;
    if (have) {
        m->params = full;
        for (int i = 0; i < m->tt.n; i++) m->data[i] = (char *)full + m->tt.t[i].offset;
    }
    return ST_OK;
}

void fsdp_full_end(Fsdp *f, int scatter) {
    Model *m = f->m;
    if (f->full) {
        if (scatter)
            for (int u = 0; u <= f->L; u++) block_copy(f, u, f->full, 1);
        m->be->free(m->be, f->full);
    }
    f->full = NULL;
    m->params = NULL;
    for (int i = 0; i < m->tt.n; i++) m->data[i] = NULL;
    f->layer_at = -1;
    f->rest_ok = 0;
}

void fsdp_for_pieces(const Fsdp *f, void (*fn)(void *ctx, const TensorInfo *t, size_t elem, size_t at, size_t len),
                     void *ctx) {
    const TensorTable *tt = &f->m->tt;
    for (int i = 0; i < tt->n; i++) {
        const FsdpUnit *x = &f->u[f->unit_of[i]];
        size_t a = MAX(f->upos[i], x->lo), b = MIN(f->upos[i] + tt->t[i].numel, x->hi);
        if (a < b) fn(ctx, &tt->t[i], a - f->upos[i], x->at + (a - x->lo), b - a);
    }
}

Status fsdp_gather_flat(Fsdp *f, float *full_host, const float *shard, Err *e) {
    Backend *be = f->m->be;
    const TensorTable *tt = &f->m->tt;
    int root = f->d->rank == 0, lead = root && full_host;  // replicas of the writer's rank pass NULL
    Status st = ST_OK;
    for (int u = 0; u <= f->L && st == ST_OK; u++) {
        const FsdpUnit *x = &f->u[u];
        size_t k = x->hi - x->lo;
        float *block = xmalloc(MAX(k, 1) * sizeof(float)), *unit = root ? xmalloc(MAX(x->n, 1) * sizeof(float)) : NULL;
        if (k) be->download(be, block, shard + x->at, k * sizeof(float));
        st = dist_gather_host_f(f->d, unit, block, x->counts, e);
        for (int i = 0; i < tt->n && st == ST_OK && lead; i++)
            if (f->unit_of[i] == u) memcpy(full_host + tt->t[i].goffset, unit + f->upos[i], tt->t[i].numel * sizeof(float));
        free(block);
        free(unit);
    }
    return st;
}

typedef struct ScatterCtx {
    Backend *be;
    float *shard;
    const float *full;
} ScatterCtx;

static void scatter_piece(void *ctx, const TensorInfo *t, size_t elem, size_t at, size_t len) {
    ScatterCtx *c = ctx;
    c->be->upload(c->be, c->shard + at, c->full + t->goffset + elem, len * sizeof(float));
}

void fsdp_scatter_flat(Fsdp *f, float *shard, const float *full_host) {
    Backend *be = f->m->be;
    be->zero(be, shard, MAX(f->n, 1) * sizeof(float));
    ScatterCtx c = {be, shard, full_host};
    fsdp_for_pieces(f, scatter_piece, &c);
}

size_t fsdp_bytes(const Fsdp *f) {
    size_t layer_n = 1, block_n = 1;
    for (int u = 0; u <= f->L; u++) {
        if (u < f->L) layer_n = MAX(layer_n, f->u[u].n);
        block_n = MAX(block_n, f->u[u].hi - f->u[u].lo);
    }
    return (4 * f->n + 2 * layer_n + 2 * f->u[f->L].n + block_n) * sizeof(float);
}
