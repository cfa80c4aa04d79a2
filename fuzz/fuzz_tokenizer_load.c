// fuzz_tokenizer_load.c: the input is tokenizer.json text, then optionally a NUL byte and
// tokenizer_config.json text; both are written to a directory that tokenizer_load reads. A
// tokenizer that loads also encodes and decodes a fixed text, so components that parse into
// inconsistent state are exercised too.
#include "fuzz.h"

#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

Status fuzz_tokenizer_load(const uint8_t *data, size_t size, Err *e) {
    const char *dir = fuzz_tmpdir();
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    fuzz_write_file(dir, "tokenizer.json", data, json_len);
    char cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    if (nul) fuzz_write_file(dir, "tokenizer_config.json", nul + 1, size - json_len - 1);
    else remove(cfg);
    Tokenizer *tok = NULL;
    Status st = tokenizer_load(dir, &tok, e);
    if (st != ST_OK) {
        if (tok) abort();  // a failed load hands back nothing
        return st;
    }
    static const char text[] = "Hello, world! <|im_start|>  ab\n\n12345 \xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 aaaa";
    TokenIds ids = {0};
    Err e2 = {0};
    Status est = tokenizer_encode(tok, text, sizeof text - 1, 1, &ids, &e2);
    fuzz_check_status("tokenizer_load (encode)", est, &e2);
    int32_t vs = tokenizer_vocab_size(tok);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= vs) {
            fprintf(stderr, "fuzz_tokenizer_load: id %d outside the vocabulary (%d)\n", ids.ids[i], vs);
            abort();
        }
    for (int skip = 0; skip < 2; skip++) free(tokenizer_decode(tok, ids.ids, ids.n, skip));
    for (int32_t id = -1; id <= vs && id < 64; id++) {
        tokenizer_id_to_token(tok, id);
        tokenizer_is_special(tok, id);
    }
    tokenizer_ids_free(&ids);
    tokenizer_free(tok);
    return ST_OK;
}

FUZZ_ENTRY(tokenizer_load)
