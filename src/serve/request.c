// request.c: OpenAI request bodies to ServeRequest (see request.h). Fields the server does not
// know are ignored, as OpenAI-compatible servers do; known fields of the wrong type or range are
// errors naming them.
#include "request.h"

#include "../core/alloc.h"
#include "../core/json.h"

#include <math.h>
#include <string.h>

void serve_request_free(ServeRequest *r) {
    free(r->model);
    cJSON_Delete(r->messages);
    cJSON_Delete(r->tools);
    cJSON_Delete(r->template_kwargs);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

// An integer field in [lo, hi]; absent leaves *out.
static Status get_int(const cJSON *o, const char *key, long long lo, long long hi, int *present, long long *out,
                      Err *e) {
    const cJSON *v = field(o, key);
    if (present) *present = v != NULL;
    if (!v) return ST_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
        return err_set(e, ST_EINVAL, "%s: expected an integer in [%lld, %lld]", key, lo, hi);
    *out = (long long)d;
    return ST_OK;
}

static Status get_num(const cJSON *o, const char *key, double lo, double hi, int *present, double *out, Err *e) {
    const cJSON *v = field(o, key);
    if (present) *present = v != NULL;
    if (!v) return ST_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d < lo || d > hi) return err_set(e, ST_EINVAL, "%s: expected a number in [%g, %g]", key, lo, hi);
    *out = d;
    return ST_OK;
}

static Status get_bool(const cJSON *o, const char *key, int *out, Err *e) {
    const cJSON *v = field(o, key);
    if (!v) return ST_OK;
    if (!cJSON_IsBool(v)) return err_set(e, ST_EINVAL, "%s: expected true or false", key);
    *out = cJSON_IsTrue(v);
    return ST_OK;
}

// Message content: a string, or a list of parts whose text parts are joined. Rewritten in place to
// a string so the chat template sees what it expects.
static Status normalise_content(cJSON *msg, int i, Err *e) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (cJSON_IsString(c)) return ST_OK;
    if (!c || cJSON_IsNull(c)) {  // an assistant turn of tool calls only: templates expect a string
        if (c) cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateString(""));
        else cJSON_AddStringToObject(msg, "content", "");
        return ST_OK;
    }
    if (!cJSON_IsArray(c)) return err_set(e, ST_EINVAL, "messages[%d].content: expected a string or a list of parts", i);
    StrBuf sb = {0};
    int k = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
            sb_free(&sb);
            return err_set(e, ST_EINVAL, "messages[%d].content[%d]: only {\"type\": \"text\", \"text\": ...} parts are served",
                           i, k);
        }
        sb_puts(&sb, text->valuestring);
        k++;
    }
    char *s = sb.data ? sb_take(&sb) : xstrdup("");
    cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateString(s));
    free(s);
    return ST_OK;
}

static Status parse_messages(const cJSON *root, ServeRequest *r, Err *e) {
    const cJSON *m = field(root, "messages");
    if (!m) return err_set(e, ST_EINVAL, "messages: required (a list of {\"role\", \"content\"} objects)");
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0)
        return err_set(e, ST_EINVAL, "messages: expected a non-empty list of {\"role\", \"content\"} objects");
    r->messages = cJSON_Duplicate(m, 1);
    int i = 0;
    cJSON *msg;
    cJSON_ArrayForEach(msg, r->messages) {
        if (!cJSON_IsObject(msg)) return err_set(e, ST_EINVAL, "messages[%d]: expected an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsString(role)) return err_set(e, ST_EINVAL, "messages[%d].role: expected a string", i);
        TRY(normalise_content(msg, i, e));
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        if (tc && !cJSON_IsNull(tc) && !cJSON_IsArray(tc))
            return err_set(e, ST_EINVAL, "messages[%d].tool_calls: expected a list", i);
        i++;
    }
    const cJSON *tools = field(root, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return err_set(e, ST_EINVAL, "tools: expected a list of {\"type\": \"function\", ...}");
        int k = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *name = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
            if (!cJSON_IsObject(t) || !cJSON_IsObject(fn) || !cJSON_IsString(name))
                return err_set(e, ST_EINVAL, "tools[%d]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", k);
            k++;
        }
        if (k) r->tools = cJSON_Duplicate(tools, 1);
    }
    const cJSON *tc = field(root, "tool_choice");
    if (tc && !(cJSON_IsString(tc) && (!strcmp(tc->valuestring, "auto") || !strcmp(tc->valuestring, "none"))))
        return err_set(e, ST_EINVAL, "tool_choice: only \"auto\" and \"none\" are served");
    if (tc && !strcmp(tc->valuestring, "none")) {
        cJSON_Delete(r->tools);
        r->tools = NULL;
    }
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (kw) {
        if (!cJSON_IsObject(kw)) return err_set(e, ST_EINVAL, "chat_template_kwargs: expected an object");
        r->template_kwargs = cJSON_Duplicate(kw, 1);
    }
    return ST_OK;
}

static Status parse_prompt(const cJSON *root, ServeRequest *r, Err *e) {
    const cJSON *p = field(root, "prompt");
    if (p && cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
    if (!p) return err_set(e, ST_EINVAL, "prompt: required (a string)");
    if (!cJSON_IsString(p)) return err_set(e, ST_EINVAL, "prompt: expected a string (or a list of one string)");
    if (!p->valuestring[0]) return err_set(e, ST_EINVAL, "prompt: empty");
    r->prompt = xstrdup(p->valuestring);
    return ST_OK;
}

static Status parse_stop(const cJSON *root, ServeRequest *r, Err *e) {
    const cJSON *s = field(root, "stop");
    if (!s) return ST_OK;
    if (cJSON_IsString(s)) {
        if (s->valuestring[0]) r->stop[r->n_stop++] = xstrdup(s->valuestring);
        return ST_OK;
    }
    if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) > SERVE_MAX_STOP)
        return err_set(e, ST_EINVAL, "stop: expected a string or a list of at most %d strings", SERVE_MAX_STOP);
    const cJSON *x;
    cJSON_ArrayForEach(x, s) {
        if (!cJSON_IsString(x)) return err_set(e, ST_EINVAL, "stop[%d]: expected a string", r->n_stop);
        if (x->valuestring[0]) r->stop[r->n_stop++] = xstrdup(x->valuestring);
    }
    return ST_OK;
}

static Status parse_options(const cJSON *root, ServeRequest *r, Err *e) {
    long long v = 1;
    TRY(get_int(root, "n", 1, SERVE_MAX_N, NULL, &v, e));
    r->n = (int)v;
    int have;
    v = 0;
    TRY(get_int(root, "max_tokens", 1, 1 << 30, &have, &v, e));
    TRY(get_int(root, "max_completion_tokens", 1, 1 << 30, &have, &v, e));
    r->max_tokens = (int)v;
    double d = 1;
    TRY(get_num(root, "temperature", 0, 2, &r->has_temperature, &d, e));
    r->temperature = (float)d;
    d = 1;
    TRY(get_num(root, "top_p", 0, 1, &r->has_top_p, &d, e));
    if (r->has_top_p && d <= 0) return err_set(e, ST_EINVAL, "top_p: expected a number in (0, 1]");
    r->top_p = d;
    v = 0;
    TRY(get_int(root, "top_k", -1, 1 << 30, &r->has_top_k, &v, e));
    r->top_k = v < 0 ? 0 : (int)v;
    d = 0;
    TRY(get_num(root, "min_p", 0, 1, &r->has_min_p, &d, e));
    r->min_p = (float)d;
    v = 0;
    TRY(get_int(root, "seed", -(1LL << 53), 1LL << 53, &r->has_seed, &v, e));
    r->seed = (uint64_t)v;
    TRY(parse_stop(root, r, e));
    TRY(get_bool(root, "ignore_eos", &r->ignore_eos, e));
    v = 0;
    TRY(get_int(root, "min_tokens", 0, 1 << 30, NULL, &v, e));
    r->min_tokens = (int)v;
    TRY(get_bool(root, "stream", &r->stream, e));
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return err_set(e, ST_EINVAL, "stream_options: expected an object");
        const cJSON *iu = field(so, "include_usage");
        if (iu && !cJSON_IsBool(iu)) return err_set(e, ST_EINVAL, "stream_options.include_usage: expected true or false");
        r->include_usage = iu && cJSON_IsTrue(iu);
    }
    if (r->kind == SERVE_CHAT) {
        TRY(get_bool(root, "logprobs", &r->logprobs, e));
        v = 0;
        TRY(get_int(root, "top_logprobs", 0, 20, NULL, &v, e));
        r->top_logprobs = (int)v;
    } else {
        int lp;
        v = 0;
        TRY(get_int(root, "logprobs", 0, 5, &lp, &v, e));
        r->logprobs = lp;
        r->top_logprobs = (int)v;
    }
    if (r->kind == SERVE_CHAT && r->top_logprobs > 0 && !r->logprobs)
        return err_set(e, ST_EINVAL, "top_logprobs: needs \"logprobs\": true");
    for (int i = 0; i < 2; i++) {
        const char *key = i ? "presence_penalty" : "frequency_penalty";
        d = 0;
        TRY(get_num(root, key, -2, 2, NULL, &d, e));
        if (d != 0) return err_set(e, ST_EUNSUPPORTED, "%s: not served (only 0)", key);
    }
    const cJSON *rf = field(root, "response_format");
    if (rf) {
        const cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            return err_set(e, ST_EUNSUPPORTED,
                           "response_format: only {\"type\": \"text\"} is served (json_object and json_schema: "
                           "constrained decoding is not implemented)");
    }
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) return err_set(e, ST_EINVAL, "model: expected a string");
    if (model) r->model = xstrdup(model->valuestring);
    return ST_OK;
}

Status serve_request_parse(ServeKind kind, const char *body, size_t len, ServeRequest *r, Err *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    if (len == 0) return err_set(e, ST_EINVAL, "body: empty (expected a JSON object)");
    const char *at = NULL;  // where parsing stopped (the error position on failure; thread-safe)
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &at, 0);
    if (!root) {
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        return err_set(e, ST_EINVAL, "body: not valid JSON (at byte %ld)", off);
    }
    Status st = ST_OK;
    if (!cJSON_IsObject(root)) st = err_set(e, ST_EINVAL, "body: expected a JSON object");
    if (st == ST_OK) st = kind == SERVE_CHAT ? parse_messages(root, r, e) : parse_prompt(root, r, e);
    if (st == ST_OK) st = parse_options(root, r, e);
    cJSON_Delete(root);
    if (st != ST_OK) serve_request_free(r);
    return st;
}
