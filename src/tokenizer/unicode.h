// unicode.h: the Unicode pieces the tokenizer needs, on top of utf8proc (no private tables).
//
// UTF-8 decoding/encoding, character classes as Rust's `char` methods define them, Unicode
// normalisation forms and lowercasing, and the GPT-2 byte <-> character table used by the
// ByteLevel pre-tokenizer and decoder.
#ifndef STILL_UNICODE_H
#define STILL_UNICODE_H

#include "../core/common.h"

#include <stddef.h>
#include <stdint.h>

// Decode one code point at s (len bytes available). Returns the code point and sets *adv to its
// byte length; returns -1 with *adv = 1 on an invalid or truncated sequence.
int32_t utf8_decode(const char *s, size_t len, size_t *adv);
// Encode cp into out (4 bytes room); returns the byte count.
int utf8_encode(uint32_t cp, char *out);
// Byte offset of the first invalid sequence, or len when s is valid UTF-8.
size_t utf8_validate(const char *s, size_t len);
// Length of the UTF-8 sequence that starts with lead byte b (1 for a stray continuation byte).
int utf8_seq_len(unsigned char b);

// Rust char::is_whitespace (the Unicode White_Space property).
int unicode_is_whitespace(uint32_t cp);
// Rust char::is_alphanumeric (letters and numbers).
int unicode_is_alnum(uint32_t cp);
// Rust char::is_numeric (general categories Nd, Nl, No).
int unicode_is_numeric(uint32_t cp);
// The regex crate's Unicode \w: letters, marks, Nd, Nl, Pc, ZWNJ/ZWJ.
int unicode_is_word(uint32_t cp);
// Replace invalid UTF-8 by U+FFFD, one per maximal invalid subsequence (Rust from_utf8_lossy).
char *utf8_lossy(const char *s, size_t len, size_t *out_len);
// General category M (Mn, Mc, Me): a combining mark.
int unicode_is_mark(uint32_t cp);

typedef enum { UNICODE_NFC, UNICODE_NFD, UNICODE_NFKC, UNICODE_NFKD } UnicodeForm;

// Normalise valid UTF-8 s into a new NUL-terminated string (caller frees). ASCII input is
// returned as a copy without calling utf8proc.
char *unicode_normalize(const char *s, size_t len, UnicodeForm form, size_t *out_len);
// Full lowercase mapping, character by character (Rust char::to_lowercase, as the Lowercase
// normalizer applies it: no final-sigma rule, so word-final Σ becomes σ, not ς).
char *unicode_lowercase(const char *s, size_t len, size_t *out_len);

// GPT-2 byte-level alphabet: byte b is shown as code point unicode_byte_to_cp(b); the inverse
// returns -1 for a code point outside the alphabet.
uint32_t unicode_byte_to_cp(uint8_t b);
int unicode_cp_to_byte(uint32_t cp);

#endif
