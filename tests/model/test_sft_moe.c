// test_sft_moe.c: `still sft` on the tiny mixtral and gpt_oss models for one optimizer step against
// scripts/ref_sft_moe.py (float64 PyTorch: TRL's loss normalisation plus router_aux_loss_coef *
// transformers' load_balancing_loss_func, the padding left out of it, torch.optim.AdamW), on the
// cpu and ref backends: the step's loss and aux_loss, the grad norm, and for every parameter (the
// router and every expert included) the clipped gradient, AdamW's moments and the update, with
// padding and two accumulated micro-batches (gpt_oss: its sinks and 3-D experts decayed, the
// experts in the checkpoint's layout in the model and optimizer files). Tolerances and their
// reasons are test_sft_parity.c's.
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

static void run_case(const char *name, const char *model, const char *device) {
    Err e = {0};
    char tmpl[] = "/tmp/still-sft-moe-XXXXXX";
    EXPECT(mkdtemp(tmpl) != NULL);
    char cmd[2048];
    // the case of scripts/ref_sft_moe.py: 4 padded rows x 2 micro-batches, completion-only labels
    snprintf(cmd, sizeof cmd,
             "%s sft --model tests/data/models/%s --dataset tests/data/sft/ids.jsonl --output_dir %s/out "
             "--max_steps 1 --shuffle false --logging_steps 1 --save_steps 1 --threads 2 --learning_rate 1e-3 "
             "--weight_decay 0.1 --max_grad_norm 1 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 "
             "--max_length 64 --pad_to_multiple_of 8 --completion_only_loss true --device %s 2>%s/log >/dev/null",
             bin(), model, tmpl, device, tmpl);
    int rc = system(cmd);
    EXPECT_MSG(rc == 0, "%s: still sft failed (rc %d)", name, rc);
    char path[600];
    snprintf(path, sizeof path, "tests/data/sft_moe/%s.safetensors", name);
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
    double aux = metric(path, "aux_loss", 1), waux = ((const float *)st_find(&exp, "aux_loss")->data)[0];
    EXPECT_MSG(fabs(aux - waux) <= 1e-5 * fabs(waux), "%s: aux_loss %.9g vs torch %.9g", name, aux, waux);
    double gn = metric(path, "grad_norm", 1), wgn = ((const float *)st_find(&exp, "grad_norm")->data)[0];
    EXPECT_MSG(fabs(gn - wgn) <= 1e-4 * fabs(wgn), "%s: grad_norm %.9g vs torch %.9g", name, gn, wgn);
    const double b1 = 0.9, eps = 1e-8;  // scripts/ref_sft.py's AdamW
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
        // the update check covers most of every tensor (it is not vacuous); the embedding (untied
        // here) has rows only for the ids of the batch
        EXPECT_MSG(n_upd >= g->numel / (strcmp(g->name, "model.embed_tokens.weight") ? 2 : 10), "%s: %s: only %zu of %zu elements have |g| > 1e3 eps", name, g->name, n_upd,
                   g->numel);
        checked++;
    }
    if (getenv("SFT_PARITY_VERBOSE"))
        printf("  %s: worst rel err: clipped gradient %.3g, exp_avg_sq %.3g, update %.3g\n", name, worst[0], worst[1],
               worst[2]);
    EXPECT(checked == got.n_tensors && 3 * checked == exp.n_tensors - 4);
    st_close(&opt);
    st_close(&exp), st_close(&got), st_close(&init);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpl);
    EXPECT(system(cmd) == 0);
}

static void test_moe_pad_and_accumulation(void) { run_case("pad_ga", "mixtral", "cpu"); }
static void test_moe_pad_and_accumulation_ref(void) { run_case("pad_ga", "mixtral", "ref"); }
static void test_gpt_oss_pad_and_accumulation(void) { run_case("gpt_oss", "gpt_oss", "cpu"); }
static void test_gpt_oss_pad_and_accumulation_ref(void) { run_case("gpt_oss", "gpt_oss", "ref"); }

int main(void) {
    RUN(test_moe_pad_and_accumulation);
    RUN(test_moe_pad_and_accumulation_ref);
    RUN(test_gpt_oss_pad_and_accumulation);
    RUN(test_gpt_oss_pad_and_accumulation_ref);
    TEST_MAIN_END();
}
