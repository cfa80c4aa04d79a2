// moe.c: the mixture-of-experts block over backend ops (moe.h). The experts' projections are
// grouped GEMMs, one call per projection for all experts; only experts that received a slot
// are read.
#include "moe.h"

void moe_block_forward(Backend *be, float *out, const float *x, const MoeWeights *W, const MoeActs *a,
                       const MoeDims *d, float *stats, const int32_t *seg) {
    int N = d->N, C = d->C, E = d->E, K = d->K, FF = d->FF, S = N * K;
    be->matmul_forward(be, a->logits, x, W->router, W->router_dt, W->router_bias, N, C, E);
    be->moe_route_forward(be, a->idx, a->w, a->logits, N, E, K, d->norm);
    if (stats) be->moe_aux_stats(be, stats, a->logits, a->idx, seg, N, E, K);
    be->moe_dispatch(be, a->offsets, a->slot_token, a->token_slot, a->dropped, a->idx, N, E, K, d->capacity);
    be->moe_gather(be, a->xs, x, a->slot_token, a->offsets, S, E, C);
    if (d->fused) {
        be->moe_grouped_matmul_forward(be, a->g, a->xs, W->gate, W->wdt, W->gate_bias, a->offsets, S, E, C, 2 * FF);
        be->swiglu_clamp_forward(be, a->h, a->g, d->alpha, d->limit, (size_t)S * FF);
    } else {
        be->moe_grouped_matmul_forward(be, a->g, a->xs, W->gate, W->wdt, NULL, a->offsets, S, E, C, FF);
        be->moe_grouped_matmul_forward(be, a->u, a->xs, W->up, W->wdt, NULL, a->offsets, S, E, C, FF);
        be->swiglu_forward(be, a->h, a->g, a->u, (size_t)S * FF);
    }
    be->moe_grouped_matmul_forward(be, a->ys, a->h, W->down, W->wdt, W->down_bias, a->offsets, S, E, FF, C);
    be->moe_combine_forward(be, out, a->ys, a->w, a->token_slot, N, K, C);
}

void moe_block_backward(Backend *be, float *dx, const MoeGrads *G, const float *dout, const float *x,
                        const MoeWeights *W, const MoeActs *a, const MoeScratch *s, const MoeDims *d,
                        const float *stats, float aux_coef, const int32_t *seg) {
    int N = d->N, C = d->C, E = d->E, K = d->K, FF = d->FF, S = N * K;
    be->zero(be, s->dlogits, (size_t)N * E * sizeof(float));
    be->zero(be, s->dw, (size_t)N * K * sizeof(float));
    be->zero(be, s->dys, (size_t)S * C * sizeof(float));
    be->zero(be, s->dxs, (size_t)S * C * sizeof(float));
    be->zero(be, s->dh, (size_t)S * FF * sizeof(float));
    be->zero(be, s->dg, (size_t)S * FF * (d->fused ? 2 : 1) * sizeof(float));
    if (!d->fused) be->zero(be, s->du, (size_t)S * FF * sizeof(float));
    be->moe_combine_backward(be, s->dys, s->dw, dout, a->ys, a->w, a->token_slot, N, K, C);
    be->moe_grouped_matmul_backward(be, s->dh, G->down, G->down_bias, s->dys, a->h, W->down, W->wdt, a->offsets, S, E,
                                    FF, C);
    if (d->fused) {
        be->swiglu_clamp_backward(be, s->dg, s->dh, a->g, d->alpha, d->limit, (size_t)S * FF);
        be->moe_grouped_matmul_backward(be, s->dxs, G->gate, G->gate_bias, s->dg, a->xs, W->gate, W->wdt, a->offsets, S,
                                        E, C, 2 * FF);
    } else {
        be->swiglu_backward(be, s->dg, s->du, s->dh, a->g, a->u, (size_t)S * FF);
        be->moe_grouped_matmul_backward(be, s->dxs, G->gate, NULL, s->dg, a->xs, W->gate, W->wdt, a->offsets, S, E, C,
                                        FF);
        be->moe_grouped_matmul_backward(be, s->dxs, G->up, NULL, s->du, a->xs, W->up, W->wdt, a->offsets, S, E, C, FF);
    }
    be->moe_gather_backward(be, dx, s->dxs, a->token_slot, N, K, C);
    be->moe_route_backward(be, s->dlogits, s->dw, a->logits, a->idx, N, E, K, d->norm);
    if (stats && aux_coef != 0.0f) be->moe_aux_backward(be, s->dlogits, a->logits, seg, stats, aux_coef, N, E);
    be->matmul_backward(be, dx, G->router, G->router_bias, s->dlogits, x, W->router, W->router_dt, N, C, E);
}

double moe_aux_loss(const float *stats, int E) {
    double M = stats[2 * E], acc = 0;
    if (M <= 0) return 0;
    for (int e = 0; e < E; e++) acc += (double)stats[e] * stats[E + e];
    return E * acc / (M * M);
}
