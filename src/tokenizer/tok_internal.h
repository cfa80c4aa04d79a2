// tok_internal.h: the structures behind tokenizer.h, shared by the tok_*.c files only.
#ifndef STILL_TOK_INTERNAL_H
#define STILL_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include "../core/alloc.h"
#include "../core/json.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <pthread.h>

// ---- hash maps -----------------------------------------------------------------------------
// String -> int32 (the vocabulary). Keys are copied.
typedef struct StrMapSlot {
    char *key;      // NULL: empty
    uint32_t len;
    int32_t val;
} StrMapSlot;

typedef struct StrMap {
    StrMapSlot *slots;  // (cap) cap is a power of two
    size_t cap, n;
} StrMap;

uint64_t tok_hash(const char *s, size_t len);
// Insert or overwrite.
void strmap_put(StrMap *m, const char *key, size_t len, int32_t val);
// -1 when absent.
int32_t strmap_get(const StrMap *m, const char *key, size_t len);
void strmap_free(StrMap *m);

// (left id, right id) -> (rank, merged id).
typedef struct PairSlot {
    uint64_t key;   // (a << 32 | b) + 1; 0: empty
    int32_t rank, new_id;
} PairSlot;

typedef struct PairMap {
    PairSlot *slots;  // (cap)
    size_t cap, n;
} PairMap;

// ---- regexes ---------------------------------------------------------------------------------
// A Split / Replace pattern: a literal string or a PCRE2 regex translated from Oniguruma syntax.
typedef struct TokRegex {
    pcre2_code *code;   // NULL for a literal
    char *literal;
    size_t lit_len;
} TokRegex;

typedef struct Span {
    size_t start, end;
} Span;

typedef struct SpanVec {
    Span *v;
    size_t n, cap;
} SpanVec;

// Per-call scratch: PCRE2 match data and stable byte storage for the pieces of one encode.
typedef struct ArenaBlock {
    struct ArenaBlock *next;
    size_t used, cap;
    char data[];
} ArenaBlock;

typedef struct EncodeCtx {
    pcre2_match_data *md;
    ArenaBlock *blocks;
    SpanVec spans;
} EncodeCtx;

char *ctx_alloc(EncodeCtx *ctx, size_t n);

// Compile a {"String": s} / {"Regex": r} pattern object; what names the component for errors.
Status tokre_compile(const cJSON *pattern, const char *what, TokRegex *re, Err *e);
Status tokre_compile_regex(const char *pattern, const char *what, TokRegex *re, Err *e);
void tokre_free(TokRegex *re);
// Non-overlapping matches, left to right, into ctx->spans (cleared first).
Status tokre_find_all(const TokRegex *re, const char *s, size_t len, EncodeCtx *ctx, Err *e);
// The Oniguruma -> PCRE2 translation (exposed for tests). Caller frees.
char *tokre_translate(const char *onig, Err *e);

// ---- pieces ---------------------------------------------------------------------------------
typedef struct Piece {
    const char *s;      // bytes in the input or in ctx storage
    size_t len;
    uint8_t at_start;   // begins at offset 0 of the original text (Metaspace "first")
} Piece;

typedef struct PieceVec {
    Piece *v;
    size_t n, cap;
} PieceVec;

void piecevec_push(PieceVec *pv, const char *s, size_t len, int at_start);

// ---- normalizers ----------------------------------------------------------------------------
typedef enum {
    NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_LOWERCASE, NORM_REPLACE, NORM_PREPEND,
    NORM_STRIP, NORM_STRIP_ACCENTS, NORM_SEQUENCE,
} NormKind;

typedef struct Normalizer {
    NormKind kind;
    TokRegex re;          // Replace
    char *content;        // Replace content, Prepend text
    int left, right;      // Strip
    struct Normalizer **children;  // (n_children) Sequence
    int n_children;
} Normalizer;

Status normalizer_parse(const cJSON *j, const char *what, Normalizer **out, Err *e);
void normalizer_free(Normalizer *n);
// Normalise s into ctx storage.
Status normalizer_apply(const Normalizer *n, const char *s, size_t len, EncodeCtx *ctx, const char **out,
                        size_t *out_len, Err *e);

// ---- pre-tokenizers -------------------------------------------------------------------------
typedef enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE, PRE_DIGITS, PRE_WHITESPACE, PRE_WHITESPACE_SPLIT, PRE_SEQUENCE } PreKind;
typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } SplitBehavior;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } PrependScheme;

typedef struct PreTokenizer {
    PreKind kind;
    TokRegex re;                // Split; ByteLevel use_regex; Whitespace
    SplitBehavior behavior;
    int invert;
    int add_prefix_space;       // ByteLevel
    int use_regex;              // ByteLevel
    char *replacement;          // Metaspace (UTF-8 of one character)
    PrependScheme prepend;      // Metaspace
    int split;                  // Metaspace
    int individual_digits;      // Digits
    char bl_enc[256][2];        // ByteLevel: UTF-8 of the character standing for each byte
    uint8_t bl_len[256];
    struct PreTokenizer **children;
    int n_children;
} PreTokenizer;

Status pretok_parse(const cJSON *j, const char *what, PreTokenizer **out, Err *e);
void pretok_free(PreTokenizer *p);
// Pre-tokenize every piece of in into out (cleared first); in is consumed as scratch.
Status pretok_apply(const PreTokenizer *p, PieceVec *in, PieceVec *out, EncodeCtx *ctx, Err *e);
int pretok_max_captures(const PreTokenizer *p);

// ---- BPE model ------------------------------------------------------------------------------
typedef struct BpeCacheSlot {
    char *key;          // NULL: empty
    uint32_t len, n;
    int32_t *ids;       // (n)
} BpeCacheSlot;

typedef struct Bpe {
    StrMap vocab;
    char **tokens;          // (n_tokens) id -> string, NULL for holes
    int32_t n_tokens;       // 1 + the largest vocabulary id
    PairMap merges;
    int32_t unk_id;         // -1: none
    int fuse_unk, byte_fallback, ignore_merges;
    char *prefix, *suffix;  // continuing_subword_prefix, end_of_word_suffix (NULL: none)
    int32_t byte_ids[256];  // "<0xXX>" ids for byte_fallback, -1 when absent
    pthread_mutex_t cache_mu;
    BpeCacheSlot *cache;    // (cache_cap)
    size_t cache_cap, cache_n;
} Bpe;

Status bpe_parse(const cJSON *model, const char *what, Bpe *bpe, Err *e);
void bpe_free(Bpe *bpe);
// Token ids for one pre-tokenized piece, appended to out.
void bpe_encode_piece(const Bpe *bpe, const char *s, size_t len, TokenIds *out);

// ---- decoders -------------------------------------------------------------------------------
typedef enum { DEC_BYTELEVEL, DEC_METASPACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_REPLACE, DEC_SEQUENCE } DecKind;

typedef struct Decoder {
    DecKind kind;
    char *replacement;      // Metaspace: the replacement character (UTF-8)
    PrependScheme prepend;  // Metaspace
    TokRegex re;            // Replace
    char *content;          // Replace content; Strip content (one character, UTF-8)
    int start, stop;        // Strip
    struct Decoder **children;
    int n_children;
} Decoder;

typedef struct StrVec {
    char **v;   // (n) owned
    size_t n, cap;
} StrVec;

void strvec_push(StrVec *sv, const char *s, size_t len);
void strvec_free(StrVec *sv);

Status decoder_parse(const cJSON *j, const char *what, Decoder **out, Err *e);
void decoder_free(Decoder *d);
// Apply the chain to tokens in place (decode_chain); the caller joins the result.
void decoder_apply(const Decoder *d, StrVec *tokens);

// ---- added tokens and the tokenizer -----------------------------------------------------------
typedef struct AddedToken {
    char *content;
    char *decode_as;    // normalised content when normalized and the normalizer changes it, else NULL
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} AddedToken;

// Tokens to look for in one pass, grouped by first byte and longest first.
typedef struct AddedMatcher {
    const AddedToken **toks;    // (n) sorted by (first byte, length desc)
    char **patterns;            // (n) text matched: content, or normalised content
    size_t *pat_len;            // (n)
    int n;
    int first[257];             // toks[first[b] .. first[b+1]) start with byte b
} AddedMatcher;

typedef struct PatRef {
    const AddedToken *tok;
    char *pat;          // owned; moves into the matcher
    size_t len;
    int order;
} PatRef;

// Sort refs and take ownership of their patterns.
void matcher_build(AddedMatcher *m, PatRef *refs, int n);
void matcher_free(AddedMatcher *m);

struct Tokenizer {
    char *path;                 // tokenizer.json
    Normalizer *normalizer;
    PreTokenizer *pre;
    Bpe bpe;
    Decoder *decoder;
    int32_t *post_pre, *post_post;  // ids the post-processor adds before / after (single sequence)
    int n_post_pre, n_post_post;
    AddedToken *added;          // (n_added)
    int n_added;
    StrMap added_map;           // content -> id
    AddedMatcher raw_matcher, norm_matcher;
    int32_t vocab_size;
    const char **id_tok;        // (vocab_size)
    const char **id_dec;        // (vocab_size) the string decode starts from: id_tok, or decode_as
    uint8_t *special;           // (vocab_size)
    uint8_t *skip_dec;          // (vocab_size) id_dec is the content of a special token
    int32_t bos_id, eos_id, pad_id, unk_id;
    char *bos, *eos, *pad, *unk;
    int split_special_tokens;
    int clean_up_spaces;
    int max_captures;
};

#endif
