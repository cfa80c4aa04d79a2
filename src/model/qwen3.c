// qwen3.c: Qwen3-family forward and backward (SEMANTICS_MODEL.md §1.2), as a sequence of
// backend ops. Forward keeps what backward needs in the plan; backward mirrors it op by op,
// accumulating parameter gradients into m->grads.
#include "qwen3.h"

#include "../core/alloc.h"
#include "lora.h"
#include "vocab_head.h"

#include <math.h>
#include <string.h>

void qwen3_set_inputs(Model *m, Plan *p, const int32_t *ids, const int32_t *pos, const int32_t *seg,
                      const int32_t *targets, const float *weights) {
    Backend *be = m->be;
    size_t N = (size_t)p->B * p->T;
    be->upload(be, p->ids, ids, N * sizeof(int32_t));
    be->upload(be, p->pos, pos, N * sizeof(int32_t));
    be->upload(be, p->seg, seg, N * sizeof(int32_t));
    if (m->rope_host) {  // longrope: the table of the longest sequence (its real tokens)
        int len = 0;
        for (size_t i = 0; i < N; i++)
            if (seg[i]) len = MAX(len, pos[i] + 1);
        model_rope_select(m, len);
    }
    if (targets) {
        be->upload(be, p->targets, targets, N * sizeof(int32_t));
    } else {
        int32_t *t = xmalloc(N * sizeof(int32_t));
        for (size_t i = 0; i < N; i++) t[i] = IGNORE_INDEX;
        be->upload(be, p->targets, t, N * sizeof(int32_t));
        free(t);
    }
    if (weights) {
        be->upload(be, p->weights, weights, N * sizeof(float));
    } else {
        float *w = xmalloc(N * sizeof(float));
        for (size_t i = 0; i < N; i++) w[i] = 1.0f;
        be->upload(be, p->weights, w, N * sizeof(float));
        free(w);
    }
    lora_set_inputs(m, p);
}

// A fused projection's part: (fused kind, first row) of kind, or TK_COUNT when kind is its own
// tensor. qkv_proj holds q (QD rows), k (KD), v (KD); gate_up_proj holds gate (FF), up (FF).
static TensorKind fused_part(const ModelConfig *cfg, TensorKind kind, int64_t *row0) {
    int64_t QD = (int64_t)cfg->num_attention_heads * cfg->head_dim, KD = (int64_t)cfg->num_key_value_heads * cfg->head_dim;
    *row0 = 0;
    if (cfg->fused_qkv && (kind == TK_WQ || kind == TK_WK || kind == TK_WV)) {
        *row0 = kind == TK_WQ ? 0 : kind == TK_WK ? QD : QD + KD;
        return TK_WQKV;
    }
    if (cfg->fused_gate_up && (kind == TK_WG || kind == TK_WU)) {
        *row0 = kind == TK_WG ? 0 : cfg->intermediate_size;
        return TK_WGU;
    }
    return TK_COUNT;
}

// A tensor as the forward pass uses it: an adapter's saved copy (fp32) replaces the base tensor
// while the adapter is active; a part of a fused projection is its rows of the fused tensor.
static const void *weight(const Model *m, TensorKind kind, int l, DType *dt) {
    int64_t row0;
    TensorKind fk = fused_part(&m->cfg, kind, &row0);
    if (fk != TK_COUNT) {
        if (dt) *dt = m->matrix_dtype;
        const char *base = model_param(m, fk, l);
        return base + dtype_bytes(m->matrix_dtype, (size_t)row0 * m->cfg.hidden_size);
    }
    const float *s = lora_saved_param(m, kind, l);
    if (dt) *dt = s ? DT_F32 : m->matrix_dtype;
    return s ? (const void *)s : model_param(m, kind, l);
}

// Its gradient: NULL for a frozen tensor (the base of a model with an adapter).
static float *grad(const Model *m, TensorKind kind, int l) {
    int64_t row0;
    TensorKind fk = fused_part(&m->cfg, kind, &row0);
    if (fk != TK_COUNT) {
        float *g = m->lora ? NULL : model_grad(m, fk, l);
        return g ? g + (size_t)row0 * m->cfg.hidden_size : NULL;
    }
    return m->lora ? lora_saved_grad(m, kind, l) : model_grad(m, kind, l);
}

// Whether a backward pass has anything to accumulate into.
static int trains(const Model *m) { return m->lora ? m->lora->grads != NULL : (m->grads || m->gdata); }

// The LM head (tied: the embedding), or an adapter's saved lm_head, and its gradient.
static const void *head_weight(const Model *m, DType *dt) {
    const float *s = lora_saved_param(m, TK_LM_HEAD, -1);
    *dt = s ? DT_F32 : m->matrix_dtype;
    return s ? (const void *)s : (const void *)model_data(m, model_lm_head(m));
}

static float *head_grad(const Model *m) {
    if (m->lora) return lora_saved_grad(m, TK_LM_HEAD, -1);
    return model_tensor_grad(m, model_lm_head(m));
}

#define W(kind, l) weight(m, (kind), (l), NULL)
#define F(kind, l) ((const float *)weight(m, (kind), (l), NULL))

// The bias of projection wk (kind wk + 1), or NULL. Tensor parallel: o_proj's and down_proj's
// outputs are partial sums over the group, their whole bias is added once (on its rank 0).
static const float *proj_bias(const Model *m, TensorKind wk, int l) {
    if ((wk == TK_WO || wk == TK_WD) && config_tp_rank(&m->cfg) > 0) return NULL;
    return F(wk + 1, l);
}

// out (N,OC) = inp (N,C) W^T + b for the weight of kind wk (its bias: proj_bias), plus the
// adapter's share when it has one.
static void linear_forward(Model *m, Plan *p, int l, TensorKind wk, float *out, const float *inp, int N, int C,
                           int OC) {
    DType dt;
    const void *w = weight(m, wk, l, &dt);
    m->be->matmul_forward(m->be, out, inp, w, dt, proj_bias(m, wk, l), N, C, OC);
    lora_forward(m, p, l, wk, out, inp, N, C, OC);
}

// linear_forward for count weights that read the same input (q, k, v; gate, up): one pass of
// the backend over all of them where it has matmul_forward_multi (each output the same).
static void linear_forward_multi(Model *m, Plan *p, int l, int count, const TensorKind *wk, float *const *out,
                                 const float *inp, int N, int C, const int *OC) {
    Backend *be = m->be;
    if (!be->matmul_forward_multi) {
        for (int i = 0; i < count; i++) linear_forward(m, p, l, wk[i], out[i], inp, N, C, OC[i]);
        return;
    }
    MatmulPart parts[4] = {{0}};
    CHECK(count >= 1 && count <= 4);
    for (int i = 0; i < count; i++) {
        parts[i] = (MatmulPart){.out = out[i], .bias = proj_bias(m, wk[i], l), .OC = OC[i]};
        parts[i].w = weight(m, wk[i], l, &parts[i].wdt);
    }
    be->matmul_forward_multi(be, parts, count, inp, N, C);
    for (int i = 0; i < count; i++) lora_forward(m, p, l, wk[i], out[i], inp, N, C, OC[i]);
}

// dinp (N,C) += dout W (and the adapter's share); the weight and bias gradients accumulate
// unless frozen.
static void linear_backward(Model *m, Plan *p, int l, TensorKind wk, float *dinp, const float *dout, const float *inp,
                            int N, int C, int OC) {
    DType dt;
    const void *w = weight(m, wk, l, &dt);
    m->be->matmul_backward(m->be, dinp, grad(m, wk, l), grad(m, wk + 1, l), dout, inp, w, dt, N, C, OC);
    lora_backward(m, p, l, wk, dinp, dout, inp, N, C, OC);
}

// The RoPE table of layer l (layer_rope: 0 = rope_theta with its scaling, 1 = the local base).
static const float *rope_table(const Model *m, int l) {
    return m->cfg.layer_rope[l] && m->inv_freq_local ? m->inv_freq_local : m->inv_freq;
}

// What multiplies q after RoPE so that the attention ops' 1/sqrt(HD) becomes cfg.query_scale
// (1 when it is the default).
static float query_mult(const ModelConfig *cfg) {
    if (cfg->query_scale == 0) return 1.0f;
    return (float)(cfg->query_scale * sqrt((double)cfg->head_dim));
}

// RMSNorm with a model norm weight: by (1 + w) for the families that store w that way
// (cfg.norm_plus_one, Gemma), else by w.
static void norm_fwd(Model *m, float *out, float *rstd, const float *inp, const float *w, int N, int C) {
    Backend *be = m->be;
    float eps = (float)m->cfg.rms_norm_eps;
    if (m->cfg.norm_plus_one) be->rmsnorm_forward_off(be, out, rstd, inp, w, 1.0f, N, C, eps);
    else be->rmsnorm_forward(be, out, rstd, inp, w, N, C, eps);
}

static void norm_bwd(Model *m, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                     const float *rstd, int N, int C) {
    Backend *be = m->be;
    if (m->cfg.norm_plus_one) be->rmsnorm_backward_off(be, dinp, dw, dout, inp, w, 1.0f, rstd, N, C);
    else be->rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, N, C);
}

// RMSNorm over the whole q (or k) projection, C of its features here: under tensor parallelism
// the rows' sums of squares are summed over the group (QKNORM_PROJ heads are split).
static void proj_norm_fwd(Model *m, float *out, float *rstd, const float *inp, const float *w, int N, int C) {
    Backend *be = m->be;
    int T = config_tp_size(&m->cfg);
    if (T == 1) {
        norm_fwd(m, out, rstd, inp, w, N, C);
        return;
    }
    be->rmsnorm_part_stat(be, rstd, inp, inp, NULL, N, C);
    model_reduce(m, rstd, (size_t)N);
    be->rmsnorm_part_forward(be, out, rstd, inp, w, rstd, N, C, C * T, (float)m->cfg.rms_norm_eps);
}

// Its backward: the rows' dot of the output gradient, the weights and the input summed over the
// group (dot: N floats of scratch).
static void proj_norm_bwd(Model *m, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          const float *rstd, float *dot, int N, int C) {
    Backend *be = m->be;
    int T = config_tp_size(&m->cfg);
    if (T == 1) {
        norm_bwd(m, dinp, dw, dout, inp, w, rstd, N, C);
        return;
    }
    be->rmsnorm_part_stat(be, dot, dout, inp, w, N, C);
    model_reduce(m, dot, (size_t)N);
    be->rmsnorm_part_backward(be, dinp, dw, dout, inp, w, rstd, dot, N, C, C * T);
}

// The gated MLP's activation: act(gate) * up with the family's act.
static void act_fwd(Model *m, float *out, const float *gate, const float *up, size_t n) {
    if (m->cfg.act == ACT_GELU_TANH) m->be->geglu_forward(m->be, out, gate, up, n);
    else m->be->swiglu_forward(m->be, out, gate, up, n);
}

static void act_bwd(Model *m, float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                    size_t n) {
    if (m->cfg.act == ACT_GELU_TANH) m->be->geglu_backward(m->be, dgate, dup, dout, gate, up, n);
    else m->be->swiglu_backward(m->be, dgate, dup, dout, gate, up, n);
}

// Layer l's attention options: its sliding window, the score soft-cap and the sinks (the query
// scale is applied to q, query_mult).
static AttnOpts layer_opts(const Model *m, int l) {
    const ModelConfig *cfg = &m->cfg;
    AttnOpts o = {cfg->layer_window[l], (float)cfg->attn_softcap, 0.0f, 0, NULL};
    if (cfg->attn_sinks) o.sinks = F(TK_SINKS, l);
    return o;
}

static void attn_fwd(Model *m, Plan *p, LayerActs *a, int l) {
    const ModelConfig *cfg = &m->cfg;
    m->be->attention_forward_opt(m->be, a->att, a->lse, a->qr, a->kr, a->v, p->seg, p->B, p->T,
                                 cfg->num_attention_heads, cfg->num_key_value_heads, cfg->head_dim, layer_opts(m, l));
}

// Final-logit soft-capping of n logits in place (cfg.final_softcap; nothing without one).
static void cap_logits(Model *m, float *logits, size_t n) {
    if (m->cfg.final_softcap > 0) m->be->softcap_forward(m->be, logits, (float)m->cfg.final_softcap, n);
}

// Layer l up to attention over the first N rows of p: the input norm (NORM_PRE_ATTN; else the projections read res_in,
// which a->ln1 aliases), q/k/v projections, q/k norm, RoPE, query scale (a->qr, a->kr, a->v).
static void layer_qkv(Model *m, Plan *p, LayerActs *a, int l, int N) {
    Backend *be = m->be;
    const ModelConfig *cfg = &m->cfg;
    int C = cfg->hidden_size, NH = cfg->num_attention_heads, NKV = cfg->num_key_value_heads;
    int HD = cfg->head_dim, QD = NH * HD, KD = NKV * HD;
    if (cfg->norms & NORM_PRE_ATTN) norm_fwd(m, a->ln1, a->rstd1, a->res_in, F(TK_LN1, l), N, C);
    linear_forward_multi(m, p, l, 3, (const TensorKind[]){TK_WQ, TK_WK, TK_WV}, (float *const[]){a->q, a->k, a->v},
                         a->ln1, N, C, (const int[]){QD, KD, KD});
    if (cfg->qk_norm == QKNORM_HEAD) {
        norm_fwd(m, a->qr, a->rstdq, a->q, F(TK_QN, l), N * NH, HD);
        norm_fwd(m, a->kr, a->rstdk, a->k, F(TK_KN, l), N * NKV, HD);
    } else if (cfg->qk_norm == QKNORM_PROJ) {
        proj_norm_fwd(m, a->qr, a->rstdq, a->q, F(TK_QN, l), N, QD);
        proj_norm_fwd(m, a->kr, a->rstdk, a->k, F(TK_KN, l), N, KD);
    }
    be->rope_forward(be, a->qr, p->pos, rope_table(m, l), m->rope_mscale, N, NH, HD, cfg->rotary_dim);
    be->rope_forward(be, a->kr, p->pos, rope_table(m, l), m->rope_mscale, N, NKV, HD, cfg->rotary_dim);
    float qm = query_mult(cfg);
    if (qm != 1.0f) be->scale(be, a->qr, qm, (size_t)N * QD);
}

// out (N,C) = x + norm(y) for a post-norm of kind nk (rstd (N)), in place of the plain residual add.
static void post_norm_add(Model *m, float *out, float *rstd, const float *y, const float *x, TensorKind nk, int l,
                          int N) {
    Backend *be = m->be;
    int C = m->cfg.hidden_size;
    norm_fwd(m, out, rstd, y, F(nk, l), N, C);
    be->add(be, out, out, x, (size_t)N * C);
}

// Layer l after attention (a->att) over the first N rows: output projection, (post-norm,) residual, (pre-norm,) MLP,
// (post-norm,) residual -> next.
// ---- mixture of experts (moe.h) --------------------------------------------------------------
// The block's dims for N tokens; with --moe_capacity_factor f each expert keeps at most
// ceil(f N K / E) slots (docs/backends.md, fixed-shape dispatch).
static MoeDims moe_dims(const Model *m, int N) {
    const ModelConfig *cfg = &m->cfg;
    MoeDims d = {.N = N, .C = cfg->hidden_size, .E = cfg->num_experts, .K = cfg->num_experts_per_tok,
                 .FF = cfg->moe_intermediate_size, .norm = cfg->norm_topk_prob, .capacity = 0,
                 .fused = cfg->moe_fused, .alpha = (float)cfg->swiglu_alpha, .limit = (float)cfg->swiglu_limit,
                 .P = config_ep_size(cfg), .El = config_local_experts(cfg)};
    if (m->moe_capacity_factor > 0)
        d.capacity = (int)MIN(ceil(m->moe_capacity_factor * N * d.K / d.E), (double)N);
    return d;
}

static void moe_reduce(void *ctx, float *buf, size_t n) { model_reduce(ctx, buf, n); }

// The block's weights, with the adapter's share (ml: its storage) when one is active and, tensor
// parallel, the group's split of every expert (ms: its storage).
static MoeWeights moe_weights(Model *m, Plan *p, int l, MoeLora *ml, MoeSplit *ms) {
    MoeWeights w = {0};
    if (config_tp_size(&m->cfg) > 1) {
        *ms = (MoeSplit){.ctx = m, .reduce = moe_reduce, .lead = config_tp_rank(&m->cfg) == 0};
        w.split = ms;
    }
    w.lora = lora_moe(m, p, l, ml);
    w.ex = m->hooks ? m->hooks->moe_ex : NULL;  // expert parallel (src/train/ep.c)
    w.router = weight(m, TK_ROUTER, l, &w.router_dt);
    w.router_bias = F(TK_ROUTER_B, l);
    if (m->cfg.moe_fused) {  // GPT-OSS: gate_up and down with biases (tensors.h)
        w.gate = weight(m, TK_XGU, l, &w.wdt);
        w.down = weight(m, TK_XD, l, NULL);
        w.gate_bias = F(TK_XGU_B, l);
        w.down_bias = w.split && !w.split->lead ? NULL : F(TK_XD_B, l);  // partial sums: added once
        return w;
    }
    w.gate = weight(m, TK_EXP_G, l, &w.wdt);
    w.up = weight(m, TK_EXP_U, l, NULL);
    w.down = weight(m, TK_EXP_D, l, NULL);
    return w;
}

static MoeGrads moe_grads(const Model *m, int l) {
    if (m->cfg.moe_fused)
        return (MoeGrads){.router = grad(m, TK_ROUTER, l), .router_bias = grad(m, TK_ROUTER_B, l),
                          .gate = grad(m, TK_XGU, l), .down = grad(m, TK_XD, l), .gate_bias = grad(m, TK_XGU_B, l),
                          .down_bias = grad(m, TK_XD_B, l)};
    return (MoeGrads){.router = grad(m, TK_ROUTER, l), .router_bias = grad(m, TK_ROUTER_B, l),
                      .gate = grad(m, TK_EXP_G, l), .up = grad(m, TK_EXP_U, l), .down = grad(m, TK_EXP_D, l)};
}

// The load-balancing loss coefficient of one backward pass (0: none).
static float moe_aux_coef(const Model *m, const Plan *p) {
    return p->moe_aux ? (float)(m->cfg.router_aux_loss_coef * m->moe_aux_scale) : 0.0f;
}

static void layer_out(Model *m, Plan *p, LayerActs *a, int l, float *next, int N) {
    Backend *be = m->be;
    const ModelConfig *cfg = &m->cfg;
    int C = cfg->hidden_size, FF = cfg->intermediate_size;
    int QD = cfg->num_attention_heads * cfg->head_dim;
    if (cfg->norms & NORM_POST_ATTN) {
        linear_forward(m, p, l, TK_WO, a->ao, a->att, N, QD, C);
        model_reduce(m, a->ao, (size_t)N * C);  // tensor parallel: the heads' partial sums
        post_norm_add(m, a->res_mid, a->rstda, a->ao, a->res_in, TK_LNA, l, N);
    } else {
        linear_forward(m, p, l, TK_WO, a->res_mid, a->att, N, QD, C);
        model_reduce(m, a->res_mid, (size_t)N * C);
        be->add(be, a->res_mid, a->res_mid, a->res_in, (size_t)N * C);
    }
    if (cfg->norms & NORM_PRE_MLP) norm_fwd(m, a->ln2, a->rstd2, a->res_mid, F(TK_LN2, l), N, C);
    float *y = (cfg->norms & NORM_POST_MLP) ? a->mo : next;  // the MLP's output
    if (cfg->layer_moe[l]) {
        MoeDims d = moe_dims(m, N);
        MoeLora ml;
        MoeSplit ms;
        MoeWeights w = moe_weights(m, p, l, &ml, &ms);
        moe_block_forward(be, y, a->ln2, &w, &a->moe, &d, p->moe_aux ? p->moe_stats : NULL, p->seg);
        model_reduce(m, y, (size_t)N * C);  // tensor parallel: the experts' columns' partial sums
    } else {
        linear_forward_multi(m, p, l, 2, (const TensorKind[]){TK_WG, TK_WU}, (float *const[]){a->gate, a->up}, a->ln2,
                             N, C, (const int[]){FF, FF});
        act_fwd(m, a->act, a->gate, a->up, (size_t)N * FF);
        linear_forward(m, p, l, TK_WD, y, a->act, N, FF, C);
        model_reduce(m, y, (size_t)N * C);  // tensor parallel: the columns' partial sums
    }
    if (cfg->norms & NORM_POST_MLP) post_norm_add(m, next, a->rstdm, a->mo, a->res_mid, TK_LNF, l, N);
    else be->add(be, next, next, a->res_mid, (size_t)N * C);
}

// The token embeddings of the first N ids of p into out (N,C), times cfg.embed_scale.
static void embed(Model *m, Plan *p, float *out, int N) {
    Backend *be = m->be;
    int C = m->cfg.hidden_size;
    DType edt;
    const void *emb = weight(m, TK_EMBED, -1, &edt);
    if (m->cfg.vocab_part > 0) vocab_embed(m, out, p->ids, N);  // a shard of the vocabulary (tensor parallel)
    else be->embedding_forward(be, out, p->ids, emb, edt, N, C);
    if (m->cfg.embed_scale != 1.0f) be->scale(be, out, m->cfg.embed_scale, (size_t)N * C);
}

void qwen3_forward(Model *m, Plan *p) {
    Backend *be = m->be;
    const ModelConfig *cfg = &m->cfg;
    int B = p->B, T = p->T, N = B * T, C = cfg->hidden_size;
    int L = cfg->num_hidden_layers;

    model_materialize(m, -1);
    embed(m, p, p->layers[0].res_in, N);
    p->moe_aux = p->mode == PLAN_TRAIN && cfg->num_experts > 0 && cfg->output_router_logits;
    if (p->moe_aux) be->zero(be, p->moe_stats, (2 * (size_t)cfg->num_experts + 1) * sizeof(float));
    for (int l = 0; l < L; l++) {
        LayerActs *a = &p->layers[l];
        model_materialize(m, l);
        // In SCORE plans every layer shares one set of buffers: the residual that leaves layer
        // l-1 in res_out is copied into res_in.
        if (l > 0 && p->mode == PLAN_SCORE) be->copy(be, a->res_in, p->res_out, (size_t)N * C * sizeof(float));
        layer_qkv(m, p, a, l, N);
        attn_fwd(m, p, a, l);
        layer_out(m, p, a, l, (l + 1 < L && p->mode == PLAN_TRAIN) ? p->layers[l + 1].res_in : p->res_out, N);
    }
    norm_fwd(m, p->lnf, p->rstdf, p->res_out, F(TK_NORM, -1), N, C);
}

void qwen3_cache_seek(Model *m, Plan *dp, int start, int T) {
    CHECK_MSG(dp->mode == PLAN_DECODE && start >= 0 && start + T <= dp->S, "cache slots [%d, %d) outside [0, %d)",
              start, start + T, dp->S);
    int32_t s = start;
    m->be->upload(m->be, dp->cache_start, &s, sizeof s);
}

// Attention of the chunk in p against rows [row0, row0 + nb) of layer l's cache in dp: a full
// cache (B,NKV,S,HD) is written first and then read (attention_cached_opt, the window applied
// when the layer has one); a sliding layer whose window is shorter than S keeps a ring of W
// slots (plan_cache_slots), read together with the chunk's own keys before the chunk's last W
// are written into it (attention_ring, kv_ring_write), so its memory follows the window.
static void cached_attention(Model *m, Plan *p, Plan *dp, LayerActs *a, int l, int row0, int nb) {
    Backend *be = m->be;
    const ModelConfig *cfg = &m->cfg;
    int T = p->T, S = dp->S, NH = cfg->num_attention_heads, NKV = cfg->num_key_value_heads, HD = cfg->head_dim;
    int slots = plan_cache_slots(cfg, l, S);
    size_t row_cache = (size_t)NKV * slots * HD, off = plan_cache_offset(cfg, l, dp->B, S) + (size_t)row0 * row_cache;
    float *kc = dp->kcache + off, *vc = dp->vcache + off;
    const int32_t *kmask = dp->kmask + (size_t)row0 * S;
    AttnOpts o = layer_opts(m, l);
    if (slots < S) {
        be->attention_ring(be, a->att, a->qr, kc, vc, a->kr, a->v, kmask, dp->cache_start, nb, T, NH, NKV, HD, S, o);
        be->kv_ring_write(be, kc, vc, a->kr, a->v, dp->cache_start, nb, T, NKV, HD, slots);
    } else {
        be->kv_cache_write(be, kc, vc, a->kr, a->v, dp->cache_start, nb, T, NKV, HD, S);
        be->attention_cached_opt(be, a->att, a->qr, kc, vc, kmask, dp->cache_start, nb, T, NH, NKV, HD, S, o);
    }
}

// forward_cached over the first B rows of p (B <= p->B; p is dp itself when B < dp->B): rows
// [0, B) of every layer's cache, of kmask and of the activations; the other rows untouched.
static void forward_cached_rows(Model *m, Plan *p, Plan *dp, int B) {
    Backend *be = m->be;
    const ModelConfig *cfg = &m->cfg;
    int T = p->T, N = B * T, C = cfg->hidden_size, S = dp->S;
    int L = cfg->num_hidden_layers;
    CHECK(dp->mode == PLAN_DECODE && B >= 1 && B <= dp->B && B <= p->B && T <= S);

    model_materialize(m, -1);
    embed(m, p, p->layers[0].res_in, N);
    for (int l = 0; l < L; l++) {
        LayerActs *a = &p->layers[l];  // every layer shares one set of buffers
        model_materialize(m, l);
        if (l > 0) be->copy(be, a->res_in, p->res_out, (size_t)N * C * sizeof(float));
        layer_qkv(m, p, a, l, N);
        cached_attention(m, p, dp, a, l, 0, B);
        layer_out(m, p, a, l, p->res_out, N);
    }
}

void qwen3_forward_cached(Model *m, Plan *p, Plan *dp) {
    CHECK(dp->B == p->B);
    forward_cached_rows(m, p, dp, p->B);
}

// last_logits for the first B rows of p.
static void last_logits_rows(Model *m, Plan *p, Plan *dp, int B) {
    Backend *be = m->be;
    int T = p->T, C = m->cfg.hidden_size;
    const float *h = p->res_out;
    if (T > 1) {  // gather row b's position T-1
        for (int b = 0; b < B; b++)
            be->copy(be, dp->hlast + (size_t)b * C, p->res_out + ((size_t)b * T + T - 1) * C, (size_t)C * sizeof(float));
        h = dp->hlast;
    }
    norm_fwd(m, dp->lnlast, dp->rstdlast, h, F(TK_NORM, -1), B, C);
    DType hdt;
    const void *head = head_weight(m, &hdt);
    int V = config_vocab_rows(&m->cfg);
    be->matmul_forward(be, dp->logits, dp->lnlast, head, hdt, NULL, B, C, V);  // a shard: its columns
    cap_logits(m, dp->logits, (size_t)B * V);
}

void qwen3_last_logits(Model *m, Plan *p, Plan *dp) { last_logits_rows(m, p, dp, p->B); }

void qwen3_forward_cached_row(Model *m, Plan *p, Plan *dp, int row) {
    Backend *be = m->be;
    const ModelConfig *cfg = &m->cfg;
    int T = p->T, C = cfg->hidden_size, S = dp->S, L = cfg->num_hidden_layers;
    CHECK(dp->mode == PLAN_DECODE && p->B == 1 && row >= 0 && row < dp->B && T <= S);
    model_materialize(m, -1);
    embed(m, p, p->layers[0].res_in, T);
    for (int l = 0; l < L; l++) {
        LayerActs *a = &p->layers[l];
        model_materialize(m, l);
        if (l > 0) be->copy(be, a->res_in, p->res_out, (size_t)T * C * sizeof(float));
        layer_qkv(m, p, a, l, T);
        cached_attention(m, p, dp, a, l, row, 1);
        layer_out(m, p, a, l, p->res_out, T);
    }
}

void qwen3_last_logits_row(Model *m, Plan *p, Plan *dp, int row) {
    Backend *be = m->be;
    int T = p->T, C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    CHECK(p->B == 1 && row >= 0 && row < dp->B);
    float *h = dp->hlast + (size_t)row * C;
    be->copy(be, h, p->res_out + (size_t)(T - 1) * C, (size_t)C * sizeof(float));
    norm_fwd(m, dp->lnlast + (size_t)row * C, dp->rstdlast + row, h, F(TK_NORM, -1), 1, C);
    DType hdt;
    const void *head = head_weight(m, &hdt);
    CHECK_MSG(!dp->logits_part, "qwen3_last_logits_row: not on vocabulary shards");
    be->matmul_forward(be, dp->logits + (size_t)row * V, dp->lnlast + (size_t)row * C, head, hdt, NULL, 1, C, V);
    cap_logits(m, dp->logits + (size_t)row * V, (size_t)V);
}

// Run a plan's step: eagerly where the backend has no graph hooks and the first time; recorded
// the second time; replayed from then on. `rows` is the rows of a decode step (p->B: the whole
// plan, key the plan's address; fewer: a power of two, key address + rows, state in bit
// log2(rows) of p->rows_eager / rows_ready).
static void run_recorded_rows(Model *m, Plan *p, int rows, void (*step)(Model *, Plan *, int)) {
    Backend *be = m->be;
    if (m->hooks) {  // sharded weights: collectives between the ops, never recorded
        step(m, p, rows);
        return;
    }
    int whole = rows == p->B, bit = 0;
    while (!whole && (1 << bit) < rows) bit++;
    CHECK(whole || (rows == 1 << bit && bit < 63));
    uint64_t key = (uint64_t)(uintptr_t)p + (whole ? 0 : (uint64_t)rows), mask = (uint64_t)1 << bit;
    int ready = whole ? p->graph_ready : (p->rows_ready & mask) != 0;
    int eager = whole ? p->eager_runs : (p->rows_eager & mask) != 0;
    if (ready && be->graph_launch(be, key)) return;
    if (!be->graph_begin || !eager) {  // the first run sizes every scratch buffer
        step(m, p, rows);
        if (whole) p->eager_runs++;
        else p->rows_eager |= mask;
        return;
    }
    be->graph_begin(be, key);
    step(m, p, rows);
    be->graph_end(be, key);
    if (whole) p->graph_ready = 1;
    else p->rows_ready |= mask;
    m->plans.graphs++;
    CHECK(be->graph_launch(be, key));
}

static void decode_rows(Model *m, Plan *dp, int rows) {
    forward_cached_rows(m, dp, dp, rows);
    last_logits_rows(m, dp, dp, rows);
}

void qwen3_decode_step(Model *m, Plan *dp) {
    CHECK(dp->mode == PLAN_DECODE);
    run_recorded_rows(m, dp, dp->B, decode_rows);
}

void qwen3_decode_step_rows(Model *m, Plan *dp, int rows) {
    CHECK(dp->mode == PLAN_DECODE && rows >= 1 && rows <= dp->B);
    run_recorded_rows(m, dp, rows, decode_rows);
}

static void train_micro(Model *m, Plan *p, int rows) {
    (void)rows;
    qwen3_forward(m, p);
    qwen3_ce_loss(m, p, 1.0f, 1);
}

void qwen3_train_micro(Model *m, Plan *p) {
    CHECK(p->mode == PLAN_TRAIN && trains(m));
    run_recorded_rows(m, p, p->B, train_micro);
}

void qwen3_logits(Model *m, Plan *p, int row0, int nrows, float *out) {
    CHECK_MSG(m->cfg.vocab_part == 0, "qwen3_logits: the model holds a shard of the vocabulary");
    DType hdt;
    const void *head = head_weight(m, &hdt);
    m->be->matmul_forward(m->be, out, p->lnf + (size_t)row0 * m->cfg.hidden_size, head, hdt, NULL, nrows,
                          m->cfg.hidden_size, m->cfg.vocab_size);
    cap_logits(m, out, (size_t)nrows * m->cfg.vocab_size);
}

void qwen3_ce_loss(Model *m, Plan *p, float grad_scale, int backward) {
    Backend *be = m->be;
    int N = p->B * p->T, C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    DType hdt;
    const void *head = head_weight(m, &hdt);
    int bw = backward && p->mode == PLAN_TRAIN && trains(m);
    if (m->cfg.vocab_part > 0) {  // tensor parallel: the group's shards of the vocabulary
        vocab_ce(m, p, head, hdt, bw ? head_grad(m) : NULL, grad_scale, bw);
        if (bw) qwen3_backward_from_lnf(m, p);
        return;
    }
    if (bw) be->zero(be, p->dln, (size_t)N * C * sizeof(float));
    be->ce_head_cap(be, p->row_loss, p->row_correct, p->row_entropy, bw ? p->dln : NULL, bw ? head_grad(m) : NULL,
                    p->lnf, head, hdt, p->targets, p->weights, grad_scale, (float)m->cfg.final_softcap, p->head_scratch,
                    p->head_chunk, N, C, V);
    if (bw) qwen3_backward_from_lnf(m, p);
}

#define G(kind, l) grad(m, (kind), (l))

// Gradient checkpointing: layer l's activations again, from its kept input (bit for bit the
// forward's, the same ops in the same order). The last layer's are still in place.
static void recompute_layer(Model *m, Plan *p, int l) {
    const ModelConfig *cfg = &m->cfg;
    if (!p->ckpt || l == cfg->num_hidden_layers - 1) return;
    LayerActs *a = &p->layers[l];
    layer_qkv(m, p, a, l, p->B * p->T);
    attn_fwd(m, p, a, l);
    int aux = p->moe_aux;  // the statistics are complete: a recomputation adds nothing to them
    p->moe_aux = 0;
    layer_out(m, p, a, l, p->layers[l + 1].res_in, p->B * p->T);  // rewrites the same values
    p->moe_aux = aux;
}

void qwen3_backward_from_lnf(Model *m, Plan *p) {
    Backend *be = m->be;
    const ModelConfig *cfg = &m->cfg;
    int B = p->B, T = p->T, N = B * T, C = cfg->hidden_size, FF = cfg->intermediate_size;
    int NH = cfg->num_attention_heads, NKV = cfg->num_key_value_heads, HD = cfg->head_dim;
    int QD = NH * HD, KD = NKV * HD, L = cfg->num_hidden_layers;
    size_t fs = sizeof(float);

    // final norm: d(res_out) from d(lnf)
    be->zero(be, p->dres, (size_t)N * C * fs);
    norm_bwd(m, p->dres, G(TK_NORM, -1), p->dln, p->res_out, F(TK_NORM, -1), p->rstdf, N, C);
    float qm = query_mult(cfg);
    for (int l = L - 1; l >= 0; l--) {
        LayerActs *a = &p->layers[l];
        model_materialize(m, l);
        recompute_layer(m, p, l);
        // MLP block: out = res_mid + [norm](down(silu(gate(x)) * up(x))), x = [norm](res_mid);
        // dres holds d(out). Without a pre-norm the projections' input gradient goes straight
        // into dres (it is d(res_mid) from here on).
        const float *dmo = p->dres;
        if (cfg->norms & NORM_POST_MLP) {
            be->zero(be, p->dpost, (size_t)N * C * fs);
            norm_bwd(m, p->dpost, G(TK_LNF, l), p->dres, a->mo, F(TK_LNF, l), a->rstdm, N, C);
            dmo = p->dpost;
        }
        // Tensor parallel: a split block's input gradient is a partial sum, kept apart (dln) and
        // all-reduced before it joins the residual's.
        int split = config_tp_size(cfg) > 1;
        float *dx = p->dres;
        if ((cfg->norms & NORM_PRE_MLP) || split) {
            be->zero(be, p->dln, (size_t)N * C * fs);
            dx = p->dln;
        }
        if (cfg->layer_moe[l]) {
            MoeDims d = moe_dims(m, N);
            MoeLora ml;
            MoeSplit ms;
            MoeWeights w = moe_weights(m, p, l, &ml, &ms);
            MoeGrads g = moe_grads(m, l);
            moe_block_backward(be, dx, &g, dmo, a->ln2, &w, &a->moe, &p->moe_scr, &d, p->moe_aux ? p->moe_stats : NULL,
                               moe_aux_coef(m, p), p->seg);
        } else {
            be->zero(be, p->dact, (size_t)N * FF * fs);
            be->zero(be, p->dgate, (size_t)N * FF * fs);
            be->zero(be, p->dup, (size_t)N * FF * fs);
            linear_backward(m, p, l, TK_WD, p->dact, dmo, a->act, N, FF, C);
            act_bwd(m, p->dgate, p->dup, p->dact, a->gate, a->up, (size_t)N * FF);
            linear_backward(m, p, l, TK_WG, dx, p->dgate, a->ln2, N, C, FF);
            linear_backward(m, p, l, TK_WU, dx, p->dup, a->ln2, N, C, FF);
        }
        if (cfg->norms & NORM_PRE_MLP) {
            model_reduce(m, p->dln, (size_t)N * C);  // tensor parallel: every rank's share
            norm_bwd(m, p->dres, G(TK_LN2, l), p->dln, a->res_mid, F(TK_LN2, l), a->rstd2, N, C);
        } else if (split) {
            model_reduce(m, p->dln, (size_t)N * C);
            be->add(be, p->dres, p->dres, p->dln, (size_t)N * C);
        }
        // attention block: res_mid = res_in + [norm](o(attn(rope(qk_norm(q)), rope(qk_norm(k)), v)));
        // dres = d(res_mid).
        be->zero(be, p->datt, (size_t)N * QD * fs);
        be->zero(be, p->dqr, (size_t)N * QD * fs);
        be->zero(be, p->dkr, (size_t)N * KD * fs);
        be->zero(be, p->dv, (size_t)N * KD * fs);
        const float *dao = p->dres;
        if (cfg->norms & NORM_POST_ATTN) {
            be->zero(be, p->dpost, (size_t)N * C * fs);
            norm_bwd(m, p->dpost, G(TK_LNA, l), p->dres, a->ao, F(TK_LNA, l), a->rstda, N, C);
            dao = p->dpost;
        }
        linear_backward(m, p, l, TK_WO, p->datt, dao, a->att, N, QD, C);
        AttnOpts ao = layer_opts(m, l);
        be->attention_backward_opt(be, p->dqr, p->dkr, p->dv, p->datt, a->att, a->lse, a->qr, a->kr, a->v, p->seg, B, T,
                                   NH, NKV, HD, ao);
        float *dsinks = ao.sinks ? G(TK_SINKS, l) : NULL;
        if (dsinks)
            be->attention_sinks_backward(be, dsinks, p->datt, a->att, a->lse, ao.sinks, p->seg, B, T, NH, HD);
        if (qm != 1.0f) be->scale(be, p->dqr, qm, (size_t)N * QD);
        be->rope_backward(be, p->dqr, p->pos, rope_table(m, l), m->rope_mscale, N, NH, HD, cfg->rotary_dim);
        be->rope_backward(be, p->dkr, p->pos, rope_table(m, l), m->rope_mscale, N, NKV, HD, cfg->rotary_dim);
        if (cfg->qk_norm) {
            be->zero(be, p->dq, (size_t)N * QD * fs);
            be->zero(be, p->dk, (size_t)N * KD * fs);
        }
        if (cfg->qk_norm == QKNORM_HEAD) {
            norm_bwd(m, p->dq, G(TK_QN, l), p->dqr, a->q, F(TK_QN, l), a->rstdq, N * NH, HD);
            norm_bwd(m, p->dk, G(TK_KN, l), p->dkr, a->k, F(TK_KN, l), a->rstdk, N * NKV, HD);
        } else if (cfg->qk_norm == QKNORM_PROJ) {
            proj_norm_bwd(m, p->dq, G(TK_QN, l), p->dqr, a->q, F(TK_QN, l), a->rstdq, p->norm_dot, N, QD);
            proj_norm_bwd(m, p->dk, G(TK_KN, l), p->dkr, a->k, F(TK_KN, l), a->rstdk, p->norm_dot, N, KD);
        }
        dx = p->dres;
        if ((cfg->norms & NORM_PRE_ATTN) || split) {
            be->zero(be, p->dln, (size_t)N * C * fs);
            dx = p->dln;
        }
        linear_backward(m, p, l, TK_WQ, dx, p->dq, a->ln1, N, C, QD);
        linear_backward(m, p, l, TK_WK, dx, p->dk, a->ln1, N, C, KD);
        linear_backward(m, p, l, TK_WV, dx, p->dv, a->ln1, N, C, KD);
        if (cfg->norms & NORM_PRE_ATTN) {
            model_reduce(m, p->dln, (size_t)N * C);
            norm_bwd(m, p->dres, G(TK_LN1, l), p->dln, a->res_in, F(TK_LN1, l), a->rstd1, N, C);
        } else if (split) {
            model_reduce(m, p->dln, (size_t)N * C);
            be->add(be, p->dres, p->dres, p->dln, (size_t)N * C);
        }
        model_grads_done(m, l);
    }
    float *demb = G(TK_EMBED, -1);
    if (demb && cfg->embed_scale != 1.0f) be->scale(be, p->dres, cfg->embed_scale, (size_t)N * C);
    if (demb && cfg->vocab_part > 0) vocab_embed_backward(m, demb, p->dres, p->ids, N);
    else if (demb) be->embedding_backward(be, demb, p->dres, p->ids, N, C);
    model_grads_done(m, -1);
}

double qwen3_moe_aux_loss(Model *m, Plan *p) {
    int E = m->cfg.num_experts;
    if (!p->moe_aux || E <= 0) return 0;
    float *st = xmalloc((2 * (size_t)E + 1) * sizeof(float));
    m->be->download(m->be, st, p->moe_stats, (2 * (size_t)E + 1) * sizeof(float));
    double aux = moe_aux_loss(st, E);
    free(st);
    return aux;
}

double qwen3_forward_flops(const ModelConfig *cfg, int B, int T) {
    double N = (double)B * T, C = cfg->hidden_size, FF = cfg->intermediate_size, V = cfg->vocab_size;
    double QD = (double)cfg->num_attention_heads * cfg->head_dim, KD = (double)cfg->num_key_value_heads * cfg->head_dim;
    double per_layer = 2 * N * C * (QD + 2 * KD) + 2 * N * QD * C + 2 * N * C * FF * 3;
    // causal attention: QK^T and PV over T(T+1)/2 pairs per head
    double attn = 2.0 * 2.0 * B * cfg->num_attention_heads * cfg->head_dim * (T * (T + 1.0) / 2.0);
    return cfg->num_hidden_layers * (per_layer + attn) + 2 * N * C * V;
}

// ---- distillation and RL heads ----------------------------------------------------------
void qwen3_logprob_stats(Model *m, Plan *p, float tau, const float *coef, float *out_logp, float *out_stats) {
    Backend *be = m->be;
    int N = p->B * p->T, C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    DType hdt;
    const void *head = head_weight(m, &hdt);
    CHECK_MSG(!coef || (p->mode == PLAN_TRAIN && trains(m)), "qwen3_logprob: a backward pass needs a train plan and "
                                                              "gradients");
    if (m->cfg.vocab_part > 0) {
        vocab_logprob(m, p, head, hdt, coef ? head_grad(m) : NULL, tau, coef, out_logp, out_stats);
        if (coef) qwen3_backward_from_lnf(m, p);
        return;
    }
    if (coef) be->zero(be, p->dln, (size_t)N * C * sizeof(float));
    be->logprob_head_cap(be, out_logp, p->row_entropy, out_stats, coef ? p->dln : NULL, coef ? head_grad(m) : NULL,
                         p->lnf, head, hdt, p->targets, coef, tau, (float)m->cfg.final_softcap, p->head_scratch,
                         p->head_chunk, N, C, V);
    if (coef) qwen3_backward_from_lnf(m, p);
}

void qwen3_logprob(Model *m, Plan *p, float tau, const float *coef, float *out_logp) {
    qwen3_logprob_stats(m, p, tau, coef, out_logp, NULL);
}

void qwen3_distill_loss(Model *m, Plan *p, Model *mt, Plan *pt, float tau, float beta, int top_k, float grad_scale,
                        int backward, float *row_kl) {
    Backend *be = m->be;
    int N = p->B * p->T, C = m->cfg.hidden_size, Ct = mt->cfg.hidden_size, V = m->cfg.vocab_size;
    CHECK_MSG(mt->be == be, "qwen3_distill_loss: student and teacher on different backends");
    CHECK_MSG(pt->B == p->B && pt->T == p->T, "qwen3_distill_loss: teacher plan %dx%d, student plan %dx%d", pt->B,
              pt->T, p->B, p->T);
    CHECK_MSG(mt->cfg.vocab_size == V, "qwen3_distill_loss: teacher vocabulary %d, student %d", mt->cfg.vocab_size, V);
    CHECK(pt->head_chunk == p->head_chunk);  // the same V gives the same chunk
    DType hdt, thdt;
    const void *head = head_weight(m, &hdt), *thead = head_weight(mt, &thdt);
    int bw = backward && p->mode == PLAN_TRAIN && trains(m);
    if (m->cfg.vocab_part > 0) {
        vocab_distill(m, p, head, hdt, bw ? head_grad(m) : NULL, mt, pt, thead, thdt, tau, beta, top_k, grad_scale, bw,
                      row_kl);
        if (bw) qwen3_backward_from_lnf(m, p);
        return;
    }
    if (bw) be->zero(be, p->dln, (size_t)N * C * sizeof(float));
    be->distill_head_cap(be, p->row_loss, row_kl, bw ? p->dln : NULL, bw ? head_grad(m) : NULL, p->lnf, head, hdt,
                         pt->lnf, thead, thdt, p->targets, p->weights, tau, beta, top_k, grad_scale,
                         (float)m->cfg.final_softcap, (float)mt->cfg.final_softcap, p->head_scratch, pt->head_scratch,
                         p->head_chunk, N, C, Ct, V);
    if (bw) qwen3_backward_from_lnf(m, p);
}

// ---- sequence classifiers ------------------------------------------------------------------
void qwen3_cls_pool(const int32_t *ids, const int *lens, int B, int T, int pad_token_id, int32_t *rows) {
    for (int b = 0; b < B; b++) {
        int n = MIN(lens[b], T), last = n > 0 ? n - 1 : 0;
        if (pad_token_id >= 0) {  // argmax of (index * (id != pad)): 0 when no token is a real one
            last = 0;
            for (int t = n - 1; t > 0; t--)
                if (ids[(size_t)b * T + t] != pad_token_id) {
                    last = t;
                    break;
                }
        }
        rows[b] = b * T + last;
    }
}

void qwen3_cls_scores(Model *m, Plan *p, const int32_t *rows, float *scores) {
    Backend *be = m->be;
    int B = p->B, NL = m->cfg.num_labels;
    CHECK_MSG(NL > 0 && p->cls_scores, "qwen3_cls_scores: %s is not a sequence classifier", m->dir ? m->dir : "model");
    be->upload(be, p->pool_rows, rows, (size_t)B * sizeof(int32_t));
    const TensorInfo *t = tensors_get(&m->tt, TK_SCORE, -1);
    be->score_head(be, p->cls_scores, NULL, NULL, p->lnf, model_data(m, t), t->dtype, p->pool_rows, NULL, B,
                   B * p->T, m->cfg.hidden_size, NL);
    if (scores) be->download(be, scores, p->cls_scores, (size_t)B * NL * sizeof(float));
}

void qwen3_cls_backward(Model *m, Plan *p, const float *dscores) {
    Backend *be = m->be;
    int B = p->B, N = B * p->T, C = m->cfg.hidden_size, NL = m->cfg.num_labels;
    CHECK_MSG(NL > 0 && p->mode == PLAN_TRAIN && trains(m) && !m->lora,
              "qwen3_cls_backward: needs a classifier, a train plan and gradients (no adapter)");
    be->upload(be, p->cls_dscores, dscores, (size_t)B * NL * sizeof(float));
    const TensorInfo *t = tensors_get(&m->tt, TK_SCORE, -1);
    be->zero(be, p->dln, (size_t)N * C * sizeof(float));
    // the score head is whole on every rank of a tensor-parallel group (the pooled hidden states
    // are the same there), so d(lnf) is too: no all-reduce; under FSDP its gradient is the rest unit's
    be->score_head(be, NULL, p->dln, model_tensor_grad(m, t), p->lnf, model_data(m, t), t->dtype, p->pool_rows,
                   p->cls_dscores, B, N, C, NL);
    qwen3_backward_from_lnf(m, p);
}
