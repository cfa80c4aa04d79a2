// fuzz_config.c: the input is config.json text for config_parse; a config that parses is also
// serialised again and its RoPE frequencies computed (what `still init` and the model do next).
#include "fuzz.h"

#include "core/alloc.h"
#include "model/config.h"

Status fuzz_config(const uint8_t *data, size_t size, Err *e) {
    ModelConfig cfg;
    Status st = config_parse((const char *)data, size, "config.json", &cfg, e);
    if (st != ST_OK) return st;
    free(config_to_json(&cfg));
    if (cfg.head_dim <= 1 << 16) {
        float *inv = xmalloc(((size_t)cfg.head_dim / 2 + 1) * sizeof *inv), mscale;
        config_rope_inv_freq(&cfg, inv, &mscale);
        free(inv);
    }
    config_free(&cfg);
    return ST_OK;
}

FUZZ_ENTRY(config)
