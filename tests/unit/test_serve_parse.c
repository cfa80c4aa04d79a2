// test_serve_parse.c: still serve's request parser (field errors, defaults, normalisation) and
// the Qwen3 <tool_call> parser on fixed completion texts.
#include "test.h"

#include "serve/request.h"
#include "serve/tool_calls.h"

#include <string.h>

static Status parse(ServeKind k, const char *body, ServeRequest *r, Err *e) {
    memset(e, 0, sizeof *e);
    return serve_request_parse(k, body, strlen(body), r, e);
}

static void expect_field_error(ServeKind k, const char *body, const char *field_msg) {
    ServeRequest r;
    Err e;
    Status st = parse(k, body, &r, &e);
    EXPECT_MSG(st != ST_OK, "parsed: %s", body);
    EXPECT_MSG(!strncmp(e.msg, field_msg, strlen(field_msg)), "%s: message '%s' does not start with '%s'", body, e.msg,
               field_msg);
}

static void test_chat_fields(void) {
    ServeRequest r;
    Err e;
    const char *body = "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
                       "\"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, "
                       "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}], \"n\": 3, \"max_tokens\": 9, "
                       "\"temperature\": 0, \"top_p\": 0.5, \"top_k\": -1, \"min_p\": 0.1, \"seed\": 12, \"stop\": "
                       "[\"x\", \"\", \"yz\"], \"logprobs\": true, \"stream\": true, \"stream_options\": "
                       "{\"include_usage\": true}, \"unknown_field\": {\"ignored\": 1}}";
    EXPECT(parse(SERVE_CHAT, body, &r, &e) == ST_OK);
    EXPECT(r.n == 3 && r.max_tokens == 9 && r.has_temperature && r.temperature == 0);
    EXPECT(r.has_top_p && r.top_p == 0.5 && r.has_top_k && r.top_k == 0 && r.has_min_p);
    EXPECT(r.has_seed && r.seed == 12 && r.logprobs && r.stream && r.include_usage);
    EXPECT(r.n_stop == 2 && !strcmp(r.stop[0], "x") && !strcmp(r.stop[1], "yz"));
    EXPECT(!strcmp(r.model, "m"));
    // list content joined; null content of a tool-call turn becomes ""
    const cJSON *m1 = cJSON_GetArrayItem(r.messages, 1), *m2 = cJSON_GetArrayItem(r.messages, 2);
    EXPECT(!strcmp(cJSON_GetObjectItem(m1, "content")->valuestring, "ab"));
    EXPECT(!strcmp(cJSON_GetObjectItem(m2, "content")->valuestring, ""));
    serve_request_free(&r);

    EXPECT(parse(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}", &r, &e) == ST_OK);
    EXPECT(r.n == 1 && r.max_tokens == 0 && !r.has_temperature && !r.has_seed && !r.stream && !r.tools);
    serve_request_free(&r);
    EXPECT(parse(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"max_completion_tokens\": 4, "
                             "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}",
                 &r, &e) == ST_OK);
    EXPECT(r.max_tokens == 4 && cJSON_GetArraySize(r.tools) == 1);
    serve_request_free(&r);
    EXPECT(parse(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"tool_choice\": \"none\", "
                             "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}",
                 &r, &e) == ST_OK);
    EXPECT(r.tools == NULL);
    serve_request_free(&r);
}

static void test_completion_fields(void) {
    ServeRequest r;
    Err e;
    EXPECT(parse(SERVE_COMPLETION, "{\"prompt\": [\"once\"], \"logprobs\": 0, \"stop\": \"\\n\"}", &r, &e) == ST_OK);
    EXPECT(!strcmp(r.prompt, "once") && r.logprobs && r.top_logprobs == 0 && r.n_stop == 1);
    serve_request_free(&r);
    EXPECT(parse(SERVE_COMPLETION, "{\"prompt\": \"x\"}", &r, &e) == ST_OK);
    EXPECT(!r.logprobs);
    serve_request_free(&r);
}

static void test_field_errors(void) {
    const char *msgs = "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]";
    char b[512];
    expect_field_error(SERVE_CHAT, "", "body: empty");
    expect_field_error(SERVE_CHAT, "{\"messages\": [", "body: not valid JSON");
    expect_field_error(SERVE_CHAT, "[1, 2]", "body: expected a JSON object");
    expect_field_error(SERVE_CHAT, "{}", "messages: required");
    expect_field_error(SERVE_CHAT, "{\"messages\": []}", "messages: expected a non-empty list");
    expect_field_error(SERVE_CHAT, "{\"messages\": [3]}", "messages[0]: expected an object");
    expect_field_error(SERVE_CHAT, "{\"messages\": [{\"content\": \"q\"}]}", "messages[0].role");
    expect_field_error(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content");
    expect_field_error(SERVE_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
                       "messages[0].content[0]");
    expect_field_error(SERVE_COMPLETION, "{\"prompt\": 7}", "prompt: expected a string");
    expect_field_error(SERVE_COMPLETION, "{\"prompt\": \"\"}", "prompt: empty");
    expect_field_error(SERVE_COMPLETION, "{}", "prompt: required");
    struct {
        const char *extra, *msg;
    } cases[] = {
        {"\"n\": 0", "n: expected an integer"},
        {"\"n\": 1.5", "n: expected an integer"},
        {"\"max_tokens\": \"8\"", "max_tokens: expected an integer"},
        {"\"max_completion_tokens\": 0", "max_completion_tokens: expected an integer"},
        {"\"temperature\": 2.5", "temperature: expected a number in [0, 2]"},
        {"\"top_p\": 0", "top_p: expected a number in (0, 1]"},
        {"\"top_k\": \"a\"", "top_k: expected an integer"},
        {"\"min_p\": -1", "min_p: expected a number"},
        {"\"seed\": \"s\"", "seed: expected an integer"},
        {"\"stop\": 3", "stop: expected a string or a list"},
        {"\"stop\": [\"a\", 1]", "stop[1]: expected a string"},
        {"\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]", "stop: expected a string or a list of at most 4"},
        {"\"stream\": 1", "stream: expected true or false"},
        {"\"stream_options\": {\"include_usage\": 1}", "stream_options.include_usage"},
        {"\"logprobs\": 1", "logprobs: expected true or false"},
        {"\"top_logprobs\": 2", "top_logprobs: needs \"logprobs\": true"},
        {"\"logprobs\": true, \"top_logprobs\": 21", "top_logprobs: expected an integer in [0, 20]"},
        {"\"response_format\": {\"type\": \"json_object\"}", "response_format: only {\"type\": \"text\"} is served"},
        {"\"frequency_penalty\": 0.5", "frequency_penalty: not served"},
        {"\"tools\": {}", "tools: expected a list"},
        {"\"tools\": [{\"type\": \"function\"}]", "tools[0]: expected"},
        {"\"tool_choice\": \"required\"", "tool_choice: only"},
        {"\"response_format\": {\"type\": \"json_schema\"}", "response_format: only"},
        {"\"model\": 3", "model: expected a string"},
        {"\"chat_template_kwargs\": []", "chat_template_kwargs: expected an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(b, sizeof b, "{%s, %s}", msgs, cases[i].extra);
        expect_field_error(SERVE_CHAT, b, cases[i].msg);
    }
}

static void test_tool_calls(void) {
    char *content;
    cJSON *calls;
    // Qwen3's format: one call, text around it
    int n = serve_parse_tool_calls("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                   "\"Paris\", \"days\": 2}}\n</tool_call>",
                                   "abc", &content, &calls);
    EXPECT(n == 1 && !strcmp(content, "Let me check."));
    const cJSON *c0 = cJSON_GetArrayItem(calls, 0), *fn = cJSON_GetObjectItem(c0, "function");
    EXPECT(!strcmp(cJSON_GetObjectItem(c0, "id")->valuestring, "call_abc_0"));
    EXPECT(!strcmp(cJSON_GetObjectItem(c0, "type")->valuestring, "function"));
    EXPECT(!strcmp(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather"));
    EXPECT_MSG(!strcmp(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"city\":\"Paris\",\"days\":2}"), "%s",
               cJSON_GetObjectItem(fn, "arguments")->valuestring);
    free(content);
    cJSON_Delete(calls);
    // two calls, no text; arguments given as a string stay that string
    n = serve_parse_tool_calls("<tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>\n"
                               "<tool_call>{\"name\": \"b\"}</tool_call>\n",
                               "z", &content, &calls);
    EXPECT(n == 2 && !strcmp(content, ""));
    EXPECT(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function"), "arguments")->valuestring,
                   "{\"x\": 1}"));
    EXPECT(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 1), "function"), "arguments")->valuestring,
                   "{}"));
    EXPECT(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 1), "id")->valuestring, "call_z_1"));
    free(content);
    cJSON_Delete(calls);
    // broken JSON, a missing name, an unclosed block: all stay text
    const char *bad = "a <tool_call>{\"name\": </tool_call> b <tool_call>{\"arguments\": {}}</tool_call> c <tool_call>{\"name\": \"f\"}";
    n = serve_parse_tool_calls(bad, "q", &content, &calls);
    EXPECT(n == 0 && calls == NULL && !strcmp(content, bad));
    free(content);
    n = serve_parse_tool_calls("  plain answer \n", "q", &content, &calls);
    EXPECT(n == 0 && !strcmp(content, "plain answer"));
    free(content);
}

typedef struct Collect {
    StrBuf content;
    cJSON *calls;
} Collect;

static void collect(void *user, const char *s, size_t n, const cJSON *call) {
    Collect *c = user;
    if (call) {
        if (!c->calls) c->calls = cJSON_CreateArray();
        cJSON_AddItemToArray(c->calls, cJSON_Duplicate(call, 1));
    } else {
        EXPECT(n > 0);  // no empty pieces
        sb_append(&c->content, s, n);
    }
}

// The streaming parser, fed the text growing `step` bytes at a time, gives the whole-text
// parser's content and calls.
static void expect_stream_same(const char *text, size_t step) {
    char *content;
    cJSON *calls;
    int n = serve_parse_tool_calls(text, "s", &content, &calls);
    ToolStream ts = {0};
    Collect c = {0};
    size_t len = strlen(text);
    for (size_t i = step; i < len + step; i += step) tool_stream_feed(&ts, text, MIN(i, len), 0, "s", collect, &c);
    tool_stream_feed(&ts, text, len, 1, "s", collect, &c);
    const char *got = c.content.data ? c.content.data : "";
    EXPECT_MSG(!strcmp(got, content), "step %zu: streamed content '%s' vs '%s' of \"%s\"", step, got, content, text);
    char *a = calls ? cJSON_PrintUnformatted(calls) : xstrdup("null");
    char *b = c.calls ? cJSON_PrintUnformatted(c.calls) : xstrdup("null");
    EXPECT_MSG(!strcmp(a, b) && ts.ncalls == n, "step %zu: streamed calls %s vs %s", step, b, a);
    free(a);
    free(b);
    free(content);
    cJSON_Delete(calls);
    cJSON_Delete(c.calls);
    sb_free(&c.content);
    tool_stream_free(&ts);
}

static void test_tool_calls_streamed(void) {
    static const char *texts[] = {
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>\n<tool_call>{\"name\": \"b\"}</tool_call>\n",
        "a <tool_call>{\"name\": </tool_call> b <tool_call>{\"arguments\": {}}</tool_call> c <tool_call>{\"name\": \"f\"}",
        "  plain answer \n",
        "x \n<tool_call>{\"name\": \"f\"}</tool_call>  \n <tool_call>{\"name\": \"g\"}</tool_call> y <tool",
        "text < tool <tool_ <tool_call",
        "\n\n",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (size_t step = 1; step <= 7; step += 3) expect_stream_same(texts[i], step);
}

int main(void) {
    RUN(test_chat_fields);
    RUN(test_completion_fields);
    RUN(test_field_errors);
    RUN(test_tool_calls);
    RUN(test_tool_calls_streamed);
    TEST_MAIN_END();
}
