// gen_bench.c: generation speed on the static KV cache — prefill and decode tokens/s at batch 1
// and 8, fp32, bf16 and q8_0 weight storage — beside the memory read bandwidth measured in the
// same process, so that batch-1 decode can be stated as GB/s of weight traffic against what the
// machine streams.
//   build/bench/gen_bench CONFIG.json PROMPT_LEN NEW_TOKENS [dtypes: f32,bf16,q8_0] [batches: 1,8]
// Weights are random (the speed does not depend on them), written once as a bf16 checkpoint
// (GEN_BENCH_CKPT=f32: fp32) and loaded as the commands load them (model_load_frozen: tensors
// stored as they run are used from the mapping). GEN_BENCH_DIR=DIR writes the checkpoint there
// and keeps it (bench_generate.sh times `still generate` on it). Prints one JSON object on stdout.
#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "gen/generate.h"
#include "core/fileio.h"
#include "model/qwen3.h"
#include "model/safetensors.h"
#include "read_bw.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Bytes of weights one decode step reads: every matrix once (a tied embedding is the LM head;
// the embedding lookup itself reads B rows only).
static double weight_bytes(const Model *m) {
    double bytes = 0;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *t = &m->tt.t[i];
        bytes += (double)dtype_bytes(t->is_matrix ? t->dtype : DT_F32, t->numel);
    }
    return bytes;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: gen_bench CONFIG.json PROMPT_LEN NEW_TOKENS [f32,bf16,q8_0] [1,8]\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    const char *cfg_path = argv[1];
    int P = atoi(argv[2]), NEW = atoi(argv[3]);
    const char *dtypes = argc > 4 ? argv[4] : "f32,bf16", *batches = argc > 5 ? argv[5] : "1,8";
    Err e = {0};
    Backend *be;
    if (backend_create("cpu", 0, &be, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    int threads = be->threads;
    double bw = read_bandwidth(threads);

    // Cheap random bf16 weights (xorshift, uniform in about +-0.05; norm weights 1), written once as
    // a checkpoint and loaded in each storage dtype. model_create_random's normal draws cost
    // minutes at this size and the speed does not depend on the values.
    ModelConfig cfg;
    if (config_load(cfg_path, &cfg, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    char dir[4096] = "/tmp/still_gen_bench_XXXXXX";
    const char *keep = getenv("GEN_BENCH_DIR"), *ck = getenv("GEN_BENCH_CKPT");
    DType ckpt_dt = ck && !strcmp(ck, "f32") ? DT_F32 : DT_BF16;
    if (keep) {
        snprintf(dir, sizeof dir, "%s", keep);
        if (dir_create(dir, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    } else if (!mkdtemp(dir)) {
        return perror("mkdtemp"), 1;
    }
    double t0 = now();
    {
        TensorTable tt;
        tensors_build(&tt, &cfg, ckpt_dt);
        StWriteTensor *wt = xcalloc((size_t)tt.n, sizeof(StWriteTensor));
        void **bufs = xcalloc((size_t)tt.n, sizeof(void *));
        uint64_t x = 88172645463325252ull;
        for (int i = 0; i < tt.n; i++) {
            const TensorInfo *t = &tt.t[i];
            wt[i] = (StWriteTensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim};
            wt[i].shape[0] = t->shape[0];
            wt[i].shape[1] = t->shape[1];
            if (t->is_matrix) {
                void *b = xmalloc(dtype_bytes(t->dtype, t->numel));
                for (size_t k = 0; k < t->numel; k++) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    float v = ((float)(x >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
                    if (t->dtype == DT_BF16) ((uint16_t *)b)[k] = f32_to_bf16(v);
                    else ((float *)b)[k] = v;
                }
                bufs[i] = b;
            } else {
                float *f = xmalloc(t->numel * 4);
                for (size_t k = 0; k < t->numel; k++) f[k] = t->ndim == 1 ? 1.0f : 0.01f;  // norms (this config has no biases)
                bufs[i] = f;
            }
            wt[i].data = bufs[i];
        }
        char *st_path = path_join(dir, "model.safetensors"), *cfg_dst = path_join(dir, "config.json");
        if (st_write(st_path, wt, tt.n, NULL, 0, &e) != ST_OK || file_copy(cfg_path, cfg_dst, &e) != ST_OK)
            return fprintf(stderr, "%s\n", e.msg), 1;
        for (int i = 0; i < tt.n; i++) free(bufs[i]);
        free(bufs), free(wt), free(st_path), free(cfg_dst);
        tensors_free(&tt);
    }
    fprintf(stderr, "gen_bench: random model written in %.1f s\n", now() - t0);
    Model *m;

    printf("{\"threads\": %d, \"read_gbs\": %.2f, \"prompt_len\": %d, \"new_tokens\": %d, \"runs\": [", threads, bw, P,
           NEW);
    int first = 1;
    for (const char *d = dtypes; *d;) {
        DType dt = !strncmp(d, "bf16", 4) ? DT_BF16 : !strncmp(d, "q8_0", 4) ? DT_Q8_0 : DT_F32;
        const char *dname = dt == DT_BF16 ? "bf16" : dt == DT_Q8_0 ? "q8_0" : "f32";
        if (model_load_frozen(dir, be, dt, &m, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
        double wb = weight_bytes(m);
        for (const char *b = batches; *b;) {
            int B = atoi(b);
            int32_t **prompts = xmalloc((size_t)B * sizeof(int32_t *));
            int *lens = xmalloc((size_t)B * sizeof(int));
            Rng r;
            rng_init(&r, 3, (uint64_t)B);
            for (int i = 0; i < B; i++) {
                prompts[i] = xmalloc((size_t)P * sizeof(int32_t));
                lens[i] = P;
                for (int t = 0; t < P; t++) prompts[i][t] = (int32_t)rng_below(&r, (uint64_t)MIN(151643, cfg.vocab_size));
            }
            GenConfig gc;
            gen_config_default(&gc);
            gc.max_new_tokens = NEW;
            gc.ignore_eos = 1;
            gc.batch_size = B;
            GenSeq *out;
            GenStats st;
            if (gen_generate(m, &gc, (const int32_t *const *)prompts, lens, B, &out, &st, &e) != ST_OK)
                return fprintf(stderr, "%s\n", e.msg), 1;
            double pf = st.prompt_tokens / st.prefill_seconds, dc = st.generated_tokens / st.decode_seconds;
            double step_s = st.decode_seconds / (double)(st.decode_steps + 1);  // +1: the first token's sampling
            double gbs = wb / (st.decode_seconds / st.decode_steps) / 1e9;
            printf("%s{\"dtype\": \"%s\", \"batch\": %d, \"prefill_tok_s\": %.1f, \"decode_tok_s\": %.2f, "
                   "\"decode_ms_per_step\": %.2f, \"weight_gb\": %.3f, \"weight_gbs\": %.2f}",
                   first ? "" : ", ", dname, B, pf, dc, 1e3 * step_s, wb / 1e9, gbs);
            fflush(stdout);
            first = 0;
            gen_seqs_free(out, B);
            for (int i = 0; i < B; i++) free(prompts[i]);
            free(prompts), free(lens);
            while (*b && *b != ',') b++;
            if (*b) b++;
        }
        model_free(m);
        while (*d && *d != ',') d++;
        if (*d) d++;
    }
    // The machine's bandwidth moves with its neighbours' load: measured again after the runs, and
    // the best of the two is the reference (a share above 100% of a slow first reading is noise).
    double bw_end = read_bandwidth(threads);
    printf("], \"read_gbs_end\": %.2f, \"read_gbs_best\": %.2f}\n", bw_end, bw > bw_end ? bw : bw_end);
    if (!keep) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "gen_bench: could not remove %s\n", dir);
    }
    backend_destroy(be);
    return 0;
}
