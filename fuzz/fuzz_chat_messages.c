// fuzz_chat_messages.c: the real Qwen3 and Llama 3 templates (tests/data/chat/models) on fuzzed
// input. Byte 0 holds flags (bit 0 add_generation_prompt, bit 1 Llama 3 instead of Qwen3); the
// rest is the messages JSON (an array, or an object with messages / tools / other variables),
// then optionally a NUL byte and chat_template_kwargs JSON.
#include "fuzz.h"

#include "core/alloc.h"
#include "tokenizer/chat.h"

#include <string.h>

static const ChatTemplate *model_template(int llama) {
    static ChatTemplate *t[2];
    if (!t[llama]) {
        Err e = {0};
        const char *dir = fuzz_root_path(llama ? "tests/data/chat/models/llama3" : "tests/data/chat/models/qwen3");
        CHECK_MSG(chat_template_load(dir, NULL, &t[llama], &e) == ST_OK, "%s (set %s to the repository root)", e.msg,
                  FUZZ_ENV_ROOT);
        chat_template_set_now(t[llama], 1700000000);
    }
    return t[llama];
}

Status fuzz_chat_messages(const uint8_t *data, size_t size, Err *e) {
    if (size == 0) return ST_OK;
    int add_gen = data[0] & 1, llama = (data[0] >> 1) & 1;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    const uint8_t *nul = memchr(p, 0, n);
    size_t msg_len = nul ? (size_t)(nul - p) : n;
    char *input = fuzz_strndup(p, msg_len);
    char *kwargs = nul ? fuzz_strndup(nul + 1, n - msg_len - 1) : NULL;
    char *out = NULL;
    GenSpans spans = {0};
    Status st = chat_template_render_json(model_template(llama), input, kwargs, add_gen, &out, &spans, e);
    free(out);
    gen_spans_free(&spans);
    free(input);
    free(kwargs);
    return st;
}

FUZZ_ENTRY(chat_messages)
