// cmd_info.c: still info — architecture, parameter count, and the plans and memory a shape needs.
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/meminfo.h"
#include "../model/family.h"
#include "../model/lora.h"
#include "../model/mem_plan.h"
#include "../model/tensors.h"
#include "../train/fsdp.h"
#include "../train/tp.h"
#include "cli_common.h"
#include "commands.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, "model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"batch", ARG_INT, "1", "batch size B of the shape to plan", "[1,inf)"},
    {"seq", ARG_INT, "128", "sequence length T of the shape to plan", "[1,inf)"},
    {"teacher", ARG_STR, NULL, "also the memory of distillation: student training + this teacher's inference (or self)"},
    {"teacher_dtype", ARG_STR, NULL, "teacher weight storage: float32 | bfloat16 | q8_0 (default: its checkpoint's)"},
    {"lora_r", ARG_INT, "16", "rank of the LoRA row (all-linear adapters on the frozen base)", "[1,inf)"},
    {"max_new_tokens", ARG_INT, "256", "new tokens of the generate row (cache: seq + max_new_tokens, rounded up to 128)", "[1,inf)"},
    {"tp_size", ARG_INT, NULL, "also the per-rank training memory on a mesh of this tensor-parallel size (or $TP_SIZE)", "[1,4096]"},
    {"fsdp_size", ARG_INT, NULL, "... and this FSDP size (ZeRO-3; or $FSDP_SIZE)", "[1,65536]"},
    {NULL, 0, NULL, NULL},
};

static double mib(size_t b) { return (double)b / 1048576.0; }

static const char *rope_name(RopeType t) {
    switch (t) {
    case ROPE_LLAMA3: return "llama3";
    case ROPE_YARN: return "yarn";
    case ROPE_LINEAR: return "linear";
    case ROPE_LONGROPE: return "longrope";
    default: return "default";
    }
}

// One layer's attention as the family table resolved it.
static void layer_attention_text(const ModelConfig *cfg, int l, char *buf, size_t n) {
    int w = cfg->layer_window[l];
    size_t k = 0;
    if (w > 0) k += (size_t)snprintf(buf + k, n - k, "sliding window %d", w);
    else k += (size_t)snprintf(buf + k, n - k, "global");
    if (cfg->layer_rope[l]) k += (size_t)snprintf(buf + k, n - k, ", rope theta %g (local)", cfg->rope_local_theta);
    else
        k += (size_t)snprintf(buf + k, n - k, ", rope theta %g (%s)", cfg->rope_theta,
                              rope_name(cfg->rope_scaling.type));
    if (cfg->rope_scaling.type == ROPE_LONGROPE && !cfg->layer_rope[l])
        k += (size_t)snprintf(buf + k, n - k, " long_factor beyond %g positions, attention factor %g",
                              cfg->rope_scaling.original_max_position_embeddings, cfg->rope_scaling.attention_factor);
    if (cfg->rotary_dim < cfg->head_dim)
        k += (size_t)snprintf(buf + k, n - k, ", rotary dims %d of %d", cfg->rotary_dim, cfg->head_dim);
    if (cfg->query_scale != 0) k += (size_t)snprintf(buf + k, n - k, ", query scale %g", cfg->query_scale);
    else k += (size_t)snprintf(buf + k, n - k, ", query scale 1/sqrt(%d)", cfg->head_dim);
    if (cfg->attn_softcap != 0) k += (size_t)snprintf(buf + k, n - k, ", soft-cap %g", cfg->attn_softcap);
    if (cfg->attn_sinks) snprintf(buf + k, n - k, ", a sink logit per head");
}

// The mixture of experts and YaRN as resolved (nothing for a dense model with another rope).
static void print_moe_rope(const ModelConfig *cfg) {
    const RopeScaling *rs = &cfg->rope_scaling;
    if (rs->type == ROPE_YARN) {
        float inv[ROPE_MAX_FACTORS], ms;
        config_rope_inv_freq(cfg, inv, &ms);
        printf("rope            yarn: factor %g, beta_fast %g, beta_slow %g, original_max_position_embeddings %g, "
               "truncate %s, attention factor %.6g\n",
               rs->factor, rs->beta_fast, rs->beta_slow, rs->original_max_position_embeddings,
               rs->truncate ? "yes" : "no", (double)ms);
    }
    if (cfg->num_experts <= 0) return;
    int sparse = 0;
    for (int l = 0; l < cfg->num_hidden_layers; l++) sparse += cfg->layer_moe[l];
    printf("experts         %d of %d layers sparse: %d experts of mlp %d, top %d weighted by %s, router bias %s\n",
           sparse, cfg->num_hidden_layers, cfg->num_experts, cfg->moe_intermediate_size, cfg->num_experts_per_tok,
           cfg->norm_topk_prob ? "a softmax over their logits" : "their softmax probabilities",
           cfg->router_bias ? "yes" : "no");
    if (cfg->moe_fused)
        printf("experts         one gate_up_proj (gate / up interleaved) and down_proj per layer, with biases; "
               "(clamp(up, +-%g) + 1) * g * sigmoid(%g g), g = min(gate, %g)\n",
               cfg->swiglu_limit, cfg->swiglu_alpha, cfg->swiglu_limit);
    printf("aux loss        router_aux_loss_coef %g, %s (output_router_logits)\n", cfg->router_aux_loss_coef,
           cfg->output_router_logits ? "added in training" : "off");
}

// What the family table resolved: the layer structure and each run of layers' attention.
static void print_family(const ModelConfig *cfg) {
    const FamilyDesc *fd = cfg->family;
    unsigned nm = cfg->norms;
    printf("family          %s (%s): norms%s%s%s%s%s, act %s, qk norm %s, embedding scale %g%s%s%s\n",
           fd->model_type, config_architecture(cfg), nm & NORM_PRE_ATTN ? " pre-attention" : "",
           nm & NORM_POST_ATTN ? " post-attention" : "", nm & NORM_PRE_MLP ? " pre-mlp" : "",
           nm & NORM_POST_MLP ? " post-mlp" : "", cfg->norm_plus_one ? " (1 + w)" : "",
           cfg->act == ACT_SILU ? "silu" : "gelu_pytorch_tanh",
           cfg->qk_norm == QKNORM_HEAD ? "per head" : cfg->qk_norm == QKNORM_PROJ ? "over the projection" : "none",
           (double)cfg->embed_scale, cfg->fused_qkv ? ", fused qkv_proj" : "",
           cfg->fused_gate_up ? ", fused gate_up_proj" : "", cfg->final_softcap != 0 ? ", final soft-cap" : "");
    if (cfg->final_softcap != 0) printf("final soft-cap  %g\n", cfg->final_softcap);
    print_moe_rope(cfg);
    char cur[256], next[256];
    int start = 0;
    layer_attention_text(cfg, 0, cur, sizeof cur);
    for (int l = 1; l <= cfg->num_hidden_layers; l++) {
        if (l < cfg->num_hidden_layers) layer_attention_text(cfg, l, next, sizeof next);
        if (l == cfg->num_hidden_layers || strcmp(cur, next)) {
            if (l - 1 == start) printf("attention       layer %d: %s\n", start, cur);
            else printf("attention       layers %d-%d: %s\n", start, l - 1, cur);
            start = l;
            memcpy(cur, next, sizeof cur);
        }
    }
}

// LoRA training at a shape: frozen base weights in wdt, fp32 all-linear adapters of rank r with
// their gradients and AdamW moments, and one train plan (checkpointed or not). fsdp > 1: per rank
// under --fsdp_size (src/train/fsdp.c): the base's block (1/fsdp) and its working buffers (two of
// the largest layer, as the default prefetch holds, and the rest; no gradients), the adapter whole.
static void lora_memory(const ModelConfig *c, DType wdt, int r, int B, int T, int fsdp) {
    Lora lo;
    memset(&lo, 0, sizeof lo);
    lo.cfg.r = r;
    lo.cfg.dropout = 0.05;
    lo.slot_rows = 1;
    int C = c->hidden_size, FF = c->intermediate_size, QD = c->num_attention_heads * c->head_dim;
    int KD = c->num_key_value_heads * c->head_dim;
    int ins[LORA_N_DENSE] = {C, C, C, QD, C, C, FF}, outs[LORA_N_DENSE] = {QD, KD, KD, C, FF, FF, C};
    size_t n = 0;
    for (int i = 0; i < LORA_N_DENSE; i++) {
        n += (size_t)r * (ins[i] + outs[i]) * c->num_hidden_layers;
        lo.max_in = MAX(lo.max_in, ins[i]);
        lo.max_out = MAX(lo.max_out, outs[i]);
    }
    TensorTable tt;
    tensors_build(&tt, c, wdt);
    int chunk = plan_head_chunk(c->vocab_size);
    size_t state = 4 * n * sizeof(float);  // adapter, gradients, AdamW m and v
    for (int ck = 0; ck <= 1; ck++) {
        size_t plan = plan_bytes_opts(c, PLAN_TRAIN, B, T, chunk, ck, &lo);
        printf("lora r=%-3d %s  base %.1f MiB (%s, frozen) + adapter, grads, AdamW %.1f MiB (%zu params) + plan train "
               "%.1f MiB = %.1f MiB\n", r, ck ? "ckpt" : "    ", mib(tt.param_bytes), dtype_torch_name(wdt), mib(state),
               n, mib(plan), mib(tt.param_bytes + state + plan));
    }
    if (fsdp > 1) {
        size_t layer, rest, shard = (tt.param_bytes + (size_t)fsdp - 1) / (size_t)fsdp;
        fsdp_unit_floats(&tt, &layer, &rest);
        FsdpPrefetch pf = {1, 1};
        size_t work = fsdp_work_bytes(layer, rest, pf, 1), plan = plan_bytes_opts(c, PLAN_TRAIN, B, T, chunk, 0, &lo);
        printf("lora r=%-3d fsdp %d, per rank: base %.1f MiB (1/fsdp, %s, frozen) + working buffers %.1f MiB + adapter, "
               "grads, AdamW %.1f MiB + plan train %.1f MiB = %.1f MiB\n", r, fsdp, mib(shard), dtype_torch_name(wdt),
               mib(work), mib(state), mib(plan), mib(shard + work + state + plan));
    }
    tensors_free(&tt);
}

// A mesh size: the flag, else the environment variable, else 1.
static Status mesh_arg(const Args *a, const char *flag, const char *env, int *out, Err *e) {
    *out = 1;
    if (args_is_set(a, flag)) return *out = (int)args_int(a, flag), ST_OK;
    const char *s = getenv(env);
    if (!s || !*s) return ST_OK;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 65536) return err_set(e, ST_EUSAGE, "%s=%s: expected a positive integer", env, s);
    *out = (int)v;
    return ST_OK;
}

// Per-rank training memory on a tp x fsdp mesh (src/train/tp.c, fsdp.c): the rank's part of the
// model (heads, kv-heads, MLP and expert columns and vocabulary rows / tp; norms whole), its parameters,
// gradients and AdamW moments / fsdp, the working buffers of FSDP (two of the largest layer, as the
// default prefetch holds, and the rest, each with its gradient), and the train plan of the local shapes.
static Status mesh_memory(const Args *a, const ModelConfig *c, int B, int T, Err *e) {
    int tp, fsdp;
    TRY(mesh_arg(a, "tp_size", "TP_SIZE", &tp, e));
    TRY(mesh_arg(a, "fsdp_size", "FSDP_SIZE", &fsdp, e));
    if (tp == 1 && fsdp == 1) return ST_OK;
    TRY(tp_check_dims(c, tp, NULL, e));
    ModelConfig lc = tp > 1 ? tp_local_config(c, tp, 0) : *c;
    TensorTable tt;
    tensors_build(&tt, &lc, DT_F32);
    size_t layer, rest;
    fsdp_unit_floats(&tt, &layer, &rest);
    size_t shard = (tt.param_bytes + (size_t)fsdp - 1) / (size_t)fsdp;  // parameters of this rank, each of 4 buffers
    FsdpPrefetch pf = {1, 1};  // the trainers' default: two working layers
    size_t work = fsdp > 1 ? fsdp_work_bytes(layer, rest, pf, 0) : 0;
    size_t plan = plan_bytes(&lc, PLAN_TRAIN, B, T, plan_head_chunk(c->vocab_size));
    size_t plan_ck = plan_bytes_opts(&lc, PLAN_TRAIN, B, T, plan_head_chunk(c->vocab_size), 1, NULL);
    printf("mesh            tp %d x fsdp %d, per rank: weights %.1f MiB + grads %.1f MiB + AdamW %.1f MiB%s + working "
           "buffers %.1f MiB + plan train B=%d T=%d %.1f MiB = %.1f MiB (the rank's part of the model: %zu parameters, "
           "1/tp of the vocabulary)\n",
           tp, fsdp, mib(shard), mib(shard), mib(2 * shard), fsdp > 1 ? " (1/fsdp each)" : "", mib(work), B, T,
           mib(plan), mib(4 * shard + work + plan), tt.n_params);
    printf("mesh ckpt       the same with --gradient_checkpointing: plan train %.1f MiB = %.1f MiB\n", mib(plan_ck),
           mib(4 * shard + work + plan_ck));
    tensors_free(&tt);
    return ST_OK;
}

// still distill's memory at one scoring shape: student training + the teacher's weights and score plan.
static Status distill_memory(const Args *a, const ModelConfig *scfg, int B, int T, size_t student, Err *e) {
    const char *teacher = args_str(a, "teacher");
    int self = !strcmp(teacher, "self");
    ModelConfig tc;
    char *dir = NULL;
    if (!self) {
        TRY(cli_model_dir(a, "teacher", &dir, e));
        Status st = model_config_load(dir, &tc, e);
        free(dir);
        TRY(st);
        if (tc.vocab_size != scfg->vocab_size) {
            config_free(&tc);
            return err_set(e, ST_EINVAL, "the teacher's vocab_size %d differs from the student's %d", tc.vocab_size,
                           scfg->vocab_size);
        }
    }
    const ModelConfig *c = self ? scfg : &tc;
    DType dt = c->torch_dtype == DT_BF16 ? DT_BF16 : DT_F32;
    int forced;
    Status fs = cli_dtype_flag(a, "teacher_dtype", &forced, e);
    if (fs != ST_OK) {
        if (!self) config_free(&tc);
        return fs;
    }
    if (forced >= 0) dt = (DType)forced;
    TensorTable tt;
    tensors_build(&tt, c, dt);
    size_t score = plan_bytes(c, PLAN_SCORE, B, T, plan_head_chunk(c->vocab_size));
    printf("distillation    student training %.1f MiB + teacher weights %.1f MiB (%s%s) + plan score B=%d T=%d "
           "%.1f MiB = %.1f MiB, 2 plans\n", mib(student), mib(tt.param_bytes), dtype_torch_name(dt),
           self ? ", --teacher_mode fixed; ema: fp32; live: 0" : "", B, T, mib(score),
           mib(student + tt.param_bytes + score));
    tensors_free(&tt);
    if (!self) config_free(&tc);
    return ST_OK;
}

// The predicted peak RSS of still generate and still sft at the shape, part by part (mem_plan.h).
static void peak_rss(const Args *a, const ModelConfig *c, const char *dir, DType infer_dt, int B, int T) {
    int threads = args_is_set(a, "threads") ? (int)args_int(a, "threads") : omp_get_max_threads();
    size_t tok = mem_plan_tokenizer(dir), runtime = mem_rss();  // this binary and its libraries, loaded
    DType file_dt = c->torch_dtype == DT_BF16 ? DT_BF16 : DT_F32;
    int new_tokens = (int)args_int(a, "max_new_tokens");
    MemParts g;
    mem_plan_generate(c, infer_dt, file_dt, B, T, new_tokens, threads, tok, runtime, &g);
    printf("peak RSS        generate B=%d, prompt %d + %d new tokens, %d threads: %.1f MiB = weights %.1f (%s) + plans "
           "%.1f (KV cache %.1f) + scratch %.1f + tokenizer %.1f + runtime %.1f\n", B, T, new_tokens, threads,
           mib(g.total), mib(g.weights), dtype_torch_name(infer_dt), mib(g.plans), mib(g.kv_cache), mib(g.scratch),
           mib(g.tokenizer), mib(g.runtime));
    for (int ck = 1; ck >= 0; ck--) {
        MemParts t;
        mem_plan_train(c, file_dt, B, T, ck, threads, tok, runtime, &t);
        printf("peak RSS        sft B=%d T=%d %s gradient checkpointing, %d threads: %.1f MiB = weights %.1f + grads %.1f "
               "+ AdamW %.1f + plan %.1f + scratch %.1f + OpenBLAS %.1f + saving %.1f + tokenizer %.1f + runtime %.1f\n",
               B, T, ck ? "with" : "without", threads, mib(t.total), mib(t.weights), mib(t.grads), mib(t.adam),
               mib(t.plans), mib(t.scratch), mib(t.blas), mib(t.saving), mib(t.tokenizer), mib(t.runtime));
    }
}

static Status run(const Args *a, Err *e) {
    char *dir;
    TRY(cli_model_dir(a, "model", &dir, e));
    ModelConfig cfg;
    Status st = model_config_load(dir, &cfg, e);
    if (st != ST_OK) {
        free(dir);
        return st;
    }
    int dt;
    st = cli_dtype(a, &dt, e);
    int B = (int)args_int(a, "batch"), T = (int)args_int(a, "seq");
    if (st == ST_OK && (B <= 0 || T <= 0)) st = err_set(e, ST_EINVAL, "--batch and --seq must be positive");
    if (st == ST_OK) {
        DType infer_dt = dt >= 0 ? (DType)dt : (cfg.torch_dtype == DT_BF16 ? DT_BF16 : DT_F32);
        TensorTable tt32, ttinf;
        tensors_build(&tt32, &cfg, DT_F32);
        tensors_build(&ttinf, &cfg, infer_dt);
        int chunk = plan_head_chunk(cfg.vocab_size);
        size_t score = plan_bytes(&cfg, PLAN_SCORE, B, T, chunk), train = plan_bytes(&cfg, PLAN_TRAIN, B, T, chunk);
        size_t train_ck = plan_bytes_opts(&cfg, PLAN_TRAIN, B, T, chunk, 1, NULL);
        size_t p32 = tt32.param_bytes, g = tt32.n_params * 4, adam = 2 * tt32.n_params * 4;
        printf("model           %s\n", dir);
        printf("architecture    %s: %d layers, hidden %d, heads %d (kv %d), head_dim %d, mlp %d, vocab %d\n",
               cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
               cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size);
        print_family(&cfg);
        if (cfg.num_labels > 0)
            printf("classifier      %s: score head of %d label%s, pooled at the last token that is not pad_token_id %d\n",
                   config_architecture(&cfg), cfg.num_labels, cfg.num_labels == 1 ? "" : "s", cfg.pad_token_id);
        printf("flags           tied embeddings %s, qk norm %s, qkv bias %s, o bias %s, rope theta %g%s\n",
               cfg.tie_word_embeddings ? "yes" : "no", cfg.qk_norm ? "yes" : "no", cfg.qkv_bias ? "yes" : "no",
               cfg.o_bias ? "yes" : "no", cfg.rope_theta,
               cfg.rope_scaling.type == ROPE_LLAMA3 ? " (llama3 scaling)"
               : cfg.rope_scaling.type == ROPE_YARN ? " (yarn scaling)"
               : cfg.rope_scaling.type == ROPE_LINEAR ? " (linear scaling)" : "");
        printf("parameters      %zu (%.1f M)\n", tt32.n_params, tt32.n_params / 1e6);
        printf("shape           batch %d x seq %d\n", B, T);
        printf("inference       weights %.1f MiB (%s) + plan score B=%d T=%d %.1f MiB = %.1f MiB, 1 plan\n",
               mib(ttinf.param_bytes), dtype_torch_name(infer_dt), B, T, mib(score), mib(ttinf.param_bytes + score));
        printf("training        weights %.1f MiB + grads %.1f MiB + AdamW %.1f MiB + plan train B=%d T=%d %.1f MiB "
               "= %.1f MiB, 1 plan\n",
               mib(p32), mib(g), mib(adam), B, T, mib(train), mib(p32 + g + adam + train));
        printf("training ckpt   the same with --gradient_checkpointing: plan train %.1f MiB = %.1f MiB\n", mib(train_ck),
               mib(p32 + g + adam + train_ck));
        peak_rss(a, &cfg, dir, infer_dt, B, T);
        int fsdp = 1;
        if (args_int(a, "lora_r") > 0) st = mesh_arg(a, "fsdp_size", "FSDP_SIZE", &fsdp, e);
        if (st == ST_OK && args_int(a, "lora_r") > 0) lora_memory(&cfg, infer_dt, (int)args_int(a, "lora_r"), B, T, fsdp);
        printf("loss head       chunks of %d rows: %.1f MiB of logits at a time (never B x T x V = %.1f MiB)\n", chunk,
               mib((size_t)chunk * cfg.vocab_size * 4), mib((size_t)B * T * cfg.vocab_size * 4));
        const char *wait = getenv("OMP_WAIT_POLICY");
        printf("openmp          %d threads, waiting %s (OMP_WAIT_POLICY)\n", omp_get_max_threads(),
               wait ? wait : "libgomp default");
        if (args_str(a, "teacher")) st = distill_memory(a, &cfg, B, T, p32 + g + adam + train, e);
        if (st == ST_OK) st = mesh_memory(a, &cfg, B, T, e);
        tensors_free(&tt32);
        tensors_free(&ttinf);
    }
    config_free(&cfg);
    free(dir);
    return st;
}

int cmd_info(int argc, char **argv) {
    return cli_run("info", "Architecture, parameter count, and the plans and memory for inference and training "
                                   "at a shape.", specs, argc, argv, run);
}
