// blas_core.c: which OpenBLAS kernels a process should ask for when the library's own CPU
// detection falls back to old ones (backend.h).
//
// A DYNAMIC_ARCH OpenBLAS picks its kernels from the CPU's family and model number. A CPU newer
// than the library (Debian 12's 0.3.21 on Emerald Rapids, family 6 model 207) is not in its
// table and gets the SSE3 kernels ("Prescott"): every matrix product then runs at a fraction of
// the machine's speed (the demo takes 1.6x as long) and rounds differently from the AVX2 kernels
// the same library uses on an older CPU. The library reads OPENBLAS_CORETYPE when it loads, so the
// caller sets that and starts the program again (main.c).
#include "cpu.h"

#include <strings.h>

#ifdef STILL_OPENBLAS
char *openblas_get_corename(void);
#endif

// Kernel sets of OpenBLAS with no AVX2 (its names, as openblas_get_corename spells them).
static int pre_avx2(const char *core) {
    static const char *const old[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                      "Sandybridge", "Barcelona", "Bobcat", "Opteron", "Opteron_SSE3",
                                      "Bulldozer", "Piledriver", "Steamroller", "Excavator", "Katmai",
                                      "Coppermine", "Northwood", "Banias"};
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
        if (!strcasecmp(core, old[i])) return 1;
    return 0;
}

const char *cpu_blas_core(void) {
#ifdef STILL_OPENBLAS
    return openblas_get_corename();
#else
    return NULL;
#endif
}

const char *cpu_blas_core_override(void) {
    const char *core = cpu_blas_core();
    if (!core || !pre_avx2(core)) return NULL;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;  // the library was right
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    return "Haswell";
}
