// dist.c: MPI collectives with a deadline. Non-blocking MPI calls are polled until they
// complete or the timeout passes, so a stopped peer gives an error instead of a hang.
#include "dist.h"

#include "../core/alloc.h"
#include "../core/log.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef STILL_MPI
#include <mpi.h>
// The communicator of a Dist: its axis of a mesh (dist_mesh_init), else every process.
#define COMM(d) ((d)->comm ? *(MPI_Comm *)(d)->comm : MPI_COMM_WORLD)
#endif

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("MPI_LOCALNRANKS");
}

void dist_single(Dist *d) {
    memset(d, 0, sizeof *d);
    d->world = d->local_world = 1;
}

Status dist_init(Dist *d, double timeout_s, Err *e) {
    dist_single(d);
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
#ifdef STILL_CUDA
    // one GPU per process on a node: the CUDA backend takes STILL_CUDA_DEVICE (unless set)
    char dev[16];
    snprintf(dev, sizeof dev, "%d", d->local_rank);
    if (d->world > 1) setenv("STILL_CUDA_DEVICE", dev, 0);
#endif
    return ST_OK;
#else
    return err_set(e, ST_EUNSUPPORTED,
                   "launched by an MPI launcher, but this build has no MPI (install libopenmpi-dev and rebuild)");
#endif
}

Status dist_split(Dist *d, int color, int key, Dist *out, Err *e) {
    dist_single(out);
    out->timeout_s = d->timeout_s;
    out->local_world = d->local_world;
    out->local_rank = d->local_rank;
#ifdef STILL_MPI
    if (d->mpi) {
        MPI_Comm *c = xmalloc(sizeof *c);
        if (MPI_Comm_split(MPI_COMM_WORLD, color, key, c) != MPI_SUCCESS) {
            free(c);
            return err_set(e, ST_ERUNTIME, "rank %d: MPI_Comm_split failed", d->rank);
        }
        MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
        MPI_Comm_rank(*c, &out->rank);
        MPI_Comm_size(*c, &out->world);
        out->mpi = 1;
        out->comm = c;
        return ST_OK;
    }
#endif
    (void)color, (void)key, (void)e;
    return ST_OK;
}

void dist_split_free(Dist *a) {
#if defined(STILL_CUDA) && defined(STILL_MPI)
    if (a->nccl) dist_nccl_free(a);
#endif
#ifdef STILL_MPI
    if (a->comm) MPI_Comm_free((MPI_Comm *)a->comm);
#endif
    free(a->comm);
    a->comm = NULL;
}

Status dist_mesh_init(Dist *d, int tp, int fsdp, Err *e) {
    if (tp < 1 || fsdp < 1 || d->world % (tp * fsdp))
        return err_set(e, ST_EUSAGE, "--tp_size %d x --fsdp_size %d does not divide the %d ranks of this job (the "
                                     "world must be tp_size x fsdp_size x data-parallel replicas)", tp, fsdp, d->world);
    CHECK(!d->mesh);
    DistMesh *m = xcalloc(1, sizeof *m);
    m->tp = tp, m->fsdp = fsdp, m->dp = d->world / (tp * fsdp);
    int t = d->rank % tp, f = d->rank / tp % fsdp, r = d->rank / (tp * fsdp);
    Status st = dist_split(d, d->rank / tp, t, &m->tp_axis, e);
    if (st == ST_OK) st = dist_split(d, t + tp * r, f, &m->fsdp_axis, e);
    if (st == ST_OK) st = dist_split(d, t + tp * f, r, &m->dp_axis, e);
    if (st == ST_OK) st = dist_split(d, t, d->rank / tp, &m->data_axis, e);
    m->data_axis.mesh = m;  // the trainers' ranks reach the other axes through it (not its owner)
    d->mesh = m;
    return st;
}

int dist_lead(const Dist *d) {
    if (!d) return 1;
    if (d->mesh && d == &d->mesh->data_axis) return d->rank == 0 && d->mesh->tp_axis.rank == 0;
    return d->rank == 0;
}

Dist *dist_data_axis(Dist *d) { return d && d->mesh && d->mesh->tp > 1 ? &d->mesh->data_axis : d; }

void dist_mesh_free(Dist *d) {
    if (!d->mesh || d == &d->mesh->data_axis) return;  // the owner only
    dist_split_free(&d->mesh->tp_axis), dist_split_free(&d->mesh->fsdp_axis), dist_split_free(&d->mesh->dp_axis);
    dist_split_free(&d->mesh->data_axis);
    free(d->mesh);
    d->mesh = NULL;
}

void dist_finalize(Dist *d) {
    dist_mesh_free(d);
#if defined(STILL_CUDA) && defined(STILL_MPI)
    if (d->nccl) dist_nccl_free(d);
#endif
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
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, COMM(d), &req);
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
#ifdef STILL_CUDA
    if (d->nccl && !host_memory(be)) return dist_nccl_allreduce_sum(d, buf, n, e);
#endif
    float *h = host_memory(be) ? buf : xmalloc(n * sizeof(float));
    if (h != buf) be->download(be, h, buf, n * sizeof(float));
    Status st = ST_OK;
    const size_t max_chunk = (size_t)1 << 30;  // MPI counts are int
    for (size_t off = 0; off < n && st == ST_OK; off += max_chunk) {
        size_t cnt = MIN(max_chunk, n - off);
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, h + off, (int)cnt, MPI_FLOAT, MPI_SUM, COMM(d), &req);
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

void dist_shard_range(const Dist *d, int rank, size_t n, size_t *lo, size_t *hi) {
    size_t w = (size_t)MAX(1, d->world), s = (n + w - 1) / w;
    *lo = MIN(n, (size_t)rank * s);
    *hi = MIN(n, *lo + s);
}

void dist_shard_counts(const Dist *d, size_t n, size_t *counts) {
    for (int r = 0; r < MAX(1, d->world); r++) {
        size_t lo, hi;
        dist_shard_range(d, r, n, &lo, &hi);
        counts[r] = hi - lo;
    }
}

#ifdef STILL_MPI
// MPI counts and displacements are int: blocks (as MPI wants them) or an error.
static Status mpi_blocks(const Dist *d, const size_t *counts, int *cnt, int *displs, const char *what, Err *e) {
    size_t off = 0;
    for (int r = 0; r < d->world; r++) {
        if (off + counts[r] > (size_t)INT_MAX)
            return err_set(e, ST_EUNSUPPORTED, "%s of %zu+ elements: MPI counts are int; more than %d elements per "
                                               "sharded collective is not supported yet", what, off + counts[r], INT_MAX);
        cnt[r] = (int)counts[r];
        displs[r] = (int)off;
        off += counts[r];
    }
    return ST_OK;
}

static size_t sum_counts(const Dist *d, const size_t *counts) {
    size_t n = 0;
    for (int r = 0; r < d->world; r++) n += counts[r];
    return n;
}
#endif

// A sharded collective in flight (dist_allgather_start, dist_reduce_scatter_sum_start).
typedef struct DistOp {
    Backend *be;
    const char *what;
    size_t n;        // elements of the collective (messages)
    int *cnt;        // (2 world) MPI counts and displacements, alive until it completes
    float *hs, *hr;  // host staging of a backend without host memory (NULL: none): send, receive
    float *up;       // where hr goes once complete (up_n floats), or NULL
    size_t up_n;
    int failed;      // MPI_Test reported an error (dist_wait names the collective)
    void *nccl;      // dist_nccl.c's collective, or NULL
#ifdef STILL_MPI
    MPI_Request req;
#endif
} DistOp;

Status dist_reduce_scatter_sum_start(Dist *d, Backend *be, float *recv, const float *send, const size_t *counts,
                                     DistReq *r, Err *e) {
    r->op = NULL;
    if (d->world == 1) {
        if (counts[0]) be->copy(be, recv, send, counts[0] * sizeof(float));
        return ST_OK;
    }
#ifdef STILL_MPI
#ifdef STILL_CUDA
    if (d->nccl && !host_memory(be)) {
        void *nop = NULL;
        TRY(dist_nccl_reduce_scatter_start(d, be, recv, send, counts, &nop, e));
        DistOp *o = xcalloc(1, sizeof *o);
        o->nccl = nop;
        r->op = o;
        return ST_OK;
    }
#endif
    int *cnt = xmalloc(2 * (size_t)d->world * sizeof(int)), *displs = cnt + d->world;
    Status st = mpi_blocks(d, counts, cnt, displs, "reduce-scatter", e);
    if (st != ST_OK) return free(cnt), st;
    DistOp *o = xcalloc(1, sizeof *o);
    o->be = be, o->what = "gradient reduce-scatter", o->cnt = cnt;
    size_t total = sum_counts(d, counts), mine = counts[d->rank];
    o->n = total;
    const float *hs = send;
    float *hr = recv;
    if (!host_memory(be)) {
        o->hs = xmalloc(MAX(total, 1) * sizeof(float));
        o->hr = xmalloc(MAX(mine, 1) * sizeof(float));
        be->download(be, o->hs, send, total * sizeof(float));
        hs = o->hs, hr = o->hr, o->up = recv, o->up_n = mine;
    }
    if (MPI_Ireduce_scatter(hs, hr, cnt, MPI_FLOAT, MPI_SUM, COMM(d), &o->req) != MPI_SUCCESS) o->failed = 1;
    r->op = o;
    return ST_OK;
#else
    (void)recv, (void)send, (void)e;
    return ST_OK;
#endif
}

Status dist_allgather_start(Dist *d, Backend *be, float *buf, const size_t *counts, DistReq *r, Err *e) {
    r->op = NULL;
    if (d->world == 1) return ST_OK;
#ifdef STILL_MPI
#ifdef STILL_CUDA
    if (d->nccl && !host_memory(be)) {
        void *nop = NULL;
        TRY(dist_nccl_allgather_start(d, be, buf, counts, &nop, e));
        DistOp *o = xcalloc(1, sizeof *o);
        o->nccl = nop;
        r->op = o;
        return ST_OK;
    }
#endif
    int *cnt = xmalloc(2 * (size_t)d->world * sizeof(int)), *displs = cnt + d->world;
    Status st = mpi_blocks(d, counts, cnt, displs, "all-gather", e);
    if (st != ST_OK) return free(cnt), st;
    DistOp *o = xcalloc(1, sizeof *o);
    o->be = be, o->what = "parameter all-gather", o->cnt = cnt;
    size_t total = sum_counts(d, counts);
    o->n = total;
    float *h = buf;
    if (!host_memory(be)) {
        h = o->hr = xmalloc(MAX(total, 1) * sizeof(float));
        if (counts[d->rank])
            be->download(be, h + displs[d->rank], buf + displs[d->rank], counts[d->rank] * sizeof(float));
        o->up = buf, o->up_n = total;
    }
    if (MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, cnt, displs, MPI_FLOAT, COMM(d), &o->req) != MPI_SUCCESS)
        o->failed = 1;
    r->op = o;
    return ST_OK;
#else
    (void)be, (void)buf, (void)counts, (void)e;
    return ST_OK;
#endif
}

int dist_test(DistReq *r) {
    DistOp *o = r->op;
    if (!o) return 1;
#if defined(STILL_CUDA) && defined(STILL_MPI)
    if (o->nccl) return dist_nccl_test(o->nccl);
#endif
#ifdef STILL_MPI
    if (o->failed) return 1;
    int done = 0;
    if (MPI_Test(&o->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) o->failed = done = 1;
    return done;
#else
    return 1;
#endif
}

Status dist_wait(Dist *d, DistReq *r, Err *e) {
    DistOp *o = r->op;
    if (!o) return ST_OK;
    r->op = NULL;
    Status st = ST_OK;
#if defined(STILL_CUDA) && defined(STILL_MPI)
    if (o->nccl) {
        st = dist_nccl_wait(d, o->nccl, e);
        free(o);
        return st;
    }
#endif
#ifdef STILL_MPI
    // a completed request is MPI_REQUEST_NULL: wait_req's first test returns at once
    st = o->failed ? err_set(e, ST_ERUNTIME, "rank %d: MPI %s of %zu elements failed", d->rank, o->what, o->n)
                   : wait_req(d, &o->req, o->what, o->n, e);
    if (st == ST_OK && o->up && o->up_n) o->be->upload(o->be, o->up, o->hr, o->up_n * sizeof(float));
#else
    (void)d, (void)e;
#endif
    free(o->cnt), free(o->hs), free(o->hr), free(o);
    return st;
}

Status dist_reduce_scatter_sum(Dist *d, Backend *be, float *recv, const float *send, const size_t *counts, Err *e) {
#if defined(STILL_CUDA) && defined(STILL_MPI)
    if (d->world > 1 && d->nccl && !host_memory(be)) return dist_nccl_reduce_scatter_sum(d, recv, send, counts, e);
#endif
    DistReq r;
    TRY(dist_reduce_scatter_sum_start(d, be, recv, send, counts, &r, e));
    return dist_wait(d, &r, e);
}

Status dist_allgather(Dist *d, Backend *be, float *buf, const size_t *counts, Err *e) {
#if defined(STILL_CUDA) && defined(STILL_MPI)
    if (d->world > 1 && d->nccl && !host_memory(be)) return dist_nccl_allgather(d, buf, counts, e);
#endif
    DistReq r;
    TRY(dist_allgather_start(d, be, buf, counts, &r, e));
    return dist_wait(d, &r, e);
}

Status dist_gather_host_f(Dist *d, float *recv, const float *send, const size_t *counts, Err *e) {
    if (d->world == 1) {
        if (recv != send && counts[0]) memcpy(recv, send, counts[0] * sizeof(float));
        return ST_OK;
    }
#ifdef STILL_MPI
    int *cnt = xmalloc(2 * (size_t)d->world * sizeof(int)), *displs = cnt + d->world;
    Status st = mpi_blocks(d, counts, cnt, displs, "gather", e);
    if (st != ST_OK) return free(cnt), st;
    MPI_Request req;
    MPI_Igatherv(send, cnt[d->rank], MPI_FLOAT, recv, cnt, displs, MPI_FLOAT, 0, COMM(d), &req);
    st = wait_req(d, &req, "gather", sum_counts(d, counts), e);
    free(cnt);
    return st;
#else
    return ST_OK;
#endif
}

Status dist_alltoallv_host_f(Dist *d, float *recv, const size_t *rcounts, const float *send, const size_t *scounts,
                             Err *e) {
    if (d->world == 1) {
        if (recv != send && scounts[0]) memcpy(recv, send, scounts[0] * sizeof(float));
        return ST_OK;
    }
#ifdef STILL_MPI
    int *sc = xmalloc(4 * (size_t)d->world * sizeof(int)), *sd = sc + d->world, *rc = sd + d->world, *rd = rc + d->world;
    Status st = mpi_blocks(d, scounts, sc, sd, "all-to-all", e);
    if (st == ST_OK) st = mpi_blocks(d, rcounts, rc, rd, "all-to-all", e);
    if (st == ST_OK) {
        MPI_Request req;
        MPI_Ialltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, COMM(d), &req);
        st = wait_req(d, &req, "all-to-all", sum_counts(d, scounts), e);
    }
    free(sc);
    return st;
#else
    return ST_OK;
#endif
}

Status dist_alltoall_host_i(Dist *d, int32_t *recv, const int32_t *send, size_t n, Err *e) {
    if (d->world == 1) {
        if (recv != send && n) memcpy(recv, send, n * sizeof(int32_t));
        return ST_OK;
    }
#ifdef STILL_MPI
    MPI_Request req;
    MPI_Ialltoall(send, (int)n, MPI_INT32_T, recv, (int)n, MPI_INT32_T, COMM(d), &req);
    return wait_req(d, &req, "all-to-all", n * (size_t)d->world, e);
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
    int in_place = send == (const char *)recv + (size_t)d->rank * nbytes;
    MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)nbytes, MPI_BYTE, recv, (int)nbytes, MPI_BYTE, COMM(d),
                   &req);
    return wait_req(d, &req, "all-gather", nbytes, e);
#else
    return ST_OK;
#endif
}

Status dist_bcast_host(Dist *d, void *buf, size_t nbytes, Err *e) {
    if (d->world == 1) return ST_OK;
#ifdef STILL_MPI
    const size_t max_chunk = (size_t)1 << 30;  // MPI counts are int
    for (size_t off = 0; off < nbytes; off += max_chunk) {
        MPI_Request req;
        MPI_Ibcast((char *)buf + off, (int)MIN(max_chunk, nbytes - off), MPI_BYTE, 0, COMM(d), &req);
        TRY(wait_req(d, &req, "broadcast", nbytes, e));
    }
    return ST_OK;
#else
    return ST_OK;
#endif
}

Status dist_barrier(Dist *d, Err *e) {
    if (d->world == 1) return ST_OK;
#ifdef STILL_MPI
    MPI_Request req;
    MPI_Ibarrier(COMM(d), &req);
    return wait_req(d, &req, "barrier", 0, e);
#else
    return ST_OK;
#endif
}

Status dist_agree(Dist *d, Status st, Err *e) {
    if (d->world == 1) return st;
    // failed[r] = 1 for each failed rank; the sum over ranks tells everyone who failed
    double *failed = xcalloc((size_t)d->world, sizeof(double));
    failed[d->rank] = st != ST_OK;
    Err e2 = {0};
    Status s2 = dist_allreduce_sum_host_d(d, failed, (size_t)d->world, &e2);
    int first = -1;
    for (int r = 0; r < d->world && first < 0; r++)
        if (failed[r] > 0) first = r;
    free(failed);
    if (st != ST_OK) return st;
    if (s2 != ST_OK) {
        *e = e2;
        return s2;
    }
    if (first >= 0) return err_set(e, ST_ERUNTIME, "rank %d failed (its error is in its log)", first);
    return ST_OK;
}

Status dist_attach_backend(Dist *d, Backend *be, Err *e) {
#if defined(STILL_CUDA) && defined(STILL_MPI)
    if (d->world > 1 && !d->nccl && !strcmp(be->name, "cuda")) TRY(dist_nccl_init(d, e));
    if (d->mesh && !strcmp(be->name, "cuda")) {
        Dist *axes[] = {&d->mesh->tp_axis, &d->mesh->fsdp_axis, &d->mesh->dp_axis, &d->mesh->data_axis};
        for (size_t i = 0; i < ARRAY_LEN(axes); i++)
            if (axes[i]->world > 1 && !axes[i]->nccl) TRY(dist_nccl_init(axes[i], e));
    }
    return ST_OK;
#endif
    (void)d, (void)be, (void)e;
    return ST_OK;
}
