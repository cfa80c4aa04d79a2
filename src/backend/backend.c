// backend.c: choosing a backend by name.
#include "backend.h"

#include <omp.h>
#include <string.h>

static int default_threads(int threads) {
    if (threads > 0) return threads;
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
    return omp_get_num_procs();
}

Status backend_create(const char *name, int threads, Backend **out, Err *e) {
    threads = default_threads(threads);
    omp_set_num_threads(threads);
    if (!strcmp(name, "cpu")) {
        *out = backend_cpu_create(threads);
        backend_cpu_install_sampling(*out);
        backend_cpu_install_heads(*out);
        return ST_OK;
    }
    if (!strcmp(name, "ref")) {
        *out = backend_ref_create(threads);
        backend_ref_install_sampling(*out);
        backend_ref_install_heads(*out);
        return ST_OK;
    }
    if (!strcmp(name, "cuda")) {
#ifdef STILL_CUDA
        return backend_cuda_create(threads, out, e);
#else
        return err_set(e, ST_EUNSUPPORTED, "--device cuda: this build has no CUDA backend (rebuild with make CUDA=1)");
#endif
    }
    return err_set(e, ST_EINVAL, "--device %s: unknown backend (expected cpu, ref or cuda)", name);
}

void backend_destroy(Backend *be) {
    if (be && be->destroy) be->destroy(be);
}
