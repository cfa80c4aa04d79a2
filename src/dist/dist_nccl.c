// dist_nccl.c: collectives on CUDA device buffers over NCCL, bootstrapped over MPI (the unique
// id made on rank 0 and broadcast). Compiled only into CUDA + MPI builds. NCCL calls are
// enqueued on a stream of their own after the device is synchronised (the backend's kernels have
// written the buffers), then polled until done or until --ddp_timeout passes: a timed-out
// communicator is aborted, so a stopped peer is an error, never a hang. The FSDP prefetch's
// collectives are left in flight instead (dist_nccl_allgather_start, below).
#if defined(STILL_CUDA) && defined(STILL_MPI)
#include "dist.h"

#include "../backend/cuda/cuda.h"
#include "../core/alloc.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <string.h>
#include <time.h>

typedef struct NcclState {
    ncclComm_t comm;
    cudaStream_t stream;
} NcclState;

#define NCCL_CHECK(call)                                                                                     \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        CHECK_MSG(r_ == ncclSuccess || r_ == ncclInProgress, "%s: %s", #call, ncclGetErrorString(r_));     \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Status dist_nccl_init(Dist *d, Err *e) {
    ncclUniqueId id;
    if (d->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    TRY(dist_bcast_host(d, &id, sizeof id, e));
    NcclState *s = xcalloc(1, sizeof *s);
    if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess) {
        free(s);
        return err_set(e, ST_ERUNTIME, "rank %d: cudaStreamCreate failed for the NCCL stream", d->rank);
    }
    ncclResult_t r = ncclCommInitRank(&s->comm, d->world, id, d->rank);
    if (r != ncclSuccess) {
        cudaStreamDestroy(s->stream);
        free(s);
        return err_set(e, ST_ERUNTIME, "rank %d: ncclCommInitRank over %d ranks failed: %s", d->rank, d->world,
                       ncclGetErrorString(r));
    }
    d->nccl = s;
    return ST_OK;
}

void dist_nccl_free(Dist *d) {
    NcclState *s = d->nccl;
    if (!s) return;
    ncclCommDestroy(s->comm);
    cudaStreamDestroy(s->stream);
    free(s);
    d->nccl = NULL;
}

static void nccl_abort(Dist *d) {
    NcclState *s = d->nccl;
    ncclCommAbort(s->comm);
    cudaStreamDestroy(s->stream);
    free(s), d->nccl = NULL;
}

// Poll until `done` reports completion (NULL: the NCCL stream is idle); on timeout or an
// asynchronous NCCL error, abort the communicator (every later collective fails) and name the
// collective.
static Status nccl_poll(Dist *d, cudaEvent_t done, const char *what, size_t n, Err *e) {
    double t0 = now_s();
    for (;;) {
        NcclState *s = d->nccl;
        if (!s) return err_set(e, ST_ERUNTIME, "rank %d: NCCL %s of %zu elements: the communicator was aborted by an "
                                               "earlier failure", d->rank, what, n);
        cudaError_t q = done ? cudaEventQuery(done) : cudaStreamQuery(s->stream);
        if (q == cudaSuccess) return ST_OK;
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(s->comm, &ar);
        if (q != cudaErrorNotReady || (ar != ncclSuccess && ar != ncclInProgress)) {
            nccl_abort(d);
            return err_set(e, ST_ERUNTIME, "rank %d: NCCL %s of %zu elements failed: %s", d->rank, what, n,
                           ar != ncclSuccess ? ncclGetErrorString(ar) : cudaGetErrorString(q));
        }
        if (d->timeout_s > 0 && now_s() - t0 > d->timeout_s) {
            nccl_abort(d);
            return err_set(e, ST_ERUNTIME,
                           "rank %d: %s of %zu elements did not complete within --ddp_timeout %.0f s "
                           "(another rank stopped or died)",
                           d->rank, what, n, d->timeout_s);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

static Status nccl_wait(Dist *d, const char *what, size_t n, Err *e) { return nccl_poll(d, NULL, what, n, e); }

static Status nccl_ready(Dist *d, const char *what, Err *e) {
    if (!d->nccl) return err_set(e, ST_ERUNTIME, "rank %d: %s after the NCCL communicator was aborted", d->rank, what);
    CHECK_MSG(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize before an NCCL collective");
    return ST_OK;
}

Status dist_nccl_allreduce_sum(Dist *d, float *buf, size_t n, Err *e) {
    TRY(nccl_ready(d, "gradient all-reduce", e));
    NcclState *s = d->nccl;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, s->comm, s->stream));
    return nccl_wait(d, "gradient all-reduce", n, e);
}

// Uneven blocks: one reduce per root (grouped), as NCCL's reduce-scatter wants equal blocks.
Status dist_nccl_reduce_scatter_sum(Dist *d, float *recv, const float *send, const size_t *counts, Err *e) {
    TRY(nccl_ready(d, "gradient reduce-scatter", e));
    NcclState *s = d->nccl;
    size_t off = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < d->world; r++) {
        if (counts[r])
            NCCL_CHECK(ncclReduce(send + off, r == d->rank ? recv : NULL, counts[r], ncclFloat32, ncclSum, r, s->comm,
                                  s->stream));
        off += counts[r];
    }
    NCCL_CHECK(ncclGroupEnd());
    return nccl_wait(d, "gradient reduce-scatter", off, e);
}

// Uneven all-gather in place: one broadcast per root (grouped).
Status dist_nccl_allgather(Dist *d, float *buf, const size_t *counts, Err *e) {
    TRY(nccl_ready(d, "parameter all-gather", e));
    NcclState *s = d->nccl;
    size_t off = 0;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < d->world; r++) {
        if (counts[r]) NCCL_CHECK(ncclBroadcast(buf + off, buf + off, counts[r], ncclFloat32, r, s->comm, s->stream));
        off += counts[r];
    }
    NCCL_CHECK(ncclGroupEnd());
    return nccl_wait(d, "parameter all-gather", off, e);
}

// ---- collectives left in flight (dist_allgather_start) -----------------------------------------
// No device-wide synchronisation: the NCCL stream waits on an event of the backend's stream (what
// its ops wrote into the buffers, and their reads of what the collective overwrites, come first);
// in dist_nccl_wait the host polls the collective's own event (the timeout, NCCL's errors) and the
// backend's stream waits on it, so the ops after it see the result.
typedef struct NcclOp {
    cudaEvent_t done;      // recorded on the NCCL stream after the collective
    cudaStream_t compute;  // the backend's stream
    const char *what;
    size_t n;
} NcclOp;

#define CUDA_OK(call) CHECK_MSG((call) == cudaSuccess, "%s", #call)

static Status op_begin(Dist *d, Backend *be, const char *what, NcclOp **out, Err *e) {
    if (!d->nccl) return err_set(e, ST_ERUNTIME, "rank %d: %s after the NCCL communicator was aborted", d->rank, what);
    NcclState *s = d->nccl;
    NcclOp *o = xcalloc(1, sizeof *o);
    o->compute = (cudaStream_t)backend_cuda_stream(be);
    o->what = what;
    cudaEvent_t ready;
    CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&o->done, cudaEventDisableTiming));
    CUDA_OK(cudaEventRecord(ready, o->compute));
    CUDA_OK(cudaStreamWaitEvent(s->stream, ready, 0));
    CUDA_OK(cudaEventDestroy(ready));  // released once the wait enqueued above has passed it
    *out = o;
    return ST_OK;
}

Status dist_nccl_allgather_start(Dist *d, Backend *be, float *buf, const size_t *counts, void **op, Err *e) {
    NcclOp *o;
    TRY(op_begin(d, be, "parameter all-gather", &o, e));
    NcclState *s = d->nccl;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < d->world; r++) {
        if (counts[r]) NCCL_CHECK(ncclBroadcast(buf + o->n, buf + o->n, counts[r], ncclFloat32, r, s->comm, s->stream));
        o->n += counts[r];
    }
    NCCL_CHECK(ncclGroupEnd());
    CUDA_OK(cudaEventRecord(o->done, s->stream));
    *op = o;
    return ST_OK;
}

Status dist_nccl_reduce_scatter_start(Dist *d, Backend *be, float *recv, const float *send, const size_t *counts,
                                      void **op, Err *e) {
    NcclOp *o;
    TRY(op_begin(d, be, "gradient reduce-scatter", &o, e));
    NcclState *s = d->nccl;
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < d->world; r++) {
        if (counts[r])
            NCCL_CHECK(ncclReduce(send + o->n, r == d->rank ? recv : NULL, counts[r], ncclFloat32, ncclSum, r, s->comm,
                                  s->stream));
        o->n += counts[r];
    }
    NCCL_CHECK(ncclGroupEnd());
    CUDA_OK(cudaEventRecord(o->done, s->stream));
    *op = o;
    return ST_OK;
}

int dist_nccl_test(void *op) { return cudaEventQuery(((NcclOp *)op)->done) != cudaErrorNotReady; }

Status dist_nccl_wait(Dist *d, void *op, Err *e) {
    NcclOp *o = op;
    Status st = nccl_poll(d, o->done, o->what, o->n, e);
    if (st == ST_OK) CUDA_OK(cudaStreamWaitEvent(o->compute, o->done, 0));
    cudaEventDestroy(o->done);
    free(o);
    return st;
}

#else
// Without CUDA and MPI this file is empty (ISO C wants at least one declaration).
typedef int dist_nccl_unused;
#endif
