// dist.h: more than one process. Rank, world size and local rank come from MPI
// (`mpirun -np N still ...`); collectives run over MPI on host memory (device buffers of
// non-CPU backends are staged through the host until the NCCL path lands). Every collective is
// bounded by a timeout (--ddp_timeout): a peer that stops answering turns into an error naming
// the collective, never a hang. Without MPI (build or launch), everything is a single process
// and the collectives are identities.
#ifndef STILL_DIST_H
#define STILL_DIST_H

#include "../backend/backend.h"
#include "../core/common.h"

typedef struct Dist {
    int rank;             // 0 .. world-1
    int world;            // number of processes
    int local_rank;       // rank among the processes on this node
    int local_world;
    double timeout_s;     // every collective fails after this long (<= 0: no limit)
    int mpi;              // 1 when MPI was initialised by dist_init
} Dist;

// Initialise from the environment: MPI only when launched by an MPI launcher, so a plain
// `still ...` never starts an MPI runtime.
Status dist_init(Dist *d, double timeout_s, Err *e);
void dist_finalize(Dist *d);
// Abort every process of the job (after a fatal error on one rank).
void dist_abort(Dist *d, int code);

// In-place sum of buf (n floats) over all ranks. buf lives on `be`'s device (host for cpu/ref).
Status dist_allreduce_sum(Dist *d, Backend *be, float *buf, size_t n, Err *e);
// Same, in double, for small host-side statistics (token counts, losses, rewards).
Status dist_allreduce_sum_host_d(Dist *d, double *buf, size_t n, Err *e);
// recv (n) = sum over ranks of send[rank*n : (rank+1)*n]; send has world*n floats.
Status dist_reduce_scatter_sum(Dist *d, Backend *be, float *recv, const float *send, size_t n, Err *e);
// recv (world*n) = concatenation over ranks of send (n).
Status dist_allgather(Dist *d, Backend *be, float *recv, const float *send, size_t n, Err *e);
// Host bytes gathered on every rank: recv (world*nbytes).
Status dist_allgather_host(Dist *d, void *recv, const void *send, size_t nbytes, Err *e);
// Broadcast host bytes from rank 0.
Status dist_bcast_host(Dist *d, void *buf, size_t nbytes, Err *e);
Status dist_barrier(Dist *d, Err *e);

#endif
