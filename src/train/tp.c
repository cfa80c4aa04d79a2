// tp.c: a model split over a tensor-parallel group, its all-reduce hook, and the gathered model
// (tp.h).
#include "tp.h"

#include "../core/alloc.h"
#include "../core/log.h"
#include "../model/lora.h"

#include <string.h>

int tp_split_dim(const ModelConfig *c, TensorKind kind) {
    switch (kind) {
    case TK_QN: case TK_KN: return c->qk_norm == QKNORM_PROJ ? 0 : -1;  // over the projection: with its heads
    case TK_WQ: case TK_BQ: case TK_WK: case TK_BK: case TK_WV: case TK_BV:
    case TK_WG: case TK_BG: case TK_WU: case TK_BU: return 0;
    case TK_EMBED: case TK_LM_HEAD: return 0;  // rows: the rank's shard of the vocabulary
    case TK_WQKV: case TK_WGU: return 0;       // rows of each part: [q_t; k_t; v_t], [gate_t; up_t]
    case TK_SINKS: return 0;                   // one per query head
    case TK_EXP_G: case TK_EXP_U: return 0;    // every expert's columns (moe_intermediate_size)
    case TK_XGU: case TK_XGU_B: return 0;      // rows of each expert's block (gate, up interleaved)
    case TK_EXP_D: case TK_XD: return 1;       // the router and down's biases (TK_XD_B) whole
    case TK_WO: case TK_WD: return 1;          // their biases whole, added on rank 0 of the group (qwen3.c)
    default: return -1;
    }
}

int tp_grad_summed(const ModelConfig *c, TensorKind kind) {
    return (kind == TK_QN || kind == TK_KN) && c->qk_norm == QKNORM_HEAD;
}

int tp_tensor_split_dim(const ModelConfig *c, const TensorInfo *t) {
    int dim = tp_split_dim(c, t->kind);
    switch (lora_pair_side(t)) {
    case 'A': return dim == 1 ? 1 : -1;  // (r, in): the columns of o's and down's input
    case 'B': return dim == 0 ? 0 : -1;  // (out, r): the rows of q's, k's, v's, gate's and up's output
    default: return dim;
    }
}

int tp_tensor_grad_summed(const ModelConfig *c, const TensorInfo *t) {
    int side = lora_pair_side(t);
    if (side == 'A') return tp_split_dim(c, t->kind) == 0;  // whole, each rank's output rows' share
    return side == 0 && tp_grad_summed(c, t->kind);
}

Status tp_check_dims(const ModelConfig *c, int T, const char *dir, Err *e) {
    if (!dir) dir = "the model";
    struct { const char *what; int n; } dims[] = {
        {"num_attention_heads", c->num_attention_heads}, {"num_key_value_heads", c->num_key_value_heads},
        {"intermediate_size", c->intermediate_size}, {"vocab_size", c->vocab_size},
        {"moe_intermediate_size", c->num_experts > 0 ? c->moe_intermediate_size : 0}};
    for (size_t i = 0; i < ARRAY_LEN(dims); i++)
        if (dims[i].n % T)
            return err_set(e, ST_EUSAGE, "--tp_size %d: %s %d of %s is not divisible by it (tensor parallelism splits "
                                         "heads, kv-heads, the MLP and the vocabulary evenly)", T, dims[i].what,
                           dims[i].n, dir);
    return ST_OK;
}

// What a config must be to split T ways (dir names the model).
static Status check_config(const ModelConfig *c, int T, const char *dir, Err *e) {
    TRY(tp_check_dims(c, T, dir, e));
    if (c->qk_norm == QKNORM_PROJ && c->norm_plus_one)
        return err_set(e, ST_EUNSUPPORTED, "--tp_size %d: %s has (1 + w) q/k norms over the whole projection; tensor "
                                           "parallelism splits those with plain weights only", T, dir);
    return ST_OK;
}

// What an adapter must be to split: pairs on dense linear layers, no saved copies (n_save: their
// count, names: their names).
static Status check_adapter(unsigned targets, int n_save, const char (*names)[64], int T, Err *e) {
    unsigned moe = 1u << LORA_EXP_GATE | 1u << LORA_EXP_UP | 1u << LORA_EXP_DOWN | 1u << LORA_ROUTER;
    if (targets & moe)
        return err_set(e, ST_EUNSUPPORTED, "--tp_size %d: LoRA on the experts or the router of a mixture of experts "
                                           "(--lora_target_modules all-linear, gate, w1, w2, w3 or the experts' "
                                           "gate_proj up_proj down_proj) is not supported under tensor parallelism; "
                                           "target the attention projections (q_proj k_proj v_proj o_proj)", T);
    if (n_save > 0)
        return err_set(e, ST_EUNSUPPORTED, "--tp_size %d: LoRA with modules to save (--lora_modules_to_save %s) is "
                                           "not supported under tensor parallelism", T, names[0]);
    return ST_OK;
}

// What a model's weights must be to split (or be split).
static Status check_weights(const Model *m, int T, Err *e) {
    if (m->matrix_dtype == DT_Q8_0 && m->cfg.vocab_part == 0) {  // a whole model to split: each rank's rows
        // whole blocks (a part loaded through tp_part was checked by the loader; Q8_0 is never trained)
        for (int i = 0; i < m->tt.n; i++) {
            const TensorInfo *t = &m->tt.t[i];
            if (t->is_matrix && tp_tensor_split_dim(&m->cfg, t) == 1 && (t->shape[1] / T) % Q8_0_BLOCK != 0)
                return err_set(e, ST_EUSAGE, "--tp_size %d: tensor \"%s\" of %s would keep rows of %lld elements on "
                                             "each rank; q8_0 stores rows in blocks of %d (use --dtype float32 or "
                                             "bfloat16, or a --tp_size that leaves whole blocks)", T, t->name,
                               m->dir ? m->dir : "the model", (long long)(t->shape[1] / T), Q8_0_BLOCK);
        }
    }
    return m->lora ? check_adapter(m->lora->cfg.targets, m->lora->cfg.n_save, m->lora->cfg.save, T, e) : ST_OK;
}

Status tp_check_model(const Model *m, int T, Err *e) {
    TRY(check_config(&m->cfg, T, m->dir ? m->dir : "the model", e));
    return check_weights(m, T, e);
}


static void reduce(void *ctx, Model *m, float *buf, size_t n) {
    Tp *tp = ctx;
    if (tp->st == ST_OK) tp->st = dist_allreduce_sum(tp->d, m->be, buf, n, &tp->err);
}

static void gather(void *ctx, Model *m, void *recv, const void *send, size_t nbytes) {
    Tp *tp = ctx;
    (void)m;
    if (tp->st == ST_OK) tp->st = dist_allgather_host(tp->d, recv, send, nbytes, &tp->err);
    if (tp->st != ST_OK) memset(recv, 0, (size_t)tp->d->world * nbytes);  // the caller's sums stay bounded
}

// A copy of bytes: on the backend's device (be), or host memory (be NULL).
static void copy_bytes(Backend *be, void *dst, const void *src, size_t n) {
    if (be) be->copy(be, dst, src, n);
    else memcpy(dst, src, n);
}

// The row blocks of a tensor split by rows, in the local model lc: a fused projection's parts (q,
// k, v; gate, up), GPT-OSS's experts' blocks of gate_up rows (E of them), each split on its own,
// else the one block of the tensor's rows. Returns the count.
static int row_parts(const ModelConfig *lc, const TensorInfo *l, int64_t *rows) {
    int64_t QD = (int64_t)lc->num_attention_heads * lc->head_dim, KD = (int64_t)lc->num_key_value_heads * lc->head_dim;
    if (l->kind == TK_XGU || l->kind == TK_XGU_B) {
        for (int e = 0; e < lc->num_experts; e++) rows[e] = 2 * (int64_t)lc->moe_intermediate_size;
        return lc->num_experts;
    }
    if (l->kind == TK_WQKV) {
        rows[0] = QD, rows[1] = KD, rows[2] = KD;
        return 3;
    }
    if (l->kind == TK_WGU) {
        rows[0] = rows[1] = lc->intermediate_size;
        return 2;
    }
    rows[0] = l->shape[0];
    return 1;
}

// Each run of rank t's part of full tensor f inside local tensor l (same kind) of the local
// model lc: fn(ctx, full_at, part_at, n), in elements, in increasing part_at order. Split by rows:
// of each row block of R local rows, rows [t R, (t+1) R) of the full one; by columns: every row's
// columns [t K, (t+1) K); replicated: the whole tensor.
static void part_runs(const ModelConfig *lc, const TensorInfo *f, const TensorInfo *l, int t,
                      void (*fn)(void *ctx, size_t full_at, size_t part_at, size_t n), void *ctx) {
    int dim = tp_tensor_split_dim(lc, l);
    if (dim < 0) {
        fn(ctx, 0, 0, l->numel);
    } else if (dim == 0) {
        int64_t *rows = xmalloc((size_t)MAX(3, lc->num_experts) * sizeof(int64_t));
        int parts = row_parts(lc, l, rows);
        size_t T = (size_t)(f->shape[0] / l->shape[0]), row = l->numel / (size_t)l->shape[0], at = 0;
        for (int k = 0; k < parts; k++) {
            size_t n = (size_t)rows[k] * row;
            fn(ctx, T * at + (size_t)t * n, at, n);
            at += n;
        }
        free(rows);
        CHECK(at == l->numel);
    } else {
        size_t K = (size_t)l->shape[1], Kf = (size_t)f->shape[1];
        for (int64_t r = 0; r < l->shape[0]; r++) fn(ctx, (size_t)r * Kf + (size_t)t * K, (size_t)r * K, K);
    }
}

typedef struct CopyRuns {
    Backend *be;
    char *full, *local;
    size_t es;  // bytes an element; 0: Q8_0 blocks (runs of whole blocks, dtype_bytes)
    int to_full;
} CopyRuns;

static size_t run_bytes(const CopyRuns *c, size_t n) {
    if (c->es) return n * c->es;
    CHECK(n % Q8_0_BLOCK == 0);
    return dtype_bytes(DT_Q8_0, n);
}

static void copy_run(void *ctx, size_t full_at, size_t part_at, size_t n) {
    CopyRuns *c = ctx;
    char *f = c->full + run_bytes(c, full_at), *l = c->local + run_bytes(c, part_at);
    if (c->to_full) copy_bytes(c->be, f, l, run_bytes(c, n));
    else copy_bytes(c->be, l, f, run_bytes(c, n));
}

// Copy rank t's part of full tensor f into local tensor l (same kind) of the local model lc, or
// back (to_full); elements of es bytes (0: the tensor's dtype, Q8_0 by whole blocks); be NULL:
// host memory.
static void copy_part_es(Backend *be, const ModelConfig *lc, void *full, const TensorInfo *f, void *local,
                         const TensorInfo *l, int t, int to_full, size_t es) {
    CopyRuns c = {be, full, local, es ? es : l->dtype == DT_Q8_0 ? 0 : dtype_size(l->dtype), to_full};
    part_runs(lc, f, l, t, copy_run, &c);
}

static void copy_part(Backend *be, const ModelConfig *lc, void *full, const TensorInfo *f, void *local,
                      const TensorInfo *l, int t, int to_full) {
    copy_part_es(be, lc, full, f, local, l, t, to_full, 0);
}

static Status split_adapter(Model *m, const Lora *w, Err *e);

ModelConfig tp_local_config(const ModelConfig *c, int T, int t) {
    ModelConfig l = *c;
    l.num_attention_heads /= T;
    l.num_key_value_heads /= T;
    l.intermediate_size /= T;
    if (c->num_experts > 0) l.moe_intermediate_size /= T;
    l.vocab_part = c->vocab_size / T;  // vocab_size stays the whole vocabulary (ids, targets)
    l.vocab_lo = t * l.vocab_part;
    return l;  // raw: the full model's fields (what a gathered save writes)
}

static Status part_config(const ModelPart *p, const ModelConfig *whole, const char *dir, ModelConfig *part, Err *e) {
    TRY(check_config(whole, p->T, dir, e));
    *part = tp_local_config(whole, p->T, p->t);
    return ST_OK;
}

static void part_runs_of(const ModelPart *p, const ModelConfig *lc, const TensorInfo *w, const TensorInfo *l,
                         void (*fn)(void *ctx, size_t whole_at, size_t part_at, size_t n), void *ctx) {
    part_runs(lc, w, l, p->t, fn, ctx);
}

const ModelPart *tp_part(ModelPart *p, Dist *world) {
    if (dist_data_axis(world) == world) return NULL;
    const Dist *tp = &world->mesh->tp_axis;
    *p = (ModelPart){.config = part_config, .runs = part_runs_of, .T = tp->world, .t = tp->rank};
    return p;
}

Status tp_shard(Tp *tp, Model **mp, Dist *d, Err *e) {
    Model *m = *mp, *l = m;
    int T = d->world, t = d->rank;
    memset(tp, 0, sizeof *tp);
    if (m->cfg.vocab_part > 0) {  // loaded as this rank's part (tp_part)
        CHECK_MSG(m->cfg.vocab_part * T == m->cfg.vocab_size && m->cfg.vocab_lo == t * m->cfg.vocab_part,
                  "tp_shard: %s holds part [%d, %d) of the vocabulary, not rank %d of %d's", m->dir ? m->dir : "model",
                  m->cfg.vocab_lo, m->cfg.vocab_lo + m->cfg.vocab_part, t, T);
        TRY(check_weights(m, T, e));
    } else {
        TRY(tp_check_model(m, T, e));
        ModelConfig lc = tp_local_config(&m->cfg, T, t);
        l = model_alloc(&lc, m->be, m->matrix_dtype);
        l->dir = m->dir ? xstrdup(m->dir) : NULL;
        l->ckpt_dtype = m->ckpt_dtype;
        l->plans.max_plans = m->plans.max_plans;
        l->grad_ckpt = m->grad_ckpt;
        for (int i = 0; i < l->tt.n; i++) {
            const TensorInfo *lt = &l->tt.t[i], *ft = tensors_find(&m->tt, lt->name);
            CHECK_MSG(ft && ft->kind == lt->kind && ft->dtype == lt->dtype, "tensor %s", lt->name);
            copy_part(m->be, &lc, m->data[ft - m->tt.t], ft, l->data[i], lt, t, 0);
        }
        Status st = m->lora ? split_adapter(l, m->lora, e) : ST_OK;
        model_free(m);
        if (st != ST_OK) {
            model_free(l);
            *mp = NULL;
            return st;
        }
    }
    const ModelConfig *lc = &l->cfg;
    log_info("tensor parallel over %d ranks: each holds %d of %d heads, %d of %d kv-heads, %d of %d MLP columns and "
             "%d of %d vocabulary rows (here [%d, %d))", T, lc->num_attention_heads, T * lc->num_attention_heads,
             lc->num_key_value_heads, T * lc->num_key_value_heads, lc->intermediate_size, T * lc->intermediate_size,
             lc->vocab_part, lc->vocab_size, lc->vocab_lo, lc->vocab_lo + lc->vocab_part);
    if (lc->num_experts > 0)
        log_info("tensor parallel: each holds %d of %d columns of each of the %d experts (the router whole)",
                 lc->moe_intermediate_size, T * lc->moe_intermediate_size, lc->num_experts);
    tp->d = d;
    tp->hooks = (ModelHooks){.reduce = reduce, .gather = gather, .reduce_ctx = tp};
    l->hooks = &tp->hooks;
    *mp = l;
    return ST_OK;
}

static ModelConfig full_config(const ModelConfig *c, int T) {
    ModelConfig f = *c;
    f.num_attention_heads *= T;
    f.num_key_value_heads *= T;
    f.intermediate_size *= T;
    if (c->num_experts > 0) f.moe_intermediate_size *= T;
    f.vocab_part = f.vocab_lo = 0;
    return f;
}

Model *tp_full_model(Tp *tp, const Model *m) {
    ModelConfig fc = full_config(&m->cfg, tp->d->world);
    Model *f = model_alloc(&fc, m->be, DT_F32);
    f->ckpt_dtype = m->ckpt_dtype, f->dir = m->dir ? xstrdup(m->dir) : NULL;
    return f;
}

// ---- adapters -------------------------------------------------------------------------------
// An adapter of a part is made, loaded and saved whole: attached to (or read into, or gathered
// into) a shell of the whole model (its config and table, no weights), so its draws, checks and
// file are one process's, and split into each rank's part (part_runs: tp_tensor_split_dim).

static int tp_of(const Model *m) { return m->cfg.vocab_part > 0 ? m->cfg.vocab_size / m->cfg.vocab_part : 1; }

// The whole model of part m with its tensor table but no weights (model_free frees it).
static Model *shell_of(const Model *m) {
    Model *s = xcalloc(1, sizeof(Model));
    s->cfg = full_config(&m->cfg, tp_of(m));
    s->cfg.raw = m->cfg.raw ? cJSON_Duplicate(m->cfg.raw, 1) : NULL;
    s->be = m->be;
    s->dir = m->dir ? xstrdup(m->dir) : NULL;
    s->matrix_dtype = m->matrix_dtype, s->ckpt_dtype = m->ckpt_dtype;
    tensors_build(&s->tt, &s->cfg, m->matrix_dtype);
    s->frozen = s->shared = 1;  // nothing of its own to free but the table
    return s;
}

static int same_pair(void *ctx, int layer, int mod) { return ((const Lora *)ctx)->ab[layer * LORA_N_MODULES + mod] >= 0; }

// The shell of part m holding the whole adapter of m's (its pairs; values uninitialised).
static Status whole_adapter(const Model *m, Model **out, Err *e) {
    Model *s = shell_of(m);
    Status st = lora_new(s, &m->lora->cfg, same_pair, m->lora, &s->lora, e);
    if (st != ST_OK) {
        model_free(s);
        return st;
    }
    *out = s;
    return ST_OK;
}

// Attach this rank's part of whole adapter w (of the whole model) to part m.
static Status split_adapter(Model *m, const Lora *w, Err *e) {
    Lora *lo;
    TRY(lora_new(m, &w->cfg, same_pair, (void *)w, &lo, e));
    for (int i = 0; i < lo->tt.n; i++) {
        const TensorInfo *lt = &lo->tt.t[i], *ft = tensors_find(&w->tt, lt->name);
        CHECK_MSG(ft, "adapter tensor %s: not in the whole adapter", lt->name);
        copy_part_es(m->be, &m->cfg, (char *)w->params + ft->offset, ft, (char *)lo->params + lt->offset, lt,
                     config_tp_rank(&m->cfg), 0, sizeof(float));
    }
    lo->seed = w->seed, lo->enabled = w->enabled, lo->step = w->step, lo->calls = w->calls;
    plan_cache_free(m);
    m->lora = lo;
    return ST_OK;
}

// Make the adapter on a shell of part m (make: lora_attach or lora_load of it), check it and keep
// this rank's part.
static Status adapter_on_shell(Model *m, Status (*make)(Model *s, const void *arg, Err *e), const void *arg, Err *e) {
    Model *s = shell_of(m);
    Status st = make(s, arg, e);
    if (st == ST_OK) st = check_weights(m, tp_of(m), e);
    if (st == ST_OK) st = check_adapter(s->lora->cfg.targets, s->lora->cfg.n_save, s->lora->cfg.save, tp_of(m), e);
    if (st == ST_OK) st = split_adapter(m, s->lora, e);
    model_free(s);
    return st;
}

typedef struct AttachArgs {
    const LoraConfig *c;
    uint64_t seed;
} AttachArgs;

static Status attach_whole(Model *s, const void *arg, Err *e) {
    const AttachArgs *a = arg;
    return lora_attach(s, a->c, a->seed, e);
}

static Status load_whole(Model *s, const void *arg, Err *e) { return lora_load(s, arg, e); }

Status tp_lora_attach(Model *m, const LoraConfig *c, uint64_t seed, Err *e) {
    if (m->cfg.vocab_part == 0) return lora_attach(m, c, seed, e);
    // saved copies are filled from the base weights, which a shell has not
    TRY(check_adapter(0, c->n_save, c->save, tp_of(m), e));
    AttachArgs a = {c, seed};
    return adapter_on_shell(m, attach_whole, &a, e);
}

Status tp_lora_load(Model *m, const char *dir, Err *e) {
    if (m->cfg.vocab_part == 0) return lora_load(m, dir, e);
    return adapter_on_shell(m, load_whole, dir, e);
}

// The whole model's table of what trains in part m: its tensors' (built into own), or its
// adapter's (of *shell, whole_adapter; NULL without one).
static Status whole_table(const Model *m, TensorTable *own, Model **shell, const TensorTable **out, Err *e) {
    *shell = NULL;
    if (m->lora) {
        TRY(whole_adapter(m, shell, e));
        *out = &(*shell)->lora->tt;
        return ST_OK;
    }
    ModelConfig fc = full_config(&m->cfg, tp_of(m));
    tensors_build(own, &fc, DT_F32);
    *out = own;
    return ST_OK;
}

static void whole_table_free(TensorTable *own, Model *shell) {
    if (shell) model_free(shell);
    else tensors_free(own);
}

Status tp_load_checkpoint(Tp *tp, const char *dir, Model *m, float *opt_m, float *opt_v, TrainState *s, Err *e) {
    TensorTable own;
    const TensorTable *wt;
    Model *shell;
    TRY(whole_table(m, &own, &shell, &wt, e));
    ModelPart part = {.config = part_config, .runs = part_runs_of, .T = tp->d->world, .t = tp->d->rank};
    Status st = checkpoint_load_part(dir, m, &part, wt, opt_m, opt_v, s, e);
    whole_table_free(&own, shell);
    return st;
}

Status tp_gather_flat(Tp *tp, const Model *m, float *full, const float *local, Err *e) {
    Dist *d = tp->d;
    int T = d->world, root = d->rank == 0;
    TensorTable own;
    const TensorTable *ft, *lt_all = model_trainable(m).tt;
    Model *shell;
    TRY(whole_table(m, &own, &shell, &ft, e));
    size_t *counts = xmalloc((size_t)T * sizeof(size_t));
    Status st = ST_OK;
    for (int i = 0; i < lt_all->n && st == ST_OK; i++) {
        const TensorInfo *lt = &lt_all->t[i], *f = tensors_find(ft, lt->name);
        size_t n = lt->numel;
        for (int r = 0; r < T; r++) counts[r] = n;
        float *all = root ? xmalloc((size_t)T * n * sizeof(float)) : NULL;
        st = dist_gather_host_f(d, all, local + lt->goffset, counts, e);
        for (int r = 0; st == ST_OK && root && r < (tp_tensor_split_dim(&m->cfg, lt) < 0 ? 1 : T); r++)
            copy_part_es(NULL, &m->cfg, full + f->goffset, f, all + (size_t)r * n, lt, r, 1, sizeof(float));
        free(all);
    }
    free(counts);
    whole_table_free(&own, shell);
    return st;
}

// Collective over the group: local tensor lt (device data at local) of every rank into whole
// tensor ft (device data at whole) on its rank 0 (ft, whole NULL on the others).
static Status gather_tensor(Tp *tp, const Model *m, const TensorInfo *lt, const void *local, const TensorInfo *ft,
                            void *whole, Err *e) {
    Dist *d = tp->d;
    int T = d->world, root = d->rank == 0;
    Backend *be = m->be;
    size_t n = lt->numel, *counts = xmalloc((size_t)T * sizeof(size_t));
    for (int r = 0; r < T; r++) counts[r] = n;
    float *h = xmalloc(n * sizeof(float)), *all = root ? xmalloc((size_t)T * n * sizeof(float)) : NULL;
    be->download(be, h, local, n * sizeof(float));
    Status st = dist_gather_host_f(d, all, h, counts, e);
    if (st == ST_OK && root) {  // rank r's part from its block, through a device stage
        float *stage = be->alloc(be, n * sizeof(float));
        for (int r = 0; r < (tp_tensor_split_dim(&m->cfg, lt) < 0 ? 1 : T); r++) {
            be->upload(be, stage, all + (size_t)r * n, n * sizeof(float));
            copy_part(be, &m->cfg, whole, ft, stage, lt, r, 1);
        }
        be->free(be, stage);
    }
    free(h);
    free(all);
    free(counts);
    return st;
}

Status tp_gather(Tp *tp, const Model *m, Model **full, Err *e) {
    int root = tp->d->rank == 0;
    *full = NULL;
    CHECK_MSG(m->lora || m->matrix_dtype == DT_F32, "tp_gather: fp32 weights only");
    Model *f = NULL;
    Status st = ST_OK;
    if (root) st = m->lora ? whole_adapter(m, &f, e) : (f = tp_full_model(tp, m), ST_OK);
    st = dist_agree(tp->d, st, e);
    const Lora *lo = m->lora;
    const TensorTable *lt_all = lo ? &lo->tt : &m->tt, *ft_all = f ? (lo ? &f->lora->tt : &f->tt) : NULL;
    for (int i = 0; i < lt_all->n && st == ST_OK; i++) {
        const TensorInfo *lt = &lt_all->t[i], *ft = ft_all ? tensors_find(ft_all, lt->name) : NULL;
        const void *local = lo ? (const char *)lo->params + lt->offset : m->data[i];
        void *whole = ft ? (lo ? (char *)f->lora->params + ft->offset : f->data[ft - f->tt.t]) : NULL;
        st = gather_tensor(tp, m, lt, local, ft, whole, e);
    }
    if (st != ST_OK) {
        model_free(f);
        return st;
    }
    if (f && lo) f->lora->seed = lo->seed;
    *full = f;
    return ST_OK;
}

Status tp_status(Tp *tp, Err *e) {
    if (tp->st != ST_OK) *e = tp->err;
    return tp->st;
}

void tp_free(Tp *tp, Model *m) {
    if (m && m->hooks == &tp->hooks) m->hooks = NULL;
    memset(tp, 0, sizeof *tp);
}
