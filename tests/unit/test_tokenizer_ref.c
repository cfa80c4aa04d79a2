// test_tokenizer_ref.c: encode/decode against transformers.js references for real tokenizers
// (Qwen3, Llama 3, Llama 2), fixtures from scripts/ref_tokenizer.mjs. Every id and every decode
// must match. Texts where transformers.js departs from the Rust tokenizers are kept out of the
// corpus and tested against Rust's semantics in test_tokenizer.c.
#include "test.h"
#include "tok_fixture.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>

static int ids_equal(const TokenIds *got, const cJSON *want, size_t *at) {
    size_t n = (size_t)cJSON_GetArraySize(want), i = 0;
    for (const cJSON *x = want->child; x; x = x->next, i++) {
        if (i >= got->n || got->ids[i] != x->valueint) {
            *at = i;
            return 0;
        }
    }
    *at = n;
    return got->n == n;
}

static void show(const char *label, const char *s) {
    cJSON *j = cJSON_CreateString(s);
    char *p = cJSON_PrintUnformatted(j);
    printf("    %s %.300s\n", label, p);
    free(p);
    cJSON_Delete(j);
}

static int run_fixture(const char *name, int *n_cases) {
    const char *dir = tok_fixture_dir(name);
    if (!dir) return 0;
    Tokenizer *tok;
    Err e = {0};
    if (tokenizer_load(dir, &tok, &e) != ST_OK) {
        printf("    load: %s\n", e.msg);
        return 0;
    }
    char path[512];
    snprintf(path, sizeof path, "tests/data/tokenizer/%s/expected.jsonl", name);
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, &e) != ST_OK) {
        printf("    %s\n", e.msg);
        tokenizer_free(tok);
        return 0;
    }
    int ok = 1, line = 0;
    for (char *p = text, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl) nl = p + strlen(p);
        line++;
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(nl - p));
        if (!j) {
            printf("    %s:%d: bad JSON\n", path, line);
            ok = 0;
            break;
        }
        const char *t = cJSON_GetObjectItem(j, "text")->valuestring;
        (*n_cases)++;
        const char *keys[] = {"ids", "ids_special"};
        TokenIds got[2] = {{0}, {0}};
        for (int k = 0; k < 2; k++) {
            if (tokenizer_encode(tok, t, strlen(t), k, &got[k], &e) != ST_OK) {
                printf("    %s:%d: encode failed: %s\n", path, line, e.msg);
                ok = 0;
                continue;
            }
            size_t at;
            if (!ids_equal(&got[k], cJSON_GetObjectItem(j, keys[k]), &at)) {
                printf("    %s:%d: %s differ at index %zu (got %zu ids)\n", path, line, keys[k], at, got[k].n);
                show("text:", t);
                StrBuf sb = {0};
                for (size_t i = 0; i < got[k].n; i++) sb_printf(&sb, "%d ", got[k].ids[i]);
                printf("    got:  %.300s\n", sb.data ? sb.data : "");
                char *w = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, keys[k]));
                printf("    want: %.300s\n", w);
                free(w);
                sb_free(&sb);
                ok = 0;
            }
        }
        const cJSON *want_ids = cJSON_GetObjectItem(j, "ids_special");
        int n = cJSON_GetArraySize(want_ids);
        int32_t *ids = xmalloc(((size_t)n + 1) * sizeof *ids);
        for (int i = 0; i < n; i++) ids[i] = cJSON_GetArrayItem(want_ids, i)->valueint;
        const char *dkeys[] = {"decoded", "decoded_skip"};
        for (int k = 0; k < 2; k++) {
            char *d = tokenizer_decode(tok, ids, (size_t)n, k);
            const char *want = cJSON_GetObjectItem(j, dkeys[k])->valuestring;
            if (strcmp(d, want)) {
                printf("    %s:%d: %s differs\n", path, line, dkeys[k]);
                show("text:", t);
                show("got: ", d);
                show("want:", want);
                ok = 0;
            }
            free(d);
        }
        free(ids);
        tokenizer_ids_free(&got[0]);
        tokenizer_ids_free(&got[1]);
        cJSON_Delete(j);
        if (!*nl) break;
    }
    free(text);
    tokenizer_free(tok);
    return ok;
}

static void test_qwen3(void) {
    int n = 0;
    EXPECT(run_fixture("qwen3", &n));
    EXPECT(n >= 40);
}

static void test_llama3(void) {
    int n = 0;
    EXPECT(run_fixture("llama3", &n));
    EXPECT(n >= 38);
}

static void test_llama2(void) {
    int n = 0;
    EXPECT(run_fixture("llama2", &n));
    EXPECT(n >= 38);
}

int main(void) {
    RUN(test_qwen3);
    RUN(test_llama3);
    RUN(test_llama2);
    TEST_MAIN_END();
}
