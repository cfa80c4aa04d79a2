// test_nccl.c: the CUDA backend's collectives over NCCL against MPI's on host buffers. Run under
// `mpirun -np N` on a machine with N GPUs (one per rank: dist_init sets STILL_CUDA_DEVICE from the
// local rank); scripts/gpu_check.sh runs it when the machine has more than one GPU. Not part of
// `make test` (no GPU there): built by `make CUDA=1 build-cuda/tests/gpu/test_nccl` with MPI on.
//
// For sizes 1 (fewer elements than ranks: empty blocks), 7, 4099 and 2^20 + 3, with different
// data on every rank: all-reduce (sum), reduce-scatter (sum, ZeRO-1's uneven blocks) and the
// in-place all-gather, once on device buffers of the cuda backend (NCCL) and once on host
// buffers of the cpu backend (MPI). The all-gather moves bits: equal bit for bit. The sums may
// add in another order (NCCL's ring or tree against MPI's): each element within 1e-6 of the sum
// of its terms' magnitudes (a few fp32 ulp per addition over <= 16 ranks). The same two left in
// flight (FSDP's prefetch) give the blocking NCCL calls' bits.
#include "test.h"

#include "core/alloc.h"
#include "dist/dist.h"

#include <math.h>
#include <string.h>

static Dist d;
static Backend *cu, *cpu;

static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

// got vs want (n), each within tol * mag[i] (mag: the sum of the terms' magnitudes)
static void expect_sum(const char *what, size_t n, const float *got, const float *want, const float *mag) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / fmax(mag[i], 1e-30);
        if (!(e <= worst)) worst = e, at = i;  // NaN counts as worst
    }
    if (d.rank == 0 && getenv("OPS_VERBOSE")) printf("  %-40s rel err %.2e\n", what, worst);
    EXPECT_MSG(worst <= 1e-6, "%s: rank %d NCCL %.9g vs MPI %.9g at [%zu] (rel %.3g)", what, d.rank,
               n ? got[at] : 0.0f, n ? want[at] : 0.0f, at, worst);
}

static float *to_device(const float *h, size_t n) {
    float *p = cu->alloc(cu, (n ? n : 1) * sizeof(float));
    if (n) cu->upload(cu, p, h, n * sizeof(float));
    return p;
}

static float *from_device(const float *p, size_t n) {
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    if (n) cu->download(cu, h, p, n * sizeof(float));
    return h;
}

static void check_size(size_t n) {
    Err e = {0};
    char what[96];
    float *h = xmalloc(n * sizeof(float)), *mag = xmalloc(n * sizeof(float)), *ref = xmalloc(n * sizeof(float));
    fill(h, n, 1000 + 7919 * (uint64_t)d.rank + n);
    for (size_t i = 0; i < n; i++) mag[i] = fabsf(h[i]);
    EXPECT(dist_allreduce_sum(&d, cpu, mag, n, &e) == ST_OK);  // sum of |terms| (MPI)

    // all-reduce
    memcpy(ref, h, n * sizeof(float));
    EXPECT_MSG(dist_allreduce_sum(&d, cpu, ref, n, &e) == ST_OK, "%s", e.msg);
    float *dv = to_device(h, n);
    EXPECT_MSG(dist_allreduce_sum(&d, cu, dv, n, &e) == ST_OK, "%s", e.msg);
    float *got = from_device(dv, n);
    snprintf(what, sizeof what, "all-reduce n=%zu", n);
    expect_sum(what, n, got, ref, mag);
    free(got), cu->free(cu, dv);

    // reduce-scatter into this rank's block
    size_t *counts = xmalloc(sizeof(size_t) * d.world), lo, hi;
    dist_shard_counts(&d, n, counts);
    dist_shard_range(&d, d.rank, n, &lo, &hi);
    size_t mine = counts[d.rank];
    float *rref = xmalloc((mine ? mine : 1) * sizeof(float));
    EXPECT_MSG(dist_reduce_scatter_sum(&d, cpu, rref, h, counts, &e) == ST_OK, "%s", e.msg);
    float *dsend = to_device(h, n), *drecv = cu->alloc(cu, (mine ? mine : 1) * sizeof(float));
    EXPECT_MSG(dist_reduce_scatter_sum(&d, cu, drecv, dsend, counts, &e) == ST_OK, "%s", e.msg);
    got = from_device(drecv, mine);
    snprintf(what, sizeof what, "reduce-scatter n=%zu", n);
    expect_sum(what, mine, got, rref, mag + lo);
    free(got), free(rref), cu->free(cu, dsend), cu->free(cu, drecv);

    // all-gather in place: this rank's block from h, the rest -1 until gathered
    float *buf = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = i >= lo && i < hi ? h[i] : -1.0f;
    float *dbuf = to_device(buf, n);
    EXPECT_MSG(dist_allgather(&d, cpu, buf, counts, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(dist_allgather(&d, cu, dbuf, counts, &e) == ST_OK, "%s", e.msg);
    got = from_device(dbuf, n);
    EXPECT_MSG(n == 0 || memcmp(got, buf, n * sizeof(float)) == 0, "all-gather n=%zu: rank %d NCCL != MPI", n, d.rank);
    free(got), free(buf), cu->free(cu, dbuf);
    free(counts), free(h), free(mag), free(ref);
}

// FSDP's prefetch: a reduce-scatter and an all-gather left in flight together on the NCCL
// stream (dist_*_start) after an op of the cuda backend's stream wrote the data sent (the start's
// event orders it first), waited for in the other order, then an op of the backend's stream on
// the result (it must see the completed collective): the bits of the blocking NCCL calls.
static void check_in_flight(size_t n) {
    Err e = {0};
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    fill(h, n, 4242 + 7919 * (uint64_t)d.rank + n);
    size_t *counts = xmalloc(sizeof(size_t) * d.world), lo, hi;
    dist_shard_counts(&d, n, counts);
    dist_shard_range(&d, d.rank, n, &lo, &hi);
    size_t mine = counts[d.rank];
    for (size_t i = 0; i < n; i++) h[i] *= 0.5f;  // exact: scaled back on the backend's stream below
    float *dsend = to_device(h, n);
    for (size_t i = 0; i < n; i++) h[i] *= 2.0f;
    float *drecv = cu->alloc(cu, (mine ? mine : 1) * sizeof(float));
    float *bsend = to_device(h, n), *brecv = cu->alloc(cu, (mine ? mine : 1) * sizeof(float));
    float *buf = xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = i >= lo && i < hi ? h[i] : -1.0f;
    float *dbuf = to_device(buf, n), *bbuf = to_device(buf, n);
    EXPECT_MSG(dist_reduce_scatter_sum(&d, cu, brecv, bsend, counts, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(dist_allgather(&d, cu, bbuf, counts, &e) == ST_OK, "%s", e.msg);
    DistReq rs, ag;
    if (n) cu->scale(cu, dsend, 2.0f, n);  // written by the backend's stream just before: read after it
    EXPECT_MSG(dist_reduce_scatter_sum_start(&d, cu, drecv, dsend, counts, &rs, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(dist_allgather_start(&d, cu, dbuf, counts, &ag, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(dist_wait(&d, &ag, &e) == ST_OK, "%s", e.msg);
    EXPECT_MSG(dist_wait(&d, &rs, &e) == ST_OK, "%s", e.msg);
    if (mine) cu->scale(cu, drecv, 1.0f, mine);  // an op of the backend's stream after the wait
    float *got = from_device(drecv, mine), *want = from_device(brecv, mine);
    EXPECT_MSG(mine == 0 || memcmp(got, want, mine * sizeof(float)) == 0,
               "reduce-scatter in flight n=%zu: rank %d differs from the blocking call", n, d.rank);
    free(got), free(want);
    got = from_device(dbuf, n), want = from_device(bbuf, n);
    EXPECT_MSG(n == 0 || memcmp(got, want, n * sizeof(float)) == 0,
               "all-gather in flight n=%zu: rank %d differs from the blocking call", n, d.rank);
    free(got), free(want), free(buf), free(h), free(counts);
    cu->free(cu, dsend), cu->free(cu, drecv), cu->free(cu, bsend), cu->free(cu, brecv), cu->free(cu, dbuf);
    cu->free(cu, bbuf);
}

static void test_collectives(void) {
    size_t sizes[] = {1, 7, 4099, (1u << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_size(sizes[i]);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) check_in_flight(sizes[i]);
}

int main(void) {
#if defined(STILL_CUDA) && defined(STILL_MPI)
    Err e = {0};
    if (dist_init(&d, 60.0, &e) != ST_OK) {
        printf("FAIL dist_init: %s\n", e.msg);
        return 1;
    }
    if (d.world < 2) {
        printf("skip test_nccl: one process (run it under mpirun -np N, N GPUs)\n");
        dist_finalize(&d);
        return 0;
    }
    if (backend_create("cuda", 1, &cu, &e) != ST_OK) {
        printf("FAIL rank %d: %s\n", d.rank, e.msg);
        dist_abort(&d, 1);
    }
    cpu = backend_cpu_create(1);
    if (dist_attach_backend(&d, cu, &e) != ST_OK || !d.nccl) {
        printf("FAIL rank %d: no NCCL communicator: %s\n", d.rank, e.msg);
        dist_abort(&d, 1);
    }
    RUN(test_collectives);
    backend_destroy(cu);
    backend_destroy(cpu);
    dist_finalize(&d);
    TEST_MAIN_END();  // every rank prints its own ok / FAIL lines
#else
    printf("skip test_nccl: this build has no CUDA + MPI (make CUDA=1 with mpicc and NCCL)\n");
    return 0;
#endif
}
