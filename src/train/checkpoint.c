// checkpoint.c: saving, finding, pruning and resuming checkpoints.
#include "checkpoint.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "../core/log.h"
#include "../model/lora.h"
#include "../model/safetensors.h"

#include <dirent.h>
#include <unistd.h>
#include <string.h>

static const char *tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json"};

static Status write_generation_config(const char *dir, const Model *m, const char *src, Err *e) {
    char *dst = path_join(dir, "generation_config.json");
    char *from = src ? path_join(src, "generation_config.json") : NULL;
    Status st;
    if (from && file_exists(from)) {
        st = file_copy(from, dst, e);
    } else {
        const ModelConfig *cfg = &m->cfg;
        cJSON *g = cJSON_CreateObject();
        if (cfg->bos_token_id >= 0) cJSON_AddNumberToObject(g, "bos_token_id", cfg->bos_token_id);
        if (cfg->n_eos_token_ids == 1) {
            cJSON_AddNumberToObject(g, "eos_token_id", cfg->eos_token_ids[0]);
        } else if (cfg->n_eos_token_ids > 1) {
            cJSON *arr = cJSON_AddArrayToObject(g, "eos_token_id");
            for (int i = 0; i < cfg->n_eos_token_ids; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(cfg->eos_token_ids[i]));
        }
        if (cfg->pad_token_id >= 0) cJSON_AddNumberToObject(g, "pad_token_id", cfg->pad_token_id);
        char *text = cJSON_Print(g);
        cJSON_Delete(g);
        st = file_write_atomic(dst, text, strlen(text), e);
        free(text);
    }
    free(from);
    free(dst);
    return st;
}

Status checkpoint_write_model(const char *dir, const Model *m, DType save_dtype, const char *src, Err *e) {
    if (m->lora) {  // the adapter alone, in PEFT's format (fp32, whatever save_dtype says)
        TRY(lora_save(m, dir, src, e));
    } else {
        TRY(model_save(m, dir, save_dtype, e));
        TRY(write_generation_config(dir, m, src, e));
    }
    for (size_t i = 0; src && i < ARRAY_LEN(tokenizer_files); i++) {
        char *a = path_join(src, tokenizer_files[i]), *b = path_join(dir, tokenizer_files[i]);
        Status st = file_exists(a) ? file_copy(a, b, e) : ST_OK;
        free(a);
        free(b);
        TRY(st);
    }
    return ST_OK;
}

static Status write_optimizer(const char *path, const Model *m, const float *mh, const float *vh, int with_master,
                              Err *e) {
    Trainable tr = model_trainable(m);
    size_t n = tr.tt->n_params;
    float *ph = with_master ? xmalloc(n * sizeof(float)) : NULL;
    int nt = tr.tt->n, k = 0;
    StWriteTensor *wt = xcalloc((size_t)nt * 3, sizeof(StWriteTensor));
    char (*names)[160] = xcalloc((size_t)nt * 3, 160);
    for (int i = 0; i < nt; i++) {
        const TensorInfo *t = &tr.tt->t[i];
        if (ph) m->be->download(m->be, ph + t->goffset, (const char *)tr.params + t->offset, t->numel * sizeof(float));
        const float *src[3] = {mh + t->goffset, vh + t->goffset, ph ? ph + t->goffset : NULL};
        static const char *prefix[3] = {"exp_avg", "exp_avg_sq", "master"};
        for (int j = 0; j < 3; j++) {
            if (!src[j]) continue;
            snprintf(names[k], 160, "%s.%s", prefix[j], t->name);
            wt[k] = (StWriteTensor){.name = names[k], .dtype = DT_F32, .ndim = t->ndim, .data = src[j]};
            wt[k].shape[0] = t->shape[0];
            wt[k].shape[1] = t->shape[1];
            k++;
        }
    }
    Status st = st_write(path, wt, k, NULL, 0, e);
    free(wt), free(names), free(ph);
    return st;
}

static Status write_json(const char *path, cJSON *o, Err *e) {
    char *text = cJSON_Print(o);
    Status st = file_write_atomic(path, text, strlen(text), e);
    free(text);
    return st;
}

Status checkpoint_save(const char *output_dir, const Model *m, const float *opt_m, const float *opt_v,
                       const TrainState *s, DType save_dtype, const char *src, Err *e) {
    return checkpoint_save_ex(output_dir, m, opt_m, opt_v, s, save_dtype, src, NULL, NULL, e);
}

Status checkpoint_save_ex(const char *output_dir, const Model *m, const float *opt_m, const float *opt_v,
                          const TrainState *s, DType save_dtype, const char *src, CheckpointExtraFn extra, void *ctx,
                          Err *e) {
    int with_opt = opt_m && opt_v;
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", s->step);
    char *dir = path_join(output_dir, name), *marker = path_join(dir, CKPT_MARKER);
    Status st = ST_OK;
    if (file_exists(marker)) unlink(marker);  // rewriting a checkpoint: incomplete until done again
    st = checkpoint_write_model(dir, m, save_dtype, src, e);
    if (st == ST_OK && with_opt) {
        char *p = path_join(dir, "optimizer.safetensors");
        st = write_optimizer(p, m, opt_m, opt_v, save_dtype != DT_F32 && !m->lora, e);
        free(p);
    }
    if (st == ST_OK) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "global_step", s->step);
        cJSON_AddNumberToObject(j, "max_steps", s->total_steps);
        cJSON_AddNumberToObject(j, "steps_per_epoch", s->steps_per_epoch);
        cJSON_AddNumberToObject(j, "micro_batches_per_epoch", s->micro_batches);
        cJSON_AddNumberToObject(j, "per_device_train_batch_size", s->batch_size);
        cJSON_AddNumberToObject(j, "gradient_accumulation_steps", s->grad_accum);
        cJSON_AddNumberToObject(j, "world_size", MAX(1, s->world));
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
        cJSON_AddStringToObject(j, "seed", seed);
        cJSON_AddNumberToObject(j, "num_tokens", s->num_tokens);
        cJSON_AddNumberToObject(j, "epoch", s->steps_per_epoch ? (double)s->step / s->steps_per_epoch : 0);
        cJSON_AddBoolToObject(j, "has_optimizer_state", with_opt);
        char *p = path_join(dir, "trainer_state.json");
        st = write_json(p, j, e);
        free(p);
        if (st == ST_OK && extra) st = extra(ctx, dir, e);
        if (st == ST_OK) {
            cJSON *mk = cJSON_CreateObject();
            cJSON_AddNumberToObject(mk, "global_step", s->step);
            st = write_json(marker, mk, e);  // last: the checkpoint is complete from here on
            cJSON_Delete(mk);
        }
        cJSON_Delete(j);
    }
    if (st == ST_OK) st = dir_sync(dir, e);
    if (st == ST_OK) st = dir_sync(output_dir, e);
    if (st == ST_OK) log_info("saved %s", dir);
    free(dir);
    free(marker);
    return st;
}

int checkpoint_is_complete(const char *dir) {
    char *p = path_join(dir, CKPT_MARKER);
    int ok = file_exists(p);
    free(p);
    return ok;
}

// Steps of the complete checkpoint-N directories of output_dir, ascending.
static int list_checkpoints(const char *output_dir, int **steps) {
    DIR *d = opendir(output_dir);
    int n = 0, cap = 0;
    *steps = NULL;
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int step;
        char tail;
        if (sscanf(de->d_name, "checkpoint-%d%c", &step, &tail) != 1) continue;
        char *p = path_join(output_dir, de->d_name);
        int ok = checkpoint_is_complete(p);
        free(p);
        if (!ok) continue;
        if (n == cap) *steps = xrealloc(*steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(int));
        (*steps)[n++] = step;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
            int t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return n;
}

Status checkpoint_latest(const char *output_dir, char **path, Err *e) {
    int *steps, n = list_checkpoints(output_dir, &steps);
    if (n == 0) {
        free(steps);
        return err_set(e, ST_ENOTFOUND, "%s has no complete checkpoint-N directory to resume from", output_dir);
    }
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", steps[n - 1]);
    *path = path_join(output_dir, name);
    free(steps);
    return ST_OK;
}

Status checkpoint_prune(const char *output_dir, int limit, Err *e) {
    if (limit <= 0) return ST_OK;
    int *steps, n = list_checkpoints(output_dir, &steps);
    Status st = ST_OK;
    for (int i = 0; i < n - limit && st == ST_OK; i++) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint-%d", steps[i]);
        char *p = path_join(output_dir, name), *marker = path_join(p, CKPT_MARKER);
        unlink(marker);  // incomplete first, so a crash mid-removal never leaves a "complete" half
        st = dir_remove_tree(p, e);
        if (st == ST_OK) log_info("removed %s (save_total_limit %d)", p, limit);
        free(marker);
        free(p);
    }
    free(steps);
    return st;
}

// Tensor <prefix>.<name> of an optimizer file into dst: device memory, or host when m is NULL.
static Status upload_tensor(Model *m, const StSet *set, const char *prefix, const TensorInfo *t, float *dst,
                            const char *what, Err *e) {
    char name[200];
    snprintf(name, sizeof name, "%s.%s", prefix, t->name);
    const StTensor *x = st_find(set, name);
    if (!x) return err_set(e, ST_EINVAL, "%s: missing tensor %s", what, name);
    if (x->dtype != DT_F32 || x->numel != t->numel)
        return err_set(e, ST_EINVAL, "%s: tensor %s must be F32 with %zu elements", what, name, t->numel);
    if (m) m->be->upload(m->be, dst, x->data, t->numel * sizeof(float));
    else memcpy(dst, x->data, t->numel * sizeof(float));
    return ST_OK;
}

Status checkpoint_load(const char *dir, Model *m, float *opt_m, float *opt_v, TrainState *s, Err *e) {
    if (!dir_exists(dir)) return err_set(e, ST_ENOTFOUND, "--resume_from_checkpoint %s: no such directory", dir);
    if (!checkpoint_is_complete(dir))
        return err_set(e, ST_EINVAL, "%s is incomplete (no %s: the run stopped while saving it); resume from an earlier "
                                     "checkpoint", dir, CKPT_MARKER);
    char *sp = path_join(dir, "trainer_state.json");
    cJSON *j = NULL;
    Status st = json_parse_file(sp, &j, e);
    int has_opt = 0;
    long long v;
    if (st == ST_OK) st = json_get_bool(j, "has_optimizer_state", sp, 1, &has_opt, e);
    if (st == ST_OK && !has_opt)
        st = err_set(e, ST_EINVAL, "%s was saved with --save_only_model (no optimizer state); it cannot be resumed, "
                                   "only trained from as a new --model", dir);
    memset(s, 0, sizeof *s);
    if (st == ST_OK) st = json_get_int(j, "global_step", sp, 1, &v, e), s->step = (int)v;
    if (st == ST_OK) st = json_get_int(j, "max_steps", sp, 1, &v, e), s->total_steps = (int)v;
    if (st == ST_OK) st = json_get_int(j, "steps_per_epoch", sp, 1, &v, e), s->steps_per_epoch = (int)v;
    if (st == ST_OK) st = json_get_int(j, "micro_batches_per_epoch", sp, 1, &v, e), s->micro_batches = (int)v;
    if (st == ST_OK) st = json_get_int(j, "per_device_train_batch_size", sp, 1, &v, e), s->batch_size = (int)v;
    if (st == ST_OK) st = json_get_int(j, "gradient_accumulation_steps", sp, 1, &v, e), s->grad_accum = (int)v;
    v = 1;  // written by one process unless it says otherwise
    if (st == ST_OK) st = json_get_int(j, "world_size", sp, 0, &v, e), s->world = (int)v;
    const char *seed;
    if (st == ST_OK) st = json_get_string(j, "seed", sp, 1, &seed, e);
    if (st == ST_OK) s->seed = strtoull(seed, NULL, 10);
    if (st == ST_OK) st = json_get_double(j, "num_tokens", sp, 1, &s->num_tokens, e);
    cJSON_Delete(j);
    free(sp);
    TRY(st);
    char *op = path_join(dir, "optimizer.safetensors");
    StSet set;
    st = st_open(op, &set, e);
    if (st == ST_OK) {
        Trainable tr = model_trainable(m);
        int with_master = st_find(&set, "master.model.norm.weight") != NULL;
        const char *weights = m->lora ? "adapter_model.safetensors" : "model.safetensors";
        StSet model_set = {0};
        if (!with_master) {
            char *mp = path_join(dir, weights);
            st = st_open(mp, &model_set, e);
            free(mp);
        }
        for (int i = 0; i < tr.tt->n && st == ST_OK; i++) {
            const TensorInfo *t = &tr.tt->t[i];
            st = upload_tensor(NULL, &set, "exp_avg", t, opt_m + t->goffset, op, e);
            if (st == ST_OK) st = upload_tensor(NULL, &set, "exp_avg_sq", t, opt_v + t->goffset, op, e);
            float *p = (float *)((char *)tr.params + t->offset);
            if (st == ST_OK && with_master) st = upload_tensor(m, &set, "master", t, p, op, e);
            if (st == ST_OK && !with_master) {
                const StTensor *x = st_find(&model_set, t->name);
                if (!x || x->numel != t->numel || x->dtype != DT_F32)
                    st = err_set(e, ST_EINVAL, "%s/%s: %s must be F32 with %zu elements", dir, weights, t->name,
                                 t->numel);
                else
                    m->be->upload(m->be, p, x->data, t->numel * sizeof(float));
            }
        }
        if (!with_master) st_close(&model_set);
        st_close(&set);
    }
    free(op);
    return st;
}
