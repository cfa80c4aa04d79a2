// plan.h: execution plans. A plan holds every activation buffer one step of one shape needs,
// carved out of one arena allocated once ("compile"); later steps of the same shape reuse it.
// A shape is (mode, B, T, S) with S = max_cache_len for decode plans (0 otherwise); plans are
// counted and their memory reported (ARCHITECTURE §2).
#ifndef STILL_PLAN_H
#define STILL_PLAN_H

#include "../backend/backend.h"
#include "../core/common.h"
#include "config.h"
#include "moe.h"

struct Model;
struct Lora;

typedef enum {
    PLAN_TRAIN = 0,  // forward keeping every layer's activations, loss head, backward
    PLAN_SCORE = 1,  // forward (one layer of activations reused) + loss head / logits, no backward
    PLAN_PREFILL = 2,  // one chunk of T prompt tokens per row into a KV cache (one layer reused)
    PLAN_DECODE = 3,   // one token per row (T = 1) on a static KV cache of S slots, which it owns,
                       // with the per-row last-position logits and the sampler's buffers
} PlanMode;

const char *plan_mode_name(PlanMode mode);

typedef struct LayerActs {
    float *res_in;   // (N,C) residual stream entering the layer
    float *ln1;      // (N,C) (aliases res_in without NORM_PRE_ATTN)
    float *rstd1;    // (N)
    float *q;        // (N,NH*HD) q_proj output (before q_norm)
    float *k;        // (N,NKV*HD)
    float *v;        // (N,NKV*HD)
    float *qr;       // (N,NH*HD) after q_norm and RoPE (aliases q without q/k norm)
    float *kr;       // (N,NKV*HD)
    float *rstdq;    // (N*NH) per-head q norm; (N) QKNORM_PROJ
    float *rstdk;    // (N*NKV); (N) QKNORM_PROJ
    float *att;      // (N,NH*HD) attention output
    float *lse;      // (B,NH,T)
    float *ao;       // (N,C) o_proj output before its norm (NORM_POST_ATTN), else NULL
    float *rstda;    // (N) NORM_POST_ATTN
    float *res_mid;  // (N,C) residual after attention
    float *ln2;      // (N,C) (aliases res_mid without NORM_PRE_MLP)
    float *rstd2;    // (N)
    float *gate;     // (N,FF)
    float *up;       // (N,FF)
    float *act;      // (N,FF) silu(gate)*up
    MoeActs moe;     // sparse MoE layers (cfg.layer_moe): the block's buffers (moe.h); else unset
    float *mo;       // (N,C) down_proj output before its norm (NORM_POST_MLP), else NULL
    float *rstdm;    // (N) NORM_POST_MLP
} LayerActs;

typedef struct Plan {
    PlanMode mode;
    int B, T;
    int S;                 // DECODE: max_cache_len (cache slots per row); else 0
    size_t bytes;          // arena size
    void *base;            // device arena
    int32_t *ids;          // (N)
    int32_t *pos;          // (N) RoPE positions
    int32_t *seg;          // (N) segment ids, 0 = padding
    int32_t *targets;      // (N) next-token targets, IGNORE_INDEX = no loss
    float *weights;        // (N) per-token loss weights
    LayerActs *layers;     // (L) TRAIN: one per layer; SCORE: every entry aliases one set
    float *res_out;        // (N,C) residual after the last layer
    float *lnf;            // (N,C) final norm output
    float *rstdf;          // (N)
    float *row_loss;       // (N)
    float *row_correct;    // (N)
    float *row_entropy;    // (N)
    float *head_scratch;   // (chunk, V + C), V the LM head's rows here; NULL for sequence classifiers
    float *vocab_scratch;  // vocabulary shards: the heads' statistics (vocab_scratch_floats), else NULL
    int head_chunk;
    // sequence classifiers (cfg num_labels NL > 0): the score head at one pooled row per sequence
    int32_t *pool_rows;    // (B) pooled row of each sequence, in [0, N)
    float *cls_scores;     // (B,NL) scores
    float *cls_dscores;    // (B,NL) TRAIN: d loss / d score
    // mixture of experts (cfg.num_experts > 0)
    float *moe_stats;      // (2E+1) load-balancing statistics of the last forward (moe.h)
    int moe_aux;           // the last forward accumulated moe_stats (training with output_router_logits)
    MoeScratch moe_scr;    // TRAIN: one MoE block's backward scratch
    // backward scratch (TRAIN only), one layer's worth, reused by every layer
    float *dres;           // (N,C) gradient of the residual stream
    float *dln;            // (N,C)
    float *dq, *dk, *dv;   // (N,NH*HD), (N,NKV*HD), (N,NKV*HD)
    float *dqr, *dkr;      // (N,NH*HD), (N,NKV*HD)
    float *datt;           // (N,NH*HD)
    float *dact, *dgate, *dup;  // (N,FF)
    float *norm_dot;       // (N) tensor parallel QKNORM_PROJ: the split q/k norm's backward dot, else NULL
    float *dpost;          // (N,C) d(sublayer output) before a post-norm (NORM_POST_*), else NULL
    // DECODE only: the static KV cache and one decoding step's head and sampler buffers
    float *kcache, *vcache;  // per layer (B,NKV,slots,HD) at plan_cache_offset: keys after q/k norm and RoPE; values
    int32_t *kmask;        // (B,S) 1 = a real token's slot, 0 = left padding
    int32_t *cache_start;  // (1) first cache slot of the chunk being run (qwen3_cache_seek)
    float *hlast;          // (B,C) residual at each row's last position (gathered)
    float *lnlast;         // (B,C) final norm of hlast
    float *rstdlast;       // (B)
    float *logits;         // (B,V) raw last-position logits; a vocabulary shard's (B,vocab_part)
    float *logits_part;    // logits when they are a vocabulary shard's (gen/sample_shard.h), else NULL
    float *scores;         // (B,V) processed scores (sample_logits)
    float *logprob;        // (B) chosen token under the processed distribution
    float *logprob_raw;    // (B) chosen token under log_softmax(logits / temperature)
    SampleParams *sparams; // (B)
    double *u;             // (B) uniforms of the draw
    uint8_t *seen;         // (B,V) ids seen so far, for the repetition penalty
    int32_t *banned;       // (B,ban_cap) ids set to -inf this step, -1 = unused
    int ban_cap;
    // TRAIN with gradient checkpointing: only res_in is kept per layer; every other activation
    // aliases one layer's set, recomputed layer by layer in the backward pass
    int ckpt;
    // LoRA adapter (model/lora.h), when the model has one: r = its rank, M = 7 modules
    float *lora_u;         // TRAIN: (L, M, N, r) scaled inner activations (one layer's (M, N, r) with ckpt); else (M, N, r)
    float *lora_t;         // (N, max_out) the adapter's output before it is added
    float *lora_du;        // TRAIN: (N, r)
    float *lora_x, *lora_dx;  // TRAIN with dropout: (N, max_in) the dropped input and its gradient
    uint64_t *lora_key;    // (1) dropout key of the current forward pass
    // On backends with graph hooks a plan's step (DECODE: qwen3_decode_step; TRAIN: the SFT
    // micro-batch, qwen3_train_micro) is recorded once, after one eager run has sized every
    // scratch buffer, and replayed. Key: the plan's address, dropped when the plan is freed.
    int eager_runs;        // eager runs of the step so far (recording starts after the first)
    int graph_ready;       // the step is recorded
    // DECODE steps over the first 2^k < B rows (qwen3_decode_step_rows), graph key address + 2^k:
    // bit k once run eagerly / recorded
    uint64_t rows_eager, rows_ready;
} Plan;

typedef struct PlanCache {
    Plan **plans;
    int n;
    int graphs;            // plan steps recorded as graphs
    int max_plans;         // 0 = unlimited; exceeding it is an error
    size_t bytes;          // total over plans
} PlanCache;

// The most rows (B*T, and B*max_cache_len for a decode plan) one plan holds: rows index every op
// as an int. A larger shape is an error from plan_get_shape, never a wrapped size.
#define PLAN_MAX_ROWS (1 << 30)
// Bytes a plan of this shape needs (the estimator `still info` and memory checks use); SIZE_MAX
// when they pass what size_t holds.
size_t plan_bytes(const ModelConfig *cfg, PlanMode mode, int B, int T, int head_chunk);
// The same with gradient checkpointing (TRAIN only) and an adapter's buffers (lo may be NULL).
size_t plan_bytes_opts(const ModelConfig *cfg, PlanMode mode, int B, int T, int head_chunk, int ckpt,
                       const struct Lora *lo);
// Bytes of a PREFILL (S = 0) or DECODE (T = 1, S = max_cache_len) plan.
size_t plan_bytes_cached(const ModelConfig *cfg, PlanMode mode, int B, int T, int S);
// Get (building on first use) the plan for a shape (TRAIN / SCORE).
Status plan_get(struct Model *m, PlanMode mode, int B, int T, Plan **out, Err *e);
// The same for any mode; S is the cache length of DECODE plans (0 for the others).
Status plan_get_shape(struct Model *m, PlanMode mode, int B, int T, int S, Plan **out, Err *e);
// Banned-id slots per row of a DECODE plan with S cache slots (room for a ban of every id of
// the history plus bad words).
int plan_ban_cap(int S);
// The KV cache of a decode plan of S slots, layer by layer: a global layer keeps S slots per
// row, a sliding layer whose window W is shorter keeps a ring of W (backend.h, attention_ring),
// so the cache follows the windows. Slots of layer l per row, the float offset of layer l's
// (B,NKV,slots,HD) block in kcache / vcache, and the floats of each of the two.
int plan_cache_slots(const ModelConfig *cfg, int l, int S);
size_t plan_cache_offset(const ModelConfig *cfg, int l, int B, int S);
size_t plan_cache_floats(const ModelConfig *cfg, int B, int S);
void plan_cache_free(struct Model *m);
// Default rows per loss-head chunk for a vocabulary size (bounded logits memory).
int plan_head_chunk(int V);

#endif
