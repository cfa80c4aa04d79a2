// test_pref_data.c: preference and unpaired datasets tokenised as TRL's DPOTrainer / KTOTrainer
// _prepare_dataset tokenises them, on the byte-level test tokenizer of tests/data/sft/tok (ids =
// bytes, EOS <|im_end|> = 258, <|im_start|> = 257, a ChatML template), so every expected id list
// is written out by hand: EOS appended to text completions only, the implicit prompt
// (extract_prompt, its space and no-difference quirks), conversational rows through the chat
// template, pre-tokenised rows and ref columns, the max_length drop rule, unpairing order and the
// KL completions' rotation.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "train/codec.h"
#include "train/pref_data.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static ModelCodec mc;
static char dir[64];

static const char *write_file(const char *name, const char *text) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static int ids_are(const int32_t *v, int n, const char *text, int eos) {  // bytes of text, then 258 if eos
    int k = (int)strlen(text);
    if (n != k + (eos ? 1 : 0)) return 0;
    for (int i = 0; i < k; i++)
        if (v[i] != (unsigned char)text[i]) return 0;
    return !eos || v[k] == 258;
}

static void test_text_pairs(void) {
    const char *p = write_file("t.jsonl", "{\"prompt\": \"Q:\", \"chosen\": \" yes\", \"rejected\": \" no<|im_end|>\"}\n");
    PrefConfig cfg = {.max_length = 64};
    PrefSet s;
    Err e = {0};
    EXPECT_MSG(pref_load(p, &cfg, &mc.codec, &s, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT(s.n == 1 && !s.tokenised && !s.conversational && !s.implicit_prompt && !s.has_ref);
    EXPECT(ids_are(s.ex[0].prompt, s.ex[0].np, "Q:", 0));
    EXPECT(ids_are(s.ex[0].chosen, s.ex[0].nc, " yes", 1));      // EOS appended
    EXPECT(ids_are(s.ex[0].rejected, s.ex[0].nr, " no", 1));     // already there: not twice
    pref_free(&s);
}

static void test_implicit_prompt(void) {
    size_t np, c0, r0;
    Err e = {0};
    EXPECT(pref_extract_prompt_text("Q: yes", "Q: no", &np, &c0, &r0, &e) == ST_OK && np == 2 && c0 == 2 && r0 == 2);
    // no difference before the shorter ends: the loop variable stops at len - 1
    EXPECT(pref_extract_prompt_text("abc", "abcd", &np, &c0, &r0, &e) == ST_OK && np == 2 && c0 == 2 && r0 == 2);
    // a multi-byte character: split at code points, as Python does ("é" = C3 A9, "è" = C3 A8)
    EXPECT(pref_extract_prompt_text("x\xc3\xa9", "x\xc3\xa8", &np, &c0, &r0, &e) == ST_OK && np == 1);
    // differing first characters with chosen ending in a space: idx -1, the last character each
    EXPECT(pref_extract_prompt_text("a b ", "cd", &np, &c0, &r0, &e) == ST_OK && np == 3 && c0 == 3 && r0 == 1);
    EXPECT(pref_extract_prompt_text("", "x", &np, &c0, &r0, &e) == ST_EINVAL);
    const char *p = write_file("i.jsonl", "{\"chosen\": \"Q: yes\", \"rejected\": \"Q: no\"}\n");
    PrefConfig cfg = {.max_length = 64};
    PrefSet s;
    EXPECT_MSG(pref_load(p, &cfg, &mc.codec, &s, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT(s.implicit_prompt && ids_are(s.ex[0].prompt, s.ex[0].np, "Q:", 0));
    EXPECT(ids_are(s.ex[0].chosen, s.ex[0].nc, " yes", 1) && ids_are(s.ex[0].rejected, s.ex[0].nr, " no", 1));
    pref_free(&s);
}

static void test_conversational(void) {
    const char *p = write_file("c.jsonl",
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chosen\": [{\"role\": \"assistant\", \"content\": "
        "\"ok\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"no\"}]}\n"
        "{\"chosen\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"ok\"}], "
        "\"rejected\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"no\"}]}\n");
    PrefConfig cfg = {.max_length = 64};
    PrefSet s;
    Err e = {0};
    // the first row decides: explicit prompt, so the second row (no prompt) is an error naming its line
    EXPECT(pref_load(p, &cfg, &mc.codec, &s, &e) == ST_EINVAL && strstr(e.msg, "c.jsonl:2") && strstr(e.msg, "prompt"));
    p = write_file("c1.jsonl",
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chosen\": [{\"role\": \"assistant\", \"content\": "
        "\"ok\"}], \"rejected\": [{\"role\": \"assistant\", \"content\": \"no\"}]}\n");
    EXPECT_MSG(pref_load(p, &cfg, &mc.codec, &s, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    static const int32_t pr[] = {257, 'u', 's', 'e', 'r', 10, 'h', 'i', 258, 10, 257, 'a', 's', 's', 'i', 's', 't',
                                 'a', 'n', 't', 10};
    static const int32_t ch[] = {'o', 'k', 258, 10}, rj[] = {'n', 'o', 258, 10};
    EXPECT(s.conversational && s.ex[0].np == 21 && !memcmp(s.ex[0].prompt, pr, sizeof pr));
    EXPECT(s.ex[0].nc == 4 && !memcmp(s.ex[0].chosen, ch, sizeof ch) && s.ex[0].nr == 4 && !memcmp(s.ex[0].rejected, rj, sizeof rj));
    pref_free(&s);
}

static void test_tokenised_and_drop(void) {
    const char *p = write_file("k.jsonl",
        "{\"prompt_ids\": [1, 2], \"chosen_ids\": [3], \"rejected_ids\": [4, 5], \"ref_chosen_logps\": -1.5, "
        "\"ref_rejected_logps\": -2}\n"
        "{\"prompt_ids\": [1, 2, 3, 4], \"chosen_ids\": [3], \"rejected_ids\": [4], \"ref_chosen_logps\": -1, "
        "\"ref_rejected_logps\": -3}\n"
        "{\"prompt_ids\": [7], \"chosen_ids\": [8], \"rejected_ids\": [9], \"ref_chosen_logps\": -4, "
        "\"ref_rejected_logps\": -5}\n");
    PrefConfig cfg = {.max_length = 4};
    PrefSet s;
    Err e = {0};
    EXPECT_MSG(pref_load(p, &cfg, NULL, &s, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT(s.tokenised && s.n == 2 && s.n_dropped == 1 && s.has_ref);  // prompt of 4 >= max_length 4: dropped
    EXPECT(s.ex[0].nr == 2 && s.ex[0].rejected[1] == 5 && s.ex[0].ref_chosen == -1.5 && s.ex[1].ref_rejected == -5);
    EXPECT(s.ex[0].nc == 1 && s.ex[0].chosen[0] == 3);  // no EOS added to ids
    pref_free(&s);
    cfg.keep_end = 1;  // keep_end drops nothing
    EXPECT(pref_load(p, &cfg, NULL, &s, &e) == ST_OK && s.n == 3 && s.n_dropped == 0);
    pref_free(&s);
    p = write_file("bad.jsonl", "{\"prompt_ids\": [1], \"chosen_ids\": [400], \"rejected_ids\": [2]}\n");
    cfg = (PrefConfig){.vocab_size = 384};
    EXPECT(pref_load(p, &cfg, NULL, &s, &e) == ST_EINVAL && strstr(e.msg, "bad.jsonl:1") && strstr(e.msg, "chosen_ids"));
}

static void test_unpaired(void) {
    const char *p = write_file("u.jsonl",
        "{\"prompt_ids\": [1], \"completion_ids\": [10], \"label\": true}\n"
        "{\"prompt_ids\": [2], \"completion_ids\": [20], \"label\": false}\n"
        "{\"prompt_ids\": [3], \"completion_ids\": [30], \"label\": true}\n"
        "{\"prompt_ids\": [4, 4, 4], \"completion_ids\": [40], \"label\": true}\n"
        "{\"prompt_ids\": [5], \"completion_ids\": [50], \"label\": false}\n");
    PrefConfig cfg = {.max_length = 3};
    UnpairedSet u;
    Err e = {0};
    EXPECT_MSG(unpaired_load(p, &cfg, NULL, 3, &u, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    // row 4 dropped first; then runs of 3: (0 1 2) -> KL sources (2 0 1); (3) -> itself
    EXPECT(u.n == 4 && u.n_dropped == 1 && u.n_desirable == 2);
    EXPECT(u.ex[0].kl_src == 2 && u.ex[1].kl_src == 0 && u.ex[2].kl_src == 1 && u.ex[3].kl_src == 3);
    EXPECT(u.ex[3].completion[0] == 50 && u.ex[3].label == 0);
    unpaired_free(&u);
    // text pairs are unpaired: chosen rows, then rejected rows; EOS appended to the completions
    p = write_file("up.jsonl", "{\"prompt\": \"A\", \"chosen\": \"b\", \"rejected\": \"c\"}\n"
                               "{\"prompt\": \"D\", \"chosen\": \"e\", \"rejected\": \"f\"}\n");
    cfg = (PrefConfig){.max_length = 64};
    EXPECT_MSG(unpaired_load(p, &cfg, &mc.codec, 2, &u, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT(u.n == 4 && u.from_pairs && u.ex[0].label && u.ex[1].label && !u.ex[2].label && !u.ex[3].label);
    EXPECT(ids_are(u.ex[1].prompt, u.ex[1].np, "D", 0) && ids_are(u.ex[1].completion, u.ex[1].nc, "e", 1));
    EXPECT(ids_are(u.ex[2].prompt, u.ex[2].np, "A", 0) && ids_are(u.ex[2].completion, u.ex[2].nc, "c", 1));
    EXPECT(u.ex[0].kl_src == 1 && u.ex[1].kl_src == 0 && u.ex[2].kl_src == 3);
    unpaired_free(&u);
    p = write_file("ul.jsonl", "{\"prompt_ids\": [1], \"completion_ids\": [10], \"label\": \"yes\"}\n");
    EXPECT(unpaired_load(p, &cfg, NULL, 0, &u, &e) == ST_EINVAL && strstr(e.msg, "ul.jsonl:1") && strstr(e.msg, "label"));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/still_pref_data_%d", (int)getpid());
    mkdir(dir, 0755);
    Err e = {0};
    if (model_codec_load(&mc, "tests/data/sft/tok", NULL, &e) != ST_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    RUN(test_text_pairs);
    RUN(test_implicit_prompt);
    RUN(test_conversational);
    RUN(test_tokenised_and_drop);
    RUN(test_unpaired);
    model_codec_free(&mc);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    TEST_MAIN_END();
}
