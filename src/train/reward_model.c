// reward_model.c: batched scoring through a sequence classifier.
#include "reward_model.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../model/qwen3.h"
#include "codec.h"
#include "rewards.h"

#include <math.h>
#include <string.h>

Status reward_model_score(Model *m, const int32_t *const *ids, const int *lens, int n, int B, int pad_to_multiple_of,
                          int pad_token_id, float *out, Err *e) {
    int NL = m->cfg.num_labels;
    if (NL <= 0) return err_set(e, ST_EINVAL, "%s is not a sequence classifier", m->dir ? m->dir : "the model");
    if (B <= 0) return err_set(e, ST_EINVAL, "scoring batch size %d: must be positive", B);
    int longest = 1;
    for (int i = 0; i < n; i++) {
        if (lens[i] <= 0) return err_set(e, ST_EINVAL, "sequence %d is empty: nothing to score", i);
        longest = MAX(longest, lens[i]);
    }
    size_t cap = (size_t)B * round_up(longest, pad_to_multiple_of);
    int32_t *hid = xmalloc(cap * sizeof(int32_t)), *hpos = xmalloc(cap * sizeof(int32_t));
    int32_t *hseg = xmalloc(cap * sizeof(int32_t)), *rows = xmalloc((size_t)B * sizeof(int32_t));
    int *blen = xmalloc((size_t)B * sizeof(int));
    float *sc = xmalloc((size_t)B * NL * sizeof(float));
    Status st = ST_OK;
    for (int i0 = 0; i0 < n && st == ST_OK; i0 += B) {
        int nb = MIN(B, n - i0), T = 1;
        for (int b = 0; b < nb; b++) T = MAX(T, lens[i0 + b]);
        T = round_up(T, pad_to_multiple_of);
        for (int b = 0; b < B; b++) {  // rows past the end of the data: all padding
            int len = b < nb ? lens[i0 + b] : 0;
            blen[b] = len;
            for (int t = 0; t < T; t++) {
                size_t o = (size_t)b * T + t;
                hid[o] = t < len ? ids[i0 + b][t] : 0;
                hpos[o] = t < len ? t : 0;
                hseg[o] = t < len;
            }
        }
        Plan *p;
        st = plan_get(m, PLAN_SCORE, B, T, &p, e);
        if (st != ST_OK) break;
        qwen3_set_inputs(m, p, hid, hpos, hseg, NULL, NULL);
        qwen3_forward(m, p);
        qwen3_cls_pool(hid, blen, B, T, pad_token_id, rows);
        qwen3_cls_scores(m, p, rows, sc);
        memcpy(out + (size_t)i0 * NL, sc, (size_t)nb * NL * sizeof(float));
    }
    free(hid), free(hpos), free(hseg), free(rows), free(blen), free(sc);
    return st;
}

struct RewardModel {
    Model *m;
    ModelCodec codec;
    int32_t pad_id;  // what GRPOTrainer sets config.pad_token_id to: the tokenizer's pad, else EOS
};

Status reward_model_check(const char *dir, Err *e) {
    char *cp = path_join(dir, "config.json"), *tj = path_join(dir, "tokenizer.json");
    ModelConfig cfg;
    Status st = config_load(cp, &cfg, e);
    if (st == ST_OK && cfg.num_labels != 1)
        st = cfg.num_labels == 0
                 ? err_set(e, ST_EINVAL, "reward model:%s: a causal LM, not a reward model (a sequence classifier); make "
                                         "one with still init --model %s --num_labels 1, train it with still reward",
                           dir, dir)
                 : err_set(e, ST_EINVAL, "reward model:%s has %d labels; a reward model has 1", dir, cfg.num_labels);
    if (st == ST_OK && !file_exists(tj))
        st = err_set(e, ST_ENOTFOUND, "reward model:%s has no tokenizer.json (its inputs are text)", dir);
    config_free(&cfg);
    free(cp);
    free(tj);
    return st;
}

Status reward_model_open(const char *dir, Backend *be, int dtype, RewardModel **out, Err *e) {
    *out = NULL;
    TRY(reward_model_check(dir, e));
    RewardModel *rm = xcalloc(1, sizeof *rm);
    Status st = model_codec_load(&rm->codec, dir, NULL, e);
    ModelLoadOpts lo = {.frozen = 1, .classifier = 1, .num_labels = 1};
    if (st == ST_OK) st = model_load_opts(dir, be, dtype, &lo, &rm->m, e);
    if (st != ST_OK) {
        reward_model_close(rm);
        return st;
    }
    rm->pad_id = model_codec_pad_id(&rm->codec);
    *out = rm;
    return ST_OK;
}

void reward_model_close(RewardModel *rm) {
    if (!rm) return;
    model_free(rm->m);
    if (rm->codec.tok) model_codec_free(&rm->codec);
    free(rm);
}

// The text TRL feeds the reward model for one completion.
static Status input_text(RewardModel *rm, const RewardInput *in, const cJSON *kwargs, char **text, Err *e) {
    const cJSON *p = in->row ? cJSON_GetObjectItemCaseSensitive(in->row, "prompt") : NULL;
    const char *comp = in->completion ? in->completion : "";
    if (p && cJSON_IsArray(p)) {
        if (!rm->codec.codec.render) return err_set(e, ST_EINVAL, "the reward model has no chat template for "
                                                                  "conversational prompts");
        cJSON *msgs;
        TRY(data_messages(p, "prompt", &msgs, e));
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "role", "assistant");
        cJSON_AddStringToObject(a, "content", comp);
        cJSON_AddItemToArray(msgs, a);
        Status st = rm->codec.codec.render(rm->codec.codec.ctx, msgs, NULL, 0, kwargs, text, NULL, NULL, e);
        cJSON_Delete(msgs);
        return st;
    }
    const char *prompt = p && cJSON_IsString(p) ? p->valuestring : in->prompt ? in->prompt : "";
    size_t a = strlen(prompt), b = strlen(comp);
    *text = xmalloc(a + b + 1);
    memcpy(*text, prompt, a);
    memcpy(*text + a, comp, b + 1);
    return ST_OK;
}

Status reward_model_rewards(RewardModel *rm, const RewardInput *in, int n, const cJSON *chat_template_kwargs, int B,
                            int pad_to_multiple_of, double *out, int stride, Err *e) {
    I32Vec *seqs = xcalloc((size_t)MAX(n, 1), sizeof(I32Vec));
    const int32_t **ids = xcalloc((size_t)MAX(n, 1), sizeof(int32_t *));
    int *lens = xcalloc((size_t)MAX(n, 1), sizeof(int)), *idx = xcalloc((size_t)MAX(n, 1), sizeof(int)), k = 0;
    Status st = ST_OK;
    for (int i = 0; i < n && st == ST_OK; i++) {
        char *text = NULL;
        st = input_text(rm, &in[i], chat_template_kwargs, &text, e);
        if (st == ST_OK) st = rm->codec.codec.encode(rm->codec.codec.ctx, text, strlen(text), 0, &seqs[i], e);
        free(text);
        out[(size_t)i * stride] = NAN;
        if (st == ST_OK && seqs[i].n > 0) ids[k] = seqs[i].v, lens[k] = (int)seqs[i].n, idx[k++] = i;
    }
    float *sc = xmalloc((size_t)MAX(k, 1) * sizeof(float));
    if (st == ST_OK && k > 0) st = reward_model_score(rm->m, ids, lens, k, B, pad_to_multiple_of, rm->pad_id, sc, e);
    for (int j = 0; st == ST_OK && j < k; j++) out[(size_t)idx[j] * stride] = sc[j];
    for (int i = 0; i < n; i++) i32vec_free(&seqs[i]);
    free(seqs), free(ids), free(lens), free(idx), free(sc);
    return st;
}
