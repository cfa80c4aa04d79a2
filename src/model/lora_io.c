// lora_io.c: PEFT's adapter files (adapter_config.json, adapter_model.safetensors) in and out,
// and merging an adapter into its base weights.
#include "lora.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_FILE "adapter_config.json"
#define WEIGHTS_FILE "adapter_model.safetensors"

int lora_dir_has_adapter(const char *dir) {
    char *p = path_join(dir, CONFIG_FILE);
    int ok = file_exists(p);
    free(p);
    return ok;
}

static int is_pair_tensor(const TensorInfo *t) { return strstr(t->name, ".lora_A.") || strstr(t->name, ".lora_B."); }

Status lora_save(const Model *m, const char *dir, const char *base_model, Err *e) {
    const Lora *lo = m->lora;
    CHECK(lo);
    TRY(dir_create(dir, e));
    Backend *be = m->be;
    float *host = xmalloc(MAX(lo->tt.n_params, 1) * sizeof(float));
    StWriteTensor *wt = xcalloc((size_t)lo->tt.n, sizeof(StWriteTensor));
    for (int i = 0; i < lo->tt.n; i++) {
        const TensorInfo *t = &lo->tt.t[i];
        be->download(be, host + t->goffset, (const char *)lo->params + t->offset, t->numel * sizeof(float));
        wt[i] = (StWriteTensor){.name = t->name, .dtype = DT_F32, .ndim = t->ndim, .data = host + t->goffset};
        wt[i].shape[0] = t->shape[0];
        wt[i].shape[1] = t->shape[1];
    }
    char *wp = path_join(dir, WEIGHTS_FILE);
    Status st = st_write(wp, wt, lo->tt.n, NULL, 0, e);
    free(wp);
    free(wt);
    free(host);
    TRY(st);
    // the fields PEFT's LoraConfig writes (the ones still implements carry values; the rest
    // their defaults)
    const LoraConfig *c = &lo->cfg;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "alpha_pattern", cJSON_CreateObject());
    cJSON_AddNullToObject(j, "auto_mapping");
    if (base_model) cJSON_AddStringToObject(j, "base_model_name_or_path", base_model);
    else cJSON_AddNullToObject(j, "base_model_name_or_path");
    cJSON_AddStringToObject(j, "bias", "none");
    cJSON_AddNullToObject(j, "exclude_modules");
    cJSON_AddBoolToObject(j, "fan_in_fan_out", 0);
    cJSON_AddBoolToObject(j, "inference_mode", 1);
    cJSON_AddBoolToObject(j, "init_lora_weights", 1);
    cJSON_AddNullToObject(j, "layer_replication");
    cJSON_AddNullToObject(j, "layers_pattern");
    cJSON_AddNullToObject(j, "layers_to_transform");
    cJSON_AddItemToObject(j, "loftq_config", cJSON_CreateObject());
    cJSON_AddNumberToObject(j, "lora_alpha", c->alpha);
    cJSON_AddBoolToObject(j, "lora_bias", 0);
    cJSON_AddNumberToObject(j, "lora_dropout", c->dropout);
    cJSON_AddNullToObject(j, "megatron_config");
    cJSON_AddStringToObject(j, "megatron_core", "megatron.core");
    if (c->n_save) {
        cJSON *s = cJSON_AddArrayToObject(j, "modules_to_save");
        for (int i = 0; i < c->n_save; i++) cJSON_AddItemToArray(s, cJSON_CreateString(c->save[i]));
    } else {
        cJSON_AddNullToObject(j, "modules_to_save");
    }
    cJSON_AddStringToObject(j, "peft_type", "LORA");
    cJSON_AddNumberToObject(j, "r", c->r);
    cJSON_AddItemToObject(j, "rank_pattern", cJSON_CreateObject());
    cJSON_AddNullToObject(j, "revision");
    cJSON *tm = cJSON_AddArrayToObject(j, "target_modules");
    char written[LORA_N_MODULES][64];
    int nw = 0;
    for (int i = 0; i < LORA_N_MODULES; i++) {
        if (!(c->targets & (1u << i))) continue;
        char leaf[64];
        lora_module_leaf(&m->cfg, (LoraModule)i, leaf, sizeof leaf);  // gate_proj names dense and expert layers
        int dup = 0;
        for (int k = 0; k < nw; k++) dup |= !strcmp(written[k], leaf);
        if (dup) continue;
        strcpy(written[nw++], leaf);
        cJSON_AddItemToArray(tm, cJSON_CreateString(leaf));
    }
    cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM");
    cJSON_AddNullToObject(j, "trainable_token_indices");
    cJSON_AddBoolToObject(j, "use_dora", 0);
    cJSON_AddBoolToObject(j, "use_rslora", c->use_rslora);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    char *cp = path_join(dir, CONFIG_FILE);
    st = file_write_atomic(cp, text, strlen(text), e);
    free(cp);
    free(text);
    return st;
}

// ---- loading -------------------------------------------------------------------------------

static Status refuse_if(int cond, const char *path, const char *what, Err *e) {
    return cond ? err_set(e, ST_EUNSUPPORTED, "%s: %s is not supported yet", path, what) : ST_OK;
}

static int nonempty_object(const cJSON *j, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsObject(x) && x->child != NULL;
}

static Status read_config(const char *path, LoraConfig *c, Err *e) {
    cJSON *j;
    TRY(json_parse_file(path, &j, e));
    memset(c, 0, sizeof *c);
    const char *s;
    long long r = 0;
    Status st = json_get_string(j, "peft_type", path, 1, &s, e);
    if (st == ST_OK && strcmp(s, "LORA"))
        st = err_set(e, ST_EUNSUPPORTED, "%s: peft_type %s is not supported (LORA only)", path, s);
    if (st == ST_OK) st = json_get_int(j, "r", path, 1, &r, e);
    c->r = (int)r;
    if (st == ST_OK) st = json_get_double(j, "lora_alpha", path, 1, &c->alpha, e);
    if (st == ST_OK && json_has(j, "lora_dropout")) st = json_get_double(j, "lora_dropout", path, 1, &c->dropout, e);
    if (st == ST_OK && json_has(j, "use_rslora")) st = json_get_bool(j, "use_rslora", path, 1, &c->use_rslora, e);
    int flag = 0;
    if (st == ST_OK && json_has(j, "use_dora")) st = json_get_bool(j, "use_dora", path, 1, &flag, e);
    if (st == ST_OK) st = refuse_if(flag, path, "use_dora (DoRA)", e);
    flag = 0;
    if (st == ST_OK && json_has(j, "lora_bias")) st = json_get_bool(j, "lora_bias", path, 1, &flag, e);
    if (st == ST_OK) st = refuse_if(flag, path, "lora_bias", e);
    if (st == ST_OK && json_has(j, "bias")) {
        st = json_get_string(j, "bias", path, 1, &s, e);
        if (st == ST_OK) st = refuse_if(strcmp(s, "none") != 0, path, "bias other than none", e);
    }
    if (st == ST_OK) st = refuse_if(nonempty_object(j, "rank_pattern"), path, "rank_pattern", e);
    if (st == ST_OK) st = refuse_if(nonempty_object(j, "alpha_pattern"), path, "alpha_pattern", e);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "modules_to_save");
    if (st == ST_OK && cJSON_IsArray(ms)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, ms) {
            if (!cJSON_IsString(x)) {
                st = err_set(e, ST_EINVAL, "%s: modules_to_save must be a list of names", path);
                break;
            }
            if (c->n_save >= LORA_MAX_SAVE || strlen(x->valuestring) >= sizeof c->save[0]) {
                st = err_set(e, ST_EINVAL, "%s: modules_to_save: too many or too long names", path);
                break;
            }
            strcpy(c->save[c->n_save++], x->valuestring);
        }
    }
    if (st == ST_OK && (c->r <= 0 || !isfinite(c->alpha)))
        st = err_set(e, ST_EINVAL, "%s: r must be positive and lora_alpha a number (got r %d)", path, c->r);
    cJSON_Delete(j);
    return st;
}

typedef struct PairProbe {
    const StSet *set;
    const ModelConfig *cfg;
} PairProbe;

// The file holds (layer, mod)'s pair (for the experts: expert 0's; lora_load then wants them all).
static int file_has_pair(void *ctx, int layer, int mod) {
    const PairProbe *pp = ctx;
    char name[160], path[96];
    lora_module_path_of(pp->cfg, (LoraModule)mod, 0, path, sizeof path);
    snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_A.weight", layer, path);
    return st_find(pp->set, name) != NULL;
}

// Whether tensor name n is a LoRA pair tensor of module mod (any layer, any expert).
static int names_module(const ModelConfig *cfg, const char *n, int mod) {
    char path[96], key[112];
    lora_module_path_of(cfg, (LoraModule)mod, 0, path, sizeof path);
    if (mod < LORA_EXP_GATE || mod > LORA_EXP_DOWN) {
        snprintf(key, sizeof key, ".%s.lora_", path);
        return strstr(n, key) != NULL;
    }
    // experts: "<prefix>.experts.<e>.<leaf>.lora_" with any e
    char *ex = strstr(path, ".0.");
    if (!ex) return 0;
    *ex = 0;
    const char *leaf = ex + 3, *p = strstr(n, path);
    if (!p) return 0;
    p += strlen(path);
    if (*p++ != '.') return 0;
    while (*p >= '0' && *p <= '9') p++;
    snprintf(key, sizeof key, ".%s.lora_", leaf);
    return !strncmp(p, key, strlen(key));
}

Status lora_load(Model *m, const char *dir, Err *e) {
    char *cp = path_join(dir, CONFIG_FILE), *wp = path_join(dir, WEIGHTS_FILE);
    LoraConfig c;
    StSet set = {0};
    int opened = 0;
    Lora *lo = NULL;
    Status st = file_exists(cp) ? read_config(cp, &c, e)
                                : err_set(e, ST_ENOTFOUND, "%s: no %s (not a PEFT adapter directory)", dir, CONFIG_FILE);
    if (st == ST_OK) st = st_open(wp, &set, e), opened = st == ST_OK;
    // the targets: every module with a lora_A in the file
    if (st == ST_OK) {
        c.targets = 0;
        for (int i = 0; i < set.n_tensors; i++)
            for (int mod = 0; mod < LORA_N_MODULES; mod++)
                if (names_module(&m->cfg, set.tensors[i].name, mod)) c.targets |= 1u << mod;
        PairProbe pp = {&set, &m->cfg};
        st = lora_new(m, &c, file_has_pair, &pp, &lo, e);
    }
    // every tensor of the table from the file, converted to fp32; nothing left over
    int used = 0;
    for (int i = 0; st == ST_OK && i < lo->tt.n; i++) {
        const TensorInfo *t = &lo->tt.t[i];
        const StTensor *x = st_find(&set, t->name);
        if (!x) {
            st = err_set(e, ST_EINVAL, "%s: missing tensor %s (modules_to_save or the LoRA pair of its module)", wp,
                         t->name);
            break;
        }
        int ok = x->ndim == t->ndim && x->shape[0] == t->shape[0] && (t->ndim == 1 || x->shape[1] == t->shape[1]);
        if (!ok) {
            st = err_set(e, ST_EINVAL, "%s: tensor %s has shape [%lld%s%lld], expected [%lld, %lld] (r %d and the base "
                                       "model's shapes)", wp, t->name, (long long)x->shape[0], x->ndim > 1 ? ", " : "",
                         x->ndim > 1 ? (long long)x->shape[1] : 0LL, (long long)t->shape[0], (long long)t->shape[1],
                         c.r);
            break;
        }
        float *f = xmalloc(t->numel * sizeof(float));
        dtype_convert(f, DT_F32, x->data, x->dtype, t->numel);
        m->be->upload(m->be, (char *)lo->params + t->offset, f, t->numel * sizeof(float));
        free(f);
        used++;
    }
    if (st == ST_OK && used != set.n_tensors) {
        for (int i = 0; i < set.n_tensors; i++)
            if (!tensors_find(&lo->tt, set.tensors[i].name)) {
                st = err_set(e, ST_EUNSUPPORTED, "%s: tensor %s is not a LoRA pair of a linear layer or a module "
                                                 "listed in modules_to_save of this model", wp, set.tensors[i].name);
                break;
            }
    }
    if (opened) st_close(&set);
    free(cp);
    free(wp);
    if (st != ST_OK) {
        if (lo) {
            m->lora = lo;
            lora_detach(m);
        }
        return st;
    }
    lo->seed = 0;
    plan_cache_free(m);
    m->lora = lo;
    return ST_OK;
}

// ---- merging -------------------------------------------------------------------------------

Status lora_merge(Model *m, Err *e) {
    Lora *lo = m->lora;
    CHECK(lo);
    if (m->matrix_dtype != DT_F32 || m->frozen)
        return err_set(e, ST_EINVAL, "merging an adapter needs the base loaded writable in float32 (model_load)");
    Backend *be = m->be;
    for (int i = 0; i < lo->tt.n; i++) {
        const TensorInfo *t = &lo->tt.t[i];
        float *src = (float *)((char *)lo->params + t->offset);
        if (!is_pair_tensor(t)) {  // a saved copy replaces its base tensor
            const TensorInfo *b = lora_saved_base(m, t);
            if (t->kind == TK_LM_HEAD && !tensors_get(&m->tt, TK_LM_HEAD, -1))
                return err_set(e, ST_EUNSUPPORTED, "merging a trained lm_head into a model whose lm_head is tied to "
                                                   "its embedding is not supported");
            be->copy(be, model_data(m, b), src, t->numel * sizeof(float));
            continue;
        }
        if (!strstr(t->name, ".lora_A.")) continue;
        char bname[sizeof t->name];
        snprintf(bname, sizeof bname, "%s", t->name);
        memcpy(strstr(bname, ".lora_A."), ".lora_B.", 8);
        const TensorInfo *tb = tensors_find(&lo->tt, bname);
        CHECK(tb);
        int r = (int)t->shape[0], in = (int)t->shape[1], out = (int)tb->shape[0];
        // W (out, in) += scale * B (out, r) A (r, in): A^T (in, r) is the matmul's weight
        float *ah = xmalloc(t->numel * sizeof(float)), *at = xmalloc(t->numel * sizeof(float));
        be->download(be, ah, src, t->numel * sizeof(float));
        for (int k = 0; k < r; k++)
            for (int c = 0; c < in; c++) at[(size_t)c * r + k] = ah[(size_t)k * in + c];
        float *dat = be->alloc(be, t->numel * sizeof(float)), *delta = be->alloc(be, (size_t)out * in * sizeof(float));
        be->upload(be, dat, at, t->numel * sizeof(float));
        be->matmul_forward(be, delta, (const float *)((char *)lo->params + tb->offset), dat, DT_F32, NULL, out, r, in);
        be->scale(be, delta, lo->scale, (size_t)out * in);
        // the base weight: for an expert, its entry in the layer's run (expert 0 first)
        const TensorInfo *bw = tensors_get(&m->tt, t->kind, t->layer);
        const char *ex = strstr(t->name, ".experts.");
        if (ex) bw += atoi(ex + strlen(".experts."));
        float *w = model_data(m, bw);
        be->add(be, w, w, delta, (size_t)out * in);
        be->free(be, dat);
        be->free(be, delta);
        free(ah);
        free(at);
    }
    lora_detach(m);
    return ST_OK;
}
