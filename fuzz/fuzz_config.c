// fuzz_config.c: the input is config.json text for config_parse; a config that parses is also
// serialised again, its RoPE frequencies computed, its tensor table built and plans sized (what
// `still init`, `still info` and the model do next): every size a config allows must fit.
#include "fuzz.h"

#include "core/alloc.h"
#include "model/config.h"
#include "model/plan.h"
#include "model/tensors.h"

Status fuzz_config(const uint8_t *data, size_t size, Err *e) {
    ModelConfig cfg;
    Status st = config_parse((const char *)data, size, "config.json", &cfg, e);
    if (st != ST_OK) return st;
    free(config_to_json(&cfg));
    float *inv = xmalloc(((size_t)cfg.head_dim / 2 + 1) * sizeof *inv), mscale;
    config_rope_inv_freq(&cfg, inv, &mscale);
    free(inv);
    TensorTable tt;
    tensors_build(&tt, &cfg, DT_BF16);
    const TensorInfo *o = tensors_get(&tt, TK_WO, 0);
    CHECK(o && o->ndim == 2 && o->shape[0] == cfg.hidden_size &&
          o->shape[1] == (int64_t)cfg.num_attention_heads * cfg.head_dim);
    CHECK(tt.param_bytes >= tt.n_params * 2);
    tensors_free(&tt);
    int chunk = plan_head_chunk(cfg.vocab_size);
    size_t train = plan_bytes(&cfg, PLAN_TRAIN, 4, 256, chunk);
    size_t decode = plan_bytes_cached(&cfg, PLAN_DECODE, 4, 1, 256);
    CHECK(train > 0 && decode > 0);
    config_free(&cfg);
    return ST_OK;
}

FUZZ_ENTRY(config)
