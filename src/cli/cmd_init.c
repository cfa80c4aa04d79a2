// cmd_init.c: still init — a randomly initialised model in Hugging Face layout.
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
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

static Status write_generation_config(const ModelConfig *cfg, const char *dir, Err *e) {
    cJSON *g = cJSON_CreateObject();
    if (cfg->bos_token_id >= 0) cJSON_AddNumberToObject(g, "bos_token_id", cfg->bos_token_id);
    if (cfg->n_eos_token_ids == 1) {
        cJSON_AddNumberToObject(g, "eos_token_id", cfg->eos_token_ids[0]);
    } else if (cfg->n_eos_token_ids > 1) {
        cJSON *arr = cJSON_AddArrayToObject(g, "eos_token_id");
        for (int i = 0; i < cfg->n_eos_token_ids; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(cfg->eos_token_ids[i]));
    }
    if (cfg->pad_token_id >= 0) cJSON_AddNumberToObject(g, "pad_token_id", cfg->pad_token_id);
    cJSON_AddFalseToObject(g, "do_sample");
    char *text = cJSON_Print(g);
    cJSON_Delete(g);
    char *path = path_join(dir, "generation_config.json");
    Status st = file_write_atomic(path, text, strlen(text), e);
    free(path);
    free(text);
    return st;
}

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
    st = model_create_random(&cfg, be, (uint64_t)args_int(a, "seed"), &m, e);
    if (st == ST_OK) {
        DType save = cfg.torch_dtype;
        int forced;
        st = cli_dtype(a, &forced, e);
        if (forced >= 0) save = (DType)forced;
        if (st == ST_OK) st = model_save(m, out, save, e);
        if (st == ST_OK) st = write_generation_config(&cfg, out, e);
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
