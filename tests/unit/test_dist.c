// test_dist.c: collectives. Run directly it checks the single-process identities; run under
// `mpirun -np 2` (tests/e2e/dist.sh) it checks the sums and gathers across ranks. With
// STILL_TEST_STALL=1, rank 1 stops answering and rank 0 must fail with the timeout error.
#include "test.h"

#include "core/alloc.h"
#include "dist/dist.h"

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
    size_t n = 3;
    float *send = xmalloc(n * d.world * sizeof(float)), *recv = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n * d.world; i++) send[i] = (float)i + 100.0f * d.rank;
    EXPECT(dist_reduce_scatter_sum(&d, be, recv, send, n, &e) == ST_OK);
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < d.world; r++) want += (float)(d.rank * n + i) + 100.0f * r;
        EXPECT(recv[i] == want);
    }
    float *all = xmalloc(n * d.world * sizeof(float));
    for (size_t i = 0; i < n; i++) all[d.rank * n + i] = (float)(d.rank * 10 + i);
    EXPECT(dist_allgather(&d, be, all, all + d.rank * n, n, &e) == ST_OK);  // in place
    for (int r = 0; r < d.world; r++)
        for (size_t i = 0; i < n; i++) EXPECT(all[r * n + i] == (float)(r * 10 + i));
    int mine = 7 + d.rank, *got = xmalloc(sizeof(int) * d.world);
    EXPECT(dist_allgather_host(&d, got, &mine, sizeof(int), &e) == ST_OK);
    for (int r = 0; r < d.world; r++) EXPECT(got[r] == 7 + r);
    char msg[8] = "";
    if (d.rank == 0) snprintf(msg, sizeof msg, "hello");
    EXPECT(dist_bcast_host(&d, msg, sizeof msg, &e) == ST_OK);
    EXPECT(!strcmp(msg, "hello"));
    free(send), free(recv), free(all), free(got);
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
        fflush(stdout);
        dist_abort(&d, 3);
    }
    RUN(test_allreduce);
    RUN(test_reduce_scatter_allgather);
    backend_destroy(be);
    dist_finalize(&d);
    TEST_MAIN_END();
}
