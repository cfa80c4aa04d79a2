// fuzz.h: what the fuzz targets share. Each fuzz/fuzz_NAME.c defines
//     Status fuzz_NAME(const uint8_t *data, size_t size, Err *e)
// which runs one parser on one input and returns its status. Built with -DSTILL_LIBFUZZER
// (scripts/fuzz.sh), FUZZ_ENTRY adds the libFuzzer entry point around it; built without, the
// same functions replay tests/data/fuzz-regressions/NAME/* in tests/unit/test_fuzz_regressions.c.
//
// Besides "no crash, no leak, no undefined behaviour" (the sanitizers), every target checks one
// contract of STYLE.md rule 5: a failing parser returns a known Status with a message.
#ifndef STILL_FUZZ_H
#define STILL_FUZZ_H

#include "core/common.h"

#include <stddef.h>
#include <stdint.h>

// name, one line of what the input is
#define FUZZ_TARGETS(X)                                                                            \
    X(safetensors, "a .safetensors file (st_open)")                                                \
    X(config, "config.json text (config_parse)")                                                   \
    X(tokenizer_load, "tokenizer.json, NUL, tokenizer_config.json (tokenizer_load)")               \
    X(tokenizer_encode, "flag byte + text to encode with Qwen3's tokenizer; also decoded as ids")  \
    X(chat_template, "template source rendered with fixed messages and tools")                     \
    X(chat_messages, "flag byte + messages JSON, NUL, kwargs JSON for the Qwen3 / Llama 3 templates") \
    X(args, "command line, one argument per line (args_parse)")                                    \
    X(args_config, "--config file text, JSON or YAML (args_parse)")                                \
    X(dataset, "2 option bytes + an SFT dataset file, JSONL or a JSON array (data_load)")          \
    X(gguf, "a GGUF file (gguf_parse, dequantization, gguf_model_open, tokenizer_load)")           \
    X(reward_data, "1 option byte + a preference-pair file, JSONL or a JSON array (reward_data_load)") \
    X(serve_request, "endpoint byte + an OpenAI request body (serve_request_parse, tool calls)")

#define FUZZ_DECLARE(name, what) Status fuzz_##name(const uint8_t *data, size_t size, Err *e);
FUZZ_TARGETS(FUZZ_DECLARE)
#undef FUZZ_DECLARE

// Environment: the unpacked Qwen3 tokenizer directory (tokenizer.json + tokenizer_config.json)
// and the directory holding tests/data (the repository root); scripts/fuzz.sh and the
// regression test set both.
#define FUZZ_ENV_TOKENIZER "STILL_FUZZ_TOKENIZER"
#define FUZZ_ENV_ROOT "STILL_FUZZ_ROOT"

// A private directory for files a target writes (made once per process, under $TMPDIR).
const char *fuzz_tmpdir(void);
// Write data to dir/name; aborts on failure (the harness, not the parser, is broken).
void fuzz_write_file(const char *dir, const char *name, const void *data, size_t size);
// Copy of data[0, size) with a NUL appended. Caller frees.
char *fuzz_strndup(const uint8_t *data, size_t size);
// Path under the repository root (static buffer per call slot; four slots).
const char *fuzz_root_path(const char *rel);
// Abort unless st is a known Status and, when not ST_OK, e holds a message.
void fuzz_check_status(const char *target, Status st, const Err *e);

#ifdef STILL_LIBFUZZER
#define FUZZ_ENTRY(name)                                                                           \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);                                  \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {                                 \
        Err e = {0};                                                                               \
        fuzz_check_status(#name, fuzz_##name(data, size, &e), &e);                                 \
        return 0;                                                                                  \
    }
#else
#define FUZZ_ENTRY(name)
#endif

#endif
