// backend.c: choosing a backend by name.
#include "backend.h"

#include <omp.h>
#include <string.h>

static int default_threads(int threads) {
    if (threads > 0) return threads;
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    return omp_get_num_procs();
}

// Every op of the table except the optional graph_* hooks (backend.h): model/, gen/ and train/
// call them without testing the pointer.
#define REQUIRED_OPS(X)                                                                                            \
    X(alloc) X(free) X(upload) X(download) X(zero) X(copy) X(sync) X(destroy) X(embedding_forward)                 \
    X(embedding_backward) X(rmsnorm_forward) X(rmsnorm_backward) X(matmul_forward) X(matmul_backward)              \
    X(rope_forward) X(rope_backward) X(attention_forward) X(attention_backward) X(swiglu_forward)                  \
    X(swiglu_backward) X(add) X(scale) X(sumsq) X(dropout) X(ce_head) X(adamw) X(sample_seen_update) X(sample_logits)         \
    X(kv_cache_write) X(attention_cached) X(logprob_head) X(distill_head) X(score_head)                      \
    X(moe_route_forward) X(moe_route_backward) X(moe_dispatch) X(moe_gather) X(moe_gather_backward)                \
    X(moe_grouped_matmul_forward) X(moe_grouped_matmul_backward) X(moe_combine_forward) X(moe_combine_backward)    \
    X(moe_aux_stats) X(moe_aux_backward)                                                                       \
    X(attention_forward_opt) X(attention_backward_opt) X(attention_cached_opt) X(kv_ring_write)                    \
    X(attention_ring) X(rmsnorm_forward_off) X(rmsnorm_backward_off) X(geglu_forward) X(geglu_backward)            \
    X(softcap_forward) X(softcap_backward) X(ce_head_cap) X(logprob_head_cap) X(distill_head_cap)          \
    X(attention_sinks_backward) X(swiglu_clamp_forward) X(swiglu_clamp_backward) X(embedding_forward_part)         \
    X(embedding_backward_part) X(vocab_stats) X(vocab_grad) X(vocab_jsd) X(vocab_jsd_grad)                       \
    X(rmsnorm_part_stat) X(rmsnorm_part_forward) X(rmsnorm_part_backward)

// The first required op the table lacks, or NULL when it is complete.
static const char *missing_op(const Backend *be) {
#define CHECK_OP(op) \
    if (!be->op) return #op;
    REQUIRED_OPS(CHECK_OP)
#undef CHECK_OP
    return NULL;
}

static Status create_named(const char *name, int threads, Backend **out, Err *e);

Status backend_create(const char *name, int threads, Backend **out, Err *e) {
    *out = NULL;
    Status st = create_named(name, threads, out, e);
    if (st != ST_OK) return st;
    const char *op = missing_op(*out);
    if (op) {
        Backend *be = *out;
        *out = NULL;
        if (be->destroy) be->destroy(be);
        return err_set(e, ST_EUNSUPPORTED, "--device %s: the backend lacks the op %s", name, op);
    }
    return ST_OK;
}

static Status create_named(const char *name, int threads, Backend **out, Err *e) {
    threads = default_threads(threads);
    omp_set_num_threads(threads);
    if (!strcmp(name, "cpu")) {
        const char *isa = getenv("STILL_CPU_ISA");
        if (isa && *isa && strcmp(isa, "avx512") && strcmp(isa, "avx2") && strcmp(isa, "scalar"))
            return err_set(e, ST_EUSAGE, "STILL_CPU_ISA=%s: expected avx512, avx2 or scalar (the most the cpu kernels use)",
                           isa);
        *out = backend_cpu_create(threads);
        backend_cpu_install_sampling(*out);
        backend_cpu_install_heads(*out);
        return ST_OK;
    }
    if (!strcmp(name, "ref")) {
        *out = backend_ref_create(threads);
        backend_ref_install_sampling(*out);
        backend_ref_install_heads(*out);
        return ST_OK;
    }
    if (!strcmp(name, "cuda")) {
#ifdef STILL_CUDA
        return backend_cuda_create(threads, out, e);
#else
        return err_set(e, ST_EUNSUPPORTED, "--device cuda: this build has no CUDA backend (rebuild with make CUDA=1)");
#endif
    }
    return err_set(e, ST_EINVAL, "--device %s: unknown backend (expected cpu, ref or cuda)", name);
}

void backend_destroy(Backend *be) {
    if (be && be->destroy) be->destroy(be);
}
