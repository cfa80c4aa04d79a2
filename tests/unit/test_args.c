// test_args.c: the shared command-line parser (ARCHITECTURE §9).
#include "test.h"

#include "cli/args.h"
#include "core/fileio.h"

#include <unistd.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, "model dir"},
    {"learning_rate", ARG_FLOAT, "2e-5", "lr", "[0,inf)"},
    {"max_new_tokens", ARG_INT, "16", "tokens", "[1,inf)"},
    {"packing", ARG_BOOL, "false", "pack"},
    {"do_sample", ARG_BOOL, "true", "sample"},
    {"reward", ARG_LIST, NULL, "rewards"},
    {"dataset", ARG_STR, NULL, "data"},
    {NULL, 0, NULL, NULL},
};

static Status parse(Args *a, Err *e, int argc, char **argv) { return args_parse(a, "test", specs, argc, argv, e); }

static void test_basic_and_aliases(void) {
    char *argv[] = {"--model_name_or_path", "/m", "--learning-rate", "3e-4", "--max_new_tokens=7", "--packing",
                    "--no_do_sample", "--dataset_name", "d.jsonl"};
    Args a;
    Err e = {0};
    EXPECT(parse(&a, &e, 9, argv) == ST_OK);
    EXPECT(!strcmp(args_str(&a, "model"), "/m"));
    EXPECT(args_float(&a, "learning_rate") == 3e-4);
    EXPECT(args_int(&a, "max_new_tokens") == 7);
    EXPECT(args_bool(&a, "packing") == 1);
    EXPECT(args_bool(&a, "do_sample") == 0);
    EXPECT(!strcmp(args_str(&a, "dataset"), "d.jsonl"));
    EXPECT(args_int(&a, "seed") == 42);
    args_free(&a);
}

static void test_bool_forms(void) {
    char *argv[] = {"--packing", "false", "--do_sample", "True"};
    Args a;
    Err e = {0};
    EXPECT(parse(&a, &e, 4, argv) == ST_OK);
    EXPECT(args_bool(&a, "packing") == 0);
    EXPECT(args_bool(&a, "do_sample") == 1);
    args_free(&a);
    char *bad[] = {"--packing=maybe"};
    EXPECT(parse(&a, &e, 1, bad) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "true or false");
    args_free(&a);
}

static void test_unknown_suggests(void) {
    char *argv[] = {"--learning_rat", "1"};
    Args a;
    Err e = {0};
    EXPECT(parse(&a, &e, 2, argv) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "did you mean --learning_rate");
    args_free(&a);
}

static void test_bad_number(void) {
    char *argv[] = {"--max_new_tokens", "ten"};
    Args a;
    Err e = {0};
    EXPECT(parse(&a, &e, 2, argv) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "--max_new_tokens expects an integer");
    args_free(&a);
}

static void test_unsupported(void) {
    char *ok[] = {"--gradient_checkpointing", "true", "--report_to", "none", "--use_peft", "false"};
    Args a;
    Err e = {0};
    EXPECT(parse(&a, &e, 6, ok) == ST_OK);
    args_free(&a);
    char *refuse[] = {"--use_peft", "true"};
    EXPECT(parse(&a, &e, 2, refuse) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "not supported yet");
    args_free(&a);
}

static const ArgSpec bounded[] = {
    {"top_p", ARG_FLOAT, "1.0", "nucleus", "(0,1]"},
    {"beta1", ARG_FLOAT, "0.9", "AdamW beta1", "[0,1)"},
    {"max_steps", ARG_INT, "-1", "steps", "[-1,inf)"},
    {"top_k", ARG_INT, "0", "k", "[0,inf)"},
    {NULL},
};

static Status parse_bounded(Args *a, Err *e, int argc, char **argv) {
    memset(e, 0, sizeof *e);
    return args_parse(a, "test", bounded, argc, argv, e);
}

// One value against the table: ST_OK or a flag error naming the flag, the value and the interval.
static void expect_value(const char *flag, const char *value, int ok, const char *msg) {
    char *argv[] = {(char *)flag, (char *)value};
    Args a;
    Err e;
    Status st = parse_bounded(&a, &e, 2, argv);
    EXPECT_MSG(ok ? st == ST_OK : st == ST_EINVAL, "%s %s: %s", flag, value, e.msg);
    if (!ok) EXPECT_STR_CONTAINS(e.msg, msg);
    args_free(&a);
}

static void test_ranges(void) {
    // open and closed ends
    expect_value("--top_p", "1", 1, NULL);
    expect_value("--top_p", "1e-9", 1, NULL);
    expect_value("--top_p", "0", 0, "--top_p 0 is out of range: expected a number in (0, 1]");
    expect_value("--top_p", "1.5", 0, "--top_p 1.5 is out of range: expected a number in (0, 1]");
    expect_value("--beta1", "0", 1, NULL);
    expect_value("--beta1", "1", 0, "--beta1 1 is out of range: expected a number in [0, 1)");
    expect_value("--max_steps", "-1", 1, NULL);
    expect_value("--max_steps", "-2", 0, "--max_steps -2 is out of range: expected an integer >= -1");
    expect_value("--top_k", "-1", 0, "--top_k -1 is out of range: expected an integer >= 0");
    // integers are read into an int: beyond INT_MAX is out of range, not wrapped
    expect_value("--top_k", "2147483647", 1, NULL);
    expect_value("--top_k", "2147483648", 0, "--top_k 2147483648 is out of range: expected an integer in [0, 2147483647]");
    // the common flags are bounded too
    expect_value("--seed", "-1", 0, "--seed -1 is out of range: expected an integer in [0, 4294967295]");
    expect_value("--seed", "4294967295", 1, NULL);
    expect_value("--threads", "0", 0, "--threads 0 is out of range: expected an integer >= 1");
    // from a config file: the file is named
    char dir[] = "/tmp/still-args-XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    char *yml = path_join(dir, "c.yaml");
    const char *y = "top_k: -3\n";
    Err e = {0};
    EXPECT(file_write_atomic(yml, y, strlen(y), &e) == ST_OK);
    char *argv[] = {"--config", yml};
    Args a;
    EXPECT(parse_bounded(&a, &e, 2, argv) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "c.yaml:1: --top_k -3 is out of range");
    args_free(&a);
    // the help shows each interval
    char *help = NULL;
    size_t hl = 0;
    FILE *f = open_memstream(&help, &hl);
    args_print_help(f, "test", "t", bounded);
    fclose(f);
    EXPECT_STR_CONTAINS(help, "--top_p X in (0,1]");
    EXPECT_STR_CONTAINS(help, "--seed N in [0,4294967295]");
    free(help);
    unlink(yml);
    rmdir(dir);
    free(yml);
}

static void test_list_and_config(void) {
    char dir[] = "/tmp/still-args-XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    char *yml = path_join(dir, "c.yaml"), *js = path_join(dir, "c.json");
    const char *y = "learning_rate: 1e-3\nmax_new_tokens: 5\nreward:\n  - a\n  - b\npacking: true\n";
    const char *j = "{\"learning_rate\": 0.5, \"reward\": [\"x\"], \"model-name-or-path\": \"/q\"}";
    Err e = {0};
    EXPECT(file_write_atomic(yml, y, strlen(y), &e) == ST_OK);
    EXPECT(file_write_atomic(js, j, strlen(j), &e) == ST_OK);
    char *argv[] = {"--config", yml, "--max_new_tokens", "9"};
    Args a;
    EXPECT(parse(&a, &e, 4, argv) == ST_OK);
    EXPECT(args_float(&a, "learning_rate") == 1e-3);
    EXPECT(args_int(&a, "max_new_tokens") == 9);
    EXPECT(args_bool(&a, "packing") == 1);
    char **vals;
    EXPECT(args_list(&a, "reward", &vals) == 2);
    args_free(&a);
    char *argv2[] = {"--config", js, "--reward", "r1", "--reward", "r2", "--reward", "r3"};
    EXPECT(parse(&a, &e, 8, argv2) == ST_OK);
    EXPECT(args_list(&a, "reward", &vals) == 3);
    EXPECT(!strcmp(vals[0], "r1"));
    EXPECT(!strcmp(args_str(&a, "model"), "/q"));
    EXPECT(args_float(&a, "learning_rate") == 0.5);
    args_free(&a);
    const char *bad = "learning_rate: [1\n";
    EXPECT(file_write_atomic(yml, bad, strlen(bad), &e) == ST_OK);
    char *argv3[] = {"--config", yml};
    EXPECT(parse(&a, &e, 2, argv3) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "c.yaml");
    args_free(&a);
    const char *unk = "{\"learning_rat\": 1}";
    EXPECT(file_write_atomic(js, unk, strlen(unk), &e) == ST_OK);
    char *argv4[] = {"--config", js};
    EXPECT(parse(&a, &e, 2, argv4) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "c.json");
    EXPECT_STR_CONTAINS(e.msg, "did you mean --learning_rate");
    args_free(&a);
    unlink(yml);
    unlink(js);
    rmdir(dir);
    free(yml);
    free(js);
}

int main(void) {
    RUN(test_basic_and_aliases);
    RUN(test_bool_forms);
    RUN(test_unknown_suggests);
    RUN(test_bad_number);
    RUN(test_unsupported);
    RUN(test_list_and_config);
    RUN(test_ranges);
    TEST_MAIN_END();
}
