// vocab_head.c: the embedding, LM head and loss heads on vocabulary shards (vocab_head.h).
#include "vocab_head.h"

#include "../backend/sample_math.h"
#include "../backend/vocab_math.h"
#include "../core/alloc.h"
#include "plan.h"

#include <math.h>
#include <string.h>

// This rank's shard: rows [lo, lo + V) of Vfull, shard t of T.
typedef struct Shard {
    int lo, V, Vfull, T, t;
} Shard;

static Shard shard_of(const Model *m) {
    const ModelConfig *c = &m->cfg;
    CHECK(c->vocab_part > 0 && c->vocab_size % c->vocab_part == 0 && c->vocab_lo % c->vocab_part == 0);
    Shard s = {c->vocab_lo, c->vocab_part, c->vocab_size, c->vocab_size / c->vocab_part, c->vocab_lo / c->vocab_part};
    return s;
}

void vocab_embed(Model *m, float *out, const int32_t *ids, int N) {
    Shard s = shard_of(m);
    const TensorInfo *t = tensors_get(&m->tt, TK_EMBED, -1);
    m->be->embedding_forward_part(m->be, out, ids, model_data(m, t), t->dtype, N, m->cfg.hidden_size, s.lo, s.V);
    model_reduce(m, out, (size_t)N * m->cfg.hidden_size);
}

void vocab_embed_backward(Model *m, float *dwte, const float *dout, const int32_t *ids, int N) {
    Shard s = shard_of(m);
    m->be->embedding_backward_part(m->be, dwte, dout, ids, N, m->cfg.hidden_size, s.lo, s.V);
}

// A whole row from the shards' statistics: st points at this row's set in rank 0's slot, the
// slots `stride` floats apart. Combined in rank order on every rank (the same numbers everywhere).
typedef struct RowStat {
    double lse, entropy, tgt, mean, lse2;
    int arg;  // first id of the maximum
} RowStat;

static RowStat combine(const float *st, size_t stride, int T, int Vfull) {
    double mx = -INFINITY;
    int arg = 0;
    for (int k = 0; k < T; k++) {
        const float *x = st + (size_t)k * stride;
        if (x[VS_MAX] > mx) mx = x[VS_MAX], arg = (int)x[VS_ARG];  // strict: the first shard on ties
    }
    double Z = 0, sx = 0, s2 = 0, xs = 0, tgt = 0;
    for (int k = 0; k < T; k++) {
        const float *x = st + (size_t)k * stride;
        xs += x[VS_XSUM];
        if (x[VS_HAS] != 0) tgt = x[VS_TGT];
        if (x[VS_MAX] == -INFINITY) continue;
        double f = exp((double)x[VS_MAX] - mx);
        Z += x[VS_SUM] * f;
        sx += x[VS_SX] * f;
        s2 += x[VS_S2] * f * f;
    }
    RowStat r = {mx + log(Z), 0, tgt, xs / Vfull, log(s2) - 2 * log(Z), arg};
    r.entropy = r.lse - sx / Z;
    return r;
}

// Per-call host state: the targets, weights and coefficients, and the device scratch of a plan.
typedef struct Head {
    Model *m;
    Plan *p;
    Shard s;
    int N, C, chunk;
    int32_t *tg;       // (N) host targets
    float *Z;          // (chunk, V) device: the shard's logits of a chunk
    float *stats;      // (T, sets, chunk, VOCAB_STATS) device
    float *rows;       // (chunk, VOCAB_ROW) device
    float *part;       // (chunk, 2) device
    float *hst;        // (T, sets, chunk, VOCAB_STATS) host
    float *hrows;      // (chunk, VOCAB_ROW) host
    float *hpart;      // (chunk, 2) host
} Head;

#define SETS 4  // statistics sets gathered at once (student / teacher, at tau / at 1)

size_t vocab_scratch_floats(const ModelConfig *cfg, int chunk) {
    if (cfg->vocab_part <= 0) return 0;
    size_t T = (size_t)(cfg->vocab_size / cfg->vocab_part);
    return (size_t)chunk * (T * SETS * VOCAB_STATS + VOCAB_ROW + 2);
}

static void head_init(Head *h, Model *m, Plan *p) {
    memset(h, 0, sizeof *h);
    h->m = m, h->p = p, h->s = shard_of(m);
    h->N = p->B * p->T, h->C = m->cfg.hidden_size, h->chunk = p->head_chunk;
    CHECK_MSG(p->head_scratch && p->vocab_scratch, "vocabulary-parallel head: the plan has no head scratch");
    size_t T = (size_t)h->s.T, ch = (size_t)h->chunk;
    h->Z = p->head_scratch;
    h->stats = p->vocab_scratch;
    h->rows = h->stats + T * SETS * ch * VOCAB_STATS;
    h->part = h->rows + ch * VOCAB_ROW;
    h->hst = xmalloc(T * SETS * ch * VOCAB_STATS * sizeof(float));
    h->hrows = xcalloc(ch * VOCAB_ROW, sizeof(float));
    h->hpart = xmalloc(ch * 2 * sizeof(float));
    h->tg = xmalloc((size_t)h->N * sizeof(int32_t));
    m->be->download(m->be, h->tg, p->targets, (size_t)h->N * sizeof(int32_t));
    for (int r = 0; r < h->N; r++)
        CHECK_MSG(h->tg[r] == IGNORE_INDEX || (h->tg[r] >= 0 && h->tg[r] < h->s.Vfull),
                  "target %d at row %d outside the vocabulary (%d)", h->tg[r], r, h->s.Vfull);
}

static void head_free(Head *h) {
    free(h->hst), free(h->hrows), free(h->hpart), free(h->tg);
}

static float *host_floats(Backend *be, const float *dev, size_t n) {
    float *x = xmalloc(n * sizeof(float));
    be->download(be, x, dev, n * sizeof(float));
    return x;
}

// Z (M,V) = the shard's soft-capped logits of rows [r0, r0 + M) of hidden states hs (N,C).
static void shard_logits(Model *m, float *Z, const float *hs, const void *W, DType wdt, int r0, int M) {
    int C = m->cfg.hidden_size, V = m->cfg.vocab_part;
    m->be->matmul_forward(m->be, Z, hs + (size_t)r0 * C, W, wdt, NULL, M, C, V);
    if (m->cfg.final_softcap > 0) m->be->softcap_forward(m->be, Z, (float)m->cfg.final_softcap, (size_t)M * V);
}

// The statistics of set `set` of a chunk of M rows at temperature tau into this rank's slot.
static void shard_stats(Head *h, const float *Z, int set, int r0, int M, float tau, int with_targets) {
    size_t slot = ((size_t)h->s.t * SETS + set) * h->chunk * VOCAB_STATS;
    h->m->be->vocab_stats(h->m->be, h->stats + slot, Z, with_targets ? h->p->targets + r0 : NULL, tau, h->s.lo, M,
                          h->s.V);
}

// Every rank's statistics on every rank (hst); the statistics ops ran after zero_stats.
static void zero_stats(Head *h) {
    h->m->be->zero(h->m->be, h->stats, (size_t)h->s.T * SETS * h->chunk * VOCAB_STATS * sizeof(float));
}

static void gather_stats(Head *h) {
    size_t n = (size_t)h->s.T * SETS * h->chunk * VOCAB_STATS;
    model_reduce(h->m, h->stats, n);
    h->m->be->download(h->m->be, h->hst, h->stats, n * sizeof(float));
}

static RowStat row_stat(const Head *h, int set, int i) {
    size_t stride = (size_t)SETS * h->chunk * VOCAB_STATS;
    return combine(h->hst + ((size_t)set * h->chunk + i) * VOCAB_STATS, stride, h->s.T, h->s.Vfull);
}

// The LM head's backward of the chunk's dz (in h->Z): dh rows += dz W, dW += dz^T h.
static void shard_backward(Head *h, const void *W, DType wdt, float *dW, int r0, int M) {
    Model *m = h->m;
    size_t off = (size_t)r0 * h->C;
    m->be->matmul_backward(m->be, h->p->dln + off, dW, NULL, h->Z, h->p->lnf + off, W, wdt, M, h->C, h->s.V);
}

static void upload_rows(Head *h, int M) {
    h->m->be->upload(h->m->be, h->rows, h->hrows, (size_t)M * VOCAB_ROW * sizeof(float));
}

void vocab_ce(Model *m, Plan *p, const void *W, DType wdt, float *dW, float grad_scale, int backward) {
    Backend *be = m->be;
    Head h;
    head_init(&h, m, p);
    int N = h.N;
    float *w = host_floats(be, p->weights, (size_t)N);
    float *loss = xcalloc((size_t)N, sizeof(float)), *corr = xcalloc((size_t)N, sizeof(float));
    float *ent = xcalloc((size_t)N, sizeof(float));
    if (backward) be->zero(be, p->dln, (size_t)N * h.C * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += h.chunk) {
        int M = MIN(h.chunk, N - r0), any = 0;
        for (int i = 0; i < M; i++) any |= h.tg[r0 + i] != IGNORE_INDEX;
        if (!any) continue;  // the same on every rank: targets are replicated
        shard_logits(m, h.Z, p->lnf, W, wdt, r0, M);
        zero_stats(&h);
        shard_stats(&h, h.Z, 0, r0, M, 1.0f, 1);
        gather_stats(&h);
        for (int i = 0; i < M; i++) {
            int r = r0 + i, tgt = h.tg[r];
            float *row = h.hrows + (size_t)i * VOCAB_ROW;
            row[VR_COEF] = 0;
            if (tgt == IGNORE_INDEX) continue;
            RowStat st = row_stat(&h, 0, i);
            loss[r] = (float)(w[r] * (st.lse - st.tgt));
            corr[r] = st.arg == tgt ? 1.0f : 0.0f;
            ent[r] = (float)st.entropy;
            row[VR_LSE] = (float)st.lse;
            row[VR_COEF] = grad_scale * w[r];
        }
        if (!backward) continue;
        upload_rows(&h, M);
        be->vocab_grad(be, h.Z, p->targets + r0, h.rows, 1.0f, (float)m->cfg.final_softcap, h.s.lo, M, h.s.V);
        shard_backward(&h, W, wdt, dW, r0, M);
    }
    be->upload(be, p->row_loss, loss, (size_t)N * sizeof(float));
    be->upload(be, p->row_correct, corr, (size_t)N * sizeof(float));
    be->upload(be, p->row_entropy, ent, (size_t)N * sizeof(float));
    if (backward) model_reduce(m, p->dln, (size_t)N * h.C);
    free(w), free(loss), free(corr), free(ent);
    head_free(&h);
}

void vocab_logprob(Model *m, Plan *p, const void *W, DType wdt, float *dW, float tau, const float *coef,
                   float *out_logp, float *out_stats) {
    Backend *be = m->be;
    Head h;
    head_init(&h, m, p);
    int N = h.N;
    float *cf = coef ? host_floats(be, coef, (size_t)N) : NULL;
    float *lp = xcalloc((size_t)N, sizeof(float)), *ent = xcalloc((size_t)N, sizeof(float));
    float *sts = xcalloc((size_t)N * LOGPROB_STATS, sizeof(float));
    if (coef) be->zero(be, p->dln, (size_t)N * h.C * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += h.chunk) {
        int M = MIN(h.chunk, N - r0), any = 0;
        for (int i = 0; i < M; i++) any |= h.tg[r0 + i] != IGNORE_INDEX;
        if (!any) continue;
        shard_logits(m, h.Z, p->lnf, W, wdt, r0, M);
        zero_stats(&h);
        shard_stats(&h, h.Z, 0, r0, M, tau, 1);
        gather_stats(&h);
        for (int i = 0; i < M; i++) {
            int r = r0 + i, tgt = h.tg[r];
            float *row = h.hrows + (size_t)i * VOCAB_ROW;
            row[VR_COEF] = 0;
            if (tgt == IGNORE_INDEX) continue;
            RowStat st = row_stat(&h, 0, i);
            lp[r] = (float)(st.tgt - st.lse);
            ent[r] = (float)st.entropy;
            float *s = sts + (size_t)r * LOGPROB_STATS;
            s[LOGPROB_STAT_ZMEAN] = (float)st.mean;
            s[LOGPROB_STAT_CORRECT] = st.arg == tgt ? 1.0f : 0.0f;
            s[LOGPROB_STAT_LSE2] = (float)st.lse2;
            row[VR_LSE] = (float)st.lse;
            row[VR_COEF] = cf ? -cf[r] : 0.0f;  // d(coef logp)/dz = coef (onehot - p) / tau
        }
        if (!coef) continue;
        upload_rows(&h, M);
        be->vocab_grad(be, h.Z, p->targets + r0, h.rows, tau, (float)m->cfg.final_softcap, h.s.lo, M, h.s.V);
        shard_backward(&h, W, wdt, dW, r0, M);
    }
    if (out_logp) be->upload(be, out_logp, lp, (size_t)N * sizeof(float));
    be->upload(be, p->row_entropy, ent, (size_t)N * sizeof(float));
    if (out_stats) be->upload(be, out_stats, sts, (size_t)N * LOGPROB_STATS * sizeof(float));
    if (coef) model_reduce(m, p->dln, (size_t)N * h.C);
    free(cf), free(lp), free(ent), free(sts);
    head_free(&h);
}

// part (M,2) of the chunk summed over the group, on the host.
static void jsd_sums(Head *h, const float *Zs, const float *Zt, float tau, float beta, int M) {
    Backend *be = h->m->be;
    upload_rows(h, M);
    be->vocab_jsd(be, h->part, Zs, Zt, h->rows, tau, beta, M, h->s.V);
    model_reduce(h->m, h->part, (size_t)M * 2);
    be->download(be, h->hpart, h->part, (size_t)M * 2 * sizeof(float));
}

// The teacher's top k of each of the chunk's M rows over the whole vocabulary (heads_topk_mask of
// heads_math.h over the group): the radix select's digit counts summed over the shards, then the
// ties at the threshold kept in index order (the lower ranks' first); every entry of Zs and Zt
// (M,V) outside the support becomes -inf. Through the host.
static void shard_topk_mask(Head *h, float *Zs, float *Zt, int M, int k) {
    Backend *be = h->m->be;
    int V = h->s.V, T = h->s.T;
    size_t n = (size_t)M * V;
    float *zs = host_floats(be, Zs, n), *zt = host_floats(be, Zt, n);
    uint32_t *prefix = xcalloc((size_t)M, sizeof(uint32_t)), mask = 0;
    uint64_t *need = xmalloc((size_t)M * sizeof(uint64_t)), *cnt = xmalloc((size_t)M * 256 * sizeof(uint64_t));
    uint64_t *all = xmalloc((size_t)T * M * 256 * sizeof(uint64_t));
    for (int i = 0; i < M; i++) need[i] = (uint64_t)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        memset(cnt, 0, (size_t)M * 256 * sizeof(uint64_t));
        for (int i = 0; i < M; i++)
            for (int j = 0; j < V; j++) {
                uint32_t key = sample_key(zt[(size_t)i * V + j]);
                if ((key & mask) == prefix[i]) cnt[(size_t)i * 256 + ((key >> shift) & 255)]++;
            }
        model_gather(h->m, all, cnt, (size_t)M * 256 * sizeof(uint64_t));
        for (int i = 0; i < M; i++) {
            uint64_t c[256] = {0};
            for (int r = 0; r < T; r++)
                for (int d = 0; d < 256; d++) c[d] += all[((size_t)r * M + i) * 256 + d];
            int d = 255;
            for (; d > 0 && c[d] < need[i]; d--) need[i] -= c[d];
            prefix[i] |= (uint32_t)d << shift;
        }
        mask |= 255u << shift;
    }
    for (int i = 0; i < M; i++) {  // this rank's ties at the threshold, then those of the lower ranks
        cnt[i] = 0;
        for (int j = 0; j < V; j++) cnt[i] += sample_key(zt[(size_t)i * V + j]) == prefix[i];
    }
    model_gather(h->m, all, cnt, (size_t)M * sizeof(uint64_t));
    for (int i = 0; i < M; i++) {
        uint64_t tie = 0;
        for (int r = 0; r < h->s.t; r++) tie += all[(size_t)r * M + i];
        for (int j = 0; j < V; j++) {
            size_t at = (size_t)i * V + j;
            uint32_t key = sample_key(zt[at]);
            int keep = key > prefix[i] || (key == prefix[i] && tie++ < need[i]);
            if (!keep) zs[at] = zt[at] = -INFINITY;
        }
    }
    be->upload(be, Zs, zs, n * sizeof(float));
    be->upload(be, Zt, zt, n * sizeof(float));
    free(zs), free(zt), free(prefix), free(need), free(cnt), free(all);
}

void vocab_distill(Model *m, Plan *p, const void *W, DType wdt, float *dW, Model *mt, Plan *pt, const void *Wt,
                   DType wdt_t, float tau, float beta, int top_k, float grad_scale, int backward, float *row_kl) {
    Backend *be = m->be;
    CHECK_MSG(mt->cfg.vocab_part == m->cfg.vocab_part && mt->cfg.vocab_lo == m->cfg.vocab_lo,
              "vocabulary-parallel distillation: the teacher's shard differs from the student's");
    Head h;
    head_init(&h, m, p);
    int N = h.N, masked = top_k > 0 && top_k < h.s.Vfull;
    int kl1 = row_kl && (tau != 1.0f || masked);  // the metric (temperature 1, whole rows) needs its own statistics
    float *Zt = pt->head_scratch;
    float *w = host_floats(be, p->weights, (size_t)N);
    float *loss = xcalloc((size_t)N, sizeof(float)), *kl = xcalloc((size_t)N, sizeof(float));
    double *L = xmalloc((size_t)h.chunk * sizeof(double)), *K = xmalloc((size_t)h.chunk * sizeof(double));
    if (backward) be->zero(be, p->dln, (size_t)N * h.C * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += h.chunk) {
        int M = MIN(h.chunk, N - r0), any = 0;
        for (int i = 0; i < M; i++) any |= h.tg[r0 + i] != IGNORE_INDEX;
        if (!any) continue;
        shard_logits(m, h.Z, p->lnf, W, wdt, r0, M);
        shard_logits(mt, Zt, pt->lnf, Wt, wdt_t, r0, M);
        zero_stats(&h);
        if (!masked) shard_stats(&h, h.Z, 0, r0, M, tau, 0), shard_stats(&h, Zt, 1, r0, M, tau, 0);
        if (kl1) shard_stats(&h, h.Z, 2, r0, M, 1.0f, 0), shard_stats(&h, Zt, 3, r0, M, 1.0f, 0);
        gather_stats(&h);
        if (row_kl) {  // KL(student || teacher) at temperature 1: the reverse divergence's sums
            for (int i = 0; i < M; i++) {
                float *row = h.hrows + (size_t)i * VOCAB_ROW;
                row[VR_LSE] = (float)row_stat(&h, kl1 ? 2 : 0, i).lse;
                row[VR_LSE_T] = (float)row_stat(&h, kl1 ? 3 : 1, i).lse;
            }
            jsd_sums(&h, h.Z, Zt, 1.0f, 1.0f, M);
            for (int i = 0; i < M; i++)
                if (h.tg[r0 + i] != IGNORE_INDEX) kl[r0 + i] = h.hpart[2 * i];
        }
        if (masked) {  // the teacher's top k over the whole row, then the statistics of the support
            shard_topk_mask(&h, h.Z, Zt, M, top_k);
            zero_stats(&h);
            shard_stats(&h, h.Z, 0, r0, M, tau, 0), shard_stats(&h, Zt, 1, r0, M, tau, 0);
            gather_stats(&h);
        }
        for (int i = 0; i < M; i++) {
            float *row = h.hrows + (size_t)i * VOCAB_ROW;
            row[VR_LSE] = (float)row_stat(&h, 0, i).lse;
            row[VR_LSE_T] = (float)row_stat(&h, 1, i).lse;
        }
        jsd_sums(&h, h.Z, Zt, tau, beta, M);
        for (int i = 0; i < M; i++) {
            int r = r0 + i, live = h.tg[r] != IGNORE_INDEX;
            float *row = h.hrows + (size_t)i * VOCAB_ROW;
            L[i] = h.hpart[2 * i], K[i] = h.hpart[2 * i + 1];
            loss[r] = live ? (float)(w[r] * L[i]) : 0.0f;
            row[VR_L] = (float)L[i], row[VR_K] = (float)K[i];
            row[VR_COEF] = live ? grad_scale * w[r] : 0.0f;
        }
        if (!backward) continue;
        upload_rows(&h, M);
        be->vocab_jsd_grad(be, h.Z, Zt, h.rows, tau, beta, (float)m->cfg.final_softcap, M, h.s.V);
        shard_backward(&h, W, wdt, dW, r0, M);
    }
    be->upload(be, p->row_loss, loss, (size_t)N * sizeof(float));
    if (row_kl) be->upload(be, row_kl, kl, (size_t)N * sizeof(float));
    if (backward) model_reduce(m, p->dln, (size_t)N * h.C);
    free(w), free(loss), free(kl), free(L), free(K);
    head_free(&h);
}
