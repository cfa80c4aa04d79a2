// cmd_export_gguf.c: still export-gguf — a Hugging Face checkpoint (or a checkpoint still
// wrote) as a llama.cpp GGUF file, written atomically (docs/gguf.md).
#include "../core/log.h"
#include "../model/gguf_export.h"
#include "../tokenizer/tok_gguf.h"
#include "cli_common.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"outfile", ARG_STR, NULL, ARG_REQUIRED "GGUF file to write"},
    {"outtype", ARG_STR, "f32", "type of the 2-D weights: f32, f16, bf16 or q8_0 (norms and biases stay f32)"},
    {NULL, 0, NULL, NULL},
};

static Status parse_outtype(const char *s, uint32_t *out, Err *e) {
    static const struct { const char *name; uint32_t type; } types[] = {
        {"f32", GGML_F32}, {"f16", GGML_F16}, {"bf16", GGML_BF16}, {"q8_0", GGML_Q8_0}};
    for (size_t i = 0; i < ARRAY_LEN(types); i++)
        if (!strcmp(s, types[i].name)) return *out = types[i].type, ST_OK;
    return err_set(e, ST_EINVAL, "--outtype %s: expected f32, f16, bf16 or q8_0", s);
}

static const char *base_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    const char *p = dir + n;
    while (p > dir && p[-1] != '/') p--;
    return p;
}

static Status run(const Args *a, Err *e) {
    uint32_t outtype = GGML_F32;
    TRY(parse_outtype(args_str(a, "outtype"), &outtype, e));
    const char *out = args_str(a, "outfile");
    char *dir;
    TRY(cli_model_dir(a, "model", &dir, e));
    Backend *be = NULL;
    Model *m = NULL;
    Status st = cli_backend(a, &be, e);
    if (st == ST_OK) st = model_load_frozen(dir, be, DT_F32, &m, e);
    GgufWriter w;
    GgufExport x;
    gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT);
    if (st == ST_OK) {
        char name[256];
        snprintf(name, sizeof name, "%s", base_name(dir));
        size_t nl = strlen(name);
        if (nl > 5 && !strcmp(name + nl - 5, ".gguf")) name[nl - 5] = 0;
        st = gguf_export_begin(&x, m, outtype, name, &w, e);
        Status ts = st == ST_OK ? tok_gguf_write(dir, &w, e) : st;
        if (ts == ST_ENOTFOUND) {
            log_warn("%s has no tokenizer: the GGUF file has none (llama.cpp needs one to run it)", dir);
            err_clear(e);
        } else {
            st = ts;
        }
        if (st == ST_OK) st = gguf_w_write(&w, out, gguf_export_fill, &x, e);
        gguf_export_end(&x);
    }
    gguf_writer_free(&w);
    if (st == ST_OK) log_info("wrote %s (%s weights) from %s", out, args_str(a, "outtype"), dir);
    model_free(m);
    if (be) backend_destroy(be);
    free(dir);
    return st;
}

int cmd_export_gguf(int argc, char **argv) {
    return cli_run("export-gguf", "Write a model as a llama.cpp GGUF file.", specs, argc, argv, run);
}
