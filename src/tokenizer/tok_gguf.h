// tok_gguf.h: a GGUF file's tokenizer metadata as tokenizer.json + tokenizer_config.json
// (cJSON trees the caller deletes), for tokenizer_load and chat_template_load.
#ifndef STILL_TOK_GGUF_H
#define STILL_TOK_GGUF_H

#include "../core/common.h"
#include "../model/gguf.h"

#include <cjson/cJSON.h>

// tokenizer_config carries bos/eos/pad/unk token strings and chat_template (when the file has
// tokenizer.chat_template). Errors name the file and the key.
Status tok_gguf_json(const char *path, cJSON **tokenizer_json, cJSON **tokenizer_config, Err *e);

#endif
