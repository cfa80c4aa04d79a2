// generate.c: the generation engine (see generate.h): rows in fixed-size batches, left-padded
// chunked prefill into the decode plan's static KV cache, then one token per row per step with
// the sampler on the device and the bookkeeping on the host.
#include "generate.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "../core/log.h"
#include "../core/rng.h"
#include "../model/qwen3.h"
#include "bans.h"
#include "sample_shard.h"

#include <math.h>
#include <string.h>
#include <time.h>

const char *gen_finish_name(GenFinish f) {
    switch (f) {
    case GEN_FINISH_EOS: return "eos";
    case GEN_FINISH_STOP: return "stop";
    case GEN_FINISH_LENGTH: return "length";
    default: return "none";
    }
}

void gen_config_default(GenConfig *c) {
    memset(c, 0, sizeof *c);
    c->max_new_tokens = 256;
    c->temperature = 1.0f;
    c->top_k = 50;
    c->top_p = 1.0;
    c->repetition_penalty = 1.0f;
    c->pad_token_id = -1;
    c->num_return_sequences = 1;
    c->seed = 42;
    c->batch_size = 8;
    c->pad_to_multiple_of = 0;
    c->prefill_chunk_size = 512;
}

Status gen_config_add_eos(GenConfig *c, int32_t id, Err *e) {
    if (id < 0) return ST_OK;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] == id) return ST_OK;
    if (c->n_eos >= GEN_MAX_EOS) return err_set(e, ST_EINVAL, "more than %d EOS ids", GEN_MAX_EOS);
    c->eos[c->n_eos++] = id;
    return ST_OK;
}

// An int field of generation_config.json, when present and not null.
static Status opt_int(const cJSON *g, const char *key, const char *path, int *out, Err *e) {
    if (!json_has(g, key)) return ST_OK;
    long long v;
    TRY(json_get_int(g, key, path, 1, &v, e));
    *out = (int)v;
    return ST_OK;
}

static Status opt_float(const cJSON *g, const char *key, const char *path, double *out, Err *e) {
    if (!json_has(g, key)) return ST_OK;
    return json_get_double(g, key, path, 1, out, e);
}

static Status json_id(const cJSON *v, const char *path, const char *key, int32_t *out, Err *e) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > INT32_MAX)
        return err_set(e, ST_EINVAL, "%s: %s: expected token ids (integers >= 0)", path, key);
    *out = (int32_t)v->valuedouble;
    return ST_OK;
}

// A list of ids (or null) of generation_config.json into out (GEN_MAX_LIST).
static Status id_list(const cJSON *g, const char *key, const char *path, int32_t *out, int *n, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, key);
    if (!v || cJSON_IsNull(v)) return ST_OK;
    if (!cJSON_IsArray(v)) return err_set(e, ST_EINVAL, "%s: %s: expected a list of token ids", path, key);
    if (cJSON_GetArraySize(v) > GEN_MAX_LIST)
        return err_set(e, ST_EINVAL, "%s: %s: more than %d ids", path, key, GEN_MAX_LIST);
    *n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) TRY(json_id(it, path, key, &out[(*n)++], e));
    return ST_OK;
}

// bad_words_ids: a list of non-empty id lists (or null).
static Status word_list(const cJSON *g, const char *path, GenConfig *c, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, "bad_words_ids");
    if (!v || cJSON_IsNull(v)) return ST_OK;
    if (!cJSON_IsArray(v)) return err_set(e, ST_EINVAL, "%s: bad_words_ids: expected a list of id lists", path);
    int k = 0, w = 0;
    c->cfg_bad_words_off[0] = 0;
    const cJSON *word;
    cJSON_ArrayForEach(word, v) {
        if (!cJSON_IsArray(word) || cJSON_GetArraySize(word) == 0)
            return err_set(e, ST_EINVAL, "%s: bad_words_ids[%d]: expected a non-empty list of token ids", path, w);
        if (w >= GEN_MAX_LIST || k + cJSON_GetArraySize(word) > GEN_MAX_LIST)
            return err_set(e, ST_EINVAL, "%s: bad_words_ids: more than %d ids", path, GEN_MAX_LIST);
        const cJSON *it;
        cJSON_ArrayForEach(it, word) TRY(json_id(it, path, "bad_words_ids", &c->cfg_bad_words[k++], e));
        c->cfg_bad_words_off[++w] = k;
    }
    c->n_cfg_bad_words = w;
    return ST_OK;
}

static Status load_generation_config(GenConfig *c, const cJSON *g, const char *path, Err *e) {
    if (json_has(g, "do_sample")) TRY(json_get_bool(g, "do_sample", path, 1, &c->do_sample, e));
    double t = c->temperature, tp = c->top_p, mp = c->min_p, rp = c->repetition_penalty;
    TRY(opt_float(g, "temperature", path, &t, e));
    TRY(opt_float(g, "top_p", path, &tp, e));
    TRY(opt_float(g, "min_p", path, &mp, e));
    TRY(opt_float(g, "repetition_penalty", path, &rp, e));
    c->temperature = (float)t, c->top_p = tp, c->min_p = (float)mp, c->repetition_penalty = (float)rp;
    TRY(opt_int(g, "top_k", path, &c->top_k, e));
    TRY(opt_int(g, "no_repeat_ngram_size", path, &c->no_repeat_ngram_size, e));
    if (json_has(g, "max_new_tokens")) {  // wins over max_length (_prepare_generated_length)
        TRY(opt_int(g, "max_new_tokens", path, &c->max_new_tokens, e));
        c->max_length = 0;
    } else if (json_has(g, "max_length")) {
        int ml = 0;
        TRY(opt_int(g, "max_length", path, &ml, e));
        if (ml < 1) return err_set(e, ST_EINVAL, "%s: max_length %d: must be positive", path, ml);
        // GenerationConfig's default 20 counts new tokens (generate() adds the input length)
        if (ml == 20) c->max_new_tokens = 20, c->max_length = 0;
        else c->max_length = ml;
    }
    TRY(opt_int(g, "min_new_tokens", path, &c->min_new_tokens, e));
    TRY(opt_int(g, "min_length", path, &c->min_length, e));
    TRY(id_list(g, "suppress_tokens", path, c->suppress, &c->n_suppress, e));
    TRY(id_list(g, "begin_suppress_tokens", path, c->begin_suppress, &c->n_begin_suppress, e));
    TRY(word_list(g, path, c, e));
    int pad = c->pad_token_id;
    TRY(opt_int(g, "pad_token_id", path, &pad, e));
    c->pad_token_id = pad;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(g, "eos_token_id");
    if (eos && !cJSON_IsNull(eos)) {
        c->n_eos = 0;
        if (cJSON_IsNumber(eos)) return gen_config_add_eos(c, (int32_t)eos->valuedouble, e);
        if (!cJSON_IsArray(eos)) return err_set(e, ST_EINVAL, "%s: eos_token_id: expected an integer or a list", path);
        const cJSON *it;
        cJSON_ArrayForEach(it, eos) {
            if (!cJSON_IsNumber(it)) return err_set(e, ST_EINVAL, "%s: eos_token_id: expected integers", path);
            TRY(gen_config_add_eos(c, (int32_t)it->valuedouble, e));
        }
    }
    return ST_OK;
}

// The file's id lists against the model's vocabulary, naming the file.
static Status check_lists(const GenConfig *c, const char *path, int V, Err *e) {
    struct {
        const char *key;
        const int32_t *ids;
        int n;
    } lists[] = {{"bad_words_ids", c->cfg_bad_words, c->cfg_bad_words_off[c->n_cfg_bad_words]},
                 {"suppress_tokens", c->suppress, c->n_suppress},
                 {"begin_suppress_tokens", c->begin_suppress, c->n_begin_suppress}};
    for (size_t l = 0; l < ARRAY_LEN(lists); l++)
        for (int i = 0; i < lists[l].n; i++)
            if (lists[l].ids[i] >= V)
                return err_set(e, ST_EINVAL, "%s: %s: id %d is outside the vocabulary [0, %d)", path, lists[l].key,
                               lists[l].ids[i], V);
    return ST_OK;
}

Status gen_config_load(GenConfig *c, const char *model_dir, const ModelConfig *mc, Err *e) {
    if (mc) {
        for (int i = 0; i < mc->n_eos_token_ids; i++) TRY(gen_config_add_eos(c, mc->eos_token_ids[i], e));
        if (mc->pad_token_id >= 0) c->pad_token_id = mc->pad_token_id;
    }
    if (!model_dir) return ST_OK;
    char *path = path_join(model_dir, "generation_config.json");
    Status st = ST_OK;
    if (file_exists(path)) {
        cJSON *g = NULL;
        st = json_parse_file(path, &g, e);
        if (st == ST_OK && !cJSON_IsObject(g)) st = err_set(e, ST_EINVAL, "%s: expected a JSON object", path);
        if (st == ST_OK) st = load_generation_config(c, g, path, e);
        if (st == ST_OK && mc) st = check_lists(c, path, mc->vocab_size, e);
        cJSON_Delete(g);
    }
    free(path);
    return st;
}

Status gen_config_write_default(const ModelConfig *cfg, const char *dir, Err *e) {
    cJSON *g = cJSON_CreateObject();
    if (cfg->bos_token_id >= 0) cJSON_AddNumberToObject(g, "bos_token_id", cfg->bos_token_id);
    if (cfg->n_eos_token_ids == 1) {
        cJSON_AddNumberToObject(g, "eos_token_id", cfg->eos_token_ids[0]);
    } else if (cfg->n_eos_token_ids > 1) {
        cJSON *arr = cJSON_AddArrayToObject(g, "eos_token_id");
        for (int i = 0; i < cfg->n_eos_token_ids; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(cfg->eos_token_ids[i]));
    }
    if (cfg->pad_token_id >= 0) cJSON_AddNumberToObject(g, "pad_token_id", cfg->pad_token_id);
    cJSON_AddFalseToObject(g, "do_sample");
    char *text = cJSON_Print(g);
    cJSON_Delete(g);
    char *path = path_join(dir, "generation_config.json");
    Status st = file_write_atomic(path, text, strlen(text), e);
    free(path);
    free(text);
    return st;
}

Status gen_config_check(const GenConfig *c, int V, Err *e) {
    if (c->max_new_tokens < 1) return err_set(e, ST_EINVAL, "max_new_tokens %d: must be at least 1", c->max_new_tokens);
    if (c->min_new_tokens < 0) return err_set(e, ST_EINVAL, "min_new_tokens %d: must be >= 0", c->min_new_tokens);
    if (c->min_length < 0) return err_set(e, ST_EINVAL, "min_length %d: must be >= 0", c->min_length);
    if (c->max_length < 0) return err_set(e, ST_EINVAL, "max_length %d: must be >= 0", c->max_length);
    if (c->num_return_sequences < 1)
        return err_set(e, ST_EINVAL, "num_return_sequences %d: must be at least 1", c->num_return_sequences);
    if (c->do_sample && !(c->temperature > 0))
        return err_set(e, ST_EINVAL, "temperature %g: must be > 0 when sampling (use do_sample false for greedy)",
                       c->temperature);
    if (!(c->top_p >= 0 && c->top_p <= 1)) return err_set(e, ST_EINVAL, "top_p %g: must be in [0, 1]", c->top_p);
    if (!(c->min_p >= 0 && c->min_p <= 1)) return err_set(e, ST_EINVAL, "min_p %g: must be in [0, 1]", c->min_p);
    if (!(c->repetition_penalty > 0))
        return err_set(e, ST_EINVAL, "repetition_penalty %g: must be > 0", c->repetition_penalty);
    if (c->no_repeat_ngram_size < 0)
        return err_set(e, ST_EINVAL, "no_repeat_ngram_size %d: must be >= 0", c->no_repeat_ngram_size);
    if (c->prefill_chunk_size < 1)
        return err_set(e, ST_EINVAL, "prefill_chunk_size %d: must be positive", c->prefill_chunk_size);
    if (c->pad_to_multiple_of < 0)
        return err_set(e, ST_EINVAL, "pad_to_multiple_of %d: must be >= 0 (0: the backend's prefill buckets)",
                       c->pad_to_multiple_of);
    if (c->pad_to_multiple_of > 1 && c->prefill_chunk_size % c->pad_to_multiple_of)
        return err_set(e, ST_EINVAL, "prefill_chunk_size %d: must be a multiple of pad_to_multiple_of %d",
                       c->prefill_chunk_size, c->pad_to_multiple_of);
    if (c->max_cache_len < 0) return err_set(e, ST_EINVAL, "max_cache_len %d: must be >= 0", c->max_cache_len);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] < 0 || c->eos[i] >= V)
            return err_set(e, ST_EINVAL, "EOS id %d is outside the vocabulary [0, %d)", c->eos[i], V);
    if (c->pad_token_id >= V)
        return err_set(e, ST_EINVAL, "pad_token_id %d is outside the vocabulary [0, %d)", c->pad_token_id, V);
    for (int w = 0; w < c->n_bad_words; w++)
        for (int i = c->bad_words_off[w]; i < c->bad_words_off[w + 1]; i++)
            if (c->bad_words[i] < 0 || c->bad_words[i] >= V)
                return err_set(e, ST_EINVAL, "bad word %d: id %d is outside the vocabulary [0, %d)", w,
                               c->bad_words[i], V);
    for (int i = 0; i < c->cfg_bad_words_off[c->n_cfg_bad_words]; i++)
        if (c->cfg_bad_words[i] >= V)
            return err_set(e, ST_EINVAL, "bad_words_ids: id %d is outside the vocabulary [0, %d)", c->cfg_bad_words[i], V);
    for (int i = 0; i < c->n_suppress; i++)
        if (c->suppress[i] >= V)
            return err_set(e, ST_EINVAL, "suppress_tokens: id %d is outside the vocabulary [0, %d)", c->suppress[i], V);
    for (int i = 0; i < c->n_begin_suppress; i++)
        if (c->begin_suppress[i] >= V)
            return err_set(e, ST_EINVAL, "begin_suppress_tokens: id %d is outside the vocabulary [0, %d)",
                           c->begin_suppress[i], V);
    return ST_OK;
}

// Prefill schedule of a batch whose longest prompt has n tokens: the batch is left-padded to P
// slots, run as a first chunk of *first slots, then chunks of prefill_chunk_size. With
// pad_to_multiple_of > 0, P = n rounded up to it (one granule, as a user asks for); with 0, the
// remainder that the full chunks leave is rounded up to the smallest bucket (the backend's
// smallest chunk doubled) that holds it, so a 5-token prompt computes one 16-slot chunk on cpu.
static int prefill_schedule(const GenConfig *c, int bucket, int n, int *first) {
    int chunk = c->prefill_chunk_size;
    if (c->pad_to_multiple_of > 0) {
        int P = round_up(n, c->pad_to_multiple_of);
        *first = P - (P - 1) / chunk * chunk;
        return P;
    }
    int full = (n - 1) / chunk, rem = n - full * chunk, b = bucket > 0 ? bucket : 128;
    while (b < rem) b *= 2;
    *first = MIN(b, chunk);
    return *first + full * chunk;
}

int gen_prefill_schedule(const GenConfig *cfg, const Backend *be, int n, int *first) {
    return prefill_schedule(cfg, be->prefill_bucket, n, first);
}

int gen_padded_len(const GenConfig *cfg, const Backend *be, int n) {
    int first;
    return prefill_schedule(cfg, be->prefill_bucket, n, &first);
}

int gen_cache_len(const GenConfig *cfg, const Backend *be, const int *lens, int n_prompts) {
    if (cfg->max_cache_len > 0) return cfg->max_cache_len;
    int longest = 0;
    for (int i = 0; i < n_prompts; i++) longest = MAX(longest, lens[i]);
    return round_up(gen_padded_len(cfg, be, longest) + cfg->max_new_tokens, 128);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// One row of a batch: a (prompt, sequence) pair, or an idle filler (prompt_index < 0).
typedef struct Row {
    int prompt_index, seq_index;
    int len;          // real prompt tokens
    int32_t *hist;    // (len + max_new_tokens) prompt then generated ids: what bans look at
    GenSeq *out;
    int live;
} Row;

typedef struct Batch {
    Model *m;
    const GenConfig *cfg;
    Row *rows;        // (B)
    int B, S, V;
    Plan *dp;         // the decode plan: KV cache, logits, sampler buffers
    int sampling, rep, want_lp;
    int32_t pad;
    int rows_done, rows_total;  // of the call, before this batch (progress)
    // host scratch
    int32_t *h_ids, *h_pos, *h_seen, *h_mask, *h_ban, *h_next;  // (B*P) x3, (B*S), (B*ban_cap), (B)
    float *h_lp;       // (B)
    double *h_u;       // (B)
    int *h_counts;     // (B) bans per row this step
    SampleParams *h_sp;  // (B) the sampler's parameters per row
} Batch;

// Bans of one row for this step (no_repeat_ngram, bad words, min_length / min_new_tokens,
// suppress_tokens, begin_suppress_tokens) into out (cap).
static int row_bans(const Batch *bt, const Row *r, int32_t *out, int cap) {
    const GenConfig *c = bt->cfg;
    int n = 0, cur = r->len + r->out->n;
    bans_no_repeat_ngram(out, cap, &n, r->hist, cur, c->no_repeat_ngram_size);
    if (c->bad_words && c->n_bad_words)
        bans_bad_words(out, cap, &n, r->hist, cur, c->bad_words, c->bad_words_off, c->n_bad_words, c->eos, c->n_eos);
    else if (!c->bad_words && c->n_cfg_bad_words)
        bans_bad_words(out, cap, &n, r->hist, cur, c->cfg_bad_words, c->cfg_bad_words_off, c->n_cfg_bad_words, c->eos,
                       c->n_eos);
    // min_new_tokens replaces min_length (generate() sets min_length = min_new_tokens + input length)
    bans_min_tokens(out, cap, &n, cur, r->len, c->min_new_tokens > 0 ? 0 : c->min_length, c->min_new_tokens, c->eos,
                    c->n_eos);
    bans_suppress(out, cap, &n, c->suppress, c->n_suppress);
    if (r->out->n == 0) bans_suppress(out, cap, &n, c->begin_suppress, c->n_begin_suppress);
    return n;
}

// Upload this step's ban lists (B,K) and uniforms; returns K through *K_out.
static Status step_inputs(Batch *bt, int step, int *K_out, Err *e) {
    Backend *be = bt->m->be;
    int B = bt->B, cap = bt->dp->ban_cap, K = 0;
    int *counts = bt->h_counts;  // (B)
    for (int b = 0; b < B; b++) {
        Row *r = &bt->rows[b];
        counts[b] = r->live ? row_bans(bt, r, bt->h_ban + (size_t)b * cap, cap) : 0;
        if (counts[b] > cap)
            return err_set(e, ST_EINVAL, "prompt %d: %d banned ids in one step, more than the %d this cache length allows",
                           r->prompt_index, counts[b], cap);
        K = MAX(K, counts[b]);
    }
    if (K > 0) {  // compact to stride K, -1 = unused
        int32_t *packed = bt->h_ban;  // rows move down in place: row b's data is at b*cap >= b*K
        for (int b = 0; b < B; b++) {
            memmove(packed + (size_t)b * K, bt->h_ban + (size_t)b * cap, (size_t)counts[b] * sizeof(int32_t));
            for (int j = counts[b]; j < K; j++) packed[(size_t)b * K + j] = -1;
        }
        be->upload(be, bt->dp->banned, packed, (size_t)B * K * sizeof(int32_t));
    }
    if (bt->sampling) {
        for (int b = 0; b < B; b++) {
            Row *r = &bt->rows[b];
            const int *keys = bt->cfg->prompt_keys;
            uint32_t key = (uint32_t)(r->prompt_index >= 0 && keys ? keys[r->prompt_index] : r->prompt_index);
            bt->h_u[b] = r->prompt_index >= 0
                             ? rng_keyed_uniform(bt->cfg->seed, key, (uint32_t)r->seq_index, (uint32_t)step, 0)
                             : 0.0;
        }
        be->upload(be, bt->dp->u, bt->h_u, (size_t)B * sizeof(double));
    }
    *K_out = K;
    return ST_OK;
}

// Record this step's tokens; returns the number of rows still live.
static int step_record(Batch *bt) {
    const GenConfig *c = bt->cfg;
    int live = 0;
    for (int b = 0; b < bt->B; b++) {
        Row *r = &bt->rows[b];
        if (!r->live) continue;
        int32_t id = bt->h_next[b];
        GenSeq *s = r->out;
        float lp = bt->want_lp ? bt->h_lp[b] : 0.0f;
        s->ids[s->n] = id;
        if (s->logprobs) s->logprobs[s->n] = lp;
        r->hist[r->len + s->n] = id;
        s->n++;
        int is_eos = 0;
        for (int i = 0; i < c->n_eos && !c->ignore_eos; i++) is_eos |= id == c->eos[i];
        int stop = c->on_token ? c->on_token(c->user, r->prompt_index, r->seq_index, id, lp) : 0;
        if (is_eos) s->finish = GEN_FINISH_EOS;
        else if (stop) s->finish = GEN_FINISH_STOP;
        else if (s->n >= c->max_new_tokens || (c->max_length > 0 && r->len + s->n >= c->max_length))
            s->finish = GEN_FINISH_LENGTH;
        r->live = s->finish == GEN_FINISH_NONE;
        live += r->live;
    }
    return live;
}

// Prefill: left-pad the batch's prompts to P slots and run them through the cache in chunks,
// first of `first` slots, then of prefill_chunk_size (prefill_schedule).
static Status batch_prefill(Batch *bt, int P, int first, GenStats *st, Err *e) {
    Model *m = bt->m;
    Backend *be = m->be;
    const GenConfig *c = bt->cfg;
    int B = bt->B, S = bt->S;
    for (int b = 0; b < B; b++) {
        Row *r = &bt->rows[b];
        int pad = P - r->len;
        for (int s = 0; s < P; s++) {
            size_t i = (size_t)b * P + s;
            int real = s >= pad;
            bt->h_ids[i] = real ? r->hist[s - pad] : bt->pad;
            bt->h_seen[i] = real ? r->hist[s - pad] : -1;
            bt->h_pos[i] = real ? s - pad : 0;
        }
        for (int s = 0; s < S; s++) bt->h_mask[(size_t)b * S + s] = s >= pad;
        st->prompt_tokens += r->prompt_index >= 0 ? r->len : 0;
    }
    Plan *dp = bt->dp;
    be->upload(be, dp->kmask, bt->h_mask, (size_t)B * S * sizeof(int32_t));
    if (bt->rep) be->zero(be, dp->seen, (size_t)B * bt->V);
    int chunk = MAX(c->prefill_chunk_size, first);
    int32_t *cids = xmalloc((size_t)B * MIN(chunk, P) * sizeof(int32_t) * 3);
    int32_t *cpos = cids + (size_t)B * MIN(chunk, P), *cseen = cpos + (size_t)B * MIN(chunk, P);
    Status status = ST_OK;
    for (int c0 = 0; c0 < P && status == ST_OK; c0 += c0 ? c->prefill_chunk_size : first) {
        int Tc = c0 ? c->prefill_chunk_size : first;
        Plan *p;
        status = plan_get_shape(m, PLAN_PREFILL, B, Tc, 0, &p, e);
        if (status != ST_OK) break;
        for (int b = 0; b < B; b++) {
            memcpy(cids + (size_t)b * Tc, bt->h_ids + (size_t)b * P + c0, (size_t)Tc * sizeof(int32_t));
            memcpy(cpos + (size_t)b * Tc, bt->h_pos + (size_t)b * P + c0, (size_t)Tc * sizeof(int32_t));
            memcpy(cseen + (size_t)b * Tc, bt->h_seen + (size_t)b * P + c0, (size_t)Tc * sizeof(int32_t));
        }
        if (bt->rep) {  // the row's real prompt ids (pads are -1, skipped)
            be->upload(be, p->ids, cseen, (size_t)B * Tc * sizeof(int32_t));
            be->sample_seen_update(be, dp->seen, p->ids, B, Tc, bt->V);
        }
        be->upload(be, p->ids, cids, (size_t)B * Tc * sizeof(int32_t));
        be->upload(be, p->pos, cpos, (size_t)B * Tc * sizeof(int32_t));
        qwen3_cache_seek(m, dp, c0, Tc);
        qwen3_forward_cached(m, p, dp);
        if (c0 + Tc == P) qwen3_last_logits(m, p, dp);
        st->prefill_slots += (long)B * Tc;
    }
    free(cids);
    return status;
}

// The token row b fed at cache slot s (a batch laid out by batch_prefill, then decoded to step
// `step`): the padded prompt in slots [0, P), then generated token j in slot P + j (pad once the
// row had finished: batch_decode feeds finished rows pad).
static void slot_token(const Batch *bt, int b, int P, int s, int32_t *id, int32_t *pos) {
    const Row *r = &bt->rows[b];
    if (s < P) {
        *id = bt->h_ids[(size_t)b * P + s];
        *pos = bt->h_pos[(size_t)b * P + s];
        return;
    }
    int j = s - P, fed = r->out->n - (r->live ? 0 : 1);  // generated tokens fed back
    *id = j < fed ? r->hist[r->len + j] : bt->pad;
    *pos = r->len + j;
}

// Longrope crossed original_max_position_embeddings at decode step `step` (the batch's longest
// sequence now holds more positions, and model_rope_select switched to the long table): every
// key in the cache was made with the short one. transformers' Phi3ForCausalLM
// (prepare_inputs_for_generation) drops its cache then and runs the whole sequence again, so this
// runs slots [0, P + step] again from the start with the long table: the prompt chunks as
// batch_prefill ran them, then chunks of generated tokens while they fill one, then single
// decode steps; the last leaves the logits of this step in dp->logits. Repetition-penalty counts
// are not touched (they already hold every token).
static Status batch_reprefill(Batch *bt, int P, int first, int step, GenStats *st, Err *e) {
    Model *m = bt->m;
    Backend *be = m->be;
    const GenConfig *c = bt->cfg;
    Plan *dp = bt->dp;
    int B = bt->B, L = P + step + 1, chunk = MAX(c->prefill_chunk_size, first);
    int32_t *cids = xmalloc((size_t)B * chunk * 2 * sizeof(int32_t)), *cpos = cids + (size_t)B * chunk;
    Status status = ST_OK;
    int c0 = 0;
    for (; status == ST_OK;) {
        int Tc = c0 ? c->prefill_chunk_size : first;
        if (c0 + Tc > L || (c0 < P && c0 + Tc > P)) break;
        Plan *p;
        status = plan_get_shape(m, PLAN_PREFILL, B, Tc, 0, &p, e);
        if (status != ST_OK) break;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tc; t++)
                slot_token(bt, b, P, c0 + t, cids + (size_t)b * Tc + t, cpos + (size_t)b * Tc + t);
        be->upload(be, p->ids, cids, (size_t)B * Tc * sizeof(int32_t));
        be->upload(be, p->pos, cpos, (size_t)B * Tc * sizeof(int32_t));
        qwen3_cache_seek(m, dp, c0, Tc);
        qwen3_forward_cached(m, p, dp);
        if (c0 + Tc == L) qwen3_last_logits(m, p, dp);
        st->prefill_slots += (long)B * Tc;
        c0 += Tc;
    }
    for (; status == ST_OK && c0 < L; c0++) {  // the rest one slot at a time
        for (int b = 0; b < B; b++) slot_token(bt, b, P, c0, cids + b, cpos + b);
        be->upload(be, dp->ids, cids, (size_t)B * sizeof(int32_t));
        be->upload(be, dp->pos, cpos, (size_t)B * sizeof(int32_t));
        qwen3_cache_seek(m, dp, c0, 1);
        qwen3_decode_step(m, dp);
        st->prefill_slots += B;
    }
    free(cids);
    return status;
}

// The longest real row of a batch (its prompt tokens).
static int batch_longest(const Batch *bt) {
    int longest = 0;
    for (int b = 0; b < bt->B; b++)
        if (bt->rows[b].prompt_index >= 0) longest = MAX(longest, bt->rows[b].len);
    return longest;
}

// sample_logits on vocabulary shards (tensor parallel): the rank's columns of the logits and the
// host's parameters, uniforms and bans through sample_shards; ids and log-probs back on the device.
static void sample_on_shards(Batch *bt, float *lp, float *lpr, int K) {
    Model *m = bt->m;
    Backend *be = m->be;
    Plan *dp = bt->dp;
    int B = bt->B, Vp = m->cfg.vocab_part;
    float *logits = xmalloc((size_t)B * Vp * sizeof(float)), *hlp = xmalloc((size_t)B * 2 * sizeof(float));
    uint8_t *seen = bt->rep ? xmalloc((size_t)B * bt->V) : NULL;
    be->download(be, logits, dp->logits_part, (size_t)B * Vp * sizeof(float));
    if (seen) be->download(be, seen, dp->seen, (size_t)B * bt->V);
    sample_shards(m, bt->h_next, lp ? hlp : NULL, lpr ? hlp + B : NULL, logits, bt->h_sp, bt->sampling ? bt->h_u : NULL,
                  seen, K ? bt->h_ban : NULL, K, B);
    be->upload(be, dp->ids, bt->h_next, (size_t)B * sizeof(int32_t));
    if (lp) be->upload(be, lp, hlp, (size_t)B * sizeof(float));
    if (lpr) be->upload(be, lpr, hlp + B, (size_t)B * sizeof(float));
    free(logits), free(hlp), free(seen);
}

// Decode until every row is finished. dp->logits holds the logits after the prompt. A longrope
// model whose longest sequence grows past original_max_position_embeddings runs the batch again
// with the long table at that step (batch_reprefill; `first` is the prompt's first chunk).
static Status batch_decode(Batch *bt, int P, int first, GenStats *st, Err *e) {
    Model *m = bt->m;
    Backend *be = m->be;
    Plan *dp = bt->dp;
    int B = bt->B;
    int32_t *feed = xmalloc((size_t)B * 2 * sizeof(int32_t)), *pos = feed + B;
    Status status = ST_OK;
    for (int step = 0;; step++) {
        int K = 0;
        status = step_inputs(bt, step, &K, e);
        if (status != ST_OK) break;
        float *lp = bt->want_lp && bt->cfg->logprobs == GEN_LOGPROBS_PROCESSED ? dp->logprob : NULL;
        float *lpr = bt->want_lp && bt->cfg->logprobs == GEN_LOGPROBS_RAW ? dp->logprob_raw : NULL;
        if (dp->logits_part) sample_on_shards(bt, lp, lpr, K);
        else
            be->sample_logits(be, dp->ids, lp, lpr, dp->scores, dp->logits, dp->sparams, bt->sampling ? dp->u : NULL,
                              bt->rep ? dp->seen : NULL, K ? dp->banned : NULL, K, B, bt->V);
        be->download(be, bt->h_next, dp->ids, (size_t)B * sizeof(int32_t));
        if (bt->want_lp) be->download(be, bt->h_lp, lp ? lp : lpr, (size_t)B * sizeof(float));
        int live = step_record(bt);
        if (bt->cfg->on_progress) bt->cfg->on_progress(bt->cfg->progress_user, bt->rows_done, bt->rows_total, step);
        if (bt->cfg->lockstep) {  // the group steps on while any member has a live row
            status = bt->cfg->lockstep(bt->cfg->lockstep_ctx, &live, 1, e);
            if (status != ST_OK) break;
        }
        if (live == 0) break;
        for (int b = 0; b < B; b++) {
            Row *r = &bt->rows[b];
            feed[b] = r->live ? bt->h_next[b] : bt->pad;
            pos[b] = r->len + step;
        }
        be->upload(be, dp->ids, feed, (size_t)B * sizeof(int32_t));
        be->upload(be, dp->pos, pos, (size_t)B * sizeof(int32_t));
        if (bt->rep) be->sample_seen_update(be, dp->seen, dp->ids, B, 1, bt->V);
        if (model_rope_select(m, batch_longest(bt) + step + 1)) {  // the cache's keys are stale
            status = batch_reprefill(bt, P, first, step, st, e);
            if (status != ST_OK) break;
        } else {
            qwen3_cache_seek(m, dp, P + step, 1);
            qwen3_decode_step(m, dp);
        }
        st->decode_steps++;
        st->decode_rows += B;
    }
    free(feed);
    return status;
}

static void batch_params(Batch *bt) {
    const GenConfig *c = bt->cfg;
    SampleParams *sp = bt->h_sp;  // (B)
    for (int b = 0; b < bt->B; b++) {
        SampleParams p = {.temperature = 1.0f, .repetition_penalty = c->repetition_penalty, .min_p = 0, .top_k = 0,
                          .top_p = 1.0, .do_sample = 0, .pad_ = 0};
        if (c->do_sample && bt->rows[b].prompt_index >= 0) {
            p.do_sample = 1;
            p.temperature = c->temperature;
            p.top_k = c->top_k;
            p.top_p = c->top_p;
            p.min_p = c->min_p;
        }
        sp[b] = p;
    }
    bt->m->be->upload(bt->m->be, bt->dp->sparams, sp, (size_t)bt->B * sizeof *sp);
}

static Status run_batch(Batch *bt, GenStats *st, Err *e) {
    const GenConfig *c = bt->cfg;
    int longest = 0, first;
    for (int b = 0; b < bt->B; b++) longest = MAX(longest, bt->rows[b].len);
    if (c->lockstep) TRY(c->lockstep(c->lockstep_ctx, &longest, 1, e));  // one prefill schedule
    int P = prefill_schedule(c, bt->m->be->prefill_bucket, longest, &first);
    if (P + c->max_new_tokens - 1 > bt->S)
        return err_set(e, ST_EINVAL,
                       "a batch needs %d cache slots (prompts padded to %d + max_new_tokens %d - 1) but max_cache_len "
                       "is %d",
                       P + c->max_new_tokens - 1, P, c->max_new_tokens, bt->S);
    size_t n = (size_t)bt->B * P;
    bt->h_ids = xmalloc(n * 3 * sizeof(int32_t));
    bt->h_pos = bt->h_ids + n;
    bt->h_seen = bt->h_pos + n;
    batch_params(bt);
    model_rope_select(bt->m, batch_longest(bt));  // longrope: the table of the prompt call
    double t0 = now_s();
    Status status = batch_prefill(bt, P, first, st, e);
    double t1 = now_s();
    st->prefill_seconds += t1 - t0;
    if (status == ST_OK) status = batch_decode(bt, P, first, st, e);
    st->decode_seconds += now_s() - t1;
    free(bt->h_ids);
    bt->h_ids = bt->h_pos = bt->h_seen = NULL;
    return status;
}

void gen_seqs_free(GenSeq *s, int n) {
    if (!s) return;
    for (int i = 0; i < n; i++) {
        free(s[i].ids);
        free(s[i].logprobs);
        free(s[i].top_ids);
        free(s[i].top_logprobs);
    }
    free(s);
}

Status gen_generate(Model *m, const GenConfig *cfg, const int32_t *const *prompts, const int *lens, int n_prompts,
                    GenSeq **out, GenStats *stats, Err *e) {
    *out = NULL;
    GenStats local;
    GenStats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    int V = m->cfg.vocab_size;
    TRY(gen_config_check(cfg, V, e));
    if (n_prompts < 1) return err_set(e, ST_EINVAL, "no prompts to generate for");
    for (int i = 0; i < n_prompts; i++) {
        if (lens[i] < 1) return err_set(e, ST_EINVAL, "prompt %d is empty", i);
        for (int t = 0; t < lens[i]; t++)
            if (prompts[i][t] < 0 || prompts[i][t] >= V)
                return err_set(e, ST_EINVAL, "prompt %d: token id %d at position %d is outside the vocabulary [0, %d)",
                               i, prompts[i][t], t, V);
    }
    int nrs = cfg->num_return_sequences, nrows = n_prompts * nrs;
    int S = gen_cache_len(cfg, m->be, lens, n_prompts);
    int group[2] = {nrows, S};  // lockstep: the group's most rows and longest cache
    if (cfg->lockstep) TRY(cfg->lockstep(cfg->lockstep_ctx, group, 2, e));
    S = group[1];
    int B = cfg->batch_size > 0 ? MIN(cfg->batch_size, group[0]) : group[0];
    int plans_before = m->plans.n;
    Plan *dp;
    TRY(plan_get_shape(m, PLAN_DECODE, B, 1, S, &dp, e));

    GenSeq *seqs = xcalloc((size_t)nrows, sizeof(GenSeq));
    for (int r = 0; r < nrows; r++) {
        seqs[r].prompt_index = r / nrs;
        seqs[r].seq_index = r % nrs;
        seqs[r].ids = xmalloc((size_t)cfg->max_new_tokens * sizeof(int32_t));
        if (cfg->logprobs != GEN_LOGPROBS_NONE) seqs[r].logprobs = xmalloc((size_t)cfg->max_new_tokens * sizeof(float));
    }
    Batch bt = {.m = m, .cfg = cfg, .B = B, .S = S, .V = V, .dp = dp, .rows_total = nrows};
    bt.sampling = cfg->do_sample;
    bt.rep = cfg->repetition_penalty != 1.0f;
    bt.want_lp = cfg->logprobs != GEN_LOGPROBS_NONE;
    bt.pad = cfg->pad_token_id >= 0 ? cfg->pad_token_id : (cfg->n_eos ? cfg->eos[0] : 0);
    bt.rows = xcalloc((size_t)B, sizeof(Row));
    bt.h_mask = xmalloc((size_t)B * S * sizeof(int32_t));
    bt.h_ban = xmalloc((size_t)B * dp->ban_cap * sizeof(int32_t));
    bt.h_next = xmalloc((size_t)B * sizeof(int32_t));
    bt.h_lp = xmalloc((size_t)B * sizeof(float));
    bt.h_u = xmalloc((size_t)B * sizeof(double));
    bt.h_counts = xmalloc((size_t)B * sizeof(int));
    bt.h_sp = xmalloc((size_t)B * sizeof(SampleParams));
    int maxlen = 0;
    for (int i = 0; i < n_prompts; i++) maxlen = MAX(maxlen, lens[i]);
    for (int b = 0; b < B; b++) bt.rows[b].hist = xmalloc((size_t)(maxlen + cfg->max_new_tokens) * sizeof(int32_t));
    GenSeq idle = {0};
    int32_t idle_ids[1];
    idle.ids = idle_ids;

    Status status = ST_OK;
    for (int r0 = 0; r0 < group[0] && status == ST_OK; r0 += B) {
        for (int b = 0; b < B; b++) {
            Row *row = &bt.rows[b];
            int r = r0 + b;
            if (r < nrows) {
                row->prompt_index = r / nrs;
                row->seq_index = r % nrs;
                row->len = lens[row->prompt_index];
                memcpy(row->hist, prompts[row->prompt_index], (size_t)row->len * sizeof(int32_t));
                row->out = &seqs[r];
                row->live = 1;
            } else {  // idle filler: no tokens, every key masked, never live
                row->prompt_index = row->seq_index = -1;
                row->len = 0;
                row->out = &idle;
                row->live = 0;
            }
        }
        bt.rows_done = r0;
        status = run_batch(&bt, st, e);
        st->batches++;
        if (status == ST_OK && cfg->on_progress) cfg->on_progress(cfg->progress_user, MIN(r0 + B, nrows), nrows, -1);
    }
    for (int b = 0; b < B; b++) free(bt.rows[b].hist);
    free(bt.rows);
    free(bt.h_mask);
    free(bt.h_ban);
    free(bt.h_next);
    free(bt.h_lp);
    free(bt.h_u);
    free(bt.h_counts);
    free(bt.h_sp);
    st->batch_size = B;
    st->max_cache_len = S;
    st->plans_built = m->plans.n - plans_before;
    st->plans_total = m->plans.n;
    st->graphs = m->plans.graphs;
    st->plan_bytes = m->plans.bytes;
    if (status != ST_OK) {
        gen_seqs_free(seqs, nrows);
        return status;
    }
    for (int r = 0; r < nrows; r++) st->generated_tokens += seqs[r].n;
    *out = seqs;
    return ST_OK;
}

// ---- a conversation kept in the cache (still chat) ------------------------------------------

void gen_session_free(GenSession *s) {
    free(s->ids);
    free(s->slot);
    free(s->mask);
    memset(s, 0, sizeof *s);
}

static void session_reserve(GenSession *s, int n) {
    if (n <= s->cap) return;
    s->cap = MAX(n, 2 * s->cap);
    s->ids = xrealloc(s->ids, (size_t)s->cap * sizeof(int32_t));
    s->slot = xrealloc(s->slot, (size_t)s->cap * sizeof(int));
}

// Prefill prompt[common, len) into slots [base, base + P) of the session's cache: the first P - L
// slots padding (masked), then the tokens at positions common, common + 1, ...; chunked as a
// fresh prompt of L tokens would be.
static Status session_prefill(Batch *bt, GenSession *s, const int32_t *prompt, int len, int common, int base, int P,
                              int first, GenStats *st, Err *e) {
    Model *m = bt->m;
    Backend *be = m->be;
    const GenConfig *c = bt->cfg;
    int L = len - common, pad = P - L;
    for (int k = 0; k < pad; k++) s->mask[base + k] = 0;
    for (int k = base + pad; k < bt->S; k++) s->mask[k] = 1;
    be->upload(be, bt->dp->kmask, s->mask, (size_t)bt->S * sizeof(int32_t));
    int32_t *cids = xmalloc((size_t)MAX(first, c->prefill_chunk_size) * 2 * sizeof(int32_t));
    int32_t *cpos = cids + MAX(first, c->prefill_chunk_size);
    Status status = ST_OK;
    for (int c0 = 0; c0 < P && status == ST_OK; c0 += c0 ? c->prefill_chunk_size : first) {
        int Tc = c0 ? c->prefill_chunk_size : first;
        Plan *p;
        status = plan_get_shape(m, PLAN_PREFILL, 1, Tc, 0, &p, e);
        if (status != ST_OK) break;
        for (int k = 0; k < Tc; k++) {
            int slot = c0 + k, real = slot >= pad, t = common + slot - pad;  // t: index in prompt
            cids[k] = real ? prompt[t] : bt->pad;
            cpos[k] = real ? t : 0;
        }
        be->upload(be, p->ids, cids, (size_t)Tc * sizeof(int32_t));
        be->upload(be, p->pos, cpos, (size_t)Tc * sizeof(int32_t));
        qwen3_cache_seek(m, bt->dp, base + c0, Tc);
        qwen3_forward_cached(m, p, bt->dp);
        if (c0 + Tc == P) qwen3_last_logits(m, p, bt->dp);
        st->prefill_slots += Tc;
    }
    free(cids);
    st->prompt_tokens += L;
    return status;
}

Status gen_session_generate(Model *m, const GenConfig *cfg0, GenSession *s, const int32_t *prompt, int len,
                            GenSeq **out, GenStats *stats, Err *e) {
    *out = NULL;
    GenConfig cfg = *cfg0;
    cfg.num_return_sequences = 1, cfg.batch_size = 1, cfg.prompt_keys = NULL;
    if (cfg.repetition_penalty != 1.0f) {  // no reuse: the whole conversation, and the cache is not kept
        s->n = 0, s->next = 0, s->dp = NULL, s->reused = 0;
        return gen_generate(m, &cfg, &prompt, &len, 1, out, stats, e);
    }
    GenStats local;
    GenStats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    int V = m->cfg.vocab_size;
    TRY(gen_config_check(&cfg, V, e));
    if (len < 1) return err_set(e, ST_EINVAL, "prompt 0 is empty");
    for (int t = 0; t < len; t++)
        if (prompt[t] < 0 || prompt[t] >= V)
            return err_set(e, ST_EINVAL, "prompt 0: token id %d at position %d is outside the vocabulary [0, %d)",
                           prompt[t], t, V);
    int S = gen_cache_len(&cfg, m->be, &len, 1), plans_before = m->plans.n;
    int ring = 0;  // a sliding layer keeps a ring of its window: a new turn's padding slots would
                   // overwrite the keys of the previous turn's last tokens in it
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) ring |= plan_cache_slots(&m->cfg, l, S) < S;
    if (ring || config_rope_long(&m->cfg, S)) {
        // (longrope past its original context: crossing it reruns the whole sequence,
        // batch_reprefill, which a kept conversation cannot) no reuse, as above
        s->n = 0, s->next = 0, s->dp = NULL, s->reused = 0;
        return gen_generate(m, &cfg, &prompt, &len, 1, out, stats, e);
    }
    model_rope_select(m, 1);  // the whole cache is within the original context: the short table
    Plan *dp;
    TRY(plan_get_shape(m, PLAN_DECODE, 1, 1, S, &dp, e));
    // What of the conversation is in the cache: the longest common prefix (at least one token is
    // prefilled: its logits start the reply). Another plan starts over.
    if (s->dp != dp) {
        s->n = 0, s->next = 0;
        free(s->mask);
        s->mask = xcalloc((size_t)S, sizeof(int32_t));
        s->dp = dp;
    }
    int common = 0;
    while (common < s->n && common < len - 1 && s->ids[common] == prompt[common]) common++;
    int first, P = prefill_schedule(&cfg, m->be->prefill_bucket, len - common, &first);
    int base = common ? s->next : 0;
    if (common && base + P + cfg.max_new_tokens - 1 > S) {  // the cache is full: lay it out afresh
        common = 0, base = 0;
        P = prefill_schedule(&cfg, m->be->prefill_bucket, len, &first);
    }
    if (base + P + cfg.max_new_tokens - 1 > S)
        return err_set(e, ST_EINVAL, "the conversation needs %d cache slots (%d prompt slots + max_new_tokens %d - 1) "
                                     "but max_cache_len is %d", P + cfg.max_new_tokens - 1, P, cfg.max_new_tokens, S);
    for (int k = common; k < s->n; k++) s->mask[s->slot[k]] = 0;  // cached tokens the prompt no longer has
    if (!common) memset(s->mask, 0, (size_t)S * sizeof(int32_t));
    GenSeq *seq = xcalloc(1, sizeof(GenSeq));
    seq->ids = xmalloc((size_t)cfg.max_new_tokens * sizeof(int32_t));
    if (cfg.logprobs != GEN_LOGPROBS_NONE) seq->logprobs = xmalloc((size_t)cfg.max_new_tokens * sizeof(float));
    Row row = {.prompt_index = 0, .seq_index = 0, .len = len, .out = seq, .live = 1};
    row.hist = xmalloc((size_t)(len + cfg.max_new_tokens) * sizeof(int32_t));
    memcpy(row.hist, prompt, (size_t)len * sizeof(int32_t));
    Batch bt = {.m = m, .cfg = &cfg, .B = 1, .S = S, .V = V, .dp = dp, .rows = &row, .rows_total = 1};
    bt.sampling = cfg.do_sample;
    bt.rep = 0;
    bt.want_lp = cfg.logprobs != GEN_LOGPROBS_NONE;
    bt.pad = cfg.pad_token_id >= 0 ? cfg.pad_token_id : (cfg.n_eos ? cfg.eos[0] : 0);
    int32_t next[1];
    float lp[1];
    double u[1];
    int counts[1];
    SampleParams sp[1];
    bt.h_ban = xmalloc((size_t)MAX(dp->ban_cap, 1) * sizeof(int32_t));  // (ban_cap): S + 256 ids
    bt.h_next = next, bt.h_lp = lp, bt.h_u = u, bt.h_counts = counts, bt.h_sp = sp;
    batch_params(&bt);
    double t0 = now_s();
    Status status = session_prefill(&bt, s, prompt, len, common, base, P, first, st, e);
    double t1 = now_s();
    st->prefill_seconds = t1 - t0;
    if (status == ST_OK) status = batch_decode(&bt, base + P, first, st, e);
    st->decode_seconds = now_s() - t1;
    st->batches = 1, st->batch_size = 1, st->max_cache_len = S;
    st->plans_built = m->plans.n - plans_before, st->plans_total = m->plans.n;
    st->graphs = m->plans.graphs, st->plan_bytes = m->plans.bytes;
    s->reused = common;
    if (status == ST_OK) {
        // the cache now holds the prompt and every generated token but the last (never fed back)
        int n = len + MAX(0, seq->n - 1), pad = P - (len - common);
        session_reserve(s, n);
        for (int t = common; t < len; t++) s->ids[t] = prompt[t], s->slot[t] = base + pad + (t - common);
        for (int k = 0; k + 1 < seq->n; k++) s->ids[len + k] = seq->ids[k], s->slot[len + k] = base + P + k;
        s->n = n;
        s->next = base + P + MAX(0, seq->n - 1);
        st->generated_tokens = seq->n;
        *out = seq;
    } else {
        s->n = 0, s->next = 0;  // what the cache holds is unknown now
        gen_seqs_free(seq, 1);
    }
    free(row.hist);
    free(bt.h_ban);
    return status;
}
