// server.h: `still serve` — an OpenAI-compatible HTTP server (docs/serve.md) on libmicrohttpd.
// Connection threads parse and check requests (request.h) and put them in a bounded queue; one
// scheduler thread owns the model and runs them through the generation engine (src/gen), so
// the model, tokenizer and backend are only ever touched by that thread.
#ifndef STILL_SERVE_SERVER_H
#define STILL_SERVE_SERVER_H

#include "../gen/generate.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/tokenizer.h"

typedef struct ServeOptions {
    const char *host;          // IPv4 address to bind ("127.0.0.1")
    int port;                  // 0: any free port (the one chosen is logged and written to port_file)
    const char *port_file;     // NULL, or a file that receives the port once listening
    const char *api_key;       // NULL: no key; else every /v1 request needs "Authorization: Bearer KEY"
    const char *model_name;    // the id /v1/models lists and responses carry
    int max_batch;             // sequences decoded together at most (n of a request is bounded by it)
    int max_cache_len;         // KV cache slots per sequence: prompt (padded) + max_tokens must fit
    int max_queue;             // requests waiting at most; more get 429
    double request_timeout;    // seconds from arrival to the end of the answer
    size_t max_body;           // request body bytes at most (413 past it)
    int prefix_reuse;          // a prompt joins the free slot holding its longest prefix (gen_slots)
} ServeOptions;

// What the scheduler generates with (owned by the caller; used by the scheduler thread only).
typedef struct ServeModel {
    Model *m;
    Tokenizer *tok;
    ChatTemplate *tmpl;        // NULL: /v1/chat/completions answers 400
    const cJSON *template_kwargs;  // server-wide chat template variables (may be NULL)
    GenConfig base;            // defaults of every request (generation_config.json, flags)
} ServeModel;

typedef struct Server Server;

Status serve_start(const ServeOptions *o, ServeModel *sm, Server **out, Err *e);
int serve_port(const Server *s);
// Stop taking requests (new ones get 503), finish every queued and running one, then stop.
void serve_drain_and_stop(Server *s);

#endif
