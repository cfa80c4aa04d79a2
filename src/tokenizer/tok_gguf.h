// tok_gguf.h: a GGUF file's tokenizer metadata as tokenizer.json + tokenizer_config.json
// (cJSON trees the caller deletes), for tokenizer_load and chat_template_load.
#ifndef STILL_TOK_GGUF_H
#define STILL_TOK_GGUF_H

#include "../core/common.h"
#include "../model/gguf.h"
#include "../model/gguf_write.h"

#include <cjson/cJSON.h>

// tokenizer_config carries bos/eos/pad/unk token strings and chat_template (when the file has
// tokenizer.chat_template). Errors name the file and the key.
Status tok_gguf_json(const char *path, cJSON **tokenizer_json, cJSON **tokenizer_config, Err *e);

// Add the tokenizer of a model directory (tokenizer.json, tokenizer_config.json,
// chat_template.jinja) to w as llama.cpp's converter writes a byte-level BPE (tokenizer.ggml.*,
// tokenizer.chat_template). ST_ENOTFOUND when dir has no tokenizer.json; ST_EUNSUPPORTED for a
// tokenizer GGUF's gpt2 model cannot describe.
Status tok_gguf_write(const char *dir, GgufWriter *w, Err *e);

#endif
