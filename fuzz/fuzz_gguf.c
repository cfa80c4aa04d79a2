// fuzz_gguf.c: the input is a whole GGUF file. It is parsed (gguf_parse: counts, strings,
// arrays, tensor directory, offsets, overlap), every tensor is read end to end and dequantized
// (so a range the validation let through that lies outside the buffer shows up under ASan), and
// the file is then opened as a model (metadata -> config, tensors -> HF names) and as a tokenizer
// (tokenizer.ggml.* -> tokenizer.json).
#include "fuzz.h"

#include "core/alloc.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>

static volatile float sink;  // keeps the reads below

Status fuzz_gguf(const uint8_t *data, size_t size, Err *e) {
    GgufFile g;
    Status st = gguf_parse(data, size, "fuzz.gguf", &g, e);
    if (st != ST_OK) return st;
    for (int i = 0; i < g.n_tensors; i++) {
        const GgufTensor *t = &g.tensors[i];
        if (t->numel > ((size_t)1 << 20)) continue;  // the check above covers the range; keep runs fast
        float *f = xmalloc(t->numel * sizeof(float) + 4);
        gguf_dequantize(t->type, t->data, f, t->numel);
        float s = 0;
        for (size_t k = 0; k < t->numel; k++) s += f[k];
        sink = s;
        free(f);
        if (gguf_find_tensor(&g, t->name) != t) abort();
    }
    for (int i = 0; i < g.n_kv; i++)
        if (gguf_find(&g, g.kv[i].key) != &g.kv[i]) abort();
    gguf_close(&g);
    // The same bytes as a model and as a tokenizer (both may refuse it; the contract is the error).
    fuzz_write_file(fuzz_tmpdir(), "model.gguf", data, size);
    char path[1100];
    snprintf(path, sizeof path, "%s/model.gguf", fuzz_tmpdir());
    ModelConfig cfg;
    StSet set;
    Err me = {0};
    Status ms = gguf_model_open(path, -1, &cfg, &set, &me);
    fuzz_check_status("gguf (model)", ms, &me);
    if (ms == ST_OK) {
        config_free(&cfg);
        st_close(&set);
    }
    Tokenizer *tok = NULL;
    Err te = {0};
    Status ts = tokenizer_load(path, &tok, &te);
    fuzz_check_status("gguf (tokenizer)", ts, &te);
    if (ts == ST_OK) {
        TokenIds ids = {0};
        Err ee = {0};
        if (tokenizer_encode(tok, "Hello, world! 123", 17, 1, &ids, &ee) == ST_OK) {
            char *s = tokenizer_decode(tok, ids.ids, ids.n, 0);
            free(s);
        }
        tokenizer_ids_free(&ids);
        tokenizer_free(tok);
    }
    return ST_OK;
}

FUZZ_ENTRY(gguf)
