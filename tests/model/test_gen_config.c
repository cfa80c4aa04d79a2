// test_gen_config.c: generation_config.json's min_length, min_new_tokens, max_length,
// bad_words_ids, suppress_tokens and begin_suppress_tokens, read by `still generate` and applied
// as transformers applies them, against scripts/ref_gen_config.py (float64 PyTorch greedy decoding
// with transformers' logits processors and stopping criteria; tests/data/sampler/gen_config.json,
// whose greedy choices all win by a margin). Also the flags: --min_length / --min_new_tokens as the
// same fields, and --max_new_tokens winning over the file's max_length.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/json.h"

#include <unistd.h>

static const char *bin(void) { return getenv("STILL_BIN") ? getenv("STILL_BIN") : "./still"; }

static char dir[] = "/tmp/still-gen-config-XXXXXX";
static cJSON *ref;

// Write DIR/m/generation_config.json, run still generate on the fixture's prompt, return its ids.
static int run(const cJSON *gc, const char *flags, int32_t *ids, int cap) {
    char path[600], cmd[2048], prompt[256] = "";
    snprintf(path, sizeof path, "%s/m/generation_config.json", dir);
    char *text = cJSON_Print(gc);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(ref, "prompt"))
        snprintf(prompt + strlen(prompt), sizeof prompt - strlen(prompt), "%s%d", prompt[0] ? " " : "", it->valueint);
    snprintf(cmd, sizeof cmd, "%s generate --model %s/m --ids '%s' --print_ids --threads 2 %s 2>%s/err", bin(), dir,
             prompt, flags, dir);
    FILE *p = popen(cmd, "r");
    char line[8192], last[8192] = "";
    while (fgets(line, sizeof line, p)) snprintf(last, sizeof last, "%s", line);
    if (pclose(p) != 0) return -1;
    int n = 0;
    for (char *s = strtok(last, " \n"); s && n < cap; s = strtok(NULL, " \n")) ids[n++] = atoi(s);
    return n;
}

static void expect_case(const char *name, const cJSON *gc, const char *flags) {
    const cJSON *want = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "cases"), name), "ids");
    int32_t got[512];
    int n = run(gc, flags, got, 512), nw = cJSON_GetArraySize(want), same = n == nw;
    for (int i = 0; same && i < n; i++) same = got[i] == cJSON_GetArrayItem(want, i)->valueint;
    char *w = cJSON_PrintUnformatted(want);
    EXPECT_MSG(same, "%s%s%s: %d ids (first %d), transformers' rules give %s", name, flags[0] ? " with " : "", flags, n,
               n > 0 ? got[0] : -1, w);
    free(w);
}

static const cJSON *config_of(const char *name) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "cases"), name), "generation_config");
}

static void test_fields(void) {
    const char *names[] = {"eos_stops", "min_length", "min_new_tokens", "suppress", "begin_suppress",
                           "begin_suppress_first_only", "bad_words", "max_length", "max_length_20",
                           "max_new_tokens_wins"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) expect_case(names[i], config_of(names[i]), "");
}

// The flags set the same fields; --max_new_tokens wins over the file's max_length.
static void test_flags(void) {
    cJSON *gc = cJSON_Duplicate(config_of("min_length"), 1);
    char flags[64];
    snprintf(flags, sizeof flags, "--min_length %d", cJSON_GetObjectItem(gc, "min_length")->valueint);
    cJSON_DeleteItemFromObject(gc, "min_length");
    expect_case("min_length", gc, flags);
    cJSON_Delete(gc);
    gc = cJSON_Duplicate(config_of("min_new_tokens"), 1);
    cJSON_DeleteItemFromObject(gc, "min_new_tokens");  // its min_length stays: min_new_tokens replaces it
    expect_case("min_new_tokens", gc, "--min_new_tokens 5");
    cJSON_Delete(gc);
    gc = cJSON_Duplicate(config_of("max_new_tokens_wins"), 1);
    cJSON_DeleteItemFromObject(gc, "max_new_tokens");
    expect_case("max_new_tokens_wins", gc, "--max_new_tokens 5");
    cJSON_Delete(gc);
}

// Bad values name the file and the field.
static void test_bad_fields(void) {
    const char *bad[][2] = {{"{\"suppress_tokens\": [1, \"x\"]}", "suppress_tokens: expected token ids"},
                            {"{\"bad_words_ids\": [[1], []]}", "bad_words_ids[1]: expected a non-empty list"},
                            {"{\"begin_suppress_tokens\": [99999]}", "begin_suppress_tokens: id 99999 is outside"},
                            {"{\"max_length\": 0}", "max_length 0: must be positive"}};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        cJSON *gc = cJSON_Parse(bad[i][0]);
        int32_t ids[4];
        EXPECT_MSG(run(gc, "--max_new_tokens 2", ids, 4) < 0, "%s accepted", bad[i][0]);
        char path[600], *err = NULL;
        size_t len;
        Err e = {0};
        snprintf(path, sizeof path, "%s/err", dir);
        if (file_read_all(path, &err, &len, &e) == ST_OK) {
            EXPECT_STR_CONTAINS(err, "generation_config.json");
            EXPECT_STR_CONTAINS(err, bad[i][1]);
        }
        free(err);
        cJSON_Delete(gc);
    }
}

int main(void) {
    Err e = {0};
    if (json_parse_file("tests/data/sampler/gen_config.json", &ref, &e) != ST_OK || !mkdtemp(dir)) {
        printf("FAIL gen_config: %s\n", e.msg);
        return 1;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir %s/m && cp tests/data/models/qwen3_tied/config.json "
                              "tests/data/models/qwen3_tied/model.safetensors %s/m/", dir, dir);
    if (system(cmd) != 0) return 1;
    RUN(test_fields);
    RUN(test_flags);
    RUN(test_bad_fields);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    cJSON_Delete(ref);
    TEST_MAIN_END();
}
