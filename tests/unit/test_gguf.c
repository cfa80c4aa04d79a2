// test_gguf.c: the GGUF reader.
//  - dequantization of every type (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K) equals numpy's
//    (scripts/ref_gguf.py) bit for bit, on quantized data and on blocks of random bytes, in a
//    file numpy wrote (an independent writer);
//  - written by gguf_write and read back: metadata of every kind, tensors, alignment;
//  - malformed files (every truncation, bad magic or version, unknown types, data out of range,
//    overlapping or misaligned tensors, counts and lengths past the file) are errors that say
//    what is wrong, never a crash;
//  - the tokenizer built from GGUF metadata (Qwen3 and Llama 3 vocabularies and merges written
//    into a GGUF) encodes and decodes the tokenizer corpus exactly as the tokenizer.json path.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/json.h"
#include "model/gguf.h"
#include "model/gguf_export.h"
#include "model/gguf_model.h"
#include "model/gguf_write.h"
#include "model/safetensors.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "tok_fixture.h"

#include <unistd.h>

static char tmpdir[256];

static char *tmp(const char *name) { return path_join(tmpdir, name); }

static void test_dequant_matches_numpy(void) {
    Err e = {0};
    GgufFile g;
    StSet want;
    EXPECT_MSG(gguf_open("tests/data/gguf/quant.gguf", &g, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(st_open("tests/data/gguf/quant_expected.safetensors", &want, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT(g.alignment == 64);
    static const char *names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k",
                                  "q8_0_random", "q4_0_random", "q4_k_random", "q6_k_random"};
    static const uint32_t types[] = {GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0, GGML_Q4_K, GGML_Q6_K,
                                     GGML_Q8_0, GGML_Q4_0, GGML_Q4_K, GGML_Q6_K};
    EXPECT(g.n_tensors == (int)ARRAY_LEN(names));
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        const GgufTensor *t = gguf_find_tensor(&g, names[i]);
        const StTensor *w = st_find(&want, names[i]);
        EXPECT_MSG(t && w, "%s", names[i]);
        if (!t || !w) continue;
        EXPECT_MSG(t->type == types[i] && t->ne[0] == 512 && t->ne[1] == 3 && t->numel == w->numel, "%s", names[i]);
        float *got = xmalloc(t->numel * sizeof(float));
        gguf_dequantize(t->type, t->data, got, t->numel);
        size_t bad = 0, first = 0;
        for (size_t k = 0; k < t->numel; k++)
            if (memcmp(&got[k], (const float *)w->data + k, 4) && !bad++) first = k;
        EXPECT_MSG(bad == 0, "%s: %zu of %zu values differ from numpy, first at %zu: %.9g vs %.9g", names[i], bad,
                   t->numel, first, got[first], ((const float *)w->data)[first]);
        free(got);
    }
    // still's Q8_0 quantizer (the exporter's) writes numpy's blocks from the same data.
    const GgufTensor *f = gguf_find_tensor(&g, "f32"), *q = gguf_find_tensor(&g, "q8_0");
    if (f && q) {
        uint8_t *mine = xmalloc(q->nbytes);
        gguf_quantize_q8_0(mine, (const float *)f->data, f->numel);
        EXPECT_MSG(!memcmp(mine, q->data, q->nbytes), "Q8_0 blocks differ from numpy's");
        free(mine);
    }
    gguf_close(&g);
    st_close(&want);
}

// A small file of every metadata kind and two tensors; returns its path (caller frees).
static char *write_sample(size_t alignment) {
    GgufWriter w;
    gguf_writer_init(&w, alignment);
    gguf_w_str(&w, "general.architecture", "qwen3");
    gguf_w_u32(&w, "a.u32", 4000000000u);
    gguf_w_i32(&w, "a.i32", -7);
    gguf_w_f32(&w, "a.f32", 1e-6f);
    gguf_w_bool(&w, "a.bool", 1);
    const char *strs[] = {"x", "", "héllo"};
    gguf_w_arr_str(&w, "a.strs", strs, 3);
    int32_t ints[] = {1, -2, 3};
    gguf_w_arr_i32(&w, "a.ints", ints, 3);
    static float a[64];
    static uint8_t q[2 * 34];
    for (int i = 0; i < 64; i++) a[i] = (float)i - 10.5f;
    for (int i = 0; i < 68; i++) q[i] = (uint8_t)(i * 37);
    q[0] = 0, q[1] = 0x3c, q[34] = 0, q[35] = 0xbc;  // d = 1 and -1
    int64_t ne_a[2] = {16, 4}, ne_q[1] = {64};
    gguf_w_tensor(&w, "t.a", 2, ne_a, GGML_F32, a);
    gguf_w_tensor(&w, "t.q", 1, ne_q, GGML_Q8_0, q);
    char *path = tmp("sample.gguf");
    Err e = {0};
    EXPECT_MSG(gguf_w_write(&w, path, NULL, NULL, &e) == ST_OK, "%s", e.msg);
    gguf_writer_free(&w);
    return path;
}

static void test_write_read_back(void) {
    size_t aligns[] = {32, 64, 4096};
    for (size_t ai = 0; ai < ARRAY_LEN(aligns); ai++) {
        char *path = write_sample(aligns[ai]);
        Err e = {0};
        GgufFile g;
        EXPECT(gguf_is_file(path));
        EXPECT_MSG(gguf_open(path, &g, &e) == ST_OK, "%s", e.msg);
        free(path);
        if (test_current_failed) return;
        EXPECT(g.version == 3 && g.alignment == aligns[ai] && g.data_offset % aligns[ai] == 0);
        int64_t v;
        double f;
        int b;
        char *s = NULL;
        EXPECT(gguf_get_int(&g, "a.u32", 1, &v, &e) == ST_OK && v == 4000000000LL);
        EXPECT(gguf_get_int(&g, "a.i32", 1, &v, &e) == ST_OK && v == -7);
        EXPECT(gguf_get_float(&g, "a.f32", 1, &f, &e) == ST_OK && f == 1e-6);  // the decimal it was written from
        EXPECT(gguf_get_bool(&g, "a.bool", 1, &b, &e) == ST_OK && b == 1);
        EXPECT(gguf_get_str(&g, "general.architecture", 1, &s, &e) == ST_OK && s && !strcmp(s, "qwen3"));
        free(s);
        const GgufKV *arr;
        EXPECT(gguf_get_arr(&g, "a.strs", GGUF_STRING, 1, &arr, &e) == ST_OK && arr->arr_n == 3);
        EXPECT(arr->arr_str[2].len == 6 && !memcmp(arr->arr_str[2].p, "héllo", 6) && arr->arr_str[1].len == 0);
        EXPECT(gguf_get_arr(&g, "a.ints", GGUF_I32, 1, &arr, &e) == ST_OK && gguf_arr_int(arr, 1) == -2);
        EXPECT(gguf_get_int(&g, "missing", 0, &v, &e) == ST_ENOTFOUND);
        EXPECT(gguf_get_int(&g, "missing", 1, &v, &e) == ST_EINVAL);
        EXPECT_STR_CONTAINS(e.msg, "missing metadata key \"missing\"");
        EXPECT(gguf_get_int(&g, "general.architecture", 1, &v, &e) == ST_EINVAL);
        EXPECT_STR_CONTAINS(e.msg, "is string, expected an integer");
        const GgufTensor *ta = gguf_find_tensor(&g, "t.a"), *tq = gguf_find_tensor(&g, "t.q");
        EXPECT(ta && ta->ne[0] == 16 && ta->ne[1] == 4 && ta->nbytes == 256 && ((const float *)ta->data)[63] == 52.5f);
        EXPECT(tq && tq->nbytes == 68 && (size_t)(tq->data - g.map.data) % aligns[ai] == 0);
        float out[64];
        if (tq) gguf_dequantize(tq->type, tq->data, out, 64);
        EXPECT(out[1] == (float)(int8_t)(3 * 37) && out[33] == -(float)(int8_t)(37 * 37 % 256));
        gguf_close(&g);
    }
}

// -------------------------------------------------------------------------------- malformed

static uint8_t *sample_bytes(size_t *n) {
    char *path = write_sample(32);
    char *data;
    Err e = {0};
    CHECK(file_read_all(path, &data, n, &e) == ST_OK);
    free(path);
    return (uint8_t *)data;
}

// Parse a modified copy; expect failure with status want and a message containing needle.
static void expect_bad(const uint8_t *data, size_t n, Status want, const char *needle) {
    GgufFile g;
    Err e = {0};
    Status st = gguf_parse(data, n, "bad.gguf", &g, &e);
    EXPECT_MSG(st == want, "wanted %s for \"%s\", got %s: %s", status_name(want), needle, status_name(st), e.msg);
    if (st == ST_OK) gguf_close(&g);
    else EXPECT_STR_CONTAINS(e.msg, needle);
    EXPECT_STR_CONTAINS(e.msg, "bad.gguf");
}

static size_t find(const uint8_t *d, size_t n, const char *s) {
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(d + i, s, k)) return i;
    CHECK_MSG(0, "%s not in the sample", s);
    return 0;
}

static void test_malformed(void) {
    size_t n;
    uint8_t *good = sample_bytes(&n);
    uint8_t *d = xmalloc(n);
    // Every truncation before the end of the last tensor's data fails.
    GgufFile g;
    Err e = {0};
    EXPECT(gguf_parse(good, n, "ok.gguf", &g, &e) == ST_OK);
    size_t end = g.data_offset + gguf_find_tensor(&g, "t.q")->offset + 68;
    gguf_close(&g);
    int all_fail = 1;
    for (size_t cut = 0; cut < end; cut++) {
        Status st = gguf_parse(good, cut, "cut.gguf", &g, &e);
        if (st == ST_OK) {
            gguf_close(&g);
            all_fail = 0;
            printf("  truncation at %zu of %zu parsed\n", cut, end);
        } else if (!strstr(e.msg, "cut.gguf")) {
            all_fail = 0;
        }
    }
    EXPECT(all_fail);
    memcpy(d, good, n);
    expect_bad(d, 40, ST_EINVAL, "can hold: truncated or corrupt");
    expect_bad(d, 150, ST_EINVAL, "truncated GGUF file");
    expect_bad(d, end - 1, ST_EINVAL, "lies outside the data section");
    d[0] = 'X';
    expect_bad(d, n, ST_EINVAL, "not a GGUF file");
    memcpy(d, good, n);
    d[4] = 1;
    expect_bad(d, n, ST_EUNSUPPORTED, "version 1");
    memcpy(d, good, n);
    d[4] = 0, d[7] = 3;
    expect_bad(d, n, ST_EUNSUPPORTED, "big-endian");
    // Counts past what the file holds.
    memcpy(d, good, n);
    memset(d + 8, 0xff, 8);
    expect_bad(d, n, ST_EINVAL, "can hold: truncated or corrupt");
    memcpy(d, good, n);
    memset(d + 16, 0x7f, 7);
    expect_bad(d, n, ST_EINVAL, "can hold: truncated or corrupt");
    // A huge string length (the first key's).
    memcpy(d, good, n);
    memset(d + 24, 0xff, 8);
    expect_bad(d, n, ST_EINVAL, "truncated");
    // A huge array count: the count follows "a.strs" and its element type.
    memcpy(d, good, n);
    size_t p = find(d, n, "a.strs") + 6 + 4 + 4;
    memset(d + p, 0x7f, 8);
    expect_bad(d, n, ST_EINVAL, "does not fit in the file");
    // Unknown value type.
    memcpy(d, good, n);
    p = find(d, n, "a.i32") + 5;
    d[p] = 99;
    expect_bad(d, n, ST_EINVAL, "unknown value type 99");
    // Duplicate key: rename a.i32 to a.u32.
    memcpy(d, good, n);
    memcpy(d + find(good, n, "a.i32"), "a.u32", 5);
    expect_bad(d, n, ST_EINVAL, "appears twice");
    // Tensor type: unknown, and known to ggml but not read; dims; offsets.
    size_t tq = find(good, n, "t.q") + 3;  // u32 n_dims, u64 ne0, u32 type, u64 offset
    memcpy(d, good, n);
    d[tq + 12] = 77;
    expect_bad(d, n, ST_EINVAL, "unknown ggml type 77");
    memcpy(d, good, n);
    d[tq + 12] = 13;
    expect_bad(d, n, ST_EUNSUPPORTED, "type Q5_K, which is not supported");
    memcpy(d, good, n);
    d[tq] = 5;
    expect_bad(d, n, ST_EINVAL, "has 5 dimensions");
    memcpy(d, good, n);
    d[tq + 4] = 48;  // 48 elements: not a multiple of 32
    expect_bad(d, n, ST_EINVAL, "not a multiple of the block size");
    memcpy(d, good, n);
    memset(d + tq + 4, 0xff, 8);
    expect_bad(d, n, ST_EINVAL, "dimension 0 is");
    memcpy(d, good, n);
    d[tq + 16] = 0x40;  // offset 64: past the end of the data
    d[tq + 17] = 0x10;
    expect_bad(d, n, ST_EINVAL, "lies outside the data section");
    memcpy(d, good, n);
    d[tq + 16] = 8;  // misaligned
    expect_bad(d, n, ST_EINVAL, "not a multiple of the alignment");
    memcpy(d, good, n);
    memset(d + tq + 16, 0, 8);  // on top of t.a
    expect_bad(d, n, ST_EINVAL, "overlap");
    free(d);
    free(good);
}

// A model file without what a model needs: clear errors from the config mapping.
static void test_model_metadata_errors(void) {
    static const struct { const char *drop; const char *arch; const char *needle; Status st; } cases[] = {
        {"qwen3.block_count", "qwen3", "missing metadata key \"qwen3.block_count\"", ST_EINVAL},
        {"", "mamba", "general.architecture \"mamba\" is not supported", ST_EUNSUPPORTED},
        {"qwen3.attention.layer_norm_rms_epsilon", "qwen3", "layer_norm_rms_epsilon", ST_EINVAL},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        GgufWriter w;
        gguf_writer_init(&w, 32);
        gguf_w_str(&w, "general.architecture", cases[c].arch);
        const char *keys[] = {"qwen3.block_count", "qwen3.embedding_length", "qwen3.feed_forward_length",
                              "qwen3.attention.head_count"};
        for (size_t k = 0; k < ARRAY_LEN(keys); k++)
            if (strcmp(keys[k], cases[c].drop)) gguf_w_u32(&w, keys[k], 64);
        if (strcmp(cases[c].drop, "qwen3.attention.layer_norm_rms_epsilon"))
            gguf_w_f32(&w, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
        static float emb[64 * 8];
        int64_t ne[2] = {64, 8};
        gguf_w_tensor(&w, "token_embd.weight", 2, ne, GGML_F32, emb);
        char *path = tmp("meta.gguf");
        Err e = {0};
        EXPECT(gguf_w_write(&w, path, NULL, NULL, &e) == ST_OK);
        gguf_writer_free(&w);
        ModelConfig cfg;
        StSet set;
        Status st = gguf_model_open(path, -1, &cfg, &set, &e);
        EXPECT_MSG(st == cases[c].st, "case %zu: %s", c, e.msg);
        if (st == ST_OK) config_free(&cfg), st_close(&set);
        else EXPECT_STR_CONTAINS(e.msg, cases[c].needle);
        free(path);
    }
}

// -------------------------------------------------------------------------------- tokenizer

typedef struct TokId {
    const char *s;
    int id;
} TokId;

static int tokid_cmp(const void *a, const void *b) { return strcmp(((const TokId *)a)->s, ((const TokId *)b)->s); }

// SentencePiece scores that make tokenizer.json's merges: a piece scores minus the rank of the
// first merge that makes it (the converter orders merges by the merged piece's score); pieces no
// merge makes score below every other. Control, byte and unknown pieces score 0.
static float *spm_scores(char **toks, const int32_t *types, int n, char **ms, int nm) {
    TokId *sorted = xmalloc((size_t)n * sizeof *sorted);
    for (int i = 0; i < n; i++) sorted[i] = (TokId){toks[i], i};
    qsort(sorted, (size_t)n, sizeof *sorted, tokid_cmp);
    float *scores = xmalloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) scores[i] = types[i] == 1 ? -1e7f - (float)i : 0.0f;
    for (int k = nm - 1; k >= 0; k--) {  // the first merge wins
        char *joined = xstrdup(ms[k]), *sp = strchr(joined, ' ');
        if (sp) memmove(sp, sp + 1, strlen(sp));
        TokId key = {joined, 0}, *hit = bsearch(&key, sorted, (size_t)n, sizeof *sorted, tokid_cmp);
        if (hit && types[hit->id] == 1) scores[hit->id] = -(float)k;
        free(joined);
    }
    free(sorted);
    return scores;
}

// Write tokenizer.json (+ config) of dir as llama.cpp's converter lays a byte-level BPE out (pre
// "spm": a SentencePiece BPE, tokenizer.ggml.model "llama": token types, scores, no merges).
static char *tokenizer_gguf(const char *dir, const char *name, const char *pre, int add_bos) {
    int spm = !strcmp(pre, "spm");
    char *jp = path_join(dir, "tokenizer.json"), *cp = path_join(dir, "tokenizer_config.json");
    cJSON *j = NULL, *cfg = NULL;
    Err e = {0};
    CHECK(json_parse_file(jp, &j, &e) == ST_OK && json_parse_file(cp, &cfg, &e) == ST_OK);
    const cJSON *model = cJSON_GetObjectItem(j, "model"), *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItem(model, "merges"), *added = cJSON_GetObjectItem(j, "added_tokens");
    int n = 0;
    for (const cJSON *v = vocab->child; v; v = v->next) n = MAX(n, v->valueint + 1);
    for (const cJSON *a = added->child; a; a = a->next) n = MAX(n, cJSON_GetObjectItem(a, "id")->valueint + 1);
    char **toks = xcalloc((size_t)n, sizeof *toks);
    int32_t *types = xcalloc((size_t)n, sizeof *types);
    for (const cJSON *v = vocab->child; v; v = v->next) toks[v->valueint] = xstrdup(v->string), types[v->valueint] = 1;
    for (const cJSON *a = added->child; a; a = a->next) {
        int id = cJSON_GetObjectItem(a, "id")->valueint;
        free(toks[id]);
        toks[id] = xstrdup(cJSON_GetObjectItem(a, "content")->valuestring);
        types[id] = cJSON_IsTrue(cJSON_GetObjectItem(a, "special")) ? 3 : 4;
    }
    for (int i = 0; i < n; i++)
        if (!toks[i]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%d]", i);
            toks[i] = xstrdup(b), types[i] = 5;
        }
    int nm = cJSON_GetArraySize(merges), k = 0;
    char **ms = xcalloc((size_t)nm, sizeof *ms);
    for (const cJSON *m = merges->child; m; m = m->next, k++) {
        if (cJSON_IsString(m)) {
            ms[k] = xstrdup(m->valuestring);
        } else {
            StrBuf sb = {0};
            sb_printf(&sb, "%s %s", m->child->valuestring, m->child->next->valuestring);
            ms[k] = sb_take(&sb);
        }
    }
    GgufWriter w;
    gguf_writer_init(&w, 32);
    gguf_w_str(&w, "general.architecture", spm ? "llama" : "qwen3");
    if (spm) {
        // byte pieces are type 6, the unknown piece type 2 (llama.cpp's converter)
        for (int i = 0; i < n; i++) {
            size_t L = strlen(toks[i]);
            if (types[i] == 1 && L == 6 && !strncmp(toks[i], "<0x", 3) && toks[i][5] == '>') types[i] = 6;
            if (types[i] == 3 && !strcmp(toks[i], "<unk>")) types[i] = 2;
        }
        float *scores = spm_scores(toks, types, n, ms, nm);
        gguf_w_str(&w, "tokenizer.ggml.model", "llama");
        gguf_w_arr_str(&w, "tokenizer.ggml.tokens", (const char *const *)toks, (size_t)n);
        gguf_w_arr_f32(&w, "tokenizer.ggml.scores", scores, (size_t)n);
        gguf_w_arr_i32(&w, "tokenizer.ggml.token_type", types, (size_t)n);
        gguf_w_u32(&w, "tokenizer.ggml.unknown_token_id", 0);
        free(scores);
    } else {
        gguf_w_str(&w, "tokenizer.ggml.model", "gpt2");
        gguf_w_str(&w, "tokenizer.ggml.pre", pre);
        gguf_w_arr_str(&w, "tokenizer.ggml.tokens", (const char *const *)toks, (size_t)n);
        gguf_w_arr_i32(&w, "tokenizer.ggml.token_type", types, (size_t)n);
        gguf_w_arr_str(&w, "tokenizer.ggml.merges", (const char *const *)ms, (size_t)nm);
    }
    Tokenizer *tok;
    CHECK(tokenizer_load(dir, &tok, &e) == ST_OK);
    if (tokenizer_bos_id(tok) >= 0) gguf_w_u32(&w, "tokenizer.ggml.bos_token_id", (uint32_t)tokenizer_bos_id(tok));
    if (tokenizer_eos_id(tok) >= 0) gguf_w_u32(&w, "tokenizer.ggml.eos_token_id", (uint32_t)tokenizer_eos_id(tok));
    if (tokenizer_pad_id(tok) >= 0) gguf_w_u32(&w, "tokenizer.ggml.padding_token_id", (uint32_t)tokenizer_pad_id(tok));
    gguf_w_bool(&w, "tokenizer.ggml.add_bos_token", add_bos);
    tokenizer_free(tok);
    const cJSON *ct = cJSON_GetObjectItem(cfg, "chat_template");
    if (cJSON_IsString(ct)) gguf_w_str(&w, "tokenizer.chat_template", ct->valuestring);
    char file[64];
    snprintf(file, sizeof file, "%s.gguf", name);
    char *path = tmp(file);
    CHECK(gguf_w_write(&w, path, NULL, NULL, &e) == ST_OK);
    gguf_writer_free(&w);
    for (int i = 0; i < n; i++) free(toks[i]);
    for (int i = 0; i < nm; i++) free(ms[i]);
    free(toks), free(types), free(ms), free(jp), free(cp);
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    return path;
}

static void compare_tokenizers(const char *name, const char *pre, int add_bos) {
    const char *dir = tok_fixture_dir(name);
    EXPECT(dir != NULL);
    if (!dir) return;
    char *gguf = tokenizer_gguf(dir, name, pre, add_bos);
    Err e = {0};
    Tokenizer *a = NULL, *b = NULL;
    EXPECT_MSG(tokenizer_load(dir, &a, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(tokenizer_load(gguf, &b, &e) == ST_OK, "%s", e.msg);
    if (!a || !b) goto done;
    EXPECT(tokenizer_vocab_size(a) == tokenizer_vocab_size(b));
    EXPECT(tokenizer_eos_id(a) == tokenizer_eos_id(b) && tokenizer_bos_id(a) == tokenizer_bos_id(b));
    char path[600], *text;
    size_t len;
    snprintf(path, sizeof path, "tests/data/tokenizer/%s/expected.jsonl", name);
    CHECK(file_read_all(path, &text, &len, &e) == ST_OK);
    int lines = 0, same = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItem(o, "text");
        if (!cJSON_IsString(t)) {
            cJSON_Delete(o);
            continue;
        }
        lines++;
        int ok = 1;
        for (int special = 0; special < 2; special++) {
            TokenIds x = {0}, y = {0};
            Status sa = tokenizer_encode(a, t->valuestring, strlen(t->valuestring), special, &x, &e);
            Status sb = tokenizer_encode(b, t->valuestring, strlen(t->valuestring), special, &y, &e);
            ok &= sa == sb && x.n == y.n && (!x.n || !memcmp(x.ids, y.ids, x.n * sizeof(int32_t)));
            for (int skip = 0; skip < 2 && sa == ST_OK; skip++) {
                char *da = tokenizer_decode(a, x.ids, x.n, skip), *db = tokenizer_decode(b, x.ids, x.n, skip);
                ok &= !strcmp(da, db);
                free(da), free(db);
            }
            tokenizer_ids_free(&x), tokenizer_ids_free(&y);
        }
        same += ok;
        if (!ok && same + 1 == lines) printf("  %s: differs on %s\n", name, line);
        cJSON_Delete(o);
    }
    EXPECT(lines >= 20);
    EXPECT_MSG(same == lines, "%s: %d of %d texts encode or decode differently", name, lines - same, lines);
    free(text);
    // The chat template comes from the metadata too.
    ChatTemplate *ta = NULL, *tb = NULL;
    if (chat_template_load(dir, NULL, &ta, &e) == ST_OK) {
        EXPECT_MSG(chat_template_load(gguf, NULL, &tb, &e) == ST_OK, "%s", e.msg);
        cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"Hi there\"}]");
        char *ra = NULL, *rb = NULL;
        EXPECT(chat_template_render(ta, msgs, NULL, NULL, 1, NULL, &ra, NULL, &e) == ST_OK);
        EXPECT_MSG(tb && chat_template_render(tb, msgs, NULL, NULL, 1, NULL, &rb, NULL, &e) == ST_OK, "%s", e.msg);
        EXPECT(ra && rb && !strcmp(ra, rb));
        free(ra), free(rb);
        cJSON_Delete(msgs);
        chat_template_free(ta), chat_template_free(tb);
    }
    err_clear(&e);
done:
    tokenizer_free(a);
    tokenizer_free(b);
    free(gguf);
}

static void test_tokenizer_qwen3(void) { compare_tokenizers("qwen3", "qwen2", 0); }
static void test_tokenizer_llama3(void) { compare_tokenizers("llama3", "llama-bpe", 0); }
// SentencePiece (Llama 2): merges derived from the scores give the tokenizer.json's tokens
static void test_tokenizer_llama2_spm(void) { compare_tokenizers("llama2", "spm", 1); }

static void test_tokenizer_errors(void) {
    GgufWriter w;
    gguf_writer_init(&w, 32);
    gguf_w_str(&w, "tokenizer.ggml.model", "bert");
    char *path = tmp("wpm.gguf");
    Err e = {0};
    EXPECT(gguf_w_write(&w, path, NULL, NULL, &e) == ST_OK);
    gguf_writer_free(&w);
    Tokenizer *t = NULL;
    EXPECT(tokenizer_load(path, &t, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "tokenizer.ggml.model \"bert\" is not supported");
    free(path);
    // SentencePiece without scores, or with scores of another length
    for (int k = 0; k < 2; k++) {
        gguf_writer_init(&w, 32);
        gguf_w_str(&w, "tokenizer.ggml.model", "llama");
        const char *pieces[] = {"<unk>", "\xe2\x96\x81" "a"};
        const float sc[] = {0, -1};
        gguf_w_arr_str(&w, "tokenizer.ggml.tokens", pieces, 2);
        if (k) gguf_w_arr_f32(&w, "tokenizer.ggml.scores", sc, 1);
        path = tmp("spm.gguf");
        EXPECT(gguf_w_write(&w, path, NULL, NULL, &e) == ST_OK);
        gguf_writer_free(&w);
        EXPECT(tokenizer_load(path, &t, &e) != ST_OK);
        EXPECT_STR_CONTAINS(e.msg, k ? "tokenizer.ggml.scores has 1 entries for 2 tokens" : "tokenizer.ggml.scores");
        free(path);
    }
    gguf_writer_init(&w, 32);
    gguf_w_str(&w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(&w, "tokenizer.ggml.pre", "deepseek-coder");
    const char *toks[] = {"a", "b"};
    gguf_w_arr_str(&w, "tokenizer.ggml.tokens", toks, 2);
    gguf_w_arr_str(&w, "tokenizer.ggml.merges", toks, 0);
    path = tmp("pre.gguf");
    EXPECT(gguf_w_write(&w, path, NULL, NULL, &e) == ST_OK);
    gguf_writer_free(&w);
    EXPECT(tokenizer_load(path, &t, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "tokenizer.ggml.pre \"deepseek-coder\"");
    free(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/still_test_gguf_%d", (int)getpid());
    Err e = {0};
    CHECK(dir_create(tmpdir, &e) == ST_OK);
    RUN(test_dequant_matches_numpy);
    RUN(test_write_read_back);
    RUN(test_malformed);
    RUN(test_model_metadata_errors);
    RUN(test_tokenizer_qwen3);
    RUN(test_tokenizer_llama3);
    RUN(test_tokenizer_llama2_spm);
    RUN(test_tokenizer_errors);
    dir_remove_tree(tmpdir, &e);
    TEST_MAIN_END();
}
