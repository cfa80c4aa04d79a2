// test_chat_robust.c: limits and hostile input. Deep nesting and runaway recursion are errors,
// not stack overflows; mutated templates and random bytes never crash (ASan runs this too);
// the cJSON entry point renders like the JSON-text one.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/rng.h"
#include "tokenizer/chat.h"

#include <cjson/cJSON.h>

// Render src with messages [{"role":"user","content":"hi"}]; returns the status, *out the text.
static Status render(const char *src, char **out, Err *e) {
    ChatTemplate *t;
    *out = NULL;
    Status st = chat_template_compile(src, "t", &t, e);
    if (st != ST_OK) return st;
    st = chat_template_render_json(t, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, 0, out, NULL, e);
    chat_template_free(t);
    return st;
}

static void test_deep_nesting_is_an_error(void) {
    StrBuf sb = {0};
    sb_puts(&sb, "{{ ");
    for (int i = 0; i < 100000; i++) sb_putc(&sb, '(');
    sb_puts(&sb, "1 }}");
    char *out;
    Err e = {0};
    EXPECT(render(sb.data, &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "nested too deeply");
    sb_free(&sb);
    for (int i = 0; i < 5000; i++) sb_puts(&sb, "{% if true %}");
    EXPECT(render(sb.data, &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "nested deeper");
    sb_free(&sb);
    sb_puts(&sb, "{{ ");
    for (int i = 0; i < 100000; i++) sb_puts(&sb, "not ");
    sb_puts(&sb, "1 }}");
    EXPECT(render(sb.data, &out, &e) != ST_OK);
    sb_free(&sb);
}

static void test_runaway_recursion_is_an_error(void) {
    char *out;
    Err e = {0};
    EXPECT(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "line 1");
    EXPECT(render("{% set ns = namespace(x=1) %}{% set ns.self = ns %}{{ ns }}", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "nested deeper");
    EXPECT(render("{{ 'x' * 1000000000 }}", &out, &e) != ST_OK);
    EXPECT(render("{{ 9223372036854775807 + 1 }}", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "integer overflow");
}

static void test_error_names_line_and_construct(void) {
    char *out;
    Err e = {0};
    EXPECT(render("a\nb\n{% frob %}", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "line 3: Encountered unknown tag 'frob'");
    EXPECT(render("\n{% for x in y %}\n", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "'endfor' or 'else'");
    EXPECT(render("\n\n{{ x | frob }}", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "line 3: No filter named 'frob'");
    EXPECT(render("{{ x | groupby('a') }}", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "not supported");
    EXPECT(render("{% include 'x' %}", &out, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "tag 'include' is not supported");
}

static void test_cjson_entry_point(void) {
    ChatTemplate *t;
    Err e = {0};
    EXPECT(chat_template_compile("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}{{ tools }}|{{ documents }}|"
                                 "{{ add_generation_prompt }}|{{ enable_thinking }}|{{ n }}",
                                 "t", &t, &e) == ST_OK);
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"a\"}]");
    cJSON *extra = cJSON_Parse("{\"enable_thinking\": false, \"n\": 2.5}");
    char *out = NULL;
    EXPECT(chat_template_render(t, msgs, NULL, NULL, 1, extra, &out, NULL, &e) == ST_OK);
    EXPECT_MSG(out && !strcmp(out, "user:a;None|None|True|False|2.5"), "%s", out);
    free(out);
    cJSON *bad = cJSON_Parse("{\"messages\": 1}");
    EXPECT(chat_template_render(t, msgs, NULL, NULL, 1, bad, &out, NULL, &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "given twice");
    cJSON_Delete(bad);
    cJSON_Delete(msgs);
    cJSON_Delete(extra);
    chat_template_free(t);
}

static void test_json_numbers_follow_python(void) {
    ChatTemplate *t;
    Err e = {0};
    EXPECT(chat_template_compile("{{ messages | tojson }} {{ messages[0] is integer }} {{ messages[1] is float }}", "t", &t, &e) == ST_OK);
    char *out = NULL;
    EXPECT(chat_template_render_json(t, "[1, 1.0, 1e2, -0.0, 12345678901234567890123]", NULL, 0, &out, NULL, &e) != ST_OK);
    EXPECT(chat_template_render_json(t, "[1, 1.0, 1e2, -0.0, 1.5e300]", NULL, 0, &out, NULL, &e) == ST_OK);
    EXPECT_MSG(out && !strcmp(out, "[1, 1.0, 100.0, -0.0, 1.5e+300] True True"), "%s", out);
    free(out);
    chat_template_free(t);
}

// Random mutations of a real template and random bytes: any status, never a crash or a leak.
static void test_mutations_never_crash(void) {
    char *src = NULL;
    size_t len;
    Err e = {0};
    EXPECT(file_read_all("tests/data/chat/templates/constructs.jinja", &src, &len, &e) == ST_OK);
    if (!src) return;
    const char *input = "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"<think>a</think>b\"},"
                        "{\"role\": \"assistant\", \"content\": \"c\", \"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]}],"
                        "\"tools\": [{\"function\": {\"name\": \"f\", \"parameters\": {\"properties\": {\"x\": {}}}}}], \"bos_token\": \"<s>\"}";
    static const char alphabet[] = "{}%#-+()[]|.,:'\"~*/ \nabifnotsle0123=";
    Rng rng;
    rng_init(&rng, 1234, 0);
    int ok = 0;
    for (int it = 0; it < 400; it++) {
        char *m = xstrdup(src);
        size_t n = strlen(m);
        int edits = 1 + (int)(rng_u32(&rng) % 4);
        for (int k = 0; k < edits && n; k++) {
            size_t at = rng_u32(&rng) % n;
            if (it % 3 == 0) m[at] = alphabet[rng_u32(&rng) % (sizeof alphabet - 1)];
            else if (it % 3 == 1) memmove(m + at, m + at + 1, n - at), n--;
            else m[at] = (char)(rng_u32(&rng) % 255 + 1);
        }
        ChatTemplate *t;
        char *out = NULL;
        if (chat_template_compile(m, "t", &t, &e) == ST_OK) {
            GenSpans spans = {0};
            if (chat_template_render_json(t, input, NULL, it & 1, &out, &spans, &e) == ST_OK) ok++;
            gen_spans_free(&spans);
            free(out);
            chat_template_free(t);
        }
        free(m);
    }
    EXPECT(ok > 0);   // some mutations still render
    free(src);
}

int main(void) {
    RUN(test_deep_nesting_is_an_error);
    RUN(test_runaway_recursion_is_an_error);
    RUN(test_error_names_line_and_construct);
    RUN(test_cjson_entry_point);
    RUN(test_json_numbers_follow_python);
    RUN(test_mutations_never_crash);
    TEST_MAIN_END();
}
