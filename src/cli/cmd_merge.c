// cmd_merge.c: still merge — a PEFT LoRA adapter folded into its base model (PEFT's
// merge_and_unload), written as a plain Hugging Face checkpoint.
#include "../core/log.h"
#include "../model/lora.h"
#include "../train/checkpoint.h"
#include "cli_common.h"
#include "commands.h"

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, "base model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"adapter", ARG_STR, NULL, "PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors)"},
    {"output_dir", ARG_STR, NULL, "directory to write the merged model into"},
    {"save_dtype", ARG_STR, NULL, "dtype of the merged weights (default: the base checkpoint's)"},
    {NULL, 0, NULL, NULL},
};

static Status run(const Args *a, Err *e) {
    const char *adapter = args_str(a, "adapter"), *out = args_str(a, "output_dir");
    if (!adapter) return err_set(e, ST_EINVAL, "--adapter DIR is required");
    if (!out) return err_set(e, ST_EINVAL, "--output_dir DIR is required");
    int save;
    TRY(cli_save_dtype_flag(a, "save_dtype", &save, e));
    char *dir;
    TRY(cli_model_dir(a, "model", &dir, e));
    Backend *be = NULL;
    Model *m = NULL;
    Status st = cli_backend(a, &be, e);
    if (st == ST_OK) st = model_load(dir, be, DT_F32, &m, e);  // merged in fp32
    if (st == ST_OK) st = lora_load(m, adapter, e);
    int n = st == ST_OK ? m->lora->tt.n : 0;
    if (st == ST_OK) st = lora_merge(m, e);
    DType dt = st == ST_OK && save >= 0 ? (DType)save : (m ? m->ckpt_dtype : DT_F32);
    if (st == ST_OK) st = checkpoint_write_model(out, m, dt, dir, e);
    if (st == ST_OK) log_info("merged %s (%d tensors) into %s: wrote %s (%s)", adapter, n, dir, out, dtype_torch_name(dt));
    model_free(m);
    if (be) backend_destroy(be);
    free(dir);
    return st;
}

int cmd_merge(int argc, char **argv) {
    return cli_run("merge", "Merge a PEFT LoRA adapter into its base model and save a plain checkpoint.", specs, argc,
                   argv, run);
}
