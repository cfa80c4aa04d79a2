// test_rollout.c: prompt datasets (string and message prompts, conversational rows, teacher
// templates) and the scoring layout the on-policy trainers use.
#include "test.h"

#include "backend/backend.h"
#include "core/fileio.h"
#include "train/codec.h"
#include "train/rollout.h"

#include <unistd.h>

static const char *TOK = "tests/data/sft/tok";

static char *write_tmp(const char *text) {
    char tmpl[] = "/tmp/still-rollout-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) return NULL;
    if (write(fd, text, strlen(text)) < 0) tmpl[0] = 0;
    close(fd);
    return strdup(tmpl);
}

static void test_prompts(void) {
    ModelCodec mc;
    Err e = {0};
    EXPECT_MSG(model_codec_load(&mc, TOK, NULL, &e) == ST_OK, "%s", e.msg);
    char *path = write_tmp("{\"prompt\": \"2+2=\", \"answer\": \"4\"}\n"
                           "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}], \"answer\": 7}\n"
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n");
    PromptConfig cfg = {.vocab_size = 100000};
    PromptSet ps;
    EXPECT_MSG(prompts_load(path, &cfg, &mc.codec, &ps, &e) == ST_OK, "%s", e.msg);
    EXPECT(ps.n == 3);
    if (ps.n == 3) {
        EXPECT(!strcmp(ps.rows[0].text, "2+2="));
        EXPECT(ps.rows[0].n >= 4);
        EXPECT_STR_CONTAINS(ps.rows[1].text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        EXPECT(ps.rows[2].completion != NULL && ps.rows[2].n_completion > 0);
        EXPECT(ps.rows[0].completion == NULL);
        // teacher template: columns filled; message prompts get it as the last user message
        PromptRow tr;
        EXPECT_MSG(prompts_render_template(&ps, 0, "Q: {prompt} A={answer} {{x}}", &cfg, &mc.codec, &tr, &e) == ST_OK,
                   "%s", e.msg);
        EXPECT(!strcmp(tr.text, "Q: 2+2= A=4 {x}"));
        prompt_row_free(&tr);
        EXPECT_MSG(prompts_render_template(&ps, 1, "ref {answer}", &cfg, &mc.codec, &tr, &e) == ST_OK, "%s", e.msg);
        EXPECT_STR_CONTAINS(tr.text, "<|im_start|>user\nref 7<|im_end|>");
        prompt_row_free(&tr);
        EXPECT(prompts_render_template(&ps, 0, "{missing}", &cfg, &mc.codec, &tr, &e) == ST_EINVAL);
        EXPECT_STR_CONTAINS(e.msg, "no column \"missing\"");
    }
    prompts_free(&ps);
    unlink(path);
    free(path);
    path = write_tmp("{\"prompt\": \"ok\"}\n{\"text\": \"no prompt\"}\n");
    EXPECT(prompts_load(path, &cfg, &mc.codec, &ps, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, ":2: a prompt row needs \"prompt\"");
    unlink(path);
    free(path);
    model_codec_free(&mc);
}

static void test_score_layout(void) {
    const int32_t p0[] = {5, 6, 7}, p1[] = {9};
    const int32_t c0[] = {11, 12, 2}, c1[] = {13, 14, 15, 16};  // c0 ends with EOS 2; c1 truncated
    const int32_t *ps[] = {p0, p1}, *cs[] = {c0, c1};
    int pl[] = {3, 1}, cl[] = {3, 4};
    int32_t eos[] = {2, 3};
    ScoreBatch sb;
    Err e = {0};
    EXPECT(score_batch_build(&sb, ps, pl, cs, cl, 2, 5, 0, 4, eos, 2, &e) == ST_OK);
    EXPECT(sb.P == 3 && sb.T == 8 && sb.C == 5);
    // row 0: prompt at 0..2, completion at 3..5; targets at P-1+k
    EXPECT(sb.ids[0] == 5 && sb.ids[3] == 11 && sb.ids[5] == 2 && sb.seg[6] == 0);
    EXPECT(sb.targets[2] == 11 && sb.targets[3] == 12 && sb.targets[4] == 2 && sb.targets[5] == IGNORE_INDEX);
    EXPECT(sb.targets[1] == IGNORE_INDEX);
    // row 1: left-padded prompt at slot 2, positions from 0
    EXPECT(sb.seg[8] == 0 && sb.seg[10] == 1 && sb.ids[10] == 9 && sb.pos[10] == 0 && sb.pos[11] == 1);
    EXPECT(sb.targets[8 + 2] == 13 && sb.targets[8 + 5] == 16);
    EXPECT(sb.comp_len[0] == 3 && sb.comp_len[1] == 4 && sb.n_targets == 7);
    EXPECT(sb.truncated[0] == 0 && sb.truncated[1] == 1);
    score_batch_free(&sb);
    // P_min 6 (expert parallel: one shape on every rank): a prompt region of 6, the rows shifted right
    EXPECT(score_batch_build(&sb, ps, pl, cs, cl, 2, 5, 6, 4, eos, 2, &e) == ST_OK);
    EXPECT(sb.P == 6 && sb.T == 12);
    EXPECT(sb.seg[2] == 0 && sb.ids[3] == 5 && sb.pos[3] == 0 && sb.ids[6] == 11 && sb.pos[6] == 3);
    EXPECT(sb.targets[5] == 11 && sb.targets[8] == IGNORE_INDEX && sb.comp_len[0] == 3 && sb.n_targets == 7);
    EXPECT(sb.ids[12 + 5] == 9 && sb.seg[12 + 4] == 0 && sb.targets[12 + 5] == 13);
    score_batch_free(&sb);
    // any EOS id ends the mask (the second id here), tokens after it are not targets and not in
    // the row (padding: segment 0, id 0)
    const int32_t c2[] = {11, 3, 12};
    const int32_t *cs2[] = {c2};
    int cl2[] = {3};
    EXPECT(score_batch_build(&sb, ps, pl, cs2, cl2, 1, 3, 0, 1, eos, 2, &e) == ST_OK);
    EXPECT(sb.comp_len[0] == 2 && sb.truncated[0] == 0 && sb.targets[sb.P + 1] == IGNORE_INDEX);
    EXPECT(sb.seg[sb.P + 1] == 1 && sb.ids[sb.P + 1] == 3 && sb.seg[sb.P + 2] == 0 && sb.ids[sb.P + 2] == 0);
    score_batch_free(&sb);
    int too_long[] = {6};
    EXPECT(score_batch_build(&sb, ps, pl, cs2, too_long, 1, 5, 0, 1, eos, 2, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "longer than max_completion_length");
}

int main(void) {
    RUN(test_prompts);
    RUN(test_score_layout);
    TEST_MAIN_END();
}
