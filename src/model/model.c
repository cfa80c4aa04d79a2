// model.c: loading, initialising and saving a model's parameters.
#include "model.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../core/meminfo.h"
#include "../core/rng.h"
#include "lora.h"
#include "safetensors.h"

#include <string.h>

void *model_param(const Model *m, TensorKind kind, int layer) {
    const TensorInfo *t = tensors_get(&m->tt, kind, layer);
    return t ? (char *)m->params + t->offset : NULL;
}

float *model_grad(const Model *m, TensorKind kind, int layer) {
    const TensorInfo *t = tensors_get(&m->tt, kind, layer);
    return (t && m->grads) ? m->grads + t->goffset : NULL;
}

const TensorInfo *model_lm_head(const Model *m) {
    const TensorInfo *t = tensors_get(&m->tt, TK_LM_HEAD, -1);
    return t ? t : tensors_get(&m->tt, TK_EMBED, -1);
}

static Model *model_new(const ModelConfig *cfg, Backend *be, DType matrix_dtype) {
    Model *m = xcalloc(1, sizeof(Model));
    m->cfg = *cfg;
    m->be = be;
    m->matrix_dtype = matrix_dtype;
    m->ckpt_dtype = matrix_dtype;
    tensors_build(&m->tt, cfg, matrix_dtype);
    m->params = be->alloc(be, m->tt.param_bytes);
    int half = cfg->head_dim / 2;
    float *inv = xmalloc((size_t)half * sizeof(float));
    config_rope_inv_freq(cfg, inv, &m->rope_mscale);
    m->inv_freq = be->alloc(be, (size_t)half * sizeof(float));
    be->upload(be, m->inv_freq, inv, (size_t)half * sizeof(float));
    free(inv);
    return m;
}

void model_alloc_grads(Model *m) {
    if (m->lora) lora_alloc_grads(m->lora, m->be);
    else if (!m->grads) m->grads = m->be->alloc(m->be, m->tt.n_params * sizeof(float));
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
    s->params = m->params;
    s->inv_freq = m->inv_freq;
    s->rope_mscale = m->rope_mscale;
    s->plans.max_plans = m->plans.max_plans;
    s->shared = 1;
    return s;
}

void model_free(Model *m) {
    if (!m) return;
    plan_cache_free(m);
    lora_detach(m);
    if (!m->shared) m->be->free(m->be, m->params);
    if (m->grads) m->be->free(m->be, m->grads);
    if (!m->shared) m->be->free(m->be, m->inv_freq);
    tensors_free(&m->tt);
    config_free(&m->cfg);
    free(m->dir);
    free(m);
}

static int ignorable_extra(const Model *m, const char *name) {
    if (m->cfg.tie_word_embeddings && !strcmp(name, "lm_head.weight")) return 1;  // transformers ignores it
    size_t n = strlen(name), s = strlen("rotary_emb.inv_freq");
    return n >= s && !strcmp(name + n - s, "rotary_emb.inv_freq");  // buffer saved by old checkpoints
}

Status model_load(const char *dir, Backend *be, int matrix_dtype, Model **out, Err *e) {
    char *cfg_path = path_join(dir, "config.json");
    ModelConfig cfg;
    Status st = config_load(cfg_path, &cfg, e);
    free(cfg_path);
    if (st != ST_OK) return st;
    StSet set;
    st = st_open(dir, &set, e);
    if (st != ST_OK) {
        config_free(&cfg);
        return st;
    }
    // The checkpoint's dtype: that of its embedding matrix.
    DType ckpt = cfg.torch_dtype;
    const StTensor *emb = st_find(&set, "model.embed_tokens.weight");
    if (emb) ckpt = emb->dtype;
    DType mdt = matrix_dtype >= 0 ? (DType)matrix_dtype : (ckpt == DT_BF16 ? DT_BF16 : DT_F32);
    TensorTable probe;
    tensors_build(&probe, &cfg, mdt);
    char what[600];
    snprintf(what, sizeof what, "loading %s (%zu parameters as %s)", dir, probe.n_params, dtype_torch_name(mdt));
    st = mem_check(probe.param_bytes, be->max_memory, what, e);
    tensors_free(&probe);
    if (st != ST_OK) {
        st_close(&set);
        config_free(&cfg);
        return st;
    }
    Model *m = model_new(&cfg, be, mdt);
    m->ckpt_dtype = ckpt;
    m->dir = xstrdup(dir);
    size_t stage_cap = 0;
    void *stage = NULL;
    for (int i = 0; i < m->tt.n && st == ST_OK; i++) {
        const TensorInfo *t = &m->tt.t[i];
        const StTensor *s = st_find(&set, t->name);
        if (!s) {
            st = err_set(e, ST_EINVAL, "%s: missing tensor \"%s\" (expected by config.json: %s)", dir, t->name,
                         cfg.model_type);
            break;
        }
        int shape_ok = s->ndim == t->ndim && s->shape[0] == t->shape[0] && (t->ndim == 1 || s->shape[1] == t->shape[1]);
        if (!shape_ok) {
            char got[128] = "", want[128];
            for (int d = 0; d < s->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)s->shape[d]);
            if (t->ndim == 1) snprintf(want, sizeof want, "%lld", (long long)t->shape[0]);
            else snprintf(want, sizeof want, "%lld, %lld", (long long)t->shape[0], (long long)t->shape[1]);
            st = err_set(e, ST_EINVAL, "%s: tensor \"%s\" has shape [%s], expected [%s]", dir, t->name, got, want);
            break;
        }
        size_t bytes = t->numel * dtype_size(t->dtype);
        if (bytes > stage_cap) {
            free(stage);
            stage = xmalloc(bytes);
            stage_cap = bytes;
        }
        dtype_convert(stage, t->dtype, s->data, s->dtype, t->numel);
        be->upload(be, (char *)m->params + t->offset, stage, bytes);
    }
    for (int i = 0; i < set.n_tensors && st == ST_OK; i++) {
        const char *name = set.tensors[i].name;
        if (!tensors_find(&m->tt, name) && !ignorable_extra(m, name))
            st = err_set(e, ST_EINVAL, "%s: unexpected tensor \"%s\" (not part of a %s model with this config.json)",
                         dir, name, cfg.model_type);
    }
    free(stage);
    st_close(&set);
    if (st != ST_OK) {
        model_free(m);
        return st;
    }
    *out = m;
    return ST_OK;
}

Status model_create_random(const ModelConfig *cfg, Backend *be, uint64_t seed, Model **out, Err *e) {
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
        int is_norm = t->kind == TK_NORM || t->kind == TK_LN1 || t->kind == TK_LN2 || t->kind == TK_QN || t->kind == TK_KN;
        for (size_t j = 0; j < t->numel; j++) host[j] = t->is_matrix ? std * rng_normal(&rng) : (is_norm ? 1.0f : 0.0f);
        be->upload(be, (char *)m->params + t->offset, host, t->numel * sizeof(float));
    }
    free(host);
    UNUSED(e);
    *out = m;
    return ST_OK;
}

Status model_save(const Model *m, const char *dir, DType save_dtype, Err *e) {
    TRY(dir_create(dir, e));
    Backend *be = m->be;
    StWriteTensor *wt = xcalloc((size_t)m->tt.n, sizeof(StWriteTensor));
    void **bufs = xcalloc((size_t)m->tt.n, sizeof(void *));
    size_t stage_cap = 0;
    void *stage = NULL;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *t = &m->tt.t[i];
        size_t bytes = t->numel * dtype_size(t->dtype);
        if (bytes > stage_cap) {
            free(stage);
            stage = xmalloc(bytes);
            stage_cap = bytes;
        }
        be->download(be, stage, (const char *)m->params + t->offset, bytes);
        bufs[i] = xmalloc(t->numel * dtype_size(save_dtype));
        dtype_convert(bufs[i], save_dtype, stage, t->dtype, t->numel);
        wt[i].name = t->name;
        wt[i].dtype = save_dtype;
        wt[i].ndim = t->ndim;
        wt[i].shape[0] = t->shape[0];
        wt[i].shape[1] = t->shape[1];
        wt[i].data = bufs[i];
    }
    free(stage);
    char *path = path_join(dir, "model.safetensors");
    Status st = st_write(path, wt, m->tt.n, NULL, 0, e);
    free(path);
    for (int i = 0; i < m->tt.n; i++) free(bufs[i]);
    free(bufs);
    free(wt);
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
