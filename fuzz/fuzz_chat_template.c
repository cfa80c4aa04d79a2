// fuzz_chat_template.c: the input is chat template source, compiled and rendered with a fixed
// conversation (system, user, assistant with tool calls and reasoning, tool result), tools,
// documents, special tokens and a fixed clock, with {% generation %} spans collected.
#include "fuzz.h"

#include "core/alloc.h"
#include "tokenizer/chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static const char conversation[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris? \\u00e9\\u4e2d\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"use the tool\","
    " \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"hot\": 1.5, \"ok\": true, \"x\": null}}}]},"
    "{\"role\": \"tool\", \"name\": \"get_weather\", \"content\": \"{\\\"t\\\": 21}\"},"
    "{\"role\": \"assistant\", \"content\": [{\"type\": \"text\", \"text\": \"It is 21.\"}]},"
    "{\"role\": \"user\", \"content\": \"thanks\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}],"
    "\"documents\": [{\"title\": \"t\", \"text\": \"doc\"}],"
    "\"enable_thinking\": false}";

Status fuzz_chat_template(const uint8_t *data, size_t size, Err *e) {
    char *src = fuzz_strndup(data, size);
    ChatTemplate *t = NULL;
    Status st = chat_template_compile(src, "chat template", &t, e);
    free(src);
    if (st != ST_OK) return st;
    cJSON *bos = cJSON_CreateString("<s>"), *eos = cJSON_CreateString("</s>");
    Err e2 = {0};
    CHECK(chat_template_set_var(t, "bos_token", bos, &e2) == ST_OK);
    CHECK(chat_template_set_var(t, "eos_token", eos, &e2) == ST_OK);
    cJSON_Delete(bos);
    cJSON_Delete(eos);
    chat_template_set_now(t, 1700000000);
    char *out = NULL;
    GenSpans spans = {0};
    st = chat_template_render_json(t, conversation, NULL, 1, &out, &spans, e);
    if (st == ST_OK) {
        size_t len = strlen(out);
        for (size_t i = 0; i < spans.n; i++)
            if (spans.spans[i].start > spans.spans[i].end || spans.spans[i].end > len) {
                fprintf(stderr, "fuzz_chat_template: span [%zu, %zu) outside the output (%zu bytes)\n",
                        spans.spans[i].start, spans.spans[i].end, len);
                abort();
            }
    }
    free(out);
    gen_spans_free(&spans);
    chat_template_free(t);
    return st;
}

FUZZ_ENTRY(chat_template)
