// test_moe_ref.c: the reference mixture-of-experts ops against their definitions. Top-k against
// a full sort (ties by ascending index), the dispatch against its rules (every kept choice in its
// expert's range, ascending tokens, capacity by rank then token, the dropped count), the aux
// statistics and loss against load_balancing_loss_func written out in double here, and the
// whole block (router, routing weights, grouped SwiGLU experts, combine, the aux loss through
// the router) by central finite differences of a random linear functional, with and without
// renormalised weights and with a capacity that drops slots.
#include "ops_util.h"

#include "model/moe.h"

static void test_topk_against_sort(void) {
    Backend *be = backend_ref_create(1);
    int N = 40, E = 13, K = 4;
    float *l = new_normal((size_t)N * E, 1), *w = xmalloc((size_t)N * K * 4);
    for (int n = 0; n < N; n += 2)  // ties in every other row
        for (int e = 0; e < E; e++) l[(size_t)n * E + e] = (float)rng_below(&ops_rng, 3);
    int32_t *idx = xmalloc((size_t)N * K * 4);
    for (int norm = 0; norm < 2; norm++) {
        be->moe_route_forward(be, idx, w, l, N, E, K, norm);
        for (int n = 0; n < N; n++) {
            const float *r = l + (size_t)n * E;
            int order[13];
            for (int e = 0; e < E; e++) order[e] = e;
            for (int i = 1; i < E; i++)  // insertion sort: value descending, index ascending
                for (int j = i; j > 0 && (r[order[j]] > r[order[j - 1]]); j--) {
                    int t = order[j];
                    order[j] = order[j - 1], order[j - 1] = t;
                }
            double lse = 0, m = r[order[0]], sel = 0;
            for (int e = 0; e < E; e++) lse += exp(r[e] - m);
            for (int k = 0; k < K; k++) sel += exp(r[order[k]] - m);
            for (int k = 0; k < K; k++) {
                EXPECT_MSG(idx[(size_t)n * K + k] == order[k], "row %d choice %d: %d, sorted %d", n, k,
                           idx[(size_t)n * K + k], order[k]);
                double want = exp(r[order[k]] - m) / (norm ? sel : lse);
                EXPECT_MSG(fabs(w[(size_t)n * K + k] - want) < 1e-6, "row %d weight %d: %g vs %g", n, k,
                           w[(size_t)n * K + k], want);
            }
        }
    }
    free(l), free(w), free(idx);
    backend_destroy(be);
}

static void test_dispatch_rules(void) {
    Backend *be = backend_ref_create(1);
    int N = 30, E = 7, K = 3, S = N * K;
    int32_t *idx = xmalloc((size_t)S * 4), off[8], *st = xmalloc((size_t)S * 4), *ts = xmalloc((size_t)S * 4);
    for (int n = 0; n < N; n++)  // experts skewed toward 0, distinct per token, 6 never chosen
        for (int k = 0; k < K; k++) idx[(size_t)n * K + k] = (int32_t)((n % 2 ? 0 : n % 5) + k) % 6;
    for (int cap = 0; cap <= 9; cap += 9) {
        int32_t dropped = -1;
        be->moe_dispatch(be, off, st, ts, &dropped, idx, N, E, K, cap);
        int lost = 0;
        for (int e = 0; e < E; e++) {
            // the choices of e in priority order (rank, then token): the first `cap` are kept
            int seen = 0, kept = 0;
            for (int k = 0; k < K; k++)
                for (int n = 0; n < N; n++) {
                    if (idx[(size_t)n * K + k] != e) continue;
                    int s = ts[(size_t)n * K + k], want_keep = cap <= 0 || seen < cap;
                    seen++;
                    EXPECT_MSG((s >= 0) == want_keep, "cap %d expert %d token %d rank %d kept %d", cap, e, n, k, s >= 0);
                    if (s < 0) {
                        lost++;
                        continue;
                    }
                    kept++;
                    EXPECT(s >= off[e] && s < off[e + 1] && st[s] == n);
                }
            EXPECT_MSG(off[e + 1] - off[e] == kept, "cap %d expert %d: %d slots, %d kept", cap, e, off[e + 1] - off[e],
                       kept);
            for (int s = off[e] + 1; s < off[e + 1]; s++) EXPECT(st[s] > st[s - 1]);  // ascending tokens
        }
        EXPECT(off[0] == 0 && off[E] == S - lost && dropped == lost && (cap > 0) == (lost > 0));
        for (int s = off[E]; s < S; s++) EXPECT(st[s] == -1);
    }
    free(idx), free(st), free(ts);
    backend_destroy(be);
}

// ---------------------------------------------------------------- the whole block
typedef struct {
    Backend *be;
    MoeDims d;
    float *x, *router, *gate, *up, *down, *probe;  // probe (N,C): loss = probe . out + coef aux
    float *rbias, *gbias, *dbias;                   // fused (GPT-OSS) blocks: (E), (E,2FF), (E,C)
    int32_t *seg;
    float coef;
    MoeActs a;
    float *out, *stats;
} Block;

static MoeWeights block_weights(Block *b) {
    return (MoeWeights){.router = b->router, .router_bias = b->rbias, .gate = b->gate, .up = b->up, .down = b->down,
                        .gate_bias = b->gbias, .down_bias = b->dbias, .router_dt = DT_F32, .wdt = DT_F32};
}

static double block_loss(void *ctx) {
    Block *b = ctx;
    MoeWeights W = block_weights(b);
    memset(b->stats, 0, (2 * (size_t)b->d.E + 1) * 4);
    moe_block_forward(b->be, b->out, b->x, &W, &b->a, &b->d, b->stats, b->seg);
    double loss = dot_d(b->probe, b->out, (size_t)b->d.N * b->d.C);
    // load_balancing_loss_func of transformers, in double, from the block's own logits and choices
    int N = b->d.N, E = b->d.E, K = b->d.K;
    double M = 0, f[16] = {0}, P[16] = {0};
    for (int n = 0; n < N; n++) {
        if (!b->seg[n]) continue;
        M++;
        const float *l = b->a.logits + (size_t)n * E;
        double mx = -INFINITY, z = 0;
        for (int e = 0; e < E; e++) mx = fmax(mx, l[e]);
        for (int e = 0; e < E; e++) z += exp(l[e] - mx);
        for (int e = 0; e < E; e++) P[e] += exp(l[e] - mx) / z;
        for (int k = 0; k < K; k++) f[b->a.idx[(size_t)n * K + k]] += 1;
    }
    double aux = 0;
    for (int e = 0; e < E; e++) aux += (f[e] / M) * (P[e] / M);
    aux *= E;
    double aux_op = moe_aux_loss(b->stats, E);
    EXPECT_MSG(fabs(aux_op - aux) < 1e-6 * fmax(1, aux), "aux loss %.9g vs load_balancing_loss_func %.9g", aux_op, aux);
    return loss + b->coef * aux;
}

// fused: GPT-OSS's experts (biased router, interleaved gate_up with biases, biased down, the
// clamped SwiGLU with a limit near 1.5 so that both clamps hold some values).
static void check_block(int norm, int capacity, int fused) {
    Backend *be = backend_ref_create(1);
    Block b = {.be = be, .d = {.N = 9, .C = 6, .E = 5, .K = 2, .FF = 4, .norm = norm, .capacity = capacity,
                               .fused = fused, .alpha = 1.702f, .limit = 1.5f}};
    int N = b.d.N, C = b.d.C, E = b.d.E, K = b.d.K, FF = b.d.FF, S = N * K, GW = fused ? 2 * FF : FF;
    b.x = new_normal((size_t)N * C, 1), b.router = new_normal((size_t)E * C, 0.7f);
    b.gate = new_normal((size_t)E * GW * C, fused ? 1.0f : 0.5f), b.up = new_normal((size_t)E * FF * C, 0.5f);
    if (fused)
        b.rbias = new_normal((size_t)E, 0.5f), b.gbias = new_normal((size_t)E * GW, 0.5f),
        b.dbias = new_normal((size_t)E * C, 0.5f);
    b.down = new_normal((size_t)E * C * FF, 0.5f), b.probe = new_normal((size_t)N * C, 1);
    b.seg = xmalloc(N * 4);
    for (int n = 0; n < N; n++) b.seg[n] = n % 4 != 3;
    b.coef = 0.8f;
    MoeActs *a = &b.a;
    a->logits = xmalloc((size_t)N * E * 4), a->idx = xmalloc((size_t)S * 4), a->w = xmalloc((size_t)S * 4);
    a->offsets = xmalloc((size_t)(E + 1) * 4), a->slot_token = xmalloc((size_t)S * 4);
    a->token_slot = xmalloc((size_t)S * 4), a->dropped = xmalloc(4);
    a->xs = xmalloc((size_t)S * C * 4), a->ys = xmalloc((size_t)S * C * 4);
    a->g = xmalloc((size_t)S * GW * 4), a->u = xmalloc((size_t)S * FF * 4), a->h = xmalloc((size_t)S * FF * 4);
    b.out = xmalloc((size_t)N * C * 4), b.stats = xmalloc((2 * (size_t)E + 1) * 4);
    MoeScratch s = {xmalloc((size_t)N * E * 4), xmalloc((size_t)S * 4), xmalloc((size_t)S * C * 4),
                    xmalloc((size_t)S * C * 4), xmalloc((size_t)S * FF * 4), xmalloc((size_t)S * GW * 4),
                    xmalloc((size_t)S * FF * 4)};
    size_t nx = (size_t)N * C, nr = (size_t)E * C, ng = (size_t)E * FF * C, ngw = (size_t)E * GW * C;
    float *dx = xcalloc(nx, 4), *dr = xcalloc(nr, 4), *dg = xcalloc(ngw, 4), *du = xcalloc(ng, 4), *dd = xcalloc(ng, 4);
    float *drb = xcalloc(E, 4), *dgb = xcalloc((size_t)E * GW, 4), *ddb = xcalloc((size_t)E * C, 4);
    block_loss(&b);
    if (fused) {
        // The clamps are kinks of the loss: a difference quotient whose step carries a gate or up
        // value across the limit is not the derivative. The limit is the one in [1, 2] farthest
        // from every value the block computes (a step of 3e-3 moves a value by about 1e-2).
        float best = 1.5f, best_gap = 0;
        for (float lim = 1.0f; lim <= 2.0f; lim += 0.005f) {
            float gap = INFINITY;
            for (int i = 0; i < a->offsets[E] * FF; i++)
                gap = fminf(gap, fminf(fabsf(a->g[2 * i] - lim), fabsf(fabsf(a->g[2 * i + 1]) - lim)));
            if (gap > best_gap) best_gap = gap, best = lim;
        }
        EXPECT_MSG(best_gap > 0.02f, "no limit in [1, 2] keeps 0.02 from every clamp input (best %.3g)", best_gap);
        b.d.limit = best;
        block_loss(&b);
    }
    EXPECT_MSG((capacity > 0) == (*a->dropped > 0), "capacity %d dropped %d", capacity, *a->dropped);
    MoeWeights W = block_weights(&b);
    MoeGrads G = {.router = dr, .gate = dg, .up = du, .down = dd};
    if (fused) G.router_bias = drb, G.gate_bias = dgb, G.down_bias = ddb;
    moe_block_backward(be, dx, &G, b.probe, b.x, &W, a, &s, &b.d, b.stats, b.coef, b.seg);
    char what[64];
    struct {
        const char *name;
        float *p, *g;
        size_t n;
    } params[] = {{"x", b.x, dx, nx}, {"router", b.router, dr, nr}, {"gate", b.gate, dg, ngw}, {"up", b.up, du, ng},
                  {"down", b.down, dd, ng}, {"router_bias", b.rbias, drb, E}, {"gate_up_bias", b.gbias, dgb, (size_t)E * GW},
                  {"down_bias", b.dbias, ddb, (size_t)E * C}};
    if (fused) {  // both clamps hold some of the values the block computed
        int above = 0, outside = 0;
        for (int i = 0; i < a->offsets[E] * FF; i++)
            above += a->g[2 * i] > b.d.limit, outside += fabsf(a->g[2 * i + 1]) > b.d.limit;
        EXPECT_MSG(above > 0 && outside > 0, "clamped values: %d gates, %d ups", above, outside);
    }
    for (size_t i = 0; i < ARRAY_LEN(params); i++) {
        if (!params[i].p || (fused && params[i].p == b.up)) continue;
        snprintf(what, sizeof what, "d%s norm%d cap%d fused%d", params[i].name, norm, capacity, fused);
        // step 3e-3: at 1e-2 the SiLU's curvature moves a difference quotient by ~1e-4 relative;
        // floor 2e-2 of max |grad|: the fp32 block output's rounding (~1e-7 of a loss of ~10,
        // over a step of 6e-3) is ~1e-4 absolute, against grads up to ~7. ref is scalar code
        // with double sums, so these are the same numbers on every machine.
        gradcheck(what, block_loss, &b, params[i].p, params[i].n, params[i].g, 200, 3e-3, 2e-3, 2e-2);
    }
    free(b.x), free(b.router), free(b.gate), free(b.up), free(b.down), free(b.probe), free(b.seg);
    free(a->logits), free(a->idx), free(a->w), free(a->offsets), free(a->slot_token), free(a->token_slot);
    free(a->dropped), free(a->xs), free(a->ys), free(a->g), free(a->u), free(a->h), free(b.out), free(b.stats);
    free(s.dlogits), free(s.dw), free(s.dys), free(s.dxs), free(s.dh), free(s.dg), free(s.du);
    free(dx), free(dr), free(dg), free(du), free(dd), free(drb), free(dgb), free(ddb);
    free(b.rbias), free(b.gbias), free(b.dbias);
    backend_destroy(be);
}

static void test_block_gradients(void) {
    check_block(0, 0, 0);
    check_block(1, 0, 0);
    check_block(1, 3, 0);  // capacity 3 of 18 slots over 5 experts: some dropped
    check_block(1, 0, 1);
}

int main(void) {
    rng_init(&ops_rng, 2121, 0);
    RUN(test_topk_against_sort);
    RUN(test_dispatch_rules);
    RUN(test_block_gradients);
    TEST_MAIN_END();
}
