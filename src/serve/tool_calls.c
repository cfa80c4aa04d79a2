// tool_calls.c: <tool_call> blocks of a completion to OpenAI tool_calls (see tool_calls.h).
#include "tool_calls.h"

#include "../core/alloc.h"

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
