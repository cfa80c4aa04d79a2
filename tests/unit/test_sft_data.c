// test_sft_data.c: pre-tokenised SFT rows get the labels TRL's SFTTrainer._prepare_dataset builds
// (trl/trainer/sft_trainer.py, "Build a labels column"): a "labels" column is used as is (-100 = no
// loss) and the mask columns are then ignored; else "assistant_masks" always applies and
// "completion_mask" only with completion_only_loss, whose default (None) is on exactly when the
// first example has "prompt" and "completion" keys. The format comes from the first row's keys.
#include "test.h"

#include "train/data.h"

#include <unistd.h>

static char dir[] = "/tmp/still-sft-data-XXXXXX";

static const char *write_rows(const char *name, const char *text) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static DataConfig config(int completion_only) {
    DataConfig c = {.text_field = "text", .max_length = 64, .truncate = 1, .completion_only_loss = completion_only};
    return c;
}

// Load path (no tokenizer) and compare example 0's mask with want (n tokens).
static void expect_mask(const char *path, int completion_only, const uint8_t *want, int n, int want_completion_only) {
    DataConfig c = config(completion_only);
    Dataset d;
    Err e = {0};
    Status st = data_load(path, &c, NULL, &d, &e);
    EXPECT_MSG(st == ST_OK, "%s", e.msg);
    if (st != ST_OK) return;
    EXPECT(d.format == FMT_IDS);
    EXPECT(d.completion_only_loss == want_completion_only);
    EXPECT(d.ex[0].n == n);
    for (int t = 0; t < n && t < d.ex[0].n; t++) EXPECT_MSG(d.ex[0].mask[t] == want[t], "token %d: %d", t, d.ex[0].mask[t]);
    data_free(&d);
}

// input_ids + completion_mask without prompt/completion keys: TRL trains on every token unless
// completion_only_loss is set (the mask used to be applied by default).
static void test_completion_mask_default_off(void) {
    const char *p = write_rows("cm.jsonl", "{\"input_ids\": [5, 6, 7, 8], \"completion_mask\": [0, 0, 1, 1]}\n");
    const uint8_t all[] = {1, 1, 1, 1}, tail[] = {0, 0, 1, 1};
    expect_mask(p, -1, all, 4, 0);
    expect_mask(p, 1, tail, 4, 1);
    expect_mask(p, 0, all, 4, 0);
}

// The first row's keys decide: "prompt" and "completion" beside input_ids turn the default on.
static void test_completion_mask_prompt_completion_keys(void) {
    const char *p = write_rows("pc.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\", \"input_ids\": [5, 6, 7], "
                                           "\"completion_mask\": [0, 1, 1]}\n");
    const uint8_t tail[] = {0, 1, 1}, all[] = {1, 1, 1};
    expect_mask(p, -1, tail, 3, 1);
    expect_mask(p, 0, all, 3, 0);
}

// A labels column is used as is; completion_mask and assistant_masks are then ignored.
static void test_labels_column(void) {
    const char *p = write_rows("lab.jsonl", "{\"input_ids\": [5, 6, 7, 8, 9], \"labels\": [-100, 6, -100, 8, 9], "
                                            "\"completion_mask\": [0, 0, 0, 0, 1], \"assistant_masks\": [1, 1, 1, 1, 0]}\n");
    const uint8_t want[] = {0, 1, 0, 1, 1};
    expect_mask(p, -1, want, 5, 0);
    expect_mask(p, 1, want, 5, 1);
}

// assistant_masks applies whatever completion_only_loss says.
static void test_assistant_masks_always(void) {
    const char *p = write_rows("am.jsonl", "{\"input_ids\": [5, 6, 7], \"assistant_masks\": [0, 1, 0]}\n");
    const uint8_t want[] = {0, 1, 0};
    expect_mask(p, -1, want, 3, 0);
    expect_mask(p, 0, want, 3, 0);
}

// Labels that are neither -100 nor the input id would be another target: refused, with the place.
static void test_labels_refused(void) {
    DataConfig c = config(-1);
    Dataset d;
    Err e = {0};
    const char *p = write_rows("bad.jsonl", "{\"input_ids\": [5, 6], \"labels\": [-100, 6]}\n"
                                            "{\"input_ids\": [5, 6], \"labels\": [-100, 7]}\n");
    EXPECT(data_load(p, &c, NULL, &d, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "bad.jsonl:2");
    EXPECT_STR_CONTAINS(e.msg, "\"labels\"[1] = 7 differs from \"input_ids\"[1] = 6");
}

// The format comes from the first row's keys, not from strings anywhere in the file's first
// 4 KiB: a pre-tokenised row with the string "text" as a value is pre-tokenised, and a text row
// whose value mentions "input_ids" is text.
static void test_detect_from_keys(void) {
    DataConfig c = config(-1);
    DataFormat f;
    int co = -1;
    Err e = {0};
    const char *p = write_rows("ids.jsonl", "{\"input_ids\": [1, 2], \"source\": \"text\", \"kind\": \"prompt\"}\n");
    EXPECT_MSG(data_detect(p, &c, &f, &co, &e) == ST_OK, "%s", e.msg);
    EXPECT(f == FMT_IDS && co == 0);
    p = write_rows("txt.jsonl", "{\"text\": \"the \\\"input_ids\\\" column\"}\n{\"input_ids\": [1]}\n");
    EXPECT_MSG(data_detect(p, &c, &f, &co, &e) == ST_OK, "%s", e.msg);
    EXPECT(f == FMT_TEXT && co == 0);
    p = write_rows("pc.json", "[{\"prompt\": \"a\", \"completion\": \"b\"}, 7]");
    EXPECT_MSG(data_detect(p, &c, &f, &co, &e) == ST_OK, "%s", e.msg);
    EXPECT(f == FMT_PROMPT_COMPLETION && co == 1);
    // only the first row is read: a broken later line is data_load's business
    p = write_rows("first.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\nnot json\n");
    EXPECT_MSG(data_detect(p, &c, &f, &co, &e) == ST_OK, "%s", e.msg);
    EXPECT(f == FMT_MESSAGES);
    p = write_rows("none.jsonl", "{\"chosen\": \"a\", \"rejected\": \"b\"}\n");
    EXPECT(data_detect(p, &c, &f, &co, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "none.jsonl:1");
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_completion_mask_default_off);
    RUN(test_completion_mask_prompt_completion_keys);
    RUN(test_labels_column);
    RUN(test_assistant_masks_always);
    RUN(test_labels_refused);
    RUN(test_detect_from_keys);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
