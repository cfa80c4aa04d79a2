// gen_text.h: the text side of generation on the host: per-sequence streaming detokenisation
// (never splitting a UTF-8 character), stop strings, and splitting a completion into reasoning and
// content at the thinking markers. The engine (generate.h) knows only ids; gen_text_on_token is
// the GenTokenFn that adds text.
#ifndef STILL_GEN_TEXT_H
#define STILL_GEN_TEXT_H

#include "../core/alloc.h"
#include "../tokenizer/tokenizer.h"

// Receives every new piece of a sequence's text as it is decoded (may be NULL).
typedef void (*GenTextSink)(void *user, int prompt_index, int seq_index, const char *piece);

typedef struct GenTextRow {
    TokenizerStream ts;
    StrBuf text;         // the streamed text so far (special tokens skipped)
} GenTextRow;

typedef struct GenText {
    const Tokenizer *tok;
    char **stops;        // (n_stops) stop strings (copied)
    int n_stops;
    size_t max_stop;     // longest stop string, bytes
    int nrs;             // sequences per prompt
    GenTextRow *rows;    // (n_prompts * nrs), prompt-major
    int n_rows;
    GenTextSink sink;
    void *sink_user;
} GenText;

// tok may be NULL (no text: the callback only counts). stops may be NULL.
void gen_text_init(GenText *g, const Tokenizer *tok, int n_prompts, int nrs, char *const *stops, int n_stops);
void gen_text_free(GenText *g);
// GenTokenFn: decode the id into the row's text, pass the new piece to the sink, and return 1 when
// the text now contains a stop string (transformers' StopStringCriteria: the sequence ends with
// the token that completes it; that token is kept).
int gen_text_on_token(void *user, int prompt_index, int seq_index, int32_t id, float logprob);
const char *gen_text_get(const GenText *g, int prompt_index, int seq_index);

// Split a completion at the last `</think>` token (Qwen3's parsing rule): reasoning is the text
// before it without the `<think>` / `</think>` markers and surrounding newlines, content the text
// after it, newlines stripped. Returns 0 (and sets nothing) when the tokenizer has no `</think>`
// token; with one but no marker in ids, reasoning is "" and content the whole text. Caller frees.
int gen_split_reasoning(const Tokenizer *tok, const int32_t *ids, int n, char **reasoning, char **content);

#endif
