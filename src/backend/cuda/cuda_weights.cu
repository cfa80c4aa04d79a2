// cuda_weights.cu: bf16 copies of fp32 weights for the GEMMs (ARCHITECTURE §3: fp32 masters for
// the optimizer, bf16 for the products), kept by the backend so that no GEMM converts a master.
//
// The first GEMM that reads an fp32 weight (matmul w, the LM head of the loss heads) with bf16
// GEMM operands makes its bf16 copy; later GEMMs use the copy. Copies belong to the allocation
// (be->alloc) that holds the masters, and every op that can write into that allocation (AdamW,
// upload, copy, zero, add, scale, and the backward ops' parameter gradients) marks all of its
// copies stale: so an optimizer step over one shard (ZeRO-1), followed by the all-gather of the
// others into the same buffer over NCCL, leaves every copy stale too. Stale copies are converted
// again, eagerly and in stream order, before the next GEMM that reads them, before a graph is
// recorded and before each replay: a captured step reads the copies and never converts, and a
// replay after an optimizer step sees the new weights. A write into an allocation with copies
// while a graph records is an error (the replay could not refresh them).
#include "cuda_common.cuh"

#include <string.h>

typedef struct CuAlloc {  // an allocation of be->alloc
    uintptr_t base;
    size_t bytes;
} CuAlloc;

typedef struct CuWeightCopy {
    const float *w;   // the fp32 masters (n)
    size_t n;
    void *copy;       // (n) bf16
    int owner;        // index into CuWeights.owners
} CuWeightCopy;

typedef struct CuOwner {  // an allocation holding masters that have copies
    uintptr_t base, end;
    int stale;            // some write since the copies were made
} CuOwner;

struct CuWeights {
    CuAlloc *allocs;
    int n_allocs;
    CuWeightCopy *copies;
    int n_copies;
    CuOwner *owners;
    int n_owners;
};

void cu_weights_free_all(Backend *be) {
    CuWeights *s = cu_ctx(be)->weights;
    if (!s) return;
    for (int i = 0; i < s->n_copies; i++) cudaFree(s->copies[i].copy);
    free(s->copies), free(s->owners), free(s->allocs), free(s);
    cu_ctx(be)->weights = NULL;
}

static CuWeights *state(Backend *be) {
    CudaCtx *ctx = cu_ctx(be);
    if (!ctx->weights) {
        ctx->weights = (CuWeights *)calloc(1, sizeof(CuWeights));
        CHECK(ctx->weights);
    }
    return ctx->weights;
}

void cu_weights_on_alloc(Backend *be, void *p, size_t bytes) {
    CuWeights *s = state(be);
    s->allocs = (CuAlloc *)realloc(s->allocs, (size_t)(s->n_allocs + 1) * sizeof(CuAlloc));
    CHECK(s->allocs);
    s->allocs[s->n_allocs++] = CuAlloc{(uintptr_t)p, bytes};
}

// p is being freed (the stream is idle): its copies go with it.
void cu_weights_on_free(Backend *be, void *p) {
    CuWeights *s = state(be);
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < s->n_allocs; i++)
        if (s->allocs[i].base == a) {
            s->allocs[i] = s->allocs[--s->n_allocs];
            break;
        }
    for (int o = 0; o < s->n_owners; o++) {
        if (s->owners[o].base != a) continue;
        for (int i = 0; i < s->n_copies;) {
            if (s->copies[i].owner == o) {
                CUDA_CHECK(cudaFree(s->copies[i].copy));
                s->copies[i] = s->copies[--s->n_copies];
            } else {
                i++;
            }
        }
        s->owners[o].base = s->owners[o].end = 0;  // the slot stays, so owner indices stay valid
        s->owners[o].stale = 0;
    }
}

void cu_weights_written(Backend *be, const void *p) {
    CudaCtx *ctx = cu_ctx(be);
    CuWeights *s = ctx->weights;
    if (!s || !p) return;
    uintptr_t a = (uintptr_t)p;
    for (int o = 0; o < s->n_owners; o++) {
        CuOwner *w = &s->owners[o];
        if (a < w->base || a >= w->end) continue;
        CHECK_MSG(!ctx->capturing,
                  "cuda: an op writes weights that GEMMs read as bf16 copies while recording graph %llu (a replay "
                  "could not refresh the copies); run it outside the graph",
                  (unsigned long long)ctx->capture_key);
        w->stale = 1;
    }
}

static void refresh(Backend *be, CuWeightCopy *c) {
    CudaCtx *ctx = cu_ctx(be);
    CHECK_MSG(!ctx->capturing, "cuda: a bf16 weight copy must be made while recording graph %llu; run the shape "
              "once before recording it", (unsigned long long)ctx->capture_key);
    cu_convert(be, c->copy, DT_BF16, c->w, DT_F32, c->n);
}

// Convert every copy whose masters were written since (before a graph is recorded or replayed).
void cu_weights_refresh(Backend *be) {
    CuWeights *s = cu_ctx(be)->weights;
    if (!s) return;
    for (int o = 0; o < s->n_owners; o++) {
        if (!s->owners[o].stale) continue;
        for (int i = 0; i < s->n_copies; i++)
            if (s->copies[i].owner == o) refresh(be, &s->copies[i]);
        s->owners[o].stale = 0;
    }
}

const void *cu_weight_operand(Backend *be, CuScratchSlot slot, const void *w, DType wdt, size_t n) {
    CudaCtx *ctx = cu_ctx(be);
    if (wdt != DT_F32 || ctx->gemm_dt != DT_BF16) return cu_operand(be, slot, w, wdt, n);
    CuWeights *s = state(be);
    const float *wf = (const float *)w;
    for (int i = 0; i < s->n_copies; i++) {
        CuWeightCopy *c = &s->copies[i];
        if (c->w != wf || c->n != n) continue;
        if (s->owners[c->owner].stale) cu_weights_refresh(be);  // all of the allocation at once
        return c->copy;
    }
    // a new copy: the allocation that holds [w, w + n)
    uintptr_t a = (uintptr_t)w, e = a + n * sizeof(float);
    const CuAlloc *al = NULL;
    for (int i = 0; i < s->n_allocs && !al; i++)
        if (a >= s->allocs[i].base && e <= s->allocs[i].base + s->allocs[i].bytes) al = &s->allocs[i];
    if (!al) return cu_operand(be, slot, w, wdt, n);  // not from be->alloc: convert per call
    CHECK_MSG(!ctx->capturing, "cuda: a bf16 weight copy must be made while recording graph %llu; run the shape "
              "once before recording it", (unsigned long long)ctx->capture_key);
    int o = 0;
    while (o < s->n_owners && s->owners[o].base != al->base) o++;
    if (o == s->n_owners) {
        s->owners = (CuOwner *)realloc(s->owners, (size_t)(s->n_owners + 1) * sizeof(CuOwner));
        CHECK(s->owners);
        s->owners[s->n_owners++] = CuOwner{al->base, al->base + al->bytes, 0};
    } else if (s->owners[o].stale) {
        cu_weights_refresh(be);
    }
    s->copies = (CuWeightCopy *)realloc(s->copies, (size_t)(s->n_copies + 1) * sizeof(CuWeightCopy));
    CHECK(s->copies);
    CuWeightCopy *c = &s->copies[s->n_copies++];
    c->w = wf, c->n = n, c->owner = o;
    CUDA_CHECK(cudaMalloc(&c->copy, n * sizeof(__nv_bfloat16)));
    refresh(be, c);
    return c->copy;
}
