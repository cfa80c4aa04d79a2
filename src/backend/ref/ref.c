// ref.c: the reference backend's memory ops and op table. Memory is host memory, so upload,
// download and copy are memcpy; the ops live in ref_ops.c, ref_attention.c and ref_loss.c.
#include "ref.h"

#include "../../core/alloc.h"

#include <string.h>

static void *ref_alloc(Backend *be, size_t bytes) {
    void *p = xaligned(bytes);
    memset(p, 0, (bytes + 63) / 64 * 64);
    return p;
}

static void ref_free(Backend *be, void *p) { free(p); }

static void ref_memcpy(Backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}

static void ref_zero(Backend *be, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}

static void ref_sync(Backend *be) {}

static void ref_destroy(Backend *be) { free(be); }

Backend *backend_ref_create(int threads) {
    Backend *be = xcalloc(1, sizeof *be);
    be->name = "ref";
    be->prefill_bucket = 16;
    be->host_memory = 1;
    be->ctx = NULL;
    be->threads = 1;  // the spec runs on one thread whatever is asked
    be->alloc = ref_alloc;
    be->free = ref_free;
    be->upload = ref_memcpy;
    be->download = ref_memcpy;
    be->zero = ref_zero;
    be->copy = ref_memcpy;
    be->sync = ref_sync;
    be->destroy = ref_destroy;
    be->embedding_forward = ref_embedding_forward;
    be->embedding_backward = ref_embedding_backward;
    be->rmsnorm_forward = ref_rmsnorm_forward;
    be->rmsnorm_backward = ref_rmsnorm_backward;
    be->matmul_forward = ref_matmul_forward;
    be->matmul_backward = ref_matmul_backward;
    be->rope_forward = ref_rope_forward;
    be->rope_backward = ref_rope_backward;
    be->attention_forward = ref_attention_forward;
    be->attention_backward = ref_attention_backward;
    be->swiglu_forward = ref_swiglu_forward;
    be->swiglu_backward = ref_swiglu_backward;
    be->add = ref_add;
    be->scale = ref_scale;
    be->dropout = ref_dropout;
    be->sumsq = ref_sumsq;
    be->ce_head = ref_ce_head;
    be->adamw = ref_adamw;
    backend_ref_install_sampling(be);
    backend_ref_install_kv(be);
    backend_ref_install_family(be);
    backend_ref_install_moe(be);
    backend_ref_install_vocab(be);
    return be;
}
