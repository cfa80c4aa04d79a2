// cpu_moe.c: the mixture-of-experts ops on the CPU. Routing and the load-balancing gradient run
// moe_math.h per token across threads; the dispatch is the serial counting sort (O(N K)); the
// grouped GEMM is one op that runs the linear layer of cpu_matmul.c on each expert's block of
// slots, so an expert without slots is never read (batch-1 decode touches K experts' weights).
// Every output element is written by one thread in a fixed order: results do not depend on the
// thread count.
#include "cpu.h"

#include "../moe_math.h"

#define PAR_MIN 16384  // elements of work below which a loop stays on one thread

static void cpu_moe_route_forward(Backend *be, int32_t *idx, float *w, const float *logits, int N, int E, int K,
                                  int norm) {
    CHECK(K >= 1 && K <= E);
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * E * K > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        moe_topk_row(idx + (size_t)n * K, l, E, K);
        moe_weights_row(w + (size_t)n * K, l, idx + (size_t)n * K, E, K, norm);
    }
}

static void cpu_moe_route_backward(Backend *be, float *dlogits, const float *dw, const float *logits,
                                   const int32_t *idx, int N, int E, int K, int norm) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * E * K > PAR_MIN)
    for (int n = 0; n < N; n++)
        moe_weights_backward_row(dlogits + (size_t)n * E, dw + (size_t)n * K, logits + (size_t)n * E,
                                 idx + (size_t)n * K, E, K, norm);
}

static void cpu_moe_dispatch(Backend *be, int32_t *offsets, int32_t *slot_token, int32_t *token_slot,
                             int32_t *dropped, const int32_t *idx, int N, int E, int K, int capacity) {
    for (size_t i = 0; i < (size_t)N * K; i++) CHECK_MSG(idx[i] >= 0 && idx[i] < E, "expert %d of %d", idx[i], E);
    moe_dispatch_serial(offsets, slot_token, token_slot, dropped, idx, N, E, K, capacity);
}

static void cpu_moe_gather(Backend *be, float *xs, const float *x, const int32_t *slot_token,
                           const int32_t *offsets, int S, int E, int C) {
    int total = offsets[E];
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)S * C > PAR_MIN)
    for (int s = 0; s < S; s++) {
        if (s < total) memcpy(xs + (size_t)s * C, x + (size_t)slot_token[s] * C, (size_t)C * sizeof(float));
        else memset(xs + (size_t)s * C, 0, (size_t)C * sizeof(float));
    }
}

static void cpu_moe_gather_backward(Backend *be, float *dx, const float *dxs, const int32_t *token_slot, int N,
                                    int K, int C) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * K * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *d = dx + (size_t)n * C;
        for (int k = 0; k < K; k++) {
            int s = token_slot[(size_t)n * K + k];
            if (s < 0) continue;
            const float *g = dxs + (size_t)s * C;
#pragma omp simd
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

// Expert e's weight (OC,C) inside w (E,OC,C) stored as wdt.
static const void *expert_w(const void *w, DType wdt, int e, int C, int OC) {
    return (const char *)w + dtype_bytes(wdt, (size_t)e * OC * C);
}

static void cpu_moe_grouped_matmul_forward(Backend *be, float *out, const float *inp, const void *w, DType wdt,
                                           const float *bias, const int32_t *offsets, int S, int E, int C, int OC) {
    CHECK_MSG(wdt != DT_Q8_0 || ((size_t)OC * C) % Q8_0_BLOCK == 0, "Q8_0 experts of %d x %d", OC, C);
    for (int e = 0; e < E; e++) {
        int s0 = offsets[e], n = offsets[e + 1] - s0;
        if (n <= 0) continue;
        cpu_matmul_forward(be, out + (size_t)s0 * OC, inp + (size_t)s0 * C, expert_w(w, wdt, e, C, OC), wdt,
                           bias ? bias + (size_t)e * OC : NULL, n, C, OC);
    }
    int total = offsets[E];
    if (total < S) memset(out + (size_t)total * OC, 0, (size_t)(S - total) * OC * sizeof(float));
}

static void cpu_moe_grouped_matmul_backward(Backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                            const float *inp, const void *w, DType wdt, const int32_t *offsets,
                                            int S, int E, int C, int OC) {
    for (int e = 0; e < E; e++) {
        int s0 = offsets[e], n = offsets[e + 1] - s0;
        if (n <= 0) continue;
        cpu_matmul_backward(be, dinp ? dinp + (size_t)s0 * C : NULL, dw ? dw + (size_t)e * OC * C : NULL,
                            dbias ? dbias + (size_t)e * OC : NULL, dout + (size_t)s0 * OC, inp + (size_t)s0 * C,
                            expert_w(w, wdt, e, C, OC), wdt, n, C, OC);
    }
}

static void cpu_moe_combine_forward(Backend *be, float *out, const float *ys, const float *w,
                                    const int32_t *token_slot, int N, int K, int C) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * K * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (int k = 0; k < K; k++) {
            int s = token_slot[(size_t)n * K + k];
            if (s < 0) continue;
            float wk = w[(size_t)n * K + k];
            const float *y = ys + (size_t)s * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += wk * y[c];
        }
    }
}

static void cpu_moe_combine_backward(Backend *be, float *dys, float *dw, const float *dout, const float *ys,
                                     const float *w, const int32_t *token_slot, int N, int K, int C) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * K * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = dout + (size_t)n * C;
        for (int k = 0; k < K; k++) {
            int s = token_slot[(size_t)n * K + k];
            if (s < 0) continue;
            if (dys) {
                float wk = w[(size_t)n * K + k], *d = dys + (size_t)s * C;
#pragma omp simd
                for (int c = 0; c < C; c++) d[c] += wk * g[c];
            }
            if (dw) {
                const float *y = ys + (size_t)s * C;
                double acc = 0;
                for (int c = 0; c < C; c++) acc += (double)g[c] * y[c];
                dw[(size_t)n * K + k] = (float)(dw[(size_t)n * K + k] + acc);
            }
        }
    }
}

static void cpu_moe_aux_stats(Backend *be, float *stats, const float *logits, const int32_t *idx,
                              const int32_t *seg, int N, int E, int K) {
    double *lse = cpu_scratch(be, CPU_SCR_PARTIAL, (size_t)MAX(N, 1) * sizeof(double));  // (N)
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * E > PAR_MIN)
    for (int n = 0; n < N; n++) lse[n] = moe_lse_row(logits + (size_t)n * E, E);
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * E > PAR_MIN)
    for (int e = 0; e < E; e++) {
        double cnt = 0, ps = 0;
        for (int n = 0; n < N; n++) {
            if (seg && !seg[n]) continue;
            ps += exp((double)logits[(size_t)n * E + e] - lse[n]);
            for (int k = 0; k < K; k++) cnt += idx[(size_t)n * K + k] == e;
        }
        stats[e] = (float)(stats[e] + cnt);
        stats[E + e] = (float)(stats[E + e] + ps);
    }
    int tokens = 0;
    for (int n = 0; n < N; n++) tokens += !seg || seg[n];
    stats[2 * E] += (float)tokens;
}

static void cpu_moe_aux_backward(Backend *be, float *dlogits, const float *logits, const int32_t *seg,
                                 const float *stats, float coef, int N, int E) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if ((size_t)N * E > PAR_MIN)
    for (int n = 0; n < N; n++)
        if (!seg || seg[n]) moe_aux_backward_row(dlogits + (size_t)n * E, logits + (size_t)n * E, stats, coef, E);
}

// out (n) = (clamp(up) + 1) * g * sigmoid(alpha g), g = min(gate, limit), from gu (n, 2)
static void cpu_swiglu_clamp_forward(Backend *be, float *out, const float *gu, float alpha, float limit, size_t n) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = fminf(gu[2 * i], limit), u = fmaxf(fminf(gu[2 * i + 1], limit), -limit);
        out[i] = (u + 1.0f) * g / (1.0f + expf(-alpha * g));
    }
}

// dgu (n, 2) += ; no gradient through an active clamp
static void cpu_swiglu_clamp_backward(Backend *be, float *dgu, const float *dout, const float *gu, float alpha,
                                      float limit, size_t n) {
#pragma omp parallel for schedule(static) num_threads(be->threads) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gate = gu[2 * i], up = gu[2 * i + 1];
        float g = fminf(gate, limit), u = fmaxf(fminf(up, limit), -limit);
        float s = 1.0f / (1.0f + expf(-alpha * g));
        if (gate <= limit) dgu[2 * i] += dout[i] * (u + 1.0f) * (s + alpha * g * s * (1.0f - s));
        if (up >= -limit && up <= limit) dgu[2 * i + 1] += dout[i] * g * s;
    }
}

void backend_cpu_install_moe(Backend *be) {
    be->moe_route_forward = cpu_moe_route_forward;
    be->moe_route_backward = cpu_moe_route_backward;
    be->moe_dispatch = cpu_moe_dispatch;
    be->moe_gather = cpu_moe_gather;
    be->moe_gather_backward = cpu_moe_gather_backward;
    be->moe_grouped_matmul_forward = cpu_moe_grouped_matmul_forward;
    be->moe_grouped_matmul_backward = cpu_moe_grouped_matmul_backward;
    be->moe_combine_forward = cpu_moe_combine_forward;
    be->moe_combine_backward = cpu_moe_combine_backward;
    be->moe_aux_stats = cpu_moe_aux_stats;
    be->moe_aux_backward = cpu_moe_aux_backward;
    be->swiglu_clamp_forward = cpu_swiglu_clamp_forward;
    be->swiglu_clamp_backward = cpu_swiglu_clamp_backward;
}
