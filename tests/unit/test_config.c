// test_config.c: config.json parsing for qwen3 / qwen2 / llama, rope types against PyTorch fixtures.
#include "test.h"

#include "core/fileio.h"
#include "core/json.h"
#include "model/config.h"
#include "model/plan.h"
#include "model/tensors.h"

#include <dirent.h>
#include <stdint.h>

static Status parse(const char *text, ModelConfig *c, Err *e) { return config_parse(text, strlen(text), "config.json", c, e); }

static const char *qwen3_06b =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":1024,"
    "\"initializer_range\":0.02,\"intermediate_size\":3072,\"max_position_embeddings\":40960,\"max_window_layers\":28,"
    "\"model_type\":\"qwen3\",\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

static void test_qwen3(void) {
    ModelConfig c;
    Err e = {0};
    EXPECT_MSG(parse(qwen3_06b, &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(!strcmp(c.model_type, "qwen3"));
    EXPECT(c.head_dim == 128);  // explicit, not 1024/16
    EXPECT(c.hidden_size == 1024 && c.num_attention_heads == 16 && c.num_key_value_heads == 8);
    EXPECT(c.intermediate_size == 3072 && c.num_hidden_layers == 28 && c.vocab_size == 151936);
    EXPECT(c.tie_word_embeddings == 1 && c.qk_norm == 1);
    EXPECT(c.qkv_bias == 0 && c.o_bias == 0 && c.mlp_bias == 0);
    EXPECT(c.rms_norm_eps == 1e-6 && c.rope_theta == 1e6 && c.rope_scaling.type == ROPE_DEFAULT);
    EXPECT(c.max_position_embeddings == 40960);
    EXPECT(c.torch_dtype == DT_BF16);
    EXPECT(c.bos_token_id == 151643 && c.n_eos_token_ids == 1 && c.eos_token_ids[0] == 151645);
    EXPECT(c.pad_token_id == -1);
    config_free(&c);
}

static void test_qwen3_defaults(void) {
    // Absent head_dim is Qwen3Config's 128; absent num_key_value_heads is num_attention_heads.
    ModelConfig c;
    Err e = {0};
    EXPECT_MSG(parse("{\"model_type\":\"qwen3\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,"
                     "\"num_hidden_layers\":1,\"num_attention_heads\":4}",
                     &c, &e) == ST_OK,
               "%s", e.msg);
    EXPECT(c.head_dim == 128 && c.num_key_value_heads == 4);
    EXPECT(c.tie_word_embeddings == 0 && c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-6);
    EXPECT(c.max_position_embeddings == 32768 && c.initializer_range == 0.02);
    EXPECT(c.n_eos_token_ids == 0 && c.bos_token_id == -1);
    config_free(&c);
}

static void test_qwen2(void) {
    ModelConfig c;
    Err e = {0};
    const char *j = "{\"model_type\":\"qwen2\",\"vocab_size\":151936,\"hidden_size\":896,\"intermediate_size\":4864,"
                    "\"num_hidden_layers\":24,\"num_attention_heads\":14,\"num_key_value_heads\":2,"
                    "\"use_sliding_window\":false,\"sliding_window\":32768,\"max_window_layers\":21,"
                    "\"attention_bias\":false,\"tie_word_embeddings\":true,\"torch_dtype\":\"float32\","
                    "\"rope_theta\":1000000.0,\"eos_token_id\":151645}";
    EXPECT_MSG(parse(j, &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.head_dim == 64);  // 896 / 14
    EXPECT(c.qkv_bias == 1 && c.o_bias == 0 && c.qk_norm == 0 && c.mlp_bias == 0);
    EXPECT(c.torch_dtype == DT_F32 && c.tie_word_embeddings == 1);
    config_free(&c);
    // Sliding window switched on but covering no layer (max_window_layers >= L) is full attention.
    const char *j2 = "{\"model_type\":\"qwen2\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"use_sliding_window\":true,"
                     "\"sliding_window\":16,\"max_window_layers\":2}";
    EXPECT_MSG(parse(j2, &c, &e) == ST_OK, "%s", e.msg);
    config_free(&c);
}

static void test_llama(void) {
    ModelConfig c;
    Err e = {0};
    const char *j = "{\"model_type\":\"llama\",\"vocab_size\":128256,\"hidden_size\":2048,\"intermediate_size\":8192,"
                    "\"num_hidden_layers\":16,\"num_attention_heads\":32,\"num_key_value_heads\":8,\"head_dim\":64,"
                    "\"attention_bias\":true,\"mlp_bias\":true,\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,"
                    "\"eos_token_id\":[128001,128008,128009],\"bos_token_id\":128000,\"tie_word_embeddings\":true,"
                    "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
                    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"dtype\":\"bfloat16\"}";
    EXPECT_MSG(parse(j, &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.qkv_bias == 1 && c.o_bias == 1 && c.mlp_bias == 1 && c.qk_norm == 0);
    EXPECT(c.n_eos_token_ids == 3 && c.eos_token_ids[2] == 128009 && c.bos_token_id == 128000);
    EXPECT(c.rope_scaling.type == ROPE_LLAMA3 && c.rope_scaling.factor == 32.0);
    EXPECT(c.rope_scaling.original_max_position_embeddings == 8192 && c.rope_scaling.high_freq_factor == 4.0);
    EXPECT(c.rms_norm_eps == 1e-5 && c.max_position_embeddings == 2048);
    config_free(&c);
    // LlamaConfig defaults: bos 1, eos 2, head_dim = hidden / heads.
    EXPECT_MSG(parse("{\"model_type\":\"llama\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,"
                     "\"num_hidden_layers\":1,\"num_attention_heads\":4}",
                     &c, &e) == ST_OK,
               "%s", e.msg);
    EXPECT(c.head_dim == 8 && c.bos_token_id == 1 && c.n_eos_token_ids == 1 && c.eos_token_ids[0] == 2);
    EXPECT(c.qkv_bias == 0 && c.o_bias == 0);
    config_free(&c);
}

static void test_rope_parameters_v5(void) {
    ModelConfig c;
    Err e = {0};
    const char *j = "{\"model_type\":\"qwen3\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,"
                    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"head_dim\":16,"
                    "\"layer_types\":[\"full_attention\",\"full_attention\"],"
                    "\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":5000000.0,\"factor\":4.0,"
                    "\"original_max_position_embeddings\":32768}}";
    EXPECT_MSG(parse(j, &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.rope_theta == 5e6 && c.rope_scaling.type == ROPE_YARN && c.rope_scaling.factor == 4.0);
    EXPECT(c.rope_scaling.original_max_position_embeddings == 32768 && c.rope_scaling.truncate == 1);
    EXPECT(c.rope_scaling.beta_fast == 32 && c.rope_scaling.beta_slow == 1 && c.rope_scaling.attention_factor < 0);
    config_free(&c);
    const char *j2 = "{\"model_type\":\"qwen3\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"head_dim\":16,"
                     "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1000000}}";
    EXPECT_MSG(parse(j2, &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.rope_theta == 1e6 && c.rope_scaling.type == ROPE_DEFAULT);
    config_free(&c);
}

static void test_errors_inline(void) {
    ModelConfig c;
    Err e = {0};
    EXPECT(parse("{\"model_type\":\"deepseek_v3\"}", &c, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "config.json: model_type \"deepseek_v3\" is not supported (supported: qwen3, qwen2, llama");
    EXPECT(parse("{\"model_type\":\"qwen3\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":6,\"num_key_value_heads\":4}",
                 &c, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "num_key_value_heads");
    EXPECT(parse("{\"model_type\":\"llama\",\"vocab_size\":64,\"hidden_size\":30,\"intermediate_size\":48,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
                 &c, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "hidden_size (30) is not a multiple of num_attention_heads (4)");
    EXPECT(parse("{\"model_type\":\"qwen3\",\"vocab_size\":0,\"hidden_size\":32,\"intermediate_size\":48,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
                 &c, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "\"vocab_size\" is 0, expected a positive integer");
    EXPECT(parse("[1,2]", &c, &e) == ST_EINVAL);
    EXPECT(parse("{\"model_type\":", &c, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "config.json: invalid JSON");
    EXPECT(c.raw == NULL);
}

// gpt-oss-20b's config.json (the release's, with its inert experts_per_token and
// initial_context_length), without the MXFP4 quantization_config: what the family resolves.
#define GPT_OSS_20B                                                                                                \
    "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,\"attention_dropout\":0.0,"             \
    "\"eos_token_id\":200002,\"experts_per_token\":4,\"head_dim\":64,\"hidden_act\":\"silu\",\"hidden_size\":2880," \
    "\"initial_context_length\":4096,\"initializer_range\":0.02,\"intermediate_size\":2880,"                     \
    "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\"],"          \
    "\"max_position_embeddings\":131072,\"model_type\":\"gpt_oss\",\"num_attention_heads\":64,"                   \
    "\"num_experts_per_tok\":4,\"num_hidden_layers\":4,\"num_key_value_heads\":8,\"num_local_experts\":32,"        \
    "\"output_router_logits\":false,\"pad_token_id\":199999,\"rms_norm_eps\":1e-05,"                             \
    "\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,\"original_max_position_embeddings\":4096," \
    "\"rope_type\":\"yarn\",\"truncate\":false},\"rope_theta\":150000,\"router_aux_loss_coef\":0.9,"               \
    "\"sliding_window\":128,\"swiglu_limit\":7.0,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","     \
    "\"transformers_version\":\"4.55.0.dev0\",\"use_cache\":true,\"vocab_size\":201088"

static void test_gpt_oss(void) {
    ModelConfig c;
    Err e = {0};
    EXPECT_MSG(parse(GPT_OSS_20B "}", &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.qkv_bias && c.o_bias && !c.mlp_bias && c.attn_sinks && c.router_bias && c.moe_fused);
    EXPECT(c.num_experts == 32 && c.num_experts_per_tok == 4 && c.norm_topk_prob && c.moe_intermediate_size == 2880);
    EXPECT(c.swiglu_alpha == 1.702 && c.swiglu_limit == 7.0 && c.router_aux_loss_coef == 0.9 && !c.output_router_logits);
    EXPECT(c.layer_window[0] == 128 && c.layer_window[1] == 0 && c.layer_window[2] == 128 && c.layer_window[3] == 0);
    for (int l = 0; l < 4; l++) EXPECT(c.layer_moe[l]);
    const RopeScaling *rs = &c.rope_scaling;
    EXPECT(rs->type == ROPE_YARN && rs->factor == 32 && !rs->truncate && rs->original_max_position_embeddings == 4096);
    EXPECT(c.rope_theta == 150000 && c.head_dim == 64);
    config_free(&c);
    // GptOssConfig's defaults: attention_bias true, even layers sliding (window 128), YaRN, theta 150000
    EXPECT_MSG(parse("{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":16,"
                     "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"head_dim\":8,\"num_local_experts\":4}",
                     &c, &e) == ST_OK, "%s", e.msg);
    EXPECT(c.qkv_bias && c.o_bias && c.num_experts_per_tok == 4 && c.num_key_value_heads == 4);
    EXPECT(c.layer_window[0] == 128 && c.layer_window[1] == 0 && c.layer_window[2] == 128);
    EXPECT(c.rope_scaling.type == ROPE_YARN && c.rope_scaling.factor == 32 && !c.rope_scaling.truncate);
    EXPECT(c.rope_theta == 150000 && c.router_aux_loss_coef == 0.001);
    TensorTable tt;
    tensors_build(&tt, &c, DT_F32);
    const TensorInfo *gu = tensors_get(&tt, TK_XGU, 1), *sk = tensors_get(&tt, TK_SINKS, 2);
    EXPECT(gu && !strcmp(gu->name, "model.layers.1.mlp.experts.gate_up_proj") && gu->hf_xpose && gu->hf_ndim == 3);
    EXPECT(gu && gu->hf_shape[0] == 4 && gu->hf_shape[1] == 32 && gu->hf_shape[2] == 32 && gu->shape[0] == 128);
    EXPECT(sk && !strcmp(sk->name, "model.layers.2.self_attn.sinks") && sk->numel == 4 && sk->decay);
    EXPECT(tensors_find(&tt, "model.layers.0.mlp.router.bias") && tensors_find(&tt, "model.layers.0.mlp.experts.down_proj_bias"));
    EXPECT(tensors_find(&tt, "model.layers.0.self_attn.o_proj.bias") && !tensors_find(&tt, "model.layers.0.mlp.gate.weight"));
    // the checkpoint's element (e, c, o) of gate_up_proj (E, C, 2FF) is row o, column c of expert e's block
    EXPECT(gu && tensors_hf_index(gu, (size_t)(2 * 32 * 32) + 3 * 32 + 5) == (size_t)(2 * 32 * 32) + 5 * 32 + 3);
    tensors_free(&tt);
    config_free(&c);
    // refused by name
    EXPECT(parse(GPT_OSS_20B ",\"quantization_config\":{\"quant_method\":\"mxfp4\"}}", &c, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "quant_method \"mxfp4\": MXFP4 expert weights");
    EXPECT(parse(GPT_OSS_20B ",\"router_jitter_noise\":0.1}", &c, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "field \"router_jitter_noise\" is not known for model_type gpt_oss");
    EXPECT(parse("{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":16,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_local_experts\":4,\"experts_per_token\":2}",
                 &c, &e) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "experts_per_token is 2 but num_experts_per_tok is 4");
    EXPECT(parse("{\"model_type\":\"gpt_oss\",\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":16,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"layer_types\":[\"full_attention\",\"chunked\"]}",
                 &c, &e) == ST_EUNSUPPORTED);
    EXPECT_STR_CONTAINS(e.msg, "layer_types[1]");
}

static void test_to_json(void) {
    ModelConfig c, d;
    Err e = {0};
    const char *j = "{\"vocab_size\":64,\"model_type\":\"qwen3\",\"hidden_size\":32,\"intermediate_size\":48,"
                    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"head_dim\":8,\"transformers_version\":\"4.51.0\"}";
    EXPECT_MSG(parse(j, &c, &e) == ST_OK, "%s", e.msg);
    char *s = config_to_json(&c);
    // Given keys first, in their order, untouched; defaults appended.
    const char *p1 = strstr(s, "\"vocab_size\""), *p2 = strstr(s, "\"model_type\""), *p3 = strstr(s, "\"transformers_version\"");
    const char *p4 = strstr(s, "\"rope_theta\""), *p5 = strstr(s, "\"num_key_value_heads\"");
    EXPECT(p1 && p2 && p3 && p4 && p5 && p1 < p2 && p2 < p3 && p3 < p4 && p3 < p5);
    EXPECT(strstr(s, "\"head_dim\":\t8") != NULL);
    EXPECT(strstr(s, "Qwen3ForCausalLM") != NULL);
    EXPECT(strstr(s, "\"tie_word_embeddings\":\tfalse") != NULL);
    EXPECT_MSG(parse(s, &d, &e) == ST_OK, "%s", e.msg);
    EXPECT(d.head_dim == 8 && d.num_key_value_heads == 4 && d.rope_theta == c.rope_theta);
    EXPECT(d.torch_dtype == c.torch_dtype && d.rms_norm_eps == c.rms_norm_eps);
    // Idempotent: a second pass adds nothing.
    char *s2 = config_to_json(&d);
    EXPECT(!strcmp(s, s2));
    free(s);
    free(s2);
    config_free(&c);
    config_free(&d);
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// Every fixture of scripts/ref_rope.py: inv_freq within 1 ulp of PyTorch's fp32 (and counted
// exact), attention factor to double precision.
static void test_rope_fixtures(void) {
    DIR *d = opendir("tests/data/rope");
    EXPECT(d != NULL);
    if (!d) return;
    struct dirent *de;
    int files = 0, exact = 0, total = 0;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 5, ".json")) continue;
        char *p = path_join("tests/data/rope", de->d_name);
        cJSON *root = NULL;
        Err e = {0};
        EXPECT_MSG(json_parse_file(p, &root, &e) == ST_OK, "%s", e.msg);
        if (!root) {
            free(p);
            continue;
        }
        char *cfg_text = cJSON_PrintUnformatted(cJSON_GetObjectItem(root, "config"));
        ModelConfig c;
        EXPECT_MSG(config_parse(cfg_text, strlen(cfg_text), p, &c, &e) == ST_OK, "%s", e.msg);
        const cJSON *bits = cJSON_GetObjectItem(root, "inv_freq_bits");
        int half = cJSON_GetArraySize(bits);
        EXPECT(half == c.head_dim / 2);
        float inv[512], ms;
        config_rope_inv_freq(&c, inv, &ms);
        for (int i = 0; i < half && i < 512; i++) {
            uint32_t want = (uint32_t)cJSON_GetArrayItem(bits, i)->valuedouble, got = f32_bits(inv[i]);
            int64_t ulp = (int64_t)got - (int64_t)want;
            EXPECT_MSG(ulp >= -1 && ulp <= 1, "%s: inv_freq[%d] = %.9g, torch %.9g", de->d_name, i, inv[i],
                       cJSON_GetArrayItem(cJSON_GetObjectItem(root, "inv_freq"), i)->valuedouble);
            exact += ulp == 0;
            total++;
        }
        double af = cJSON_GetObjectItem(root, "attention_factor")->valuedouble;
        EXPECT_MSG(fabs(ms - af) <= 1e-7 * fabs(af), "%s: attention factor %.9g, torch %.9g", de->d_name, ms, af);
        config_free(&c);
        cJSON_free(cfg_text);
        cJSON_Delete(root);
        free(p);
        files++;
    }
    closedir(d);
    EXPECT(files >= 9);
    printf("# rope fixtures: %d files, %d of %d inv_freq values bit-exact\n", files, exact, total);
}

// A qwen3 config with these sizes (heads = kv heads).
static Status sized(ModelConfig *c, Err *e, long long V, long long C, long long FF, long long L, long long NH,
                    long long HD) {
    char text[512];
    snprintf(text, sizeof text,
             "{\"model_type\":\"qwen3\",\"vocab_size\":%lld,\"hidden_size\":%lld,\"intermediate_size\":%lld,"
             "\"num_hidden_layers\":%lld,\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld}",
             V, C, FF, L, NH, NH, HD);
    memset(e, 0, sizeof *e);
    return parse(text, c, e);
}

// Every size is bounded before anything is sized from it; within the bounds every tensor and
// plan size is exact (heads = head_dim = 65536 once made an int product of 2^32 = 0 and a 1-D
// o_proj).
static void test_size_limits(void) {
    ModelConfig c;
    Err e;
    EXPECT(sized(&c, &e, 64, 32, 48, 1, 65536, 65536) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "config.json: field \"num_attention_heads\" is 65536, more than the 1024 still supports");
    EXPECT(sized(&c, &e, 64, 32, 48, 1, 4, 512) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "field \"head_dim\" is 512, more than the 256 still supports (the attention kernels)");
    EXPECT(sized(&c, &e, (1 << 20) + 1, 32, 48, 1, 4, 8) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "field \"vocab_size\" is 1048577, more than the 1048576 still supports");
    EXPECT(sized(&c, &e, 64, 1 << 17, 48, 1, 4, 8) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "\"hidden_size\" is 131072");
    EXPECT(sized(&c, &e, 64, 32, 1 << 19, 1, 4, 8) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "\"intermediate_size\" is 524288");
    EXPECT(sized(&c, &e, 64, 32, 48, 1025, 4, 8) == ST_EINVAL);
    EXPECT_STR_CONTAINS(e.msg, "\"num_hidden_layers\" is 1025");
    // the largest config accepted: every tensor has its shape, the sizes are exact products
    EXPECT(sized(&c, &e, CONFIG_MAX_VOCAB, CONFIG_MAX_HIDDEN, CONFIG_MAX_INTERMEDIATE, CONFIG_MAX_LAYERS,
                 CONFIG_MAX_HEADS, CONFIG_MAX_HEAD_DIM) == ST_OK);
    TensorTable tt;
    tensors_build(&tt, &c, DT_BF16);
    const TensorInfo *o = tensors_get(&tt, TK_WO, CONFIG_MAX_LAYERS - 1), *q = tensors_get(&tt, TK_WQ, 0);
    EXPECT(o && o->ndim == 2 && o->shape[0] == CONFIG_MAX_HIDDEN && o->shape[1] == (int64_t)CONFIG_MAX_HEADS * CONFIG_MAX_HEAD_DIM);
    EXPECT(q && q->numel == (size_t)CONFIG_MAX_HEADS * CONFIG_MAX_HEAD_DIM * CONFIG_MAX_HIDDEN);
    size_t C = CONFIG_MAX_HIDDEN, QD = (size_t)CONFIG_MAX_HEADS * CONFIG_MAX_HEAD_DIM, FF = CONFIG_MAX_INTERMEDIATE;
    size_t per_layer = 4 * QD * C + 3 * FF * C + 2 * C + 2 * CONFIG_MAX_HEAD_DIM;  // q k v o, gate up down, norms
    size_t want = per_layer * CONFIG_MAX_LAYERS + 2 * (size_t)CONFIG_MAX_VOCAB * C + C;  // + embed, lm_head, norm
    EXPECT(tt.n_params == want);
    tensors_free(&tt);
    // a plan of it: sized in size_t (terabytes here), not wrapped
    size_t bytes = plan_bytes(&c, PLAN_TRAIN, 4, 1024, plan_head_chunk(c.vocab_size));
    EXPECT(bytes > (size_t)CONFIG_MAX_LAYERS * 4096 * FF * 3 * sizeof(float));
    config_free(&c);
}

int main(void) {
    RUN(test_qwen3);
    RUN(test_qwen3_defaults);
    RUN(test_qwen2);
    RUN(test_llama);
    RUN(test_rope_parameters_v5);
    RUN(test_errors_inline);
    RUN(test_gpt_oss);
    RUN(test_to_json);
    RUN(test_rope_fixtures);
    RUN(test_size_limits);
    TEST_MAIN_END();
}
