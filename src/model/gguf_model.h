// gguf_model.h: a GGUF file as a model: the Hugging Face config its metadata describes and its
// tensors under Hugging Face names and shapes (docs/gguf.md).
//
// Architectures qwen3, qwen2, llama, olmo2, phi3, gemma2 and gemma3 (their norms stored plus one). F32, F16 and BF16 tensors are used from the file's
// mapping as they are; quantized ones (Q8_0, Q4_0, Q4_K, Q6_K) are dequantized at load into
// float32 (or bfloat16 when asked). For llama, the rows of attn_q / attn_k that llama.cpp's
// converter interleaves per head for its RoPE are put back in Hugging Face order.
#ifndef STILL_GGUF_MODEL_H
#define STILL_GGUF_MODEL_H

#include "config.h"
#include "gguf.h"
#include "safetensors.h"

// GGUF tensor name <-> Hugging Face name ("blk.3.attn_q.weight" <->
// "model.layers.3.self_attn.q_proj.weight") in architecture arch (general.architecture or the
// model_type: olmo2's and Gemma's post-norms and phi3's fused projections have names of their
// own; NULL = the common ones). 0
// when the name is not one of a model's tensors.
int gguf_name_to_hf(const char *arch, const char *gguf_name, char *hf, size_t n);
int gguf_name_from_hf(const char *arch, const char *hf_name, char *gguf_name, size_t n);

// The config.json a GGUF's metadata stands for (errors name the file and the key).
Status gguf_model_config(const GgufFile *g, ModelConfig *cfg, Err *e);

// Open path: *cfg as above, *set holding every tensor under its HF name (sorted, as st_open
// gives), the mapping owned by the set. quant_dtype: what quantized tensors become (DT_F32 or
// DT_BF16; < 0 = DT_F32).
Status gguf_model_open(const char *path, int quant_dtype, ModelConfig *cfg, StSet *set, Err *e);

// Row order of llama's attn_q / attn_k: llama.cpp's converter stores, within each of n_heads
// heads of hd rows, HF row s * hd/2 + i at row 2 * i + s. rows (n_heads * hd) of row_bytes each.
void gguf_llama_unpermute(void *dst, const void *src, int n_heads, int hd, size_t row_bytes);
void gguf_llama_permute(void *dst, const void *src, int n_heads, int hd, size_t row_bytes);

#endif
