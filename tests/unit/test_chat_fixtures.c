// test_chat_fixtures.c: every case of tests/data/chat/jinja2.json (written by
// scripts/ref_chat_templates.py with Jinja2 configured as transformers configures it) renders to
// the same text and {% generation %} spans, or fails on the same template line. Cases where
// @huggingface/jinja (tests/data/chat/hfjinja.json) disagrees with Jinja2 must be listed, with a
// note, in tests/data/chat/hfjinja_disagreements.json; a listed case that now agrees fails too.
#include "test.h"

#include "core/fileio.h"
#include "tokenizer/chat_internal.h"

#define DATA "tests/data/chat/"

static CVal g_cases, g_hf, g_notes;
static int64_t g_now;
static CVal g_case;   // the case under test

static const char *str_field(CVal d, const char *k) {
    CVal *v = cv_dict_get_str(d, k);
    return v && v->t == CV_STR ? v->s->data : NULL;
}

static CVal load_json(const char *path) {
    char *text = NULL;
    size_t len;
    Err e = {0};
    CVal v = cv_none();
    if (file_read_all(path, &text, &len, &e) != ST_OK || cv_from_json_text(text, path, &v, &e) != ST_OK)
        printf("FAIL load %s: %s\n", path, e.msg);
    free(text);
    return v;
}

static void check_case(void) {
    CVal c = g_case;
    const char *name = str_field(c, "name");
    Err e = {0};
    char *src = NULL;
    const char *file = str_field(c, "template");
    if (file) {
        char path[512];
        size_t len;
        snprintf(path, sizeof path, DATA "templates/%s", file);
        EXPECT_MSG(file_read_all(path, &src, &len, &e) == ST_OK, "%s", e.msg);
        if (!src) return;
    } else {
        src = xstrdup(str_field(c, "source"));
    }
    const char *want = str_field(c, "output");
    const char *want_err = str_field(c, "error");
    ChatTemplate *t = NULL;
    char *out = NULL;
    GenSpans spans = {0};
    Status st = chat_template_compile(src, "chat template", &t, &e);
    if (st == ST_OK) {
        chat_template_set_now(t, (time_t)g_now);
        st = chat_render_values(t, *cv_dict_get_str(c, "vars"), &out, &spans, &e);
    }
    if (want) {
        EXPECT_MSG(st == ST_OK, "%s", e.msg);
        if (st == ST_OK) {
            EXPECT_MSG(!strcmp(out, want), "output differs:\n--- ours\n%s\n--- Jinja2\n%s\n---", out, want);
            CVal *ws = cv_dict_get_str(c, "spans");
            EXPECT(ws && ws->t == CV_LIST && ws->l->n == spans.n);
            for (size_t i = 0; ws && ws->t == CV_LIST && i < spans.n && i < ws->l->n; i++) {
                CVal p = ws->l->items[i];
                EXPECT_MSG((size_t)p.l->items[0].i == spans.spans[i].char_start && (size_t)p.l->items[1].i == spans.spans[i].char_end,
                           "span %zu: ours [%zu, %zu), Jinja2 [%lld, %lld)", i, spans.spans[i].char_start, spans.spans[i].char_end,
                           (long long)p.l->items[0].i, (long long)p.l->items[1].i);
                // the byte span covers the same text as the character span
                size_t cs = 0, bs = 0;
                while (cs < spans.spans[i].char_start && out[bs]) { bs++; while (((unsigned char)out[bs] & 0xC0) == 0x80) bs++; cs++; }
                EXPECT(bs == spans.spans[i].start);
            }
        }
    } else {
        EXPECT_MSG(st != ST_OK, "rendered but Jinja2 fails with %s", want_err);
        CVal *ln = cv_dict_get_str(c, "lineno");
        if (st != ST_OK && ln && ln->t == CV_INT) {
            char needle[64];
            snprintf(needle, sizeof needle, "line %lld:", (long long)ln->i);
            EXPECT_MSG(strstr(e.msg, needle) != NULL, "our message \"%s\" lacks \"%s\" (Jinja2: %s)", e.msg, needle, want_err);
        }
        const char *pfx = "TemplateError: ";
        if (st != ST_OK && want_err && !strncmp(want_err, pfx, strlen(pfx))) EXPECT_STR_CONTAINS(e.msg, want_err + strlen(pfx));
    }
    // @huggingface/jinja: agreement with Jinja2, or a listed disagreement
    CVal *hf = g_hf.t == CV_DICT ? cv_dict_get_str(g_hf, name) : NULL;
    EXPECT_MSG(hf != NULL, "no @huggingface/jinja record");
    if (hf) {
        const char *hout = str_field(*hf, "output");
        int agree = want ? hout && !strcmp(hout, want) : hout == NULL;
        int listed = g_notes.t == CV_DICT && cv_dict_get_str(g_notes, name) != NULL;
        EXPECT_MSG(agree || listed, "@huggingface/jinja disagrees with Jinja2 and hfjinja_disagreements.json does not list it: %s",
                   hout ? hout : str_field(*hf, "error"));
        EXPECT_MSG(!(agree && listed), "listed in hfjinja_disagreements.json but the two agree now");
    }
    gen_spans_free(&spans);
    free(out);
    chat_template_free(t);
    free(src);
}

int main(void) {
    setenv("TZ", "UTC", 1);
    tzset();
    CVal ref = load_json(DATA "jinja2.json");
    CVal hfref = load_json(DATA "hfjinja.json");
    g_notes = load_json(DATA "hfjinja_disagreements.json");
    if (ref.t != CV_DICT || hfref.t != CV_DICT) return 1;
    g_cases = *cv_dict_get_str(ref, "cases");
    g_hf = *cv_dict_get_str(hfref, "cases");
    g_now = cv_dict_get_str(ref, "fixed_now")->i;
    int n_listed_seen = 0;
    for (size_t i = 0; i < g_cases.l->n; i++) {
        g_case = g_cases.l->items[i];
        const char *name = str_field(g_case, "name");
        if (g_notes.t == CV_DICT && cv_dict_get_str(g_notes, name)) n_listed_seen++;
        test_run(name, check_case);
    }
    if (g_notes.t == CV_DICT && (size_t)n_listed_seen != g_notes.d->n) {
        printf("FAIL hfjinja_disagreements: it lists cases that do not exist\n");
        test_failed_total++;
    }
    cv_release(ref);
    cv_release(hfref);
    cv_release(g_notes);
    TEST_MAIN_END();
}
