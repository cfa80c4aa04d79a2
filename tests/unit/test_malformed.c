// test_malformed.c: every case of tests/data/malformed/manifest.json (scripts/make_malformed.py)
// must fail with the listed status (never crash) and a message holding the listed texts.
#include "test.h"

#include "core/json.h"
#include "model/config.h"
#include "model/safetensors.h"

static Status status_from_name(const char *s) {
    if (!strcmp(s, "EINVAL")) return ST_EINVAL;
    if (!strcmp(s, "EUNSUPPORTED")) return ST_EUNSUPPORTED;
    if (!strcmp(s, "ENOTFOUND")) return ST_ENOTFOUND;
    return ST_OK;
}

static int n_cases = 0;

// Each case reports as its own test line ("ok malformed/NAME").
static void run_case(const cJSON *c) {
    char label[256];
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    snprintf(label, sizeof label, "malformed/%s", name);
    test_current_name = label;
    test_current_failed = 0;
    Err e = {0};
    {
        const char *kind = cJSON_GetObjectItem(c, "kind")->valuestring;
        const char *path = cJSON_GetObjectItem(c, "path")->valuestring;
        Status want = status_from_name(cJSON_GetObjectItem(c, "status")->valuestring);
        EXPECT_MSG(want != ST_OK, "%s: bad status in manifest", name);
        err_clear(&e);
        Status got;
        if (!strcmp(kind, "config")) {
            ModelConfig cfg;
            got = config_load(path, &cfg, &e);
            if (got == ST_OK) config_free(&cfg);
            EXPECT_MSG(cfg.raw == NULL, "%s: raw kept after an error", name);
        } else {
            StSet s;
            got = st_open(path, &s, &e);
            if (got == ST_OK) st_close(&s);
            EXPECT_MSG(s.n_tensors == 0 && s.tensors == NULL, "%s: tensors kept after an error", name);
        }
        EXPECT_MSG(got == want, "%s: status %s, expected %s (%s)", name, status_name(got), status_name(want), e.msg);
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "expect")) {
            EXPECT_MSG(strstr(e.msg, x->valuestring) != NULL, "%s: message \"%s\" lacks \"%s\"", name, e.msg,
                       x->valuestring);
        }
        n_cases++;
    }
    if (test_current_failed) {
        test_failed_total++;
    } else {
        test_passed_total++;
        printf("ok %s\n", label);
    }
}

static void test_manifest_complete(void) { EXPECT(n_cases >= 50); }

int main(void) {
    cJSON *root = NULL;
    Err e = {0};
    if (json_parse_file("tests/data/malformed/manifest.json", &root, &e) != ST_OK) {
        printf("FAIL malformed: %s\n", e.msg);
        return 1;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) run_case(c);
    cJSON_Delete(root);
    RUN(test_manifest_complete);
    TEST_MAIN_END();
}
