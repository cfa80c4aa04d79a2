// cmd_serve.c: still serve — flags to ServeOptions, the model, tokenizer, chat template and
// generation defaults loaded once, then the server (src/serve/server.h) until SIGTERM / SIGINT,
// which drains: queued and running requests are answered, new ones refused, then exit 0.
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/interrupt.h"
#include "../core/log.h"
#include "../serve/server.h"
#include "cli_common.h"
#include "commands.h"

#include <string.h>
#include <unistd.h>

static const ArgSpec serve_specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},
    CLI_ADAPTER_FLAG,
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"host", ARG_STR, "127.0.0.1", "IPv4 address to listen on (0.0.0.0: every interface)"},
    {"port", ARG_INT, "8080", "TCP port (0: any free one, logged and written to --port_file)", "[0,65535]"},
    {"port_file", ARG_STR, NULL, "write the port listened on to this file once the server is up"},
    {"api_key", ARG_STR, NULL, "require \"Authorization: Bearer KEY\" on /v1 (default: $STILL_API_KEY, else none)"},
    {"served_model_name", ARG_STR, NULL, "the model id /v1/models lists (default: the --model argument)"},
    {"max_batch", ARG_INT, "8", "sequences decoded together at most (a request's n is bounded by it)", "[1,4096]"},
    {"max_cache_len", ARG_INT, "2048", "KV cache slots per sequence: the padded prompt + max_tokens must fit", "[2,inf)"},
    {"max_queue", ARG_INT, "64", "requests waiting at most; past it the answer is 429 with Retry-After", "[1,1000000]"},
    {"request_timeout", ARG_FLOAT, "600", "seconds a request may take from arrival to its last token (504 past it)", "(0,inf)"},
    {"max_body", ARG_INT, "8388608", "request body bytes at most (413 past it)", "[1,inf)"},
    {"max_tokens", ARG_INT, NULL, "tokens generated when a request gives no max_tokens (default: generation_config.json's, else 256; at most what the cache holds)", "[1,inf)"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of template variables for every request, e.g. {\"enable_thinking\": false}"},
    {"chat_template_name", ARG_STR, NULL, "which named template of tokenizer_config.json (default: \"default\")"},
    {"prefill_chunk_size", ARG_INT, "512", "prompt slots per prefill step, the largest prefill bucket", "[1,inf)"},
    {"prefix_reuse", ARG_BOOL, "true", "prefill only what a prompt adds to the longest prefix a free slot's cache still holds"},
    {NULL, 0, NULL, NULL},
};

typedef struct ServeRun {
    Backend *be;
    char *dir;
    cJSON *kwargs;
    ServeModel sm;
} ServeRun;

static void run_free(ServeRun *r) {
    chat_template_free(r->sm.tmpl);
    tokenizer_free(r->sm.tok);
    model_free(r->sm.m);
    backend_destroy(r->be);
    cJSON_Delete(r->kwargs);
    free(r->dir);
}

static Status load(ServeRun *r, const Args *a, Err *e) {
    TRY(cli_model_dir(a, "model", &r->dir, e));
    int dt;
    TRY(cli_dtype(a, &dt, e));
    TRY(cli_backend(a, &r->be, e));
    TRY(model_load_frozen(r->dir, r->be, dt, &r->sm.m, e));
    TRY(cli_apply_adapter(a, r->sm.m, e));
    char *tj = path_join(r->dir, "tokenizer.json");
    int have_tok = file_exists(tj);
    free(tj);
    if (!have_tok) return err_set(e, ST_EINVAL, "%s has no tokenizer.json: still serve needs the model's tokenizer", r->dir);
    TRY(tokenizer_load(r->dir, &r->sm.tok, e));
    Err te = {0};
    if (chat_template_load(r->dir, args_str(a, "chat_template_name"), &r->sm.tmpl, &te) != ST_OK) {
        if (args_is_set(a, "chat_template_name")) return err_set(e, te.code, "%s", te.msg);
        log_warn("no chat template (%s): /v1/chat/completions answers 400", te.msg);
        r->sm.tmpl = NULL;
    }
    if (args_is_set(a, "chat_template_kwargs")) TRY(chat_kwargs_parse(args_str(a, "chat_template_kwargs"), &r->kwargs, e));
    r->sm.template_kwargs = r->kwargs;
    GenConfig *c = &r->sm.base;
    gen_config_default(c);
    TRY(gen_config_load(c, r->dir, &r->sm.m->cfg, e));
    TRY(gen_config_add_eos(c, tokenizer_eos_id(r->sm.tok), e));
    if (c->pad_token_id < 0) c->pad_token_id = tokenizer_pad_id(r->sm.tok);
    if (args_is_set(a, "max_tokens")) c->max_new_tokens = (int)args_int(a, "max_tokens");
    c->max_length = 0;
    c->prefill_chunk_size = (int)args_int(a, "prefill_chunk_size");
    c->max_cache_len = (int)args_int(a, "max_cache_len");
    if (c->repetition_penalty != 1.0f) {  // its seen-id counts are per batch, not per slot
        log_warn("generation_config.json's repetition_penalty %g is not served (continuous batching): off",
                 c->repetition_penalty);
        c->repetition_penalty = 1.0f;
    }
    return gen_config_check(c, r->sm.m->cfg.vocab_size, e);
}

static Status run_serve(const Args *a, Err *e) {
    ServeRun r = {0};
    Status st = load(&r, a, e);
    const char *key = args_is_set(a, "api_key") ? args_str(a, "api_key") : getenv("STILL_API_KEY");
    ServeOptions o = {
        .host = args_str(a, "host"),
        .port = (int)args_int(a, "port"),
        .port_file = args_str(a, "port_file"),
        .api_key = key && key[0] ? key : NULL,
        .model_name = args_is_set(a, "served_model_name") ? args_str(a, "served_model_name") : args_str(a, "model"),
        .max_batch = (int)args_int(a, "max_batch"),
        .max_cache_len = (int)args_int(a, "max_cache_len"),
        .max_queue = (int)args_int(a, "max_queue"),
        .request_timeout = args_float(a, "request_timeout"),
        .max_body = (size_t)MAX(args_int(a, "max_body"), 1),
        .prefix_reuse = args_bool(a, "prefix_reuse"),
    };
    Server *s = NULL;
    interrupt_install(INTERRUPT_ESCALATE);  // the first signal drains; a second one ends the process
    if (st == ST_OK) st = serve_start(&o, &r.sm, &s, e);
    if (st == ST_OK) {
        log_info("still serve: %s on http://%s:%d/v1 (max_batch %d, max_cache_len %d, queue %d)%s", o.model_name,
                 o.host, serve_port(s), o.max_batch, o.max_cache_len, o.max_queue, o.api_key ? ", API key required" : "");
        const volatile sig_atomic_t *stop = interrupt_flag();
        while (!*stop) usleep(50 * 1000);
        log_info("still serve: stop signal: answering the requests in flight, then stopping");
        serve_drain_and_stop(s);
        log_info("still serve: stopped");
    }
    run_free(&r);
    return st;
}

int cmd_serve(int argc, char **argv) {
    return cli_run("serve", "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics.",
                   serve_specs, argc, argv, run_serve);
}
