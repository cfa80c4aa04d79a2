// fsdp.c: sharded parameters, gradients and their gathering around each layer (fsdp.h).
#include "fsdp.h"

#include "../core/alloc.h"
#include "../model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Status fsdp_check_model(const Model *m, Err *e) {
    if (m->lora) {  // a frozen base sharded, the adapter trained whole (fsdp_init)
        if (m->hooks && m->hooks->reduce)
            return err_set(e, ST_EUNSUPPORTED, "--tp_size with --fsdp_size / --zero_stage 3 and an adapter (--use_peft) "
                                               "is not supported yet (LoRA trains under --tp_size with --zero_stage 0, "
                                               "or under FSDP without --tp_size)");
        if (m->matrix_dtype != DT_F32 && m->matrix_dtype != DT_BF16)
            return err_set(e, ST_EUNSUPPORTED, "--zero_stage 3 / --fsdp_size with an adapter needs a float32 or bfloat16 "
                                               "base (got %s; a q8_0 base trains with --zero_stage 0 or 1)",
                           dtype_torch_name(m->matrix_dtype));
        for (int i = 0; i < m->tt.n; i++)
            if (m->tt.t[i].offset % sizeof(float))
                return err_set(e, ST_EUNSUPPORTED, "--zero_stage 3 / --fsdp_size with an adapter: tensor %s starts at "
                                                   "byte %zu of the base, not a multiple of 4 (use --dtype float32)",
                               m->tt.t[i].name, m->tt.t[i].offset);
        return ST_OK;
    }
    if (m->frozen || !m->params || m->matrix_dtype != DT_F32)
        return err_set(e, ST_EUNSUPPORTED, "--zero_stage 3 needs fp32 weights of the model's own (got %s)",
                       dtype_torch_name(m->matrix_dtype));
    return ST_OK;
}

static size_t floats_at(const TensorTable *tt, int i) {  // where entry i starts (the end for i == n)
    return (i < tt->n ? tt->t[i].offset : tt->param_bytes + sizeof(float) - 1) / sizeof(float);
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

// A frozen base: this rank's block of unit u copied into the shard buffer from each tensor's data
// (in place in the checkpoint's mapping or in params), byte by byte (bf16 tensors; the gaps stay zero).
static void block_from_tensors(Fsdp *f, int u) {
    Model *m = f->m;
    Backend *be = m->be;
    const FsdpUnit *x = &f->u[u];
    size_t lo = x->lo * sizeof(float), hi = x->hi * sizeof(float);
    for (int i = 0; i < m->tt.n; i++) {
        if (f->unit_of[i] != u) continue;
        const TensorInfo *t = &m->tt.t[i];
        size_t at = f->upos[i] * sizeof(float), a = MAX(at, lo), b = MIN(at + dtype_bytes(t->dtype, t->numel), hi);
        if (a < b) be->copy(be, (char *)(f->p + x->at) + (a - lo), (const char *)m->data[i] + (a - at), b - a);
    }
}

// The tensors of unit u read from buf and accumulate into gbuf (NULL: unavailable).
static void point(Fsdp *f, int u, float *buf, float *gbuf) {
    Model *m = f->m;
    for (int i = 0; i < m->tt.n; i++) {
        if (f->unit_of[i] != u) continue;
        m->data[i] = buf ? buf + f->upos[i] : NULL;
        if (m->gdata) m->gdata[i] = gbuf ? gbuf + f->upos[i] : NULL;  // a frozen base: none
    }
}

// A collective's failure, kept (the first one) for fsdp_status; later ones are skipped.
static void keep(Fsdp *f, Status st, const Err *e) {
    if (f->st == ST_OK && st != ST_OK) f->st = st, f->err = *e;
}

// Unit u all-gathered into buf: this rank's block copied in, the collective started (r) or, with
// r NULL, completed.
static void gather(Fsdp *f, int u, float *buf, DistReq *r) {
    if (f->st != ST_OK) return;
    Backend *be = f->m->be;
    const FsdpUnit *x = &f->u[u];
    if (x->hi > x->lo) be->copy(be, buf + x->lo, f->p + x->at, (x->hi - x->lo) * sizeof(float));
    Err e;
    Status st = r ? dist_allgather_start(f->d, be, buf, x->counts, r, &e) : dist_allgather(f->d, be, buf, x->counts, &e);
    keep(f, st, &e);
}

// A collective left in flight across the compute that follows: counted, and whether the library
// had it done already (the counters of fsdp_overlap_line).
static void count_started(Fsdp *f, DistReq *r) {
    if (!r->op) return;  // done at the start (one rank: the collective is an identity)
    f->started++;
    if (!dist_test(r)) f->in_flight++;
}

// MPI moves a nonblocking collective on only inside MPI calls, and this runs single-threaded
// (MPI_THREAD_FUNNELED; a progress thread would need MPI_THREAD_MULTIPLE and would take a core
// from the compute): so every hook tests what is in flight, the op boundaries the model offers.
// NCCL needs none of it (its stream runs on), the test only reads an event.
static void progress(Fsdp *f) {
    if (f->ag_slot >= 0) dist_test(&f->ag);
    if (f->rs_slot >= 0) dist_test(&f->rs);
}

static void ag_finish(Fsdp *f) {
    if (f->ag_slot < 0) return;
    Err e;
    Status st = dist_wait(f->d, &f->ag, &e);
    keep(f, st, &e);
    f->ag_slot = -1;
}

// The reduce-scatter in flight completed: its block added to this rank's (after the earlier
// micro-batches'), the slot's working gradient zeroed for its next layer.
static void rs_finish(Fsdp *f) {
    if (f->rs_slot < 0) return;
    Backend *be = f->m->be;
    const FsdpUnit *x = &f->u[f->rs_unit];
    size_t k = x->hi - x->lo;
    Err e;
    Status st = dist_wait(f->d, &f->rs, &e);
    keep(f, st, &e);
    if (f->st == ST_OK && k) be->add(be, f->g + x->at, f->g + x->at, f->tmp, k);
    be->zero(be, f->gwork[f->rs_slot], x->n * sizeof(float));
    f->rs_slot = -1;
}

// Every collective in flight completed (before the parameters change or the buffers are reused).
static void drain(Fsdp *f) {
    ag_finish(f);
    rs_finish(f);
}

static int slot_of(const Fsdp *f, int layer) {
    for (int s = 0; s < f->nslots; s++)
        if (f->held[s] == layer) return s;
    return -1;
}

// Start the gather of `layer` into the slot not in use, unless it is there already or another
// gather is in flight.
static void prefetch(Fsdp *f, int layer) {
    if (layer < 0 || layer >= f->L || f->nslots < 2 || f->st != ST_OK || f->ag_slot >= 0 || slot_of(f, layer) >= 0)
        return;
    int s = f->cur >= 0 ? 1 - f->cur : 0;
    f->held[s] = layer;
    f->ag_slot = s;
    gather(f, layer, f->work[s], &f->ag);
    if (f->st != ST_OK) {
        f->ag_slot = -1;
        return;
    }
    count_started(f, &f->ag);
}

// Another model sharing a frozen base (the reference of an adapter's trainer, peft_base_model):
// its tensors of unit u read from buf, on every call (its pointers are not tracked).
static void point_share(Fsdp *f, Model *s, int u, float *buf) {
    CHECK_MSG(f->frozen && s->tt.n == f->m->tt.n, "a model that is not a share of the frozen base materialized");
    for (int i = 0; i < s->tt.n; i++)
        if (f->unit_of[i] == u) s->data[i] = buf + f->upos[i];
}

static void materialize(void *ctx, Model *m, int layer) {
    Fsdp *f = ctx;
    progress(f);
    if (layer < 0) {
        if (!f->rest_ok) {
            gather(f, f->L, f->rest, NULL);
            point(f, f->L, f->rest, f->grest);
            f->rest_ok = 1;
        }
        if (m != f->m) point_share(f, m, f->L, f->rest);
        f->last = -1;
        if (f->pf.forward) prefetch(f, 0);
        return;
    }
    int dir = layer > f->last ? 1 : -1;  // the forward goes up from the rest; the backward down from its last layer
    f->last = layer;
    int s = slot_of(f, layer);
    if (s < 0 || s != f->cur) {
        if (f->cur >= 0 && f->held[f->cur] >= 0) point(f, f->held[f->cur], NULL, NULL);
        if (s < 0) {  // not prefetched (the first layer, no prefetch, or a wrong guess)
            ag_finish(f);  // a wrong guess completes too: every rank issues the same collectives
            s = f->nslots > 1 && f->cur >= 0 ? 1 - f->cur : 0;
            f->held[s] = layer;
            gather(f, layer, f->work[s], NULL);
        } else if (s == f->ag_slot) {
            ag_finish(f);
        }
        if (s == f->rs_slot) rs_finish(f);  // its gradient buffer is this layer's next
        point(f, layer, f->work[s], f->gwork[s]);
        f->cur = s;
    }
    if (m != f->m) point_share(f, m, layer, f->work[f->cur]);
    if (dir > 0 ? f->pf.forward : f->pf.backward) prefetch(f, layer + dir);
}

// The unit's gradient summed over the FSDP axis into this rank's block (rs_finish); a layer's is
// left in flight under backward prefetch until the next hook that needs its slot or the next
// layer's grads_done, the rest's is completed at once (the optimizer or the next micro-batch is next).
static void grads_done(void *ctx, Model *m, int layer) {
    Fsdp *f = ctx;
    Backend *be = m->be;
    progress(f);
    if (f->frozen) return;  // a frozen base has no gradient
    rs_finish(f);  // the layer above's: one reduce-scatter in flight at a time (one tmp block)
    int u = layer < 0 ? f->L : layer;
    const FsdpUnit *x = &f->u[u];
    if (layer < 0) {
        Err e;
        size_t k = x->hi - x->lo;
        if (f->st == ST_OK) keep(f, dist_reduce_scatter_sum(f->d, be, f->tmp, f->grest, x->counts, &e), &e);
        if (f->st == ST_OK && k) be->add(be, f->g + x->at, f->g + x->at, f->tmp, k);
        be->zero(be, f->grest, x->n * sizeof(float));
        return;
    }
    int s = f->cur;
    CHECK_MSG(s >= 0 && f->held[s] == layer, "layer %d's gradient is done but layer %d is materialized", layer,
              s >= 0 ? f->held[s] : -1);
    if (f->st != ST_OK) {  // skipped: the slot's gradient zeroed as a completed one would be
        be->zero(be, f->gwork[s], x->n * sizeof(float));
        return;
    }
    Err e;
    f->rs_slot = s, f->rs_unit = layer;
    Status st = dist_reduce_scatter_sum_start(f->d, be, f->tmp, f->gwork[s], x->counts, &f->rs, &e);
    keep(f, st, &e);
    if (st != ST_OK) {
        f->rs_slot = -1;
        be->zero(be, f->gwork[s], x->n * sizeof(float));
        return;
    }
    if (f->pf.backward) count_started(f, &f->rs);
    else rs_finish(f);
}

void fsdp_init(Fsdp *f, Model *m, Dist *d, Dist *dp, FsdpPrefetch pf) {
    memset(f, 0, sizeof *f);
    CHECK(!m->hooks || !m->hooks->materialize);
    CHECK(m->lora || (m->params && m->matrix_dtype == DT_F32));
    f->d = d, f->dp = dp && dp->world > 1 ? dp : NULL, f->m = m;
    f->frozen = m->lora != NULL;
    f->L = m->tt.n_layers;
    f->pf = d->world > 1 ? pf : (FsdpPrefetch){0, 0};  // one rank: the collectives are identities
    f->nslots = f->pf.forward || f->pf.backward ? 2 : 1;
    build_units(f);
    Backend *be = m->be;
    size_t block_n = 1;
    f->layer_n = 1;
    for (int u = 0; u <= f->L; u++) {
        if (u < f->L) f->layer_n = MAX(f->layer_n, f->u[u].n);
        block_n = MAX(block_n, f->u[u].hi - f->u[u].lo);
    }
    f->p = be->alloc(be, MAX(f->n, 1) * sizeof(float));
    if (f->frozen) {
        be->zero(be, f->p, MAX(f->n, 1) * sizeof(float));
        for (int u = 0; u <= f->L; u++) block_from_tensors(f, u);
        if (m->params && !m->shared) be->free(be, m->params);
        if (m->mapping && !m->shared) {  // the pages of the checkpoint read so far go with it
            st_close(m->mapping);
            free(m->mapping);
        }
        m->mapping = NULL;
        m->mapped_bytes = 0;
    } else {
        for (int u = 0; u <= f->L; u++) block_copy(f, u, m->params, 1);
        be->free(be, m->params);
    }
    m->params = NULL;
    for (int s = 0; s < f->nslots; s++) {
        f->work[s] = be->alloc(be, f->layer_n * sizeof(float));
        if (f->frozen) continue;
        f->gwork[s] = be->alloc(be, f->layer_n * sizeof(float));
        be->zero(be, f->gwork[s], f->layer_n * sizeof(float));
    }
    f->held[0] = f->held[1] = -1;
    f->cur = f->last = f->ag_slot = f->rs_slot = -1;
    f->rest = be->alloc(be, MAX(f->u[f->L].n, 1) * sizeof(float));
    if (!f->frozen) {
        f->g = be->alloc(be, MAX(f->n, 1) * sizeof(float));
        f->grest = be->alloc(be, MAX(f->u[f->L].n, 1) * sizeof(float));
        f->tmp = be->alloc(be, block_n * sizeof(float));
        be->zero(be, f->grest, MAX(f->u[f->L].n, 1) * sizeof(float));
        be->zero(be, f->g, MAX(f->n, 1) * sizeof(float));
        m->gdata = xcalloc((size_t)m->tt.n, sizeof(float *));
    }
    for (int i = 0; i < m->tt.n; i++) m->data[i] = NULL;
    f->hooks = (ModelHooks){.ctx = f, .materialize = materialize, .grads_done = grads_done};
    if (m->hooks) f->hooks.reduce = m->hooks->reduce, f->hooks.reduce_ctx = m->hooks->reduce_ctx;  // TP x FSDP
    f->prev = m->hooks;
    m->hooks = &f->hooks;
}

void fsdp_free(Fsdp *f) {
    if (!f->m) return;
    Model *m = f->m;
    Backend *be = m->be;
    drain(f);
    if (f->full) fsdp_full_end(f, 0);
    float *bufs[] = {f->p, f->g, f->work[0], f->gwork[0], f->work[1], f->gwork[1], f->rest, f->grest, f->tmp};
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

void fsdp_zero_grads(Fsdp *f) {
    drain(f);
    if (f->frozen) return;
    f->m->be->zero(f->m->be, f->g, MAX(f->n, 1) * sizeof(float));
}

// No layer held: every slot free, nothing pointed at.
static void forget_layers(Fsdp *f) {
    if (f->cur >= 0 && f->held[f->cur] >= 0) point(f, f->held[f->cur], NULL, NULL);
    f->held[0] = f->held[1] = -1;
    f->cur = f->last = -1;
}

void fsdp_invalidate(Fsdp *f) {
    drain(f);  // a gather still in flight holds the old parameters
    forget_layers(f);
    if (f->rest_ok) point(f, f->L, NULL, NULL);
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
        float *buf = u < f->L ? f->work[0] : f->rest;
        gather(f, u, buf, NULL);
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
    f->held[0] = f->held[1] = -1;
    f->cur = f->last = -1;
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

void fsdp_unit_floats(const TensorTable *tt, size_t *layer_n, size_t *rest_n) {
    size_t *per = xcalloc((size_t)tt->n_layers + 1, sizeof(size_t));
    for (int i = 0; i < tt->n; i++) per[tt->t[i].layer >= 0 ? tt->t[i].layer : tt->n_layers] += floats_at(tt, i + 1) - floats_at(tt, i);
    *layer_n = 0;
    for (int l = 0; l < tt->n_layers; l++) *layer_n = MAX(*layer_n, per[l]);
    *rest_n = per[tt->n_layers];
    free(per);
}

size_t fsdp_work_bytes(size_t layer_n, size_t rest_n, FsdpPrefetch pf, int frozen) {
    size_t slots = pf.forward || pf.backward ? 2 : 1, per = frozen ? 1 : 2;  // a buffer and its gradient
    return (per * slots * layer_n + per * rest_n) * sizeof(float);
}

size_t fsdp_bytes(const Fsdp *f) {
    size_t block_n = 1;
    for (int u = 0; u <= f->L; u++) block_n = MAX(block_n, f->u[u].hi - f->u[u].lo);
    size_t work = fsdp_work_bytes(f->layer_n, f->u[f->L].n, f->pf, f->frozen);
    if (f->frozen) return f->n * sizeof(float) + work;
    return 4 * f->n * sizeof(float) + work + block_n * sizeof(float);
}

void fsdp_overlap_line(const Fsdp *f, char *buf, size_t n) {
    snprintf(buf, n, "FSDP overlap: %ld collectives left in flight across a layer's compute, %ld of them incomplete "
                     "when it began (forward prefetch %s, backward prefetch %s)",
             f->started, f->in_flight, f->pf.forward ? "on" : "off", f->pf.backward ? "backward_pre" : "no_prefetch");
}
