// fuzz_tokenizer_encode.c: Qwen3's real tokenizer (loaded once from $STILL_FUZZ_TOKENIZER) on
// arbitrary bytes. Byte 0 holds flags (bit 0 add_special_tokens, bit 1 skip_special_tokens);
// the rest is encoded as text (invalid UTF-8 must be an error, not a crash), the ids decoded
// and stream-decoded, and the same bytes read as little-endian int32 ids (any value,
// out-of-range ones included) are decoded and stream-decoded too.
#include "fuzz.h"

#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

static const Tokenizer *qwen3(void) {
    static Tokenizer *tok;
    if (tok) return tok;
    const char *dir = getenv(FUZZ_ENV_TOKENIZER);
    Err e = {0};
    CHECK_MSG(dir && *dir, "set %s to a tokenizer directory", FUZZ_ENV_TOKENIZER);
    CHECK_MSG(tokenizer_load(dir, &tok, &e) == ST_OK, "%s", e.msg);
    return tok;
}

static void decode_all(const Tokenizer *tok, const int32_t *ids, size_t n, int skip) {
    free(tokenizer_decode(tok, ids, n, skip));
    TokenizerStream s;
    tokenizer_stream_init(&s, tok, skip);
    for (size_t i = 0; i < n; i++) free(tokenizer_stream_step(&s, ids[i]));
    tokenizer_stream_free(&s);
}

Status fuzz_tokenizer_encode(const uint8_t *data, size_t size, Err *e) {
    if (size == 0) return ST_OK;
    const Tokenizer *tok = qwen3();
    int add_special = data[0] & 1, skip_special = (data[0] >> 1) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t vs = tokenizer_vocab_size(tok);
    TokenIds ids = {0};
    Status st = tokenizer_encode(tok, text, len, add_special, &ids, e);
    if (st == ST_OK) {
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= vs) {
                fprintf(stderr, "fuzz_tokenizer_encode: id %d outside the vocabulary (%d)\n", ids.ids[i], vs);
                abort();
            }
        decode_all(tok, ids.ids, ids.n, skip_special);
    }
    tokenizer_ids_free(&ids);
    size_t n = len / 4;
    int32_t *raw = malloc(n * sizeof *raw + 1);
    CHECK(raw);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = data + 1 + 4 * i;
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        // Mostly ids near the vocabulary (its edges included); any int32 when the top bit is set.
        raw[i] = (u >> 31) ? (int32_t)u : (int32_t)(u % (uint32_t)(vs + 16)) - 8;
    }
    decode_all(tok, raw, n, skip_special);
    free(raw);
    return st;
}

FUZZ_ENTRY(tokenizer_encode)
