// tok_load.c: tokenizer_load: tokenizer.json components, added tokens, the post-processor and
// the settings transformers takes from tokenizer_config.json.
#include "tok_internal.h"

#include "tok_gguf.h"
#include "unicode.h"

#include "../core/fileio.h"

#include <string.h>

static Status get_flag(const cJSON *j, const char *key, const char *what, int def, int *out, Err *e) {
    *out = def;
    Status st = json_get_bool(j, key, what, 0, out, e);
    if (st == ST_ENOTFOUND) {
        err_clear(e);
        return ST_OK;
    }
    return st;
}

static Status parse_added(Tokenizer *tok, const cJSON *arr, const char *what, Err *e) {
    if (!arr || cJSON_IsNull(arr)) return ST_OK;
    if (!cJSON_IsArray(arr)) return err_set(e, ST_EINVAL, "%s: \"added_tokens\" must be an array", what);
    int n = cJSON_GetArraySize(arr);
    tok->added = xcalloc((size_t)n + 1, sizeof *tok->added);
    for (const cJSON *a = arr->child; a; a = a->next) {
        char w[512];
        snprintf(w, sizeof w, "%s: added_tokens[%d]", what, tok->n_added);
        long long id;
        const char *content;
        TRY(json_get_int(a, "id", w, 1, &id, e));
        TRY(json_get_string(a, "content", w, 1, &content, e));
        if (id < 0 || id > 100000000) return err_set(e, ST_EINVAL, "%s: id %lld out of range", w, id);
        if (!*content) return err_set(e, ST_EINVAL, "%s: empty content", w);
        AddedToken *t = &tok->added[tok->n_added];
        int special, lstrip, rstrip, single_word, normalized;
        TRY(get_flag(a, "special", w, 0, &special, e));
        TRY(get_flag(a, "lstrip", w, 0, &lstrip, e));
        TRY(get_flag(a, "rstrip", w, 0, &rstrip, e));
        TRY(get_flag(a, "single_word", w, 0, &single_word, e));
        TRY(get_flag(a, "normalized", w, !special, &normalized, e));
        *t = (AddedToken){xstrdup(content), NULL, strlen(content), (int32_t)id, (uint8_t)special, (uint8_t)lstrip,
                          (uint8_t)rstrip, (uint8_t)single_word, (uint8_t)normalized};
        tok->n_added++;
    }
    return ST_OK;
}

// Ids of a TemplateProcessing "single" template around $A, and the Bert/Roberta cls ... sep form.
static Status post_template(Tokenizer *tok, const cJSON *pp, const char *what, Err *e) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    if (!cJSON_IsArray(single)) return err_set(e, ST_EINVAL, "%s: TemplateProcessing needs a \"single\" array", what);
    int seen_a = 0;
    for (const cJSON *it = single->child; it; it = it->next) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (seq) {
            const char *id;
            TRY(json_get_string(seq, "id", what, 1, &id, e));
            if (strcmp(id, "A") || seen_a)
                return err_set(e, ST_EINVAL, "%s: TemplateProcessing \"single\" must hold sequence A once", what);
            seen_a = 1;
            continue;
        }
        if (!sp) return err_set(e, ST_EINVAL, "%s: TemplateProcessing piece must be Sequence or SpecialToken", what);
        const char *name;
        TRY(json_get_string(sp, "id", what, 1, &name, e));
        const cJSON *def = cJSON_GetObjectItemCaseSensitive(specials, name);
        const cJSON *ids = def ? cJSON_GetObjectItemCaseSensitive(def, "ids") : NULL;
        if (!cJSON_IsArray(ids))
            return err_set(e, ST_EINVAL, "%s: TemplateProcessing special token \"%s\" has no \"ids\" in special_tokens", what, name);
        for (const cJSON *x = ids->child; x; x = x->next) {
            if (!cJSON_IsNumber(x) || x->valueint < 0)
                return err_set(e, ST_EINVAL, "%s: special token \"%s\": ids must be non-negative integers", what, name);
            int32_t **arr = seen_a ? &tok->post_post : &tok->post_pre;
            int *n = seen_a ? &tok->n_post_post : &tok->n_post_pre;
            *arr = xrealloc(*arr, (size_t)(*n + 1) * sizeof **arr);
            (*arr)[(*n)++] = x->valueint;
        }
    }
    if (!seen_a) return err_set(e, ST_EINVAL, "%s: TemplateProcessing \"single\" lacks sequence A", what);
    return ST_OK;
}

static void wrap_ids(Tokenizer *tok, int32_t pre, int32_t post) {
    // A later processor wraps the output of an earlier one.
    if (pre >= 0) {
        tok->post_pre = xrealloc(tok->post_pre, (size_t)(tok->n_post_pre + 1) * sizeof *tok->post_pre);
        memmove(tok->post_pre + 1, tok->post_pre, (size_t)tok->n_post_pre * sizeof *tok->post_pre);
        tok->post_pre[0] = pre;
        tok->n_post_pre++;
    }
    if (post >= 0) {
        tok->post_post = xrealloc(tok->post_post, (size_t)(tok->n_post_post + 1) * sizeof *tok->post_post);
        tok->post_post[tok->n_post_post++] = post;
    }
}

static Status parse_post(Tokenizer *tok, const cJSON *pp, const char *what, Err *e) {
    if (!pp || cJSON_IsNull(pp)) return ST_OK;
    const char *type;
    TRY(json_get_string(pp, "type", what, 1, &type, e));
    if (!strcmp(type, "ByteLevel")) return ST_OK;  // offsets only
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        if (!cJSON_IsArray(arr)) return err_set(e, ST_EINVAL, "%s: Sequence post_processor needs \"processors\"", what);
        for (const cJSON *c = arr->child; c; c = c->next) {
            // Each processor wraps what the previous ones produced.
            Tokenizer inner = {0};
            TRY(parse_post(&inner, c, what, e));
            int32_t *pre = tok->post_pre, *post = tok->post_post;
            int npre = tok->n_post_pre, npost = tok->n_post_post;
            tok->post_pre = xmalloc((size_t)(npre + inner.n_post_pre + 1) * sizeof *pre);
            memcpy(tok->post_pre, inner.post_pre, (size_t)inner.n_post_pre * sizeof *pre);
            memcpy(tok->post_pre + inner.n_post_pre, pre, (size_t)npre * sizeof *pre);
            tok->post_post = xmalloc((size_t)(npost + inner.n_post_post + 1) * sizeof *post);
            memcpy(tok->post_post, post, (size_t)npost * sizeof *post);
            memcpy(tok->post_post + npost, inner.post_post, (size_t)inner.n_post_post * sizeof *post);
            tok->n_post_pre = npre + inner.n_post_pre;
            tok->n_post_post = npost + inner.n_post_post;
            free(pre), free(post), free(inner.post_pre), free(inner.post_post);
        }
        return ST_OK;
    }
    if (!strcmp(type, "TemplateProcessing")) return post_template(tok, pp, what, e);
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(pp, "cls");
        const cJSON *sep = cJSON_GetObjectItemCaseSensitive(pp, "sep");
        if (!cJSON_IsArray(cls) || !cJSON_IsArray(sep) || !cJSON_IsNumber(cJSON_GetArrayItem(cls, 1)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(sep, 1)))
            return err_set(e, ST_EINVAL, "%s: %s needs \"cls\" and \"sep\" as [token, id]", what, type);
        wrap_ids(tok, cJSON_GetArrayItem(cls, 1)->valueint, cJSON_GetArrayItem(sep, 1)->valueint);
        return ST_OK;
    }
    return err_set(e, ST_EUNSUPPORTED, "%s: post_processor type \"%s\" is not supported", what, type);
}

// A special token in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
static Status config_token(const cJSON *cfg, const char *key, const char *what, char **out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return ST_OK;
    if (cJSON_IsString(v)) {
        *out = xstrdup(v->valuestring);
        return ST_OK;
    }
    const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : NULL;
    if (cJSON_IsString(c)) {
        *out = xstrdup(c->valuestring);
        return ST_OK;
    }
    return err_set(e, ST_EINVAL, "%s: \"%s\" must be a string or an object with \"content\"", what, key);
}

static int llama_style(const char *cls) {
    static const char *names[] = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
                                  "GemmaTokenizer", "GemmaTokenizerFast"};
    for (size_t i = 0; cls && i < ARRAY_LEN(names); i++)
        if (!strcmp(cls, names[i])) return 1;
    return 0;
}

static Status apply_config(Tokenizer *tok, const cJSON *cfg, const char *what, Err *e) {
    // Tokens listed only in the config's added_tokens_decoder are added, as transformers does.
    const cJSON *atd = cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder");
    if (cJSON_IsObject(atd)) {
        for (const cJSON *a = atd->child; a; a = a->next) {
            char *endp;
            long id = strtol(a->string, &endp, 10);
            const char *content;
            if (*endp || id < 0 || id > 100000000)
                return err_set(e, ST_EINVAL, "%s: added_tokens_decoder key \"%s\" is not an id", what, a->string);
            TRY(json_get_string(a, "content", what, 1, &content, e));
            int have = 0;
            for (int i = 0; i < tok->n_added; i++) have |= tok->added[i].id == id;
            if (have || !*content) continue;
            int special, lstrip, rstrip, single_word, normalized;
            TRY(get_flag(a, "special", what, 0, &special, e));
            TRY(get_flag(a, "lstrip", what, 0, &lstrip, e));
            TRY(get_flag(a, "rstrip", what, 0, &rstrip, e));
            TRY(get_flag(a, "single_word", what, 0, &single_word, e));
            TRY(get_flag(a, "normalized", what, !special, &normalized, e));
            tok->added = xrealloc(tok->added, (size_t)(tok->n_added + 1) * sizeof *tok->added);
            tok->added[tok->n_added++] = (AddedToken){xstrdup(content), NULL, strlen(content), (int32_t)id, (uint8_t)special,
                                                      (uint8_t)lstrip, (uint8_t)rstrip, (uint8_t)single_word,
                                                      (uint8_t)normalized};
        }
    }
    TRY(config_token(cfg, "bos_token", what, &tok->bos, e));
    TRY(config_token(cfg, "eos_token", what, &tok->eos, e));
    TRY(config_token(cfg, "pad_token", what, &tok->pad, e));
    TRY(config_token(cfg, "unk_token", what, &tok->unk, e));
    TRY(get_flag(cfg, "split_special_tokens", what, 0, &tok->split_special_tokens, e));
    TRY(get_flag(cfg, "clean_up_tokenization_spaces", what, 0, &tok->clean_up_spaces, e));
    const char *cls = NULL;
    if (json_get_string(cfg, "tokenizer_class", what, 0, &cls, e) == ST_EINVAL) return ST_EINVAL;
    err_clear(e);
    int has_bos = json_has(cfg, "add_bos_token"), has_eos = json_has(cfg, "add_eos_token");
    if (llama_style(cls) && (has_bos || has_eos)) {
        // LlamaTokenizerFast.update_post_processor: the template becomes [bos] $A [eos].
        int add_bos = 1, add_eos = 0;
        TRY(get_flag(cfg, "add_bos_token", what, 1, &add_bos, e));
        TRY(get_flag(cfg, "add_eos_token", what, 0, &add_eos, e));
        free(tok->post_pre), free(tok->post_post);
        tok->post_pre = tok->post_post = NULL;
        tok->n_post_pre = tok->n_post_post = 0;
        if (add_bos && !tok->bos) return err_set(e, ST_EINVAL, "%s: add_bos_token is true but bos_token is not set", what);
        if (add_eos && !tok->eos) return err_set(e, ST_EINVAL, "%s: add_eos_token is true but eos_token is not set", what);
        tok->post_pre = xmalloc(sizeof(int32_t));
        tok->post_post = xmalloc(sizeof(int32_t));
        if (add_bos) tok->post_pre[tok->n_post_pre++] = -2;  // resolved once ids are known
        if (add_eos) tok->post_post[tok->n_post_post++] = -3;
    }
    return ST_OK;
}

// tokenizers >= 0.23 decodes a normalized added token from its normalised form (so that e.g. a
// byte-level decoder can invert it), and skip_special_tokens drops a token whose decode string is
// the content of a special token.
static void decode_forms(Tokenizer *tok) {
    int32_t vs = tok->vocab_size;
    StrMap specials = {0};
    tok->id_dec = xcalloc((size_t)vs + 1, sizeof *tok->id_dec);
    tok->skip_dec = xcalloc((size_t)vs + 1, 1);
    memcpy(tok->id_dec, tok->id_tok, (size_t)vs * sizeof *tok->id_dec);
    for (int i = 0; i < tok->n_added; i++) {
        const AddedToken *t = &tok->added[i];
        if (t->special) strmap_put(&specials, t->content, t->len, 1);
        if (t->decode_as && tok->id_tok[t->id] == t->content) tok->id_dec[t->id] = t->decode_as;
    }
    for (int32_t id = 0; id < vs && specials.n; id++)
        if (tok->id_dec[id]) tok->skip_dec[id] = strmap_get(&specials, tok->id_dec[id], strlen(tok->id_dec[id])) >= 0;
    strmap_free(&specials);
}

static int32_t id_of(const Tokenizer *tok, const char *s) { return s ? tokenizer_token_to_id(tok, s) : -1; }

static Status finish(Tokenizer *tok, const char *what, Err *e) {
    int32_t vs = tok->bpe.n_tokens;
    for (int i = 0; i < tok->n_added; i++) vs = MAX(vs, tok->added[i].id + 1);
    tok->vocab_size = vs;
    tok->id_tok = xcalloc((size_t)vs + 1, sizeof *tok->id_tok);
    tok->special = xcalloc((size_t)vs + 1, 1);
    for (int32_t i = 0; i < tok->bpe.n_tokens; i++) tok->id_tok[i] = tok->bpe.tokens[i];
    for (int i = 0; i < tok->n_added; i++) {
        AddedToken *t = &tok->added[i];
        tok->id_tok[t->id] = t->content;
        tok->special[t->id] = t->special;
        strmap_put(&tok->added_map, t->content, t->len, t->id);
    }
    tok->bos_id = id_of(tok, tok->bos);
    tok->eos_id = id_of(tok, tok->eos);
    tok->pad_id = id_of(tok, tok->pad);
    tok->unk_id = id_of(tok, tok->unk);
    for (int i = 0; i < tok->n_post_pre; i++)
        if (tok->post_pre[i] == -2) tok->post_pre[i] = tok->bos_id;
    for (int i = 0; i < tok->n_post_post; i++)
        if (tok->post_post[i] == -3) tok->post_post[i] = tok->eos_id;
    for (int i = 0; i < tok->n_post_pre; i++)
        if (tok->post_pre[i] < 0 || tok->post_pre[i] >= vs)
            return err_set(e, ST_EINVAL, "%s: the post-processor adds id %d, outside the vocabulary", what, tok->post_pre[i]);
    for (int i = 0; i < tok->n_post_post; i++)
        if (tok->post_post[i] < 0 || tok->post_post[i] >= vs)
            return err_set(e, ST_EINVAL, "%s: the post-processor adds id %d, outside the vocabulary", what, tok->post_post[i]);

    // Matchers: non-normalized tokens on the raw text, normalized ones on normalised text.
    PatRef *raw = xcalloc((size_t)tok->n_added + 1, sizeof *raw), *norm = xcalloc((size_t)tok->n_added + 1, sizeof *norm);
    int nr = 0, nn = 0;
    EncodeCtx ctx = {0};
    Status st = ST_OK;
    for (int i = 0; i < tok->n_added && st == ST_OK; i++) {
        AddedToken *t = &tok->added[i];
        if (!t->normalized || !tok->normalizer) {
            PatRef *r = t->normalized ? &norm[nn++] : &raw[nr++];
            *r = (PatRef){t, xstrndup(t->content, t->len), t->len, i};
            continue;
        }
        const char *s;
        size_t len;
        st = normalizer_apply(tok->normalizer, t->content, t->len, &ctx, &s, &len, e);
        if (st == ST_OK && len == 0) st = err_set(e, ST_EINVAL, "%s: added token \"%s\" normalises to nothing", what, t->content);
        if (st == ST_OK) norm[nn++] = (PatRef){t, xstrndup(s, len), len, i};
        if (st == ST_OK && (len != t->len || memcmp(s, t->content, len))) t->decode_as = xstrndup(s, len);
    }
    if (ctx.md) pcre2_match_data_free(ctx.md);
    for (ArenaBlock *b = ctx.blocks, *nx; b; b = nx) nx = b->next, free(b);
    free(ctx.spans.v);
    if (st == ST_OK) {
        matcher_build(&tok->raw_matcher, raw, nr);
        matcher_build(&tok->norm_matcher, norm, nn);
    } else {
        for (int i = 0; i < nr; i++) free(raw[i].pat);
        for (int i = 0; i < nn; i++) free(norm[i].pat);
    }
    free(raw);
    free(norm);
    if (st == ST_OK) decode_forms(tok);
    return st;
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return xstrdup(".");
    return xstrndup(path, (size_t)(slash - path) + (slash == path));
}

// Build a tokenizer from a parsed tokenizer.json (j, named json_path) and tokenizer_config.json
// (cfg, may be NULL, named cfg_path). Takes neither tree.
static Status load_trees(const cJSON *j, const cJSON *cfg, const char *json_path, const char *cfg_path, Tokenizer **out,
                         Err *e) {
    Tokenizer *tok = xcalloc(1, sizeof *tok);
    tok->path = xstrdup(json_path);
    tok->bos_id = tok->eos_id = tok->pad_id = tok->unk_id = -1;
    Status st;
    if (!cJSON_IsObject(j)) {
        st = err_set(e, ST_EINVAL, "%s: expected a JSON object", json_path);
        goto fail;
    }
    if (!cJSON_GetObjectItemCaseSensitive(j, "model")) {
        st = err_set(e, ST_EINVAL, "%s: missing \"model\"", json_path);
        goto fail;
    }
    st = bpe_parse(cJSON_GetObjectItemCaseSensitive(j, "model"), json_path, &tok->bpe, e);
    if (st == ST_OK) st = normalizer_parse(cJSON_GetObjectItemCaseSensitive(j, "normalizer"), json_path, &tok->normalizer, e);
    if (st == ST_OK) st = pretok_parse(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), json_path, &tok->pre, e);
    if (st == ST_OK) st = decoder_parse(cJSON_GetObjectItemCaseSensitive(j, "decoder"), json_path, &tok->decoder, e);
    if (st == ST_OK) st = parse_added(tok, cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), json_path, e);
    if (st == ST_OK) st = parse_post(tok, cJSON_GetObjectItemCaseSensitive(j, "post_processor"), json_path, e);
    if (st != ST_OK) goto fail;
    if (cfg) {
        if (!cJSON_IsObject(cfg)) st = err_set(e, ST_EINVAL, "%s: expected a JSON object", cfg_path);
        if (st == ST_OK) st = apply_config(tok, cfg, cfg_path, e);
        if (st != ST_OK) goto fail;
    }
    st = finish(tok, json_path, e);
    if (st != ST_OK) goto fail;
    *out = tok;
    return ST_OK;
fail:
    tokenizer_free(tok);
    return st;
}

// A GGUF file's tokenizer metadata, through the same loader (tok_gguf.c says how it maps).
static Status load_gguf(const char *path, Tokenizer **out, Err *e) {
    cJSON *j, *cfg;
    TRY(tok_gguf_json(path, &j, &cfg, e));
    char what[1100];
    snprintf(what, sizeof what, "%s (GGUF tokenizer metadata)", path);
    Status st = load_trees(j, cfg, what, what, out, e);
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    return st;
}

Status tokenizer_load(const char *dir_or_file, Tokenizer **out, Err *e) {
    *out = NULL;
    if (gguf_is_file(dir_or_file)) return load_gguf(dir_or_file, out, e);
    char *json_path, *dir;
    if (dir_exists(dir_or_file)) {
        json_path = path_join(dir_or_file, "tokenizer.json");
        dir = xstrdup(dir_or_file);
    } else {
        json_path = xstrdup(dir_or_file);
        dir = dir_of(dir_or_file);
    }
    char *cfg_path = path_join(dir, "tokenizer_config.json");
    free(dir);
    cJSON *j = NULL, *cfg = NULL;
    Status st;
    if (!file_exists(json_path)) {
        st = err_set(e, ST_ENOTFOUND, "%s: no such file (a tokenizer directory needs tokenizer.json)", json_path);
        goto done;
    }
    st = json_parse_file(json_path, &j, e);
    if (st == ST_OK && file_exists(cfg_path)) st = json_parse_file(cfg_path, &cfg, e);
    if (st == ST_OK) st = load_trees(j, cfg, json_path, cfg_path, out, e);
done:
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    free(json_path);
    free(cfg_path);
    return st;
}

void tokenizer_free(Tokenizer *tok) {
    if (!tok) return;
    normalizer_free(tok->normalizer);
    pretok_free(tok->pre);
    decoder_free(tok->decoder);
    bpe_free(&tok->bpe);
    free(tok->post_pre);
    free(tok->post_post);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content), free(tok->added[i].decode_as);
    free(tok->added);
    strmap_free(&tok->added_map);
    matcher_free(&tok->raw_matcher);
    matcher_free(&tok->norm_matcher);
    free(tok->id_tok);
    free(tok->id_dec);
    free(tok->special);
    free(tok->skip_dec);
    free(tok->bos), free(tok->eos), free(tok->pad), free(tok->unk);
    free(tok->path);
    free(tok);
}
