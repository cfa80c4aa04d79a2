// cuda_bench.c: the model-level checks and benchmarks of the CUDA backend (scripts/gpu_check.sh).
//   cuda_bench check CONFIG.json        a small model on cpu and cuda from the same weights:
//                                       logits, and the losses of 5 AdamW steps and of 3 more
//                                       replayed from a captured graph on new batches, with fp32
//                                       and with bf16 GEMM operands; "ok"/"FAIL" lines, exit 1 on FAIL
//   cuda_bench train CONFIG.json B T R  training step (forward, ce head, backward: one captured
//                                       graph; AdamW eagerly), median of R; MFU; one JSON line
//   cuda_bench decode CONFIG.json B NEW generation engine, B rows, 128-token prompts, NEW greedy
//                                       tokens, bf16 weights: decode step time with the step
//                                       captured and eager (same tokens required); tokens/s and
//                                       bandwidth of weights + KV reads; one JSON line
// Without CUDA=1 it says so and exits 2.
#include "core/alloc.h"
#include "core/rng.h"
#include "gen/generate.h"
#include "model/qwen3.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef STILL_CUDA
#include "backend/cuda/cuda.h"

#define H200_BF16_DENSE_TFLOPS 989.0  // datasheet, dense bf16 (H100/H200 SXM)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, Err *e) {
    fprintf(stderr, "cuda_bench: %s: %s\n", what, e->msg);
    exit(1);
}

// A batch: B rows of T tokens, row b a document of T - 3b tokens then padding (left-aligned),
// the last row packing two documents.
static void make_batch(const ModelConfig *cfg, int B, int T, uint64_t seed, int32_t *ids, int32_t *pos, int32_t *seg,
                       int32_t *tgt, int packed) {
    Rng rng;
    rng_init(&rng, seed, 0);
    for (int b = 0; b < B; b++) {
        int len = packed ? T - 3 * b : T;
        if (len < 1) len = 1;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            ids[i] = (int32_t)rng_below(&rng, (uint64_t)cfg->vocab_size);
            int split = packed && b == B - 1 ? len / 2 : len;
            seg[i] = t < len ? (t < split ? 1 : 2) : 0;
            pos[i] = t < split ? t : t - split;
        }
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            tgt[i] = t + 1 < T && seg[i] != 0 && seg[i + 1] == seg[i] ? ids[i + 1] : IGNORE_INDEX;
        }
    }
}

typedef struct {
    Backend *be;
    Model *m;
    Plan *p;
    float *mom, *var;  // AdamW state (n_params)
} Run;

static void run_init(Run *r, const char *backend, const char *gemm, const ModelConfig *cfg, int B, int T,
                     const int32_t *ids, const int32_t *pos, const int32_t *seg, const int32_t *tgt) {
    Err e = {0};
    if (gemm) setenv("STILL_CUDA_GEMM", gemm, 1);
    if (backend_create(backend, 0, &r->be, &e) != ST_OK) die(backend, &e);
    if (gemm) unsetenv("STILL_CUDA_GEMM");
    // The model owns its config (the parsed JSON): each run gets its own copy.
    ModelConfig own = *cfg;
    own.raw = cJSON_Duplicate(cfg->raw, 1);
    if (model_create_random(&own, r->be, 42, &r->m, &e) != ST_OK) die("model", &e);
    model_alloc_grads(r->m);
    size_t n = r->m->tt.n_params;
    r->mom = r->be->alloc(r->be, n * 4);
    r->var = r->be->alloc(r->be, n * 4);
    if (plan_get(r->m, PLAN_TRAIN, B, T, &r->p, &e) != ST_OK) die("plan", &e);
    qwen3_set_inputs(r->m, r->p, ids, pos, seg, tgt, NULL);
}

static void run_free(Run *r) {
    r->be->free(r->be, r->mom);
    r->be->free(r->be, r->var);
    model_free(r->m);
    backend_destroy(r->be);
}

// Forward, loss head and backward; the mean loss over target tokens (downloads).
static void fwd_bwd(Run *r, int ntgt) {
    r->be->zero(r->be, r->m->grads, r->m->tt.n_params * 4);
    qwen3_forward(r->m, r->p);
    qwen3_ce_loss(r->m, r->p, 1.0f / (float)ntgt, 1);
}

static double mean_loss(Run *r, int N, int ntgt) {
    float *l = xmalloc((size_t)N * 4);
    r->be->download(r->be, l, r->p->row_loss, (size_t)N * 4);
    double s = 0;
    for (int i = 0; i < N; i++) s += l[i];
    free(l);
    return s / ntgt;
}

static void adamw_step(Run *r, int t) {
    float *p = (float *)r->m->params;
    r->be->adamw(r->be, p, r->mom, r->var, r->m->grads, r->m->tt.n_params, 1e-3, 0.9, 0.999, 1e-8, 0.01, t, 1.0f);
}

static int failures = 0;
static void report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures += !ok;
}

// Logits of every position and 8 AdamW steps (3 of them graph replays on cuda) on cpu and on cuda
// with the given GEMM dtype.
// Tolerances: fp32 GEMMs: logits 1e-4 of max |logit| (fp32 sums in another order through 2+
// layers), losses 1e-4 relative; bf16 GEMMs: logits 3e-2 (every layer's GEMM operands rounded to
// 8 bits; errors compound through the layers), losses 1e-2 relative.
static void check_model(const ModelConfig *cfg, const char *gemm) {
    int B = 3, T = 40, N = B * T, V = cfg->vocab_size;
    int32_t *ids = xmalloc(N * 4), *pos = xmalloc(N * 4), *seg = xmalloc(N * 4), *tgt = xmalloc(N * 4);
    make_batch(cfg, B, T, 5, ids, pos, seg, tgt, 1);
    int ntgt = 0;
    for (int i = 0; i < N; i++) ntgt += tgt[i] != IGNORE_INDEX;
    Run c, g;
    run_init(&c, "cpu", NULL, cfg, B, T, ids, pos, seg, tgt);
    run_init(&g, "cuda", gemm, cfg, B, T, ids, pos, seg, tgt);
    int bf16 = !strcmp(gemm, "bf16");
    double tol_logits = bf16 ? 3e-2 : 1e-4, tol_loss = bf16 ? 1e-2 : 1e-4;
    // logits of every row
    float *lc = xmalloc((size_t)N * V * 4), *lg = xmalloc((size_t)N * V * 4);
    float *dl = g.be->alloc(g.be, (size_t)N * V * 4);
    qwen3_forward(c.m, c.p);
    qwen3_logits(c.m, c.p, 0, N, lc);
    qwen3_forward(g.m, g.p);
    qwen3_logits(g.m, g.p, 0, N, dl);
    g.be->download(g.be, lg, dl, (size_t)N * V * 4);
    double mx = 0, err = 0;
    for (size_t i = 0; i < (size_t)N * V; i++) {
        mx = fmax(mx, fabs(lc[i]));
        err = fmax(err, fabs((double)lc[i] - lg[i]));
        if (isnan(lg[i])) err = INFINITY;
    }
    report(err <= tol_logits * mx, "model logits cuda (gemm %s) vs cpu: max err %.3g of max |logit| %.3g (tol %.0e)", gemm,
           err, mx, tol_logits);
    // training steps
    for (int step = 1; step <= 5; step++) {
        fwd_bwd(&c, ntgt);
        fwd_bwd(&g, ntgt);
        double a = mean_loss(&c, N, ntgt), b = mean_loss(&g, N, ntgt);
        adamw_step(&c, step);
        adamw_step(&g, step);
        report(fabs(a - b) <= tol_loss * fabs(a), "train step %d loss cuda (gemm %s) %.6f vs cpu %.6f (tol %.0e rel)", step,
               gemm, b, a, tol_loss);
    }
    // Steps 6-8 on new batches (same padding, so the same target count and loss scale): cuda
    // records forward, loss head and backward as one graph at step 6 and replays it, the batch
    // reaching the graph only through the plan's device buffers (uploaded before the replay).
    const uint64_t key = 0x636b000000000000ull;  // "ck"
    for (int step = 6; step <= 8; step++) {
        make_batch(cfg, B, T, (uint64_t)step, ids, pos, seg, tgt, 1);
        qwen3_set_inputs(c.m, c.p, ids, pos, seg, tgt, NULL);
        qwen3_set_inputs(g.m, g.p, ids, pos, seg, tgt, NULL);
        fwd_bwd(&c, ntgt);
        if (!g.be->graph_launch(g.be, key)) {
            g.be->graph_begin(g.be, key);
            fwd_bwd(&g, ntgt);
            g.be->graph_end(g.be, key);
            g.be->graph_launch(g.be, key);
        }
        double a = mean_loss(&c, N, ntgt), b = mean_loss(&g, N, ntgt);
        adamw_step(&c, step);
        adamw_step(&g, step);
        report(fabs(a - b) <= tol_loss * fabs(a), "train step %d (graph) loss cuda (gemm %s) %.6f vs cpu %.6f (tol %.0e rel)",
               step, gemm, b, a, tol_loss);
    }
    double gc = c.be->sumsq(c.be, c.m->grads, c.m->tt.n_params), gg = g.be->sumsq(g.be, g.m->grads, g.m->tt.n_params);
    report(fabs(sqrt(gg) - sqrt(gc)) <= 10 * tol_loss * sqrt(gc), "grad norm cuda (gemm %s) %.6g vs cpu %.6g", gemm,
           sqrt(gg), sqrt(gc));
    g.be->free(g.be, dl);
    free(lc), free(lg), free(ids), free(pos), free(seg), free(tgt);
    run_free(&c);
    run_free(&g);
}

static int cmd_check(const ModelConfig *cfg) {
    check_model(cfg, "fp32");
    check_model(cfg, "bf16");
    return failures ? 1 : 0;
}

static int cmd_train(const ModelConfig *cfg, int B, int T, int reps) {
    int N = B * T;
    int32_t *ids = xmalloc(N * 4), *pos = xmalloc(N * 4), *seg = xmalloc(N * 4), *tgt = xmalloc(N * 4);
    make_batch(cfg, B, T, 9, ids, pos, seg, tgt, 0);
    int ntgt = 0;
    for (int i = 0; i < N; i++) ntgt += tgt[i] != IGNORE_INDEX;
    Run g;
    double t0 = now();
    run_init(&g, "cuda", NULL, cfg, B, T, ids, pos, seg, tgt);
    double t_init = now() - t0;
    Backend *be = g.be;
    // eager warm-up: sizes every scratch buffer before recording
    fwd_bwd(&g, ntgt);
    adamw_step(&g, 1);
    be->sync(be);
    double loss0 = mean_loss(&g, N, ntgt);
    const uint64_t key = 0x7472000000000000ull | ((uint64_t)B << 20) | (uint64_t)T;  // "tr", B, T
    int graphs = be->graph_begin != NULL;
    if (graphs) {
        be->graph_begin(be, key);
        fwd_bwd(&g, ntgt);
        be->graph_end(be, key);
    }
    double *ts = xmalloc((size_t)reps * sizeof(double)), *tf = xmalloc((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        be->sync(be);
        double a = now();
        if (!graphs || !be->graph_launch(be, key)) fwd_bwd(&g, ntgt);
        adamw_step(&g, r + 2);
        be->sync(be);
        ts[r] = now() - a;
    }
    // forward + loss (no backward) for the forward share
    Plan *ps;
    Err e = {0};
    if (plan_get(g.m, PLAN_SCORE, B, T, &ps, &e) != ST_OK) die("plan", &e);
    qwen3_set_inputs(g.m, ps, ids, pos, seg, tgt, NULL);
    for (int r = 0; r < reps; r++) {
        be->sync(be);
        double a = now();
        qwen3_forward(g.m, ps);
        qwen3_ce_loss(g.m, ps, 1.0f, 0);
        be->sync(be);
        tf[r] = now() - a;
    }
    double lossN = mean_loss(&g, N, ntgt);
    qsort(ts, reps, sizeof *ts, cmp_double);
    qsort(tf, reps, sizeof *tf, cmp_double);
    double step = ts[reps / 2], fwd = tf[reps / 2];
    double flops = 3.0 * qwen3_forward_flops(cfg, B, T);
    double tflops = flops / step / 1e12;
    double gemm = backend_cuda_gemm_tflops(be, N, cfg->intermediate_size, cfg->hidden_size, 20);
    double gemm_big = backend_cuda_gemm_tflops(be, 8192, 8192, 8192, 10);
    char dev[256];
    printf("{\"device\": \"%s\", \"params\": %zu, \"B\": %d, \"T\": %d, \"gemm_dtype\": \"%s\", \"graphs\": %d, "
           "\"init_s\": %.2f, \"step_s\": %.5f, \"forward_s\": %.5f, \"tok_s\": %.1f, \"model_tflops\": %.2f, "
           "\"mfu_pct\": %.2f, \"gemm_tflops_mlp_shape\": %.1f, \"gemm_tflops_8192\": %.1f, \"of_gemm_pct\": %.1f, "
           "\"loss_first\": %.4f, \"loss_last\": %.4f}\n",
           backend_cuda_device_name(be, dev, sizeof dev), g.m->tt.n_params, B, T, backend_cuda_gemm_dtype(be), graphs,
           t_init, step, fwd, N / step, tflops, 100.0 * tflops / H200_BF16_DENSE_TFLOPS, gemm, gemm_big,
           100.0 * tflops / gemm_big, loss0, lossN);
    free(ts), free(tf), free(ids), free(pos), free(seg), free(tgt);
    run_free(&g);
    return 0;
}

// One generate() call on the engine: B prompts of P random ids, NEW greedy tokens each (EOS
// ignored); returns the decode seconds and checks every row got NEW tokens.
static double decode_run(Model *m, int B, int P, int NEW, int32_t **prompts, int *lens, GenSeq **first) {
    GenConfig gc;
    gen_config_default(&gc);
    gc.max_new_tokens = NEW;
    gc.ignore_eos = 1;
    gc.batch_size = B;
    GenStats st;
    GenSeq *out;
    Err e = {0};
    if (gen_generate(m, &gc, (const int32_t *const *)prompts, lens, B, &out, &st, &e) != ST_OK) die("generate", &e);
    for (int b = 0; b < B; b++)
        if (out[b].n != NEW) {
            fprintf(stderr, "cuda_bench: row %d generated %d tokens, expected %d\n", b, out[b].n, NEW);
            exit(1);
        }
    if (first && !*first) *first = out;
    else gen_seqs_free(out, B);
    return st.decode_seconds / (double)st.decode_steps;
}

// Decode on the static KV cache through the generation engine (prefill, then one token per row
// per step: the decode step is one captured graph, sampling eager), B rows, bf16 weights. The
// same run with the graph hooks off gives the eager step time; the two must produce the same
// tokens. Bytes per step: every weight once (bf16 matrices, fp32 norms) plus the keys and
// values read (fp32 cache, B rows, the average slot count over the run).
static int cmd_decode(const ModelConfig *cfg, int B, int NEW) {
    Err e = {0};
    Backend *be;
    if (backend_create("cuda", 0, &be, &e) != ST_OK) die("cuda", &e);
    Model *m32, *m;
    if (model_create_random(cfg, be, 3, &m32, &e) != ST_OK) die("model", &e);
    char dir[] = "/tmp/still-decode-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (model_save(m32, dir, DT_BF16, &e) != ST_OK) die("save", &e);
    model_free(m32);
    if (model_load(dir, be, DT_BF16, &m, &e) != ST_OK) die("load", &e);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cuda_bench: could not remove %s\n", dir);
    const int P = 128;
    int32_t **prompts = xmalloc((size_t)B * sizeof(int32_t *));
    int *lens = xmalloc((size_t)B * sizeof(int));
    Rng rng;
    rng_init(&rng, 11, 0);
    for (int b = 0; b < B; b++) {
        lens[b] = P;
        prompts[b] = xmalloc((size_t)P * sizeof(int32_t));
        for (int t = 0; t < P; t++) prompts[b][t] = (int32_t)rng_below(&rng, (uint64_t)cfg->vocab_size);
    }
    GenSeq *ref = NULL;
    decode_run(m, B, P, NEW, prompts, lens, &ref);  // warm-up: plans, scratch, the recording
    double step = decode_run(m, B, P, NEW, prompts, lens, NULL);
    int graphs = m->plans.graphs;
    // eager: the same engine with the graph hooks off
    void (*gb)(Backend *, uint64_t) = be->graph_begin;
    int (*gl)(Backend *, uint64_t) = be->graph_launch;
    be->graph_begin = NULL;
    be->graph_launch = NULL;
    plan_cache_free(m);  // a fresh decode plan, never recorded
    GenSeq *eager = NULL;
    double step_eager = decode_run(m, B, P, NEW, prompts, lens, &eager);
    step_eager = decode_run(m, B, P, NEW, prompts, lens, NULL);
    be->graph_begin = gb;
    be->graph_launch = gl;
    int same = 1;
    for (int b = 0; b < B; b++) same &= !memcmp(ref[b].ids, eager[b].ids, (size_t)NEW * sizeof(int32_t));
    double kv_slots = (double)B * (P + (NEW - 1) / 2.0);  // average slots attended per step
    double kv_bytes = kv_slots * 2.0 * cfg->num_hidden_layers * cfg->num_key_value_heads * cfg->head_dim * 4.0;
    double bytes = (double)m->tt.param_bytes + kv_bytes;
    double gbs = bytes / step / 1e9;
    double copy = backend_cuda_copy_gbs(be, (size_t)2 << 30, 10);
    char dev[256];
    printf("{\"device\": \"%s\", \"B\": %d, \"prompt\": %d, \"new_tokens\": %d, \"graphs\": %d, \"step_s\": %.6f, "
           "\"step_eager_s\": %.6f, \"tok_s\": %.1f, \"tok_s_eager\": %.1f, \"weight_gb\": %.3f, \"kv_gb\": %.3f, "
           "\"gb_s\": %.1f, \"copy_gb_s\": %.1f, \"bandwidth_pct_of_copy\": %.1f, \"graph_equals_eager\": %d}\n",
           backend_cuda_device_name(be, dev, sizeof dev), B, P, NEW, graphs, step, step_eager, B / step,
           B / step_eager, m->tt.param_bytes / 1e9, kv_bytes / 1e9, gbs, copy, 100.0 * gbs / copy, same);
    gen_seqs_free(ref, B);
    gen_seqs_free(eager, B);
    for (int b = 0; b < B; b++) free(prompts[b]);
    free(prompts), free(lens);
    model_free(m);
    backend_destroy(be);
    return same ? 0 : 1;
}
#endif

int main(int argc, char **argv) {
#ifndef STILL_CUDA
    (void)argc, (void)argv;
    fprintf(stderr, "cuda_bench: this build has no CUDA backend (make CUDA=1)\n");
    return 2;
#else
    if (argc < 3) {
        fprintf(stderr, "usage: cuda_bench check CONFIG | train CONFIG B T REPS | decode CONFIG B NEW_TOKENS\n");
        return 2;
    }
    Err e = {0};
    ModelConfig cfg;
    if (config_load(argv[2], &cfg, &e) != ST_OK) die(argv[2], &e);
    if (!strcmp(argv[1], "check")) {  // its models own copies; train and decode give cfg to theirs
        int rc = cmd_check(&cfg);
        config_free(&cfg);
        return rc;
    }
    if (!strcmp(argv[1], "train") && argc >= 6) return cmd_train(&cfg, atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(argv[1], "decode") && argc >= 5) return cmd_decode(&cfg, atoi(argv[3]), atoi(argv[4]));
    fprintf(stderr, "cuda_bench: unknown or incomplete command '%s'\n", argv[1]);
    return 2;
#endif
}
