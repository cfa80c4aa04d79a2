// cmd_init.c: still init — a randomly initialised model in Hugging Face layout.
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../gen/generate.h"
#include "cli_common.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model_config", ARG_STR, NULL, ARG_REQUIRED "config.json to initialise from (fields kept as given)"},
    {"output_dir", ARG_STR, NULL, ARG_REQUIRED "directory to write the model into"},
    {"tokenizer", ARG_STR, NULL, "directory whose tokenizer files are copied into the model"},
    {NULL, 0, NULL, NULL},
};

static const char *tokenizer_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "chat_template.jinja", "vocab.json", "merges.txt", "added_tokens.json"};

static Status run(const Args *a, Err *e) {
    const char *cfg_path = args_str(a, "model_config"), *out = args_str(a, "output_dir");
    if (!cfg_path) return err_set(e, ST_EINVAL, "--model_config CONFIG.json is required");
    if (!out) return err_set(e, ST_EINVAL, "--output_dir DIR is required");
    ModelConfig cfg;
    TRY(config_load(cfg_path, &cfg, e));
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
        if (st == ST_OK) st = gen_config_write_default(&cfg, out, e);
        const char *tok = args_str(a, "tokenizer");
        for (size_t i = 0; st == ST_OK && tok && i < ARRAY_LEN(tokenizer_files); i++) {
            char *src = path_join(tok, tokenizer_files[i]), *dst = path_join(out, tokenizer_files[i]);
            if (file_exists(src)) st = file_copy(src, dst, e);
            free(src);
            free(dst);
        }
        if (st == ST_OK)
            log_info("wrote %s: %s, %zu parameters, %s", out, cfg.model_type, m->tt.n_params, dtype_torch_name(save));
    }
    model_free(m);  // frees cfg (owned by the model)
    if (!m) config_free(&cfg);
    backend_destroy(be);
    return st;
}

int cmd_init(int argc, char **argv) {
    return cli_run("init", "Write a randomly initialised model (normal(0, initializer_range) weights, norm "
                                   "weights 1) in Hugging Face layout.", specs, argc, argv, run);
}
