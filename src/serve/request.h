// request.h: an OpenAI request body (POST /v1/chat/completions, /v1/completions) parsed and
// checked into a ServeRequest. Pure: no model, no network, so the fuzz target (fuzz_serve_request)
// runs it on any bytes. Errors name the field and what was expected ("temperature: expected a
// number in [0, 2]"); the server answers them with 400.
#ifndef STILL_SERVE_REQUEST_H
#define STILL_SERVE_REQUEST_H

#include "../core/common.h"

#include <cjson/cJSON.h>

#define SERVE_MAX_STOP 4    // OpenAI's limit on stop sequences
#define SERVE_MAX_N 128     // completions per request at most (the server's --max_batch also bounds it)

typedef enum { SERVE_CHAT = 0, SERVE_COMPLETION = 1 } ServeKind;

typedef struct ServeRequest {
    ServeKind kind;
    char *model;               // as given (may be NULL)
    cJSON *messages;           // chat: the array of messages (owned)
    cJSON *tools;              // chat: the tools array, or NULL (owned)
    cJSON *template_kwargs;    // chat: chat_template_kwargs object, or NULL (owned)
    char *prompt;              // completions: the prompt text
    int n;                     // completions to return, >= 1
    int max_tokens;            // 0: not given (the server's default)
    int has_temperature;
    float temperature;         // 0: greedy
    int has_top_p, has_top_k, has_min_p;
    double top_p;
    int top_k;
    float min_p;
    int has_seed;
    uint64_t seed;
    char *stop[SERVE_MAX_STOP];
    int n_stop;
    int logprobs;              // chat: logprobs true; completions: logprobs >= 0 given
    int top_logprobs;          // alternatives per token (chat: top_logprobs 0..20; completions: logprobs 0..5)
    int stream;
    int include_usage;         // stream_options.include_usage
    int ignore_eos;            // vLLM's extensions: keep going past EOS,
    int min_tokens;            //   and no EOS before this many tokens
} ServeRequest;

// Parse body[0, len) (need not be NUL-terminated) for the endpoint kind. On error *r is empty
// and e names the field.
Status serve_request_parse(ServeKind kind, const char *body, size_t len, ServeRequest *r, Err *e);
void serve_request_free(ServeRequest *r);

#endif
