// codec.h: the TextCodec of a model directory: its tokenizer.json and chat template.
#ifndef STILL_CODEC_H
#define STILL_CODEC_H

#include "data.h"

typedef struct ModelCodec {
    TextCodec codec;
    struct Tokenizer *tok;
    struct ChatTemplate *tmpl;   // NULL when the model has no chat template
    char *eos_token;
} ModelCodec;

// Load dir's tokenizer (required) and chat template (optional). eos_token overrides the
// tokenizer's EOS (TRL's eos_token); NULL keeps it.
Status model_codec_load(ModelCodec *mc, const char *dir, const char *eos_token, Err *e);
void model_codec_free(ModelCodec *mc);
// The padding id TRL gives a sequence classifier: the tokenizer's pad token, else its EOS (the
// codec's); -1 when it has neither.
int32_t model_codec_pad_id(const ModelCodec *mc);

#endif
