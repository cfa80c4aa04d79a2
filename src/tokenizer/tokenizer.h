// tokenizer.h: Hugging Face tokenizer.json encode/decode, as the Rust `tokenizers` library and
// transformers' PreTrainedTokenizerFast compute them.
//
// Supported (anything else is an error naming the component):
//   model          BPE (merge ranks, "a b" or [a, b] merges, ignore_merges, byte_fallback,
//                  unk_token + fuse_unk, continuing_subword_prefix, end_of_word_suffix)
//   normalizer     NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents, Sequence
//   pre_tokenizer  Split (all behaviours, invert), ByteLevel, Metaspace, Digits, Whitespace,
//                  WhitespaceSplit, Sequence
//   post_processor TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence
//   decoder        ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence
// plus added tokens (special or not; lstrip, rstrip, single_word, normalized), split first,
// leftmost-longest. tokenizer_config.json beside tokenizer.json supplies bos/eos/pad/unk (strings
// or AddedToken objects), add_bos_token / add_eos_token (Llama-style classes rebuild the
// template), split_special_tokens and clean_up_tokenization_spaces.
//
// Regexes run on PCRE2 (UTF, UCP, JIT) after translating the Oniguruma spellings that differ;
// normalisation uses utf8proc. A loaded Tokenizer is immutable apart from an internal,
// mutex-guarded BPE cache, so one Tokenizer may be shared by threads.
#ifndef STILL_TOKENIZER_H
#define STILL_TOKENIZER_H

#include "../core/common.h"

#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;

// Growable id list. Zero-initialise; free with tokenizer_ids_free.
typedef struct TokenIds {
    int32_t *ids;   // (n)
    size_t n, cap;
} TokenIds;

void tokenizer_ids_free(TokenIds *ids);

// Load dir/tokenizer.json (+ dir/tokenizer_config.json when present), or a tokenizer.json file
// given directly (its directory is searched for tokenizer_config.json). Errors name the file and
// the component or field that is wrong.
Status tokenizer_load(const char *dir_or_file, Tokenizer **out, Err *e);
void tokenizer_free(Tokenizer *tok);

// Encode UTF-8 text (len bytes; NUL bytes allowed). Appends to out (which the caller clears).
// add_special_tokens runs the post-processor (e.g. BOS for Llama 2). Invalid UTF-8 is an error
// naming the byte offset.
Status tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int add_special_tokens,
                        TokenIds *out, Err *e);

// Decode ids to a NUL-terminated UTF-8 string (caller frees), as transformers' decode():
// the decoder chain, then clean_up_tokenization_spaces when tokenizer_config.json asks for it.
// Ids outside the vocabulary are skipped (check with tokenizer_id_to_token first when that matters);
// invalid byte sequences become U+FFFD.
char *tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, int skip_special_tokens);

// Size of the id space: one more than the largest id of the vocabulary or the added tokens.
int32_t tokenizer_vocab_size(const Tokenizer *tok);
// -1 when the token is unknown.
int32_t tokenizer_token_to_id(const Tokenizer *tok, const char *token);
// Token string (added token content or vocabulary entry); NULL for a hole or an id out of range.
const char *tokenizer_id_to_token(const Tokenizer *tok, int32_t id);
// 1 for an added token marked special (skipped by skip_special_tokens).
int tokenizer_is_special(const Tokenizer *tok, int32_t id);

// Special tokens from tokenizer_config.json: id -1 and string NULL when absent.
int32_t tokenizer_bos_id(const Tokenizer *tok);
int32_t tokenizer_eos_id(const Tokenizer *tok);
int32_t tokenizer_pad_id(const Tokenizer *tok);
int32_t tokenizer_unk_id(const Tokenizer *tok);
const char *tokenizer_bos_token(const Tokenizer *tok);
const char *tokenizer_eos_token(const Tokenizer *tok);
const char *tokenizer_pad_token(const Tokenizer *tok);
const char *tokenizer_unk_token(const Tokenizer *tok);

// Streaming decode (tokenizers' DecodeStream): feed ids one at a time; each call returns the
// newly completed text (possibly "") and never splits a UTF-8 character: output that would end
// in U+FFFD is held back until a later id completes it. clean_up_tokenization_spaces is not
// applied. Zero-initialise, free with tokenizer_stream_free.
typedef struct TokenizerStream {
    const Tokenizer *tok;
    int skip_special_tokens;
    TokenIds ids;         // ids since the last emitted boundary, plus context
    char *prefix;         // decode of the context ids
    size_t prefix_index;  // number of context ids at the front of ids
} TokenizerStream;

void tokenizer_stream_init(TokenizerStream *s, const Tokenizer *tok, int skip_special_tokens);
// Returns a new string (caller frees); "" while the text is held back.
char *tokenizer_stream_step(TokenizerStream *s, int32_t id);
void tokenizer_stream_free(TokenizerStream *s);

#endif
