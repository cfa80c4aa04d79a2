// preflight.c: early checks of a run's inputs and outputs (see preflight.h).
#include "preflight.h"

#include "../core/fileio.h"
#include "../model/config.h"
#include "codec.h"
#include "rewards.h"

Status preflight_output_dir(const char *output_dir, Err *e) {
    if (!output_dir) return ST_OK;
    Status st = dir_check_writable(output_dir, e);
    if (st != ST_OK) err_prefix(e, "--output_dir: ");
    return st;
}

int preflight_vocab_size(const char *model_dir) {
    ModelConfig mc;
    Err e = {0};
    int v = 0;
    if (model_config_load(model_dir, &mc, &e) == ST_OK) {
        v = mc.vocab_size;
        config_free(&mc);
    }
    return v;
}

Status preflight_prompts(const char *path, const PromptConfig *cfg, const char *model_dir, Err *e) {
    if (!path) return ST_OK;
    ModelCodec mc = {0};
    TRY(model_codec_load(&mc, model_dir, NULL, e));
    PromptConfig pc = *cfg;
    if (pc.vocab_size <= 0) pc.vocab_size = preflight_vocab_size(model_dir);
    PromptSet ps = {0};
    Status st = prompts_load(path, &pc, &mc.codec, &ps, e);
    prompts_free(&ps);
    model_codec_free(&mc);
    return st;
}

Status preflight_rewards(const char *const *specs, int n, const double *weights, int n_weights, double timeout_s,
                         Err *e) {
    if (n <= 0) return ST_OK;
    RewardSet rs = {0};
    Status st = rewards_init(&rs, specs, n, weights, n_weights, timeout_s, e);
    if (st == ST_OK) rewards_free(&rs);
    return st;
}
