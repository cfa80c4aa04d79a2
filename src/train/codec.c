// codec.c: TextCodec over the tokenizer and the chat-template interpreter.
#include "codec.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/tokenizer.h"

#include <string.h>

static Status enc(void *ctx, const char *text, size_t len, int add_special, I32Vec *out, Err *e) {
    ModelCodec *mc = ctx;
    TokenIds ids = {0};
    Status st = tokenizer_encode(mc->tok, text, len, add_special, &ids, e);
    for (size_t i = 0; st == ST_OK && i < ids.n; i++) i32vec_push(out, ids.ids[i]);
    tokenizer_ids_free(&ids);
    return st;
}

static Status render(void *ctx, const cJSON *messages, const cJSON *tools, int add_gen, const cJSON *kwargs, char **out,
                     TextSpan **spans, int *n_spans, Err *e) {
    ModelCodec *mc = ctx;
    GenSpans gs = {0};
    Status st = chat_template_render(mc->tmpl, messages, tools, NULL, add_gen, kwargs, out, spans ? &gs : NULL, e);
    if (st == ST_OK && spans) {
        *spans = xcalloc(gs.n + 1, sizeof(TextSpan));
        for (size_t i = 0; i < gs.n; i++) (*spans)[i] = (TextSpan){gs.spans[i].start, gs.spans[i].end};
        *n_spans = (int)gs.n;
    }
    gen_spans_free(&gs);
    return st;
}

Status model_codec_load(ModelCodec *mc, const char *dir, const char *eos_token, Err *e) {
    memset(mc, 0, sizeof *mc);
    char *tj = path_join(dir, "tokenizer.json");
    int have = file_exists(tj);
    free(tj);
    if (!have)
        return err_set(e, ST_ENOTFOUND, "%s has no tokenizer.json: text datasets need one (pre-tokenised "
                                        "\"input_ids\" rows do not)", dir);
    TRY(tokenizer_load(dir, &mc->tok, e));
    Err e2 = {0};
    if (chat_template_load(dir, NULL, &mc->tmpl, &e2) != ST_OK) mc->tmpl = NULL;  // no template: text formats only
    TextCodec *c = &mc->codec;
    c->ctx = mc;
    c->vocab_size = tokenizer_vocab_size(mc->tok);
    c->encode = enc;
    c->render = mc->tmpl ? render : NULL;
    const char *eos = eos_token ? eos_token : tokenizer_eos_token(mc->tok);
    mc->eos_token = eos ? xstrdup(eos) : NULL;
    c->eos_token = mc->eos_token;
    c->eos_id = eos ? tokenizer_token_to_id(mc->tok, eos) : -1;
    if (eos_token && c->eos_id < 0) {
        model_codec_free(mc);
        return err_set(e, ST_EINVAL, "--eos_token %s is not a token of %s/tokenizer.json", eos_token, dir);
    }
    if (mc->tmpl) {  // does the template mark assistant replies? render a probe conversation
        cJSON *probe = cJSON_Parse("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]");
        char *out = NULL;
        GenSpans gs = {0};
        if (chat_template_render(mc->tmpl, probe, NULL, NULL, 0, NULL, &out, &gs, &e2) == ST_OK)
            c->has_generation_blocks = gs.n > 0;
        free(out);
        gen_spans_free(&gs);
        cJSON_Delete(probe);
    }
    return ST_OK;
}

void model_codec_free(ModelCodec *mc) {
    if (mc->tok) tokenizer_free(mc->tok);
    if (mc->tmpl) chat_template_free(mc->tmpl);
    free(mc->eos_token);
    memset(mc, 0, sizeof *mc);
}

int32_t model_codec_pad_id(const ModelCodec *mc) {
    int32_t pad = tokenizer_pad_id(mc->tok);
    return pad >= 0 ? pad : mc->codec.eos_id;
}
