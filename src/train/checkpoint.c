// checkpoint.c: saving, finding, pruning and resuming checkpoints.
#include "checkpoint.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "../core/log.h"
#include "../gen/generate.h"
#include "../model/lora.h"
#include "../model/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string.h>

static const char *tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json"};

// The source model's generation_config.json, or the default one for the model's config.
static Status write_generation_config(const char *dir, const Model *m, const char *src, Err *e) {
    char *from = src ? path_join(src, "generation_config.json") : NULL;
    Status st;
    if (from && file_exists(from)) {
        char *dst = path_join(dir, "generation_config.json");
        st = file_copy(from, dst, e);
        free(dst);
    } else {
        st = gen_config_write_default(&m->cfg, dir, e);
    }
    free(from);
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

// Where the optimizer file's tensors come from: entry i of the trained table (the model's, or its
// adapter's), one of the moments (host or device) or the fp32 master weights (device; full
// training only).
// Tensors the checkpoint holds in another layout (tensors.h hf_xpose) are written in it, as
// model.safetensors has them, from a host copy of the whole tensor.
typedef struct OptFill {
    const Model *m;
    const CkptMoments *mo;
    int *tensor, *which;  // (n written) table index; 0 exp_avg, 1 exp_avg_sq, 2 master
    float *own;           // host copy of written tensor `own_i` (hf_xpose tensors only)
    size_t own_cap;
    int own_i;
} OptFill;

// Written tensor i's fp32 data in the table's layout, from the moments or the master weights.
static void opt_source(OptFill *f, int i, size_t begin, size_t count, float *dst) {
    const TensorInfo *t = &model_trainable(f->m).tt->t[f->tensor[i]];
    size_t bytes = count * sizeof(float);
    int w = f->which[i];
    if (w == 2) {
        f->m->be->download(f->m->be, dst, (const char *)f->m->data[f->tensor[i]] + begin * sizeof(float), bytes);
        return;
    }
    const float *src = (w == 0 ? f->mo->m : f->mo->v) + t->goffset + begin;
    if (f->mo->on_device) f->m->be->download(f->m->be, dst, src, bytes);
    else memcpy(dst, src, bytes);
}

static Status opt_fill(void *ctx, int i, size_t begin, size_t count, void *dst, Err *e) {
    OptFill *f = ctx;
    const TensorInfo *t = &model_trainable(f->m).tt->t[f->tensor[i]];
    if (t->hf_xpose) {
        if (f->own_i != i) {
            if (f->own_cap < t->numel) free(f->own), f->own = xmalloc((f->own_cap = t->numel) * sizeof(float));
            opt_source(f, i, 0, t->numel, f->own);
            f->own_i = i;
        }
        for (size_t j = 0; j < count; j++) ((float *)dst)[j] = f->own[tensors_hf_index(t, begin + j)];
        return ST_OK;
    }
    opt_source(f, i, begin, count, dst);
    return ST_OK;
}

static Status write_optimizer(const char *path, const Model *m, const CkptMoments *mo, int with_master, Err *e) {
    const TensorTable *tt = model_trainable(m).tt;
    int nt = tt->n, k = 0;
    StWriteTensor *wt = xcalloc((size_t)nt * 3, sizeof(StWriteTensor));
    char (*names)[160] = xcalloc((size_t)nt * 3, 160);
    OptFill f = {.m = m, .mo = mo, .tensor = xcalloc((size_t)nt * 3, sizeof(int)),
                 .which = xcalloc((size_t)nt * 3, sizeof(int)), .own_i = -1};
    static const char *prefix[3] = {"exp_avg", "exp_avg_sq", "master"};
    for (int i = 0; i < nt; i++) {
        const TensorInfo *t = &tt->t[i];
        for (int j = 0; j < 3; j++) {
            if (j == 2 && !with_master) continue;
            snprintf(names[k], 160, "%s.%s", prefix[j], t->name);
            wt[k] = (StWriteTensor){.name = names[k], .dtype = DT_F32};
            int64_t hs[3];
            tensors_hf_shape(t, &wt[k].ndim, hs);
            for (int d = 0; d < wt[k].ndim; d++) wt[k].shape[d] = hs[d];
            f.tensor[k] = i, f.which[k] = j;
            k++;
        }
    }
    Status st = st_write_stream(path, wt, k, opt_fill, &f, NULL, 0, e);
    free(wt), free(names), free(f.tensor), free(f.which), free(f.own);
    return st;
}

static Status write_json(const char *path, cJSON *o, Err *e) {
    char *text = cJSON_Print(o);
    Status st = file_write_atomic(path, text, strlen(text), e);
    free(text);
    return st;
}

// The metrics lines of the run so far (output_dir/metrics.jsonl, steps <= step) as Trainer's
// log_history array.
static cJSON *log_history(const char *metrics_path, int step) {
    cJSON *arr = cJSON_CreateArray();
    char *text;
    size_t len;
    if (!metrics_path || file_read_all(metrics_path, &text, &len, NULL) != ST_OK) return arr;
    for (size_t p = 0; p < len;) {
        size_t q = p;
        while (q < len && text[q] != '\n') q++;
        cJSON *o = q > p ? cJSON_ParseWithLength(text + p, q - p) : NULL;
        const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        if (cJSON_IsNumber(s) && s->valuedouble <= step) cJSON_AddItemToArray(arr, o);
        else cJSON_Delete(o);
        p = q + 1;
    }
    free(text);
    return arr;
}

// trainer_state.json: transformers' TrainerState fields (so tools that read it work), then what
// resuming checks besides them.
static cJSON *trainer_state_json(const TrainState *s, int with_opt) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNullToObject(j, "best_global_step");
    cJSON_AddNullToObject(j, "best_metric");
    cJSON_AddNullToObject(j, "best_model_checkpoint");
    cJSON_AddNumberToObject(j, "epoch", s->steps_per_epoch ? (double)s->step / s->steps_per_epoch : 0);
    cJSON_AddNumberToObject(j, "eval_steps", s->eval_steps);
    cJSON_AddNumberToObject(j, "global_step", s->step);
    cJSON_AddBoolToObject(j, "is_hyper_param_search", 0);
    cJSON_AddBoolToObject(j, "is_local_process_zero", 1);
    cJSON_AddBoolToObject(j, "is_world_process_zero", 1);
    cJSON_AddItemToObject(j, "log_history", log_history(s->metrics_path, s->step));
    cJSON_AddNumberToObject(j, "logging_steps", s->logging_steps);
    cJSON_AddNumberToObject(j, "max_steps", s->total_steps);
    cJSON_AddNumberToObject(j, "num_input_tokens_seen", s->num_tokens);
    cJSON_AddNumberToObject(j, "num_train_epochs",
                            s->steps_per_epoch ? ceil((double)s->total_steps / s->steps_per_epoch) : 0);
    cJSON_AddNumberToObject(j, "save_steps", s->save_steps);
    cJSON_AddItemToObject(j, "stateful_callbacks", cJSON_CreateObject());
    cJSON_AddNumberToObject(j, "total_flos", 0);
    cJSON_AddNumberToObject(j, "train_batch_size", s->batch_size);
    cJSON_AddNullToObject(j, "trial_name");
    cJSON_AddNullToObject(j, "trial_params");
    // still's own: what resuming checks
    cJSON_AddNumberToObject(j, "steps_per_epoch", s->steps_per_epoch);
    cJSON_AddNumberToObject(j, "micro_batches_per_epoch", s->micro_batches);
    cJSON_AddNumberToObject(j, "per_device_train_batch_size", s->batch_size);
    cJSON_AddNumberToObject(j, "gradient_accumulation_steps", s->grad_accum);
    cJSON_AddNumberToObject(j, "world_size", MAX(1, s->world));
    char seed[32];  // a JSON number with every digit (a double would round seeds above 2^53)
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    cJSON_AddRawToObject(j, "seed", seed);
    cJSON_AddNumberToObject(j, "num_tokens", s->num_tokens);
    cJSON_AddBoolToObject(j, "has_optimizer_state", with_opt);
    return j;
}

// Bytes a checkpoint takes: the weights in save_dtype, the optimizer file, the copied files.
static uint64_t checkpoint_bytes(const Model *m, DType save_dtype, int with_opt, const char *src) {
    uint64_t b = (uint64_t)m->tt.n_params * dtype_size(save_dtype);
    if (with_opt) b += (uint64_t)m->tt.n_params * sizeof(float) * (save_dtype != DT_F32 ? 3 : 2);
    if (m->lora) b = (uint64_t)m->lora->tt.n_params * sizeof(float) * (with_opt ? 3 : 1);  // the adapter alone
    b += (uint64_t)m->tt.n * 3 * 256 + (1u << 20);  // headers, config and state files
    for (size_t i = 0; src && i < ARRAY_LEN(tokenizer_files); i++) {
        char *a = path_join(src, tokenizer_files[i]);
        struct stat sb;
        if (stat(a, &sb) == 0) b += (uint64_t)sb.st_size;
        free(a);
    }
    return b;
}

Status checkpoint_check_space(const char *output_dir, const Model *m, DType save_dtype, int with_opt,
                              const char *src, Err *e) {
    uint64_t need = checkpoint_bytes(m, save_dtype, with_opt, src), avail;
    TRY(dir_free_bytes(output_dir, &avail, e));
    if (avail >= need) return ST_OK;
    char a[32], b[32];
    fmt_bytes(a, sizeof a, (double)need);
    fmt_bytes(b, sizeof b, (double)avail);
    return err_set(e, ST_EIO, "%s: not enough disk space for a checkpoint: it needs %llu bytes (%s), %llu bytes (%s) "
                              "are free", output_dir, (unsigned long long)need, a, (unsigned long long)avail, b);
}

Status checkpoint_save(const char *output_dir, const Model *m, const float *opt_m, const float *opt_v,
                       const TrainState *s, DType save_dtype, const char *src, Err *e) {
    CkptMoments mo = {opt_m, opt_v, 0};
    return checkpoint_save_ex(output_dir, m, opt_m && opt_v ? &mo : NULL, s, save_dtype, src, NULL, NULL, e);
}

Status checkpoint_save_ex(const char *output_dir, const Model *m, const CkptMoments *mo, const TrainState *s,
                          DType save_dtype, const char *src, CheckpointExtraFn extra, void *ctx, Err *e) {
    int with_opt = mo != NULL;
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%d", s->step);
    TRY(checkpoint_check_space(output_dir, m, save_dtype, with_opt, src, e));
    char *dir = path_join(output_dir, name), *marker = path_join(dir, CKPT_MARKER);
    Status st = ST_OK;
    if (file_exists(marker)) unlink(marker);  // rewriting a checkpoint: incomplete until done again
    st = checkpoint_write_model(dir, m, save_dtype, src, e);
    if (st == ST_OK && with_opt) {
        char *p = path_join(dir, "optimizer.safetensors");
        st = write_optimizer(p, m, mo, save_dtype != DT_F32 && !m->lora, e);
        free(p);
    }
    if (st == ST_OK) {
        cJSON *j = trainer_state_json(s, with_opt);
        char *p = path_join(dir, "trainer_state.json");
        st = write_json(p, j, e);
        free(p);
        cJSON_Delete(j);
        if (st == ST_OK && extra) st = extra(ctx, dir, e);
        if (st == ST_OK) {
            cJSON *mk = cJSON_CreateObject();
            cJSON_AddNumberToObject(mk, "global_step", s->step);
            st = write_json(marker, mk, e);  // last: the checkpoint is complete from here on
            cJSON_Delete(mk);
        }
    }
    if (st == ST_OK) st = dir_sync(dir, e);
    if (st == ST_OK) st = dir_sync(output_dir, e);
    if (st == ST_OK) {
        log_info("saved %s", dir);
    } else if (dir_exists(dir)) {  // never leave half a checkpoint behind
        unlink(marker);
        Err ignore = {0};
        if (dir_remove_tree(dir, &ignore) == ST_OK) log_warn("removed the incomplete %s", dir);
        else log_warn("could not remove the incomplete %s: %s", dir, ignore.msg);
    }
    free(dir);
    free(marker);
    return st;
}

// dst/name as a hard link to src/name (atomically replacing it), else a copy.
static Status link_or_copy(const char *src_dir, const char *dst_dir, const char *name, Err *e) {
    char *a = path_join(src_dir, name), *b = path_join(dst_dir, name);
    Status st = ST_OK;
    if (!file_exists(a)) goto done;
    StrBuf sb = {0};
    sb_printf(&sb, "%s.tmp.%d", b, (int)getpid());
    char *tmp = sb_take(&sb);
    unlink(tmp);
    if (link(a, tmp) == 0) {
        if (rename(tmp, b) != 0) {
            st = err_set(e, ST_EIO, "%s: rename failed: %s", b, strerror(errno));
            unlink(tmp);
        }
    } else {
        st = file_copy(a, b, e);  // a filesystem without hard links
    }
    free(tmp);
done:
    free(a);
    free(b);
    return st;
}

Status checkpoint_publish(const char *ckpt_dir, const char *output_dir, Err *e) {
    static const char *model_files[] = {"model.safetensors", "config.json", "generation_config.json",
                                        "adapter_model.safetensors", "adapter_config.json"};
    for (size_t i = 0; i < ARRAY_LEN(model_files); i++) TRY(link_or_copy(ckpt_dir, output_dir, model_files[i], e));
    for (size_t i = 0; i < ARRAY_LEN(tokenizer_files); i++) TRY(link_or_copy(ckpt_dir, output_dir, tokenizer_files[i], e));
    return dir_sync(output_dir, e);
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

// The "seed" number of trainer_state.json read from its text: every digit of a 64-bit seed (a
// parsed JSON number is a double).
static uint64_t seed_of(const char *path) {
    char *text;
    if (file_read_all(path, &text, NULL, NULL) != ST_OK) return 0;
    const char *p = strstr(text, "\"seed\"");
    uint64_t v = 0;
    if (p) {
        p = strchr(p + 6, ':');
        if (p) v = strtoull(p + 1, NULL, 10);
    }
    free(text);
    return v;
}

// The model being restored is a part of the checkpoint's (tensor parallelism): its config, the
// part's runs, the whole model's table.
typedef struct CkptPart {
    const ModelPart *part;
    const ModelConfig *lc;
    const TensorTable *whole;
} CkptPart;

// The checkpoint's tensor t is (the whole one of a part's).
static const TensorInfo *whole_of(const CkptPart *cp, const TensorInfo *t) {
    const TensorInfo *w = cp ? tensors_find(cp->whole, t->name) : t;
    CHECK_MSG(w, "tensor %s: not in the whole model", t->name);
    return w;
}

typedef struct PartCopy {
    const float *whole;
    float *part;
} PartCopy;

static void part_copy(void *ctx, size_t whole_at, size_t part_at, size_t n) {
    PartCopy *c = ctx;
    memcpy(c->part + part_at, c->whole + whole_at, n * sizeof(float));
}

// fp32 data of t in the checkpoint's layout (src; of the whole tensor with cp) into dst in the
// table's: device memory, or host when m is NULL. A part's elements go through a host copy of it.
static void upload_own(Model *m, const CkptPart *cp, const TensorInfo *t, float *dst, const void *src) {
    const TensorInfo *w = whole_of(cp, t);
    float *own = NULL, *part = NULL;
    if (w->hf_xpose) tensors_from_hf(w, own = xmalloc(w->numel * sizeof(float)), src), src = own;
    if (cp) {
        PartCopy c = {src, part = xmalloc(t->numel * sizeof(float))};
        cp->part->runs(cp->part, cp->lc, w, t, part_copy, &c);
        src = part;
    }
    if (m) m->be->upload(m->be, dst, src, t->numel * sizeof(float));
    else memcpy(dst, src, t->numel * sizeof(float));
    free(own);
    free(part);
}

// Tensor <prefix>.<name> of an optimizer file into dst: device memory, or host when m is NULL.
static Status upload_tensor(Model *m, const CkptPart *cp, const StSet *set, const char *prefix, const TensorInfo *t,
                            float *dst, const char *what, Err *e) {
    char name[160];
    snprintf(name, sizeof name, "%s.%s", prefix, t->name);
    const StTensor *x = st_find(set, name);
    size_t n = whole_of(cp, t)->numel;
    if (!x) return err_set(e, ST_EINVAL, "%s: missing tensor %s", what, name);
    if (x->dtype != DT_F32 || x->numel != n)
        return err_set(e, ST_EINVAL, "%s: tensor %s must be F32 with %zu elements", what, name, n);
    upload_own(m, cp, t, dst, x->data);
    st_release(set, x, 0, x->nbytes);  // copied: the file's pages need not stay resident beside it
    return ST_OK;
}

Status checkpoint_load(const char *dir, Model *m, float *opt_m, float *opt_v, TrainState *s, Err *e) {
    return checkpoint_load_part(dir, m, NULL, NULL, opt_m, opt_v, s, e);
}

Status checkpoint_load_part(const char *dir, Model *m, const ModelPart *part, const TensorTable *whole, float *opt_m,
                            float *opt_v, TrainState *s, Err *e) {
    CkptPart cpart = {part, &m->cfg, whole}, *cp = part ? &cpart : NULL;
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
    const cJSON *seed = j ? cJSON_GetObjectItemCaseSensitive(j, "seed") : NULL;
    if (st == ST_OK && cJSON_IsString(seed)) s->seed = strtoull(seed->valuestring, NULL, 10);  // older checkpoints
    else if (st == ST_OK && cJSON_IsNumber(seed)) s->seed = seed_of(sp);
    else if (st == ST_OK) st = err_set(e, ST_EINVAL, "%s: \"seed\" must be a number", sp);
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
            st = upload_tensor(NULL, cp, &set, "exp_avg", t, opt_m + t->goffset, op, e);
            if (st == ST_OK) st = upload_tensor(NULL, cp, &set, "exp_avg_sq", t, opt_v + t->goffset, op, e);
            float *p = (float *)((char *)tr.params + t->offset);
            if (st == ST_OK && with_master) st = upload_tensor(m, cp, &set, "master", t, p, op, e);
            if (st == ST_OK && !with_master) {
                const StTensor *x = st_find(&model_set, t->name);
                size_t n = whole_of(cp, t)->numel;
                if (!x || x->numel != n || x->dtype != DT_F32)
                    st = err_set(e, ST_EINVAL, "%s/%s: %s must be F32 with %zu elements", dir, weights, t->name, n);
                else
                    upload_own(m, cp, t, p, x->data), st_release(&model_set, x, 0, x->nbytes);
            }
        }
        if (!with_master) st_close(&model_set);
        st_close(&set);
    }
    free(op);
    return st;
}
