// test_safetensors.c: write -> read round trips, byte-identical output, sharded reads, alignment.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "model/safetensors.h"

#include <stdint.h>
#include <unistd.h>

static char tmpdir[256];

static char *tmp(const char *name) { return path_join(tmpdir, name); }

static void fill(float *f, int n, float s) {
    for (int i = 0; i < n; i++) f[i] = s * (float)(i + 1) - 0.5f * (float)i * (float)i;
}

static void write_file(const char *path, const void *data, size_t n) {
    Err e = {0};
    CHECK(file_write_atomic(path, data, n, &e) == ST_OK);
}

// Three tensors of mixed dtypes, given out of name order.
static float wa[6], wc[5];
static uint16_t wb[3], wd[7];
static StWriteTensor sample[4];

static void make_sample(void) {
    fill(wa, 6, 1.5f);
    fill(wc, 5, -0.25f);
    for (int i = 0; i < 3; i++) wb[i] = f32_to_bf16((float)i * 3.25f);
    for (int i = 0; i < 7; i++) wd[i] = f32_to_f16((float)i * -0.5f);
    sample[0] = (StWriteTensor){"model.layers.0.w", DT_F32, 2, {2, 3}, wa};
    sample[1] = (StWriteTensor){"b.odd_bf16", DT_BF16, 1, {3}, wb};
    sample[2] = (StWriteTensor){"a.vec", DT_F32, 1, {5}, wc};
    sample[3] = (StWriteTensor){"c.half", DT_F16, 2, {7, 1}, wd};
}

static void test_round_trip(void) {
    make_sample();
    char *p = tmp("rt.safetensors"), *q = tmp("rt2.safetensors");
    const char *meta[] = {"producer", "still"};
    Err e = {0};
    EXPECT_MSG(st_write(p, sample, 4, meta, 1, &e) == ST_OK, "%s", e.msg);
    StSet s;
    EXPECT_MSG(st_open(p, &s, &e) == ST_OK, "%s", e.msg);
    EXPECT(s.n_tensors == 4 && s.n_files == 1);
    EXPECT(!strcmp(s.tensors[0].name, "a.vec") && !strcmp(s.tensors[3].name, "model.layers.0.w"));
    for (int i = 0; i < 4; i++) {
        const StTensor *t = st_find(&s, sample[i].name);
        EXPECT(t != NULL);
        if (!t) continue;
        EXPECT(t->dtype == sample[i].dtype && t->ndim == sample[i].ndim);
        EXPECT(!memcmp(t->shape, sample[i].shape, (size_t)t->ndim * sizeof(int64_t)));
        EXPECT(t->nbytes == t->numel * dtype_size(t->dtype));
        EXPECT(!memcmp(t->data, sample[i].data, t->nbytes));
        EXPECT((uintptr_t)t->data % dtype_size(t->dtype) == 0);
    }
    EXPECT(st_find(&s, "missing") == NULL);
    // Header: 8-byte length, padded with spaces to a multiple of 8, metadata first.
    const unsigned char *raw = s.files[0].data;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
    EXPECT(hl % 8 == 0);
    EXPECT(!memcmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"still\"},\"a.vec\":", 58));
    // Contiguous data: the file ends where the last tensor ends.
    EXPECT(s.files[0].size == 8 + hl + sizeof wa + sizeof wb + sizeof wc + sizeof wd);
    st_close(&s);
    // Same tensors in another order -> the same bytes.
    StWriteTensor rev[4] = {sample[3], sample[2], sample[1], sample[0]};
    EXPECT_MSG(st_write(q, rev, 4, meta, 1, &e) == ST_OK, "%s", e.msg);
    char *b1, *b2;
    size_t n1, n2;
    EXPECT(file_read_all(p, &b1, &n1, &e) == ST_OK && file_read_all(q, &b2, &n2, &e) == ST_OK);
    EXPECT(n1 == n2 && !memcmp(b1, b2, n1));
    // Read -> write again -> identical bytes.
    StSet s2;
    EXPECT(st_open(q, &s2, &e) == ST_OK);
    StWriteTensor back[4];
    for (int i = 0; i < s2.n_tensors; i++) {
        const StTensor *t = &s2.tensors[i];
        back[i] = (StWriteTensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(back[i].shape, t->shape, sizeof t->shape);
    }
    EXPECT(st_write(q, back, s2.n_tensors, meta, 1, &e) == ST_OK);
    st_close(&s2);
    free(b2);
    EXPECT(file_read_all(q, &b2, &n2, &e) == ST_OK);
    EXPECT(n1 == n2 && !memcmp(b1, b2, n1));
    free(b1);
    free(b2);
    EXPECT(!file_exists(q) || access(q, R_OK) == 0);
    free(p);
    free(q);
}

static void test_empty_and_scalar(void) {
    float x = 3.0f;
    StWriteTensor t[2] = {{"scalar", DT_F32, 0, {0}, &x}, {"empty", DT_BF16, 2, {0, 4}, NULL}};
    char *p = tmp("scalar.safetensors");
    Err e = {0};
    EXPECT_MSG(st_write(p, t, 2, NULL, 0, &e) == ST_OK, "%s", e.msg);
    StSet s;
    EXPECT_MSG(st_open(p, &s, &e) == ST_OK, "%s", e.msg);
    const StTensor *a = st_find(&s, "scalar"), *b = st_find(&s, "empty");
    EXPECT(a && a->ndim == 0 && a->numel == 1 && *(const float *)a->data == 3.0f);
    EXPECT(b && b->numel == 0 && b->nbytes == 0);
    st_close(&s);
    free(p);
}

static void test_write_errors(void) {
    float x[2] = {1, 2};
    StWriteTensor t[2] = {{"x", DT_F32, 1, {2}, x}, {"x", DT_F32, 1, {2}, x}};
    char *p = tmp("dup.safetensors");
    Err e = {0};
    EXPECT(st_write(p, t, 2, NULL, 0, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "tensor \"x\" given twice");
    EXPECT(!file_exists(p));
    free(p);
}

static void test_sharded(void) {
    make_sample();
    char *dir = tmp("sharded");
    Err e = {0};
    EXPECT(dir_create(dir, &e) == ST_OK);
    char *s1 = path_join(dir, "model-00001-of-00002.safetensors");
    char *s2 = path_join(dir, "model-00002-of-00002.safetensors");
    EXPECT(st_write(s1, sample, 2, NULL, 0, &e) == ST_OK);
    EXPECT(st_write(s2, sample + 2, 2, NULL, 0, &e) == ST_OK);
    char *idx = path_join(dir, "model.safetensors.index.json");
    const char *json = "{\"metadata\":{\"total_size\":70},\"weight_map\":{"
                       "\"model.layers.0.w\":\"model-00001-of-00002.safetensors\","
                       "\"b.odd_bf16\":\"model-00001-of-00002.safetensors\","
                       "\"a.vec\":\"model-00002-of-00002.safetensors\","
                       "\"c.half\":\"model-00002-of-00002.safetensors\"}}";
    write_file(idx, json, strlen(json));
    StSet s;
    EXPECT_MSG(st_open(dir, &s, &e) == ST_OK, "%s", e.msg);  // the directory
    EXPECT(s.n_files == 2 && s.n_tensors == 4);
    for (int i = 0; i < 4; i++) {
        const StTensor *t = st_find(&s, sample[i].name);
        EXPECT(t && !memcmp(t->data, sample[i].data, t->nbytes));
        EXPECT(t && t->file_index == (i < 2 ? 0 : 1));
    }
    st_close(&s);
    EXPECT_MSG(st_open(idx, &s, &e) == ST_OK, "%s", e.msg);  // the index file itself
    EXPECT(s.n_tensors == 4);
    st_close(&s);
    // model.safetensors in the directory wins, as in transformers.
    char *single = path_join(dir, "model.safetensors");
    EXPECT(st_write(single, sample, 1, NULL, 0, &e) == ST_OK);
    EXPECT(st_open(dir, &s, &e) == ST_OK && s.n_tensors == 1);
    st_close(&s);
    free(single);
    free(dir);
    free(s1);
    free(s2);
    free(idx);
}

// A file from a writer that did not pad its header: data at an odd offset still reads aligned.
static void test_misaligned(void) {
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";  // 55 bytes
    size_t hl = strlen(hdr);
    unsigned char buf[128];
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    float v[2] = {1.25f, -7.0f};
    memcpy(buf + 8 + hl, v, 8);
    char *p = tmp("odd.safetensors");
    write_file(p, buf, 8 + hl + 8);
    StSet s;
    Err e = {0};
    EXPECT_MSG(st_open(p, &s, &e) == ST_OK, "%s", e.msg);
    const StTensor *t = st_find(&s, "w");
    EXPECT(t && (uintptr_t)t->data % 4 == 0 && !memcmp(t->data, v, 8));
    st_close(&s);
    free(p);
}

static void test_not_found(void) {
    StSet s;
    Err e = {0};
    EXPECT(st_open(tmpdir, &s, &e) == ST_ENOTFOUND);
    EXPECT_STR_CONTAINS(e.msg, "no model.safetensors or model.safetensors.index.json");
    char *p = tmp("nope.safetensors");
    EXPECT(st_open(p, &s, &e) == ST_ENOTFOUND);
    EXPECT_STR_CONTAINS(e.msg, "nope.safetensors");
    free(p);
}

// The sample of scripts/check_safetensors_load.py, written by st_write, must equal the file that
// script lays out the way the safetensors crate does (tests/data/st/reference.safetensors).
static void test_matches_reference(void) {
    static const struct {
        const char *name;
        DType dt;
        int ndim;
        int64_t shape[2];
    } spec[] = {
        {"model.embed_tokens.weight", DT_BF16, 2, {4, 3}}, {"model.norm.weight", DT_F32, 1, {3}},
        {"lm_head.weight", DT_F16, 2, {4, 3}},             {"model.layers.0.self_attn.q_proj.bias", DT_F32, 1, {5}},
        {"z.scalar", DT_F32, 0, {0}},                      {"b.odd", DT_BF16, 1, {3}},
        {"a.empty", DT_F16, 2, {0, 2}},
    };
    enum { NS = sizeof spec / sizeof spec[0] };
    StWriteTensor t[NS];
    void *bufs[NS];
    for (int k = 0; k < NS; k++) {
        size_t numel = 1;
        for (int d = 0; d < spec[k].ndim; d++) numel *= (size_t)spec[k].shape[d];
        float *f = xmalloc((numel ? numel : 1) * sizeof *f);
        for (size_t i = 0; i < numel; i++) f[i] = (float)((int)((37 * i + 11 * (size_t)k) % 101) - 50) / 8.0f;
        bufs[k] = xmalloc((numel ? numel : 1) * 4);
        dtype_convert(bufs[k], spec[k].dt, f, DT_F32, numel);
        free(f);
        t[k] = (StWriteTensor){spec[k].name, spec[k].dt, spec[k].ndim, {spec[k].shape[0], spec[k].shape[1]}, bufs[k]};
    }
    char *p = tmp("sample.safetensors");
    Err e = {0};
    EXPECT_MSG(st_write(p, t, NS, NULL, 0, &e) == ST_OK, "%s", e.msg);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    EXPECT_MSG(file_read_all("tests/data/st/reference.safetensors", &a, &na, &e) == ST_OK, "%s", e.msg);
    EXPECT(file_read_all(p, &b, &nb, &e) == ST_OK);
    EXPECT_MSG(a && b && na == nb && !memcmp(a, b, na), "st_write output differs from the reference (%zu vs %zu bytes)",
               nb, na);
    // STILL_ST_SAMPLE_OUT=path keeps a copy for scripts/check_safetensors_load.py check.
    const char *keep = getenv("STILL_ST_SAMPLE_OUT");
    if (keep && b) EXPECT(file_write_atomic(keep, b, nb, &e) == ST_OK);
    free(a);
    free(b);
    for (int k = 0; k < NS; k++) free(bufs[k]);
    free(p);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/still_test_st_%d", (int)getpid());
    Err e = {0};
    CHECK(dir_create(tmpdir, &e) == ST_OK);
    RUN(test_round_trip);
    RUN(test_empty_and_scalar);
    RUN(test_write_errors);
    RUN(test_sharded);
    RUN(test_misaligned);
    RUN(test_not_found);
    RUN(test_matches_reference);
    dir_remove_tree(tmpdir, &e);
    TEST_MAIN_END();
}
