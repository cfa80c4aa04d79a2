// cmd_init.c: still init — a randomly initialised model in Hugging Face layout.
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../gen/generate.h"
#include "../train/checkpoint.h"
#include "../train/codec.h"
#include "cli_common.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model_config", ARG_STR, NULL, "config.json to initialise from (fields kept as given)"},
    {"model", ARG_STR, NULL, "a causal LM directory to make a sequence classifier of (with --num_labels): its "
                             "weights kept, lm_head dropped, a new score head"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model (--model)"},
    {"num_labels", ARG_INT, "0", "> 0: a *ForSequenceClassification model (a reward model: 1) with a score head of "
                                 "this many outputs, normal(0, initializer_range)", "[0,1048576]"},
    {"output_dir", ARG_STR, NULL, ARG_REQUIRED "directory to write the model into"},
    {"tokenizer", ARG_STR, NULL, "directory whose tokenizer files are copied into the model"},
    {NULL, 0, NULL, NULL},
};

static const char *tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json"};

// The padding id a classifier made from dir gets: its tokenizer's pad token, else EOS (TRL's
// rule, which it saves into the reward model's config); -1 without a tokenizer.
static int32_t tokenizer_pad(const char *dir) {
    ModelCodec mc;
    Err e2 = {0};
    if (!dir || model_codec_load(&mc, dir, NULL, &e2) != ST_OK) return -1;
    int32_t pad = model_codec_pad_id(&mc);
    model_codec_free(&mc);
    return pad;
}

// --model CAUSAL --num_labels N: the causal model's weights under a new score head.
static Status from_model(const Args *a, const char *out, int num_labels, Err *e) {
    char *dir;
    TRY(cli_model_dir(a, "model", &dir, e));
    Backend *be = NULL;
    Model *m = NULL;
    int forced = -1;
    Status st = cli_dtype(a, &forced, e);
    if (st == ST_OK) st = cli_backend(a, &be, e);
    ModelLoadOpts lo = {.frozen = 1, .classifier = 1, .num_labels = num_labels, .pad_token_id = tokenizer_pad(dir),
                        .seed = (uint64_t)args_int(a, "seed")};
    if (st == ST_OK) st = model_load_opts(dir, be, -1, &lo, &m, e);
    if (st == ST_OK) {
        DType save = forced >= 0 ? (DType)forced : m->ckpt_dtype;
        st = checkpoint_write_model(out, m, save, dir, e);
        if (st == ST_OK)
            log_info("wrote %s: %s from %s, %d label%s, pad_token_id %d, %zu parameters, %s", out,
                     config_architecture(&m->cfg), dir, num_labels, num_labels == 1 ? "" : "s", m->cfg.pad_token_id,
                     m->tt.n_params, dtype_torch_name(save));
    }
    model_free(m);
    if (be) backend_destroy(be);
    free(dir);
    return st;
}

static Status run(const Args *a, Err *e) {
    const char *cfg_path = args_str(a, "model_config"), *out = args_str(a, "output_dir");
    int num_labels = (int)args_int(a, "num_labels");
    if (!out) return err_set(e, ST_EINVAL, "--output_dir DIR is required");
    if (num_labels < 0) return err_set(e, ST_EINVAL, "--num_labels %d: expected 0 (a causal LM) or more", num_labels);
    if (!!cfg_path == !!args_str(a, "model"))
        return err_set(e, ST_EINVAL, "give one of --model_config CONFIG.json (random weights) or --model DIR "
                                     "--num_labels N (a classifier from a causal LM)");
    if (args_str(a, "model")) {
        if (num_labels <= 0)
            return err_set(e, ST_EINVAL, "--model DIR needs --num_labels N (1 for a reward model): it makes a sequence "
                                         "classifier of a causal LM");
        return from_model(a, out, num_labels, e);
    }
    ModelConfig cfg;
    TRY(config_load(cfg_path, &cfg, e));
    if (num_labels > 0) config_set_classifier(&cfg, num_labels, tokenizer_pad(args_str(a, "tokenizer")));
    Backend *be;
    Status st = cli_backend(a, &be, e);
    if (st != ST_OK) {
        config_free(&cfg);
        return st;
    }
    Model *m = NULL;
    Progress pr;  // a 0.6B model takes about a minute: initialising, then writing
    progress_begin(&pr, "init", "tensors", 0);
    st = model_create_random_p(&cfg, be, (uint64_t)args_int(a, "seed"), &pr, &m, e);
    if (st == ST_OK) {
        DType save = cfg.torch_dtype;
        int forced;
        st = cli_save_dtype_flag(a, "dtype", &forced, e);
        if (forced >= 0) save = (DType)forced;
        progress_begin(&pr, "init: writing", "MiB", 0);
        if (st == ST_OK) st = model_save_p(m, out, save, &pr, e);
        if (st == ST_OK && cfg.num_labels == 0) st = gen_config_write_default(&cfg, out, e);
        const char *tok = args_str(a, "tokenizer");
        for (size_t i = 0; st == ST_OK && tok && i < ARRAY_LEN(tokenizer_files); i++) {
            char *src = path_join(tok, tokenizer_files[i]), *dst = path_join(out, tokenizer_files[i]);
            if (file_exists(src)) st = file_copy(src, dst, e);
            free(src);
            free(dst);
        }
        if (st == ST_OK)
            log_info("wrote %s: %s, %zu parameters, %s", out, config_architecture(&m->cfg), m->tt.n_params,
                     dtype_torch_name(save));
    }
    model_free(m);  // frees cfg (owned by the model)
    if (!m) config_free(&cfg);
    backend_destroy(be);
    return st;
}

int cmd_init(int argc, char **argv) {
    return cli_run("init", "Write a randomly initialised model (normal(0, initializer_range) weights, norm "
                                   "weights 1) in Hugging Face layout, or a sequence classifier (reward model) made "
                                   "from a causal LM.", specs, argc, argv, run);
}
