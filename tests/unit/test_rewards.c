// test_rewards.c: the built-in reward functions (hand-checked values) and the cmd: protocol
// with helper programs under tests/data/rewards/: a good one, garbage, a stall past the
// timeout, a crash mid-batch.
#include "test.h"

#include "core/alloc.h"
#include "train/rewards.h"

#include <time.h>

static RewardInput input(const char *completion, const cJSON *row) {
    RewardInput r = {.prompt = "Q", .completion = completion, .row = row};
    return r;
}

static void test_final_answer(void) {
    char *a = reward_final_answer("so it is 12, then \\boxed{3 + \\frac{1}{2}} and later 7");
    EXPECT_STR_CONTAINS(a, "3 + \\frac{1}{2}");
    EXPECT(a && strlen(a) == strlen("3 + \\frac{1}{2}"));
    free(a);
    a = reward_final_answer("first 5, then -1,234.50 apples.");
    EXPECT(a && !strcmp(a, "-1,234.50"));
    free(a);
    EXPECT(reward_final_answer("no answer here") == NULL);
    a = reward_final_answer("unbalanced \\boxed{4 and 9");
    EXPECT(a && !strcmp(a, "9"));
    free(a);
    EXPECT(reward_answers_equal("1,234.50", "1234.5"));
    EXPECT(reward_answers_equal("$42.", "42"));
    EXPECT(!reward_answers_equal("42", "43"));
    EXPECT(reward_answers_equal(" x^2 ", "x^2"));
    EXPECT(!reward_answers_equal("x^2", "x^3"));
}

static void test_builtin(void) {
    const char *specs[] = {"exact_match:answer", "regex:^A+b", "length:10", "format", "exact_match:gsm"};
    RewardSet rs;
    Err e = {0};
    double w[] = {1, 2, 3, 4, 5};
    EXPECT_MSG(rewards_init(&rs, specs, 5, w, 5, 1.0, &e) == ST_OK, "%s", e.msg);
    cJSON *row = cJSON_Parse("{\"answer\": 7, \"gsm\": \"steps... #### 1,000\"}");
    cJSON *row2 = cJSON_Parse("{\"answer\": \"\\\\boxed{x+1}\"}");
    RewardInput in[4] = {
        input("AAAb the answer is \\boxed{7}", row),
        input("<think>\nhm\n</think>\n<answer>\n1000\n</answer>", row),
        input("x is \\boxed{ x+1 }", row2),  // gsm column absent: None
        input("h\xc3\xa9llo", row2),           // 5 code points
    };
    double out[4 * 5];
    EXPECT_MSG(rewards_score(&rs, in, 4, out, &e) == ST_OK, "%s", e.msg);
    double want[4][5] = {
        {1, 1, -(28 - 10) / 100.0, 0, 0},
        {0, 0, -(43 - 10) / 100.0, 1, 1},
        {1, 0, -(18 - 10) / 100.0, 0, NAN},
        {0, 0, -(10 - 5) / 100.0, 0, NAN},
    };
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 5; k++) {
            double g = out[i * 5 + k], x = want[i][k];
            EXPECT_MSG(isnan(x) ? isnan(g) : fabs(g - x) < 1e-12, "input %d reward %s: %g, want %g", i, specs[k], g, x);
        }
    EXPECT(!strcmp(rs.fns[0].name, "exact_match") && !strcmp(rs.fns[4].name, "exact_match_2"));
    EXPECT(rs.weights[3] == 4);
    rewards_free(&rs);
    cJSON_Delete(row);
    cJSON_Delete(row2);
}

static void test_bad_specs(void) {
    Err e = {0};
    RewardSet rs;
    const char *s1[] = {"regex:(unclosed"};
    EXPECT(rewards_init(&rs, s1, 1, NULL, 0, 1.0, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "regex:(unclosed");
    const char *s2[] = {"bleu"};
    EXPECT(rewards_init(&rs, s2, 1, NULL, 0, 1.0, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "unknown reward");
    const char *s3[] = {"length:ten"};
    EXPECT(rewards_init(&rs, s3, 1, NULL, 0, 1.0, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "length:TARGET");
    const char *s4[] = {"format", "length:3"};
    double w[] = {1};
    EXPECT(rewards_init(&rs, s4, 2, w, 1, 1.0, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "--reward_weights has 1 values for 2");
    EXPECT(rewards_init(&rs, s4, 0, NULL, 0, 1.0, &e) == ST_EINVAL);
}

// Every function logs its own rewards/<name>/mean: three of one kind get three names (two of them
// used to merge into one metric), and a set whose names still meet is refused.
static void test_unique_names(void) {
    Err e = {0};
    RewardSet rs;
    const char *specs[] = {"length:1", "length:2", "length:3", "format", "format"};
    EXPECT_MSG(rewards_init(&rs, specs, 5, NULL, 0, 1.0, &e) == ST_OK, "%s", e.msg);
    const char *want[] = {"length", "length_2", "length_3", "format", "format_2"};
    for (int k = 0; k < 5; k++) EXPECT_MSG(!strcmp(rs.fns[k].name, want[k]), "%d: %s", k, rs.fns[k].name);
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < k; j++) EXPECT(strcmp(rs.fns[j].metric_mean, rs.fns[k].metric_mean));
    EXPECT(!strcmp(rs.fns[2].metric_mean, "rewards/length_3/mean"));
    rewards_free(&rs);
    const char *clash[] = {"length:1", "length:2", "cmd:./length_2"};
    EXPECT(rewards_init(&rs, clash, 3, NULL, 0, 1.0, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "rewards/length_2/mean");
}

// exact_match:COLUMN on a dataset without COLUMN fails before any step (it used to score None,
// "reward": null, for every completion), naming the column and the columns there are.
static void test_check_columns(void) {
    Err e = {0};
    RewardSet rs;
    const char *specs[] = {"length:3", "exact_match:answer"};
    EXPECT_MSG(rewards_init(&rs, specs, 2, NULL, 0, 1.0, &e) == ST_OK, "%s", e.msg);
    cJSON *a = cJSON_Parse("{\"prompt\": \"q\", \"solution\": \"4\"}");
    cJSON *b = cJSON_Parse("{\"prompt\": \"q\", \"id\": 3}");
    cJSON *c = cJSON_Parse("{\"prompt\": \"q\", \"answer\": null}");
    const cJSON *rows[] = {a, b, c};
    EXPECT(rewards_check_columns(&rs, rows, 2, "data.jsonl", &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "data.jsonl");
    EXPECT_STR_CONTAINS(e.msg, "\"answer\"");
    EXPECT_STR_CONTAINS(e.msg, "\"prompt\", \"solution\", \"id\"");
    // one row with the column (even null) makes it a column of the dataset: the others score None
    EXPECT_MSG(rewards_check_columns(&rs, rows, 3, "data.jsonl", &e) == ST_OK, "%s", e.msg);
    rewards_free(&rs);
    cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(c);
}

#define NIN 40

// Many requests in one call (more than a socket buffer's worth of text), twice on the same child.
static void test_cmd_good(void) {
    const char *specs[] = {"cmd:tests/data/rewards/echo_x.sh", "length:0"};
    RewardSet rs;
    Err e = {0};
    EXPECT_MSG(rewards_init(&rs, specs, 2, NULL, 0, 10.0, &e) == ST_OK, "%s", e.msg);
    EXPECT(!strcmp(rs.fns[0].name, "echo_x.sh"));
    RewardInput in[NIN];
    cJSON *rows[NIN];
    int32_t ids[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    char *big = xmalloc(6001);  // 40 requests of 6 kB: more than a socket buffer holds
    memset(big, 'z', 6000);
    big[6000] = 0;
    for (int i = 0; i < NIN; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, i % 7 == 3 ? "{\"y\": 1}" : "{\"x\": %d.5}", i);
        rows[i] = cJSON_Parse(buf);
        in[i] = input(big, rows[i]);
        in[i].ids = ids;
        in[i].n_ids = i % 9;
    }
    double out[NIN * 2];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NIN; i++) in[i].completion = round ? "short" : big;
        EXPECT_MSG(rewards_score(&rs, in, NIN, out, &e) == ST_OK, "%s", e.msg);
        for (int i = 0; i < NIN; i++) {
            double want = i % 7 == 3 ? NAN : i + 0.5 + 1000.0 * (i % 9);
            EXPECT_MSG(isnan(want) ? isnan(out[i * 2]) : out[i * 2] == want, "round %d input %d: %g, want %g", round, i,
                       out[i * 2], want);
            EXPECT(out[i * 2 + 1] == (round ? -0.05 : -60.0));
        }
    }
    rewards_free(&rs);
    for (int i = 0; i < NIN; i++) cJSON_Delete(rows[i]);
    free(big);
}

static void expect_cmd_error(const char *spec, double timeout, const char *want1, const char *want2) {
    const char *specs[] = {spec};
    RewardSet rs;
    Err e = {0};
    EXPECT_MSG(rewards_init(&rs, specs, 1, NULL, 0, timeout, &e) == ST_OK, "%s", e.msg);
    RewardInput in[3] = {input("a", NULL), input("b", NULL), input("c", NULL)};
    double out[3];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Status st = rewards_score(&rs, in, 3, out, &e);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    EXPECT(st != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, spec + 4);  // names the program
    EXPECT_STR_CONTAINS(e.msg, want1);
    EXPECT_STR_CONTAINS(e.msg, want2);
    EXPECT_MSG(secs < timeout + 3, "took %.1f s", secs);
    // the set is still usable: a later call fails at once with a clear message
    Err e2 = {0};
    EXPECT(rewards_score(&rs, in, 3, out, &e2) != ST_OK);
    EXPECT_STR_CONTAINS(e2.msg, "not running");
    rewards_free(&rs);
}

static void test_cmd_garbage(void) {
    expect_cmd_error("cmd:tests/data/rewards/garbage.sh", 10, "answered \"banana\"", "completion 1 of 3");
}
static void test_cmd_timeout(void) {
    expect_cmd_error("cmd:tests/data/rewards/slow.sh", 0.5, "no answer within 0.5 s", "--reward_timeout");
}
static void test_cmd_crash(void) {
    expect_cmd_error("cmd:tests/data/rewards/crash.sh", 10, "exited with status 3", "answering 1 of 3");
}
static void test_cmd_missing_program(void) {
    expect_cmd_error("cmd:tests/data/rewards/no_such_program", 10, "exited with status 127", "answering 0 of 3");
}

int main(void) {
    RUN(test_final_answer);
    RUN(test_builtin);
    RUN(test_bad_specs);
    RUN(test_unique_names);
    RUN(test_check_columns);
    RUN(test_cmd_good);
    RUN(test_cmd_garbage);
    RUN(test_cmd_timeout);
    RUN(test_cmd_crash);
    RUN(test_cmd_missing_program);
    TEST_MAIN_END();
}
