// lora.c: the adapter's tensor table, PEFT's initialisation, and the hooks the model code calls
// around each linear layer (forward: out += scale * B A dropout(x); backward: the adapter's input
// gradient and its lora_A / lora_B gradients).
#include "lora.h"

#include "../backend/dropout_math.h"
#include "../core/alloc.h"
#include "../core/log.h"
#include "../core/rng.h"
#include "family.h"
#include "moe.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

// The experts' and router's entries hold Qwen3-MoE's names; lora_module_leaf / lora_module_path_of
// give the family's.
static const char *module_names[LORA_N_MODULES] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                   "down_proj", "gate_proj", "up_proj", "down_proj", "gate"};
static const char *module_paths[LORA_N_MODULES] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                   "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                                   "mlp.down_proj", "mlp.experts.%d.gate_proj", "mlp.experts.%d.up_proj",
                                                   "mlp.experts.%d.down_proj", "mlp.gate"};
static const TensorKind module_kinds[LORA_N_MODULES] = {TK_WQ, TK_WK, TK_WV, TK_WO, TK_WG, TK_WU,
                                                        TK_WD, TK_EXP_G, TK_EXP_U, TK_EXP_D, TK_ROUTER};

const char *lora_module_name(LoraModule mod) { return module_names[mod]; }
TensorKind lora_module_kind(LoraModule mod) { return module_kinds[mod]; }
const char *lora_module_path(LoraModule mod) { return module_paths[mod]; }

static int is_expert_module(int mod) { return mod >= LORA_EXP_GATE && mod <= LORA_EXP_DOWN; }

void lora_module_path_of(const ModelConfig *cfg, LoraModule mod, int expert, char *buf, size_t cap) {
    if (mod < LORA_N_DENSE) {
        snprintf(buf, cap, "%s", module_paths[mod]);
        return;
    }
    char fmt[96];
    snprintf(fmt, sizeof fmt, "%s", family_tensor_suffix(cfg->family, module_kinds[mod]));
    char *w = strstr(fmt, ".weight");
    if (w) *w = 0;
    if (is_expert_module(mod)) snprintf(buf, cap, fmt, expert);
    else snprintf(buf, cap, "%s", fmt);
}

void lora_module_leaf(const ModelConfig *cfg, LoraModule mod, char *buf, size_t cap) {
    char path[96];
    lora_module_path_of(cfg, mod, 0, path, sizeof path);
    const char *dot = strrchr(path, '.');
    snprintf(buf, cap, "%s", dot ? dot + 1 : path);
}

static int module_of_kind(TensorKind k) {
    for (int i = 0; i < LORA_N_MODULES; i++)
        if (module_kinds[i] == k) return i;
    return -1;
}

// Split "a b,c" into words; fn(word) for each. Returns the first failing status.
static Status each_word(const char *text, Status (*fn)(const char *w, LoraConfig *c, Err *e), LoraConfig *c, Err *e) {
    const char *s = text;
    while (s && *s) {
        while (*s && (isspace((unsigned char)*s) || *s == ',' || *s == '[' || *s == ']' || *s == '"' || *s == '\''))
            s++;
        const char *w = s;
        while (*s && !isspace((unsigned char)*s) && *s != ',' && *s != ']' && *s != '"' && *s != '\'') s++;
        if (s == w) continue;
        char word[96];
        if ((size_t)(s - w) >= sizeof word) return err_set(e, ST_EINVAL, "module name '%.*s...' is too long", 40, w);
        memcpy(word, w, (size_t)(s - w));
        word[s - w] = 0;
        TRY(fn(word, c, e));
    }
    return ST_OK;
}

// Names of the experts' and routers' linear layers in the families that have them (matched
// against the model's own once it is known: build_table).
static const char *const moe_names[] = {"gate", "w1", "w2", "w3"};

static Status add_target(const char *w, LoraConfig *c, Err *e) {
    if (!strcmp(w, "all-linear")) {
        c->targets = (1u << LORA_N_DENSE) - 1;
        c->all_linear = 1;
        return ST_OK;
    }
    int known = 0;
    for (int i = 0; i < LORA_N_DENSE; i++)
        if (!strcmp(w, module_names[i]) || !strcmp(w, module_paths[i])) c->targets |= 1u << i, known = 1;
    for (size_t i = 0; i < ARRAY_LEN(moe_names); i++) known |= !strcmp(w, moe_names[i]);
    if (!known)
        return err_set(e, ST_EINVAL, "--lora_target_modules: '%s' is no linear layer of the supported families "
                                     "(expected all-linear or names of q_proj k_proj v_proj o_proj gate_proj up_proj "
                                     "down_proj, and for mixtures of experts gate (the router), w1 w2 w3 (Mixtral))", w);
    if (c->n_words >= LORA_MAX_WORDS) return err_set(e, ST_EINVAL, "--lora_target_modules: more than %d names", LORA_MAX_WORDS);
    if (strlen(w) >= sizeof c->words[0]) return err_set(e, ST_EINVAL, "--lora_target_modules: '%s' is too long", w);
    strcpy(c->words[c->n_words++], w);
    return ST_OK;
}

Status lora_parse_targets(const char *text, LoraConfig *c, Err *e) {
    c->targets = 0;
    c->all_linear = 0;
    c->n_words = 0;
    TRY(each_word(text, add_target, c, e));
    // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for qwen2, qwen3 and llama (and
    // its q_proj, v_proj for qwen3_moe and mixtral)
    if (!c->targets && !c->n_words) c->targets = (1u << LORA_Q) | (1u << LORA_V);
    return ST_OK;
}

static Status add_save(const char *w, LoraConfig *c, Err *e) {
    if (c->n_save >= LORA_MAX_SAVE) return err_set(e, ST_EINVAL, "--lora_modules_to_save: more than %d modules", LORA_MAX_SAVE);
    if (strlen(w) >= sizeof c->save[0]) return err_set(e, ST_EINVAL, "--lora_modules_to_save: '%s' is too long", w);
    strcpy(c->save[c->n_save++], w);
    return ST_OK;
}

Status lora_parse_modules_to_save(const char *text, LoraConfig *c, Err *e) {
    c->n_save = 0;
    return each_word(text, add_save, c, e);
}

// PEFT's modules_to_save matching (_set_trainable): the module's name ends with the key (so
// "norm" names every *norm module).
static int name_matches(const char *module, const char *key) {
    size_t n = strlen(module), k = strlen(key);
    return n >= k && !strcmp(module + n - k, key);
}

// The module a base tensor belongs to ("model.layers.0.input_layernorm" of
// "model.layers.0.input_layernorm.weight").
static void module_of(const char *tensor, char *out, size_t cap) {
    snprintf(out, cap, "%s", tensor);
    char *dot = strrchr(out, '.');
    if (dot) *dot = 0;
}

// An fp32 entry of the adapter's table with its own weight-decay flag.
static void add_entry(TensorTable *tt, const char *name, TensorKind kind, int layer, int64_t d0, int64_t d1,
                      int decay) {
    tensors_append(tt, name, kind, layer, d0, d1, DT_F32)->decay = decay;
}

// The adapter's table: a lora_A / lora_B pair per (layer, targeted module) for which has_pair
// says yes (NULL: every one), then the saved copies.
typedef int (*PairFilter)(void *ctx, int layer, int mod);

// Whether the adapter targets mod: its bit (a dense name, or the file's pairs), or for the experts
// and the router all-linear or a target name equal to the module's last name part (PEFT's match).
static int targeted(const Lora *lo, const ModelConfig *cfg, int mod) {
    if (lo->cfg.targets & (1u << mod)) return 1;
    if (mod < LORA_N_DENSE) return 0;
    // GPT-OSS keeps its experts as parameters of one module (no nn.Linear per expert) and routes
    // through a router module that is no nn.Linear either: PEFT's LoRA layers (and all-linear)
    // never reach them (its target_parameters is not implemented here)
    if (cfg->moe_fused) return 0;
    if (lo->cfg.all_linear) return 1;
    char leaf[64];
    lora_module_leaf(cfg, (LoraModule)mod, leaf, sizeof leaf);
    for (int i = 0; i < lo->cfg.n_words; i++)
        if (!strcmp(lo->cfg.words[i], leaf)) return 1;
    return 0;
}

// The pair(s) of (layer l, module mod): lora_A (r, in) and lora_B (out, r); for the experts a run
// of E lora_A then a run of E lora_B, each run contiguous (packed).
static void add_pairs(Lora *lo, const ModelConfig *cfg, const TensorInfo *w, int l, int mod) {
    TensorTable *tt = &lo->tt;
    int r = lo->cfg.r, E = is_expert_module(mod) ? cfg->num_experts : 1;
    lo->ab[l * LORA_N_MODULES + mod] = tt->n;
    for (int ab = 0; ab < 2; ab++) {
        for (int x = 0; x < E; x++) {
            char path[96], name[160];
            lora_module_path_of(cfg, (LoraModule)mod, x, path, sizeof path);
            snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight", l, path, ab ? 'B' : 'A');
            if (ab == 0) add_entry(tt, name, module_kinds[mod], l, r, w->shape[1], 1);
            else add_entry(tt, name, module_kinds[mod], l, w->shape[0], r, 1);
            tt->packing = E > 1;
        }
        tt->packing = 0;
    }
    lo->max_in = MAX(lo->max_in, (int)w->shape[1]);
    lo->max_out = MAX(lo->max_out, (int)w->shape[0]);
    if (is_expert_module(mod)) lo->slot_rows = MAX(lo->slot_rows, cfg->num_experts_per_tok);
}

static Status build_table(Lora *lo, const Model *m, PairFilter has_pair, void *ctx, Err *e) {
    const ModelConfig *cfg = &m->cfg;
    int L = cfg->num_hidden_layers;
    TensorTable *tt = &lo->tt;
    memset(tt, 0, sizeof *tt);
    tt->n_layers = L;
    size_t per_layer = 2 * (LORA_N_MODULES + 3 * (size_t)cfg->num_experts);
    tt->t = xcalloc((size_t)L * per_layer + (size_t)m->tt.n + 1, sizeof(TensorInfo));
    tt->index = xmalloc((size_t)(L + 1) * TK_COUNT * sizeof(int));
    for (int i = 0; i < (L + 1) * TK_COUNT; i++) tt->index[i] = -1;
    lo->ab = xmalloc((size_t)L * LORA_N_MODULES * sizeof(int));
    lo->n_experts = cfg->num_experts;
    lo->slot_rows = 1;
    unsigned found = 0;  // modules present in the model and targeted
    for (int l = 0; l < L; l++)
        for (int mod = 0; mod < LORA_N_MODULES; mod++) {
            lo->ab[l * LORA_N_MODULES + mod] = -1;
            const TensorInfo *w = tensors_get(&m->tt, module_kinds[mod], l);
            if (!w || !targeted(lo, cfg, mod)) continue;
            found |= 1u << mod;
            if (has_pair && !has_pair(ctx, l, mod)) continue;
            add_pairs(lo, cfg, w, l, mod);
        }
    // PEFT adapts what matches and fails only when nothing does (the caller's "no tensors"); a name
    // that matches nothing here is worth a warning
    for (int i = 0; i < lo->cfg.n_words; i++) {
        int hit = 0;
        for (int mod = 0; mod < LORA_N_MODULES && !hit; mod++) {
            char leaf[64];
            lora_module_leaf(cfg, (LoraModule)mod, leaf, sizeof leaf);
            hit = (found & (1u << mod)) && (!strcmp(lo->cfg.words[i], leaf) || !strcmp(lo->cfg.words[i], module_paths[mod]));
        }
        if (!hit) log_warn("lora: target module '%s' matches no linear layer of this %s model", lo->cfg.words[i],
                           cfg->model_type);
    }
    lo->cfg.targets = found;
    // modules to save: every base tensor of a matching module (the LM head by that name even when
    // tied to the embedding, as transformers' lm_head module is)
    int used[LORA_MAX_SAVE] = {0};
    for (int i = 0; i <= m->tt.n; i++) {
        const TensorInfo *b = i < m->tt.n ? &m->tt.t[i] : NULL;
        if (!b && (!cfg->tie_word_embeddings)) break;
        const char *bname = b ? b->name : "lm_head.weight";
        char module[96];
        module_of(bname, module, sizeof module);
        for (int s = 0; s < lo->cfg.n_save; s++) {
            if (!name_matches(module, lo->cfg.save[s])) continue;
            used[s] = 1;
            TensorKind kind = b ? b->kind : TK_LM_HEAD;
            if (b && module_of_kind(kind) >= 0 && (lo->cfg.targets & (1u << module_of_kind(kind))))
                return err_set(e, ST_EINVAL, "--lora_modules_to_save %s: %s is also a LoRA target module",
                               lo->cfg.save[s], module);
            const TensorInfo *src = b ? b : tensors_get(&m->tt, TK_EMBED, -1);
            char name[128];
            snprintf(name, sizeof name, "base_model.model.%s", bname);
            int row = kind < TK_FIRST_LAYER_KIND ? L : (b ? b->layer : L);
            tt->index[(size_t)row * TK_COUNT + kind] = tt->n;
            add_entry(tt, name, kind, b ? b->layer : -1, src->shape[0], src->ndim == 2 ? src->shape[1] : 0,
                      src->decay);
            break;
        }
    }
    for (int s = 0; s < lo->cfg.n_save; s++)
        if (!used[s])
            return err_set(e, ST_EINVAL, "--lora_modules_to_save: '%s' names no module of this model (e.g. lm_head, "
                                         "embed_tokens, norm, input_layernorm)", lo->cfg.save[s]);
    tt->param_bytes = (tt->param_bytes + 63) / 64 * 64;
    return ST_OK;
}

static void lora_free(Lora *lo, Backend *be) {
    if (!lo) return;
    if (lo->params) be->free(be, lo->params);
    if (lo->grads) be->free(be, lo->grads);
    tensors_free(&lo->tt);
    free(lo->ab);
    free(lo);
}

void lora_detach(Model *m) {
    if (!m->lora) return;
    plan_cache_free(m);  // plans carry the adapter's buffers
    lora_free(m->lora, m->be);
    m->lora = NULL;
}

// A new adapter with its table and a zeroed buffer (no values yet).
Status lora_new(Model *m, const LoraConfig *c, int (*has_pair)(void *, int, int), void *ctx, Lora **out, Err *e) {
    if (c->r <= 0) return err_set(e, ST_EINVAL, "--lora_r must be positive (got %d)", c->r);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return err_set(e, ST_EINVAL, "--lora_dropout must be in [0, 1) (got %g)", c->dropout);
    if (m->lora) return err_set(e, ST_EINVAL, "the model already has an adapter");
    if (m->cfg.fused_qkv || m->cfg.fused_gate_up)
        return err_set(e, ST_EUNSUPPORTED, "LoRA on %s (fused qkv_proj / gate_up_proj) is not supported",
                       m->cfg.model_type);
    Lora *lo = xcalloc(1, sizeof(Lora));
    lo->cfg = *c;
    lo->scale = (float)(c->use_rslora ? c->alpha / sqrt((double)c->r) : c->alpha / c->r);
    lo->enabled = 1;
    if (m->cfg.vocab_part > 0) lo->tp = m->cfg.vocab_size / m->cfg.vocab_part, lo->tp_rank = config_tp_rank(&m->cfg);
    else lo->tp = 1;
    Status st = build_table(lo, m, has_pair, ctx, e);
    if (st == ST_OK && lo->tt.n == 0) st = err_set(e, ST_EINVAL, "the adapter has no tensors");
    if (st != ST_OK) {
        lora_free(lo, m->be);
        return st;
    }
    lo->params = m->be->alloc(m->be, lo->tt.param_bytes);
    *out = lo;
    return ST_OK;
}

// The base tensor a saved copy replaces (the embedding for a tied LM head).
const TensorInfo *lora_saved_base(const Model *m, const TensorInfo *t) {
    if (t->kind == TK_LM_HEAD) return model_lm_head(m);
    return tensors_get(&m->tt, t->kind, t->layer);
}

// Copy the base tensors of the saved modules into the adapter (as fp32).
void lora_copy_saved(Model *m, Lora *lo) {
    Backend *be = m->be;
    for (int i = 0; i < lo->tt.n; i++) {
        const TensorInfo *t = &lo->tt.t[i];
        if (strstr(t->name, ".lora_A.") || strstr(t->name, ".lora_B.")) continue;
        const TensorInfo *b = lora_saved_base(m, t);
        size_t bytes = dtype_bytes(b->dtype, b->numel);
        void *h = xmalloc(bytes);
        float *f = xmalloc(b->numel * sizeof(float));
        be->download(be, h, model_data(m, b), bytes);
        dtype_convert(f, DT_F32, h, b->dtype, b->numel);
        be->upload(be, (char *)lo->params + t->offset, f, b->numel * sizeof(float));
        free(h);
        free(f);
    }
}

Status lora_attach(Model *m, const LoraConfig *c, uint64_t seed, Err *e) {
    Lora *lo;
    TRY(lora_new(m, c, NULL, NULL, &lo, e));
    Backend *be = m->be;
    // lora_A: nn.init.kaiming_uniform_(a=sqrt(5)) on (r, in): gain sqrt(2 / (1 + 5)), bound
    // gain * sqrt(3 / fan_in) = 1 / sqrt(in). lora_B: zeros (the buffer starts zeroed).
    for (int i = 0; i < lo->tt.n; i++) {
        const TensorInfo *t = &lo->tt.t[i];
        if (!strstr(t->name, ".lora_A.")) continue;
        Rng rng;
        rng_init(&rng, seed, 0x10a0000u + (uint64_t)i);
        float bound = (float)(1.0 / sqrt((double)t->shape[1]));
        float *h = xmalloc(t->numel * sizeof(float));
        for (size_t k = 0; k < t->numel; k++) h[k] = (2.0f * rng_uniform(&rng) - 1.0f) * bound;
        be->upload(be, (char *)lo->params + t->offset, h, t->numel * sizeof(float));
        free(h);
    }
    lora_copy_saved(m, lo);
    lo->seed = seed;
    plan_cache_free(m);
    m->lora = lo;
    return ST_OK;
}

void lora_alloc_grads(Lora *lo, Backend *be) {
    if (!lo->grads) lo->grads = be->alloc(be, lo->tt.n_params * sizeof(float));
}

size_t lora_n_params(const Lora *lo) { return lo->tt.n_params; }

int lora_pair_side(const TensorInfo *t) { return strstr(t->name, ".lora_A.") ? 'A' : strstr(t->name, ".lora_B.") ? 'B' : 0; }

// ---- hooks ---------------------------------------------------------------------------------

int lora_active(const Model *m) { return m->lora && m->lora->enabled; }

float *lora_saved_param(const Model *m, TensorKind kind, int layer) {
    if (!lora_active(m)) return NULL;
    const TensorInfo *t = tensors_get(&m->lora->tt, kind, layer);
    return t ? (float *)((char *)m->lora->params + t->offset) : NULL;
}

float *lora_saved_grad(const Model *m, TensorKind kind, int layer) {
    if (!lora_active(m) || !m->lora->grads) return NULL;
    const TensorInfo *t = tensors_get(&m->lora->tt, kind, layer);
    return t ? m->lora->grads + t->goffset : NULL;
}

// Inner activations of (layer, module): TRAIN plans keep one (N, r) block per pair (one layer's
// worth with gradient checkpointing, recomputed), other plans one block.
static float *inner(const Lora *lo, const Plan *p, int l, int mod) {
    size_t N = (size_t)p->B * p->T * lo->slot_rows, r = (size_t)lo->cfg.r;  // experts: a row per routed slot
    size_t slot = p->mode == PLAN_TRAIN && !p->ckpt ? (size_t)l * LORA_N_MODULES + mod : (size_t)mod;
    return p->lora_u + slot * N * r;
}

static int dropping(const Lora *lo, const Plan *p) { return lo->cfg.dropout > 0 && p->mode == PLAN_TRAIN && lo->grads; }

static uint64_t salt(int l, int mod) { return (uint64_t)l * LORA_N_MODULES + (uint64_t)mod + 1; }

// Tensor parallel: o_proj and down_proj read the rank's columns of their input (lora_A split with
// them), their output a partial sum over the group.
static int row_split(const Lora *lo, int mod) { return lo->tp > 1 && (mod == LORA_O || mod == LORA_DOWN); }

// Whether the plan carries a key per row for o's and down's inputs after the pass's key (N each):
// tensor parallel training with dropout.
static int row_keys(const Lora *lo, const Plan *p) { return lo->tp > 1 && lo->cfg.dropout > 0 && p->mode == PLAN_TRAIN; }

// out (N,C) = dropout of inp (N,C) with the mask of (layer l, module mod); out may alias inp. A
// rank's columns of a split input (row_split) take the whole input's mask, a row at a time from
// the row's key (lora_set_inputs).
static void drop(const Lora *lo, Backend *be, const Plan *p, int l, int mod, float *out, const float *inp, int N,
                 int C) {
    float pr = (float)lo->cfg.dropout;
    if (!row_split(lo, mod)) {
        be->dropout(be, out, inp, (size_t)N * C, pr, p->lora_key, salt(l, mod));
        return;
    }
    const uint64_t *keys = p->lora_key + 1 + (mod == LORA_O ? 0 : N);
    for (int n = 0; n < N; n++)
        be->dropout(be, out + (size_t)n * C, inp + (size_t)n * C, (size_t)C, pr, keys + n, salt(l, mod));
}

void lora_forward(Model *m, Plan *p, int l, TensorKind wk, float *out, const float *inp, int N, int C, int OC) {
    Lora *lo = m->lora;
    if (!lora_active(m)) return;
    int mod = module_of_kind(wk), k = lo->ab[l * LORA_N_MODULES + mod], r = lo->cfg.r;
    if (k < 0) return;
    Backend *be = m->be;
    const float *A = (const float *)((char *)lo->params + lo->tt.t[k].offset);      // (r, C)
    const float *Bm = (const float *)((char *)lo->params + lo->tt.t[k + 1].offset); // (OC, r)
    const float *x = inp;
    if (dropping(lo, p)) {
        drop(lo, be, p, l, mod, p->lora_x, inp, N, C);
        x = p->lora_x;
    }
    float *u = inner(lo, p, l, mod);  // (N, r) = scale * x A^T
    be->matmul_forward(be, u, x, A, DT_F32, NULL, N, C, r);
    be->scale(be, u, lo->scale, (size_t)N * r);
    if (row_split(lo, mod)) {  // the columns' partial sums of u, whole on every rank; B's output added once
        model_reduce(m, u, (size_t)N * r);
        if (lo->tp_rank > 0) return;
    }
    be->matmul_forward(be, p->lora_t, u, Bm, DT_F32, NULL, N, r, OC);
    be->add(be, out, out, p->lora_t, (size_t)N * OC);
}

void lora_backward(Model *m, Plan *p, int l, TensorKind wk, float *dinp, const float *dout, const float *inp, int N,
                   int C, int OC) {
    Lora *lo = m->lora;
    if (!lora_active(m)) return;
    int mod = module_of_kind(wk), k = lo->ab[l * LORA_N_MODULES + mod], r = lo->cfg.r;
    if (k < 0) return;
    Backend *be = m->be;
    const float *A = (const float *)((char *)lo->params + lo->tt.t[k].offset);
    const float *Bm = (const float *)((char *)lo->params + lo->tt.t[k + 1].offset);
    float *dA = lo->grads ? lo->grads + lo->tt.t[k].goffset : NULL;
    float *dB = lo->grads ? lo->grads + lo->tt.t[k + 1].goffset : NULL;
    size_t fs = sizeof(float);
    // out += u B^T with u = scale * x A^T: du = dout B, dB += dout^T u
    be->zero(be, p->lora_du, (size_t)N * r * fs);
    be->matmul_backward(be, p->lora_du, dB, NULL, dout, inner(lo, p, l, mod), Bm, DT_F32, N, r, OC);
    be->scale(be, p->lora_du, lo->scale, (size_t)N * r);
    if (!dropping(lo, p)) {
        be->matmul_backward(be, dinp, dA, NULL, p->lora_du, inp, A, DT_F32, N, C, r);
        return;
    }
    // through the dropout: the same mask regenerated for x and applied to the input gradient
    drop(lo, be, p, l, mod, p->lora_x, inp, N, C);
    be->zero(be, p->lora_dx, (size_t)N * C * fs);
    be->matmul_backward(be, p->lora_dx, dA, NULL, p->lora_du, p->lora_x, A, DT_F32, N, C, r);
    if (dinp) {
        drop(lo, be, p, l, mod, p->lora_dx, p->lora_dx, N, C);
        be->add(be, dinp, dinp, p->lora_dx, (size_t)N * C);
    }
}

const struct MoeLora *lora_moe(Model *m, Plan *p, int l, struct MoeLora *out) {
    Lora *lo = m->lora;
    if (!lora_active(m)) return NULL;
    static const int mods[MOE_LORA_N] = {LORA_EXP_GATE, LORA_EXP_UP, LORA_EXP_DOWN, LORA_ROUTER};
    memset(out, 0, sizeof *out);
    int any = 0;
    for (int i = 0; i < MOE_LORA_N; i++) {
        int k = lo->ab[l * LORA_N_MODULES + mods[i]];
        if (k < 0) continue;
        int kb = k + (i == MOE_LORA_ROUTER ? 1 : lo->n_experts);  // the lora_B (run)
        out->A[i] = (const float *)((char *)lo->params + lo->tt.t[k].offset);
        out->B[i] = (const float *)((char *)lo->params + lo->tt.t[kb].offset);
        out->dA[i] = lo->grads ? lo->grads + lo->tt.t[k].goffset : NULL;
        out->dB[i] = lo->grads ? lo->grads + lo->tt.t[kb].goffset : NULL;
        out->u[i] = inner(lo, p, l, mods[i]);
        out->salt[i] = salt(l, mods[i]);
        any = 1;
    }
    if (!any) return NULL;
    out->r = lo->cfg.r;
    out->scale = lo->scale;
    out->t = p->lora_t;
    out->du = p->lora_du;
    out->dropout = dropping(lo, p) ? (float)lo->cfg.dropout : 0.0f;
    out->key = p->lora_key;
    out->xd = p->lora_x;
    out->dxd = p->lora_dx;
    return out;
}

// ---- plan buffers --------------------------------------------------------------------------

void lora_plan_layout(const Lora *lo, int L, Plan *p, Arena *a) {
    if (!lo) return;
    size_t N = (size_t)p->B * p->T * lo->slot_rows, r = (size_t)lo->cfg.r;  // rows: tokens, or routed slots
    size_t slots = p->mode == PLAN_TRAIN && !p->ckpt ? (size_t)L * LORA_N_MODULES : LORA_N_MODULES;
    p->lora_u = arena_take(a, slots * N * r * sizeof(float));
    p->lora_t = arena_take(a, N * (size_t)lo->max_out * sizeof(float));
    p->lora_key = arena_take(a, (row_keys(lo, p) ? 1 + 2 * N : 1) * sizeof(uint64_t));
    if (p->mode != PLAN_TRAIN) return;
    p->lora_du = arena_take(a, N * r * sizeof(float));
    if (lo->cfg.dropout > 0) {
        p->lora_x = arena_take(a, N * (size_t)lo->max_in * sizeof(float));
        p->lora_dx = arena_take(a, N * (size_t)lo->max_in * sizeof(float));
    }
}

void lora_set_inputs(Model *m, Plan *p) {
    Lora *lo = m->lora;
    if (!lo || !p->lora_key) return;
    // keyed by (seed, step, this process's call): the same masks whatever the thread count, backend
    // or resume point (every rank counts its own calls, as every process of a transformers run
    // draws from the same set_seed stream)
    uint64_t key = rng_keyed_uniform(lo->seed, 0x10d0u, (uint32_t)lo->step, (uint32_t)lo->calls, 0) * 0x1p53;
    lo->calls++;
    if (!row_keys(lo, p)) {
        m->be->upload(m->be, p->lora_key, &key, sizeof key);
        return;
    }
    // tensor parallel: row n of o's (down's) input holds columns [t K, (t+1) K) of the whole
    // input's T K, whose element (n, t K + c) is element (n T + t) K + c of the whole buffer
    size_t N = (size_t)p->B * p->T, T = (size_t)lo->tp, t = (size_t)lo->tp_rank;
    size_t K[2] = {(size_t)m->cfg.num_attention_heads * m->cfg.head_dim, (size_t)m->cfg.intermediate_size};
    uint64_t *keys = xmalloc((1 + 2 * N) * sizeof(uint64_t));
    keys[0] = key;
    for (int j = 0; j < 2; j++)
        for (size_t n = 0; n < N; n++) keys[1 + j * N + n] = dropout_key_at(key, (n * T + t) * K[j]);
    m->be->upload(m->be, p->lora_key, keys, (1 + 2 * N) * sizeof(uint64_t));
    free(keys);
}
