// test_template_vars.c: a dataset's "tools" column and per-row "chat_template_kwargs" reach the
// chat template as TRL's SFTTrainer._prepare_dataset passes them (trl/trainer/sft_trainer.py,
// tokenize_fn: tools = example.get("tools"), json.loads when a string; **example.get(
// "chat_template_kwargs", {}) over the call's arguments), in SFT rows (data_load) and in the
// prompt rows of GRPO / RLOO / distillation (prompts_load). Before, both rendered with tools None
// and only the global --chat_template_kwargs.
#include "test.h"

#include "core/alloc.h"
#include "train/codec.h"
#include "train/rollout.h"

#include <unistd.h>

static char dir[] = "/tmp/still-tvars-XXXXXX";
static ModelCodec mc;

static const char *TEMPLATE =
    "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}{% endif %}"
    "{% if flag %}FLAG={{ flag }}\\n{% endif %}{% if other %}OTHER\\n{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}\\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

static const char *write_file(const char *name, const char *text) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

// The byte-level tokenizer maps bytes to ids 0-255: the text back from an example's ids.
static char *text_of(const int32_t *ids, int n) {
    char *s = xmalloc((size_t)n + 1);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] < 256) s[k++] = (char)ids[i];
    s[k] = 0;
    return s;
}

#define TOOL "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}"

static void test_sft_rows(void) {
    const char *p = write_file(
        "sft.jsonl",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], "
        "\"tools\": [" TOOL "], \"chat_template_kwargs\": {\"flag\": \"row\"}}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}], "
        "\"tools\": \"[{\\\"type\\\": \\\"function\\\", \\\"function\\\": {\\\"name\\\": \\\"lookup\\\"}}]\"}\n");
    char sft_path[600];
    snprintf(sft_path, sizeof sft_path, "%s", p);
    p = sft_path;
    // prompt/completion rows are another format: their own file
    const char *q = write_file(
        "pc.jsonl", "{\"prompt\": [{\"role\": \"user\", \"content\": \"q\"}], \"completion\": [{\"role\": \"assistant\", "
                    "\"content\": \"r\"}], \"tools\": [" TOOL "], \"chat_template_kwargs\": {\"flag\": 7}}\n");
    cJSON *global = cJSON_Parse("{\"flag\": \"global\", \"other\": true}");
    DataConfig c = {.text_field = "text", .max_length = 512, .truncate = 1, .completion_only_loss = -1,
                    .chat_template_kwargs = global};
    Dataset d;
    Err e = {0};
    EXPECT_MSG(data_load(p, &c, &mc.codec, &d, &e) == ST_OK, "%s", e.msg);
    if (!test_current_failed) {
        char *t0 = text_of(d.ex[0].ids, d.ex[0].n), *t1 = text_of(d.ex[1].ids, d.ex[1].n);
        EXPECT_STR_CONTAINS(t0, "TOOLS:get_weather;FLAG=row\nOTHER\n<user>hi\n");  // the row's flag wins
        EXPECT_STR_CONTAINS(t1, "TOOLS:lookup;FLAG=global\nOTHER\n<user>a\n");     // a JSON string of tools
        free(t0), free(t1);
        data_free(&d);
    }
    c.chat_template_kwargs = NULL;
    EXPECT_MSG(data_load(q, &c, &mc.codec, &d, &e) == ST_OK, "%s", e.msg);
    if (!test_current_failed) {
        char *t = text_of(d.ex[0].ids, d.ex[0].n);
        EXPECT_STR_CONTAINS(t, "TOOLS:get_weather;FLAG=7\n<user>q\n<assistant>r\n");
        EXPECT(!strstr(t, "OTHER"));
        // the prompt (rendered with the same tools) is masked: the first label is after "<assistant>"
        int first = 0;
        while (first < d.ex[0].n && !d.ex[0].mask[first]) first++;
        char *head = text_of(d.ex[0].ids, first);
        EXPECT_STR_CONTAINS(head, "TOOLS:get_weather;");
        free(head);
        free(t);
        data_free(&d);
    }
    const char *bad = write_file("bad.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": \"not json\"}\n");
    EXPECT(data_load(bad, &c, &mc.codec, &d, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "bad.jsonl:1");
    EXPECT_STR_CONTAINS(e.msg, "\"tools\" is a string but not a JSON list");
    bad = write_file("bad2.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": 3}\n");
    EXPECT(data_load(bad, &c, &mc.codec, &d, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "\"chat_template_kwargs\" must be an object");
    cJSON_Delete(global);
}

// GRPO / RLOO / distillation prompts: message-list prompts and conversational rows.
static void test_prompt_rows(void) {
    const char *p = write_file(
        "prompts.jsonl",
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"w?\"}], \"tools\": [" TOOL "], "
        "\"chat_template_kwargs\": {\"flag\": 1}}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"m\"}, {\"role\": \"assistant\", \"content\": \"n\"}], "
        "\"tools\": [" TOOL "]}\n"
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"plain\"}]}\n");
    PromptConfig pc = {0};
    PromptSet ps;
    Err e = {0};
    EXPECT_MSG(prompts_load(p, &pc, &mc.codec, &ps, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT(ps.n == 3);
    EXPECT_STR_CONTAINS(ps.rows[0].text, "TOOLS:get_weather;FLAG=1\n<user>w?\n<assistant>");
    EXPECT_STR_CONTAINS(ps.rows[1].text, "TOOLS:get_weather;<user>m\n<assistant>");
    char *comp = text_of(ps.rows[1].completion, ps.rows[1].n_completion);
    EXPECT(!strcmp(comp, "n\n"));  // the completion: what the whole conversation adds
    free(comp);
    EXPECT(!strstr(ps.rows[2].text, "TOOLS") && !strstr(ps.rows[2].text, "FLAG"));
    char *t0 = text_of(ps.rows[0].ids, ps.rows[0].n);
    EXPECT(!strcmp(t0, ps.rows[0].text));  // the ids are the rendered text's
    free(t0);
    prompts_free(&ps);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp tests/data/sft/tok/tokenizer.json %s/", dir);
    if (system(cmd) != 0) return 1;
    char *cfg = xmalloc(strlen(TEMPLATE) + 256);
    sprintf(cfg, "{\"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\", \"chat_template\": \"%s\"}", TEMPLATE);
    write_file("tokenizer_config.json", cfg);
    free(cfg);
    Err e = {0};
    if (model_codec_load(&mc, dir, NULL, &e) != ST_OK) {
        printf("FAIL template_vars: %s\n", e.msg);
        return 1;
    }
    RUN(test_sft_rows);
    RUN(test_prompt_rows);
    model_codec_free(&mc);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    TEST_MAIN_END();
}
