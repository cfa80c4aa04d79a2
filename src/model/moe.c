// moe.c: the mixture-of-experts block over backend ops (moe.h). The experts' projections are
// grouped GEMMs, one call per projection for all experts; only experts that received a slot
// are read.
#include "moe.h"

// ---- LoRA (MoeLora) --------------------------------------------------------------------------
// The input an adapter sees: x itself, or its dropped copy in L->xd.
static const float *lora_in(Backend *be, const MoeLora *L, int i, const float *x, size_t n) {
    if (L->dropout <= 0) return x;
    be->dropout(be, L->xd, x, n, L->dropout, L->key, L->salt[i]);
    return L->xd;
}

// out (S,OUT) += scale * (x A_e^T) B_e^T over the kept slots of each expert e; x (S,IN).
static void lora_grouped_fwd(Backend *be, const MoeLora *L, int i, float *out, const float *x,
                             const int32_t *offsets, int S, int E, int IN, int OUT) {
    if (!L || !L->A[i]) return;
    const float *xi = lora_in(be, L, i, x, (size_t)S * IN);
    be->zero(be, L->u[i], (size_t)S * L->r * sizeof(float));  // slots of no expert (capacity) stay 0
    be->moe_grouped_matmul_forward(be, L->u[i], xi, L->A[i], DT_F32, NULL, offsets, S, E, IN, L->r);
    be->scale(be, L->u[i], L->scale, (size_t)S * L->r);
    be->zero(be, L->t, (size_t)S * OUT * sizeof(float));
    be->moe_grouped_matmul_forward(be, L->t, L->u[i], L->B[i], DT_F32, NULL, offsets, S, E, L->r, OUT);
    be->add(be, out, out, L->t, (size_t)S * OUT);
}

// Its backward: dx (S,IN) += the adapter's input gradient, dA, dB += from dout (S,OUT).
static void lora_grouped_bwd(Backend *be, const MoeLora *L, int i, float *dx, const float *dout, const float *x,
                             const int32_t *offsets, int S, int E, int IN, int OUT) {
    if (!L || !L->A[i]) return;
    be->zero(be, L->du, (size_t)S * L->r * sizeof(float));
    be->moe_grouped_matmul_backward(be, L->du, L->dB[i], NULL, dout, L->u[i], L->B[i], DT_F32, offsets, S, E, L->r,
                                    OUT);
    be->scale(be, L->du, L->scale, (size_t)S * L->r);
    if (L->dropout <= 0) {
        be->moe_grouped_matmul_backward(be, dx, L->dA[i], NULL, L->du, x, L->A[i], DT_F32, offsets, S, E, IN, L->r);
        return;
    }
    const float *xi = lora_in(be, L, i, x, (size_t)S * IN);  // the forward's mask again
    be->zero(be, L->dxd, (size_t)S * IN * sizeof(float));
    be->moe_grouped_matmul_backward(be, L->dxd, L->dA[i], NULL, L->du, xi, L->A[i], DT_F32, offsets, S, E, IN, L->r);
    be->dropout(be, L->dxd, L->dxd, (size_t)S * IN, L->dropout, L->key, L->salt[i]);
    be->add(be, dx, dx, L->dxd, (size_t)S * IN);
}

// The router's adapter: logits (N,E) += scale * (x A^T) B^T, and its backward.
static void lora_router_fwd(Backend *be, const MoeLora *L, float *logits, const float *x, int N, int C, int E) {
    if (!L || !L->A[MOE_LORA_ROUTER]) return;
    const int i = MOE_LORA_ROUTER;
    const float *xi = lora_in(be, L, i, x, (size_t)N * C);
    be->matmul_forward(be, L->u[i], xi, L->A[i], DT_F32, NULL, N, C, L->r);
    be->scale(be, L->u[i], L->scale, (size_t)N * L->r);
    be->matmul_forward(be, L->t, L->u[i], L->B[i], DT_F32, NULL, N, L->r, E);
    be->add(be, logits, logits, L->t, (size_t)N * E);
}

static void lora_router_bwd(Backend *be, const MoeLora *L, float *dx, const float *dlogits, const float *x, int N,
                            int C, int E) {
    if (!L || !L->A[MOE_LORA_ROUTER]) return;
    const int i = MOE_LORA_ROUTER;
    be->zero(be, L->du, (size_t)N * L->r * sizeof(float));
    be->matmul_backward(be, L->du, L->dB[i], NULL, dlogits, L->u[i], L->B[i], DT_F32, N, L->r, E);
    be->scale(be, L->du, L->scale, (size_t)N * L->r);
    if (L->dropout <= 0) {
        be->matmul_backward(be, dx, L->dA[i], NULL, L->du, x, L->A[i], DT_F32, N, C, L->r);
        return;
    }
    const float *xi = lora_in(be, L, i, x, (size_t)N * C);
    be->zero(be, L->dxd, (size_t)N * C * sizeof(float));
    be->matmul_backward(be, L->dxd, L->dA[i], NULL, L->du, xi, L->A[i], DT_F32, N, C, L->r);
    be->dropout(be, L->dxd, L->dxd, (size_t)N * C, L->dropout, L->key, L->salt[i]);
    be->add(be, dx, dx, L->dxd, (size_t)N * C);
}

void moe_block_forward(Backend *be, float *out, const float *x, const MoeWeights *W, const MoeActs *a,
                       const MoeDims *d, float *stats, const int32_t *seg) {
    int N = d->N, C = d->C, E = d->E, K = d->K, FF = d->FF, S = N * K;
    be->matmul_forward(be, a->logits, x, W->router, W->router_dt, W->router_bias, N, C, E);
    lora_router_fwd(be, W->lora, a->logits, x, N, C, E);
    be->moe_route_forward(be, a->idx, a->w, a->logits, N, E, K, d->norm);
    if (stats) be->moe_aux_stats(be, stats, a->logits, a->idx, seg, N, E, K);
    be->moe_dispatch(be, a->offsets, a->slot_token, a->token_slot, a->dropped, a->idx, N, E, K, d->capacity);
    be->moe_gather(be, a->xs, x, a->slot_token, a->offsets, S, E, C);
    // the experts run on xe (Se rows) grouped by offs over Ee experts: this rank's slots, or with
    // expert parallelism the slots its El experts received from every rank
    const float *xe = a->xs;
    const int32_t *offs = a->offsets;
    int Se = S, Ee = E;
    float *ye = a->ys;
    if (W->ex) {
        Se = W->ex->dispatch(W->ex->ctx, a->xl, a->offl, a->ep_plan, a->xs, a->offsets, S, C);
        xe = a->xl, offs = a->offl, Ee = d->El, ye = a->yl;
    }
    if (d->fused) {
        be->moe_grouped_matmul_forward(be, a->g, xe, W->gate, W->wdt, W->gate_bias, offs, Se, Ee, C, 2 * FF);
        be->swiglu_clamp_forward(be, a->h, a->g, d->alpha, d->limit, (size_t)Se * FF);
    } else {
        be->moe_grouped_matmul_forward(be, a->g, xe, W->gate, W->wdt, NULL, offs, Se, Ee, C, FF);
        lora_grouped_fwd(be, W->lora, MOE_LORA_GATE, a->g, xe, offs, Se, Ee, C, FF);
        be->moe_grouped_matmul_forward(be, a->u, xe, W->up, W->wdt, NULL, offs, Se, Ee, C, FF);
        lora_grouped_fwd(be, W->lora, MOE_LORA_UP, a->u, xe, offs, Se, Ee, C, FF);
        be->swiglu_forward(be, a->h, a->g, a->u, (size_t)Se * FF);
    }
    be->moe_grouped_matmul_forward(be, ye, a->h, W->down, W->wdt, W->down_bias, offs, Se, Ee, FF, C);
    lora_grouped_fwd(be, W->lora, MOE_LORA_DOWN, ye, a->h, offs, Se, Ee, FF, C);
    if (W->ex) W->ex->move(W->ex->ctx, 1, a->ys, a->yl, a->ep_plan, a->offsets, C);  // the outputs come home
    be->moe_combine_forward(be, out, a->ys, a->w, a->token_slot, N, K, C);
}

void moe_block_backward(Backend *be, float *dx, const MoeGrads *G, const float *dout, const float *x,
                        const MoeWeights *W, const MoeActs *a, const MoeScratch *s, const MoeDims *d,
                        const float *stats, float aux_coef, const int32_t *seg) {
    int N = d->N, C = d->C, E = d->E, K = d->K, FF = d->FF, S = N * K;
    const float *xe = a->xs;
    const int32_t *offs = a->offsets;
    int Se = S, Ee = E;
    float *dye = s->dys, *dxe = s->dxs;
    if (W->ex) {  // the forward's exchange again: Se = the slots this rank's experts received
        Se = a->offl[d->El];  // host memory (the exchange runs on host-memory backends only)
        xe = a->xl, offs = a->offl, Ee = d->El, dye = s->dyl, dxe = s->dxl;
    }
    be->zero(be, s->dlogits, (size_t)N * E * sizeof(float));
    be->zero(be, s->dw, (size_t)N * K * sizeof(float));
    be->zero(be, s->dys, (size_t)S * C * sizeof(float));
    be->zero(be, dxe, (size_t)Se * C * sizeof(float));
    be->zero(be, s->dh, (size_t)Se * FF * sizeof(float));
    be->zero(be, s->dg, (size_t)Se * FF * (d->fused ? 2 : 1) * sizeof(float));
    if (!d->fused) be->zero(be, s->du, (size_t)Se * FF * sizeof(float));
    be->moe_combine_backward(be, s->dys, s->dw, dout, a->ys, a->w, a->token_slot, N, K, C);
    // tensor parallel: ys holds this rank's share of each expert's output, so is the routing
    // weights' gradient (dys is whole: dout is)
    if (W->split) W->split->reduce(W->split->ctx, s->dw, (size_t)N * K);
    if (W->ex) W->ex->move(W->ex->ctx, 0, s->dyl, s->dys, a->ep_plan, a->offsets, C);  // to the experts' ranks
    be->moe_grouped_matmul_backward(be, s->dh, G->down, G->down_bias, dye, a->h, W->down, W->wdt, offs, Se, Ee, FF, C);
    lora_grouped_bwd(be, W->lora, MOE_LORA_DOWN, s->dh, dye, a->h, offs, Se, Ee, FF, C);
    if (d->fused) {
        be->swiglu_clamp_backward(be, s->dg, s->dh, a->g, d->alpha, d->limit, (size_t)Se * FF);
        be->moe_grouped_matmul_backward(be, dxe, G->gate, G->gate_bias, s->dg, xe, W->gate, W->wdt, offs, Se, Ee, C,
                                        2 * FF);
    } else {
        be->swiglu_backward(be, s->dg, s->du, s->dh, a->g, a->u, (size_t)Se * FF);
        be->moe_grouped_matmul_backward(be, dxe, G->gate, NULL, s->dg, xe, W->gate, W->wdt, offs, Se, Ee, C, FF);
        be->moe_grouped_matmul_backward(be, dxe, G->up, NULL, s->du, xe, W->up, W->wdt, offs, Se, Ee, C, FF);
        lora_grouped_bwd(be, W->lora, MOE_LORA_GATE, dxe, s->dg, xe, offs, Se, Ee, C, FF);
        lora_grouped_bwd(be, W->lora, MOE_LORA_UP, dxe, s->du, xe, offs, Se, Ee, C, FF);
    }
    if (W->ex) W->ex->move(W->ex->ctx, 1, s->dxs, s->dxl, a->ep_plan, a->offsets, C);  // and back
    be->moe_gather_backward(be, dx, s->dxs, a->token_slot, N, K, C);
    be->moe_route_backward(be, s->dlogits, s->dw, a->logits, a->idx, N, E, K, d->norm);
    if (stats && aux_coef != 0.0f) be->moe_aux_backward(be, s->dlogits, a->logits, seg, stats, aux_coef, N, E);
    float *dxr = W->split && !W->split->lead ? NULL : dx;  // whole on every rank: added once
    be->matmul_backward(be, dxr, G->router, G->router_bias, s->dlogits, x, W->router, W->router_dt, N, C, E);
    lora_router_bwd(be, W->lora, dx, s->dlogits, x, N, C, E);
}

double moe_aux_loss(const float *stats, int E) {
    double M = stats[2 * E], acc = 0;
    if (M <= 0) return 0;
    for (int e = 0; e < E; e++) acc += (double)stats[e] * stats[E + e];
    return E * acc / (M * M);
}
