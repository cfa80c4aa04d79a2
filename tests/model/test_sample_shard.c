// test_sample_shard.c: the sampler on vocabulary shards (gen/sample_shard.c) against the cpu
// backend's sample_logits on whole rows. T = 1, 2 and 3 ranks are threads of this process, each
// with its columns of the rows and a gather hook that exchanges through shared memory behind a
// barrier (what the tensor-parallel group's all-gather does). Random rows with forced ties (values
// quantised to a few levels), random temperature, repetition penalty, top-k, top-p, min-p and
// bans: every rank must draw the cpu sampler's id exactly (the fixed-point masses make every
// threshold and draw exact), and the log-probs agree to double-sum reordering (1e-5).
#include "core/rng.h"
#include "gen/sample_shard.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define V 390  // divisible by 2 and 3
#define B 6
#define K 3

typedef struct Group {
    pthread_barrier_t bar;
    int T;
    char *stage;
    size_t cap;
} Group;

typedef struct Member {
    Group *g;
    int t;
    Model m;
    ModelHooks hooks;
    float *logits;  // (B, V/T) this rank's columns
    int32_t ids[B];
    float lp[B], lpr[B];
    const SampleParams *params;
    const double *u;
    const uint8_t *seen;
    const int32_t *banned;
} Member;

static void gather(void *ctx, Model *m, void *recv, const void *send, size_t n) {
    Member *me = ctx;
    Group *g = me->g;
    (void)m;
    CHECK(n * (size_t)g->T <= g->cap);
    memcpy(g->stage + (size_t)me->t * n, send, n);
    pthread_barrier_wait(&g->bar);
    memcpy(recv, g->stage, (size_t)g->T * n);
    pthread_barrier_wait(&g->bar);
}

static void *rank_main(void *arg) {
    Member *me = arg;
    sample_shards(&me->m, me->ids, me->lp, me->lpr, me->logits, me->params, me->u, me->seen, me->banned, K, B);
    return NULL;
}

static void random_row(Rng *r, float *x, SampleParams *p) {
    double sigma = 0.3 + 6.0 * rng_uniform_d(r), step = (double)(1 + rng_below(r, 4)) * 0.5;
    int quant = rng_below(r, 10) < 6;
    for (int i = 0; i < V; i++) {
        double v = sigma * rng_normal(r);
        x[i] = (float)(quant ? step * floor(v / step + 0.5) : v);
    }
    memset(p, 0, sizeof *p);
    p->do_sample = rng_below(r, 10) != 0;
    p->temperature = rng_below(r, 3) == 0 ? 1.0f : (float)(0.2 + 1.8 * rng_uniform_d(r));
    p->repetition_penalty = rng_below(r, 3) == 0 ? (float)(0.5 + 1.5 * rng_uniform_d(r)) : 1.0f;
    int kmode = (int)rng_below(r, 4), pmode = (int)rng_below(r, 5);
    p->top_k = kmode == 0 ? 0 : kmode == 1 ? 1 + (int)rng_below(r, 5) : 1 + (int)rng_below(r, V + 4);
    p->top_p = pmode == 0 ? 1.0 : pmode == 1 ? 0.95 : pmode == 2 ? 0.0 : rng_uniform_d(r);
    p->min_p = rng_below(r, 3) == 0 ? (float)(0.3 * rng_uniform_d(r)) : 0.0f;
}

static void test_shards_draw_the_cpu_samplers_ids(void) {
    Err e = {0};
    Backend *cpu;
    EXPECT(backend_create("cpu", 1, &cpu, &e) == ST_OK);
    Rng r;
    rng_init(&r, 0x5a4d, 22);  // this test's own stream
    static float logits[B * V], scores[B * V], lp[B], lpr[B];
    static uint8_t seen[B * V];
    int32_t ids[B], banned[B * K];
    SampleParams params[B];
    double u[B];
    int rows = 0, bad = 0;
    for (int trial = 0; trial < 150; trial++) {
        for (int b = 0; b < B; b++) {
            random_row(&r, logits + (size_t)b * V, &params[b]);
            u[b] = rng_uniform_d(&r);
            for (int j = 0; j < K; j++) banned[b * K + j] = rng_below(&r, 3) == 0 ? (int32_t)rng_below(&r, V) : -1;
            for (int i = 0; i < V; i++) seen[(size_t)b * V + i] = rng_below(&r, 20) == 0;
        }
        cpu->sample_logits(cpu, ids, lp, lpr, scores, logits, params, u, seen, banned, K, B, V);
        for (int T = 1; T <= 3; T++) {
            Group g = {.T = T, .cap = (size_t)T * 65536};
            g.stage = malloc(g.cap);
            pthread_barrier_init(&g.bar, NULL, (unsigned)T);
            Member mem[3];
            pthread_t th[3];
            int Vp = V / T;
            for (int t = 0; t < T; t++) {
                Member *me = &mem[t];
                memset(me, 0, sizeof *me);
                me->g = &g, me->t = t;
                me->m.cfg.vocab_size = V, me->m.cfg.vocab_part = Vp, me->m.cfg.vocab_lo = t * Vp;
                me->hooks.gather = gather, me->hooks.reduce_ctx = me;
                me->m.hooks = &me->hooks;
                me->logits = malloc((size_t)B * Vp * sizeof(float));
                for (int b = 0; b < B; b++)
                    memcpy(me->logits + (size_t)b * Vp, logits + (size_t)b * V + t * Vp, (size_t)Vp * sizeof(float));
                me->params = params, me->u = u, me->seen = seen, me->banned = banned;
                pthread_create(&th[t], NULL, rank_main, me);
            }
            for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
            for (int t = 0; t < T; t++) {
                for (int b = 0; b < B; b++) {
                    int same = mem[t].ids[b] == ids[b] && fabsf(mem[t].lp[b] - lp[b]) <= 1e-5f * fmaxf(1, fabsf(lp[b])) &&
                               fabsf(mem[t].lpr[b] - lpr[b]) <= 1e-5f * fmaxf(1, fabsf(lpr[b]));
                    if (isinf(lp[b])) same = same || (mem[t].ids[b] == ids[b] && isinf(mem[t].lp[b]));
                    if (!same && bad++ < 5)
                        printf("# T %d rank %d row %d: id %d (cpu %d), lp %g (%g), lp_raw %g (%g); top_k %d top_p %g "
                               "min_p %g sample %d\n", T, t, b, mem[t].ids[b], ids[b], mem[t].lp[b], lp[b],
                               mem[t].lpr[b], lpr[b], params[b].top_k, params[b].top_p, params[b].min_p,
                               params[b].do_sample);
                    rows++;
                }
                free(mem[t].logits);
            }
            pthread_barrier_destroy(&g.bar);
            free(g.stage);
        }
    }
    EXPECT_MSG(bad == 0, "%d of %d rows differ from the cpu sampler", bad, rows);
    backend_destroy(cpu);
}

int main(void) {
    RUN(test_shards_draw_the_cpu_samplers_ids);
    TEST_MAIN_END();
}
