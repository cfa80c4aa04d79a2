// moe.h: one mixture-of-experts MLP block over backend ops (docs/models.md, "Routing"): router
// logits, top-k, dispatch, the grouped SwiGLU experts, the weighted combine; its backward, router
// included; and the load-balancing statistics of transformers' load_balancing_loss_func.
#ifndef STILL_MODEL_MOE_H
#define STILL_MODEL_MOE_H

#include "../backend/backend.h"

typedef struct MoeDims {
    int N;         // tokens
    int C;         // hidden size
    int E;         // experts
    int K;         // experts per token
    int FF;        // expert intermediate size
    int norm;      // weights: softmax over the selected logits (backend.h moe_route_forward)
    int capacity;  // slots per expert, <= 0: all (moe_dispatch)
    int fused;     // GPT-OSS experts: gate_up (E,2FF,C) interleaved rows with biases, the clamped
                   // SwiGLU (swiglu_clamp_forward); else gate, up (E,FF,C) and SwiGLU
    float alpha, limit;  // fused: the clamped SwiGLU's constants
    int P, El;     // expert parallel: P ranks share the experts, this one holds El = E / P of them
                   // (P 1: El = E, no exchange)
} MoeDims;

// Expert parallel (src/train/ep.c): the routed slots of experts another rank holds are sent to it,
// its outputs come back. The exchange's plan (P x El ints: how many slots each rank sends for each
// of this rank's experts) is made by dispatch and kept for the backward pass.
typedef struct MoeExchange {
    void *ctx;
    // xs (S,C) sorted by expert (offsets (E+1), every slot kept) -> xl (returned rows, C) sorted by
    // this rank's experts (offl (El+1)); fills plan.
    int (*dispatch)(void *ctx, float *xl, int32_t *offl, int32_t *plan, const float *xs, const int32_t *offsets,
                    int S, int C);
    // rows of C floats along a made plan: back = 0 as dispatch moves them (src in xs's order, dst in
    // xl's), back = 1 the other way.
    void (*move)(void *ctx, int back, float *dst, const float *src, const int32_t *plan, const int32_t *offsets, int C);
} MoeExchange;

// A LoRA adapter on the block (lora.h, lora_moe): each targeted expert projection adds, for the
// slots of expert e, scale * B_e A_e dropout(x) to its output (two grouped GEMMs more); the router
// adds scale * B A dropout(x) to the logits before the top-k.
enum { MOE_LORA_GATE, MOE_LORA_UP, MOE_LORA_DOWN, MOE_LORA_ROUTER, MOE_LORA_N };
typedef struct MoeLora {
    int r;
    float scale;
    const float *A[MOE_LORA_N], *B[MOE_LORA_N];  // experts (E,r,in), (E,out,r); router (r,C), (E,r); NULL: none
    float *dA[MOE_LORA_N], *dB[MOE_LORA_N];      // their gradients (+=), or NULL
    float *u[MOE_LORA_N];  // (S,r) (router (N,r)): scale * dropout(x) A^T, kept for the backward pass
    float *t;              // (S, widest output) scratch
    float *du;             // (S,r) backward scratch
    float dropout;         // lora_dropout while training, else 0
    const uint64_t *key;   // the dropout key of the pass (device scalar)
    uint64_t salt[MOE_LORA_N];
    float *xd, *dxd;       // (S, widest input) with dropout: the dropped input and its gradient
} MoeLora;

// Tensor parallel (src/train/tp.c): every expert's intermediate columns are split over a group
// (gate / up rows, down columns), so the block's output and input gradient are partial sums the
// caller all-reduces; the router is whole on every rank.
typedef struct MoeSplit {
    void *ctx;
    void (*reduce)(void *ctx, float *buf, size_t n);  // buf (n floats, device) summed over the group
    int lead;  // rank 0 of the group: adds the router's share of the input gradient (once)
} MoeSplit;

typedef struct MoeWeights {
    const void *router;        // (E,C)
    const float *router_bias;  // (E) or NULL
    const void *gate, *up;     // (E,FF,C); fused: gate (E,2FF,C) is gate_up, up unused
    const void *down;          // (E,C,FF)
    const float *gate_bias, *down_bias;  // fused: (E,2FF), (E,C); else NULL
    DType router_dt, wdt;      // storage of the router and of the experts
    const MoeLora *lora;       // the adapter's share, or NULL
    const MoeExchange *ex;     // expert parallel, or NULL; gate / up / down then hold the El local experts
    const MoeSplit *split;     // tensor parallel, or NULL; gate / up / down then hold FF of each expert's
                               // columns (down_bias NULL on the ranks but the group's first)
} MoeWeights;

typedef struct MoeGrads {  // accumulated into (+=); any may be NULL
    float *router;         // (E,C)
    float *router_bias;    // (E)
    float *gate, *up;      // (E,FF,C); fused: gate (E,2FF,C)
    float *down;           // (E,C,FF)
    float *gate_bias, *down_bias;  // fused: (E,2FF), (E,C)
} MoeGrads;

// What one block's forward keeps for its backward (S = N*K).
typedef struct MoeActs {
    float *logits;         // (N,E)
    int32_t *idx;          // (N,K)
    float *w;              // (N,K)
    int32_t *offsets;      // (E+1)
    int32_t *slot_token;   // (S)
    int32_t *token_slot;   // (N,K)
    int32_t *dropped;      // (1)
    float *xs;             // (S,C)
    float *g, *u, *h;      // (S,FF) gate, up, silu(gate) * up; fused: g (S,2FF) gate_up, u unused,
                           // h (S,FF) the clamped SwiGLU
    float *ys;             // (S,C)
    // expert parallel: the slots this rank's experts receive (at most P S), g / u / h then have P S rows
    float *xl, *yl;        // (P S, C)
    int32_t *offl;         // (El+1)
    int32_t *ep_plan;      // (P, El)
} MoeActs;

// Backward scratch, zeroed by moe_block_backward itself.
typedef struct MoeScratch {
    float *dlogits;        // (N,E)
    float *dw;             // (N,K)
    float *dys, *dxs;      // (S,C)
    float *dh, *dg, *du;   // (S,FF); fused: dg (S,2FF), du unused; expert parallel: P S rows
    float *dyl, *dxl;      // expert parallel: (P S, C) the received slots' gradients
} MoeScratch;

// out (N,C) = the block's output for x (N,C). stats (2E+1) or NULL: the load-balancing
// statistics accumulate over the tokens with seg != 0 (seg (N) or NULL: all).
void moe_block_forward(Backend *be, float *out, const float *x, const MoeWeights *W, const MoeActs *a,
                       const MoeDims *d, float *stats, const int32_t *seg);
// dx (N,C) += and grads += from dout (N,C); aux_coef * the load-balancing loss's gradient is
// added through the router when stats != NULL (stats complete over every layer of the step).
void moe_block_backward(Backend *be, float *dx, const MoeGrads *G, const float *dout, const float *x,
                        const MoeWeights *W, const MoeActs *a, const MoeScratch *s, const MoeDims *d,
                        const float *stats, float aux_coef, const int32_t *seg);

// The load-balancing loss from complete statistics (host copy of stats (2E+1)): E sum_e
// count_e psum_e / M^2, 0 when M = 0.
double moe_aux_loss(const float *stats, int E);

#endif
