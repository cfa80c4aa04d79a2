// test_fuzz_regressions.c: replay every input under tests/data/fuzz-regressions/TARGET/ through
// the fuzz target of that name (fuzz/fuzz_TARGET.c, the same code libFuzzer runs). Each must
// return a known status, with a message when it is an error; a crash, leak or undefined
// behaviour fails the program (and `make asan` runs it under the sanitizers). A smoke pair per
// target (one input that must parse, one that must fail) keeps the harnesses themselves honest.
#include "test.h"

#include "fuzz.h"
#include "tok_fixture.h"

#include "core/fileio.h"

#include <dirent.h>

#define REG_DIR "tests/data/fuzz-regressions"

typedef Status (*FuzzFn)(const uint8_t *, size_t, Err *);

static const struct {
    const char *name;
    FuzzFn fn;
} targets[] = {
#define FUZZ_ROW(name, what) {#name, fuzz_##name},
    FUZZ_TARGETS(FUZZ_ROW)
#undef FUZZ_ROW
};

static FuzzFn find_target(const char *name) {
    for (size_t i = 0; i < ARRAY_LEN(targets); i++)
        if (!strcmp(targets[i].name, name)) return targets[i].fn;
    return NULL;
}

static Status run_input(const char *target, const void *data, size_t size, Err *e) {
    memset(e, 0, sizeof *e);
    return find_target(target)((const uint8_t *)data, size, e);
}

static Status run_file(const char *target, const char *path, Err *e) {
    char *data;
    size_t len;
    Err re = {0};
    if (file_read_all(path, &data, &len, &re) != ST_OK) {
        snprintf(e->msg, sizeof e->msg, "cannot read: %s", re.msg);
        return (Status)-1;
    }
    Status st = run_input(target, data, len, e);
    free(data);
    return st;
}

static int valid_result(Status st, const Err *e) {
    if (st < ST_OK || st > ST_ERUNTIME) return 0;
    return st == ST_OK || (e->msg[0] && strnlen(e->msg, sizeof e->msg) < sizeof e->msg);
}

static void expect_status(const char *target, const char *input, size_t len, int want_ok) {
    Err e;
    Status st = run_input(target, input, len, &e);
    EXPECT_MSG(valid_result(st, &e), "%s: status %d without a message", target, (int)st);
    if (want_ok) EXPECT_MSG(st == ST_OK, "%s: a valid input failed: %s", target, e.msg);
    else EXPECT_MSG(st != ST_OK, "%s: an invalid input parsed", target);
}

#define EXPECT_OK(target, lit) expect_status(target, lit, sizeof lit - 1, 1)
#define EXPECT_ERR(target, lit) expect_status(target, lit, sizeof lit - 1, 0)

static void expect_file_status(const char *target, const char *path, int want_ok) {
    Err e;
    Status st = run_file(target, path, &e);
    EXPECT_MSG(valid_result(st, &e), "%s on %s: status %d: %s", target, path, (int)st, e.msg);
    if (want_ok) EXPECT_MSG(st == ST_OK, "%s: %s failed: %s", target, path, e.msg);
    else EXPECT_MSG(st != ST_OK, "%s: %s parsed", target, path);
}

static void test_smoke(void) {
    expect_file_status("safetensors", "tests/data/st/reference.safetensors", 1);
    expect_file_status("safetensors", "tests/data/malformed/st/overlap.safetensors", 0);
    expect_file_status("config", "tests/data/models/qwen3_tied/config.json", 1);
    expect_file_status("gguf", "tests/data/gguf/qwen3_tied.gguf", 1);
    expect_file_status("gguf", "tests/data/gguf/quant.gguf", 1);
    EXPECT_ERR("gguf", "GGUF\x03\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff\0\0\0\0\0\0\0\0");
    expect_file_status("config", "tests/data/malformed/config/cfg_rope_longrope/config.json", 0);
    EXPECT_OK("tokenizer_load", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}"
                                "\0{\"bos_token\": \"a\"}");
    EXPECT_ERR("tokenizer_load", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}");
    EXPECT_OK("tokenizer_encode", "\x01<|im_start|>user\nhello \xc3\xa9<|im_end|>");
    EXPECT_ERR("tokenizer_encode", "\x00" "ab\xff");
    EXPECT_OK("chat_template", "{% for m in messages %}{{ m.role }}: {{ m.content | tojson }}\n{% endfor %}"
                               "{% generation %}{{ tools | length }}{% endgeneration %}");
    EXPECT_ERR("chat_template", "{% for m in messages %}");
    EXPECT_OK("chat_messages", "\x01[{\"role\": \"user\", \"content\": \"hi\"}]");
    EXPECT_OK("chat_messages", "\x02{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\0{\"x\": 1}");
    EXPECT_ERR("chat_messages", "\x01[{\"role\": \"user\", \"content\": \"hi\"}");
    EXPECT_OK("args", "pos\n--model\n/m\n--packing\n--learning-rate=3e-4\n--reward\na\n--reward\nb\n--no_do_sample");
    EXPECT_ERR("args", "--learning_rat\n1");
    EXPECT_OK("args_config", "model: /m\nlearning_rate: 1e-4\nreward: [a, b]\n");
    EXPECT_OK("args_config", "{\"model\": \"/m\", \"max_new_tokens\": 3}");
    EXPECT_ERR("args_config", "{\"max_new_tokens\": \"many\"}");
    EXPECT_OK("dataset", "\x00\x00{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                         "{\"role\": \"assistant\", \"content\": \"yo\"}]}\n");
    EXPECT_OK("dataset", "\x40\x02[{\"input_ids\": [1, 2, 3]}]");
    EXPECT_ERR("dataset", "\x00\x00{\"chosen\": \"a\", \"rejected\": \"b\"}\n");
    EXPECT_OK("serve_request", "\x00{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 2, \"stop\": \"x\"}");
    EXPECT_OK("serve_request", "\x01{\"prompt\": \"hi\", \"logprobs\": 0, \"stream\": true}");
    EXPECT_ERR("serve_request", "\x00{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": \"hot\"}");
    EXPECT_ERR("serve_request", "\x01{\"prompt\": ");
    EXPECT_ERR("dataset", "\x00\x02{\"input_ids\": [1, 3000000000]}\n");  // no vocabulary to check against
    EXPECT_ERR("dataset", "\x00\x02{\"input_ids\": [1, -2]}\n");
}

static void test_regressions(void) {
    DIR *top = opendir(REG_DIR);
    EXPECT_MSG(top, "%s is missing", REG_DIR);
    if (!top) return;
    int n_inputs = 0;
    struct dirent *d;
    while ((d = readdir(top))) {
        if (d->d_name[0] == '.') continue;
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", REG_DIR, d->d_name);
        if (!dir_exists(dir)) continue;
        EXPECT_MSG(find_target(d->d_name), "%s names no fuzz target", dir);
        if (!find_target(d->d_name)) continue;
        DIR *sub = opendir(dir);
        struct dirent *f;
        while (sub && (f = readdir(sub))) {
            if (f->d_name[0] == '.') continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
            Err e;
            Status st = run_file(d->d_name, path, &e);
            EXPECT_MSG(valid_result(st, &e), "%s: status %d: %s", path, (int)st, e.msg);
            n_inputs++;
        }
        if (sub) closedir(sub);
    }
    closedir(top);
    printf("# %d regression inputs replayed\n", n_inputs);
}

int main(void) {
    const char *tok = tok_fixture_dir("qwen3");
    if (!tok) return 1;
    setenv(FUZZ_ENV_TOKENIZER, tok, 1);
    setenv(FUZZ_ENV_ROOT, ".", 1);
    RUN(test_smoke);
    RUN(test_regressions);
    TEST_MAIN_END();
}
