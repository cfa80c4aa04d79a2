// fuzz_dataset.c: SFT dataset files (data_load: JSONL or one JSON array, in every TRL format)
// through the small tokenizer + chat template of tests/data/sft/tok (or tok_nogen, or no codec).
// Byte 0 and byte 1 hold the options; the rest is the file. Every example that loads must be
// non-empty, carry a 0/1 mask and, when the vocabulary is enforced, ids inside it.
//   byte 0: bit 0 max_length 16, bit 1 truncate, bits 2-3 completion_only_loss (-1, 0, 1, 1),
//           bit 4 assistant_only_loss, bit 5 skip_bad_rows, bit 6 enforce vocab_size,
//           bit 7 chat_template_kwargs {"enable_thinking": false}
//   byte 1: bit 0 tok_nogen instead of tok, bit 1 no codec (pre-tokenised rows only)
#include "fuzz.h"

#include "train/codec.h"

#include <stdio.h>

static const TextCodec *codec(int which) {
    static ModelCodec mc[2];
    static int loaded[2];
    if (!loaded[which]) {
        Err e = {0};
        const char *dir = fuzz_root_path(which ? "tests/data/sft/tok_nogen" : "tests/data/sft/tok");
        CHECK_MSG(model_codec_load(&mc[which], dir, NULL, &e) == ST_OK, "%s (set %s to the repository root)", e.msg,
                  FUZZ_ENV_ROOT);
        loaded[which] = 1;
    }
    return &mc[which].codec;
}

Status fuzz_dataset(const uint8_t *data, size_t size, Err *e) {
    if (size < 2) return ST_OK;
    uint8_t f0 = data[0], f1 = data[1];
    const TextCodec *c = (f1 & 2) ? NULL : codec(f1 & 1);
    cJSON *kwargs = (f0 & 128) ? cJSON_Parse("{\"enable_thinking\": false}") : NULL;
    int col = (f0 >> 2) & 3;
    DataConfig cfg = {
        .text_field = "text",
        .max_length = (f0 & 1) ? 16 : 0,
        .truncate = (f0 >> 1) & 1,
        .completion_only_loss = col == 0 ? -1 : col == 1 ? 0 : 1,
        .assistant_only_loss = (f0 >> 4) & 1,
        .chat_template_kwargs = kwargs,
        .skip_bad_rows = (f0 >> 5) & 1,
        .vocab_size = (f0 & 64) ? (c ? c->vocab_size : 512) : 0,
    };
    const char *dir = fuzz_tmpdir();
    fuzz_write_file(dir, "data.jsonl", data + 2, size - 2);
    char path[1100];
    snprintf(path, sizeof path, "%s/data.jsonl", dir);
    Dataset d;
    Status st = data_load(path, &cfg, c, &d, e);
    if (st == ST_OK) {
        for (int i = 0; i < d.n; i++) {
            const Example *x = &d.ex[i];
            if (x->n <= 0) {
                fprintf(stderr, "fuzz_dataset: example %d is empty\n", i);
                abort();
            }
            for (int k = 0; k < x->n; k++)
                if (x->mask[k] > 1 || x->ids[k] < 0 || (cfg.vocab_size > 0 && x->ids[k] >= cfg.vocab_size)) {
                    fprintf(stderr, "fuzz_dataset: example %d token %d: id %d mask %d (vocab %d)\n", i, k, x->ids[k],
                            x->mask[k], cfg.vocab_size);
                    abort();
                }
        }
        data_free(&d);
    }
    cJSON_Delete(kwargs);
    return st;
}

FUZZ_ENTRY(dataset)
