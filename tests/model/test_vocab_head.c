// test_vocab_head.c: the heads on vocabulary shards (model/vocab_head.c) against the fused heads
// of backend.h on one process: a model marked as holding one shard of the whole vocabulary
// (vocab_part = V) runs the shard path (shard logits, vocab_stats, the host combination,
// vocab_grad / vocab_jsd / vocab_jsd_grad, the LM head's backward) and must give the fused heads'
// per-row outputs and parameter gradients: cross-entropy, log-probs with coefficients and the
// preference statistics, distillation at three betas with row_kl and over the teacher's top k
// (the radix select over the shards' digit counts), with and without a final
// soft-cap, on ref, cpu and cuda (the emulator of make CUDA_EMU=1 builds). Combining several shards is what tests/e2e/dist_tp.sh holds to one
// process. Bounds: the two paths sum the same terms in another order (double accumulators, fp32
// logits), so per-row values agree to ~1e-6 relative; 1e-4 leaves room for another sgemm kernel
// and fails on any wrong term (a missing temperature or soft-cap factor is O(1)).
#include "test.h"

#include "core/alloc.h"
#include "model/qwen3.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define B 2
#define T 6
#define N (B * T)

static Model *load(Backend *be, const char *name, int shard, double softcap) {
    char dir[128];
    snprintf(dir, sizeof dir, "tests/data/models/%s", name);
    Err e = {0};
    Model *m = NULL;
    EXPECT_MSG(model_load(dir, be, DT_F32, &m, &e) == ST_OK, "%s", e.msg);
    if (!m) return NULL;
    if (shard) m->cfg.vocab_part = m->cfg.vocab_size, m->cfg.vocab_lo = 0;
    m->cfg.final_softcap = softcap;
    return m;
}

static void inputs(int32_t *ids, int32_t *pos, int32_t *seg, int32_t *tgt, float *w, int V) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int i = b * T + t, pad = b == 1 && t < 2;
            ids[i] = (int32_t)((i * 37 + 11) % V);
            pos[i] = pad ? 0 : t - (b == 1 ? 2 : 0);
            seg[i] = pad ? 0 : 1;
            tgt[i] = pad || t == T - 1 ? IGNORE_INDEX : (int32_t)((i * 53 + 7) % V);
            w[i] = 0.5f + 0.25f * (i % 3);
        }
}

// One side: a student (maybe a shard), its teacher, plans with the same inputs.
typedef struct Side {
    Model *m, *mt;
    Plan *p, *pt;
    float *coef, *out, *stats, *kl;  // device (N), (N), (N, LOGPROB_STATS), (N)
} Side;

static int side_init(Side *s, Backend *be, int shard, double softcap) {
    Err e = {0};
    memset(s, 0, sizeof *s);
    s->m = load(be, "qwen3_untied", shard, softcap);
    s->mt = load(be, "qwen3_tied", shard, 0.0);
    if (!s->m || !s->mt) return 0;
    model_alloc_grads(s->m);
    int32_t ids[N], pos[N], seg[N], tgt[N];
    float w[N], coef[N];
    inputs(ids, pos, seg, tgt, w, s->m->cfg.vocab_size);
    EXPECT(plan_get(s->m, PLAN_TRAIN, B, T, &s->p, &e) == ST_OK);
    EXPECT(plan_get(s->mt, PLAN_SCORE, B, T, &s->pt, &e) == ST_OK);
    qwen3_set_inputs(s->m, s->p, ids, pos, seg, tgt, w);
    qwen3_set_inputs(s->mt, s->pt, ids, pos, seg, tgt, NULL);
    qwen3_forward(s->mt, s->pt);
    for (int i = 0; i < N; i++) coef[i] = (float)((i % 5) - 2) * 0.3f + 0.1f;
    s->coef = be->alloc(be, sizeof coef);
    be->upload(be, s->coef, coef, sizeof coef);
    s->out = be->alloc(be, N * sizeof(float));
    s->kl = be->alloc(be, N * sizeof(float));
    s->stats = be->alloc(be, N * LOGPROB_STATS * sizeof(float));
    return 1;
}

static void side_free(Side *s, Backend *be) {
    be->free(be, s->coef), be->free(be, s->out), be->free(be, s->kl), be->free(be, s->stats);
    model_free(s->mt), model_free(s->m);
}

// What a head leaves: per-row values (up to 4 arrays of N, stats N * 3) and the gradients.
typedef struct Result {
    float rows[4][N], stats[N * LOGPROB_STATS];
    float *g;
} Result;

static void run(Side *s, int head, float tau, float beta, int top_k, Result *r) {
    Model *m = s->m;
    Backend *be = m->be;
    be->zero(be, m->grads, m->tt.n_params * sizeof(float));
    qwen3_forward(m, s->p);
    if (head == 0) {
        qwen3_ce_loss(m, s->p, 0.7f, 1);
        be->download(be, r->rows[0], s->p->row_loss, N * sizeof(float));
        be->download(be, r->rows[1], s->p->row_correct, N * sizeof(float));
        be->download(be, r->rows[2], s->p->row_entropy, N * sizeof(float));
    } else if (head == 1) {
        qwen3_logprob_stats(m, s->p, tau, s->coef, s->out, s->stats);
        be->download(be, r->rows[0], s->out, N * sizeof(float));
        be->download(be, r->rows[2], s->p->row_entropy, N * sizeof(float));
        be->download(be, r->stats, s->stats, sizeof r->stats);
    } else {
        qwen3_distill_loss(m, s->p, s->mt, s->pt, tau, beta, top_k, 0.4f, 1, s->kl);
        be->download(be, r->rows[0], s->p->row_loss, N * sizeof(float));
        be->download(be, r->rows[3], s->kl, N * sizeof(float));
    }
    r->g = xmalloc(m->tt.n_params * sizeof(float));
    be->download(be, r->g, m->grads, m->tt.n_params * sizeof(float));
}

static void compare(const char *what, Side *a, Side *b, int head, float tau, float beta, int top_k) {
    Result *x = xcalloc(1, sizeof *x), *y = xcalloc(1, sizeof *y);
    run(a, head, tau, beta, top_k, x);
    run(b, head, tau, beta, top_k, y);
    double worst = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < N; i++) worst = fmax(worst, test_rel_err(x->rows[k][i], y->rows[k][i], 1.0));
    for (int i = 0; i < N * LOGPROB_STATS; i++) worst = fmax(worst, test_rel_err(x->stats[i], y->stats[i], 1.0));
    double gworst = 0;  // gradients norm-wise per tensor
    const char *gname = "";
    const TensorTable *tt = &a->m->tt;
    for (int i = 0; i < tt->n; i++) {
        double d = 0, n = 0;
        for (size_t j = 0; j < tt->t[i].numel; j++) {
            double u = x->g[tt->t[i].goffset + j], v = y->g[tt->t[i].goffset + j];
            d += (u - v) * (u - v), n += u * u;
        }
        double rel = n > 0 ? sqrt(d / n) : sqrt(d);
        if (rel > gworst) gworst = rel, gname = tt->t[i].name;
    }
    if (getenv("OPS_VERBOSE")) printf("  %-36s rows %.2e, grads %.2e (%s)\n", what, worst, gworst, gname);
    EXPECT_MSG(worst < 1e-4, "%s: per-row outputs differ by %.3g", what, worst);
    EXPECT_MSG(gworst < 1e-4, "%s: gradient of %s differs by %.3g (norm-wise)", what, gname, gworst);
    free(x->g), free(y->g), free(x), free(y);
}

static void on_backend(const char *name) {
    Err e = {0};
    Backend *be;
    if (!strcmp(name, "cuda")) setenv("STILL_CUDA_GEMM", "fp32", 1);  // both paths' GEMMs in fp32
    Status st = backend_create(name, 1, &be, &e);
    if (!strcmp(name, "cuda")) unsetenv("STILL_CUDA_GEMM");
    EXPECT_MSG(st == ST_OK, "%s", e.msg);
    if (st != ST_OK) return;
    for (int cap = 0; cap < 2; cap++) {
        Side a, b;
        double softcap = cap ? 3.0 : 0.0;
        if (!side_init(&a, be, 0, softcap) || !side_init(&b, be, 1, softcap)) return;
        char what[96];
#define CASE(head, tau, beta, top_k, label)                                          \
    snprintf(what, sizeof what, "%s %s%s", name, label, cap ? " softcap 3" : ""); \
    compare(what, &a, &b, head, tau, beta, top_k)
        CASE(0, 1.0f, 0.0f, 0, "ce");
        CASE(1, 0.8f, 0.0f, 0, "logprob tau 0.8");
        CASE(2, 0.8f, 0.5f, 0, "distill beta 0.5 tau 0.8");
        CASE(2, 1.0f, 1.0f, 0, "distill beta 1");
        CASE(2, 1.2f, 0.0f, 0, "distill beta 0 tau 1.2");
        CASE(2, 1.0f, 1.0f, 20, "distill beta 1 top-20");
        CASE(2, 0.7f, 0.3f, 5, "distill beta 0.3 tau 0.7 top-5");
#undef CASE
        side_free(&a, be), side_free(&b, be);
    }
    backend_destroy(be);
}

static void test_vocab_heads_ref(void) { on_backend("ref"); }
static void test_vocab_heads_cpu(void) { on_backend("cpu"); }
static void test_vocab_heads_cuda(void) { on_backend("cuda"); }  // the emulator in make CUDA_EMU=1 builds

int main(void) {
    RUN(test_vocab_heads_ref);
    RUN(test_vocab_heads_cpu);
    Err e = {0};
    Backend *probe;
    if (backend_create("cuda", 1, &probe, &e) == ST_OK) {
        backend_destroy(probe);
        RUN(test_vocab_heads_cuda);
    } else {
        printf("skip test_vocab_heads_cuda: %s\n", e.msg);
    }
    TEST_MAIN_END();
}
