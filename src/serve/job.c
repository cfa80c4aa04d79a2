// job.c: one request on the scheduler thread (see serve_internal.h): prompt ids from the chat
// template or the prompt text, a GenConfig from the request over the server's defaults; while its
// sequences run in the decode slots (src/gen/slots.h) the text, stop strings and stream; then
// the OpenAI answer — one JSON body, or the end of the server-sent events.
#include "serve_internal.h"

#include "tool_calls.h"

#include <math.h>
#include <string.h>
#include <time.h>

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Job *job_new(void) {
    Job *j = xcalloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->created = (long)time(NULL);
    return j;
}

void job_unref(Job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    serve_request_free(&j->req);
    free(j->body);
    sb_free(&j->sse);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

char *serve_error_json(int status, const char *message) {
    cJSON *o = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", message);
    const char *type = status == 401 ? "authentication_error"
                       : status == 429 ? "rate_limit_exceeded"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    cJSON_AddStringToObject(err, "type", type);
    // the field an error names comes first in its message ("temperature: expected ...")
    const char *colon = strchr(message, ':');
    size_t plen = colon ? (size_t)(colon - message) : 0;
    int is_field = plen > 0 && plen < 64 && !memchr(message, ' ', plen);
    if (is_field && status == 400) {
        char param[64];
        memcpy(param, message, plen);
        param[plen] = 0;
        cJSON_AddStringToObject(err, "param", param);
    } else {
        cJSON_AddNullToObject(err, "param");
    }
    cJSON_AddNullToObject(err, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

// Under j->mu.
static void finish_locked(Job *j) {
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
}

void job_fail(Job *j, int status, const char *message) {
    pthread_mutex_lock(&j->mu);
    if (j->state == JOB_STREAMING) {  // headers are out: the error is an event, then the end
        char *err = serve_error_json(status, message);
        sb_printf(&j->sse, "data: %s\n\ndata: [DONE]\n\n", err);
        free(err);
    } else {
        j->status = status;
        free(j->body);
        j->body = serve_error_json(status, message);
    }
    finish_locked(j);
    pthread_mutex_unlock(&j->mu);
}

// ---- generation state of one job -----------------------------------------------------------



// The first occurrence of a stop string in text (at or after `from`), or -1.
static long find_stop(const GenText *g, const char *text, size_t len, size_t from) {
    long best = -1;
    for (int i = 0; i < g->n_stops; i++) {
        const char *hit = memmem(text + from, len - from, g->stops[i], strlen(g->stops[i]));
        if (hit && (best < 0 || hit - text < best)) best = hit - text;
    }
    return best;
}

// {"token", "logprob", "bytes"} of one token (OpenAI's chat shape; -9999 stands for -inf).
static cJSON *token_entry(const Tokenizer *tok, int32_t id, float lp) {
    cJSON *t = cJSON_CreateObject();
    char *s = tokenizer_decode(tok, &id, 1, 0);
    cJSON_AddStringToObject(t, "token", s);
    cJSON_AddItemToObject(t, "logprob", cJSON_CreateNumber(isfinite(lp) ? lp : -9999.0));
    cJSON *bytes = cJSON_AddArrayToObject(t, "bytes");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*c));
    free(s);
    return t;
}

// The chosen token and its `ntop` alternatives (top ids / log-probs, most likely first; may be NULL).
static cJSON *token_logprob(const Tokenizer *tok, int32_t id, float lp, const int32_t *top, const float *top_lp,
                            int ntop) {
    cJSON *t = token_entry(tok, id, lp);
    cJSON *alts = cJSON_AddArrayToObject(t, "top_logprobs");
    for (int k = 0; top && k < ntop; k++) cJSON_AddItemToArray(alts, token_entry(tok, top[k], top_lp[k]));
    return t;
}

// The legacy completions shape of a token's alternatives: {"text": logprob, ...}.
static cJSON *legacy_top(const Tokenizer *tok, const int32_t *top, const float *top_lp, int ntop) {
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; k < ntop; k++) {
        char *s = tokenizer_decode(tok, &top[k], 1, 0);
        if (!cJSON_GetObjectItemCaseSensitive(o, s))  // two ids of one text: the likelier
            cJSON_AddItemToObject(o, s, cJSON_CreateNumber(isfinite(top_lp[k]) ? top_lp[k] : -9999.0));
        free(s);
    }
    return o;
}

static cJSON *chunk_base(const Run *r) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", r->j->id);
    cJSON_AddStringToObject(c, "object", r->j->req.kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(c, "created", (double)r->j->created);
    cJSON_AddStringToObject(c, "model", r->o->model_name);
    return c;
}

static void push_event(Run *r, cJSON *chunk) {
    char *s = cJSON_PrintUnformatted(chunk);
    cJSON_Delete(chunk);
    pthread_mutex_lock(&r->j->mu);
    sb_printf(&r->j->sse, "data: %s\n\n", s);
    pthread_cond_broadcast(&r->j->cv);
    pthread_mutex_unlock(&r->j->mu);
    free(s);
}

// One streamed chunk for row `seq`: text (may be ""), an optional token logprob, a finish reason.
static void stream_chunk(Run *r, int seq, const char *text, size_t len, cJSON *lp, const char *finish,
                         cJSON *tool_calls) {
    cJSON *c = chunk_base(r);
    cJSON *choices = cJSON_AddArrayToObject(c, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", seq);
    char *t = xstrndup(text, len);
    if (r->j->req.kind == SERVE_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (!r->rows[seq].role_sent) {
            cJSON_AddStringToObject(d, "role", "assistant");
            r->rows[seq].role_sent = 1;
        }
        if (len || !finish) cJSON_AddStringToObject(d, "content", t);
        if (tool_calls) {
            int k = 0;
            cJSON *tc;
            cJSON_ArrayForEach(tc, tool_calls) cJSON_AddNumberToObject(tc, "index", k++);
            cJSON_AddItemToObject(d, "tool_calls", tool_calls);
        }
        if (lp) {
            cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
            cJSON *content = cJSON_AddArrayToObject(l, "content");
            cJSON_AddItemToArray(content, lp);
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
    } else {
        cJSON_AddStringToObject(ch, "text", t);
        if (lp) {
            cJSON *l = cJSON_AddObjectToObject(ch, "logprobs");
            cJSON *tok = cJSON_GetObjectItemCaseSensitive(lp, "token");
            cJSON *tokens = cJSON_AddArrayToObject(l, "tokens");
            cJSON_AddItemToArray(tokens, cJSON_CreateString(tok->valuestring));
            cJSON *tl = cJSON_AddArrayToObject(l, "token_logprobs");
            cJSON_AddItemToArray(tl, cJSON_CreateNumber(cJSON_GetObjectItemCaseSensitive(lp, "logprob")->valuedouble));
            const cJSON *alts = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
            if (cJSON_GetArraySize(alts) > 0) {
                cJSON *o = cJSON_CreateObject(), *a;
                cJSON_ArrayForEach(a, alts) {
                    const char *txt = cJSON_GetObjectItemCaseSensitive(a, "token")->valuestring;
                    if (!cJSON_GetObjectItemCaseSensitive(o, txt))
                        cJSON_AddNumberToObject(o, txt, cJSON_GetObjectItemCaseSensitive(a, "logprob")->valuedouble);
                }
                cJSON *tops = cJSON_AddArrayToObject(l, "top_logprobs");
                cJSON_AddItemToArray(tops, o);
            } else {
                cJSON_AddNullToObject(l, "top_logprobs");
            }
            cJSON_Delete(lp);
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
    }
    free(t);
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    push_event(r, c);
}

// One streamed tool call as OpenAI streams it: a chunk with its index, id, type, name and empty
// arguments, then one with the arguments.
static void stream_tool_call(Run *r, int seq, const cJSON *call) {
    int index = r->rows[seq].ts.ncalls;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    for (int part = 0; part < 2; part++) {
        cJSON *tc = cJSON_CreateObject();
        cJSON_AddNumberToObject(tc, "index", index);
        cJSON *f;
        if (part == 0) {
            cJSON_AddStringToObject(tc, "id", cJSON_GetObjectItemCaseSensitive(call, "id")->valuestring);
            cJSON_AddStringToObject(tc, "type", "function");
            f = cJSON_AddObjectToObject(tc, "function");
            cJSON_AddStringToObject(f, "name", cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring);
            cJSON_AddStringToObject(f, "arguments", "");
        } else {
            f = cJSON_AddObjectToObject(tc, "function");
            cJSON_AddStringToObject(f, "arguments", cJSON_GetObjectItemCaseSensitive(fn, "arguments")->valuestring);
        }
        cJSON *arr = cJSON_CreateArray();
        cJSON_AddItemToArray(arr, tc);
        stream_chunk(r, seq, "", 0, NULL, NULL, arr);
    }
}

typedef struct ToolEmit {
    Run *r;
    int seq;
    StrBuf content;  // content given by the parser since the last chunk
} ToolEmit;

static void tool_emit(void *user, const char *s, size_t n, const cJSON *call) {
    ToolEmit *te = user;
    if (!call) {
        sb_append(&te->content, s, n);
        return;
    }
    if (te->content.len) stream_chunk(te->r, te->seq, te->content.data, te->content.len, NULL, NULL, NULL);
    te->content.len = 0;
    stream_tool_call(te->r, te->seq, call);
}

// Streaming with tools: the row's text [0, limit) through its tool-call parser; the content it
// gives goes out in one chunk (with the token's log-prob, when lp), each call as stream_tool_call.
static void stream_tools(Run *r, int seq, size_t limit, int final, cJSON *lp, const char *finish) {
    ToolEmit te = {.r = r, .seq = seq};
    const StrBuf *text = &r->gt.rows[seq].text;
    tool_stream_feed(&r->rows[seq].ts, text->data ? text->data : "", limit, final, strchr(r->j->id, '-') + 1, tool_emit,
                     &te);
    if (te.content.len || lp || finish) stream_chunk(r, seq, te.content.data ? te.content.data : "", te.content.len, lp, finish, NULL);
    sb_free(&te.content);
}

// GenTokenFn: the text (stop strings), the stream, and whether to stop (client gone, timeout).
static int on_token(void *user, int prompt_index, int seq_index, int32_t id, float logprob) {
    Run *r = user;
    Job *j = r->j;
    int stop = gen_text_on_token(&r->gt, prompt_index, seq_index, id, logprob);
    RowOut *ro = &r->rows[seq_index];
    ro->n_tokens++;
    const StrBuf *text = &r->gt.rows[seq_index].text;
    size_t len = text->len;
    if (stop && !ro->done) {
        size_t from = ro->sent > r->hold ? ro->sent - r->hold : 0;
        long at = find_stop(&r->gt, text->data, len, from);
        if (at >= 0) ro->done = 1, ro->cut = (size_t)at;
    }
    if (j->req.stream) {
        size_t limit = ro->done ? ro->cut : (len > r->hold ? len - r->hold : 0);
        while (limit > ro->sent && limit < len && ((unsigned char)text->data[limit] & 0xC0) == 0x80) limit--;
        if (limit < ro->sent) limit = ro->sent;
        cJSON *lp = NULL;
        if (j->req.logprobs) {
            const GenSeq *s = &r->seqs[seq_index];
            int ntop = r->cfg.top_logprobs, t = s->n - 1;
            lp = token_logprob(r->sm->tok, id, logprob, s->top_ids ? s->top_ids + (size_t)t * ntop : NULL,
                               s->top_logprobs ? s->top_logprobs + (size_t)t * ntop : NULL, ntop);
        }
        if (r->tools) stream_tools(r, seq_index, limit, 0, lp, NULL);
        else stream_chunk(r, seq_index, text->data ? text->data + ro->sent : "", limit - ro->sent, lp, NULL, NULL);
        ro->sent = limit;
    }
    pthread_mutex_lock(&j->mu);
    int cancel = j->cancelled;
    if (serve_now() > j->deadline) j->timed_out = 1, cancel = 1;
    pthread_mutex_unlock(&j->mu);
    return stop || cancel;
}

// ---- prompt and config -----------------------------------------------------------------------

static Status encode_prompt(ServeModel *sm, const ServeRequest *q, TokenIds *ids, Err *e) {
    if (q->kind == SERVE_COMPLETION) return tokenizer_encode(sm->tok, q->prompt, strlen(q->prompt), 1, ids, e);
    if (!sm->tmpl) return err_set(e, ST_EINVAL, "messages: the model has no chat template (use /v1/completions)");
    cJSON *kw = sm->template_kwargs ? cJSON_Duplicate(sm->template_kwargs, 1) : cJSON_CreateObject();
    const cJSON *x;
    if (q->template_kwargs) cJSON_ArrayForEach(x, q->template_kwargs) {
            cJSON_DeleteItemFromObjectCaseSensitive(kw, x->string);
            cJSON_AddItemToObject(kw, x->string, cJSON_Duplicate(x, 1));
        }
    char *text = NULL;
    Status st = chat_template_render(sm->tmpl, q->messages, q->tools, NULL, 1, kw, &text, NULL, e);
    cJSON_Delete(kw);
    if (st != ST_OK) return err_prefix(e, "messages: the chat template failed: ");
    st = tokenizer_encode(sm->tok, text, strlen(text), 0, ids, e);
    free(text);
    if (st != ST_OK) err_prefix(e, "messages: ");
    return st;
}

// The request over the server's defaults; errors are the client's (400).
static Status request_config(const ServeOptions *o, ServeModel *sm, const ServeRequest *q, int len, uint64_t seed,
                             GenConfig *c, Err *e) {
    *c = sm->base;
    c->num_return_sequences = q->n;
    c->batch_size = q->n;
    c->max_cache_len = o->max_cache_len;
    c->on_progress = NULL;
    if (q->n > o->max_batch)
        return err_set(e, ST_EINVAL, "n: %d is more than this server decodes together (--max_batch %d)", q->n,
                       o->max_batch);
    if (q->has_temperature) {
        c->do_sample = q->temperature > 0;
        if (q->temperature > 0) c->temperature = q->temperature;
    }
    if (q->has_top_p) c->top_p = q->top_p;
    if (q->has_top_k) c->top_k = q->top_k;
    if (q->has_min_p) c->min_p = q->min_p;
    c->seed = q->has_seed ? q->seed : seed;
    if (q->ignore_eos) c->ignore_eos = 1;
    if (q->min_tokens) c->min_new_tokens = q->min_tokens;
    c->logprobs = q->logprobs ? GEN_LOGPROBS_RAW : GEN_LOGPROBS_NONE;
    c->top_logprobs = q->logprobs ? q->top_logprobs : 0;
    int P = gen_padded_len(c, sm->m->be, len);
    int room = o->max_cache_len - P + 1;  // tokens that fit behind the padded prompt
    if (room < 1)
        return err_set(e, ST_EINVAL,
                       "prompt: %d tokens (%d cache slots padded) leave no room in the %d-slot cache "
                       "(--max_cache_len); the limit is %d prompt tokens",
                       len, P, o->max_cache_len, o->max_cache_len - sm->m->be->prefill_bucket);
    if (q->max_tokens > room)
        return err_set(e, ST_EINVAL,
                       "max_tokens: %d tokens do not fit behind the prompt of %d tokens (%d slots padded): the limit "
                       "is %d (--max_cache_len %d)",
                       q->max_tokens, len, P, room, o->max_cache_len);
    c->max_new_tokens = q->max_tokens ? q->max_tokens : MIN(c->max_new_tokens, room);
    c->max_length = 0;
    return gen_config_check(c, sm->m->cfg.vocab_size, e);
}

// ---- the answer ------------------------------------------------------------------------------

static const char *finish_name(const GenSeq *s, int tools) {
    if (tools) return "tool_calls";
    return s->finish == GEN_FINISH_LENGTH ? "length" : "stop";
}

// The row's final text: the streamed text up to a stop string.
static char *row_text(const Run *r, int seq) {
    const StrBuf *t = &r->gt.rows[seq].text;
    size_t n = r->rows[seq].done ? r->rows[seq].cut : t->len;
    return xstrndup(t->data ? t->data : "", n);
}

static cJSON *usage_json(const Job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->prompt_tokens + j->completion_tokens));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)j->cached_tokens);
    return u;
}

static cJSON *logprobs_json(const Run *r, const GenSeq *s) {
    const Tokenizer *tok = r->sm->tok;
    if (r->j->req.kind == SERVE_CHAT) {
        cJSON *l = cJSON_CreateObject();
        cJSON *content = cJSON_AddArrayToObject(l, "content");
        int ntop = r->cfg.top_logprobs;
        for (int i = 0; i < s->n; i++)
            cJSON_AddItemToArray(content, token_logprob(tok, s->ids[i], s->logprobs[i],
                                                        s->top_ids ? s->top_ids + (size_t)i * ntop : NULL,
                                                        s->top_logprobs ? s->top_logprobs + (size_t)i * ntop : NULL, ntop));
        return l;
    }
    cJSON *l = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(l, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(l, "token_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(l, "text_offset");
    long off = 0;
    for (int i = 0; i < s->n; i++) {
        char *t = tokenizer_decode(tok, &s->ids[i], 1, 0);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(t));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(isfinite(s->logprobs[i]) ? s->logprobs[i] : -9999.0));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += (long)strlen(t);
        free(t);
    }
    if (s->top_ids) {
        cJSON *tops = cJSON_AddArrayToObject(l, "top_logprobs");
        int ntop = r->cfg.top_logprobs;
        for (int i = 0; i < s->n; i++)
            cJSON_AddItemToArray(tops, legacy_top(tok, s->top_ids + (size_t)i * ntop, s->top_logprobs + (size_t)i * ntop, ntop));
    } else {
        cJSON_AddNullToObject(l, "top_logprobs");
    }
    return l;
}

static char *answer_json(Run *r, const GenSeq *seqs) {
    Job *j = r->j;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->req.kind == SERVE_CHAT ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", r->o->model_name);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < r->n; i++) {
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        char *text = row_text(r, i);
        int ncalls = 0;
        if (j->req.kind == SERVE_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON *calls = NULL;
            char *content = NULL;
            // with tools: the text outside the calls, stripped (as the stream gives it)
            if (j->req.tools) ncalls = serve_parse_tool_calls(text, strchr(j->id, '-') + 1, &content, &calls);
            if (ncalls) {
                cJSON_AddItemToObject(msg, "content", content[0] ? cJSON_CreateString(content) : cJSON_CreateNull());
                cJSON_AddItemToObject(msg, "tool_calls", calls);
            } else {
                cJSON_AddStringToObject(msg, "content", j->req.tools ? content : text);
            }
            free(content);
        } else {
            cJSON_AddStringToObject(ch, "text", text);
        }
        free(text);
        if (seqs[i].logprobs) cJSON_AddItemToObject(ch, "logprobs", logprobs_json(r, &seqs[i]));
        else cJSON_AddNullToObject(ch, "logprobs");
        cJSON_AddStringToObject(ch, "finish_reason", finish_name(&seqs[i], ncalls > 0));
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

// The end of a stream: what each row held back, its finish reason, usage, [DONE].
static void stream_end(Run *r, const GenSeq *seqs) {
    Job *j = r->j;
    for (int i = 0; i < r->n; i++) {
        char *text = row_text(r, i);
        size_t len = strlen(text);
        if (r->tools) {
            stream_tools(r, i, len, 1, NULL, NULL);
            stream_chunk(r, i, "", 0, NULL, finish_name(&seqs[i], r->rows[i].ts.ncalls > 0), NULL);
        } else {
            const char *rest = text + MIN(r->rows[i].sent, len);
            stream_chunk(r, i, rest, strlen(rest), NULL, finish_name(&seqs[i], 0), NULL);
        }
        free(text);
    }
    if (j->req.include_usage) {
        cJSON *c = chunk_base(r);
        cJSON_AddArrayToObject(c, "choices");
        cJSON_AddItemToObject(c, "usage", usage_json(j));
        push_event(r, c);
    }
    pthread_mutex_lock(&j->mu);
    sb_puts(&j->sse, "data: [DONE]\n\n");
    finish_locked(j);
    pthread_mutex_unlock(&j->mu);
}

Run *job_prepare(const ServeOptions *o, ServeModel *sm, Job *j) {
    const ServeRequest *q = &j->req;
    Err e = {0};
    TokenIds ids = {0};
    Status st = encode_prompt(sm, q, &ids, &e);
    if (st == ST_OK && ids.n == 0) st = err_set(&e, ST_EINVAL, "prompt: encodes to no tokens");
    GenConfig cfg;
    // a request without a seed draws from one of its own: the arrival time's nanoseconds
    uint64_t seed = (uint64_t)(j->arrived * 1e9) ^ ((uint64_t)j->created << 32);
    if (st == ST_OK) st = request_config(o, sm, q, (int)ids.n, seed, &cfg, &e);
    if (st != ST_OK) {
        tokenizer_ids_free(&ids);
        job_fail(j, 400, e.msg);
        return NULL;
    }
    Run *r = xcalloc(1, sizeof *r);
    r->o = o;
    r->sm = sm;
    r->j = j;
    r->n = q->n;
    r->ids = ids;
    gen_text_init(&r->gt, sm->tok, 1, q->n, q->stop, q->n_stop);
    r->rows = xcalloc((size_t)q->n, sizeof(RowOut));
    r->seqs = xcalloc((size_t)q->n, sizeof(GenSeq));
    r->hold = r->gt.max_stop ? r->gt.max_stop - 1 : 0;
    r->tools = q->tools != NULL;
    cfg.on_token = on_token;
    cfg.user = r;
    r->cfg = cfg;
    j->prompt_tokens = (long)ids.n;
    pthread_mutex_lock(&j->mu);
    j->refs++;  // the run's: the connection may end (and drop its reference) while it runs
    pthread_mutex_unlock(&j->mu);
    return r;
}

void job_begin(Run *r) {
    Job *j = r->j;
    pthread_mutex_lock(&j->mu);
    if (j->req.stream) {
        j->state = JOB_STREAMING;
        j->status = 200;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
}

int run_done(const Run *r) {
    for (int i = 0; i < r->n; i++)
        if (r->seqs[i].finish == GEN_FINISH_NONE) return 0;
    return 1;
}

void job_complete(Run *r, Status st, const char *error, pthread_mutex_t *metrics_mu, ServeMetrics *mt) {
    Job *j = r->j;
    const ServeRequest *q = &j->req;
    long generated = 0;
    for (int i = 0; i < r->n; i++) generated += r->seqs[i].n;
    j->completion_tokens = generated;
    j->cached_tokens = r->n ? r->seqs[0].cached : 0;
    pthread_mutex_lock(metrics_mu);
    mt->prompt_tokens += (long)r->ids.n;
    mt->completion_tokens += generated;
    mt->cancelled += j->cancelled && !j->timed_out;
    mt->timed_out += j->timed_out;
    pthread_mutex_unlock(metrics_mu);
    if (st != ST_OK || r->error) {
        job_fail(j, st == ST_EINVAL ? 400 : 500, r->error ? r->error : error);
    } else if (j->timed_out) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request ran past its %.0f s timeout (--request_timeout)", r->o->request_timeout);
        job_fail(j, 504, msg);
    } else if (j->cancelled) {
        job_fail(j, 499, "the client closed the connection");
    } else if (q->stream) {
        stream_end(r, r->seqs);
    } else {
        char *body = answer_json(r, r->seqs);
        pthread_mutex_lock(&j->mu);
        j->status = 200;
        j->body = body;
        finish_locked(j);
        pthread_mutex_unlock(&j->mu);
    }
    for (int i = 0; i < r->n; i++) {
        free(r->seqs[i].ids);
        free(r->seqs[i].logprobs);
        free(r->seqs[i].top_ids);
        free(r->seqs[i].top_logprobs);
        tool_stream_free(&r->rows[i].ts);
    }
    free(r->seqs);
    gen_text_free(&r->gt);
    free(r->rows);
    tokenizer_ids_free(&r->ids);
    free(r->error);
    free(r);
    job_unref(j);
}
