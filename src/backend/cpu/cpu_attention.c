// cpu_attention.c: causal GQA attention with segment masks on sgemm, in blocks of QB queries.
// A block's scores against its keys, S = scale Q K^T, are one sgemm; masking and the softmax
// are a row loop; out = P V is a second sgemm. Keys before the block's first document start and
// after its last query are never touched, so left padding and packed documents cost nothing.
//
// The backward pass recomputes P from the saved lse (flash-attention style) and runs as tasks
// over (batch, kv head, part of the kv head's query heads), so dk and dv have one writer per
// task: the kv head's rows directly when there is one part, else a private accumulator per part
// that is added in part order afterwards. No atomics: results are fixed for a thread count.
#include "cpu.h"

#include "../../core/alloc.h"

#include <math.h>
#include <omp.h>

#define QB 128  // query rows per block (64: 25% slower at T=1024; 256: no faster, more waste)

// kmin (B,T): the first key each query may attend (the start of the first run of its segment
// id); T for padding queries. runs: 2*T ints of workspace.
static void key_bounds(int32_t *kmin, int32_t *runs, const int32_t *seg, int B, int T) {
    int32_t *run_id = runs, *run_start = runs + T;
    for (int b = 0; b < B; b++) {
        const int32_t *sb = seg + (size_t)b * T;
        int nruns = 0, first = 0;
        for (int t = 0; t < T; t++) {
            if (t == 0 || sb[t] != sb[t - 1]) {
                first = t;
                for (int r = 0; r < nruns; r++)  // an id that came back: its first run counts
                    if (run_id[r] == sb[t]) {
                        first = run_start[r];
                        break;
                    }
                run_id[nruns] = sb[t];
                run_start[nruns] = t;
                nruns++;
            }
            kmin[(size_t)b * T + t] = sb[t] == 0 ? T : first;
        }
    }
}

// The first key any query of [t0, t1) may attend; >= t1 when they are all padding.
static int block_klo(const int32_t *kmin_b, int t0, int t1) {
    int klo = INT32_MAX;
    for (int t = t0; t < t1; t++) klo = MIN(klo, kmin_b[t]);
    return klo;
}

// Row i of a block's scores (keys klo..klo+nk-1) for query t: masked entries become exactly 0
// and the rest exp(s - sub) ; returns the sum of the row.
// With a window W > 0 keys s with t - s >= W are masked too.
static float masked_exp_row(float *row, int nk, int klo, int t, const int32_t *segb, float sub, int W) {
    int32_t st = segb[t];
    int lo = W > 0 ? t - W + 1 : INT32_MIN;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < nk; j++) {
        int s = klo + j;
        float e = (s <= t && s >= lo && segb[s] == st) ? cpu_expf(row[j] - sub) : 0.0f;
        row[j] = e;
        sum += e;
    }
    return sum;
}

static float masked_max_row(const float *row, int nk, int klo, int t, const int32_t *segb, int W) {
    int32_t st = segb[t];
    int lo = W > 0 ? t - W + 1 : INT32_MIN;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < nk; j++) {
        int s = klo + j;
        float x = (s <= t && s >= lo && segb[s] == st) ? row[j] : -INFINITY;
        mx = x > mx ? x : mx;
    }
    return mx;
}

// Soft-capping of a row of scores in place: x -> cap tanh(x / cap).
static void cap_row(float *row, int nk, float cap) {
    float inv = 1.0f / cap;
    for (int j = 0; j < nk; j++) row[j] = cap * tanhf(row[j] * inv);
}

static float opt_scale(AttnOpts o, int HD) { return o.scale > 0 ? o.scale : (float)(1.0 / sqrt((double)HD)); }

static int32_t *attention_key_bounds(Backend *be, const int32_t *seg, int B, int T) {
    int32_t *kmin = cpu_scratch(be, CPU_SCR_INDEX, ((size_t)B * T + 2 * (size_t)T) * sizeof(int32_t));
    key_bounds(kmin, kmin + (size_t)B * T, seg, B, T);
    return kmin;
}

// q (B,T,NH,HD), k v (B,T,NKV,HD), seg (B,T) -> out (B,T,NH,HD), lse (B,NH,T)
void cpu_attention_forward_opt(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                               const int32_t *seg, int B, int T, int NH, int NKV, int HD, AttnOpts o) {
    CHECK(NKV > 0 && NH % NKV == 0);
    int rep = NH / NKV, nqb = (T + QB - 1) / QB, W = o.window;
    float scale = opt_scale(o, HD), cap = o.softcap;
    size_t ldq = (size_t)NH * HD, ldk = (size_t)NKV * HD;
    const int32_t *kmin = attention_key_bounds(be, seg, B, T);
    float *S_all = cpu_scratch(be, CPU_SCR_ATTN, (size_t)be->threads * QB * T * sizeof(float));
    long ntask = (long)B * NH * nqb;
#pragma omp parallel num_threads(be->threads)
    {
        float *S = S_all + (size_t)omp_get_thread_num() * QB * T;
        // each task writes only its own rows of out and lse, so dynamic scheduling is safe
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntask; task++) {
            int qb = (int)(task % nqb), h = (int)(task / nqb % NH), b = (int)(task / nqb / NH), kh = h / rep;
            int t0 = qb * QB, t1 = MIN(T, t0 + QB), M = t1 - t0;
            const int32_t *segb = seg + (size_t)b * T;
            float *ob = out + ((size_t)b * T + t0) * ldq + (size_t)h * HD;
            float *lb = lse + ((size_t)b * NH + h) * T;
            int klo = block_klo(kmin + (size_t)b * T, t0, t1);
            if (W > 0 && klo < t1) klo = MAX(klo, t0 - W + 1);  // no query of the block sees further back
            if (klo >= t1) {  // all padding
                for (int i = 0; i < M; i++) memset(ob + i * ldq, 0, (size_t)HD * sizeof(float)), lb[t0 + i] = 0;
                continue;
            }
            int nk = t1 - klo;
            const float *kb = k + ((size_t)b * T + klo) * ldk + (size_t)kh * HD;
            const float *vb = v + ((size_t)b * T + klo) * ldk + (size_t)kh * HD;
            cpu_sgemm(0, 1, M, nk, HD, scale, q + ((size_t)b * T + t0) * ldq + (size_t)h * HD, (int)ldq, kb, (int)ldk,
                      0.0f, S, nk);
            for (int i = 0; i < M; i++) {
                int t = t0 + i;
                float *row = S + (size_t)i * nk;
                if (segb[t] == 0) {
                    memset(row, 0, (size_t)nk * sizeof(float));
                    lb[t] = 0;
                    continue;
                }
                if (cap > 0) cap_row(row, nk, cap);
                float mx = masked_max_row(row, nk, klo, t, segb, W);
                float sum = masked_exp_row(row, nk, klo, t, segb, mx, W);
                float inv = 1.0f / sum;
#pragma omp simd
                for (int j = 0; j < nk; j++) row[j] *= inv;
                lb[t] = mx + logf(sum);
            }
            cpu_sgemm(0, 0, M, HD, nk, 1.0f, S, nk, vb, (int)ldk, 0.0f, ob, (int)ldq);
        }
    }
}

// dq (B,T,NH,HD) +=, dk dv (B,T,NKV,HD) += ; P = exp(S - lse), dS = P (dO V^T - rowdot(dO, O)),
// dV += P^T dO, dQ += scale dS K, dK += scale dS^T Q.
// With a soft-cap the scores are capped before P is recomputed and dS picks up 1 - (S / cap)^2.
void cpu_attention_backward_opt(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                                const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                                int B, int T, int NH, int NKV, int HD, AttnOpts o) {
    CHECK(NKV > 0 && NH % NKV == 0);
    int rep = NH / NKV, nqb = (T + QB - 1) / QB, W = o.window;
    float scale = opt_scale(o, HD), cap = o.softcap;
    size_t ldq = (size_t)NH * HD, ldk = (size_t)NKV * HD;
    const int32_t *kmin = attention_key_bounds(be, seg, B, T);
    float *S_all = cpu_scratch(be, CPU_SCR_ATTN, (size_t)be->threads * 2 * QB * T * sizeof(float));
    // Split each kv head's query heads into parts until there is a task per thread.
    int groups = B * NKV, parts = MIN(rep, (be->threads + groups - 1) / groups);
    float *acc = NULL;  // (groups*parts, 2, T, HD): private dk, dv per task when parts > 1
    if (parts > 1 && (dk || dv)) {
        size_t n = (size_t)groups * parts * 2 * T * HD;
        acc = cpu_scratch(be, CPU_SCR_ATTN_ACC, n * sizeof(float));
        memset(acc, 0, n * sizeof(float));
    }
    long ntask = (long)groups * parts;
#pragma omp parallel num_threads(be->threads)
    {
        float *S = S_all + (size_t)omp_get_thread_num() * 2 * QB * T, *dS = S + (size_t)QB * T;
        // every task has its own dq heads and its own dk/dv target, so dynamic scheduling is safe
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntask; task++) {
            int part = (int)(task % parts), g = (int)(task / parts), b = g / NKV, kh = g % NKV;
            int h0 = kh * rep + rep * part / parts, h1 = kh * rep + rep * (part + 1) / parts;
            const int32_t *segb = seg + (size_t)b * T;
            // where this task accumulates dk and dv: rows (T) with stride ldt
            float *dkt, *dvt;
            size_t ldt;
            if (acc) {
                float *a = acc + (size_t)task * 2 * T * HD;
                dkt = dk ? a : NULL, dvt = dv ? a + (size_t)T * HD : NULL, ldt = (size_t)HD;
            } else {
                dkt = dk ? dk + (size_t)b * T * ldk + (size_t)kh * HD : NULL;
                dvt = dv ? dv + (size_t)b * T * ldk + (size_t)kh * HD : NULL, ldt = ldk;
            }
            for (int h = h0; h < h1; h++) {
                const float *lb = lse + ((size_t)b * NH + h) * T;
                for (int qb = 0; qb < nqb; qb++) {
                    int t0 = qb * QB, t1 = MIN(T, t0 + QB), M = t1 - t0;
                    int klo = block_klo(kmin + (size_t)b * T, t0, t1);
                    if (W > 0 && klo < t1) klo = MAX(klo, t0 - W + 1);
                    if (klo >= t1) continue;
                    int nk = t1 - klo;
                    size_t qoff = ((size_t)b * T + t0) * ldq + (size_t)h * HD;
                    const float *kb = k + ((size_t)b * T + klo) * ldk + (size_t)kh * HD;
                    const float *vb = v + ((size_t)b * T + klo) * ldk + (size_t)kh * HD;
                    cpu_sgemm(0, 1, M, nk, HD, scale, q + qoff, (int)ldq, kb, (int)ldk, 0.0f, S, nk);
                    cpu_sgemm(0, 1, M, nk, HD, 1.0f, dout + qoff, (int)ldq, vb, (int)ldk, 0.0f, dS, nk);
                    for (int i = 0; i < M; i++) {
                        int t = t0 + i;
                        float *p = S + (size_t)i * nk, *ds = dS + (size_t)i * nk;
                        if (segb[t] == 0) {
                            memset(p, 0, (size_t)nk * sizeof(float));
                            memset(ds, 0, (size_t)nk * sizeof(float));
                            continue;
                        }
                        const float *go = dout + qoff + (size_t)i * ldq, *oo = out + qoff + (size_t)i * ldq;
                        float D = 0;
#pragma omp simd reduction(+ : D)
                        for (int d = 0; d < HD; d++) D += go[d] * oo[d];
                        if (cap > 0) {
                            cap_row(p, nk, cap);
                            float inv = 1.0f / cap;
                            for (int j = 0; j < nk; j++) ds[j] = (ds[j] - D) * (1.0f - (p[j] * inv) * (p[j] * inv));
                            masked_exp_row(p, nk, klo, t, segb, lb[t], W);
#pragma omp simd
                            for (int j = 0; j < nk; j++) ds[j] *= p[j];
                            continue;
                        }
                        masked_exp_row(p, nk, klo, t, segb, lb[t], W);
#pragma omp simd
                        for (int j = 0; j < nk; j++) ds[j] = p[j] * (ds[j] - D);
                    }
                    if (dvt) cpu_sgemm(1, 0, nk, HD, M, 1.0f, S, nk, dout + qoff, (int)ldq, 1.0f, dvt + klo * ldt, (int)ldt);
                    if (dq) cpu_sgemm(0, 0, M, HD, nk, scale, dS, nk, kb, (int)ldk, 1.0f, dq + qoff, (int)ldq);
                    if (dkt) cpu_sgemm(1, 0, nk, HD, M, scale, dS, nk, q + qoff, (int)ldq, 1.0f, dkt + klo * ldt, (int)ldt);
                }
            }
        }
    }
    if (!acc) return;
    // add the parts' accumulators in part order
    long nrows = (long)groups * T;
#pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long r = 0; r < nrows; r++) {
        int g = (int)(r / T), t = (int)(r % T), b = g / NKV, kh = g % NKV;
        size_t dst = ((size_t)b * T + t) * ldk + (size_t)kh * HD;
        for (int part = 0; part < parts; part++) {
            const float *src = acc + ((size_t)g * parts + part) * 2 * T * HD + (size_t)t * HD;
            if (dk)
#pragma omp simd
                for (int d = 0; d < HD; d++) dk[dst + d] += src[d];
            if (dv)
#pragma omp simd
                for (int d = 0; d < HD; d++) dv[dst + d] += src[(size_t)T * HD + d];
        }
    }
}

void cpu_attention_forward(Backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int32_t *seg, int B, int T, int NH, int NKV, int HD) {
    cpu_attention_forward_opt(be, out, lse, q, k, v, seg, B, T, NH, NKV, HD, (AttnOpts){0});
}

void cpu_attention_backward(Backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                            const float *lse, const float *q, const float *k, const float *v, const int32_t *seg,
                            int B, int T, int NH, int NKV, int HD) {
    cpu_attention_backward_opt(be, dq, dk, dv, dout, out, lse, q, k, v, seg, B, T, NH, NKV, HD, (AttnOpts){0});
}
