// model.c: loading, initialising and saving a model's parameters.
#include "model.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../core/meminfo.h"
#include "../core/rng.h"
#include "gguf_model.h"
#include "lora.h"
#include "safetensors.h"

#include <string.h>

void *model_data(const Model *m, const TensorInfo *t) { return m->data[t - m->tt.t]; }

void *model_param(const Model *m, TensorKind kind, int layer) {
    const TensorInfo *t = tensors_get(&m->tt, kind, layer);
    return t ? model_data(m, t) : NULL;
}

float *model_tensor_grad(const Model *m, const TensorInfo *t) {
    if (!t) return NULL;
    if (m->gdata) return m->gdata[t - m->tt.t];
    return m->grads ? m->grads + t->goffset : NULL;
}

float *model_grad(const Model *m, TensorKind kind, int layer) {
    return model_tensor_grad(m, tensors_get(&m->tt, kind, layer));
}

void model_materialize(Model *m, int layer) {
    const ModelHooks *h = m->hooks ? m->hooks : m->share_of ? m->share_of->hooks : NULL;
    if (h && h->materialize) h->materialize(h->ctx, m, layer);
}

void model_grads_done(Model *m, int layer) {
    if (m->hooks && m->hooks->grads_done) m->hooks->grads_done(m->hooks->ctx, m, layer);
}

int model_rope_select(Model *m, int len) {
    if (!m->rope_host) return 0;
    int want = config_rope_long(&m->cfg, len);
    if (want == m->rope_long) return 0;
    size_t half = (size_t)m->cfg.rotary_dim / 2;
    m->be->upload(m->be, m->inv_freq, m->rope_host + (want ? half : 0), half * sizeof(float));
    m->rope_long = want;
    return 1;
}

void model_reduce(Model *m, float *buf, size_t n) {
    if (m->hooks && m->hooks->reduce) m->hooks->reduce(m->hooks->reduce_ctx, m, buf, n);
}

void model_gather(Model *m, void *recv, const void *send, size_t nbytes) {
    if (m->hooks && m->hooks->gather) m->hooks->gather(m->hooks->reduce_ctx, m, recv, send, nbytes);
    else memmove(recv, send, nbytes);
}

const TensorInfo *model_lm_head(const Model *m) {
    const TensorInfo *t = tensors_get(&m->tt, TK_LM_HEAD, -1);
    return t ? t : tensors_get(&m->tt, TK_EMBED, -1);
}

// A model with its table; params allocated unless `mapped` says which tensors (flags (tt.n),
// 1 = data set by the caller) are used in place, then only the others get room in params.
static Model *model_new_mapped(const ModelConfig *cfg, Backend *be, DType matrix_dtype, const uint8_t *mapped) {
    Model *m = xcalloc(1, sizeof(Model));
    m->cfg = *cfg;
    m->be = be;
    m->matrix_dtype = matrix_dtype;
    m->ckpt_dtype = matrix_dtype;
    tensors_build(&m->tt, cfg, matrix_dtype);
    m->data = xcalloc((size_t)m->tt.n, sizeof(void *));
    if (!mapped) {
        m->params = be->alloc(be, m->tt.param_bytes);
        for (int i = 0; i < m->tt.n; i++) m->data[i] = (char *)m->params + m->tt.t[i].offset;
    } else {
        // copied tensors 64-byte aligned, except packed expert runs (tensors.h), which are never
        // mapped and stay contiguous
        size_t bytes = 0;
        for (int i = 0; i < m->tt.n; i++)
            if (!mapped[i]) {
                if (!m->tt.t[i].packed) bytes = (bytes + 63) / 64 * 64;
                bytes += dtype_bytes(m->tt.t[i].dtype, m->tt.t[i].numel);
            }
        bytes = (bytes + 63) / 64 * 64;
        m->params = bytes ? be->alloc(be, bytes) : NULL;
        bytes = 0;
        for (int i = 0; i < m->tt.n; i++)
            if (!mapped[i]) {
                if (!m->tt.t[i].packed) bytes = (bytes + 63) / 64 * 64;
                m->data[i] = (char *)m->params + bytes;
                bytes += dtype_bytes(m->tt.t[i].dtype, m->tt.t[i].numel);
            }
    }
    int half = cfg->rotary_dim / 2;
    float *inv = xmalloc((size_t)half * sizeof(float));
    config_rope_inv_freq(cfg, inv, &m->rope_mscale);
    m->inv_freq = be->alloc(be, (size_t)half * sizeof(float));
    be->upload(be, m->inv_freq, inv, (size_t)half * sizeof(float));
    if (cfg->rope_scaling.type == ROPE_LONGROPE) {  // both tables on the host for model_rope_select
        m->rope_host = xmalloc((size_t)2 * half * sizeof(float));
        memcpy(m->rope_host, inv, (size_t)half * sizeof(float));
        config_rope_long_inv_freq(cfg, m->rope_host + half);
    }
    if (cfg->rope_local_theta > 0) {  // the sliding layers' RoPE (layer_rope)
        config_rope_local_inv_freq(cfg, inv);
        m->inv_freq_local = be->alloc(be, (size_t)half * sizeof(float));
        be->upload(be, m->inv_freq_local, inv, (size_t)half * sizeof(float));
    }
    free(inv);
    return m;
}

static Model *model_new(const ModelConfig *cfg, Backend *be, DType matrix_dtype) {
    return model_new_mapped(cfg, be, matrix_dtype, NULL);
}

Model *model_alloc(const ModelConfig *cfg, Backend *be, DType matrix_dtype) {
    Model *m = model_new(cfg, be, matrix_dtype);
    m->cfg.raw = cfg->raw ? cJSON_Duplicate(cfg->raw, 1) : NULL;
    return m;
}

void model_alloc_grads(Model *m) {
    if (m->lora) {  // only the adapter trains (the base may be frozen)
        lora_alloc_grads(m->lora, m->be);
        return;
    }
    CHECK_MSG(!m->frozen, "model_alloc_grads on a frozen model (loaded by model_load_frozen)");
    if (!m->grads) m->grads = m->be->alloc(m->be, m->tt.n_params * sizeof(float));
}

Trainable model_trainable(const Model *m) {
    if (m->lora) return (Trainable){&m->lora->tt, m->lora->params, m->lora->grads};
    return (Trainable){&m->tt, m->params, m->grads};
}

Model *model_share(const Model *m) {
    Model *s = xcalloc(1, sizeof(Model));
    s->cfg = m->cfg;
    s->cfg.raw = m->cfg.raw ? cJSON_Duplicate(m->cfg.raw, 1) : NULL;
    s->be = m->be;
    s->dir = m->dir ? xstrdup(m->dir) : NULL;
    s->matrix_dtype = m->matrix_dtype;
    s->ckpt_dtype = m->ckpt_dtype;
    tensors_build(&s->tt, &m->cfg, m->matrix_dtype);
    s->data = xmalloc((size_t)m->tt.n * sizeof(void *));
    memcpy(s->data, m->data, (size_t)m->tt.n * sizeof(void *));
    s->params = m->params;
    s->inv_freq = m->inv_freq;
    s->rope_mscale = m->rope_mscale;
    if (m->rope_host) {  // its own table in use: the two models select theirs independently
        size_t half = (size_t)m->cfg.rotary_dim / 2;
        s->rope_host = xmalloc(2 * half * sizeof(float));
        memcpy(s->rope_host, m->rope_host, 2 * half * sizeof(float));
        s->inv_freq = m->be->alloc(m->be, half * sizeof(float));
        s->rope_long = m->rope_long;
        m->be->upload(m->be, s->inv_freq, s->rope_host + (s->rope_long ? half : 0), half * sizeof(float));
    }
    s->inv_freq_local = m->inv_freq_local;
    s->plans.max_plans = m->plans.max_plans;
    s->frozen = 1;
    s->shared = 1;
    return s;
}

void model_free(Model *m) {
    if (!m) return;
    plan_cache_free(m);
    lora_detach(m);
    if (m->params && !m->shared) m->be->free(m->be, m->params);
    if (m->mapping && !m->shared) {
        st_close(m->mapping);
        free(m->mapping);
    }
    free(m->data);
    if (m->grads) m->be->free(m->be, m->grads);
    if (!m->shared || m->rope_host) m->be->free(m->be, m->inv_freq);
    free(m->rope_host);
    if (!m->shared && m->inv_freq_local) m->be->free(m->be, m->inv_freq_local);
    tensors_free(&m->tt);
    config_free(&m->cfg);
    free(m->dir);
    free(m);
}

static int ignorable_extra(const Model *m, const char *name, int convert) {
    if ((m->cfg.tie_word_embeddings || convert) && !strcmp(name, "lm_head.weight")) return 1;  // transformers ignores it
    size_t n = strlen(name), s = strlen("rotary_emb.inv_freq");
    return n >= s && !strcmp(name + n - s, "rotary_emb.inv_freq");  // buffer saved by old checkpoints
}

// Every tensor the table expects is in the checkpoint with its shape, and nothing else is
// (convert: a causal checkpoint becoming a classifier has no score head and may have lm_head).
static Status check_tensors(const Model *m, const TensorTable *tt, const StSet *set, const char *dir, int convert,
                            Err *e) {
    const ModelConfig *cfg = &m->cfg;
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        if (convert && t->kind == TK_SCORE) continue;
        const StTensor *s = st_find(set, t->name);
        if (!s)
            return err_set(e, ST_EINVAL, "%s: missing tensor \"%s\" (expected by config.json: %s)", dir, t->name,
                           cfg->model_type);
        int nd;
        int64_t hs[3];
        tensors_hf_shape(t, &nd, hs);
        int shape_ok = s->ndim == nd;
        for (int d = 0; d < nd && shape_ok; d++) shape_ok = s->shape[d] == hs[d];
        if (!shape_ok) {
            char got[128] = "", want[128] = "";
            for (int d = 0; d < s->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)s->shape[d]);
            for (int d = 0; d < nd; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)hs[d]);
            return err_set(e, ST_EINVAL, "%s: tensor \"%s\" has shape [%s], expected [%s]", dir, t->name, got, want);
        }
    }
    for (int i = 0; i < set->n_tensors; i++) {
        const char *name = set->tensors[i].name;
        if (!tensors_find(tt, name) && !ignorable_extra(m, name, convert))
            return err_set(e, ST_EINVAL, "%s: unexpected tensor \"%s\" (not part of a %s model with this config.json)",
                           dir, name, cfg->model_type);
    }
    return ST_OK;
}

// Q8_0 storage: only for a model that is run, never trained, and every matrix row a whole number
// of 32-element blocks.
static Status check_q8_0(const TensorTable *tt, const char *dir, int frozen, Err *e) {
    if (!frozen)
        return err_set(e, ST_EINVAL, "%s: q8_0 weights cannot be trained (trained weights are float32 masters); q8_0 is "
                       "for generate, chat, eval, logits and frozen teachers or reference models", dir);
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        if (t->is_matrix && t->shape[1] % Q8_0_BLOCK != 0)
            return err_set(e, ST_EINVAL, "%s: tensor \"%s\" has rows of %lld elements; q8_0 stores rows in blocks of %d "
                           "(use --dtype float32 or bfloat16 for this model)", dir, t->name, (long long)t->shape[1],
                           Q8_0_BLOCK);
    }
    return ST_OK;
}

// A tensor-parallel part of Q8_0 weights: every row of the part whole blocks too (a tensor split
// by columns, o_proj / down_proj, keeps K / T of a row's elements).
static Status check_q8_0_part(const TensorTable *tt, const char *dir, int T, Err *e) {
    for (int i = 0; i < tt->n; i++) {
        const TensorInfo *t = &tt->t[i];
        if (t->is_matrix && t->shape[1] % Q8_0_BLOCK != 0)
            return err_set(e, ST_EUSAGE, "%s: --tp_size %d: tensor \"%s\" would keep rows of %lld elements on each rank; "
                           "q8_0 stores rows in blocks of %d (use --dtype float32 or bfloat16, or a --tp_size that "
                           "leaves whole blocks)", dir, T, t->name, (long long)t->shape[1], Q8_0_BLOCK);
    }
    return ST_OK;
}

// Copy (converting) every tensor not used in place into params (those the checkpoint has), 8 MiB
// at a time through one stage buffer, each piece's pages of the mapping released once copied
// (peak: the copies plus about 12 MiB, not the largest tensor twice or the file beside its copy).
#define UPLOAD_CHUNK (8u << 20)

// dst (cols, rows) = the transpose of src (rows, cols), elements of es bytes.
static void transpose_bytes(void *dst, const void *src, size_t rows, size_t cols, size_t es) {
    char *d = dst;
    const char *sp = src;
    for (size_t r0 = 0; r0 < rows; r0 += 32)
        for (size_t c0 = 0; c0 < cols; c0 += 32)
            for (size_t r = r0; r < MIN(rows, r0 + 32); r++)
                for (size_t c = c0; c < MIN(cols, c0 + 32); c++) memcpy(d + (c * rows + r) * es, sp + (r * cols + c) * es, es);
}

// Block e of a tensor t whose checkpoint blocks (E, A, B) are stored transposed (tensors.h
// hf_xpose): transposed in the checkpoint's dtype (through tr, A B elements), then converted into
// dst (t's dtype).
static void transposed_block(void *dst, DType dt, const TensorInfo *t, const StTensor *s, size_t e, void *tr) {
    size_t A = (size_t)t->hf_shape[1], B = (size_t)t->hf_shape[2], blk = A * B, ss = dtype_size(s->dtype);
    transpose_bytes(tr, (const char *)s->data + e * blk * ss, A, B, ss);
    dtype_convert(dst, dt, tr, s->dtype, blk);
}

// Such a tensor uploaded one block at a time.
static void upload_transposed(Model *m, int i, const StTensor *s) {
    const TensorInfo *t = &m->tt.t[i];
    size_t E = (size_t)t->hf_shape[0], blk = (size_t)t->hf_shape[1] * (size_t)t->hf_shape[2];
    void *tr = xmalloc(blk * dtype_size(s->dtype)), *conv = xmalloc(dtype_bytes(t->dtype, blk) + 64);
    for (size_t e = 0; e < E; e++) {
        transposed_block(conv, t->dtype, t, s, e, tr);
        m->be->upload(m->be, (char *)m->data[i] + dtype_bytes(t->dtype, e * blk), conv, dtype_bytes(t->dtype, blk));
    }
    free(tr);
    free(conv);
}

// A part's tensor (model/model.h ModelPart): its runs of the whole tensor's elements converted
// into stage (cap elements of the part's dtype) and uploaded whenever stage is full, each piece's
// pages of the mapping released once read.
typedef struct PartUpload {
    Model *m;
    int i;                  // the part's tensor
    const StSet *set;
    const StTensor *s;      // the mapped whole tensor src points into, or NULL (a converted copy)
    const char *src;        // the whole tensor's elements, of dtype sdt, ss bytes each
    DType sdt;
    size_t ss;
    char *stage;            // part elements [at, at + fill)
    size_t cap, at, fill;
} PartUpload;

static void part_flush(PartUpload *u) {
    DType dt = u->m->tt.t[u->i].dtype;
    if (u->fill)
        u->m->be->upload(u->m->be, (char *)u->m->data[u->i] + dtype_bytes(dt, u->at), u->stage, dtype_bytes(dt, u->fill));
    u->at += u->fill;
    u->fill = 0;
}

static void part_run(void *ctx, size_t whole_at, size_t part_at, size_t n) {
    PartUpload *u = ctx;
    DType dt = u->m->tt.t[u->i].dtype;
    CHECK(part_at == u->at + u->fill);
    CHECK(dt != DT_Q8_0 || (whole_at % Q8_0_BLOCK == 0 && n % Q8_0_BLOCK == 0 && u->cap % Q8_0_BLOCK == 0));
    for (size_t j = 0; j < n;) {
        if (u->fill == u->cap) part_flush(u);
        size_t c = MIN(n - j, u->cap - u->fill);
        dtype_convert(u->stage + dtype_bytes(dt, u->fill), dt, u->src + (whole_at + j) * u->ss, u->sdt, c);
        if (u->s) st_release(u->set, u->s, (whole_at + j) * u->ss, c * u->ss);
        u->fill += c, j += c;
    }
}

// Tensor i of a part from whole tensor w of the checkpoint (s): only the part's elements are read
// from the mapping; a transposed (hf_xpose) or Q8_0 checkpoint tensor is converted whole first
// (to fp32 where the part is Q8_0: its runs are whole blocks, quantized as they are copied, so the
// part's blocks are the whole tensor's; check_q8_0_part).
static void upload_part(Model *m, int i, const StSet *set, const StTensor *s, const TensorInfo *w,
                        const ModelPart *part, void *stage) {
    const TensorInfo *t = &m->tt.t[i];
    PartUpload u = {.m = m, .i = i, .set = set, .stage = stage, .cap = UPLOAD_CHUNK / 4};
    char *whole = NULL;
    if (w->hf_xpose || s->dtype == DT_Q8_0) {
        DType wdt = t->dtype == DT_Q8_0 ? DT_F32 : t->dtype;
        whole = xmalloc(dtype_bytes(wdt, w->numel) + 64);
        if (w->hf_xpose) {
            size_t blk = (size_t)w->hf_shape[1] * (size_t)w->hf_shape[2];
            void *tr = xmalloc(blk * dtype_size(s->dtype));
            for (size_t e = 0; e < (size_t)w->hf_shape[0]; e++)
                transposed_block(whole + dtype_bytes(wdt, e * blk), wdt, w, s, e, tr);
            free(tr);
        } else {
            dtype_convert(whole, wdt, s->data, s->dtype, w->numel);
        }
        u.src = whole, u.sdt = wdt, u.ss = dtype_size(wdt);
    } else {
        u.s = s, u.src = s->data, u.sdt = s->dtype, u.ss = dtype_size(s->dtype);
    }
    part->runs(part, &m->cfg, w, t, part_run, &u);
    part_flush(&u);
    CHECK_MSG(u.at == t->numel, "tensor %s: the part's runs cover %zu of %zu elements", t->name, u.at, t->numel);
    if (u.s) st_release(set, s, 0, s->nbytes);
    free(whole);
}

// whole: the whole model's table when m is a part of it (part), else NULL.
static void upload_tensors(Model *m, const StSet *set, const uint8_t *mapped, const ModelPart *part,
                           const TensorTable *whole) {
    void *stage = xmalloc(UPLOAD_CHUNK);
    for (int i = 0; i < m->tt.n; i++) {
        if (mapped && mapped[i]) continue;
        const TensorInfo *t = &m->tt.t[i];
        const StTensor *s = st_find(set, t->name);
        if (!s) continue;  // a new score head (check_tensors allowed it)
        if (part) {
            const TensorInfo *w = tensors_find(whole, t->name);
            CHECK_MSG(w && w->kind == t->kind, "tensor %s: not in the whole model", t->name);
            upload_part(m, i, set, s, w, part, stage);
            continue;
        }
        if (t->hf_xpose) {
            upload_transposed(m, i, s);
            continue;
        }
        // pieces of step elements (a multiple of a Q8_0 block); Q8_0 takes less than 2 bytes an element
        size_t ss = dtype_size(s->dtype), step = UPLOAD_CHUNK / MAX(dtype_size(t->dtype), ss);
        for (size_t j = 0; j < t->numel; j += step) {
            size_t n = MIN(step, t->numel - j);
            dtype_convert(stage, t->dtype, (const char *)s->data + j * ss, s->dtype, n);
            m->be->upload(m->be, (char *)m->data[i] + dtype_bytes(t->dtype, j), stage, dtype_bytes(t->dtype, n));
            st_release(set, s, j * ss, n * ss);
        }
    }
    free(stage);
}

// Whether the checkpoint's kind (causal LM or classifier) is what o asks for; *convert when a
// causal checkpoint is to become a classifier (cfg edited).
static Status check_kind(const char *dir, ModelConfig *cfg, const ModelLoadOpts *o, int *convert, Err *e) {
    *convert = 0;
    if (cfg->num_labels > 0 && !o->classifier)
        return err_set(e, ST_EINVAL, "%s is a %s (a sequence classifier: a score head, no LM head); still score, still "
                                     "reward and --reward model:%s run it", dir, config_architecture(cfg), dir);
    if (!o->classifier) return ST_OK;
    if (cfg->num_labels == 0) {
        if (o->num_labels <= 0)
            return err_set(e, ST_EINVAL, "%s is a causal LM, not a sequence classifier (config.json architectures); make "
                                         "one with: still init --model %s --num_labels 1 --output_dir DIR", dir, dir);
        config_set_classifier(cfg, o->num_labels, o->pad_token_id);
        *convert = 1;
        return ST_OK;
    }
    if (o->num_labels > 0 && cfg->num_labels != o->num_labels)
        return err_set(e, ST_EINVAL, "%s has %d labels (config.json id2label / num_labels), %d wanted", dir,
                       cfg->num_labels, o->num_labels);
    return ST_OK;
}

// The new score head of a converted checkpoint: normal(0, initializer_range), keyed by seed.
static void init_score(Model *m, uint64_t seed) {
    const TensorInfo *t = tensors_get(&m->tt, TK_SCORE, -1);
    Rng rng;
    rng_init(&rng, seed, 0);
    float *h = xmalloc(t->numel * sizeof(float));
    for (size_t j = 0; j < t->numel; j++) h[j] = (float)m->cfg.initializer_range * rng_normal(&rng);
    void *stage = xmalloc(dtype_bytes(t->dtype, t->numel));
    dtype_convert(stage, t->dtype, h, DT_F32, t->numel);
    m->be->upload(m->be, model_data(m, t), stage, dtype_bytes(t->dtype, t->numel));
    free(stage);
    free(h);
}

Status model_config_load(const char *dir_or_gguf, ModelConfig *cfg, Err *e) {
    memset(cfg, 0, sizeof *cfg);
    if (gguf_is_file(dir_or_gguf)) {
        GgufFile g;
        TRY(gguf_open(dir_or_gguf, &g, e));
        Status st = gguf_model_config(&g, cfg, e);
        gguf_close(&g);
        return st;
    }
    char *path = path_join(dir_or_gguf, "config.json");
    Status st = config_load(path, cfg, e);
    free(path);
    return st;
}

static Status load(const char *dir, Backend *be, int matrix_dtype, const ModelLoadOpts *o, Model **out, Err *e) {
    *out = NULL;
    int frozen = o->frozen, convert = 0;
    ModelConfig cfg;
    StSet *set = xcalloc(1, sizeof(StSet));
    // A llama.cpp GGUF file: its metadata is the config, its tensors the checkpoint (docs/gguf.md).
    int gguf = gguf_is_file(dir);
    Status st = gguf ? gguf_model_open(dir, matrix_dtype, &cfg, set, e) : model_config_load(dir, &cfg, e);
    if (st != ST_OK) {
        free(set);
        return st;
    }
    st = check_kind(dir, &cfg, o, &convert, e);
    if (st == ST_OK && !gguf) st = st_open(dir, set, e);
    if (st != ST_OK) {
        st_close(set);
        free(set);
        config_free(&cfg);
        return st;
    }
    // The checkpoint's dtype: that of its embedding matrix.
    DType ckpt = cfg.torch_dtype;
    const StTensor *emb = st_find(set, "model.embed_tokens.weight");
    if (emb) ckpt = emb->dtype;
    DType mdt = matrix_dtype >= 0 ? (DType)matrix_dtype : (ckpt == DT_BF16 ? DT_BF16 : DT_F32);
    Model probe = {.cfg = cfg};
    tensors_build(&probe.tt, &cfg, mdt);
    st = check_tensors(&probe, &probe.tt, set, dir, convert, e);
    if (st == ST_OK && mdt == DT_Q8_0) st = check_q8_0(&probe.tt, dir, frozen, e);
    // A part (tensor parallelism): its config and table; nothing used in place
    const ModelPart *part = o->part;
    ModelConfig pcfg = cfg;
    TensorTable ptt = {0};
    if (st == ST_OK && part) st = part->config(part, &cfg, dir, &pcfg, e);
    if (st == ST_OK && part) tensors_build(&ptt, &pcfg, mdt);
    if (st == ST_OK && part && mdt == DT_Q8_0) st = check_q8_0_part(&ptt, dir, part->T, e);
    // Frozen on host memory: tensors stored as they are computed with are used in place.
    uint8_t *mapped = NULL;
    size_t copied = part ? ptt.param_bytes : probe.tt.param_bytes, in_place = 0;
    if (st == ST_OK && frozen && be->host_memory && !part) {
        mapped = xcalloc((size_t)probe.tt.n, 1);
        copied = 0;
        for (int i = 0; i < probe.tt.n; i++) {
            const TensorInfo *t = &probe.tt.t[i];
            size_t bytes = dtype_bytes(t->dtype, t->numel);
            const StTensor *s = st_find(set, t->name);
            int run = t->kind == TK_EXP_G || t->kind == TK_EXP_U || t->kind == TK_EXP_D;  // contiguous copies
            run |= t->hf_xpose;  // stored transposed
            mapped[i] = s && s->dtype == t->dtype && !run;
            if (mapped[i]) in_place += bytes;
            else copied += bytes;
        }
    }
    char what[600];
    if (part)
        snprintf(what, sizeof what, "loading part %d of %d of %s (%zu of its %zu parameters as %s)", part->t + 1,
                 part->T, dir, ptt.n_params, probe.tt.n_params, dtype_torch_name(mdt));
    else
        snprintf(what, sizeof what, "loading %s (%zu parameters as %s)", dir, probe.tt.n_params, dtype_torch_name(mdt));
    if (st == ST_OK) st = mem_check(copied, be->max_memory, what, e);
    size_t whole_bytes = probe.tt.param_bytes;
    tensors_free(&ptt);
    if (st != ST_OK) {
        tensors_free(&probe.tt);
        free(mapped);
        st_close(set);
        free(set);
        config_free(&cfg);
        return st;
    }
    Model *m = model_new_mapped(&pcfg, be, mdt, mapped);
    m->ckpt_dtype = ckpt;
    m->dir = xstrdup(dir);
    m->frozen = frozen;
    m->mapped_bytes = in_place;
    for (int i = 0; mapped && i < m->tt.n; i++)
        if (mapped[i]) m->data[i] = (void *)st_find(set, m->tt.t[i].name)->data;
    upload_tensors(m, set, mapped, part, &probe.tt);
    tensors_free(&probe.tt);
    if (part)  // tests read this line
        log_info("%s: part %d of %d loaded: %zu of %zu bytes of weights read from the checkpoint", dir, part->t + 1,
                 part->T, m->tt.param_bytes, whole_bytes);
    if (convert) init_score(m, o->seed);
    free(mapped);
    if (in_place) {
        m->mapping = set;
    } else {
        st_close(set);
        free(set);
    }
    if (in_place) log_debug("%s: %.1f MiB of weights used in place from the mapping", dir, in_place / 1048576.0);
    *out = m;
    return ST_OK;
}

Status model_load(const char *dir, Backend *be, int matrix_dtype, Model **out, Err *e) {
    ModelLoadOpts o = {0};
    return load(dir, be, matrix_dtype, &o, out, e);
}

Status model_load_frozen(const char *dir, Backend *be, int matrix_dtype, Model **out, Err *e) {
    ModelLoadOpts o = {.frozen = 1};
    return load(dir, be, matrix_dtype, &o, out, e);
}

Status model_load_opts(const char *dir, Backend *be, int matrix_dtype, const ModelLoadOpts *o, Model **out, Err *e) {
    return load(dir, be, matrix_dtype, o, out, e);
}

Status model_create_random(const ModelConfig *cfg, Backend *be, uint64_t seed, Model **out, Err *e) {
    return model_create_random_p(cfg, be, seed, NULL, out, e);
}

Status model_create_random_p(const ModelConfig *cfg, Backend *be, uint64_t seed, Progress *pr, Model **out, Err *e) {
    Model *m = model_new(cfg, be, DT_F32);
    Rng rng;
    rng_init(&rng, seed, 0);
    float std = (float)(cfg->initializer_range > 0 ? cfg->initializer_range : 0.02);
    size_t cap = 0;
    float *host = NULL;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *t = &m->tt.t[i];
        if (t->numel > cap) {
            free(host);
            host = xmalloc(t->numel * sizeof(float));
            cap = t->numel;
        }
        int is_norm = t->kind == TK_NORM || t->kind == TK_LN1 || t->kind == TK_LN2 || t->kind == TK_QN ||
                      t->kind == TK_KN || t->kind == TK_LNA || t->kind == TK_LNF;
        // gpt_oss: the sinks and the router bias are drawn like the matrices (GptOssPreTrainedModel)
        int drawn = t->is_matrix || t->kind == TK_SINKS || t->kind == TK_ROUTER_B;
        for (size_t j = 0; j < t->numel; j++) host[j] = drawn ? std * rng_normal(&rng) : (is_norm ? 1.0f : 0.0f);
        be->upload(be, m->data[i], host, t->numel * sizeof(float));
        if (pr) progress_update(pr, i + 1, m->tt.n, t->name, 0);
    }
    if (pr) progress_clear(pr);
    free(host);
    UNUSED(e);
    *out = m;
    return ST_OK;
}

// Tensor data for the streaming writer: a range of a device tensor, converted to the saved dtype.
#define SAVE_STAGE (2u << 20)
typedef struct SaveFill {
    const Model *m;
    DType save_dtype;
    void *stage;  // (count) elements in the tensor's own dtype
    size_t stage_cap;
    Progress *pr;             // may be NULL
    double done, total;       // bytes written, to write
    void *xblk;               // one block of a transposed tensor (hf_xpose), its stored layout
    size_t xblk_cap, xblk_index;
    int xblk_tensor;          // the tensor and block xblk holds (-1: none)
} SaveFill;

// A range of a transposed tensor (hf_xpose) in the checkpoint's order: each block (A, B) read once
// into xblk (its stored (B, A) layout), elements gathered into the stage, then converted.
static Status save_fill_transposed(SaveFill *f, const TensorInfo *t, int i, size_t begin, size_t count, void *dst) {
    size_t A = (size_t)t->hf_shape[1], B = (size_t)t->hf_shape[2], blk = A * B, es = dtype_size(t->dtype);
    if (f->xblk_cap < blk * es) {
        free(f->xblk);
        f->xblk = xmalloc(f->xblk_cap = blk * es);
        f->xblk_tensor = -1;
    }
    if (f->stage_cap < SAVE_STAGE) {
        free(f->stage);
        f->stage = xmalloc(f->stage_cap = SAVE_STAGE);
    }
    size_t per = SAVE_STAGE / es, ds = dtype_size(f->save_dtype);
    for (size_t j0 = 0; j0 < count; j0 += per) {
        size_t n = MIN(per, count - j0);
        for (size_t j = 0; j < n; j++) {
            size_t hf = begin + j0 + j, x = hf / blk, own = tensors_hf_index(t, hf) - x * blk;
            if (f->xblk_tensor != i || f->xblk_index != x) {
                f->m->be->download(f->m->be, f->xblk, (const char *)f->m->data[i] + x * blk * es, blk * es);
                f->xblk_tensor = i, f->xblk_index = x;
            }
            memcpy((char *)f->stage + j * es, (const char *)f->xblk + own * es, es);
        }
        dtype_convert((char *)dst + j0 * ds, f->save_dtype, f->stage, t->dtype, n);
    }
    return ST_OK;
}

static Status save_fill(void *ctx, int i, size_t begin, size_t count, void *dst, Err *e) {
    SaveFill *f = ctx;
    const TensorInfo *t = &f->m->tt.t[i];
    size_t es = dtype_size(t->dtype);
    const char *src = (const char *)f->m->data[i] + begin * es;
    if (f->pr) {
        f->done += (double)count * dtype_size(f->save_dtype);
        progress_update(f->pr, (long)(f->done / 1048576), (long)(f->total / 1048576), t->name, 0);
    }
    if (t->hf_xpose) return save_fill_transposed(f, t, i, begin, count, dst);
    if (t->dtype == f->save_dtype) {
        f->m->be->download(f->m->be, dst, src, count * es);
        return ST_OK;
    }
    // converted through a stage of at most SAVE_STAGE bytes (the writer's own buffer is 8 MiB)
    size_t per = SAVE_STAGE / es, ds = dtype_size(f->save_dtype);
    if (!f->stage) f->stage = xmalloc(f->stage_cap = SAVE_STAGE);
    for (size_t j = 0; j < count; j += per) {
        size_t n = MIN(per, count - j);
        f->m->be->download(f->m->be, f->stage, src + j * es, n * es);
        dtype_convert((char *)dst + j * ds, f->save_dtype, f->stage, t->dtype, n);
    }
    return ST_OK;
}

Status model_save(const Model *m, const char *dir, DType save_dtype, Err *e) {
    return model_save_p(m, dir, save_dtype, NULL, e);
}

Status model_save_p(const Model *m, const char *dir, DType save_dtype, Progress *pr, Err *e) {
    TRY(dir_create(dir, e));
    StWriteTensor *wt = xcalloc((size_t)m->tt.n, sizeof(StWriteTensor));
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *t = &m->tt.t[i];
        wt[i].name = t->name;
        wt[i].dtype = save_dtype;
        int64_t hs[3];
        tensors_hf_shape(t, &wt[i].ndim, hs);
        for (int d = 0; d < wt[i].ndim; d++) wt[i].shape[d] = hs[d];
    }
    SaveFill fill = {.m = m, .save_dtype = save_dtype, .pr = pr,
                     .total = (double)m->tt.n_params * dtype_size(save_dtype), .xblk_tensor = -1};
    char *path = path_join(dir, "model.safetensors");
    Status st = st_write_stream(path, wt, m->tt.n, save_fill, &fill, NULL, 0, e);
    free(path);
    free(fill.stage);
    free(fill.xblk);
    free(wt);
    if (pr) progress_clear(pr);
    if (st != ST_OK) return st;
    // config.json: the fields as given, with the saved dtype.
    ModelConfig tmp = m->cfg;
    tmp.raw = m->cfg.raw ? cJSON_Duplicate(m->cfg.raw, 1) : cJSON_CreateObject();
    const char *key = cJSON_HasObjectItem(tmp.raw, "dtype") && !cJSON_HasObjectItem(tmp.raw, "torch_dtype")
                          ? "dtype" : "torch_dtype";
    cJSON *dt = cJSON_CreateString(dtype_torch_name(save_dtype));
    if (cJSON_HasObjectItem(tmp.raw, key)) cJSON_ReplaceItemInObjectCaseSensitive(tmp.raw, key, dt);
    else cJSON_AddItemToObject(tmp.raw, key, dt);
    tmp.torch_dtype = save_dtype;
    char *text = config_to_json(&tmp);
    cJSON_Delete(tmp.raw);
    char *cfg_path = path_join(dir, "config.json");
    st = file_write_atomic(cfg_path, text, strlen(text), e);
    free(cfg_path);
    free(text);
    return st;
}
