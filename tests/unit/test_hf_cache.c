// test_hf_cache.c: hub ids resolved in a fake Hugging Face cache under /tmp.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/hf_cache.h"

#include <unistd.h>

static char root[256];
static const char *C1 = "0123456789abcdef0123456789abcdef01234567";
static const char *C2 = "01234560abcdef0123456789abcdef0123456789";
static const char *C3 = "fedcba9876543210fedcba9876543210fedcba98";

static void put(const char *rel, const char *text) {
    char *p = path_join(root, rel);
    char *d = xstrdup(p);
    *strrchr(d, '/') = '\0';
    Err e = {0};
    CHECK(dir_create(d, &e) == ST_OK);
    CHECK(file_write_atomic(p, text, strlen(text), &e) == ST_OK);
    free(d);
    free(p);
}

static void make_cache(void) {
    char rel[512];
    // hub/models--Qwen--Qwen3-0.6B: main -> C1, tag v1 -> C3; snapshots C1, C2, C3.
    snprintf(rel, sizeof rel, "hub/models--Qwen--Qwen3-0.6B/refs/main");
    put(rel, C1);
    snprintf(rel, sizeof rel, "hub/models--Qwen--Qwen3-0.6B/refs/v1");
    put(rel, "fedcba9876543210fedcba9876543210fedcba98\n");
    const char *cs[] = {C1, C2, C3};
    for (int i = 0; i < 3; i++) {
        snprintf(rel, sizeof rel, "hub/models--Qwen--Qwen3-0.6B/snapshots/%s/config.json", cs[i]);
        put(rel, "{}");
    }
    // refs/main pointing at a snapshot that is not there.
    put("hub/models--org--broken/refs/main", C1);
    put("hub/models--org--broken/snapshots/.keep", "");
    // A single-name id.
    put("hub/models--gpt2/refs/main", C2);
    snprintf(rel, sizeof rel, "hub/models--gpt2/snapshots/%s/config.json", C2);
    put(rel, "{}");
}

static char *snap(const char *commit) {
    StrBuf sb = {0};
    sb_printf(&sb, "%s/hub/models--Qwen--Qwen3-0.6B/snapshots/%s", root, commit);
    return sb_take(&sb);
}

static void set_cache_env(void) {
    char *hub = path_join(root, "hub");
    setenv("HF_HUB_CACHE", hub, 1);
    free(hub);
}

static void expect_resolves(const char *model, const char *rev, const char *commit) {
    char *dir = NULL, *want = snap(commit);
    Err e = {0};
    EXPECT_MSG(hf_resolve_model(model, rev, &dir, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(dir && !strcmp(dir, want), "%s@%s -> %s, expected %s", model, rev ? rev : "(null)", dir ? dir : "(null)",
               want);
    free(dir);
    free(want);
}

static void test_revisions(void) {
    set_cache_env();
    expect_resolves("Qwen/Qwen3-0.6B", NULL, C1);
    expect_resolves("Qwen/Qwen3-0.6B", "", C1);
    expect_resolves("Qwen/Qwen3-0.6B", "main", C1);
    expect_resolves("Qwen/Qwen3-0.6B", "v1", C3);
    expect_resolves("Qwen/Qwen3-0.6B", C2, C2);        // full commit
    expect_resolves("Qwen/Qwen3-0.6B", "01234560", C2);  // unique prefix
    char *dir = NULL;
    Err e = {0};
    EXPECT(hf_resolve_model("Qwen/Qwen3-0.6B", "0123", &dir, &e) == ST_ENOTFOUND);  // too short to be a prefix
    EXPECT(hf_resolve_model("Qwen/Qwen3-0.6B", "01234567", &dir, &e) == ST_OK);     // C1 only
    free(dir);
    EXPECT(hf_resolve_model("Qwen/Qwen3-0.6B", "0123456", &dir, &e) == ST_EINVAL);  // C1 and C2
    EXPECT_STR_CONTAINS(e.msg, "matches 2 snapshots");
    EXPECT(hf_resolve_model("Qwen/Qwen3-0.6B", "dev", &dir, &e) == ST_ENOTFOUND);
    EXPECT_STR_CONTAINS(e.msg, "revision \"dev\"");
    EXPECT_STR_CONTAINS(e.msg, C3);
    EXPECT(hf_resolve_model("Qwen/Qwen3-0.6B", "../../etc", &dir, &e) == ST_EINVAL);
    EXPECT(dir == NULL);
}

static void test_single_name_and_env_order(void) {
    unsetenv("HF_HUB_CACHE");
    setenv("HF_HOME", root, 1);  // -> $HF_HOME/hub
    char *dir = NULL;
    Err e = {0};
    EXPECT_MSG(hf_resolve_model("gpt2", NULL, &dir, &e) == ST_OK, "%s", e.msg);
    EXPECT(dir && strstr(dir, "/hub/models--gpt2/snapshots/") && strstr(dir, C2));
    free(dir);
    unsetenv("HF_HOME");
    char *old_home = getenv("HOME") ? xstrdup(getenv("HOME")) : NULL;
    char *home = path_join(root, "home");
    char *hub = path_join(root, "hub");
    char *dot = path_join(home, ".cache/huggingface");
    EXPECT(dir_create(dot, &e) == ST_OK);
    char *link = path_join(dot, "hub");
    EXPECT(symlink(hub, link) == 0);
    setenv("HOME", home, 1);  // -> ~/.cache/huggingface/hub
    EXPECT_MSG(hf_resolve_model("gpt2", "main", &dir, &e) == ST_OK, "%s", e.msg);
    free(dir);
    char *c = hf_hub_cache_dir();
    EXPECT(!strcmp(c, link));
    free(c);
    if (old_home) setenv("HOME", old_home, 1);
    free(old_home);
    free(home);
    free(hub);
    free(dot);
    free(link);
}

static void test_missing(void) {
    set_cache_env();
    char *dir = NULL;
    Err e = {0};
    EXPECT(hf_resolve_model("Qwen/Qwen3-8B", NULL, &dir, &e) == ST_ENOTFOUND);
    EXPECT_STR_CONTAINS(e.msg, "models--Qwen--Qwen3-8B");
    EXPECT_STR_CONTAINS(e.msg, "HF_HUB_CACHE");
    EXPECT_STR_CONTAINS(e.msg, "never downloads");
    EXPECT_STR_CONTAINS(e.msg, "huggingface-cli download Qwen/Qwen3-8B");
    EXPECT(hf_resolve_model("org/broken", NULL, &dir, &e) == ST_ENOTFOUND);
    EXPECT_STR_CONTAINS(e.msg, "snapshots/0123456789abcdef0123456789abcdef01234567 is missing");
    EXPECT(hf_resolve_model("/no/such/dir", NULL, &dir, &e) == ST_ENOTFOUND);
    EXPECT_STR_CONTAINS(e.msg, "no such directory");
    EXPECT(hf_resolve_model("a/b/c", NULL, &dir, &e) == ST_ENOTFOUND);
    EXPECT(dir == NULL);
}

static void test_local_dir_first(void) {
    set_cache_env();
    char *dir = NULL;
    Err e = {0};
    EXPECT(hf_resolve_model(root, NULL, &dir, &e) == ST_OK && dir && !strcmp(dir, root));
    free(dir);
}

static void test_hub_id_form(void) {
    EXPECT(hf_is_hub_id("Qwen/Qwen3-0.6B") && hf_is_hub_id("gpt2") && hf_is_hub_id("a_b/c.d-e"));
    EXPECT(!hf_is_hub_id("a/b/c") && !hf_is_hub_id("/abs") && !hf_is_hub_id("./x") && !hf_is_hub_id("a--b/c"));
    EXPECT(!hf_is_hub_id("org/na..me") && !hf_is_hub_id("") && !hf_is_hub_id("org/") && !hf_is_hub_id("x y"));
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/still_test_hf_%d", (int)getpid());
    make_cache();
    RUN(test_revisions);
    RUN(test_single_name_and_env_order);
    RUN(test_missing);
    RUN(test_local_dir_first);
    RUN(test_hub_id_form);
    Err e = {0};
    dir_remove_tree(root, &e);
    TEST_MAIN_END();
}
