// test_tokenizer_synth.c: small synthetic tokenizers (tests/data/tokenizer/synth/NAME), one per set
// of components, against the Rust tokenizers library (fixtures from
// scripts/make_synth_tokenizers.mjs). Every id and every decode must match the Rust value, also on
// the lines where transformers.js differs (those carry "tjs" and the reason in "why").
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <dirent.h>

#define SYNTH_DIR "tests/data/tokenizer/synth"

static void show(const char *label, const char *s) {
    cJSON *j = cJSON_CreateString(s);
    char *p = cJSON_PrintUnformatted(j);
    printf("    %s %.300s\n", label, p);
    free(p);
    cJSON_Delete(j);
}

static void show_ids(const char *label, const int32_t *ids, size_t n) {
    StrBuf sb = {0};
    for (size_t i = 0; i < n; i++) sb_printf(&sb, "%d ", ids[i]);
    printf("    %s %.300s\n", label, sb.data ? sb.data : "");
    sb_free(&sb);
}

// JSON int array -> ids (caller frees).
static int32_t *json_ids(const cJSON *a, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(a);
    int32_t *ids = xmalloc((*n + 1) * sizeof *ids);
    size_t i = 0;
    for (const cJSON *x = a ? a->child : NULL; x; x = x->next) ids[i++] = x->valueint;
    return ids;
}

static int check_encode(const Tokenizer *tok, const char *where, const char *text, int special, const cJSON *want) {
    TokenIds got = {0};
    Err e = {0};
    int ok = 1;
    if (tokenizer_encode(tok, text, strlen(text), special, &got, &e) != ST_OK) {
        printf("    %s: encode failed: %s\n", where, e.msg);
        return 0;
    }
    size_t n;
    int32_t *w = json_ids(want, &n);
    if (got.n != n || (n && memcmp(got.ids, w, n * sizeof *w))) {
        printf("    %s: %s differ\n", where, special ? "ids_special" : "ids");
        show("text:", text);
        show_ids("got: ", got.ids, got.n);
        show_ids("want:", w, n);
        ok = 0;
    }
    free(w);
    tokenizer_ids_free(&got);
    return ok;
}

static int check_decodes(const Tokenizer *tok, const char *where, const cJSON *j, const cJSON *ids_json) {
    size_t n;
    int32_t *ids = json_ids(ids_json, &n);
    const char *keys[] = {"decoded", "decoded_skip"};
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        char *d = tokenizer_decode(tok, ids, n, k);
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
        if (!cJSON_IsString(want) || strcmp(d, want->valuestring)) {
            printf("    %s: %s differs\n", where, keys[k]);
            show_ids("ids: ", ids, n);
            show("got: ", d);
            show("want:", cJSON_IsString(want) ? want->valuestring : "(missing)");
            ok = 0;
        }
        free(d);
    }
    free(ids);
    return ok;
}

// One tokenizer directory; counts its cases and those where transformers.js differs.
static int run_synth(const char *name, int *n_cases, int *n_tjs) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", SYNTH_DIR, name);
    snprintf(path, sizeof path, "%s/expected.jsonl", dir);
    Tokenizer *tok;
    Err e = {0};
    if (tokenizer_load(dir, &tok, &e) != ST_OK) {
        printf("    %s: load: %s\n", name, e.msg);
        return 0;
    }
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
        char where[700];
        snprintf(where, sizeof where, "%s:%d", path, line);
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(nl - p));
        if (!j) {
            printf("    %s: bad JSON\n", where);
            ok = 0;
            break;
        }
        (*n_cases)++;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
        const cJSON *tjs = cJSON_GetObjectItemCaseSensitive(j, "tjs");
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(j, "why");
        if (tjs) {
            (*n_tjs)++;
            if (!cJSON_IsString(why) || strlen(why->valuestring) < 20 || strstr(why->valuestring, "UNDECLARED")) {
                printf("    %s: a transformers.js difference without a reason\n", where);
                ok = 0;
            }
        }
        if (cJSON_IsString(t)) {
            ok &= check_encode(tok, where, t->valuestring, 0, cJSON_GetObjectItemCaseSensitive(j, "ids"));
            ok &= check_encode(tok, where, t->valuestring, 1, cJSON_GetObjectItemCaseSensitive(j, "ids_special"));
            ok &= check_decodes(tok, where, j, cJSON_GetObjectItemCaseSensitive(j, "ids_special"));
        } else {
            ok &= check_decodes(tok, where, j, cJSON_GetObjectItemCaseSensitive(j, "decode_ids"));
        }
        cJSON_Delete(j);
        if (!*nl) break;
    }
    free(text);
    tokenizer_free(tok);
    return ok;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_synth(void) {
    DIR *d = opendir(SYNTH_DIR);
    EXPECT_MSG(d, "%s is missing", SYNTH_DIR);
    if (!d) return;
    char *names[256];
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < 256;)
        if (de->d_name[0] != '.') names[n++] = xstrdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    int cases = 0, tjs = 0;
    for (int i = 0; i < n; i++) {
        EXPECT_MSG(run_synth(names[i], &cases, &tjs), "synthetic tokenizer %s", names[i]);
        free(names[i]);
    }
    // Guards against a fixture directory that silently lost its tokenizers or cases.
    EXPECT_MSG(n >= 21, "only %d synthetic tokenizers", n);
    EXPECT_MSG(cases >= 600, "only %d cases", cases);
    EXPECT_MSG(tjs >= 100, "only %d cases where transformers.js differs", tjs);
}

int main(void) {
    RUN(test_synth);
    TEST_MAIN_END();
}
