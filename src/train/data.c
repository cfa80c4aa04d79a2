// data.c: dataset rows in TRL's formats -> examples (ids + label mask).
#include "data.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"

#include <ctype.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

void i32vec_push(I32Vec *a, int32_t x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = xrealloc(a->v, a->cap * sizeof(int32_t));
    }
    a->v[a->n++] = x;
}

void i32vec_free(I32Vec *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

const char *data_format_name(DataFormat f) {
    static const char *names[] = {"text", "prompt-completion", "messages", "input_ids"};
    return names[f];
}

int data_looks_like_hub_id(const char *s) {
    struct stat sb;
    if (stat(s, &sb) == 0) return 0;
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || strchr(slash + 1, '/') || !slash[1]) return 0;
    if (strstr(s, ".json")) return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_./", *p)) return 0;
    return 1;
}

typedef struct RowCtx {
    const DataConfig *cfg;
    const TextCodec *codec;
    DataFormat format;
    int conversational;
    int completion_only;  // cfg->completion_only_loss, or (auto) the first row has "prompt" and "completion"
    int warned_prefix;
} RowCtx;

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

static Status need_codec(const RowCtx *c, Err *e) {
    if (!c->codec) return err_set(e, ST_EINVAL, "text rows need a tokenizer (the model directory has no tokenizer.json)");
    return ST_OK;
}

static Status encode(const RowCtx *c, const char *text, int add_special, I32Vec *out, Err *e) {
    TRY(need_codec(c, e));
    return c->codec->encode(c->codec->ctx, text, strlen(text), add_special, out, e);
}

// messages must be a non-empty array of {role: str, content: str | list | null}; ShareGPT
// {from, value} rows are converted (human -> user, gpt -> assistant). Returns a new array.
static Status check_messages(const cJSON *arr, const char *field, cJSON **out, Err *e) {
    if (!cJSON_IsArray(arr)) return err_set(e, ST_EINVAL, "\"%s\" must be a list of messages", field);
    if (cJSON_GetArraySize(arr) == 0) return err_set(e, ST_EINVAL, "\"%s\" is an empty list of messages", field);
    cJSON *res = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *m = arr->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) {
            cJSON_Delete(res);
            return err_set(e, ST_EINVAL, "\"%s\"[%d] is not an object with \"role\" and \"content\"", field, i);
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        cJSON *copy;
        if (!role && cJSON_GetObjectItemCaseSensitive(m, "from")) {  // ShareGPT
            const cJSON *from = cJSON_GetObjectItemCaseSensitive(m, "from");
            const cJSON *value = cJSON_GetObjectItemCaseSensitive(m, "value");
            if (!cJSON_IsString(from) || !cJSON_IsString(value)) {
                cJSON_Delete(res);
                return err_set(e, ST_EINVAL, "\"%s\"[%d]: ShareGPT messages need string \"from\" and \"value\"", field, i);
            }
            const char *r = from->valuestring;
            if (!strcmp(r, "human")) r = "user";
            else if (!strcmp(r, "gpt")) r = "assistant";
            copy = cJSON_CreateObject();
            cJSON_AddStringToObject(copy, "role", r);
            cJSON_AddStringToObject(copy, "content", value->valuestring);
        } else {
            if (!cJSON_IsString(role)) {
                cJSON_Delete(res);
                return err_set(e, ST_EINVAL, "\"%s\"[%d] has no string \"role\"", field, i);
            }
            if (content && !cJSON_IsString(content) && !cJSON_IsArray(content) && !cJSON_IsNull(content)) {
                cJSON_Delete(res);
                return err_set(e, ST_EINVAL, "\"%s\"[%d] \"content\" must be a string, a list of parts or null", field, i);
            }
            if (!content && !cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
                cJSON_Delete(res);
                return err_set(e, ST_EINVAL, "\"%s\"[%d] has no \"content\"", field, i);
            }
            copy = cJSON_Duplicate(m, 1);
        }
        cJSON_AddItemToArray(res, copy);
    }
    *out = res;
    return ST_OK;
}

Status data_template_vars(const cJSON *row, const cJSON *kwargs, cJSON **tools, cJSON **vars, Err *e) {
    *tools = *vars = NULL;
    const cJSON *t = row ? cJSON_GetObjectItemCaseSensitive(row, "tools") : NULL;
    if (t && cJSON_IsString(t)) {  // datasets often store the schemas as a JSON string (json.loads)
        *tools = cJSON_Parse(t->valuestring);
        if (!cJSON_IsArray(*tools)) {
            cJSON_Delete(*tools);
            *tools = NULL;
            return err_set(e, ST_EINVAL, "\"tools\" is a string but not a JSON list of tool schemas");
        }
    } else if (t && cJSON_IsArray(t)) {
        *tools = cJSON_Duplicate(t, 1);
    } else if (t && !cJSON_IsNull(t)) {
        return err_set(e, ST_EINVAL, "\"tools\" must be a list of tool schemas (or a JSON string of one)");
    }
    const cJSON *rk = row ? cJSON_GetObjectItemCaseSensitive(row, "chat_template_kwargs") : NULL;
    if (rk && !cJSON_IsNull(rk) && !cJSON_IsObject(rk)) {
        cJSON_Delete(*tools);
        *tools = NULL;
        return err_set(e, ST_EINVAL, "\"chat_template_kwargs\" must be an object of template variables");
    }
    if (kwargs || (rk && cJSON_IsObject(rk))) {
        *vars = kwargs ? cJSON_Duplicate(kwargs, 1) : cJSON_CreateObject();
        for (const cJSON *k = rk && cJSON_IsObject(rk) ? rk->child : NULL; k; k = k->next) {
            cJSON_DeleteItemFromObjectCaseSensitive(*vars, k->string);
            cJSON_AddItemToObject(*vars, k->string, cJSON_Duplicate(k, 1));
        }
    }
    return ST_OK;
}

static Status render(const RowCtx *c, const cJSON *row, const cJSON *msgs, int add_gen, char **text, TextSpan **spans,
                     int *n_spans, Err *e) {
    TRY(need_codec(c, e));
    if (!c->codec->render)
        return err_set(e, ST_EINVAL, "conversational rows need a chat template (the model has no chat_template)");
    cJSON *tools, *vars;
    TRY(data_template_vars(row, c->cfg->chat_template_kwargs, &tools, &vars, e));
    Status st = c->codec->render(c->codec->ctx, msgs, tools, add_gen, vars, text, spans, n_spans, e);
    cJSON_Delete(tools);
    cJSON_Delete(vars);
    return st;
}

// Encode the rendered text and mark the tokens inside {% generation %} spans. The text is
// encoded whole (the ids TRL trains on) and also piecewise at the span edges; the two must agree,
// i.e. no token straddles a span edge, for the mask to be exact.
static Status encode_with_spans(const RowCtx *c, const char *text, const TextSpan *spans, int n_spans, I32Vec *ids,
                                I32Vec *amask, Err *e) {
    TRY(encode(c, text, 0, ids, e));
    I32Vec piece = {0};
    size_t pos = 0, len = strlen(text);
    Status st = ST_OK;
    for (int s = 0; s <= n_spans && st == ST_OK; s++) {
        size_t a = s < n_spans ? spans[s].start : len, b = s < n_spans ? spans[s].end : len;
        if (a < pos || b < a || b > len) {
            st = err_set(e, ST_EINVAL, "chat template produced overlapping {%% generation %%} spans");
            break;
        }
        for (int inside = 0; inside < 2 && st == ST_OK; inside++) {
            size_t from = inside ? a : pos, to = inside ? b : a;
            if (to == from) continue;
            char *sub = xstrndup(text + from, to - from);
            size_t before = piece.n;
            st = c->codec->encode(c->codec->ctx, sub, to - from, 0, &piece, e);
            free(sub);
            for (size_t k = before; k < piece.n; k++) i32vec_push(amask, inside);
        }
        pos = b;
    }
    if (st == ST_OK && (piece.n != ids->n || memcmp(piece.v, ids->v, ids->n * sizeof(int32_t))))
        st = err_set(e, ST_EINVAL, "a token straddles the edge of a {%% generation %%} block; put the block edges at "
                                   "token boundaries (after the role header, before the end-of-turn token)");
    i32vec_free(&piece);
    return st;
}

static Status get_string(const cJSON *row, const char *key, const char **out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    if (!v) return err_set(e, ST_EINVAL, "missing \"%s\"", key);
    if (!cJSON_IsString(v)) return err_set(e, ST_EINVAL, "\"%s\" must be a string", key);
    *out = v->valuestring;
    return ST_OK;
}

static Status get_int_list(const cJSON *row, const char *key, int vocab, I32Vec *out, Err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    if (!cJSON_IsArray(v)) return err_set(e, ST_EINVAL, "\"%s\" must be a list of integers", key);
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        // floor, not a cast to long long: casting a double beyond the range of the type is undefined.
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble))
            return err_set(e, ST_EINVAL, "\"%s\"[%d] is not an integer", key, i);
        if (vocab > 0 && (x->valuedouble < 0 || x->valuedouble >= vocab))
            return err_set(e, ST_EINVAL, "\"%s\"[%d] = %.0f is outside the vocabulary [0, %d)", key, i, x->valuedouble,
                           vocab);
        if (x->valuedouble < 0 || x->valuedouble > INT32_MAX)
            return err_set(e, ST_EINVAL, "\"%s\"[%d] = %.0f is not a token id (0 .. %d)", key, i, x->valuedouble,
                           INT32_MAX);
        i32vec_push(out, (int32_t)x->valuedouble);
    }
    return ST_OK;
}

// A pre-tokenised row, as TRL's _prepare_dataset builds its labels: a "labels" column is used as
// is (-100 = no loss; the mask columns are then ignored); else "assistant_masks" always applies
// and "completion_mask" only with completion-only loss. Labels must be -100 or the input id at
// that position: the loss heads predict the next input id.
static Status row_ids(const RowCtx *c, const cJSON *row, I32Vec *ids, I32Vec *mask, Err *e) {
    int vocab = c->cfg->vocab_size > 0 ? c->cfg->vocab_size : c->codec ? c->codec->vocab_size : 0;
    TRY(get_int_list(row, "input_ids", vocab, ids, e));
    if (ids->n == 0) return err_set(e, ST_EINVAL, "\"input_ids\" is empty");
    for (size_t t = 0; t < ids->n; t++) i32vec_push(mask, 1);
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(row, "labels");
    if (labels) {
        if (!cJSON_IsArray(labels)) return err_set(e, ST_EINVAL, "\"labels\" must be a list of integers");
        if ((size_t)cJSON_GetArraySize(labels) != ids->n)
            return err_set(e, ST_EINVAL, "\"labels\" has %d entries but \"input_ids\" has %zu", cJSON_GetArraySize(labels),
                           ids->n);
        size_t t = 0;
        for (const cJSON *x = labels->child; x; x = x->next, t++) {
            if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble))
                return err_set(e, ST_EINVAL, "\"labels\"[%zu] is not an integer", t);
            if (x->valuedouble == -100) {
                mask->v[t] = 0;
            } else if (x->valuedouble != ids->v[t]) {
                return err_set(e, ST_EUNSUPPORTED, "\"labels\"[%zu] = %.0f differs from \"input_ids\"[%zu] = %d: labels "
                                                   "must be -100 (no loss) or the input id (other targets are not "
                                                   "supported)", t, x->valuedouble, t, ids->v[t]);
            }
        }
        return ST_OK;
    }
    static const char *mask_keys[] = {"completion_mask", "assistant_masks"};
    for (int k = 0; k < 2; k++) {
        if (!cJSON_GetObjectItemCaseSensitive(row, mask_keys[k])) continue;
        if (k == 0 && !c->completion_only) continue;
        I32Vec m = {0};
        Status st = get_int_list(row, mask_keys[k], 2, &m, e);
        if (st == ST_OK && m.n != ids->n)
            st = err_set(e, ST_EINVAL, "\"%s\" has %zu entries but \"input_ids\" has %zu", mask_keys[k], m.n, ids->n);
        for (size_t t = 0; st == ST_OK && t < m.n; t++) mask->v[t] &= m.v[t];
        i32vec_free(&m);
        TRY(st);
    }
    return ST_OK;
}

static Status row_text(const RowCtx *c, const cJSON *row, I32Vec *ids, I32Vec *mask, Err *e) {
    const char *text = NULL;
    TRY(get_string(row, c->cfg->text_field, &text, e));
    char *full = NULL;
    const char *eos = c->codec ? c->codec->eos_token : NULL;
    if (eos && !ends_with(text, eos)) {
        full = xmalloc(strlen(text) + strlen(eos) + 1);
        strcpy(full, text);
        strcat(full, eos);
    }
    Status st = encode(c, full ? full : text, 1, ids, e);
    free(full);
    for (size_t t = 0; t < ids->n; t++) i32vec_push(mask, 1);
    return st;
}

// Conversational LM: the whole rendered conversation; assistant-only masks from the spans.
static Status row_messages(const RowCtx *c, const cJSON *row, I32Vec *ids, I32Vec *mask, Err *e) {
    const char *key = cJSON_GetObjectItemCaseSensitive(row, "messages") ? "messages" : "conversations";
    cJSON *msgs;
    TRY(check_messages(cJSON_GetObjectItemCaseSensitive(row, key), key, &msgs, e));
    char *text = NULL;
    TextSpan *spans = NULL;
    int n_spans = 0;
    Status st = render(c, row, msgs, 0, &text, &spans, &n_spans, e);
    if (st == ST_OK && c->cfg->assistant_only_loss) {
        st = encode_with_spans(c, text, spans, n_spans, ids, mask, e);
    } else if (st == ST_OK) {
        st = encode(c, text, 0, ids, e);
        for (size_t t = 0; t < ids->n; t++) i32vec_push(mask, 1);
    }
    free(text);
    free(spans);
    cJSON_Delete(msgs);
    return st;
}

static Status row_prompt_completion(RowCtx *c, const cJSON *row, I32Vec *ids, I32Vec *mask, Err *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(row, "prompt");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(row, "completion");
    if (!p) return err_set(e, ST_EINVAL, "missing \"prompt\"");
    if (!q) return err_set(e, ST_EINVAL, "missing \"completion\"");
    I32Vec pids = {0};
    Status st = ST_OK;
    int conv = cJSON_IsArray(p);
    if (conv != c->conversational || (conv ? !cJSON_IsArray(q) : !(cJSON_IsString(p) && cJSON_IsString(q))))
        return err_set(e, ST_EINVAL, "\"prompt\" and \"completion\" must both be %s, as in the first row",
                       c->conversational ? "lists of messages" : "strings");
    if (!conv) {
        const char *eos = c->codec ? c->codec->eos_token : NULL;
        size_t lp = strlen(p->valuestring), lq = strlen(q->valuestring), le = eos ? strlen(eos) : 0;
        char *full = xmalloc(lp + lq + le + 1);
        memcpy(full, p->valuestring, lp);
        memcpy(full + lp, q->valuestring, lq + 1);
        if (eos && !ends_with(q->valuestring, eos)) strcat(full, eos);
        st = encode(c, p->valuestring, 1, &pids, e);
        if (st == ST_OK) st = encode(c, full, 1, ids, e);
        free(full);
        for (size_t t = 0; st == ST_OK && t < ids->n; t++) i32vec_push(mask, 1);
    } else {
        cJSON *pm = NULL, *qm = NULL;
        st = check_messages(p, "prompt", &pm, e);
        if (st == ST_OK) st = check_messages(q, "completion", &qm, e);
        char *ptext = NULL, *ftext = NULL;
        TextSpan *spans = NULL;
        int n_spans = 0;
        if (st == ST_OK) st = render(c, row, pm, 1, &ptext, NULL, NULL, e);
        if (st == ST_OK) {
            cJSON *all = cJSON_Duplicate(pm, 1);
            for (cJSON *m = qm->child; m; m = m->next) cJSON_AddItemToArray(all, cJSON_Duplicate(m, 1));
            st = render(c, row, all, 0, &ftext, &spans, &n_spans, e);
            cJSON_Delete(all);
        }
        if (st == ST_OK) st = encode(c, ptext, 0, &pids, e);
        if (st == ST_OK && c->cfg->assistant_only_loss) {
            st = encode_with_spans(c, ftext, spans, n_spans, ids, mask, e);
        } else if (st == ST_OK) {
            st = encode(c, ftext, 0, ids, e);
            for (size_t t = 0; st == ST_OK && t < ids->n; t++) i32vec_push(mask, 1);
        }
        free(ptext);
        free(ftext);
        free(spans);
        cJSON_Delete(pm);
        cJSON_Delete(qm);
    }
    if (st == ST_OK && c->completion_only) {
        size_t np = MIN(pids.n, ids->n);
        // np == 0: an empty prompt leaves pids.v NULL, and memcmp(NULL, ..., 0) is undefined.
        if (!c->warned_prefix && (pids.n > ids->n || (np && memcmp(pids.v, ids->v, np * sizeof(int32_t))))) {
            log_warn("the prompt's tokens are not a prefix of the prompt+completion tokens; the completion mask "
                     "starts after %zu tokens anyway (as TRL)", pids.n);
            c->warned_prefix = 1;
        }
        for (size_t t = 0; t < np; t++) mask->v[t] = 0;
    }
    i32vec_free(&pids);
    return st;
}

static Status detect_format(RowCtx *c, const cJSON *row, Err *e) {
    int has_pc = cJSON_GetObjectItemCaseSensitive(row, "prompt") && cJSON_GetObjectItemCaseSensitive(row, "completion");
    c->completion_only = c->cfg->completion_only_loss >= 0 ? c->cfg->completion_only_loss : has_pc;
    if (cJSON_GetObjectItemCaseSensitive(row, "input_ids")) {
        c->format = FMT_IDS;
    } else if (cJSON_GetObjectItemCaseSensitive(row, "prompt") && cJSON_GetObjectItemCaseSensitive(row, "completion")) {
        c->format = FMT_PROMPT_COMPLETION;
        c->conversational = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(row, "prompt"));
    } else if (cJSON_GetObjectItemCaseSensitive(row, "messages") ||
               cJSON_GetObjectItemCaseSensitive(row, "conversations")) {
        c->format = FMT_MESSAGES;
        c->conversational = 1;
    } else if (cJSON_GetObjectItemCaseSensitive(row, c->cfg->text_field)) {
        c->format = FMT_TEXT;
    } else if (cJSON_GetObjectItemCaseSensitive(row, "prompt")) {
        return err_set(e, ST_EINVAL, "a \"prompt\" without a \"completion\" (SFT needs prompt and completion)");
    } else if (cJSON_GetObjectItemCaseSensitive(row, "chosen")) {
        return err_set(e, ST_EINVAL, "a preference row (\"chosen\"/\"rejected\") is not an SFT format");
    } else {
        return err_set(e, ST_EINVAL, "no known SFT column: expected \"%s\", \"prompt\"+\"completion\", \"messages\", "
                                     "\"conversations\" or \"input_ids\"", c->cfg->text_field);
    }
    if (c->cfg->assistant_only_loss) {
        if (!c->conversational)
            return err_set(e, ST_EINVAL, "--assistant_only_loss needs conversational rows (messages), not %s",
                           data_format_name(c->format));
        if (!c->codec || !c->codec->has_generation_blocks)
            return err_set(e, ST_EINVAL, "--assistant_only_loss needs a chat template that marks assistant replies with "
                                         "{%% generation %%} ... {%% endgeneration %%}; this model's template has no "
                                         "such markers (docs/sft.md, \"assistant-only loss\", shows how to add them)");
    }
    return ST_OK;
}

static Status row_to_example(RowCtx *c, const cJSON *row, Dataset *d, Err *e) {
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "a row must be a JSON object");
    I32Vec ids = {0}, mask = {0};
    Status st;
    switch (c->format) {
    case FMT_IDS: st = row_ids(c, row, &ids, &mask, e); break;
    case FMT_TEXT: st = row_text(c, row, &ids, &mask, e); break;
    case FMT_MESSAGES:
        st = (cJSON_GetObjectItemCaseSensitive(row, "messages") || cJSON_GetObjectItemCaseSensitive(row, "conversations"))
                 ? row_messages(c, row, &ids, &mask, e)
                 : err_set(e, ST_EINVAL, "missing \"messages\"");
        break;
    default: st = row_prompt_completion(c, row, &ids, &mask, e); break;
    }
    if (st == ST_OK && ids.n == 0) st = err_set(e, ST_EINVAL, "the row encodes to no tokens");
    if (st == ST_OK && c->cfg->assistant_only_loss) {
        int any = 0;
        for (size_t t = 0; t < mask.n; t++) any |= mask.v[t];
        if (!any) st = err_set(e, ST_EINVAL, "no assistant token in this row (assistant_only_loss)");
    }
    if (st != ST_OK) {
        i32vec_free(&ids);
        i32vec_free(&mask);
        return st;
    }
    size_t n = ids.n;
    if (c->cfg->truncate && c->cfg->max_length > 0 && n > (size_t)c->cfg->max_length) {
        n = (size_t)c->cfg->max_length;
        d->n_truncated++;
    }
    int any = 0;
    for (size_t t = 0; t < n; t++) any |= mask.v[t];
    if (!any) {  // TRL drops examples whose labels are all -100
        d->n_dropped++;
    } else {
        Example *x = &d->ex[d->n++];
        x->n = (int)n;
        x->ids = ids.v;
        ids.v = NULL;
        x->mask = xmalloc(n);
        for (size_t t = 0; t < n; t++) x->mask[t] = (uint8_t)mask.v[t];
    }
    i32vec_free(&ids);
    i32vec_free(&mask);
    return ST_OK;
}

static Status one_row(RowCtx *c, const cJSON *row, int first, const char *where, Dataset *d, Err *e) {
    Status st = ST_OK;
    if (first) {
        if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "%s: a row must be a JSON object", where);
        st = detect_format(c, row, e);
        if (st != ST_OK) return err_prefix(e, "%s: ", where);
        d->format = c->format;
        d->conversational = c->conversational;
        d->completion_only_loss = c->completion_only;
    }
    st = row_to_example(c, row, d, e);
    if (st == ST_OK) return ST_OK;
    err_prefix(e, "%s: ", where);
    if (!c->cfg->skip_bad_rows) return st;
    if (!d->n_bad) snprintf(d->first_bad, sizeof d->first_bad, "%s", e->msg);
    d->n_bad++;
    err_clear(e);
    return ST_OK;
}

Status data_check_local(const char *path, Err *e) {
    if (data_looks_like_hub_id(path))
        return err_set(e, ST_EINVAL, "--dataset %s looks like a Hugging Face hub dataset id; still reads local JSONL or "
                                     "JSON files only. Export it once with: python -c \"from datasets import "
                                     "load_dataset; load_dataset('%s', split='train').to_json('data.jsonl')\" "
                                     "(docs/sft.md, \"Hub datasets\")", path, path);
    return ST_OK;
}

// data_foreach_row over at most max_rows rows (< 0: all).
static Status foreach_rows(const char *path, int skip_bad_rows, int max_rows, DataRowFn fn, void *ctx, int *n_bad,
                           char *first_bad, size_t first_bad_size, Err *e) {
    TRY(data_check_local(path, e));
    char *text;
    size_t len;
    TRY(file_read_all(path, &text, &len, e));
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i])) i++;
    Status st = ST_OK;
    char where[600];
    if (i < len && text[i] == '[') {  // one JSON array
        cJSON *arr = cJSON_ParseWithLength(text, len);
        if (!arr) {
            size_t off = (size_t)(cJSON_GetErrorPtr() - text);
            int line = 1;
            for (size_t k = 0; k < off && k < len; k++) line += text[k] == '\n';
            st = err_set(e, ST_EINVAL, "%s:%d: invalid JSON (a JSON array of rows was expected)", path, line);
        } else {
            int k = 0;
            for (const cJSON *row = arr->child; row && st == ST_OK && k != max_rows; row = row->next, k++) {
                snprintf(where, sizeof where, "%s: row %d", path, k);
                st = fn(ctx, row, k == 0, where, e);
            }
            cJSON_Delete(arr);
        }
    } else {  // JSONL
        int line = 0, first = 1, rows = 0;
        size_t p = 0;
        while (p < len && st == ST_OK && rows != max_rows) {
            line++;
            size_t q = p;
            while (q < len && text[q] != '\n') q++;
            size_t a = p, b = q;
            while (a < b && isspace((unsigned char)text[a])) a++;
            p = q + 1;
            if (a == b) continue;
            snprintf(where, sizeof where, "%s:%d", path, line);
            cJSON *row = cJSON_ParseWithLength(text + a, b - a);
            if (!row) {
                err_set(e, ST_EINVAL, "%s: invalid JSON (one object per line expected)", where);
                if (!skip_bad_rows || first) {
                    st = ST_EINVAL;
                } else {
                    if (!*n_bad && first_bad) snprintf(first_bad, first_bad_size, "%s", e->msg);
                    (*n_bad)++;
                    err_clear(e);
                }
                continue;
            }
            st = fn(ctx, row, first, where, e);
            first = 0;
            rows++;
            cJSON_Delete(row);
        }
    }
    free(text);
    return st;
}

Status data_foreach_row(const char *path, int skip_bad_rows, DataRowFn fn, void *ctx, int *n_bad, char *first_bad,
                        size_t first_bad_size, Err *e) {
    return foreach_rows(path, skip_bad_rows, -1, fn, ctx, n_bad, first_bad, first_bad_size, e);
}

static Status detect_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    RowCtx *c = ctx;
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "%s: a row must be a JSON object", where);
    if (detect_format(c, row, e) != ST_OK) return err_prefix(e, "%s: ", where);
    return ST_OK;
}

Status data_detect(const char *path, const DataConfig *cfg, DataFormat *format, int *completion_only_loss, Err *e) {
    DataConfig probe = *cfg;
    probe.assistant_only_loss = 0;  // checked with the codec by data_load
    RowCtx c = {.cfg = &probe};
    int n_bad = 0;
    TRY(foreach_rows(path, 0, 1, detect_row, &c, &n_bad, NULL, 0, e));
    *format = c.format;
    if (completion_only_loss) *completion_only_loss = c.completion_only;
    return ST_OK;
}

typedef struct LoadCtx {
    RowCtx c;
    Dataset *d;
    int cap;
} LoadCtx;

static Status load_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    LoadCtx *lc = ctx;
    if (lc->d->n == lc->cap) {
        lc->cap = lc->cap ? lc->cap * 2 : 256;
        lc->d->ex = xrealloc(lc->d->ex, (size_t)lc->cap * sizeof(Example));
    }
    return one_row(&lc->c, row, first, where, lc->d, e);
}

Status data_load(const char *path, const DataConfig *cfg, const TextCodec *codec, Dataset *d, Err *e) {
    memset(d, 0, sizeof *d);
    LoadCtx lc = {.c = {.cfg = cfg, .codec = codec}, .d = d};
    Status st = data_foreach_row(path, cfg->skip_bad_rows, load_row, &lc, &d->n_bad, d->first_bad, sizeof d->first_bad, e);
    if (st == ST_OK && d->n == 0)
        st = err_set(e, ST_EINVAL, "%s: no usable example (%d rows skipped as bad, %d without any label token)", path,
                     d->n_bad, d->n_dropped);
    if (st != ST_OK) data_free(d);
    return st;
}

void data_free(Dataset *d) {
    for (int i = 0; i < d->n; i++) {
        free(d->ex[i].ids);
        free(d->ex[i].mask);
    }
    free(d->ex);
    memset(d, 0, sizeof *d);
}

Status data_int_list(const cJSON *row, const char *key, int vocab_size, I32Vec *out, Err *e) {
    return get_int_list(row, key, vocab_size, out, e);
}

Status data_messages(const cJSON *arr, const char *field, cJSON **out, Err *e) {
    return check_messages(arr, field, out, e);
}
