// tok_gguf.c: the tokenizer of a GGUF file (tokenizer.ggml.*) as the tokenizer.json and
// tokenizer_config.json it stands for, so that one loader builds both (docs/gguf.md).
//
// tokenizer.ggml.model "gpt2" (byte-level BPE): tokens of type normal / byte / unknown form the
// BPE vocabulary, control tokens become special added tokens and user-defined ones non-special
// added tokens; merges are "a b" strings. The pre-tokenizer follows tokenizer.ggml.pre as
// llama.cpp maps it: "qwen2" (NFC, Qwen2's split regex), "llama-bpe" (Llama 3's regex,
// ignore_merges), "gpt-2" (GPT-2's byte-level regex).
//
// tokenizer.ggml.model "llama" (SentencePiece BPE): transformers' legacy Llama tokenizer.json —
// Prepend / Replace "▁" normaliser, BPE with byte fallback over merges derived from the scores
// (build_spm), the Replace / ByteFallback / Fuse / Strip decoder.
#include "tok_gguf.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "tokenizer.h"

#include <string.h>

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static cJSON *byte_level(int use_regex) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddBoolToObject(b, "add_prefix_space", 0);
    cJSON_AddBoolToObject(b, "trim_offsets", 0);
    cJSON_AddBoolToObject(b, "use_regex", use_regex);
    return b;
}

static Status pre_tokenizer(const GgufFile *g, const char *pre, cJSON *j, int *ignore_merges, Err *e) {
    const char *regex = NULL;
    *ignore_merges = 0;
    if (!strcmp(pre, "qwen2")) {
        regex = QWEN2_REGEX;
        cJSON *n = cJSON_AddObjectToObject(j, "normalizer");
        cJSON_AddStringToObject(n, "type", "NFC");
    } else if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3")) {
        regex = LLAMA3_REGEX;
        *ignore_merges = 1;
    } else if (!strcmp(pre, "gpt-2") || !strcmp(pre, "gpt2")) {
        cJSON_AddItemToObject(j, "pre_tokenizer", byte_level(1));
        return ST_OK;
    } else {
        return err_set(e, ST_EUNSUPPORTED, "%s: tokenizer.ggml.pre \"%s\" is not supported (qwen2, llama-bpe, gpt-2)",
                       g->path, pre);
    }
    cJSON *seq = cJSON_AddObjectToObject(j, "pre_tokenizer");
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *arr = cJSON_AddArrayToObject(seq, "pretokenizers");
    cJSON *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", regex);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", 0);
    cJSON_AddItemToArray(arr, split);
    cJSON_AddItemToArray(arr, byte_level(0));
    return ST_OK;
}

static cJSON *str_json(const GgufStr *s) {
    char *c = xstrndup(s->p, s->len);
    cJSON *v = cJSON_CreateString(c);
    free(c);
    return v;
}

// A special token id of tokenizer.ggml.*_token_id as its string in tokenizer_config.json.
static Status config_token(const GgufFile *g, const GgufKV *tokens, const char *key, const char *field, cJSON *cfg, int64_t *id,
                           Err *e) {
    *id = -1;
    Status st = gguf_get_int(g, key, 0, id, e);
    if (st == ST_ENOTFOUND) return ST_OK;
    if (st != ST_OK) return st;
    if (*id < 0 || (uint64_t)*id >= tokens->arr_n)
        return err_set(e, ST_EINVAL, "%s: %s is %lld, outside the %llu tokens", g->path, key, (long long)*id,
                       (unsigned long long)tokens->arr_n);
    cJSON_AddItemToObject(cfg, field, str_json(&tokens->arr_str[*id]));
    return ST_OK;
}

static cJSON *id_list(int64_t id) {
    cJSON *o = cJSON_CreateObject();
    cJSON *ids = cJSON_AddArrayToObject(o, "ids");
    cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)id));
    return o;
}

// TemplateProcessing "single": [bos] $A [eos] as add_bos_token / add_eos_token ask.
static void post_processor(cJSON *j, const GgufKV *tokens, int64_t bos, int add_bos, int64_t eos, int add_eos) {
    if (!(add_bos && bos >= 0) && !(add_eos && eos >= 0)) return;
    cJSON *pp = cJSON_AddObjectToObject(j, "post_processor");
    cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(pp, "single");
    cJSON *specials = cJSON_AddObjectToObject(pp, "special_tokens");
    for (int part = 0; part < 3; part++) {
        int64_t id = part == 0 ? (add_bos ? bos : -1) : part == 2 ? (add_eos ? eos : -1) : -1;
        cJSON *piece = cJSON_CreateObject();
        if (part == 1) {
            cJSON_AddStringToObject(cJSON_AddObjectToObject(piece, "Sequence"), "id", "A");
        } else if (id >= 0) {
            char *name = xstrndup(tokens->arr_str[id].p, tokens->arr_str[id].len);
            cJSON_AddStringToObject(cJSON_AddObjectToObject(piece, "SpecialToken"), "id", name);
            if (!cJSON_HasObjectItem(specials, name)) cJSON_AddItemToObject(specials, name, id_list(id));
            free(name);
        } else {
            cJSON_Delete(piece);
            continue;
        }
        cJSON_AddItemToArray(single, piece);
    }
}

// ---- SentencePiece (tokenizer.ggml.model "llama") ----------------------------------------------

// Token strings -> ids: open addressing over the token views (FNV-1a).
typedef struct TokMap {
    const GgufStr *s;  // the tokens
    int64_t *slot;     // (cap) id + 1, 0 = empty
    size_t cap;
} TokMap;

static uint64_t fnv(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static int64_t tokmap_find(const TokMap *m, const char *p, size_t n) {
    for (size_t i = fnv(p, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        int64_t id = m->slot[i] - 1;
        if (id < 0) return -1;
        if (m->s[id].len == n && !memcmp(m->s[id].p, p, n)) return id;
    }
}

typedef struct SpmMerge {
    float score;     // of the merged token
    int64_t order;   // position before the sort by score (stable)
    int64_t l, r;    // ids of the two pieces
} SpmMerge;

static int merge_cmp(const void *a, const void *b) {
    const SpmMerge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int pair_cmp(const void *a, const void *b) {
    const SpmMerge *x = a, *y = b;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return x->r < y->r ? -1 : x->r > y->r;
}

// The merges of a SentencePiece BPE vocabulary, as transformers' converter derives them from the
// model's scores (SentencePieceExtractor): for each piece in id order, every split into two
// pieces of the vocabulary (at character boundaries), ordered by the ids of the two; then all of
// them by the merged piece's score, highest first, ties in that order. Unused tokens take no part.
static void spm_merges(const GgufKV *tokens, const GgufKV *scores, const GgufKV *types, cJSON *marr) {
    uint64_t n = tokens->arr_n;
    TokMap map = {.s = tokens->arr_str, .cap = 16};
    while (map.cap < 2 * n) map.cap *= 2;
    map.slot = xcalloc(map.cap, sizeof(int64_t));
    for (uint64_t id = 0; id < n; id++) {
        if (types && gguf_arr_int(types, id) == TT_UNUSED) continue;
        const GgufStr *s = &tokens->arr_str[id];
        size_t i = fnv(s->p, s->len) & (map.cap - 1);
        while (map.slot[i]) i = (i + 1) & (map.cap - 1);
        if (tokmap_find(&map, s->p, s->len) < 0) map.slot[i] = (int64_t)id + 1;
    }
    size_t cap = 1024, nm = 0;
    SpmMerge *ms = xmalloc(cap * sizeof *ms);
    for (uint64_t id = 0; id < n; id++) {
        if (types && gguf_arr_int(types, id) == TT_UNUSED) continue;
        const GgufStr *s = &tokens->arr_str[id];
        float score;
        memcpy(&score, scores->arr_data + id * 4, 4);
        size_t first = nm;
        for (size_t i = 1; i < s->len; i++) {
            if (((unsigned char)s->p[i] & 0xC0) == 0x80) continue;  // inside a character
            int64_t l = tokmap_find(&map, s->p, i), r = tokmap_find(&map, s->p + i, s->len - i);
            if (l < 0 || r < 0) continue;
            if (nm == cap) ms = xrealloc(ms, (cap *= 2) * sizeof *ms);
            ms[nm++] = (SpmMerge){.score = score, .l = l, .r = r};
        }
        qsort(ms + first, nm - first, sizeof *ms, pair_cmp);
    }
    for (size_t i = 0; i < nm; i++) ms[i].order = (int64_t)i;
    qsort(ms, nm, sizeof *ms, merge_cmp);
    for (size_t i = 0; i < nm; i++) {
        const GgufStr *l = &tokens->arr_str[ms[i].l], *r = &tokens->arr_str[ms[i].r];
        char *c = xmalloc(l->len + r->len + 2);
        memcpy(c, l->p, l->len);
        c[l->len] = ' ';
        memcpy(c + l->len + 1, r->p, r->len);
        c[l->len + 1 + r->len] = 0;
        cJSON_AddItemToArray(marr, cJSON_CreateString(c));
        free(c);
    }
    free(ms);
    free(map.slot);
}

static cJSON *replace_rule(const char *from, const char *to) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "pattern"), "String", from);
    cJSON_AddStringToObject(r, "content", to);
    return r;
}

// tokenizer.ggml.model "llama": SentencePiece BPE as transformers' Llama tokenizer.json lays it out
// (legacy): the normaliser puts "▁" before the text (add_space_prefix, default on) and for every
// space; BPE with byte fallback (<0xNN> tokens) over merges derived from the scores; the decoder
// undoes both. Control tokens are special added tokens, user-defined ones non-special.
static Status build_spm(const GgufFile *g, const GgufKV *tokens, const GgufKV *types, cJSON *j, int *add_prefix,
                        Err *e) {
    const GgufKV *scores;
    TRY(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_F32, 1, &scores, e));
    if (scores->arr_n != tokens->arr_n)
        return err_set(e, ST_EINVAL, "%s: tokenizer.ggml.scores has %llu entries for %llu tokens", g->path,
                       (unsigned long long)scores->arr_n, (unsigned long long)tokens->arr_n);
    *add_prefix = 1;
    Status st = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", 0, add_prefix, e);
    if (st != ST_OK && st != ST_ENOTFOUND) return st;
    cJSON *norm = cJSON_AddObjectToObject(j, "normalizer");
    cJSON_AddStringToObject(norm, "type", "Sequence");
    cJSON *na = cJSON_AddArrayToObject(norm, "normalizers");
    if (*add_prefix) {
        cJSON *pp = cJSON_CreateObject();
        cJSON_AddStringToObject(pp, "type", "Prepend");
        cJSON_AddStringToObject(pp, "prepend", "\xe2\x96\x81");
        cJSON_AddItemToArray(na, pp);
    }
    cJSON_AddItemToArray(na, replace_rule(" ", "\xe2\x96\x81"));
    cJSON *m = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddBoolToObject(m, "fuse_unk", 1);
    cJSON_AddBoolToObject(m, "byte_fallback", 1);
    cJSON *vocab = cJSON_AddObjectToObject(m, "vocab");
    cJSON *added = cJSON_AddArrayToObject(j, "added_tokens");
    for (uint64_t i = 0; i < tokens->arr_n; i++) {
        int64_t type = types ? gguf_arr_int(types, i) : TT_NORMAL;
        const GgufStr *s = &tokens->arr_str[i];
        if (memchr(s->p, 0, s->len))
            return err_set(e, ST_EINVAL, "%s: tokenizer.ggml.tokens[%llu] holds a NUL byte", g->path, (unsigned long long)i);
        if (type == TT_UNUSED) continue;
        char *c = xstrndup(s->p, s->len);
        cJSON_AddNumberToObject(vocab, c, (double)i);
        if (type == TT_UNKNOWN) cJSON_AddStringToObject(m, "unk_token", c);
        if (type == TT_CONTROL || type == TT_USER_DEFINED || type == TT_UNKNOWN) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", c);
            cJSON_AddBoolToObject(a, "special", type != TT_USER_DEFINED);
            cJSON_AddBoolToObject(a, "normalized", 0);
            cJSON_AddItemToArray(added, a);
        }
        free(c);
    }
    spm_merges(tokens, scores, types, cJSON_AddArrayToObject(m, "merges"));
    cJSON *dec = cJSON_AddObjectToObject(j, "decoder");
    cJSON_AddStringToObject(dec, "type", "Sequence");
    cJSON *da = cJSON_AddArrayToObject(dec, "decoders");
    cJSON_AddItemToArray(da, replace_rule("\xe2\x96\x81", " "));
    cJSON *bf = cJSON_CreateObject(), *fu = cJSON_CreateObject();
    cJSON_AddStringToObject(bf, "type", "ByteFallback");
    cJSON_AddStringToObject(fu, "type", "Fuse");
    cJSON_AddItemToArray(da, bf);
    cJSON_AddItemToArray(da, fu);
    if (*add_prefix) {
        cJSON *strip = cJSON_CreateObject();
        cJSON_AddStringToObject(strip, "type", "Strip");
        cJSON_AddStringToObject(strip, "content", " ");
        cJSON_AddNumberToObject(strip, "start", 1);
        cJSON_AddNumberToObject(strip, "stop", 0);
        cJSON_AddItemToArray(da, strip);
    }
    return ST_OK;
}

static Status build(const GgufFile *g, cJSON *j, cJSON *cfg, Err *e) {
    char *model = NULL, *pre = NULL;
    TRY(gguf_get_str(g, "tokenizer.ggml.model", 1, &model, e));
    Status st = ST_OK;
    int spm = !strcmp(model, "llama"), add_prefix = 0;
    if (strcmp(model, "gpt2") && !spm) {
        st = err_set(e, ST_EUNSUPPORTED,
                     "%s: tokenizer.ggml.model \"%s\" is not supported (gpt2: byte-level BPE; llama: SentencePiece BPE)",
                     g->path, model);
        goto done;
    }
    st = gguf_get_str(g, "tokenizer.ggml.pre", 0, &pre, e);
    if (st == ST_ENOTFOUND) st = ST_OK, pre = xstrdup(spm ? "default" : "gpt-2");
    if (st != ST_OK) goto done;
    const GgufKV *tokens, *types = NULL, *merges = NULL;
    if ((st = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING, 1, &tokens, e)) != ST_OK) goto done;
    if (!spm && (st = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_STRING, 1, &merges, e)) != ST_OK) goto done;
    st = gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_I32, 0, &types, e);
    if (st == ST_ENOTFOUND) st = ST_OK, types = NULL;
    if (st != ST_OK) goto done;
    if (types && types->arr_n != tokens->arr_n) {
        st = err_set(e, ST_EINVAL, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", g->path,
                     (unsigned long long)types->arr_n, (unsigned long long)tokens->arr_n);
        goto done;
    }
    if (spm) {
        if ((st = build_spm(g, tokens, types, j, &add_prefix, e)) != ST_OK) goto done;
        goto specials;
    }
    int ignore_merges;
    if ((st = pre_tokenizer(g, pre, j, &ignore_merges, e)) != ST_OK) goto done;
    cJSON *m = cJSON_AddObjectToObject(j, "model");
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddBoolToObject(m, "ignore_merges", ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(m, "vocab");
    cJSON *added = cJSON_AddArrayToObject(j, "added_tokens");
    for (uint64_t i = 0; i < tokens->arr_n; i++) {
        int64_t type = types ? gguf_arr_int(types, i) : TT_NORMAL;
        const GgufStr *s = &tokens->arr_str[i];
        if (memchr(s->p, 0, s->len)) {
            st = err_set(e, ST_EINVAL, "%s: tokenizer.ggml.tokens[%llu] holds a NUL byte", g->path, (unsigned long long)i);
            goto done;
        }
        if (type == TT_UNUSED) continue;
        if (type == TT_CONTROL || type == TT_USER_DEFINED) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddItemToObject(a, "content", str_json(s));
            cJSON_AddBoolToObject(a, "special", type == TT_CONTROL);
            cJSON_AddBoolToObject(a, "normalized", 0);
            cJSON_AddItemToArray(added, a);
            continue;
        }
        char *c = xstrndup(s->p, s->len);
        cJSON_AddNumberToObject(vocab, c, (double)i);
        free(c);
    }
    cJSON *marr = cJSON_AddArrayToObject(m, "merges");
    for (uint64_t i = 0; i < merges->arr_n; i++) cJSON_AddItemToArray(marr, str_json(&merges->arr_str[i]));
    cJSON_AddItemToObject(j, "decoder", byte_level(1));
specials:;
    int64_t bos, eos, id;
    if ((st = config_token(g, tokens, "tokenizer.ggml.bos_token_id", "bos_token", cfg, &bos, e)) != ST_OK) goto done;
    if ((st = config_token(g, tokens, "tokenizer.ggml.eos_token_id", "eos_token", cfg, &eos, e)) != ST_OK) goto done;
    if ((st = config_token(g, tokens, "tokenizer.ggml.padding_token_id", "pad_token", cfg, &id, e)) != ST_OK) goto done;
    if ((st = config_token(g, tokens, "tokenizer.ggml.unknown_token_id", "unk_token", cfg, &id, e)) != ST_OK) goto done;
    // llama.cpp adds BOS by default for SentencePiece and Llama 3's pre-tokenizer, not the others.
    int add_bos = spm || !strcmp(pre, "llama-bpe"), add_eos = 0;
    st = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", 0, &add_bos, e);
    if (st == ST_OK || st == ST_ENOTFOUND) st = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", 0, &add_eos, e);
    if (st == ST_ENOTFOUND) st = ST_OK;
    if (st != ST_OK) goto done;
    post_processor(j, tokens, bos, add_bos, eos, add_eos);
    // llama.cpp cleans up tokenization spaces when decoding byte-level BPE, except for the
    // pre-tokenizers that turn it off (qwen2 among those still reads), as transformers' configs do.
    cJSON_AddBoolToObject(cfg, "clean_up_tokenization_spaces", !spm && strcmp(pre, "qwen2") != 0);
done:
    free(model);
    free(pre);
    return st;
}

Status tok_gguf_json(const char *path, cJSON **tokenizer_json, cJSON **tokenizer_config, Err *e) {
    *tokenizer_json = *tokenizer_config = NULL;
    GgufFile g;
    TRY(gguf_open(path, &g, e));
    cJSON *j = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
    Status st = build(&g, j, cfg, e);
    if (st == ST_OK) {
        char *tmpl = NULL;
        Status ts = gguf_get_str(&g, "tokenizer.chat_template", 0, &tmpl, e);
        if (ts == ST_OK) cJSON_AddStringToObject(cfg, "chat_template", tmpl);
        else if (ts != ST_ENOTFOUND) st = ts;
        free(tmpl);
    }
    gguf_close(&g);
    if (st != ST_OK) {
        cJSON_Delete(j);
        cJSON_Delete(cfg);
        return st;
    }
    *tokenizer_json = j;
    *tokenizer_config = cfg;
    return ST_OK;
}

// ------------------------------------------------------------------------------------ writing

// tokenizer.ggml.pre of a tokenizer.json's pre-tokenizer: the Split regex of Qwen2 or Llama 3
// before a regex-free ByteLevel, or a ByteLevel with GPT-2's regex. NULL for anything else.
static const char *pre_name(const cJSON *j) {
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsString(type)) return NULL;
    if (!strcmp(type->valuestring, "ByteLevel")) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        return !ur || cJSON_IsTrue(ur) ? "gpt-2" : NULL;
    }
    if (strcmp(type->valuestring, "Sequence")) return NULL;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    if (cJSON_GetArraySize(arr) != 2) return NULL;
    const cJSON *split = cJSON_GetArrayItem(arr, 0), *bl = cJSON_GetArrayItem(arr, 1);
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
    const cJSON *blt = cJSON_GetObjectItemCaseSensitive(bl, "type");
    if (!cJSON_IsString(rx) || !cJSON_IsString(blt) || strcmp(blt->valuestring, "ByteLevel")) return NULL;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const cJSON *nt = cJSON_GetObjectItemCaseSensitive(norm, "type");
    int nfc = cJSON_IsString(nt) && !strcmp(nt->valuestring, "NFC");
    int no_norm = !norm || cJSON_IsNull(norm);
    if (!strcmp(rx->valuestring, QWEN2_REGEX) && nfc) return "qwen2";
    if (!strcmp(rx->valuestring, LLAMA3_REGEX) && no_norm) return "llama-bpe";
    return NULL;
}

// The chat template source: chat_template.jinja, else tokenizer_config.json's chat_template (a
// string, or the entry named "default" of a list). NULL when there is none.
static char *template_source(const char *dir, const cJSON *cfg) {
    char *jp = path_join(dir, "chat_template.jinja"), *text = NULL;
    size_t len;
    Err e = {0};
    if (file_exists(jp) && file_read_all(jp, &text, &len, &e) != ST_OK) text = NULL;
    free(jp);
    if (text) return text;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) return xstrdup(ct->valuestring);
    for (const cJSON *c = cJSON_IsArray(ct) ? ct->child : NULL; c; c = c->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name"), *t = cJSON_GetObjectItemCaseSensitive(c, "template");
        if (cJSON_IsString(n) && cJSON_IsString(t) && !strcmp(n->valuestring, "default")) return xstrdup(t->valuestring);
    }
    return NULL;
}

static Status write_trees(const char *dir, const char *jp, const cJSON *j, const cJSON *cfg, const Tokenizer *tok, GgufWriter *w, Err *e) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges) ||
        cJSON_IsTrue(bf))
        return err_set(e, ST_EUNSUPPORTED, "%s: only byte-level BPE tokenizers can be written to GGUF (tokenizer.ggml.model gpt2)", jp);
    const char *pre = pre_name(j);
    if (!pre)
        return err_set(e, ST_EUNSUPPORTED,
                       "%s: the pre-tokenizer is none of those GGUF names for byte-level BPE that still writes (Qwen2's "
                       "\"qwen2\", Llama 3's \"llama-bpe\", GPT-2's \"gpt-2\")", jp);
    int32_t n = tokenizer_vocab_size(tok);
    char **toks = xcalloc((size_t)n, sizeof *toks);
    int32_t *types = xcalloc((size_t)n, sizeof *types);
    for (const cJSON *v = vocab->child; v; v = v->next)
        if (cJSON_IsNumber(v) && v->valueint >= 0 && v->valueint < n) toks[v->valueint] = xstrdup(v->string), types[v->valueint] = TT_NORMAL;
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id"), *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || id->valueint < 0 || id->valueint >= n) continue;
        free(toks[id->valueint]);
        toks[id->valueint] = xstrdup(c->valuestring);
        types[id->valueint] = tokenizer_is_special(tok, id->valueint) ? TT_CONTROL : TT_USER_DEFINED;
    }
    for (int32_t i = 0; i < n; i++)
        if (!toks[i]) {  // a hole in the ids, as llama.cpp's converter fills them
            char b[32];
            snprintf(b, sizeof b, "[PAD%d]", i);
            toks[i] = xstrdup(b), types[i] = TT_UNUSED;
        }
    int nm = cJSON_GetArraySize(merges), k = 0;
    char **ms = xcalloc((size_t)nm + 1, sizeof *ms);
    for (const cJSON *m = merges->child; m; m = m->next, k++) {
        if (cJSON_IsString(m)) {
            ms[k] = xstrdup(m->valuestring);
        } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            StrBuf sb = {0};
            sb_printf(&sb, "%s %s", m->child->valuestring, m->child->next->valuestring);
            ms[k] = sb_take(&sb);
        } else {
            ms[k] = xstrdup("");
        }
    }
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (size_t)n);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, (size_t)nm);
    int32_t bos = tokenizer_bos_id(tok), eos = tokenizer_eos_id(tok), pad = tokenizer_pad_id(tok), unk = tokenizer_unk_id(tok);
    if (bos >= 0) gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0) gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (unk >= 0) gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk);
    if (pad >= 0) gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
    // What the post-processor adds around a text is what add_bos_token / add_eos_token say.
    TokenIds ids = {0};
    Err ee = {0};
    int add_bos = 0, add_eos = 0;
    if (tokenizer_encode(tok, "a", 1, 1, &ids, &ee) == ST_OK && ids.n) {
        add_bos = bos >= 0 && ids.ids[0] == bos;
        add_eos = eos >= 0 && ids.ids[ids.n - 1] == eos;
    }
    tokenizer_ids_free(&ids);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", add_eos);
    char *tmpl = template_source(dir, cfg);
    if (tmpl) gguf_w_str(w, "tokenizer.chat_template", tmpl);
    free(tmpl);
    for (int32_t i = 0; i < n; i++) free(toks[i]);
    for (int i = 0; i < nm; i++) free(ms[i]);
    free(toks), free(types), free(ms);
    return ST_OK;
}

Status tok_gguf_write(const char *dir, GgufWriter *w, Err *e) {
    if (gguf_is_file(dir)) {  // another GGUF file: its tokenizer as tokenizer_load reads it
        cJSON *j, *cfg;
        Tokenizer *tok = NULL;
        GgufFile g;
        TRY(gguf_open(dir, &g, e));
        int has = gguf_find(&g, "tokenizer.ggml.model") != NULL;
        gguf_close(&g);
        if (!has) return err_set(e, ST_ENOTFOUND, "%s: no tokenizer.ggml.model", dir);
        TRY(tok_gguf_json(dir, &j, &cfg, e));
        Status st = tokenizer_load(dir, &tok, e);
        if (st == ST_OK) st = write_trees(dir, dir, j, cfg, tok, w, e);
        tokenizer_free(tok);
        cJSON_Delete(j);
        cJSON_Delete(cfg);
        return st;
    }
    char *jp = path_join(dir, "tokenizer.json"), *cp = path_join(dir, "tokenizer_config.json");
    cJSON *j = NULL, *cfg = NULL;
    Tokenizer *tok = NULL;
    Status st = file_exists(jp) ? ST_OK : err_set(e, ST_ENOTFOUND, "%s: no such file", jp);
    if (st == ST_OK) st = json_parse_file(jp, &j, e);
    if (st == ST_OK && file_exists(cp)) st = json_parse_file(cp, &cfg, e);
    if (st == ST_OK) st = tokenizer_load(dir, &tok, e);
    if (st == ST_OK) st = write_trees(dir, jp, j, cfg, tok, w, e);
    tokenizer_free(tok);
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    free(jp);
    free(cp);
    return st;
}
