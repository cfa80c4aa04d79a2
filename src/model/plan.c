// plan.c: laying out a plan's buffers in one arena, and the plan cache.
#include "plan.h"

#include "../core/alloc.h"
#include "../core/log.h"
#include "../core/meminfo.h"
#include "lora.h"
#include "model.h"
#include "vocab_head.h"

#include <string.h>

const char *plan_mode_name(PlanMode mode) {
    switch (mode) {
    case PLAN_TRAIN: return "train";
    case PLAN_SCORE: return "score";
    case PLAN_PREFILL: return "prefill";
    default: return "decode";
    }
}

int plan_ban_cap(int S) { return S + 256; }

int plan_cache_slots(const ModelConfig *cfg, int l, int S) {
    int w = cfg->layer_window[l];
    return w > 0 && w < S ? w : S;
}

size_t plan_cache_offset(const ModelConfig *cfg, int l, int B, int S) {
    size_t off = 0, row = size_mul((size_t)cfg->num_key_value_heads, (size_t)cfg->head_dim);
    for (int i = 0; i < l; i++) off = size_add(off, size_mul(size_mul((size_t)B, row), (size_t)plan_cache_slots(cfg, i, S)));
    return off;
}

size_t plan_cache_floats(const ModelConfig *cfg, int B, int S) {
    return plan_cache_offset(cfg, cfg->num_hidden_layers, B, S);
}

int plan_head_chunk(int V) {
    // About 64 MiB of logits per chunk, between 32 and 256 rows, a multiple of 16. Every chunk's
    // GEMM streams (and a BLAS packs) the whole LM head, so few rows per chunk make the head
    // memory-bound: at V = 151936 a chunk of 27 rows (16 MiB) ran the 103M model's forward head
    // 3-4x slower than 112 rows on the CPU (bench/RESULTS.md).
    long rows = (64L << 20) / 4 / (V > 0 ? V : 1);
    rows = rows / 16 * 16;
    return (int)(rows < 32 ? 32 : rows > 256 ? 256 : rows);
}

// Sizes are size_t products of a bounded config (CONFIG_MAX_*) and a bounded shape (plan_get_shape):
// each fits; only their sum over every layer can pass SIZE_MAX, and the arena saturates there.
#define TAKE_F(n) ((float *)arena_take(a, size_mul((size_t)(n), sizeof(float))))
#define TAKE_I(n) ((int32_t *)arena_take(a, size_mul((size_t)(n), sizeof(int32_t))))

// Which MLPs a set of layer buffers serves: bit 1 the dense MLP, bit 2 the MoE block.
enum { MLP_DENSE = 1, MLP_MOE = 2 };

static int layer_mlps(const ModelConfig *cfg, int l) { return cfg->layer_moe[l] ? MLP_MOE : MLP_DENSE; }

static int any_mlps(const ModelConfig *cfg) {
    int k = 0;
    for (int l = 0; l < cfg->num_hidden_layers; l++) k |= layer_mlps(cfg, l);
    return k;
}

// One MoE block's forward buffers (S = N*K routed slots).
static void moe_layout(Arena *a, MoeActs *ma, const ModelConfig *cfg, size_t N) {
    size_t C = cfg->hidden_size, E = cfg->num_experts, K = cfg->num_experts_per_tok, S = N * K;
    size_t FFE = cfg->moe_intermediate_size;
    ma->logits = TAKE_F(N * E);
    ma->idx = TAKE_I(S);
    ma->w = TAKE_F(S);
    ma->offsets = TAKE_I(E + 1);
    ma->slot_token = TAKE_I(S);
    ma->token_slot = TAKE_I(S);
    ma->dropped = TAKE_I(1);
    ma->xs = TAKE_F(S * C);
    size_t P = (size_t)config_ep_size(cfg), SE = S * P;  // expert parallel: up to every rank's slots
    ma->g = TAKE_F(SE * FFE * (cfg->moe_fused ? 2 : 1));  // fused: gate_up
    ma->u = TAKE_F(SE * FFE);
    ma->h = TAKE_F(SE * FFE);
    ma->ys = TAKE_F(S * C);
    if (P > 1) {
        size_t El = (size_t)config_local_experts(cfg);
        ma->xl = TAKE_F(SE * C);
        ma->yl = TAKE_F(SE * C);
        ma->offl = TAKE_I(El + 1);
        ma->ep_plan = TAKE_I(P * El);
    }
}

static void layer_layout(Arena *a, LayerActs *la, const ModelConfig *cfg, size_t N, int B, int T, int mlps) {
    size_t C = cfg->hidden_size, FF = cfg->intermediate_size;
    size_t QD = (size_t)cfg->num_attention_heads * cfg->head_dim, KD = (size_t)cfg->num_key_value_heads * cfg->head_dim;
    la->res_in = TAKE_F(N * C);
    if (cfg->norms & NORM_PRE_ATTN) {
        la->ln1 = TAKE_F(N * C);
        la->rstd1 = TAKE_F(N);
    } else {  // the projections read the residual itself
        la->ln1 = la->res_in;
        la->rstd1 = NULL;
    }
    la->q = TAKE_F(N * QD);
    la->k = TAKE_F(N * KD);
    la->v = TAKE_F(N * KD);
    if (cfg->qk_norm) {
        int per_head = cfg->qk_norm == QKNORM_HEAD;
        la->qr = TAKE_F(N * QD);
        la->kr = TAKE_F(N * KD);
        la->rstdq = TAKE_F(N * (per_head ? cfg->num_attention_heads : 1));
        la->rstdk = TAKE_F(N * (per_head ? cfg->num_key_value_heads : 1));
    } else {
        la->qr = la->q;
        la->kr = la->k;
        la->rstdq = la->rstdk = NULL;
    }
    la->att = TAKE_F(N * QD);
    la->lse = TAKE_F((size_t)B * cfg->num_attention_heads * T);
    la->ao = (cfg->norms & NORM_POST_ATTN) ? TAKE_F(N * C) : NULL;
    la->rstda = (cfg->norms & NORM_POST_ATTN) ? TAKE_F(N) : NULL;
    la->res_mid = TAKE_F(N * C);
    if (cfg->norms & NORM_PRE_MLP) {
        la->ln2 = TAKE_F(N * C);
        la->rstd2 = TAKE_F(N);
    } else {
        la->ln2 = la->res_mid;
        la->rstd2 = NULL;
    }
    if (mlps & MLP_DENSE) {
        la->gate = TAKE_F(N * FF);
        la->up = TAKE_F(N * FF);
        la->act = TAKE_F(N * FF);
    }
    if (mlps & MLP_MOE) moe_layout(a, &la->moe, cfg, N);
    la->mo = (cfg->norms & NORM_POST_MLP) ? TAKE_F(N * C) : NULL;
    la->rstdm = (cfg->norms & NORM_POST_MLP) ? TAKE_F(N) : NULL;
}

#define TAKE_B(n) ((uint8_t *)arena_take(a, (size_t)(n)))

// PREFILL / DECODE: one layer of activations shared by every layer; DECODE adds the cache, the
// last-position head and the sampler's buffers.
static void plan_layout_cached(Arena *a, Plan *p, const ModelConfig *cfg, PlanMode mode, int B, int T, int S,
                               const Lora *lo) {
    size_t N = (size_t)B * T, C = cfg->hidden_size, V = cfg->vocab_size;
    int L = cfg->num_hidden_layers;
    p->ids = TAKE_I(N);
    p->pos = TAKE_I(N);
    p->seg = TAKE_I(N);
    layer_layout(a, &p->layers[0], cfg, N, B, T, any_mlps(cfg));
    for (int l = 1; l < L; l++) p->layers[l] = p->layers[0];
    p->res_out = TAKE_F(N * C);
    p->mode = mode, p->B = B, p->T = T;
    lora_plan_layout(lo, L, p, a);
    if (mode != PLAN_DECODE) return;
    size_t cache = plan_cache_floats(cfg, B, S);
    p->kcache = TAKE_F(cache);
    p->vcache = TAKE_F(cache);
    p->kmask = TAKE_I((size_t)B * S);
    p->cache_start = TAKE_I(1);
    p->hlast = TAKE_F((size_t)B * C);
    p->lnlast = TAKE_F((size_t)B * C);
    p->rstdlast = TAKE_F(B);
    p->logits = TAKE_F((size_t)B * config_vocab_rows(cfg));  // a vocabulary shard: its columns only
    p->logits_part = cfg->vocab_part > 0 ? p->logits : NULL;
    p->scores = TAKE_F((size_t)B * config_vocab_rows(cfg));
    p->logprob = TAKE_F(B);
    p->logprob_raw = TAKE_F(B);
    p->sparams = (SampleParams *)arena_take(a, (size_t)B * sizeof(SampleParams));
    p->u = (double *)arena_take(a, (size_t)B * sizeof(double));
    p->seen = TAKE_B((size_t)B * V);
    p->ban_cap = plan_ban_cap(S);
    p->banned = TAKE_I((size_t)B * p->ban_cap);
}

// Lay out every buffer; with a->base == NULL this only measures. p->ckpt is set.
static void plan_layout(Arena *a, Plan *p, const ModelConfig *cfg, PlanMode mode, int B, int T, int chunk,
                        const Lora *lo) {
    size_t N = (size_t)B * T, C = cfg->hidden_size, FF = cfg->intermediate_size;
    size_t QD = (size_t)cfg->num_attention_heads * cfg->head_dim, KD = (size_t)cfg->num_key_value_heads * cfg->head_dim;
    int L = cfg->num_hidden_layers;
    p->ids = TAKE_I(N);
    p->pos = TAKE_I(N);
    p->seg = TAKE_I(N);
    p->targets = TAKE_I(N);
    p->weights = TAKE_F(N);
    if (mode == PLAN_TRAIN && !p->ckpt) {
        for (int l = 0; l < L; l++) layer_layout(a, &p->layers[l], cfg, N, B, T, layer_mlps(cfg, l));
    } else if (mode == PLAN_TRAIN) {  // one layer's activations, and every layer's input
        layer_layout(a, &p->layers[0], cfg, N, B, T, any_mlps(cfg));
        for (int l = 1; l < L; l++) {
            p->layers[l] = p->layers[0];
            p->layers[l].res_in = TAKE_F(N * C);
            if (!(cfg->norms & NORM_PRE_ATTN)) p->layers[l].ln1 = p->layers[l].res_in;
        }
    } else {
        layer_layout(a, &p->layers[0], cfg, N, B, T, any_mlps(cfg));
        for (int l = 1; l < L; l++) p->layers[l] = p->layers[0];
    }
    if (cfg->num_experts > 0) p->moe_stats = TAKE_F(2 * (size_t)cfg->num_experts + 1);
    p->res_out = TAKE_F(N * C);
    p->lnf = TAKE_F(N * C);
    p->rstdf = TAKE_F(N);
    p->row_loss = TAKE_F(N);
    p->row_correct = TAKE_F(N);
    p->row_entropy = TAKE_F(N);
    p->head_chunk = chunk;
    if (cfg->num_labels > 0) {  // a score head instead of the LM head
        p->head_scratch = NULL;
        p->pool_rows = TAKE_I(B);
        p->cls_scores = TAKE_F((size_t)B * cfg->num_labels);
        if (mode == PLAN_TRAIN) p->cls_dscores = TAKE_F((size_t)B * cfg->num_labels);
    } else {
        p->head_scratch = TAKE_F((size_t)chunk * (config_vocab_rows(cfg) + C));
        p->vocab_scratch = cfg->vocab_part > 0 ? TAKE_F(vocab_scratch_floats(cfg, chunk)) : NULL;
    }
    if (mode == PLAN_TRAIN) {
        p->dres = TAKE_F(N * C);
        p->dln = TAKE_F(N * C);
        p->dq = TAKE_F(N * QD);
        p->dk = TAKE_F(N * KD);
        p->dv = TAKE_F(N * KD);
        p->dqr = cfg->qk_norm ? TAKE_F(N * QD) : p->dq;
        p->dkr = cfg->qk_norm ? TAKE_F(N * KD) : p->dk;
        p->datt = TAKE_F(N * QD);
        if (any_mlps(cfg) & MLP_DENSE) {
            p->dact = TAKE_F(N * FF);
            p->dgate = TAKE_F(N * FF);
            p->dup = TAKE_F(N * FF);
        }
        p->norm_dot = cfg->qk_norm == QKNORM_PROJ && config_tp_size(cfg) > 1 ? TAKE_F(N) : NULL;
        p->dpost = (cfg->norms & (NORM_POST_ATTN | NORM_POST_MLP)) ? TAKE_F(N * C) : NULL;
        if (any_mlps(cfg) & MLP_MOE) {
            size_t E = cfg->num_experts, S = N * cfg->num_experts_per_tok, FFE = cfg->moe_intermediate_size;
            p->moe_scr.dlogits = TAKE_F(N * E);
            p->moe_scr.dw = TAKE_F(S);
            p->moe_scr.dys = TAKE_F(S * C);
            p->moe_scr.dxs = TAKE_F(S * C);
            size_t SE = S * (size_t)config_ep_size(cfg);
            p->moe_scr.dh = TAKE_F(SE * FFE);
            p->moe_scr.dg = TAKE_F(SE * FFE * (cfg->moe_fused ? 2 : 1));
            p->moe_scr.du = TAKE_F(SE * FFE);
            if (SE > S) {
                p->moe_scr.dyl = TAKE_F(SE * C);
                p->moe_scr.dxl = TAKE_F(SE * C);
            }
        }
    }
    p->mode = mode, p->B = B, p->T = T;
    lora_plan_layout(lo, L, p, a);
}

size_t plan_bytes(const ModelConfig *cfg, PlanMode mode, int B, int T, int head_chunk) {
    return plan_bytes_opts(cfg, mode, B, T, head_chunk, 0, NULL);
}

size_t plan_bytes_opts(const ModelConfig *cfg, PlanMode mode, int B, int T, int head_chunk, int ckpt,
                       const struct Lora *lo) {
    Plan p;
    memset(&p, 0, sizeof p);
    LayerActs *layers = xcalloc((size_t)cfg->num_hidden_layers, sizeof(LayerActs));
    p.layers = layers;
    p.ckpt = mode == PLAN_TRAIN && ckpt;
    Arena a = {0};
    plan_layout(&a, &p, cfg, mode, B, T, head_chunk, lo);
    free(layers);
    return size_mul(size_add(a.size, 63) / 64, 64);
}

static size_t cached_bytes(const ModelConfig *cfg, PlanMode mode, int B, int T, int S, const Lora *lo) {
    Plan p;
    memset(&p, 0, sizeof p);
    LayerActs *layers = xcalloc((size_t)cfg->num_hidden_layers, sizeof(LayerActs));
    p.layers = layers;
    Arena a = {0};
    plan_layout_cached(&a, &p, cfg, mode, B, T, S, lo);
    free(layers);
    return size_mul(size_add(a.size, 63) / 64, 64);
}

size_t plan_bytes_cached(const ModelConfig *cfg, PlanMode mode, int B, int T, int S) {
    return cached_bytes(cfg, mode, B, T, S, NULL);
}

Status plan_get(Model *m, PlanMode mode, int B, int T, Plan **out, Err *e) {
    return plan_get_shape(m, mode, B, T, 0, out, e);
}

static void shape_text(char *buf, size_t cap, PlanMode mode, int B, int T, int S) {
    if (mode == PLAN_DECODE) snprintf(buf, cap, "(%s, B=%d, max_cache_len=%d)", plan_mode_name(mode), B, S);
    else snprintf(buf, cap, "(%s, B=%d, T=%d)", plan_mode_name(mode), B, T);
}

Status plan_get_shape(Model *m, PlanMode mode, int B, int T, int S, Plan **out, Err *e) {
    PlanCache *pc = &m->plans;
    int cached = mode == PLAN_PREFILL || mode == PLAN_DECODE;
    if (mode != PLAN_DECODE) S = 0;
    int ckpt = mode == PLAN_TRAIN && m->grad_ckpt;
    for (int i = 0; i < pc->n; i++) {
        Plan *p = pc->plans[i];
        if (p->mode == mode && p->B == B && p->T == T && p->S == S && p->ckpt == ckpt) {
            *out = p;
            return ST_OK;
        }
    }
    char shape[96];
    shape_text(shape, sizeof shape, mode, B, T, S);
    if (B <= 0 || T <= 0) return err_set(e, ST_EINVAL, "plan shape %s: sizes must be positive", shape);
    // rows B*T (and cache rows B*S) are ints in every op
    if ((int64_t)B * T > PLAN_MAX_ROWS || (int64_t)B * S > PLAN_MAX_ROWS)
        return err_set(e, ST_EINVAL, "plan shape %s: more than %d rows (batch x sequence); use a smaller batch or "
                                     "sequence", shape, PLAN_MAX_ROWS);
    if (mode == PLAN_DECODE && (T != 1 || S <= 0))
        return err_set(e, ST_EINVAL, "plan shape %s: a decode plan has T = 1 and a positive cache length", shape);
    if (pc->max_plans > 0 && pc->n >= pc->max_plans)
        return err_set(e, ST_ERUNTIME,
                       "shape %s needs plan %d but --max_plans is %d; pad to fewer shapes "
                       "(--pad_to_multiple_of, --padding max_length, --max_cache_len) or raise --max_plans",
                       shape, pc->n + 1, pc->max_plans);
    const ModelConfig *cfg = &m->cfg;
    Plan *p = xcalloc(1, sizeof(Plan));
    p->mode = mode;
    p->B = B;
    p->T = T;
    p->S = S;
    p->ckpt = ckpt;
    p->layers = xcalloc((size_t)cfg->num_hidden_layers, sizeof(LayerActs));
    int chunk = plan_head_chunk(cfg->vocab_size);
    size_t bytes = cached ? cached_bytes(cfg, mode, B, T, S, m->lora) : plan_bytes_opts(cfg, mode, B, T, chunk, ckpt, m->lora);
    char what[96];
    snprintf(what, sizeof what, "plan %s B=%d T=%d", plan_mode_name(mode), B, T);
    Status st = bytes == SIZE_MAX ? err_set(e, ST_ENOMEM, "%s: its buffers need more than the address space holds", what)
                                  : mem_check(bytes, m->be->max_memory, what, e);
    if (st != ST_OK) {
        free(p->layers);
        free(p);
        return st;
    }
    p->bytes = bytes;
    p->base = m->be->alloc(m->be, bytes);
    Arena a = {.base = p->base, .size = 0, .cap = bytes};
    if (cached) plan_layout_cached(&a, p, cfg, mode, B, T, S, m->lora);
    else plan_layout(&a, p, cfg, mode, B, T, chunk, m->lora);
    pc->plans = xrealloc(pc->plans, (size_t)(pc->n + 1) * sizeof(Plan *));
    pc->plans[pc->n++] = p;
    pc->bytes += bytes;
    log_debug("plan %d built: %s, %.1f MiB", pc->n, shape, bytes / 1048576.0);
    *out = p;
    return ST_OK;
}

void plan_cache_free(Model *m) {
    PlanCache *pc = &m->plans;
    for (int i = 0; i < pc->n; i++) {
        uint64_t key = (uint64_t)(uintptr_t)pc->plans[i];
        if (pc->plans[i]->graph_ready && m->be->graph_drop) m->be->graph_drop(m->be, key);
        for (int k = 0; k < 63 && m->be->graph_drop; k++)
            if (pc->plans[i]->rows_ready >> k & 1) m->be->graph_drop(m->be, key + ((uint64_t)1 << k));
        m->be->free(m->be, pc->plans[i]->base);
        free(pc->plans[i]->layers);
        free(pc->plans[i]);
    }
    free(pc->plans);
    memset(pc, 0, sizeof *pc);
}
