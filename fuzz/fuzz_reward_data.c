// fuzz_reward_data.c: preference-pair files (reward_data_load: JSONL or one JSON array, text,
// conversational and pre-tokenised pairs, margins) through the small tokenizer + chat template of
// tests/data/sft/tok (or no codec). Byte 0 holds the options; the rest is the file. Every pair
// that loads must have non-empty sequences, ids inside the vocabulary when it is enforced, no more
// tokens than max_length when it is set, and a finite margin.
//   byte 0: bit 0 max_length 16, bit 1 skip_bad_rows, bit 2 enforce vocab_size, bit 3 no codec,
//           bit 4 chat_template_kwargs {"enable_thinking": false}
#include "fuzz.h"

#include "train/codec.h"
#include "train/reward_data.h"

#include <math.h>
#include <stdio.h>

static const TextCodec *codec(void) {
    static ModelCodec mc;
    static int loaded;
    if (!loaded) {
        Err e = {0};
        CHECK_MSG(model_codec_load(&mc, fuzz_root_path("tests/data/sft/tok"), NULL, &e) == ST_OK,
                  "%s (set %s to the repository root)", e.msg, FUZZ_ENV_ROOT);
        loaded = 1;
    }
    return &mc.codec;
}

static void check_seq(const int32_t *ids, int n, int i, const RewardDataConfig *cfg) {
    if (n <= 0 || (cfg->max_length > 0 && n > cfg->max_length)) {
        fprintf(stderr, "fuzz_reward_data: pair %d has a sequence of %d tokens (max_length %d)\n", i, n,
                cfg->max_length);
        abort();
    }
    for (int k = 0; k < n; k++)
        if (ids[k] < 0 || (cfg->vocab_size > 0 && ids[k] >= cfg->vocab_size)) {
            fprintf(stderr, "fuzz_reward_data: pair %d token %d: id %d (vocab %d)\n", i, k, ids[k], cfg->vocab_size);
            abort();
        }
}

Status fuzz_reward_data(const uint8_t *data, size_t size, Err *e) {
    if (size < 1) return ST_OK;
    uint8_t f = data[0];
    const TextCodec *c = (f & 8) ? NULL : codec();
    cJSON *kwargs = (f & 16) ? cJSON_Parse("{\"enable_thinking\": false}") : NULL;
    RewardDataConfig cfg = {.max_length = (f & 1) ? 16 : 0, .skip_bad_rows = (f >> 1) & 1,
                            .vocab_size = (f & 4) ? (c ? c->vocab_size : 512) : 0, .chat_template_kwargs = kwargs};
    const char *dir = fuzz_tmpdir();
    fuzz_write_file(dir, "pairs.jsonl", data + 1, size - 1);
    char path[1100];
    snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
    int is_pairs = 0, ids = 0;
    Status st = reward_data_detect(path, &is_pairs, &ids, e);
    RewardPairs rp;
    if (st == ST_OK) st = reward_data_load(path, &cfg, c, &rp, e);
    if (st == ST_OK) {
        for (int i = 0; i < rp.n; i++) {
            check_seq(rp.p[i].chosen, rp.p[i].n_chosen, i, &cfg);
            check_seq(rp.p[i].rejected, rp.p[i].n_rejected, i, &cfg);
            if (!isfinite(rp.p[i].margin)) {
                fprintf(stderr, "fuzz_reward_data: pair %d has margin %g\n", i, rp.p[i].margin);
                abort();
            }
        }
        reward_pairs_free(&rp);
    }
    cJSON_Delete(kwargs);
    return st;
}

FUZZ_ENTRY(reward_data)
