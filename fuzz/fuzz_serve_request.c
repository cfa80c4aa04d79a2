// fuzz_serve_request.c: the request parser of still serve (src/serve/request.c) on any body, and
// the tool-call parser (src/serve/tool_calls.c) on the same bytes as completion text. Byte 0 bit 0
// picks the endpoint (0 chat, 1 completions); the rest is the body.
#include "fuzz.h"

#include "core/alloc.h"
#include "serve/request.h"
#include "serve/tool_calls.h"

#include <string.h>

Status fuzz_serve_request(const uint8_t *data, size_t size, Err *e) {
    if (size == 0) return ST_OK;
    ServeKind kind = (data[0] & 1) ? SERVE_COMPLETION : SERVE_CHAT;
    ServeRequest r;
    Status st = serve_request_parse(kind, (const char *)data + 1, size - 1, &r, e);
    if (st == ST_OK) {
        CHECK(r.n >= 1 && r.n <= SERVE_MAX_N && r.n_stop <= SERVE_MAX_STOP);
        CHECK(kind == SERVE_CHAT ? r.messages != NULL : r.prompt != NULL);
        serve_request_free(&r);
    }
    char *text = fuzz_strndup(data + 1, size - 1);
    char *content = NULL;
    cJSON *calls = NULL;
    int n = serve_parse_tool_calls(text, "fuzz", &content, &calls);
    CHECK(content && (n == 0) == (calls == NULL) && strlen(content) <= size);
    free(content);
    cJSON_Delete(calls);
    free(text);
    return st;
}

FUZZ_ENTRY(serve_request)
