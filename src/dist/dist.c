// dist.c: MPI collectives with a deadline. Non-blocking MPI calls are polled until they
// complete or the timeout passes, so a stopped peer gives an error instead of a hang.
#include "dist.h"

#include "../core/alloc.h"
#include "../core/log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef STILL_MPI
#include <mpi.h>
#endif

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("MPI_LOCALNRANKS");
}

Status dist_init(Dist *d, double timeout_s, Err *e) {
    memset(d, 0, sizeof *d);
    d->world = d->local_world = 1;
    d->timeout_s = timeout_s;
    if (!launched_by_mpi()) return ST_OK;
#ifdef STILL_MPI
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return err_set(e, ST_ERUNTIME, "MPI_Init_thread failed");
    d->mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->world);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &d->local_rank);
    MPI_Comm_size(local, &d->local_world);
    MPI_Comm_free(&local);
    // Errors come back as codes, so a failed collective is reported, not an abort inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (d->world > 1) log_set_rank(d->rank, d->world);
    return ST_OK;
#else
    return err_set(e, ST_EUNSUPPORTED,
                   "launched by an MPI launcher, but this build has no MPI (install libopenmpi-dev and rebuild)");
#endif
}

void dist_finalize(Dist *d) {
#ifdef STILL_MPI
    if (d->mpi) MPI_Finalize();
#endif
    d->mpi = 0;
}

void dist_abort(Dist *d, int code) {
#ifdef STILL_MPI
    if (d->mpi && d->world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    (void)d;
    exit(code);
}

#ifdef STILL_MPI
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Wait for a request until the deadline; on timeout the request is left pending (the job is
// going down anyway) and an error names the collective.
static Status wait_req(Dist *d, MPI_Request *req, const char *what, size_t n, Err *e) {
    double t0 = now_s();
    long spins = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return err_set(e, ST_ERUNTIME, "rank %d: MPI %s of %zu elements failed", d->rank, what, n);
        if (done) return ST_OK;
        if (d->timeout_s > 0 && now_s() - t0 > d->timeout_s)
            return err_set(e, ST_ERUNTIME,
                           "rank %d: %s of %zu elements did not complete within --ddp_timeout %.0f s "
                           "(another rank stopped or died)",
                           d->rank, what, n, d->timeout_s);
        if (++spins > 1000) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}
#endif

Status dist_allreduce_sum_host_d(Dist *d, double *buf, size_t n, Err *e) {
    if (d->world == 1 || n == 0) return ST_OK;
#ifdef STILL_MPI
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
    return wait_req(d, &req, "all-reduce", n, e);
#else
    return ST_OK;
#endif
}

#ifdef STILL_MPI
// CPU backends: device memory is host memory. Other backends stage through host buffers.
static int host_memory(const Backend *be) { return !strcmp(be->name, "cpu") || !strcmp(be->name, "ref"); }
#endif

Status dist_allreduce_sum(Dist *d, Backend *be, float *buf, size_t n, Err *e) {
    if (d->world == 1 || n == 0) return ST_OK;
#ifdef STILL_MPI
    float *h = host_memory(be) ? buf : xmalloc(n * sizeof(float));
    if (h != buf) be->download(be, h, buf, n * sizeof(float));
    Status st = ST_OK;
    const size_t max_chunk = (size_t)1 << 30;  // MPI counts are int
    for (size_t off = 0; off < n && st == ST_OK; off += max_chunk) {
        size_t cnt = MIN(max_chunk, n - off);
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, h + off, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        st = wait_req(d, &req, "gradient all-reduce", cnt, e);
    }
    if (h != buf) {
        if (st == ST_OK) be->upload(be, buf, h, n * sizeof(float));
        free(h);
    }
    return st;
#else
    return ST_OK;
#endif
}

Status dist_reduce_scatter_sum(Dist *d, Backend *be, float *recv, const float *send, size_t n, Err *e) {
    if (d->world == 1) {
        be->copy(be, recv, send, n * sizeof(float));
        return ST_OK;
    }
#ifdef STILL_MPI
    int host = host_memory(be);
    size_t total = n * (size_t)d->world;
    float *hs = host ? (float *)send : xmalloc(total * sizeof(float));
    float *hr = host ? recv : xmalloc(n * sizeof(float));
    if (!host) be->download(be, hs, send, total * sizeof(float));
    MPI_Request req;
    MPI_Ireduce_scatter_block(hs, hr, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    Status st = wait_req(d, &req, "reduce-scatter", n, e);
    if (!host) {
        if (st == ST_OK) be->upload(be, recv, hr, n * sizeof(float));
        free(hs);
        free(hr);
    }
    return st;
#else
    return ST_OK;
#endif
}

Status dist_allgather(Dist *d, Backend *be, float *recv, const float *send, size_t n, Err *e) {
    if (d->world == 1) {
        if (recv != send) be->copy(be, recv, send, n * sizeof(float));
        return ST_OK;
    }
#ifdef STILL_MPI
    int host = host_memory(be);
    size_t total = n * (size_t)d->world;
    float *hs = host ? (float *)send : xmalloc(n * sizeof(float));
    float *hr = host ? recv : xmalloc(total * sizeof(float));
    if (!host) be->download(be, hs, send, n * sizeof(float));
    MPI_Request req;
    // send may be this rank's own slot of recv (ZeRO-1 parameter gather).
    const void *sbuf = (host && send == recv + (size_t)d->rank * n) ? MPI_IN_PLACE : (const void *)hs;
    MPI_Iallgather(sbuf, (int)n, MPI_FLOAT, hr, (int)n, MPI_FLOAT, MPI_COMM_WORLD, &req);
    Status st = wait_req(d, &req, "all-gather", n, e);
    if (!host) {
        if (st == ST_OK) be->upload(be, recv, hr, total * sizeof(float));
        free(hs);
        free(hr);
    }
    return st;
#else
    return ST_OK;
#endif
}

Status dist_allgather_host(Dist *d, void *recv, const void *send, size_t nbytes, Err *e) {
    if (d->world == 1) {
        if (recv != send) memcpy(recv, send, nbytes);
        return ST_OK;
    }
#ifdef STILL_MPI
    MPI_Request req;
    MPI_Iallgather(send, (int)nbytes, MPI_BYTE, recv, (int)nbytes, MPI_BYTE, MPI_COMM_WORLD, &req);
    return wait_req(d, &req, "all-gather", nbytes, e);
#else
    return ST_OK;
#endif
}

Status dist_bcast_host(Dist *d, void *buf, size_t nbytes, Err *e) {
    if (d->world == 1) return ST_OK;
#ifdef STILL_MPI
    MPI_Request req;
    MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    return wait_req(d, &req, "broadcast", nbytes, e);
#else
    return ST_OK;
#endif
}

Status dist_barrier(Dist *d, Err *e) {
    if (d->world == 1) return ST_OK;
#ifdef STILL_MPI
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    return wait_req(d, &req, "barrier", 0, e);
#else
    return ST_OK;
#endif
}
