// dist.h: more than one process. Rank, world size and local rank come from MPI
// (`mpirun -np N still ...`); collectives run over MPI on host memory, or over NCCL for device
// buffers of the CUDA backend (dist_nccl.c, CUDA + MPI builds; other device buffers are staged
// through the host). Every collective is bounded by a timeout (--ddp_timeout): a peer that stops
// answering turns into an error naming the collective, never a hang. Without MPI (build or
// launch), everything is a single process and the collectives are identities.
//
// Sharded collectives (ZeRO-1) take per-rank block sizes `counts` (world entries): a flat buffer
// is the blocks of rank 0, 1, ... back to back; dist_shard_range gives the standard split.
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
    void *nccl;           // NCCL communicator state (CUDA + MPI builds, after dist_attach_backend)
    void *comm;           // MPI_Comm (heap) of one axis of a mesh; NULL: every process
    struct DistMesh *mesh;  // the world's mesh axes (dist_mesh_init; also set on its data axis), or NULL
} Dist;

// A mesh of world = tp x fsdp x dp ranks: rank = t + tp * (f + fsdp * r), so a tensor-parallel
// group is tp consecutive ranks (one node), the FSDP axis joins ranks of the same t and r, the
// data-parallel replicas those of the same t and f. One communicator per axis.
typedef struct DistMesh {
    int tp, fsdp, dp;     // axis sizes
    Dist tp_axis;         // the ranks of this rank's tensor-parallel group
    Dist fsdp_axis;       // the ranks this rank's parameter shards are gathered from
    Dist dp_axis;         // the replicas of this rank's shard
    Dist data_axis;       // every rank that takes its own batch: fsdp x dp ranks of the same t
} DistMesh;

// Initialise from the environment: MPI only when launched by an MPI launcher, so a plain
// `still ...` never starts an MPI runtime.
Status dist_init(Dist *d, double timeout_s, Err *e);
void dist_finalize(Dist *d);
// A one-process context (no MPI), for callers that train without a launcher.
void dist_single(Dist *d);
// Lay the world out as a mesh of tp x fsdp x (world / (tp fsdp)) ranks, one communicator per
// axis (collective: every rank calls it). A world that is no multiple of tp x fsdp is an error.
Status dist_mesh_init(Dist *d, int tp, int fsdp, Err *e);
// The ranks that each take their own batches: the data axis of a mesh with tensor parallelism
// (its mesh pointer reaches the other axes), else d itself.
Dist *dist_data_axis(Dist *d);
// Whether this rank writes what d's ranks share (logs, files): d's rank 0, and on a data axis the
// rank 0 of its tensor-parallel group too.
int dist_lead(const Dist *d);
// Free the axes (dist_finalize does).
void dist_mesh_free(Dist *d);
// One axis of the world (collective: every rank calls it): the ranks with this rank's color,
// ordered by key, as *out (its own communicator; free it with dist_split_free). d is the world.
Status dist_split(Dist *d, int color, int key, Dist *out, Err *e);
void dist_split_free(Dist *a);
// Abort every process of the job (after a fatal error on one rank).
void dist_abort(Dist *d, int code);

// In-place sum of buf (n floats) over all ranks. buf lives on `be`'s device (host for cpu/ref).
Status dist_allreduce_sum(Dist *d, Backend *be, float *buf, size_t n, Err *e);
// Same, in double, for small host-side statistics (token counts, losses, rewards).
Status dist_allreduce_sum_host_d(Dist *d, double *buf, size_t n, Err *e);
// Route device collectives of `be` (CUDA) over NCCL when the build has it; a no-op otherwise.
Status dist_attach_backend(Dist *d, Backend *be, Err *e);

// The block [lo, hi) of a flat buffer of n elements that `rank` owns: blocks of ceil(n / world)
// elements in rank order (the last ones shorter or empty).
void dist_shard_range(const Dist *d, int rank, size_t n, size_t *lo, size_t *hi);
// counts (world) of dist_shard_range over n elements.
void dist_shard_counts(const Dist *d, size_t n, size_t *counts);
// recv (counts[rank]) = sum over ranks of this rank's block of send (sum of counts floats).
Status dist_reduce_scatter_sum(Dist *d, Backend *be, float *recv, const float *send, const size_t *counts, Err *e);
// In place over buf (sum of counts floats): every rank's own block goes to all ranks.
Status dist_allgather(Dist *d, Backend *be, float *buf, const size_t *counts, Err *e);
// The same two, started and left in flight (FSDP prefetch, src/train/fsdp.c): *r completes in
// dist_wait, which every started request must reach once (also after a failure elsewhere). The
// blocking calls above are start + wait of the same collective, so a result is the same bits
// whether it was waited for at once or later. Buffers stay untouched by the caller until then.
// MPI: the nonblocking collective (MPI_Iallgatherv, MPI_Ireduce_scatter), moved on by dist_test
// and dist_wait only (MPI progresses inside MPI calls). NCCL: enqueued on the axis's stream after
// an event of the backend's stream (the buffers written so far), the backend's stream waits on
// the collective's event in dist_wait. Other device backends are staged through host copies.
typedef struct DistReq {
    void *op;  // the collective's state (dist.c); NULL: none in flight
} DistReq;
Status dist_allgather_start(Dist *d, Backend *be, float *buf, const size_t *counts, DistReq *r, Err *e);
Status dist_reduce_scatter_sum_start(Dist *d, Backend *be, float *recv, const float *send, const size_t *counts,
                                     DistReq *r, Err *e);
// Move r on without blocking: 1 when it has completed (or failed: dist_wait says how), else 0.
int dist_test(DistReq *r);
// Complete r, bounded by --ddp_timeout from this call (a failure names the collective); r is
// empty after. An empty r: ST_OK.
Status dist_wait(Dist *d, DistReq *r, Err *e);
// Host floats: rank 0's recv (sum of counts) = the blocks send (counts[rank]) of every rank in
// rank order; other ranks may pass recv NULL.
Status dist_gather_host_f(Dist *d, float *recv, const float *send, const size_t *counts, Err *e);
// Host floats, all to all: rank r's block scounts[q] (blocks of send back to back, in rank order)
// goes to rank q, which receives rcounts[r] floats from rank r into recv (blocks in rank order).
Status dist_alltoallv_host_f(Dist *d, float *recv, const size_t *rcounts, const float *send, const size_t *scounts,
                             Err *e);
// Host int32s, all to all: n of send for each rank in rank order; n from each into recv.
Status dist_alltoall_host_i(Dist *d, int32_t *recv, const int32_t *send, size_t n, Err *e);
// Host bytes gathered on every rank: recv (world*nbytes); send may be this rank's slot of recv.
Status dist_allgather_host(Dist *d, void *recv, const void *send, size_t nbytes, Err *e);
// Broadcast host bytes from rank 0 (any size).
Status dist_bcast_host(Dist *d, void *buf, size_t nbytes, Err *e);
Status dist_barrier(Dist *d, Err *e);
// Every rank learns whether any rank failed: st is this rank's status; returns ST_OK only when
// all ranks passed ST_OK; a rank that passed ST_OK gets an error naming the first failed rank.
Status dist_agree(Dist *d, Status st, Err *e);

#if defined(STILL_CUDA) && defined(STILL_MPI)
// dist_nccl.c: the NCCL communicator (bootstrapped over MPI) and its collectives on device
// buffers, each bounded by d->timeout_s (the communicator is aborted on timeout).
Status dist_nccl_init(Dist *d, Err *e);
void dist_nccl_free(Dist *d);
Status dist_nccl_allreduce_sum(Dist *d, float *buf, size_t n, Err *e);
Status dist_nccl_reduce_scatter_sum(Dist *d, float *recv, const float *send, const size_t *counts, Err *e);
Status dist_nccl_allgather(Dist *d, float *buf, const size_t *counts, Err *e);
// The same two left in flight (dist_allgather_start): *op for dist_nccl_test / dist_nccl_wait,
// which frees it.
Status dist_nccl_allgather_start(Dist *d, Backend *be, float *buf, const size_t *counts, void **op, Err *e);
Status dist_nccl_reduce_scatter_start(Dist *d, Backend *be, float *recv, const float *send, const size_t *counts,
                                      void **op, Err *e);
int dist_nccl_test(void *op);
Status dist_nccl_wait(Dist *d, void *op, Err *e);
#endif

#endif
