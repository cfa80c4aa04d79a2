// test_demo_task.c: the demo's task files: still's tokenizer loader reads the tokenizer the demo
// writes (one id per character, EOS and pad special, decode inverts encode); every problem is in
// exactly one of the training pool and the test set, with the right sums; the files repeat for a
// seed and change with it; the model configs load and have the parameter count the demo prints;
// the data loaders read the rows as SFT prompt-completion and as prompts with an answer column; the
// student's SFT rows hold every training problem once as it is and once hinted, and the teacher
// template of self-distillation, filled from a prompts.jsonl row, is the hinted prompt.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "demo/task.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "train/codec.h"
#include "train/rollout.h"

#include <unistd.h>

static char tmpdir[] = "/tmp/still_demo_task_XXXXXX";

static char *read_text(const char *path) {
    char *t = NULL;
    size_t n;
    Err e = {0};
    return file_read_all(path, &t, &n, &e) == ST_OK ? t : NULL;
}

static TaskFiles write_task(const char *name, uint64_t seed) {
    char *dir = path_join(tmpdir, name);
    TaskConfig c = {.digits = 2, .n_test = 200, .seed = seed};
    TaskFiles f;
    Err e = {0};
    EXPECT_MSG(task_write(&c, dir, &f, &e) == ST_OK, "%s", e.msg);
    free(dir);
    return f;
}

static void test_tokenizer(void) {
    TaskFiles f = write_task("tok", 1);
    Tokenizer *tok = NULL;
    Err e = {0};
    EXPECT_MSG(tokenizer_load(f.tokenizer_dir, &tok, &e) == ST_OK, "%s", e.msg);
    if (tok) {
        TokenIds ids = {0};
        EXPECT(tokenizer_encode(tok, "12+345=0", 8, 1, &ids, &e) == ST_OK);
        int32_t want[] = {1, 2, 10, 3, 4, 5, 11, 0};
        EXPECT(ids.n == 8 && !memcmp(ids.ids, want, sizeof want));
        EXPECT(tokenizer_eos_id(tok) == TASK_EOS_ID && tokenizer_pad_id(tok) == TASK_PAD_ID);
        EXPECT(tokenizer_is_special(tok, TASK_EOS_ID) && tokenizer_is_special(tok, TASK_PAD_ID));
        EXPECT(tokenizer_vocab_size(tok) == TASK_N_TOKENS && TASK_N_TOKENS <= TASK_VOCAB_SIZE);
        int32_t back[] = {9, 8, 10, 7, 11, 1, 6, TASK_EOS_ID, TASK_PAD_ID};
        char *text = tokenizer_decode(tok, back, 9, 1);
        EXPECT_STR_CONTAINS(text, "98+7=16");
        EXPECT(text && strlen(text) == 7);
        free(text);
        tokenizer_ids_free(&ids);
    }
    tokenizer_free(tok);
    task_files_free(&f);
}

// Parse "a+b=" and the answer of every row of a file into seen[a*100+b] (+= mark), checking sums.
static int scan_rows(const char *path, const char *key, int *seen, int mark) {
    char *text = read_text(path);
    int n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int a, b, c;
        char fmt[96];
        snprintf(fmt, sizeof fmt, "{\"prompt\": \"%%d+%%d=\", \"%s\": \"%%d\"}", key);
        if (sscanf(line, fmt, &a, &b, &c) != 3 || a < 0 || a > 99 || b < 0 || b > 99 || c != a + b) {
            n = -1;
            break;
        }
        seen[a * 100 + b] += mark;
        n++;
    }
    free(text);
    return n;
}

static void test_split(void) {
    TaskFiles f = write_task("split", 1);
    int *seen = xcalloc(10000, sizeof(int)), *pool = xcalloc(10000, sizeof(int));
    EXPECT(scan_rows(f.test, "answer", seen, 1) == 200);
    EXPECT(scan_rows(f.train, "completion", seen, 1000) == 9800);
    EXPECT(scan_rows(f.prompts, "answer", pool, 1) == 9800);
    int bad = 0;
    for (int i = 0; i < 10000; i++) {
        if (seen[i] != 1 && seen[i] != 1000) bad++;         // exactly once, in one of the two
        if (pool[i] != (seen[i] == 1000)) bad++;             // prompts = the training pool
    }
    EXPECT_MSG(bad == 0, "%d problems misplaced", bad);
    free(seen), free(pool);
    task_files_free(&f);
}

// Hinted rows "c=a+b=" (c the sum) into seen[a*100+b] += mark, plain ones as scan_rows; -1 on a bad row.
static int scan_mixed(const char *path, const char *key, int *plain, int *hinted) {
    char *text = read_text(path);
    int n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int a, b, c, h;
        char fmt[96];
        snprintf(fmt, sizeof fmt, "{\"prompt\": \"%%d=%%d+%%d=\", \"%s\": \"%%d\"}", key);
        if (sscanf(line, fmt, &h, &a, &b, &c) == 4) {
            if (a < 0 || a > 99 || b < 0 || b > 99 || c != a + b || h != c) return free(text), -1;
            hinted[a * 100 + b]++;
        } else {
            snprintf(fmt, sizeof fmt, "{\"prompt\": \"%%d+%%d=\", \"%s\": \"%%d\"}", key);
            if (sscanf(line, fmt, &a, &b, &c) != 3 || a < 0 || a > 99 || b < 0 || b > 99 || c != a + b)
                return free(text), -1;
            plain[a * 100 + b]++;
        }
        n++;
    }
    free(text);
    return n;
}

static void test_hinted(void) {
    TaskFiles f = write_task("hint", 5);
    int *train = xcalloc(10000, sizeof(int)), *test = xcalloc(10000, sizeof(int));
    int *plain = xcalloc(10000, sizeof(int)), *hinted = xcalloc(10000, sizeof(int));
    EXPECT(scan_rows(f.train, "completion", train, 1) == 9800);
    EXPECT(scan_rows(f.test, "answer", test, 1) == 200);
    EXPECT(scan_mixed(f.train_hinted, "completion", plain, hinted) == 2 * 9800);
    int bad = 0;
    for (int i = 0; i < 10000; i++) bad += plain[i] != train[i] || hinted[i] != train[i];
    EXPECT_MSG(bad == 0, "%d training problems not once plain and once hinted", bad);
    memset(plain, 0, 10000 * sizeof(int)), memset(hinted, 0, 10000 * sizeof(int));
    EXPECT(scan_mixed(f.test_hinted, "answer", plain, hinted) == 200);
    bad = 0;
    for (int i = 0; i < 10000; i++) bad += plain[i] != 0 || hinted[i] != test[i];
    EXPECT_MSG(bad == 0, "%d held-out problems not hinted once", bad);
    // the plain and hinted rows are mixed, not in two blocks
    char *text = read_text(f.train_hinted);
    int first_half_hinted = 0, n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line && n < 9800; line = strtok(NULL, "\n"), n++) {
        int h, a, b;
        first_half_hinted += sscanf(line, "{\"prompt\": \"%d=%d+%d=", &h, &a, &b) == 3;
    }
    free(text);
    EXPECT_MSG(first_half_hinted > 4000 && first_half_hinted < 5800, "%d hinted rows in the first half",
               first_half_hinted);
    // the self-distillation teacher's prompt, rendered from a prompts.jsonl row, is the hinted prompt
    char *dir = path_join(tmpdir, "hint/tokenizer");
    ModelCodec mc = {0};
    Err e = {0};
    EXPECT_MSG(model_codec_load(&mc, dir, NULL, &e) == ST_OK, "%s", e.msg);
    PromptConfig pc = {.vocab_size = TASK_VOCAB_SIZE};
    PromptSet ps = {0};
    EXPECT_MSG(prompts_load(f.prompts, &pc, &mc.codec, &ps, &e) == ST_OK, "%s", e.msg);
    if (ps.n > 0) {
        PromptRow tp;
        EXPECT_MSG(prompts_render_template(&ps, 0, TASK_HINT_TEMPLATE, &pc, &mc.codec, &tp, &e) == ST_OK, "%s", e.msg);
        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(ps.rows[0].row, "answer");
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(ps.rows[0].row, "prompt");
        char want[64];
        snprintf(want, sizeof want, "%s=%s", cJSON_IsString(ans) ? ans->valuestring : "?",
                 cJSON_IsString(prompt) ? prompt->valuestring : "?");
        EXPECT_MSG(tp.text && !strcmp(tp.text, want), "teacher prompt '%s', expected '%s'", tp.text ? tp.text : "",
                   want);
        EXPECT(tp.n == (int)strlen(want));
        prompt_row_free(&tp);
    }
    prompts_free(&ps);
    model_codec_free(&mc);
    free(dir);
    free(train), free(test), free(plain), free(hinted);
    task_files_free(&f);
}

static void test_seeded(void) {
    TaskFiles a = write_task("seed_a", 7), b = write_task("seed_b", 7), c = write_task("seed_c", 8);
    char *ta = read_text(a.test), *tb = read_text(b.test), *tc = read_text(c.test);
    char *pa = read_text(a.prompts), *pb = read_text(b.prompts);
    EXPECT(ta && tb && tc && !strcmp(ta, tb) && strcmp(ta, tc));
    EXPECT(pa && pb && !strcmp(pa, pb));
    free(ta), free(tb), free(tc), free(pa), free(pb);
    task_files_free(&a), task_files_free(&b), task_files_free(&c);
    TaskConfig bad = {.digits = 2, .n_test = 10000, .seed = 1};
    TaskFiles f;
    Err e = {0};
    char *dir = path_join(tmpdir, "bad");
    EXPECT(task_write(&bad, dir, &f, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "10000 test problems");
    free(dir);
}

static void test_model_config(void) {
    TaskModel shapes[] = {{.hidden = 96, .layers = 2, .heads = 6, .kv_heads = 2, .head_dim = 16, .ffn = 288},
                          {.hidden = 32, .layers = 1, .heads = 2, .kv_heads = 1, .head_dim = 8, .ffn = 40}};
    Backend *be = NULL;
    Err e = {0};
    EXPECT(backend_create("cpu", 1, &be, &e) == ST_OK);
    for (size_t i = 0; i < ARRAY_LEN(shapes) && be; i++) {
        char *path = path_join(tmpdir, "config.json");
        EXPECT_MSG(task_write_model_config(&shapes[i], path, &e) == ST_OK, "%s", e.msg);
        ModelConfig cfg;
        EXPECT_MSG(config_load(path, &cfg, &e) == ST_OK, "%s", e.msg);
        Model *m = NULL;
        EXPECT_MSG(model_create_random(&cfg, be, 1, &m, &e) == ST_OK, "%s", e.msg);
        if (m) {
            EXPECT_MSG(m->tt.n_params == task_model_params(&shapes[i]), "%zu parameters, task_model_params %zu",
                       m->tt.n_params, task_model_params(&shapes[i]));
            EXPECT(m->cfg.vocab_size == TASK_VOCAB_SIZE && m->cfg.tie_word_embeddings);
            EXPECT(m->cfg.n_eos_token_ids == 1 && m->cfg.eos_token_ids[0] == TASK_EOS_ID);
            model_free(m);
        } else {
            config_free(&cfg);
        }
        free(path);
    }
    if (be) backend_destroy(be);
}

// The rows read as the trainers read them: prompt-completion for SFT (loss on the completion and
// EOS only), prompts with their answer column for distillation, GRPO and eval.
static void test_loaders(void) {
    TaskFiles f = write_task("load", 3);
    char *dir = path_join(tmpdir, "load/tokenizer");
    ModelCodec mc = {0};
    Err e = {0};
    EXPECT_MSG(model_codec_load(&mc, dir, NULL, &e) == ST_OK, "%s", e.msg);
    DataConfig dc = {.text_field = "text", .max_length = 1024, .completion_only_loss = -1, .truncate = 1,
                     .vocab_size = TASK_VOCAB_SIZE};
    Dataset d = {0};
    EXPECT_MSG(data_load(f.train, &dc, &mc.codec, &d, &e) == ST_OK, "%s", e.msg);
    EXPECT(d.n == 9800 && d.format == FMT_PROMPT_COMPLETION);
    int bad = 0;
    for (int i = 0; i < d.n; i++) {
        const Example *x = &d.ex[i];
        int eq = -1, labels = 0;
        for (int t = 0; t < x->n; t++) {
            if (x->ids[t] == 11 && eq < 0) eq = t;
            labels += x->mask[t];
            if (x->mask[t] != (eq >= 0 && t > eq)) bad++;  // labels: everything after '='
        }
        if (x->ids[x->n - 1] != TASK_EOS_ID || labels < 2 || labels > 4) bad++;
    }
    EXPECT_MSG(bad == 0, "%d wrong masks / endings", bad);
    data_free(&d);
    PromptConfig pc = {.vocab_size = TASK_VOCAB_SIZE};
    PromptSet ps = {0};
    EXPECT_MSG(prompts_load(f.test, &pc, &mc.codec, &ps, &e) == ST_OK, "%s", e.msg);
    EXPECT(ps.n == 200);
    if (ps.n > 0) {
        const cJSON *ans = cJSON_GetObjectItemCaseSensitive(ps.rows[0].row, "answer");
        EXPECT(cJSON_IsString(ans) && ps.rows[0].ids[ps.rows[0].n - 1] == 11);
    }
    prompts_free(&ps);
    model_codec_free(&mc);
    free(dir);
    task_files_free(&f);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(test_tokenizer);
    RUN(test_split);
    RUN(test_hinted);
    RUN(test_seeded);
    RUN(test_model_config);
    RUN(test_loaders);
    Err e = {0};
    dir_remove_tree(tmpdir, &e);
    TEST_MAIN_END();
}
