// mem_plan.h: what a process holds at its peak, part by part, so that `still info` predicts the
// peak resident set (VmHWM) of `still generate` and `still sft` at a shape instead of the sum of
// a few buffers. Every part is the size of something the code allocates (weights as held, gradients,
// AdamW moments, plans with the KV cache, backend scratch, save buffers) except three measured on
// the CPU backend and named as such: the tokenizer (about 7x its tokenizer.json), the OpenBLAS
// buffers of the LM head's (chunk, V) x (V, C) product with several threads, and the runtime
// (binary and libraries: this process's own resident set, plus host-side bookkeeping).
#ifndef STILL_MEM_PLAN_H
#define STILL_MEM_PLAN_H

#include "config.h"
#include "../core/dtype.h"

typedef struct MemParts {
    size_t weights;    // parameters as held (in place from the file or copied, in the storage dtype)
    size_t grads;      // training: fp32 gradients
    size_t adam;       // training: AdamW m and v
    size_t plans;      // activation arenas (decode plan: with the KV cache)
    size_t kv_cache;   // of which the KV cache
    size_t scratch;    // backend scratch: fp32 weight panels, attention blocks, partial sums
    size_t blas;       // OpenBLAS buffers (measured; several threads only)
    size_t saving;     // buffers of the streaming checkpoint writer
    size_t tokenizer;  // the loaded tokenizer (measured ratio to tokenizer.json)
    size_t runtime;    // binary, libraries, host bookkeeping
    size_t total;      // the predicted peak: max(the load, the run)
} MemParts;

// Bytes the tokenizer of model_dir holds once loaded (0 without tokenizer.json).
size_t mem_plan_tokenizer(const char *model_dir);
// still generate: B rows, prompts padded to P slots, max_new new tokens (cache of P + max_new
// rounded up to 128), weights stored as wdt from a file in file_dt, on `threads` threads.
void mem_plan_generate(const ModelConfig *c, DType wdt, DType file_dt, int B, int P, int max_new, int threads,
                       size_t tokenizer, size_t runtime, MemParts *out);
// still sft (full training, fp32 masters) at one train plan (B, T), with or without gradient
// checkpointing, saving in save_dt.
void mem_plan_train(const ModelConfig *c, DType save_dt, int B, int T, int ckpt, int threads, size_t tokenizer,
                    size_t runtime, MemParts *out);

#endif
