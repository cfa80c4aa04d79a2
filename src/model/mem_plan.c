// mem_plan.c: the parts of a process's peak resident set (see mem_plan.h for what is counted and
// what is measured rather than derived).
#include "mem_plan.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "plan.h"
#include "tensors.h"

#include <string.h>
#include <sys/stat.h>

#define MIB ((size_t)1 << 20)
// Measured on the CPU backend (bench/bench_memory.sh, tests/e2e/memory.sh): Qwen3's 11.4 MB
// tokenizer.json took 86.6 MiB loaded (generate) and 82.5 MiB (sft on a text dataset).
#define TOKENIZER_RATIO 7.5
// Host bookkeeping beside the runtime's resident set: generation rows and histories, the data set
// and batcher, JSON, stdio (measured: 1.5-2.5 MiB at the shapes of bench/configs).
#define HOST_BYTES (2 * MIB)
// The streaming writers touch at most what the largest tensor fills of their buffers: safetensors'
// 8 MiB chunk, model_save's 2 MiB conversion stage (16-bit saves), file_copy's 1 MiB.
#define SAVE_CHUNK (8 * MIB)
#define SAVE_STAGE (2 * MIB)
#define COPY_BUF MIB
// model_load's 8 MiB conversion stage and the piece of the file being converted, while 16-bit
// weights become fp32 copies.
#define LOAD_STAGE (8 * MIB)
#define ATTN_QB 128  // the CPU attention's query block (cpu_attention.c)

size_t mem_plan_tokenizer(const char *model_dir) {
    char *p = path_join(model_dir, "tokenizer.json");
    struct stat sb;
    size_t n = stat(p, &sb) == 0 ? (size_t)sb.st_size : 0;
    free(p);
    return (size_t)(n * TOKENIZER_RATIO);
}

// The largest fp32 panel of 16-bit weight rows a multiplication of many rows converts: about
// 2M floats per panel (cpu_panel_rows), at most the matrix's rows.
static size_t panel_bytes(const ModelConfig *c) {
    size_t C = c->hidden_size, FF = c->intermediate_size, QD = (size_t)c->num_attention_heads * c->head_dim;
    size_t KD = (size_t)c->num_key_value_heads * c->head_dim;
    size_t mats[][2] = {{QD, C}, {KD, C}, {C, QD}, {FF, C}, {C, FF}};  // (rows OC, columns C)
    size_t best = 0;
    for (size_t i = 0; i < ARRAY_LEN(mats); i++) {
        size_t rows = MAX((size_t)16, ((size_t)2 << 20) / mats[i][1]);
        best = MAX(best, MIN(rows, mats[i][0]) * mats[i][1] * sizeof(float));
    }
    return best;
}

// The table's bytes in dt, its parameter count and its largest tensor's element count.
static size_t tt_bytes(const ModelConfig *c, DType dt, size_t *n_params, size_t *largest) {
    TensorTable tt;
    tensors_build(&tt, c, dt);
    size_t b = tt.param_bytes, big = 0;
    for (int i = 0; i < tt.n; i++) big = MAX(big, tt.t[i].numel);
    if (n_params) *n_params = tt.n_params;
    if (largest) *largest = big;
    tensors_free(&tt);
    return b;
}

void mem_plan_generate(const ModelConfig *c, DType wdt, DType file_dt, int B, int P, int max_new, int threads,
                       size_t tokenizer, size_t runtime, MemParts *o) {
    memset(o, 0, sizeof *o);
    int S = (P + max_new + 127) / 128 * 128;
    size_t big;
    o->weights = tt_bytes(c, wdt, NULL, &big);
    size_t decode = plan_bytes_cached(c, PLAN_DECODE, B, 1, S);
    o->kv_cache = 2 * plan_cache_floats(c, B, S) * sizeof(float);
    o->plans = plan_bytes_cached(c, PLAN_PREFILL, B, P, 0) + decode;
    // prefill: 16-bit weights through fp32 panels; attention score blocks per thread over the cache
    o->scratch = (wdt != DT_F32 && (size_t)B * P > 4 ? panel_bytes(c) : 0) +
                 (size_t)MAX(threads, 1) * 2 * ATTN_QB * S * sizeof(float);
    o->tokenizer = tokenizer;
    o->runtime = runtime + HOST_BYTES;
    size_t run = o->weights + o->plans + o->scratch + o->tokenizer + o->runtime;
    size_t load = o->weights + (wdt != file_dt ? 2 * MIN(LOAD_STAGE, big * sizeof(float)) : 0) + o->runtime;
    o->total = MAX(run, load);
}

void mem_plan_train(const ModelConfig *c, DType save_dt, int B, int T, int ckpt, int threads, size_t tokenizer,
                    size_t runtime, MemParts *o) {
    memset(o, 0, sizeof *o);
    size_t n, big;
    o->weights = tt_bytes(c, DT_F32, &n, &big);
    o->grads = n * sizeof(float);
    o->adam = 2 * n * sizeof(float);
    int chunk = plan_head_chunk(c->vocab_size);
    o->plans = plan_bytes_opts(c, PLAN_TRAIN, B, T, chunk, ckpt, NULL);
    // attention backward: two score blocks per thread, and private dk / dv per task when the kv
    // heads are fewer than the threads (cpu_attention.c)
    int th = MAX(threads, 1), rep = c->num_attention_heads / MAX(c->num_key_value_heads, 1);
    int groups = B * c->num_key_value_heads, parts = MIN(rep, (th + groups - 1) / groups);
    o->scratch = (size_t)th * 2 * ATTN_QB * T * sizeof(float) +
                 (parts > 1 ? (size_t)groups * parts * 2 * T * c->head_dim * sizeof(float) : 0);
    // Measured: with more than one thread OpenBLAS holds about one (chunk, V) fp32 block more
    // while the LM head's backward multiplies dZ (chunk, V) by W (V, C) (55.6 MiB at V = 151936;
    // none on one thread).
    o->blas = th > 1 ? (size_t)chunk * c->vocab_size * sizeof(float) : 0;
    size_t big32 = big * sizeof(float);  // the optimizer file's tensors are fp32
    o->saving = MIN(SAVE_CHUNK, big32) + (save_dt != DT_F32 ? MIN(SAVE_STAGE, big32) : 0) +
                (tokenizer ? COPY_BUF : 0);
    o->tokenizer = tokenizer;
    o->runtime = runtime + HOST_BYTES;
    o->total = o->weights + o->grads + o->adam + o->plans + o->scratch + o->blas + o->saving + o->tokenizer +
               o->runtime;
}
