// tool_calls.c: <tool_call> blocks of a completion to OpenAI tool_calls (see tool_calls.h).
#include "tool_calls.h"

#include "../core/alloc.h"
#include "../core/common.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPEN_TAG "<tool_call>"
#define CLOSE_TAG "</tool_call>"

// One block's JSON to a tool call, or NULL.
static cJSON *parse_call(const char *json, size_t len, const char *id_base, int k) {
    cJSON *j = cJSON_ParseWithLength(json, len);
    const cJSON *name = j ? cJSON_GetObjectItemCaseSensitive(j, "name") : NULL;
    if (!cJSON_IsObject(j) || !cJSON_IsString(name) || !name->valuestring[0]) {
        cJSON_Delete(j);
        return NULL;
    }
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    char *args_text = !args ? xstrdup("{}") : cJSON_IsString(args) ? xstrdup(args->valuestring) : cJSON_PrintUnformatted(args);
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d", id_base, k);
    cJSON *call = cJSON_CreateObject();
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(call, "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddStringToObject(fn, "arguments", args_text);
    free(args_text);
    cJSON_Delete(j);
    return call;
}

static char *strip(const char *s, size_t n) {
    size_t a = 0;
    while (a < n && isspace((unsigned char)s[a])) a++;
    while (n > a && isspace((unsigned char)s[n - 1])) n--;
    return xstrndup(s + a, n - a);
}

int serve_parse_tool_calls(const char *text, const char *id_base, char **content, cJSON **calls) {
    StrBuf rest = {0};
    cJSON *arr = NULL;
    int k = 0;
    const char *cur = text;
    for (;;) {
        const char *open = strstr(cur, OPEN_TAG);
        const char *body = open ? open + strlen(OPEN_TAG) : NULL;
        const char *close = body ? strstr(body, CLOSE_TAG) : NULL;
        if (!close) break;
        cJSON *call = parse_call(body, (size_t)(close - body), id_base, k);
        const char *after = close + strlen(CLOSE_TAG);
        if (call) {
            if (!arr) arr = cJSON_CreateArray();
            cJSON_AddItemToArray(arr, call);
            k++;
            sb_append(&rest, cur, (size_t)(open - cur));
        } else {
            sb_append(&rest, cur, (size_t)(after - cur));
        }
        cur = after;
    }
    sb_puts(&rest, cur);
    *content = strip(rest.data ? rest.data : "", rest.len);
    sb_free(&rest);
    *calls = arr;
    return k;
}

// ---- streaming ---------------------------------------------------------------------------------

// Content text[a, b): whitespace at the very start dropped, trailing whitespace held until more
// content follows (at the end it is dropped).
static void stream_content(ToolStream *ts, const char *text, size_t a, size_t b, ToolStreamFn fn, void *user) {
    if (!ts->started)
        while (a < b && isspace((unsigned char)text[a])) a++;
    size_t body_end = b;
    while (body_end > a && isspace((unsigned char)text[body_end - 1])) body_end--;
    if (body_end > a) {
        if (ts->ws.len) fn(user, ts->ws.data, ts->ws.len, NULL);
        ts->ws.len = 0;
        fn(user, text + a, body_end - a, NULL);
        ts->started = 1;
    }
    if (ts->started) sb_append(&ts->ws, text + body_end, b - body_end);
}

// How many bytes at the end of text[a, b) could begin `tag` (held back until clear).
static size_t partial_tag(const char *text, size_t a, size_t b, const char *tag) {
    size_t t = strlen(tag);
    for (size_t k = MIN(t - 1, b - a); k > 0; k--)
        if (!memcmp(text + b - k, tag, k)) return k;
    return 0;
}

void tool_stream_feed(ToolStream *ts, const char *text, size_t len, int final, const char *id_base, ToolStreamFn fn,
                      void *user) {
    size_t no = strlen(OPEN_TAG), nc = strlen(CLOSE_TAG);
    while (ts->scan < len) {
        const char *from = text + ts->scan;
        size_t left = len - ts->scan;
        if (!ts->in_block) {
            const char *open = memmem(from, left, OPEN_TAG, no);
            if (open) {
                stream_content(ts, text, ts->scan, (size_t)(open - text), fn, user);
                ts->scan = (size_t)(open - text) + no;
                ts->in_block = 1;
                continue;
            }
            size_t keep = final ? 0 : partial_tag(text, ts->scan, len, OPEN_TAG);
            stream_content(ts, text, ts->scan, len - keep, fn, user);
            ts->scan = len - keep;
            break;
        }
        const char *close = memmem(from, left, CLOSE_TAG, nc);
        if (!close) {
            if (final) {  // an unclosed block stays in the content, its tag included
                stream_content(ts, text, ts->scan - no, len, fn, user);
                ts->scan = len;
            }
            break;
        }
        size_t after = (size_t)(close - text) + nc;
        cJSON *call = parse_call(from, (size_t)(close - from), id_base, ts->ncalls);
        if (call) {
            fn(user, NULL, 0, call);
            cJSON_Delete(call);
            ts->ncalls++;
        } else {  // a block that does not parse stays in the content, tags included
            stream_content(ts, text, ts->scan - no, after, fn, user);
        }
        ts->scan = after;
        ts->in_block = 0;
    }
}

void tool_stream_free(ToolStream *ts) {
    sb_free(&ts->ws);
    memset(ts, 0, sizeof *ts);
}
