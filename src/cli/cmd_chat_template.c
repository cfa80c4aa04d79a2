// cmd_chat_template.c: still chat-template — render messages read from stdin through a model's
// chat template, exactly as transformers' apply_chat_template(tokenize=False) does.
#include "../core/alloc.h"
#include "../core/hf_cache.h"
#include "../tokenizer/chat.h"
#include "args.h"
#include "commands.h"

#include <stdio.h>
#include <string.h>

static const char SUMMARY[] = "render messages (JSON on stdin) through the model's chat template";

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory (tokenizer_config.json / chat_template.jinja) or hub id in the local HF cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"add_generation_prompt", ARG_BOOL, "false", "end with the header of an assistant turn"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra template variables, e.g. {\"enable_thinking\": false}"},
    {"chat_template_name", ARG_STR, NULL, "pick a named template when the model has several (default: \"default\")"},
    {"spans", ARG_BOOL, "false", "print the {% generation %} spans (assistant mask) to stderr as JSON"},
    {NULL, 0, NULL, NULL},
};

static Status read_stdin(char **out, Err *e) {
    StrBuf sb = {0};
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) sb_append(&sb, buf, n);
    if (ferror(stdin)) {
        sb_free(&sb);
        return err_set(e, ST_EIO, "stdin: read failed");
    }
    sb_putc(&sb, 0);
    *out = sb.data;
    return ST_OK;
}

static Status run(const Args *a, Err *e) {
    const char *model = args_str(a, "model");
    if (!model) return err_set(e, ST_EINVAL, "--model is required");
    char *dir = NULL, *input = NULL, *text = NULL;
    ChatTemplate *t = NULL;
    GenSpans spans = {0};
    Status st = hf_resolve_model(model, args_str(a, "revision"), &dir, e);
    if (st == ST_OK) st = chat_template_load(dir, args_str(a, "chat_template_name"), &t, e);
    if (st == ST_OK) st = read_stdin(&input, e);
    if (st == ST_OK)
        st = chat_template_render_json(t, input, args_str(a, "chat_template_kwargs"), args_bool(a, "add_generation_prompt"),
                                       &text, args_bool(a, "spans") ? &spans : NULL, e);
    if (st == ST_OK) {
        fputs(text, stdout);
        fflush(stdout);
        if (args_bool(a, "spans")) {
            fputs("[", stderr);
            for (size_t i = 0; i < spans.n; i++)
                fprintf(stderr, "%s{\"start\": %zu, \"end\": %zu, \"char_start\": %zu, \"char_end\": %zu}", i ? ", " : "",
                        spans.spans[i].start, spans.spans[i].end, spans.spans[i].char_start, spans.spans[i].char_end);
            fputs("]\n", stderr);
        }
    }
    gen_spans_free(&spans);
    free(text);
    free(input);
    chat_template_free(t);
    free(dir);
    return st;
}

int cmd_chat_template(int argc, char **argv) {
    Args a;
    Err e = {0};
    if (args_parse(&a, "chat-template", specs, argc, argv, &e) != ST_OK) {
        fprintf(stderr, "still chat-template: %s\n", e.msg);
        args_free(&a);
        return 2;
    }
    if (args_bool(&a, "help")) {
        args_print_help(stdout, "chat-template", SUMMARY, specs);
        args_free(&a);
        return 0;
    }
    Status st = run(&a, &e);
    args_free(&a);
    if (st != ST_OK) {
        fprintf(stderr, "still chat-template: %s\n", e.msg);
        return 1;
    }
    return 0;
}
