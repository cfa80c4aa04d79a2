// test_sft_parity.c: `still sft` for one optimizer step against scripts/ref_sft.py (float64
// PyTorch, TRL's loss normalisation, torch.optim.AdamW): the step's loss, the grad norm, and for
// every parameter the clipped gradient and AdamW's moments (checkpoint-1/optimizer.safetensors
// against torch's optimizer state) and the update, for padding + gradient accumulation, full
// masks, bfd and wrapped packing.
//
// Tolerances (norm-wise per tensor: |got - want| / |want|) hold for any sgemm kernel, thread
// count or -march: the fp32 forward and backward differ from float64 by rounding only, ~1e-6 of
// a tensor's norm (observed up to 2.2e-6). The first AdamW step is p -= lr (g / (|g| + eps) + wd p):
// where |g| is near eps (1e-8) it turns a rounding-level difference of g into a difference of
// order lr, so the update is compared only on elements with |g| > 1e3 eps, where it moves by at
// most 1e-3 of g's relative error; what is left there is the fp32 rounding of the new weights
// (half an ulp of |p| <= ~2 against lr 1e-3: observed 2.3e-5 norm-wise). The moments,
// (1 - beta1) g and (1 - beta2) g^2, carry every element's gradient as well-conditioned as the
// gradient itself. A wrong normaliser, mask or clip coefficient moves them by far more than 1e-3.
#include "test.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/json.h"
#include "model/safetensors.h"

#include <unistd.h>

#define TOL_GRAD 5e-5    // the clipped gradient and exp_avg_sq, norm-wise per tensor
#define TOL_UPDATE 1e-4  // the update on elements with |g| > 1e3 eps

static const char *bin(void) { return getenv("STILL_BIN") ? getenv("STILL_BIN") : "./still"; }

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

// One case on tests/data/models/MODEL against the fixture `exp_path` (the case's own when NULL).
static void run_model_case(const char *model, const char *name, const char *exp_path) {
    cJSON *cases;
    Err e = {0};
    EXPECT_MSG(json_parse_file("tests/data/sft/cases.json", &cases, &e) == ST_OK, "%s", e.msg);
    const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(cases, "cases"), name);
    const cJSON *pk = cJSON_GetObjectItem(c, "packing");
    char tmpl[] = "/tmp/still-sft-parity-XXXXXX";
    EXPECT(mkdtemp(tmpl) != NULL);
    char cmd[2048], packing[96] = "";
    if (cJSON_IsString(pk)) snprintf(packing, sizeof packing, "--packing --packing_strategy %s", pk->valuestring);
    snprintf(cmd, sizeof cmd,
             "%s sft --model tests/data/models/%s --dataset tests/data/sft/ids.jsonl --output_dir %s/out "
             "--max_steps 1 --shuffle false --logging_steps 1 --save_steps 1 --threads 2 --learning_rate 1e-3 "
             "--weight_decay 0.1 --max_grad_norm 1 --per_device_train_batch_size %d --gradient_accumulation_steps %d "
             "--max_length %d --pad_to_multiple_of %d --completion_only_loss %s %s 2>%s/log >/dev/null",
             bin(), model, tmpl, cJSON_GetObjectItem(c, "B")->valueint, cJSON_GetObjectItem(c, "GA")->valueint,
             cJSON_GetObjectItem(c, "max_length")->valueint, cJSON_GetObjectItem(c, "pad")->valueint,
             cJSON_IsTrue(cJSON_GetObjectItem(c, "completion_only")) ? "true" : "false", packing, tmpl);
    int rc = system(cmd);
    EXPECT_MSG(rc == 0, "%s: still sft failed (rc %d)", name, rc);
    char path[600];
    if (exp_path) snprintf(path, sizeof path, "%s", exp_path);
    else snprintf(path, sizeof path, "tests/data/sft/%s.safetensors", name);
    StSet exp, got, init, opt;
    EXPECT_MSG(st_open(path, &exp, &e) == ST_OK, "%s", e.msg);
    snprintf(path, sizeof path, "%s/out/model.safetensors", tmpl);
    EXPECT_MSG(rc == 0 && st_open(path, &got, &e) == ST_OK, "%s", e.msg);
    snprintf(path, sizeof path, "%s/out/checkpoint-1/optimizer.safetensors", tmpl);
    EXPECT_MSG(rc == 0 && st_open(path, &opt, &e) == ST_OK, "%s", e.msg);
    snprintf(path, sizeof path, "tests/data/models/%s/model.safetensors", model);
    EXPECT_MSG(st_open(path, &init, &e) == ST_OK, "%s", e.msg);
    if (test_current_failed) return;
    snprintf(path, sizeof path, "%s/out", tmpl);
    double loss = metric(path, "loss", 1), want = ((const float *)st_find(&exp, "loss")->data)[0];
    EXPECT_MSG(fabs(loss - want) <= 1e-5 * fabs(want), "%s: loss %.9g vs torch %.9g", name, loss, want);
    double gn = metric(path, "grad_norm", 1), wgn = ((const float *)st_find(&exp, "grad_norm")->data)[0];
    EXPECT_MSG(fabs(gn - wgn) <= 1e-4 * fabs(wgn), "%s: grad_norm %.9g vs torch %.9g", name, gn, wgn);
    const double b1 = cJSON_GetObjectItem(cases, "adam_beta1")->valuedouble;
    const double eps = cJSON_GetObjectItem(cases, "adam_epsilon")->valuedouble;
    int checked = 0;
    double worst[3] = {0};  // clipped gradient, exp_avg_sq, update
    for (int i = 0; i < got.n_tensors; i++) {
        const StTensor *g = &got.tensors[i], *p0 = st_find(&init, g->name);
        char pname[200];
        snprintf(pname, sizeof pname, "param.%s", g->name);
        const StTensor *w = st_find(&exp, pname);
        const StTensor *m = NULL, *v = NULL, *wm = NULL, *wv = NULL;
        snprintf(pname, sizeof pname, "exp_avg.%s", g->name);
        m = st_find(&opt, pname), wm = st_find(&exp, pname);
        snprintf(pname, sizeof pname, "exp_avg_sq.%s", g->name);
        v = st_find(&opt, pname), wv = st_find(&exp, pname);
        EXPECT_MSG(w && p0 && m && v && wm && wv && g->dtype == DT_F32 && w->numel == g->numel &&
                       m->numel == g->numel && wm->numel == g->numel && v->numel == g->numel && wv->numel == g->numel,
                   "%s: tensor %s (parameter, moments)", name, g->name);
        if (test_current_failed) break;
        const float *a = g->data, *b = w->data, *z = p0->data;
        const float *ma = m->data, *mb = wm->data, *va = v->data, *vb = wv->data;
        // the clipped gradient g = exp_avg / (1 - beta1) and exp_avg_sq, over every element
        double gd = 0, gs = 0, vd = 0, vs = 0, ud = 0, us = 0;
        size_t n_upd = 0;
        for (size_t k = 0; k < g->numel; k++) {
            double ga = ma[k] / (1 - b1), gb = mb[k] / (1 - b1);
            gd += (ga - gb) * (ga - gb), gs += gb * gb;
            vd += ((double)va[k] - vb[k]) * ((double)va[k] - vb[k]), vs += (double)vb[k] * vb[k];
            if (fabs(gb) > 1e3 * eps) {  // the update where it is well-conditioned
                double da = (double)a[k] - z[k], db = (double)b[k] - z[k];
                ud += (da - db) * (da - db), us += db * db;
                n_upd++;
            }
        }
        double err[3] = {sqrt(gd) / fmax(sqrt(gs), 1e-30), sqrt(vd) / fmax(sqrt(vs), 1e-30),
                         sqrt(ud) / fmax(sqrt(us), 1e-30)};
        for (int j = 0; j < 3; j++) worst[j] = fmax(worst[j], err[j]);
        EXPECT_MSG(err[0] <= TOL_GRAD, "%s: clipped gradient of %s: rel err %.3g", name, g->name, err[0]);
        EXPECT_MSG(err[1] <= TOL_GRAD, "%s: exp_avg_sq of %s: rel err %.3g", name, g->name, err[1]);
        EXPECT_MSG(err[2] <= TOL_UPDATE, "%s: AdamW update of %s (%zu elements with |g| > 1e3 eps): rel err %.3g", name,
                   g->name, n_upd, err[2]);
        // the update check covers most of every tensor (it is not vacuous); an untied embedding's
        // gradient is non-zero only on the rows of the step's tokens
        int sparse = !strcmp(g->name, "model.embed_tokens.weight") && st_find(&init, "lm_head.weight");
        EXPECT_MSG(n_upd >= (sparse ? (size_t)(g->numel / 10) : g->numel / 2), "%s: %s: only %zu of %zu elements have |g| > 1e3 eps", name, g->name, n_upd,
                   g->numel);
        checked++;
    }
    if (getenv("SFT_PARITY_VERBOSE"))
        printf("  %s: worst rel err: clipped gradient %.3g, exp_avg_sq %.3g, update %.3g\n", name, worst[0], worst[1],
               worst[2]);
    EXPECT(checked == got.n_tensors && 3 * checked == exp.n_tensors - 3);
    st_close(&opt);
    st_close(&exp), st_close(&got), st_close(&init);
    cJSON_Delete(cases);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    EXPECT(system(cmd) == 0);
}

static void run_case(const char *name) { run_model_case("qwen3_tied", name, NULL); }

static void test_pad_and_accumulation(void) { run_case("pad_ga"); }
// the other families (scripts/ref_family.py: the same step through their PyTorch ports)
static void test_olmo2_pad_ga(void) { run_model_case("olmo2", "pad_ga", "tests/data/models/olmo2/sft_pad_ga.safetensors"); }
static void test_phi3_pad_ga(void) { run_model_case("phi3", "pad_ga", "tests/data/models/phi3/sft_pad_ga.safetensors"); }
// the sliding-window families (scripts/ref_sliding.py): bfd packs rows of 24, longer than their windows
static void test_mistral_bfd(void) { run_model_case("mistral", "bfd", "tests/data/models/mistral/sft_bfd.safetensors"); }
static void test_gemma2_pad_ga(void) {
    run_model_case("gemma2", "pad_ga", "tests/data/models/gemma2/sft_pad_ga.safetensors");
}
static void test_gemma3_text_bfd(void) {
    run_model_case("gemma3_text", "bfd", "tests/data/models/gemma3_text/sft_bfd.safetensors");
}
static void test_full_mask(void) { run_case("full_mask"); }
static void test_packing_bfd(void) { run_case("bfd"); }
static void test_packing_wrapped(void) { run_case("wrapped"); }

int main(void) {
    RUN(test_pad_and_accumulation);
    RUN(test_full_mask);
    RUN(test_packing_bfd);
    RUN(test_packing_wrapped);
    RUN(test_olmo2_pad_ga);
    RUN(test_phi3_pad_ga);
    RUN(test_mistral_bfd);
    RUN(test_gemma2_pad_ga);
    RUN(test_gemma3_text_bfd);
    TEST_MAIN_END();
}
