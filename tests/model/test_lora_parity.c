// test_lora_parity.c: LoRA adapters in PEFT's format against scripts/ref_lora.py (PEFT's
// semantics in float64 PyTorch): the adapted model's logits and loss, every adapter gradient
// (cosine >= 0.99999 and norm-wise relative error <= 1e-4 per tensor), the merged model's logits,
// one `still sft --use_peft` step (loss, grad norm, the AdamW update of every adapter tensor), and
// adapters saved here loading back to the same tensors.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/json.h"
#include "model/lora.h"
#include "model/qwen3.h"
#include "model/safetensors.h"

#include <unistd.h>

// the moe_* cases: adapters on every expert and the router (scripts/ref_lora_moe.py), gradients of
// ce + router_aux_loss_coef * the load-balancing loss
static const char *cases[][2] = {{"rand_untied", "qwen3_untied"}, {"rand_tied", "qwen3_tied"}, {"rand_llama", "llama"},
                                 {"moe_qwen3", "qwen3_moe"},      {"moe_mixtral", "mixtral"}};
static const char *backends[] = {"ref", "cpu"};

static const char *bin(void) { return getenv("STILL_BIN") ? getenv("STILL_BIN") : "./still"; }

static double rel_norm_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

static double cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / fmax(sqrt(aa * bb), 1e-300);
}

// Forward (and backward when grads) of the fixture's id sequence; logits (T, V) into out.
static double run_ids(Model *m, const StSet *exp, int backward, float *logits, int *T_out) {
    Backend *be = m->be;
    Err e = {0};
    const StTensor *ids_t = st_find(exp, "ids");
    int T = (int)ids_t->numel, V = m->cfg.vocab_size;
    int32_t ids[64], pos[64], seg[64], tgt[64];
    for (int t = 0; t < T; t++) {
        ids[t] = (int32_t)((const float *)ids_t->data)[t];
        pos[t] = t, seg[t] = 1;
    }
    for (int t = 0; t < T; t++) tgt[t] = t + 1 < T ? ids[t + 1] : IGNORE_INDEX;
    Plan *p;
    EXPECT(plan_get(m, backward ? PLAN_TRAIN : PLAN_SCORE, 1, T, &p, &e) == ST_OK);
    qwen3_set_inputs(m, p, ids, pos, seg, tgt, NULL);
    qwen3_forward(m, p);
    float *dev = be->alloc(be, (size_t)T * V * sizeof(float));
    qwen3_logits(m, p, 0, T, dev);
    be->download(be, logits, dev, (size_t)T * V * sizeof(float));
    be->free(be, dev);
    qwen3_ce_loss(m, p, 1.0f / (float)(T - 1), backward);
    float rows[64];
    be->download(be, rows, p->row_loss, (size_t)T * sizeof(float));
    double loss = 0;
    for (int t = 0; t < T - 1; t++) loss += rows[t];
    *T_out = T;
    return loss / (T - 1);
}

static void check_case(const char *name, const char *model, const char *bename) {
    char mdir[256], adir[256], path[300];
    snprintf(mdir, sizeof mdir, "tests/data/models/%s", model);
    snprintf(adir, sizeof adir, "tests/data/lora/%s", name);
    snprintf(path, sizeof path, "%s/expected.safetensors", adir);
    Err e = {0};
    Backend *be;
    EXPECT(backend_create(bename, 2, &be, &e) == ST_OK);
    Model *m = NULL;
    StSet exp;
    EXPECT_MSG(model_load(mdir, be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(st_open(path, &exp, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT_MSG(lora_load(m, adir, &e) == ST_OK, "%s: %s", name, e.msg);
    if (test_current_failed) return;
    model_alloc_grads(m);
    m->moe_aux_scale = 1.0;  // one backward pass: the load-balancing gradient at full weight
    int V = m->cfg.vocab_size, T;
    const StTensor *el = st_find(&exp, "logits");
    float *logits = xmalloc(el->numel * sizeof(float));
    double loss = run_ids(m, &exp, 1, logits, &T);
    double err = rel_norm_err(logits, el->data, (size_t)T * V);
    EXPECT_MSG(err <= 1e-5, "%s/%s adapter logits rel err %.3g", name, bename, err);
    double want = ((const float *)st_find(&exp, "loss")->data)[0];
    EXPECT_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "%s/%s loss %.9g vs %.9g", name, bename, loss, want);
    // every adapter gradient (the base is frozen: it has no gradient buffer at all)
    EXPECT(m->grads == NULL);
    Trainable tr = model_trainable(m);
    float *g = xmalloc(tr.tt->n_params * sizeof(float));
    be->download(be, g, tr.grads, tr.tt->n_params * sizeof(float));
    int checked = 0;
    for (int i = 0; i < tr.tt->n; i++) {
        const TensorInfo *t = &tr.tt->t[i];
        char gname[200];
        snprintf(gname, sizeof gname, "grad.%s", t->name);
        const StTensor *x = st_find(&exp, gname);
        EXPECT_MSG(x && x->numel == t->numel, "%s: fixture lacks %s", name, gname);
        if (!x) continue;
        double cs = cosine(g + t->goffset, x->data, t->numel), re = rel_norm_err(g + t->goffset, x->data, t->numel);
        int zero = 1;  // an expert no token was routed to: a zero gradient, here too
        for (size_t k = 0; k < t->numel; k++) zero &= ((const float *)x->data)[k] == 0.0f && g[t->goffset + k] == 0.0f;
        EXPECT_MSG((cs >= 0.99999 || zero) && re <= 1e-4, "%s/%s %s: cosine %.9f rel err %.3g", name, bename, t->name, cs, re);
        checked++;
    }
    EXPECT_MSG(checked == exp.n_tensors - 3, "%s: %d adapter gradients checked, fixture has %d", name, checked,
               exp.n_tensors - 3);
    free(g);
    // adapter off: the base model's logits (tests/data/models/<model>/expected.safetensors)
    m->lora->enabled = 0;
    StSet base;
    snprintf(path, sizeof path, "%s/expected.safetensors", mdir);
    EXPECT_MSG(st_open(path, &base, &e) == ST_OK, "%s", e.msg);
    if (!test_current_failed) {
        run_ids(m, &base, 0, logits, &T);
        err = rel_norm_err(logits, st_find(&base, "logits")->data, (size_t)T * V);
        EXPECT_MSG(err <= 1e-5, "%s/%s adapter off: base logits rel err %.3g", name, bename, err);
        st_close(&base);
    }
    m->lora->enabled = 1;
    // merged: a plain model with the adapter's logits (PEFT's merge_and_unload)
    {
        Status st = lora_merge(m, &e);
        EXPECT_MSG(st == ST_OK, "%s: merge: %s", name, e.msg);
        EXPECT(m->lora == NULL);
        run_ids(m, &exp, 0, logits, &T);
        err = rel_norm_err(logits, el->data, (size_t)T * V);
        EXPECT_MSG(err <= 1e-5, "%s/%s merged logits rel err %.3g", name, bename, err);
    }
    free(logits);
    st_close(&exp);
    model_free(m);
    backend_destroy(be);
}

static void test_adapters(void) {
    for (size_t b = 0; b < ARRAY_LEN(backends); b++)
        for (size_t c = 0; c < ARRAY_LEN(cases); c++) check_case(cases[c][0], cases[c][1], backends[b]);
}

// lora_save writes what lora_load reads: the same tensors, bit for bit, and PEFT's config fields
// (n_targets names in target_modules, n_save in modules_to_save; 0: null).
static void roundtrip(const char *name, const char *model, int r, double alpha, int n_targets, int n_save) {
    char adir[200], mdir[200], src[300];
    snprintf(adir, sizeof adir, "tests/data/lora/%s", name);
    snprintf(mdir, sizeof mdir, "tests/data/models/%s", model);
    snprintf(src, sizeof src, "%s/adapter_model.safetensors", adir);
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 2, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load(mdir, be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(lora_load(m, adir, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    char dir[] = "/tmp/still-lora-save-XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    EXPECT_MSG(lora_save(m, dir, mdir, &e) == ST_OK, "%s", e.msg);
    StSet a, b;
    char path[300];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    EXPECT_MSG(st_open(path, &a, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(st_open(src, &b, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    EXPECT(a.n_tensors == b.n_tensors);
    for (int i = 0; i < b.n_tensors; i++) {
        const StTensor *x = st_find(&a, b.tensors[i].name);
        EXPECT_MSG(x && x->nbytes == b.tensors[i].nbytes && !memcmp(x->data, b.tensors[i].data, x->nbytes),
                   "saved %s differs", b.tensors[i].name);
    }
    st_close(&a), st_close(&b);
    cJSON *j;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    EXPECT_MSG(json_parse_file(path, &j, &e) == ST_OK, "%s", e.msg);
    if (!test_current_failed) {
        EXPECT(!strcmp(cJSON_GetObjectItem(j, "peft_type")->valuestring, "LORA"));
        EXPECT(!strcmp(cJSON_GetObjectItem(j, "task_type")->valuestring, "CAUSAL_LM"));
        EXPECT(cJSON_GetObjectItem(j, "r")->valueint == r);
        EXPECT(cJSON_GetObjectItem(j, "lora_alpha")->valuedouble == alpha);
        EXPECT_MSG(cJSON_GetArraySize(cJSON_GetObjectItem(j, "target_modules")) == n_targets, "%s: %d target modules",
                   name, cJSON_GetArraySize(cJSON_GetObjectItem(j, "target_modules")));
        if (n_save) EXPECT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "modules_to_save")) == n_save);
        else EXPECT(cJSON_IsNull(cJSON_GetObjectItem(j, "modules_to_save")));
        EXPECT(!strcmp(cJSON_GetObjectItem(j, "bias")->valuestring, "none"));
        cJSON_Delete(j);
    }
    model_free(m);
    backend_destroy(be);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0);
}

static void test_save_roundtrip(void) {
    roundtrip("rand_untied", "qwen3_untied", 4, 8.0, 7, 2);
    // every expert's pairs and the router's: all-linear written as its 8 names (gate_proj once)
    roundtrip("moe_qwen3", "qwen3_moe", 4, 8.0, 8, 0);
    roundtrip("moe_mixtral", "mixtral", 2, 3.0, 5, 0);
}

static double metric(const char *out_dir, const char *key, int step) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    char *text;
    size_t len;
    Err e = {0};
    if (file_read_all(path, &text, &len, &e) != ST_OK) return NAN;
    double v = NAN;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItem(o, "step"), *x = cJSON_GetObjectItem(o, key);
        if (cJSON_IsNumber(s) && s->valueint == step && cJSON_IsNumber(x)) v = x->valuedouble;
        cJSON_Delete(o);
    }
    free(text);
    return v;
}

// One LoRA SFT step continuing the rand_tied adapter (pad_ga batches: B 4, GA 2, completion only).
// AdamW's epsilon is 1 in the reference, so the update is nearly linear in the gradient
// (lr * m / (sqrt(v) + 1)) and compares well-conditioned quantities, not a first step's sign(g).
static void sft_step(const char *extra, const char *what) {
    char tmpl[] = "/tmp/still-lora-sft-XXXXXX";
    EXPECT(mkdtemp(tmpl) != NULL);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s sft --model tests/data/models/qwen3_tied --dataset tests/data/sft/ids.jsonl --output_dir %s/out "
             "--use_peft --adapter tests/data/lora/rand_tied --lora_dropout 0 --max_steps 1 --shuffle false "
             "--logging_steps 1 --save_strategy no --threads 2 --learning_rate 1e-2 --weight_decay 0.1 "
             "--adam_epsilon 1 --max_grad_norm 1 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 "
             "--max_length 64 --pad_to_multiple_of 8 --completion_only_loss true %s 2>%s/log >/dev/null",
             bin(), tmpl, extra, tmpl);
    int rc = system(cmd);
    EXPECT_MSG(rc == 0, "%s: still sft --use_peft failed (rc %d)", what, rc);
    Err e = {0};
    StSet exp, got, init;
    char path[600];
    snprintf(path, sizeof path, "%s/out/adapter_model.safetensors", tmpl);
    EXPECT_MSG(st_open("tests/data/lora/sft_step/expected.safetensors", &exp, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(rc == 0 && st_open(path, &got, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(st_open("tests/data/lora/rand_tied/adapter_model.safetensors", &init, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    snprintf(path, sizeof path, "%s/out", tmpl);
    double loss = metric(path, "loss", 1), want = ((const float *)st_find(&exp, "loss")->data)[0];
    EXPECT_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "%s: loss %.9g vs torch %.9g", what, loss, want);
    double gn = metric(path, "grad_norm", 1), wgn = ((const float *)st_find(&exp, "grad_norm")->data)[0];
    EXPECT_MSG(fabs(gn - wgn) <= 1e-4 * fabs(wgn), "%s: grad_norm %.9g vs torch %.9g", what, gn, wgn);
    EXPECT(got.n_tensors == init.n_tensors);
    int checked = 0;
    for (int i = 0; i < got.n_tensors; i++) {
        const StTensor *g = &got.tensors[i], *p0 = st_find(&init, g->name);
        char pname[200];
        snprintf(pname, sizeof pname, "param.%s", g->name);
        const StTensor *w = st_find(&exp, pname);
        EXPECT_MSG(w && p0 && g->dtype == DT_F32 && w->numel == g->numel, "%s: tensor %s", what, g->name);
        if (!w || !p0) continue;
        float *da = xmalloc(g->numel * sizeof(float)), *db = xmalloc(g->numel * sizeof(float));
        const float *a = g->data, *b = w->data, *z = p0->data;
        for (size_t k = 0; k < g->numel; k++) da[k] = a[k] - z[k], db[k] = b[k] - z[k];
        double cs = cosine(da, db, g->numel), re = rel_norm_err(da, db, g->numel);
        EXPECT_MSG(cs >= 0.99999 && re <= 1e-4, "%s: update of %s: cosine %.9f rel err %.3g", what, g->name, cs, re);
        free(da), free(db);
        checked++;
    }
    EXPECT(checked == exp.n_tensors - 2);
    st_close(&exp), st_close(&got), st_close(&init);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    EXPECT(system(cmd) == 0);
}

static void test_sft_step(void) { sft_step("--gradient_checkpointing false", "sft step"); }
static void test_sft_step_checkpointed(void) { sft_step("--gradient_checkpointing true", "sft step (checkpointing)"); }

// Bad adapters are refused with the file and what was expected.
static void test_bad_adapter(void) {
    Err e = {0};
    Backend *be;
    EXPECT(backend_create("cpu", 1, &be, &e) == ST_OK);
    Model *m = NULL;
    EXPECT_MSG(model_load("tests/data/models/qwen3_tied", be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    // a missing directory, a config whose r disagrees with the tensors, DoRA
    EXPECT(lora_load(m, "tests/data/lora/nonexistent", &e) != ST_OK);
    EXPECT_STR_CONTAINS(e.msg, "adapter_config.json");
    char dir[] = "/tmp/still-lora-bad-XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cp tests/data/lora/rand_tied/adapter_model.safetensors %s/ && sed 's/\"r\": 8/\"r\": 4/' "
                              "tests/data/lora/rand_tied/adapter_config.json > %s/adapter_config.json", dir, dir);
    EXPECT(system(cmd) == 0);
    e.msg[0] = 0;
    EXPECT(lora_load(m, dir, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "expected [4, 48]");
    EXPECT(m->lora == NULL);
    snprintf(cmd, sizeof cmd, "sed 's/\"use_dora\": false/\"use_dora\": true/' tests/data/lora/rand_tied/adapter_config.json "
                              "> %s/adapter_config.json", dir);
    EXPECT(system(cmd) == 0);
    EXPECT(lora_load(m, dir, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "use_dora");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT(system(cmd) == 0);
    model_free(m);
    backend_destroy(be);
}

int main(void) {
    RUN(test_adapters);
    RUN(test_save_roundtrip);
    RUN(test_bad_adapter);
    RUN(test_sft_step);
    RUN(test_sft_step_checkpointed);
    TEST_MAIN_END();
}
