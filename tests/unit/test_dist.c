// test_dist.c: collectives. Run directly it checks the single-process identities; run under
// `mpirun -np 2` (tests/e2e/dist.sh) it checks the sums and gathers across ranks. With
// STILL_TEST_STALL=1, rank 1 stops answering and rank 0 must fail with the timeout error.
#include "test.h"

#include "core/alloc.h"
#include "dist/dist.h"

#include <string.h>
#include <unistd.h>

static Dist d;
static Backend *be;

static void test_allreduce(void) {
    Err e = {0};
    float buf[5];
    for (int i = 0; i < 5; i++) buf[i] = (float)(d.rank + 1) * (float)(i + 1);
    EXPECT(dist_allreduce_sum(&d, be, buf, 5, &e) == ST_OK);
    float s = (float)(d.world * (d.world + 1) / 2);
    for (int i = 0; i < 5; i++) EXPECT(buf[i] == s * (float)(i + 1));
    double h[2] = {1.5, (double)d.rank};
    EXPECT(dist_allreduce_sum_host_d(&d, h, 2, &e) == ST_OK);
    EXPECT(h[0] == 1.5 * d.world);
}

static void test_reduce_scatter_allgather(void) {
    Err e = {0};
    // uneven blocks: n = 7 over the ranks (ZeRO-1's split), and explicit counts
    size_t n = 7, *counts = xmalloc(sizeof(size_t) * d.world), lo, hi;
    dist_shard_counts(&d, n, counts);
    dist_shard_range(&d, d.rank, n, &lo, &hi);
    size_t total = 0;
    for (int r = 0; r < d.world; r++) total += counts[r];
    EXPECT(total == n && counts[d.rank] == hi - lo);
    if (d.world == 2) EXPECT(counts[0] == 4 && counts[1] == 3);
    float *send = xmalloc(n * sizeof(float)), *recv = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) send[i] = (float)i + 100.0f * d.rank;
    EXPECT(dist_reduce_scatter_sum(&d, be, recv, send, counts, &e) == ST_OK);
    for (size_t i = lo; i < hi; i++) {
        float want = 0;
        for (int r = 0; r < d.world; r++) want += (float)i + 100.0f * r;
        EXPECT(recv[i - lo] == want);
    }
    float *all = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) all[i] = -1;
    for (size_t i = lo; i < hi; i++) all[i] = (float)(d.rank * 10 + i);
    EXPECT(dist_allgather(&d, be, all, counts, &e) == ST_OK);  // in place
    for (int r = 0; r < d.world; r++) {
        size_t a, b;
        dist_shard_range(&d, r, n, &a, &b);
        for (size_t i = a; i < b; i++) EXPECT(all[i] == (float)(r * 10 + i));
    }
    float *got0 = d.rank == 0 ? xmalloc(n * sizeof(float)) : NULL;
    EXPECT(dist_gather_host_f(&d, got0, send + lo, counts, &e) == ST_OK);
    if (got0)
        for (int r = 0; r < d.world; r++) {
            size_t a, b;
            dist_shard_range(&d, r, n, &a, &b);
            for (size_t i = a; i < b; i++) EXPECT(got0[i] == (float)i + 100.0f * r);
        }
    free(got0), free(counts);
    int mine = 7 + d.rank, *got = xmalloc(sizeof(int) * d.world);
    EXPECT(dist_allgather_host(&d, got, &mine, sizeof(int), &e) == ST_OK);
    for (int r = 0; r < d.world; r++) EXPECT(got[r] == 7 + r);
    char msg[8] = "";
    if (d.rank == 0) snprintf(msg, sizeof msg, "hello");
    EXPECT(dist_bcast_host(&d, msg, sizeof msg, &e) == ST_OK);
    EXPECT(!strcmp(msg, "hello"));
    free(send), free(recv), free(all), free(got);
}

static void test_agree(void) {
    Err e = {0};
    EXPECT(dist_agree(&d, ST_OK, &e) == ST_OK);
    // the last rank fails: everyone hears of it, naming that rank
    Status mine = d.rank == d.world - 1 ? err_set(&e, ST_EINVAL, "own failure") : ST_OK;
    Status st = dist_agree(&d, mine, &e);
    EXPECT(st != ST_OK);
    if (d.rank == d.world - 1) EXPECT_STR_CONTAINS(e.msg, "own failure");
    else EXPECT_STR_CONTAINS(e.msg, "failed");
    size_t big = 3u << 20;  // bytes beyond one small message
    unsigned char *buf = xmalloc(big);
    for (size_t i = 0; i < big; i++) buf[i] = d.rank == 0 ? (unsigned char)(i * 7) : 0;
    EXPECT(dist_bcast_host(&d, buf, big, &e) == ST_OK);
    int same = 1;
    for (size_t i = 0; i < big; i++) same &= buf[i] == (unsigned char)(i * 7);
    EXPECT(same);
    free(buf);
}

// The axes of a mesh over the world: tp groups of consecutive ranks, FSDP across them; every
// axis sums over exactly its ranks; a mesh that does not divide the world is a usage error.
static void test_mesh(void) {
    Err e = {0};
    int shapes[][2] = {{1, 1}, {1, d.world}, {d.world, 1}};
    for (size_t s = 0; s < ARRAY_LEN(shapes); s++) {
        int tp = shapes[s][0], fsdp = shapes[s][1];
        Dist m = d;
        m.mesh = NULL;
        EXPECT(dist_mesh_init(&m, tp, fsdp, &e) == ST_OK);
        DistMesh *x = m.mesh;
        EXPECT(x->tp == tp && x->fsdp == fsdp && x->dp == d.world / (tp * fsdp));
        EXPECT(x->tp_axis.world == tp && x->tp_axis.rank == d.rank % tp);
        EXPECT(x->fsdp_axis.world == fsdp && x->fsdp_axis.rank == d.rank / tp % fsdp);
        EXPECT(x->data_axis.world == d.world / tp);
        Dist *axes[] = {&x->tp_axis, &x->fsdp_axis, &x->dp_axis, &x->data_axis};
        for (size_t i = 0; i < ARRAY_LEN(axes); i++) {  // sum of (world rank + 1) over the axis
            double v = d.rank + 1, want = 0;
            EXPECT(dist_allreduce_sum_host_d(axes[i], &v, 1, &e) == ST_OK);
            for (int r = 0; r < d.world; r++) {
                int same = i == 0 ? r / tp == d.rank / tp
                         : i == 1 ? (r % tp == d.rank % tp && r / (tp * fsdp) == d.rank / (tp * fsdp))
                         : i == 2 ? (r % tp == d.rank % tp && r / tp % fsdp == d.rank / tp % fsdp)
                                  : r % tp == d.rank % tp;
                if (same) want += r + 1;
            }
            EXPECT(v == want);
        }
        dist_mesh_free(&m);
    }
    Dist m = d;
    m.mesh = NULL;
    EXPECT(dist_mesh_init(&m, 2 * d.world, 1, &e) == ST_EUSAGE);
    EXPECT(strstr(e.msg, "does not divide") != NULL);
    dist_mesh_free(&m);
}

// Two collectives in flight at once on one communicator (what FSDP's prefetch leaves: a gather and
// a reduce-scatter), moved on by dist_test and waited for in the other order, give the blocking
// calls' bits; an empty request waits as ST_OK.
static void test_in_flight(void) {
    Err e = {0};
    size_t n = 1000, *counts = xmalloc(sizeof(size_t) * d.world), lo, hi;
    dist_shard_counts(&d, n, counts);
    dist_shard_range(&d, d.rank, n, &lo, &hi);
    float *send = xmalloc(n * sizeof(float)), *rs_b = xmalloc(n * sizeof(float)), *rs_nb = xmalloc(n * sizeof(float));
    float *ag_b = xmalloc(n * sizeof(float)), *ag_nb = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) send[i] = 1.0f / (float)(i + 1 + 7 * d.rank);  // sums that round
    for (size_t i = 0; i < n; i++) ag_b[i] = ag_nb[i] = i >= lo && i < hi ? (float)i * 0.5f + (float)d.rank : -1.0f;
    EXPECT(dist_reduce_scatter_sum(&d, be, rs_b, send, counts, &e) == ST_OK);
    EXPECT(dist_allgather(&d, be, ag_b, counts, &e) == ST_OK);
    DistReq ag, rs;
    EXPECT(dist_allgather_start(&d, be, ag_nb, counts, &ag, &e) == ST_OK);
    EXPECT(dist_reduce_scatter_sum_start(&d, be, rs_nb, send, counts, &rs, &e) == ST_OK);
    for (int i = 0; i < 100 && !(dist_test(&ag) && dist_test(&rs)); i++) usleep(100);
    EXPECT(dist_wait(&d, &rs, &e) == ST_OK && rs.op == NULL);
    EXPECT(dist_wait(&d, &ag, &e) == ST_OK && ag.op == NULL);
    EXPECT(dist_wait(&d, &ag, &e) == ST_OK);  // empty
    EXPECT(memcmp(rs_b, rs_nb, (hi - lo) * sizeof(float)) == 0);
    EXPECT(memcmp(ag_b, ag_nb, n * sizeof(float)) == 0);
    for (int r = 0; r < d.world; r++) {
        size_t a, b;
        dist_shard_range(&d, r, n, &a, &b);
        for (size_t i = a; i < b; i++) EXPECT(ag_nb[i] == (float)i * 0.5f + (float)r);
    }
    free(counts), free(send), free(rs_b), free(rs_nb), free(ag_b), free(ag_nb);
}

int main(void) {
    Err e = {0};
    int stall = getenv("STILL_TEST_STALL") != NULL;
    if (dist_init(&d, stall ? 1.0 : 30.0, &e) != ST_OK) {
        printf("FAIL dist_init: %s\n", e.msg);
        return 1;
    }
    be = backend_cpu_create(1);
    if (stall) {
        // rank 1 never joins the collective; rank 0 must report the timeout and exit
        if (d.rank == 1) {
            sleep(30);
            return 0;
        }
        float x = 1;
        Status st = dist_allreduce_sum(&d, be, &x, 1, &e);
        printf("%s timeout: %s\n", st == ST_ERUNTIME ? "ok" : "FAIL", e.msg);
        // a collective left in flight times out in dist_wait the same way
        size_t counts[2] = {1, 1};
        float g[2] = {1, 0};
        DistReq r;
        st = dist_allgather_start(&d, be, g, counts, &r, &e);
        if (st == ST_OK) st = dist_wait(&d, &r, &e);
        printf("%s timeout in flight: %s\n", st == ST_ERUNTIME ? "ok" : "FAIL", e.msg);
        fflush(stdout);
        dist_abort(&d, 3);
    }
    RUN(test_allreduce);
    RUN(test_reduce_scatter_allgather);
    RUN(test_in_flight);
    RUN(test_agree);
    RUN(test_mesh);
    backend_destroy(be);
    dist_finalize(&d);
    TEST_MAIN_END();
}
