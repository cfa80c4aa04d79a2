// test_load_frozen.c: model_load_frozen runs the checkpoint's weights in place.
//  - an f32 checkpoint stored f32 on cpu: every tensor points into the file's mapping (no
//    parameter buffer at all), and logits equal those of a copying model_load;
//  - the same checkpoint stored bf16: the matrices are converted copies, only the f32 norms mapped;
//  - a bf16 checkpoint stored bf16: the matrices are used in place, norms copied as f32 (bf16
//    weights are resident once), logits equal model_load's;
//  - on a backend whose memory is not host memory nothing is mapped (the flag decides).
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "model/qwen3.h"
#include "model/safetensors.h"

#include <unistd.h>

static const char *DIR_F32 = "tests/data/models/qwen3_untied";

// Logits (n, V) of ids 3.. through the score path.
static float *logits(Model *m, int n) {
    Err e = {0};
    Plan *p;
    EXPECT(plan_get(m, PLAN_SCORE, 1, n, &p, &e) == ST_OK);
    int32_t ids[64], pos[64], seg[64];
    for (int t = 0; t < n; t++) ids[t] = 3 + (7 * t) % (m->cfg.vocab_size - 3), pos[t] = t, seg[t] = 1;
    qwen3_set_inputs(m, p, ids, pos, seg, NULL, NULL);
    qwen3_forward(m, p);
    size_t bytes = (size_t)n * m->cfg.vocab_size * sizeof(float);
    float *dev = m->be->alloc(m->be, bytes), *out = xmalloc(bytes);
    qwen3_logits(m, p, 0, n, dev);
    m->be->download(m->be, out, dev, bytes);
    m->be->free(m->be, dev);
    return out;
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
    double worst = 0, scale = 1e-3;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / scale);
    return worst;
}

// Is p inside one of the checkpoint's mapped files?
static int in_mapping(const Model *m, const void *p) {
    if (!m->mapping) return 0;
    for (int f = 0; f < m->mapping->n_files; f++) {
        const char *b = (const char *)m->mapping->files[f].data;
        if ((const char *)p >= b && (const char *)p < b + m->mapping->files[f].size) return 1;
    }
    return 0;
}

// Load dir both ways with storage dtype dt and compare; returns the frozen model's mapped bytes.
static size_t compare(const char *dir, DType dt, int *n_mapped) {
    Err e = {0};
    Backend *be;
    EXPECT_MSG(backend_create("cpu", 2, &be, &e) == ST_OK, "%s", e.msg);
    Model *a = NULL, *b = NULL;
    EXPECT_MSG(model_load(dir, be, dt, &a, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(model_load_frozen(dir, be, dt, &b, &e) == ST_OK, "%s", e.msg);
    size_t mapped = 0;
    *n_mapped = 0;
    if (a && b) {
        EXPECT(b->frozen && !a->frozen && !a->mapping);
        for (int i = 0; i < b->tt.n; i++) {
            int in = in_mapping(b, b->data[i]);
            *n_mapped += in;
            if (in) mapped += b->tt.t[i].numel * dtype_size(b->tt.t[i].dtype);
        }
        EXPECT_MSG(mapped == b->mapped_bytes, "%zu bytes point into the mapping, mapped_bytes says %zu", mapped,
                   b->mapped_bytes);
        int n = 9;
        float *la = logits(a, n), *lb = logits(b, n);
        double d = max_rel_diff(lb, la, (size_t)n * a->cfg.vocab_size);
        EXPECT_MSG(d < 1e-6, "%s as %s: frozen logits differ from model_load's by %.3g", dir, dtype_torch_name(dt), d);
        free(la), free(lb);
    }
    model_free(a);
    model_free(b);
    backend_destroy(be);
    return mapped;
}

static void test_f32_in_place(void) {
    int n;
    size_t mapped = compare(DIR_F32, DT_F32, &n);
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT(model_load_frozen(DIR_F32, be, DT_F32, &m, &e) == ST_OK);
    if (m) {
        EXPECT_MSG(n == m->tt.n && mapped == m->tt.n_params * 4, "%d of %d tensors mapped (%zu bytes)", n, m->tt.n,
                   mapped);
        EXPECT_MSG(m->params == NULL, "a fully mapped model still allocated a parameter buffer");
    }
    model_free(m);
    backend_destroy(be);
}

static void test_converted_copies(void) {
    int n;
    size_t mapped = compare(DIR_F32, DT_BF16, &n);
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("ref", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT(model_load(DIR_F32, be, DT_BF16, &m, &e) == ST_OK);
    int vectors = 0;
    size_t vector_bytes = 0;
    for (int i = 0; m && i < m->tt.n; i++)
        if (!m->tt.t[i].is_matrix) vectors++, vector_bytes += m->tt.t[i].numel * 4;
    EXPECT_MSG(n == vectors && mapped == vector_bytes, "f32 checkpoint as bf16: %d tensors mapped, expected the %d norms",
               n, vectors);
    model_free(m);
    backend_destroy(be);
}

// A bf16 copy of the checkpoint (model_save), loaded as bf16: matrices mapped, norms copied.
static void test_bf16_in_place(void) {
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load(DIR_F32, be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    char dir[] = "/tmp/still_frozen_XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    EXPECT_MSG(model_save(m, dir, DT_BF16, &e) == ST_OK, "%s", e.msg);
    size_t matrix_bytes = 0;
    int matrices = 0;
    for (int i = 0; i < m->tt.n; i++)
        if (m->tt.t[i].is_matrix) matrix_bytes += m->tt.t[i].numel * 2, matrices++;
    model_free(m);
    backend_destroy(be);
    int n;
    size_t mapped = compare(dir, DT_BF16, &n);
    EXPECT_MSG(n == matrices && mapped == matrix_bytes, "bf16 checkpoint: %d tensors (%zu bytes) mapped, expected %d (%zu)",
               n, mapped, matrices, matrix_bytes);
    char *p = path_join(dir, "model.safetensors");
    unlink(p);
    free(p);
    p = path_join(dir, "config.json");
    unlink(p);
    free(p);
    rmdir(dir);
}

// Gradients need a trainable model: model_load_frozen's models refuse them (the CHECK aborts),
// so trainers load with model_load; here only the flag is checked.
static void test_frozen_flag(void) {
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("ref", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT(model_load_frozen(DIR_F32, be, DT_F32, &m, &e) == ST_OK);
    EXPECT(m && m->frozen && m->grads == NULL && m->mapped_bytes == m->tt.n_params * 4);
    model_free(m);
    be->host_memory = 0;  // as on a device backend: everything is copied
    EXPECT(model_load_frozen(DIR_F32, be, DT_F32, &m, &e) == ST_OK);
    EXPECT(m && m->mapped_bytes == 0 && m->mapping == NULL && m->params != NULL);
    model_free(m);
    backend_destroy(be);
}

int main(void) {
    RUN(test_f32_in_place);
    RUN(test_converted_copies);
    RUN(test_bf16_in_place);
    RUN(test_frozen_flag);
    TEST_MAIN_END();
}
