// test_tokenizer.c: tokenizer API, error messages, the cases where transformers.js departs from
// the Rust tokenizers (tested against Rust's semantics), streaming decode and pathological input.
#include "test.h"
#include "tok_fixture.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

static Tokenizer *load(const char *name) {
    const char *dir = tok_fixture_dir(name);
    Tokenizer *tok = NULL;
    Err e = {0};
    if (dir && tokenizer_load(dir, &tok, &e) != ST_OK) printf("    load %s: %s\n", name, e.msg);
    return tok;
}

static TokenIds enc(const Tokenizer *tok, const char *s) {
    TokenIds ids = {0};
    Err e = {0};
    if (tokenizer_encode(tok, s, strlen(s), 0, &ids, &e) != ST_OK) printf("    encode: %s\n", e.msg);
    return ids;
}

// encode(whole) == encode(p1) ++ encode(p2) ++ ... for pieces that each pre-tokenize as one.
static int splits_as(const Tokenizer *tok, const char *whole, const char **pieces, int n) {
    TokenIds w = enc(tok, whole), cat = {0};
    for (int i = 0; i < n; i++) {
        TokenIds p = enc(tok, pieces[i]);
        for (size_t k = 0; k < p.n; k++) {
            if (cat.n == cat.cap) cat.cap = cat.cap ? cat.cap * 2 : 16, cat.ids = xrealloc(cat.ids, cat.cap * sizeof *cat.ids);
            cat.ids[cat.n++] = p.ids[k];
        }
        tokenizer_ids_free(&p);
    }
    int ok = w.n == cat.n && (w.n == 0 || !memcmp(w.ids, cat.ids, w.n * sizeof *w.ids));
    tokenizer_ids_free(&w);
    tokenizer_ids_free(&cat);
    return ok;
}

static void test_api_qwen3(void) {
    Tokenizer *tok = load("qwen3");
    EXPECT(tok);
    if (!tok) return;
    EXPECT(tokenizer_vocab_size(tok) == 151669);
    EXPECT(tokenizer_eos_id(tok) == 151645 && !strcmp(tokenizer_eos_token(tok), "<|im_end|>"));
    EXPECT(tokenizer_pad_id(tok) == 151643 && !strcmp(tokenizer_pad_token(tok), "<|endoftext|>"));
    EXPECT(tokenizer_bos_id(tok) == -1 && tokenizer_bos_token(tok) == NULL);
    EXPECT(tokenizer_token_to_id(tok, "<think>") == 151667);
    EXPECT(!tokenizer_is_special(tok, 151667) && tokenizer_is_special(tok, 151645));
    EXPECT(!strcmp(tokenizer_id_to_token(tok, 151645), "<|im_end|>"));
    EXPECT(tokenizer_id_to_token(tok, 151669) == NULL && tokenizer_id_to_token(tok, -1) == NULL);
    EXPECT(tokenizer_token_to_id(tok, "no such token") == -1);
    TokenIds ids = {0};
    Err e = {0};
    EXPECT(tokenizer_encode(tok, "ok\xC3(", 4, 0, &ids, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "not valid UTF-8 (byte 2");
    // NUL bytes are text like any other byte when the length is given.
    EXPECT(tokenizer_encode(tok, "a\0b", 3, 0, &ids, &e) == ST_OK && ids.n == 3);
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
}

// Oniguruma's \s includes U+0085 and not U+FEFF (JavaScript's is the other way round), and its
// (?i:'s) matches the long s (U+017F, which case-folds to s). tokenizers uses Oniguruma.
static void test_rust_regex_semantics(void) {
    Tokenizer *tok = load("qwen3");
    EXPECT(tok);
    if (!tok) return;
    const char *nel[] = {"a", "\xC2\x85", "_Z"};          // transformers.js: "a", "\u0085_", "Z"
    EXPECT(splits_as(tok, "a\xC2\x85_Z", nel, 3));
    const char *nel2[] = {"x", "\xC2\x85", " y"};         // \s+(?!\S) backs off before " y"
    EXPECT(splits_as(tok, "x\xC2\x85 y", nel2, 3));
    const char *bom[] = {"x", " \xEF\xBB\xBF(", "a"};     // transformers.js: "x", " ", "\ufeff", "(a"
    EXPECT(splits_as(tok, "x \xEF\xBB\xBF(a", bom, 3));
    const char *longs[] = {"it", "'\xC5\xBF", "x"};       // transformers.js: "it", "'ſx"
    EXPECT(splits_as(tok, "it'\xC5\xBFx", longs, 3));
    const char *caps[] = {"WE", "'LL", " GO"};
    EXPECT(splits_as(tok, "WE'LL GO", caps, 3));
    tokenizer_free(tok);
    Err e = {0};
    char *t = tokre_translate("[^\\s\\p{L}]\\s+\\w\\uFEFF\\h", &e);
    EXPECT(t && !strcmp(t, "[^\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}\\p{L}][\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}]+[\\p{L}\\p{M}\\p{Nd}\\p{Pc}]\\x{FEFF}[0-9a-fA-F]"));
    free(t);
    EXPECT(tokre_translate("[a-z&&[^x]]", &e) == NULL);
    EXPECT_STR_CONTAINS(e.msg, "not supported");
}

static int valid_utf8_chunk(const char *s) {
    size_t n = strlen(s);
    return utf8_validate(s, n) == n;
}

static void test_stream(void) {
    const char *texts[] = {"Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈", "日本語のテキスト, Ελληνικά <|im_end|> ok", "plain ascii text", ""};
    const char *names[] = {"qwen3", "llama2"};
    for (int k = 0; k < 2; k++) {
        Tokenizer *tok = load(names[k]);
        EXPECT(tok);
        if (!tok) return;
        for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
            TokenIds ids = enc(tok, texts[i]);
            TokenizerStream st;
            tokenizer_stream_init(&st, tok, 0);
            StrBuf all = {0};
            sb_puts(&all, "");
            for (size_t j = 0; j < ids.n; j++) {
                char *c = tokenizer_stream_step(&st, ids.ids[j]);
                EXPECT_MSG(valid_utf8_chunk(c) && !strstr(c, "\xEF\xBF\xBD"), "%s: chunk %zu splits a character", names[k], j);
                sb_puts(&all, c);
                free(c);
            }
            char *full = tokenizer_decode(tok, ids.ids, ids.n, 0);
            EXPECT_MSG(!strcmp(all.data, full), "%s: stream \"%s\" != decode \"%s\"", names[k], all.data, full);
            free(full);
            sb_free(&all);
            tokenizer_stream_free(&st);
            tokenizer_ids_free(&ids);
        }
        tokenizer_free(tok);
    }
}

// Long whitespace runs and a 1 MB line: must finish promptly and round-trip.
static void test_pathological(void) {
    const char *names[] = {"qwen3", "llama2"};
    for (int k = 0; k < 2; k++) {
        Tokenizer *tok = load(names[k]);
        EXPECT(tok);
        if (!tok) return;
        size_t n = 1 << 20;
        char *s = xmalloc(n + 1);
        for (size_t i = 0; i < n; i++) s[i] = i + 1 == n ? 'x' : (i % 5000 == 4999 ? '\n' : ' ');
        s[n] = 0;
        char *lines = xmalloc(n + 1);
        for (size_t i = 0; i < n; i++) lines[i] = "ab1!. z"[i % 7];
        lines[n] = 0;
        const char *inputs[] = {s, lines};
        for (int m = 0; m < 2; m++) {
            TokenIds ids = enc(tok, inputs[m]);
            EXPECT(ids.n > 0);
            char *d = tokenizer_decode(tok, ids.ids, ids.n, 0);
            // Llama 2's Metaspace-style decoder strips the one space its normalizer prepends.
            EXPECT_MSG(!strcmp(d, inputs[m]), "%s: 1 MB input %d does not round-trip", names[k], m);
            free(d);
            tokenizer_ids_free(&ids);
        }
        free(s);
        free(lines);
        tokenizer_free(tok);
    }
}

static char tmpdir[256];

static const char *write_tok(const char *json, const char *config) {
    snprintf(tmpdir, sizeof tmpdir, "%s/tok_err_%d", getenv("STILL_BUILD") ? getenv("STILL_BUILD") : "build", (int)getpid());
    Err e = {0};
    dir_create(tmpdir, &e);
    char *p = path_join(tmpdir, "tokenizer.json");
    file_write_atomic(p, json, strlen(json), &e);
    free(p);
    p = path_join(tmpdir, "tokenizer_config.json");
    if (config) file_write_atomic(p, config, strlen(config), &e);
    else remove(p);
    free(p);
    return tmpdir;
}

static void expect_load_error(const char *json, const char *config, const char *needle) {
    Tokenizer *tok = NULL;
    Err e = {0};
    Status st = tokenizer_load(write_tok(json, config), &tok, &e);
    EXPECT_MSG(st != ST_OK && !tok, "loaded: %s", json);
    EXPECT_MSG(strstr(e.msg, needle), "\"%s\" lacks \"%s\"", e.msg, needle);
    tokenizer_free(tok);
}

#define MODEL(extra) "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]" extra "}"

static void test_load_errors(void) {
    expect_load_error("{\"normalizer\":null}", NULL, "missing \"model\"");
    expect_load_error("{\"model\":", NULL, "invalid JSON");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", NULL, "model type \"WordPiece\" is not supported");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a c\"]}}", NULL,
                      "merges[0]: token \"c\" is not in the vocabulary");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a a\"]}}", NULL, "two tokens");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a a\"]}}", NULL,
                      "merged token \"aa\" is not in the vocabulary");
    expect_load_error(MODEL("}, \"normalizer\": {\"type\": \"BertNormalizer\"}"), NULL,
                      "normalizer type \"BertNormalizer\" is not supported");
    expect_load_error(MODEL("}, \"pre_tokenizer\": {\"type\": \"Punctuation\"}"), NULL,
                      "pre_tokenizer type \"Punctuation\" is not supported");
    expect_load_error(MODEL("}, \"decoder\": {\"type\": \"CTC\"}"), NULL, "decoder type \"CTC\" is not supported");
    expect_load_error(MODEL("}, \"post_processor\": {\"type\": \"Nope\"}"), NULL, "post_processor type \"Nope\"");
    expect_load_error(MODEL("}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}"),
                      NULL, "does not compile");
    expect_load_error(MODEL("}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"x\"}, \"behavior\": \"Sideways\"}"),
                      NULL, "unknown Split behavior \"Sideways\"");
    expect_load_error(MODEL("}"), "{\"bos_token\": 7}", "\"bos_token\" must be a string");
    Tokenizer *tok = NULL;
    Err e = {0};
    EXPECT(tokenizer_load("/nonexistent/dir", &tok, &e) == ST_ENOTFOUND);
    EXPECT_STR_CONTAINS(e.msg, "tokenizer.json");
    // A minimal valid one loads and merges.
    EXPECT(tokenizer_load(write_tok(MODEL("}"), NULL), &tok, &e) == ST_OK);
    if (tok) {
        TokenIds ids = enc(tok, "abab");
        EXPECT(ids.n == 2 && ids.ids[0] == 2 && ids.ids[1] == 2);  // "ab" "ab": no merge joins them
        tokenizer_ids_free(&ids);
        tokenizer_free(tok);
    }
}

// LlamaTokenizerFast rebuilds its template from add_bos_token / add_eos_token.
static void test_llama_add_eos(void) {
    const char *dir = tok_fixture_dir("llama2");
    if (!dir) return;
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    char *text;
    size_t len;
    Err e = {0};
    EXPECT(file_read_all(cfg, &text, &len, &e) == ST_OK);
    char *p = strstr(text, "\"add_eos_token\": false");
    EXPECT(p);
    if (!p) return;
    memcpy(p, "\"add_eos_token\": true ", 22);
    char *json = path_join(dir, "tokenizer.json");
    char d2[400];
    snprintf(d2, sizeof d2, "%s-eos", dir);
    dir_create(d2, &e);
    char *cfg2 = path_join(d2, "tokenizer_config.json"), *json2 = path_join(d2, "tokenizer.json");
    file_write_atomic(cfg2, text, len, &e);
    Tokenizer *tok;
    char abs_json[1024];
    if (!realpath(json, abs_json)) snprintf(abs_json, sizeof abs_json, "%s", json);
    remove(json2);
    EXPECT(symlink(abs_json, json2) == 0);
    EXPECT(tokenizer_load(d2, &tok, &e) == ST_OK);
    if (tok) {
        TokenIds ids = {0};
        EXPECT(tokenizer_encode(tok, "hi", 2, 1, &ids, &e) == ST_OK);
        EXPECT(ids.n >= 3 && ids.ids[0] == tokenizer_bos_id(tok) && ids.ids[ids.n - 1] == tokenizer_eos_id(tok));
        tokenizer_ids_free(&ids);
        tokenizer_free(tok);
    }
    free(text), free(json), free(cfg2), free(json2);
}

int main(void) {
    RUN(test_api_qwen3);
    RUN(test_rust_regex_semantics);
    RUN(test_stream);
    RUN(test_pathological);
    RUN(test_load_errors);
    RUN(test_llama_add_eos);
    TEST_MAIN_END();
}
