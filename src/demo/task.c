// task.c: the addition task's files (task.h).
#include "task.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/rng.h"

#include <cjson/cJSON.h>
#include <string.h>

static const char TASK_CHARS[] = "0123456789+=";

static Status write_json(const char *path, cJSON *o, Err *e) {
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    StrBuf sb = {0};
    sb_puts(&sb, text);
    sb_putc(&sb, '\n');
    free(text);
    Status st = file_write_atomic(path, sb.data, sb.len, e);
    sb_free(&sb);
    return st;
}

static cJSON *added_token(int id, const char *content) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", id);
    cJSON_AddStringToObject(t, "content", content);
    cJSON_AddFalseToObject(t, "single_word");
    cJSON_AddFalseToObject(t, "lstrip");
    cJSON_AddFalseToObject(t, "rstrip");
    cJSON_AddFalseToObject(t, "normalized");
    cJSON_AddTrueToObject(t, "special");
    return t;
}

static cJSON *byte_level(void) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddFalseToObject(b, "add_prefix_space");
    cJSON_AddFalseToObject(b, "trim_offsets");
    cJSON_AddFalseToObject(b, "use_regex");
    return b;
}

// One token per character: byte-level BPE without merges over the task's characters (which are
// their own byte-level symbols), EOS and pad as special added tokens.
static Status write_tokenizer(const char *dir, Err *e) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "version", "1.0");
    cJSON_AddNullToObject(t, "truncation");
    cJSON_AddNullToObject(t, "padding");
    cJSON *added = cJSON_AddArrayToObject(t, "added_tokens");
    cJSON_AddItemToArray(added, added_token(TASK_EOS_ID, "<|endoftext|>"));
    cJSON_AddItemToArray(added, added_token(TASK_PAD_ID, "<|pad|>"));
    cJSON_AddNullToObject(t, "normalizer");
    cJSON_AddItemToObject(t, "pre_tokenizer", byte_level());
    cJSON_AddNullToObject(t, "post_processor");
    cJSON_AddItemToObject(t, "decoder", byte_level());
    cJSON *model = cJSON_AddObjectToObject(t, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddFalseToObject(model, "fuse_unk");
    cJSON_AddFalseToObject(model, "byte_fallback");
    cJSON_AddFalseToObject(model, "ignore_merges");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; TASK_CHARS[i]; i++) {
        char s[2] = {TASK_CHARS[i], 0};
        cJSON_AddNumberToObject(vocab, s, i);
    }
    cJSON_AddArrayToObject(model, "merges");
    char *path = path_join(dir, "tokenizer.json");
    Status st = write_json(path, t, e);
    free(path);
    TRY(st);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "tokenizer_class", "PreTrainedTokenizerFast");
    cJSON_AddStringToObject(c, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(c, "pad_token", "<|pad|>");
    cJSON_AddNullToObject(c, "bos_token");
    cJSON_AddNumberToObject(c, "model_max_length", 64);
    path = path_join(dir, "tokenizer_config.json");
    st = write_json(path, c, e);
    free(path);
    return st;
}

Status task_write_model_config(const TaskModel *m, const char *path, Err *e) {
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("Qwen3ForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "qwen3");
    cJSON_AddNumberToObject(c, "vocab_size", TASK_VOCAB_SIZE);
    cJSON_AddNumberToObject(c, "hidden_size", m->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", m->ffn);
    cJSON_AddNumberToObject(c, "num_hidden_layers", m->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", m->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", m->kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", m->head_dim);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 64);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-6);
    cJSON_AddNumberToObject(c, "rope_theta", 10000.0);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddTrueToObject(c, "tie_word_embeddings");
    cJSON_AddFalseToObject(c, "attention_bias");
    cJSON_AddNumberToObject(c, "eos_token_id", TASK_EOS_ID);
    cJSON_AddNumberToObject(c, "pad_token_id", TASK_PAD_ID);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return write_json(path, c, e);
}

size_t task_model_params(const TaskModel *m) {
    size_t C = (size_t)m->hidden, QD = (size_t)m->heads * m->head_dim, KD = (size_t)m->kv_heads * m->head_dim;
    size_t layer = C * QD + 2 * C * KD + QD * C + 3 * C * (size_t)m->ffn + 2 * C + 2 * (size_t)m->head_dim;
    return (size_t)TASK_VOCAB_SIZE * C + (size_t)m->layers * layer + C;
}

size_t task_lora_params(const TaskModel *m, int r) {
    size_t C = (size_t)m->hidden, QD = (size_t)m->heads * m->head_dim, KD = (size_t)m->kv_heads * m->head_dim;
    // A (r, in) and B (out, r) of q, k, v, o, gate, up, down
    size_t layer = (C + QD) + 2 * (C + KD) + (QD + C) + 3 * (C + (size_t)m->ffn);
    return (size_t)m->layers * (size_t)r * layer;
}

typedef struct Problem {
    int a, b;
    int hinted;  // the prompt starts with the answer (TASK_HINT_TEMPLATE)
} Problem;

// Rows "prompt" + (completion | answer) for problems p[0..n).
static Status write_rows(const char *path, const Problem *p, int n, const char *answer_key, Err *e) {
    StrBuf sb = {0};
    for (int i = 0; i < n; i++) {
        sb_puts(&sb, "{\"prompt\": \"");
        if (p[i].hinted) sb_printf(&sb, "%d=", p[i].a + p[i].b);
        sb_printf(&sb, "%d+%d=\", \"%s\": \"%d\"}\n", p[i].a, p[i].b, answer_key, p[i].a + p[i].b);
    }
    Status st = file_write_atomic(path, sb.data, sb.len, e);
    sb_free(&sb);
    return st;
}

static void shuffle(Problem *p, int n, Rng *r) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(r, (uint64_t)i + 1);
        Problem t = p[i];
        p[i] = p[j], p[j] = t;
    }
}

Status task_write(const TaskConfig *c, const char *dir, TaskFiles *out, Err *e) {
    memset(out, 0, sizeof *out);
    if (c->digits < 1 || c->digits > 4) return err_set(e, ST_EINVAL, "task: %d digits (expected 1 to 4)", c->digits);
    int range = 1;
    for (int i = 0; i < c->digits; i++) range *= 10;
    int n = range * range;
    if (c->n_test < 1 || c->n_test >= n)
        return err_set(e, ST_EINVAL, "task: %d test problems out of %d", c->n_test, n);
    TRY(dir_create(dir, e));
    out->tokenizer_dir = path_join(dir, "tokenizer");
    out->train = path_join(dir, "train.jsonl");
    out->prompts = path_join(dir, "prompts.jsonl");
    out->test = path_join(dir, "test.jsonl");
    out->train_hinted = path_join(dir, "train_hinted.jsonl");
    out->test_hinted = path_join(dir, "test_hinted.jsonl");
    out->n_test = c->n_test;
    out->n_train = n - c->n_test;
    Problem *p = xmalloc((size_t)n * sizeof(Problem));
    for (int i = 0; i < n; i++) p[i] = (Problem){i / range, i % range, 0};
    Rng r;
    rng_init(&r, c->seed, 0x7461736bu);  // "task"
    shuffle(p, n, &r);
    // test first, then the training pool in a second order for the prompt file
    Status st = dir_create(out->tokenizer_dir, e);
    if (st == ST_OK) st = write_tokenizer(out->tokenizer_dir, e);
    if (st == ST_OK) st = write_rows(out->test, p, c->n_test, "answer", e);
    if (st == ST_OK) st = write_rows(out->train, p + c->n_test, out->n_train, "completion", e);
    shuffle(p + c->n_test, out->n_train, &r);
    if (st == ST_OK) st = write_rows(out->prompts, p + c->n_test, out->n_train, "answer", e);
    // the student's SFT rows: the training pool as it is and hinted, in a third order
    Problem *h = xmalloc(2 * (size_t)out->n_train * sizeof(Problem));
    for (int i = 0; i < out->n_train; i++) {
        h[2 * i] = p[c->n_test + i];
        h[2 * i + 1] = (Problem){p[c->n_test + i].a, p[c->n_test + i].b, 1};
    }
    shuffle(h, 2 * out->n_train, &r);
    if (st == ST_OK) st = write_rows(out->train_hinted, h, 2 * out->n_train, "completion", e);
    free(h);
    for (int i = 0; i < c->n_test; i++) p[i].hinted = 1;
    if (st == ST_OK) st = write_rows(out->test_hinted, p, c->n_test, "answer", e);
    free(p);
    return st;
}

void task_files_free(TaskFiles *f) {
    free(f->tokenizer_dir), free(f->train), free(f->prompts), free(f->test);
    free(f->train_hinted), free(f->test_hinted);
    memset(f, 0, sizeof *f);
}
