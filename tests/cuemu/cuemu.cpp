// cuemu.cpp: the CUDA emulator's runtime (tests/cuemu, docs/cuemu.md).
//
// Memory: device allocations come from one arena that host code cannot touch between device
// operations (PROT_NONE), each between two red zones and poisoned with 0xff bytes (NaN) when
// allocated; kernel arguments that are pointers must point into a device (or pinned host)
// allocation, and after every kernel the red zones of the allocations its arguments point into are
// checked. Streams: work is queued and runs when the host waits for it (stream or device
// synchronize, a copy to pageable host memory, cudaFree); a capturing stream records it instead,
// kernels with their arguments by value, and cudaGraphLaunch queues the recording again. Calls a
// capture forbids (host copies from pageable memory, synchronize, malloc / free) fail and invalidate
// the capture as on CUDA.
//
// Kernels: the blocks of a grid run one after another on the calling thread; the threads of a
// block are coroutines (a small register switch on x86-64, ucontext elsewhere) that run until they
// wait at a barrier. __syncthreads waits for every thread of the block at the same barrier site;
// a warp collective waits for every lane of its mask at the same collective. Divergent barriers,
// masks naming absent, exited or non-arriving lanes, threads exiting while others wait, and
// deadlocks abort with the kernel, block, thread and source lines involved. CUEMU_SCHED = fwd
// (default) | rev | shuffle[:seed] orders the warps, lanes and blocks, so that a missing barrier
// shows up as a changed result.
#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"

#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// Under AddressSanitizer (an emulated build with -fsanitize=address) the red zones are poisoned,
// so a kernel's read or write past an allocation is reported where it happens, and every switch
// between coroutine stacks is announced to ASan.
#if defined(__SANITIZE_ADDRESS__)
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CUEMU_ASAN 1
#else
#define CUEMU_ASAN 0
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

// ---- reporting ------------------------------------------------------------------------------------
[[noreturn]] __attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "cuemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static std::recursive_mutex g_mu;  // one host thread in the runtime at a time
#define LOCK() std::lock_guard<std::recursive_mutex> lock_(g_mu)

static thread_local cudaError_t t_last_error = cudaSuccess;
static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) t_last_error = e;
    return e;
}

// ---- the device arena ------------------------------------------------------------------------------
// Device allocations live in one reserved range that is readable and writable only while device
// work runs (kernels, copies, GEMMs, executed when a stream is flushed) or the runtime fills or
// checks it; the rest of the time it is PROT_NONE, so host code that dereferences a device pointer
// faults as it would on a GPU, and the SIGSEGV handler names the allocation.
static unsigned char *g_arena;
static size_t g_arena_size, g_arena_bump, g_arena_top;  // reserved; handed out; page-aligned top
static std::map<uintptr_t, size_t> g_arena_free;        // free spans by address
static int g_open;                                      // device_access nesting
static bool g_guard = true;                             // CUEMU_HOST_GUARD=0: always accessible
static size_t g_page;

static void arena_protect(size_t from, size_t to, int prot) {
    if (!g_guard) return;
    if (to > from && mprotect(g_arena + from, to - from, prot) != 0) fail("mprotect of the device arena failed");
}

// While one lives, device memory is accessible to the runtime.
struct DeviceAccess {
    DeviceAccess() {
        if (g_open++ == 0) arena_protect(0, g_arena_top, PROT_READ | PROT_WRITE);
    }
    ~DeviceAccess() {
        if (--g_open == 0) arena_protect(0, g_arena_top, PROT_NONE);
    }
    DeviceAccess(const DeviceAccess &) = delete;
    DeviceAccess &operator=(const DeviceAccess &) = delete;
};

static const struct Alloc *find_alloc(const void *p, uintptr_t *base);
static struct sigaction g_old_segv;
static unsigned char *g_stacks;  // the coroutine stacks (kernels), each above a guard page
static size_t g_stack_bytes;
static const char *g_kernel_name = "?", *g_kernel_file = "?";  // the kernel running, for the handler
static int g_kernel_line;
#define MAX_THREADS 1024

static void on_segv(int sig, siginfo_t *si, void *uc) {
    uintptr_t a = (uintptr_t)si->si_addr;
    if (g_arena && a >= (uintptr_t)g_arena && a < (uintptr_t)g_arena + g_arena_size && g_open == 0) {
        uintptr_t base = 0;
        const Alloc *al = find_alloc((const void *)a, &base);
        char msg[256];
        int n = snprintf(msg, sizeof msg,
                         "cuemu: host code touched device memory at %p (%s %p); copy it to the host first "
                         "(addr2line -f -e BINARY OFFSET names the frames below)\n",
                         (void *)a, al ? "in the allocation at" : "freed, near", (void *)(al ? base : a));
        if (write(2, msg, (size_t)n) < 0) n = 0;
        void *bt[48];
        backtrace_symbols_fd(bt, backtrace(bt, 48), 2);
        abort();
    }
    if (g_stacks && a >= (uintptr_t)g_stacks && a < (uintptr_t)g_stacks + g_stack_bytes * MAX_THREADS &&
        (a - (uintptr_t)g_stacks) % g_stack_bytes < g_page) {
        char msg[512];
        int n = snprintf(msg, sizeof msg,
                         "cuemu: kernel %s (launched at %s:%d): a thread overflowed its %zu KiB stack "
                         "(CUEMU_STACK_KB)\n",
                         g_kernel_name, g_kernel_file, g_kernel_line, g_stack_bytes >> 10);
        if (write(2, msg, (size_t)n) < 0) abort();
        abort();
    }
    if (g_old_segv.sa_flags & SA_SIGINFO) {
        g_old_segv.sa_sigaction(sig, si, uc);
    } else if (g_old_segv.sa_handler != SIG_DFL && g_old_segv.sa_handler != SIG_IGN) {
        g_old_segv.sa_handler(sig);
    } else {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

static void arena_init(void) {
    if (g_arena) return;
    const char *gb = getenv("CUEMU_ARENA_GB");
    g_arena_size = (size_t)(gb ? atoi(gb) : 64) << 30;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    const char *guard = getenv("CUEMU_HOST_GUARD");
    g_guard = !guard || strcmp(guard, "0");
    void *m = mmap(nullptr, g_arena_size, g_guard ? PROT_NONE : PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot reserve %zu bytes for device memory (CUEMU_ARENA_GB)", g_arena_size);
    g_arena = (unsigned char *)m;
    void *bt[1];
    backtrace(bt, 1);                    // loads the unwinder now, not inside the handler
    static unsigned char alt[64 << 10];  // the handler must run when a coroutine stack is exhausted
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = alt, ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
}

// span bytes, 256-aligned: first fit among freed spans, else from the top.
static unsigned char *arena_alloc(size_t span) {
    arena_init();
    for (auto it = g_arena_free.begin(); it != g_arena_free.end(); ++it) {
        if (it->second < span) continue;
        uintptr_t at = it->first;
        size_t left = it->second - span;
        g_arena_free.erase(it);
        if (left) g_arena_free[at + span] = left;
        return (unsigned char *)at;
    }
    if (g_arena_bump + span > g_arena_size) return nullptr;
    unsigned char *p = g_arena + g_arena_bump;
    g_arena_bump += span;
    size_t top = (g_arena_bump + g_page - 1) / g_page * g_page;
    if (top > g_arena_top) {
        if (g_open) arena_protect(g_arena_top, top, PROT_READ | PROT_WRITE);
        g_arena_top = top;
    }
    return p;
}

static void arena_free(unsigned char *p, size_t span) {
    uintptr_t at = (uintptr_t)p;
    auto next = g_arena_free.lower_bound(at);
    if (next != g_arena_free.end() && at + span == next->first) span += next->second, next = g_arena_free.erase(next);
    if (next != g_arena_free.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == at) at = prev->first, span += prev->second, g_arena_free.erase(prev);
    }
    g_arena_free[at] = span;
    // give the whole pages of the free span back: every mprotect of the arena walks its resident pages
    uintptr_t lo = (at + g_page - 1) / g_page * g_page, hi = (at + span) / g_page * g_page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

// ---- memory ------------------------------------------------------------------------------------------
#define RED 256  // red zone bytes on each side; allocations are 256-byte aligned as cudaMalloc's
#define RED_BYTE 0xa5

struct Alloc {
    size_t bytes;  // as requested
    size_t span;   // red + rounded bytes + red
    unsigned char *raw;
    bool pinned;
};
static std::map<uintptr_t, Alloc> g_allocs;  // by user address

static const struct Alloc *find_alloc(const void *p, uintptr_t *base) {
    auto it = g_allocs.upper_bound((uintptr_t)p);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    if ((uintptr_t)p > it->first + it->second.bytes) return nullptr;  // one past the end is inside
    if (base) *base = it->first;
    return &it->second;
}

// [p, p + bytes) inside one allocation (device, or pinned host when pinned_ok).
static bool in_alloc(const void *p, size_t bytes, bool pinned_ok) {
    uintptr_t base;
    const Alloc *a = find_alloc(p, &base);
    if (!a || (a->pinned && !pinned_ok)) return false;
    return (uintptr_t)p + bytes <= base + a->bytes;
}

int cuemu_is_device_range(const void *p, size_t bytes) {
    LOCK();
    return in_alloc(p, bytes, false);
}

// When a queued or recorded operation runs: its buffers must still be allocated (a graph can be
// replayed after a buffer it uses was freed; CUDA would read or write freed memory).
static void expect_live(const void *p, size_t bytes, bool pinned_ok, const char *what) {
    if (!in_alloc(p, bytes, pinned_ok))
        fail("%s: the %zu bytes at %p are not allocated any more (freed after the call was queued or captured)", what,
             bytes, p);
}

// Device memory from the arena; pinned host memory (accessible to the host) from the C heap.
static void *new_alloc(size_t bytes, bool pinned) {
    size_t rounded = (bytes + 255) / 256 * 256;
    size_t span = RED + rounded + RED;
    DeviceAccess open;
    unsigned char *raw = pinned ? (unsigned char *)aligned_alloc(256, span) : arena_alloc(span);
    if (!raw) return nullptr;
    ASAN_UNPOISON_MEMORY_REGION(raw, span);
    memset(raw, RED_BYTE, RED);
    memset(raw + RED, 0xff, bytes);  // memory starts undefined: NaN for floats
    memset(raw + RED + bytes, RED_BYTE, span - RED - bytes);
    ASAN_POISON_MEMORY_REGION(raw, RED);
    ASAN_POISON_MEMORY_REGION(raw + RED + bytes, span - RED - bytes);
    g_allocs[(uintptr_t)(raw + RED)] = Alloc{bytes, span, raw, pinned};
    return raw + RED;
}

static void check_red_zones(uintptr_t base, const Alloc &a, const char *when) {
    if (CUEMU_ASAN) return;  // poisoned: ASan reports the access itself
    DeviceAccess open;
    const unsigned char *lo = a.raw, *hi = a.raw + RED + a.bytes, *end = a.raw + a.span;
    for (const unsigned char *q = lo; q < lo + RED; q++)
        if (*q != RED_BYTE)
            fail("%s: %zu bytes were written before the %s allocation of %zu bytes at %p (offset -%td)", when,
                 (size_t)(lo + RED - q), a.pinned ? "pinned host" : "device", a.bytes, (void *)base, lo + RED - q);
    for (const unsigned char *q = hi; q < end; q++)
        if (*q != RED_BYTE)
            fail("%s: written past the end of the %s allocation of %zu bytes at %p (at byte offset %td)", when,
                 a.pinned ? "pinned host" : "device", a.bytes, (void *)base, q - (a.raw + RED));
}

static void free_alloc(void *p, bool pinned, const char *what) {
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.pinned != pinned)
        fail("%s(%p): not the start of a live %s allocation", what, p, pinned ? "pinned host" : "device");
    check_red_zones(it->first, it->second, what);
    if (pinned) {
        ASAN_UNPOISON_MEMORY_REGION(it->second.raw, it->second.span);
        free(it->second.raw);
    } else {
        ASAN_POISON_MEMORY_REGION(it->second.raw, it->second.span);  // a later use is use-after-free
        arena_free(it->second.raw, it->second.span);
    }
    g_allocs.erase(it);
}

// ---- streams, events, graphs ---------------------------------------------------------------------------
struct Op {
    const char *what;
    std::function<void()> run;
};

struct CUstream_st {
    unsigned flags = 0;
    std::deque<Op> queue;
    bool capturing = false, cap_invalid = false;
    cudaStreamCaptureMode cap_mode = cudaStreamCaptureModeGlobal;
    std::thread::id cap_thread;
    std::string cap_why;
    std::vector<Op> cap_ops;
};
struct CUevent_st {
    CUstream_st *stream = nullptr;
    double t = -1;
};
struct CUgraph_st {
    std::vector<Op> ops;
};
struct CUgraphExec_st {
    std::vector<Op> ops;
};

static CUstream_st g_legacy;  // stream 0
static std::set<CUstream_st *> g_streams;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static CUstream_st *stream_of(cudaStream_t s) {
    if (!s) return &g_legacy;
    return g_streams.count(s) ? s : nullptr;
}

static void run_queue(CUstream_st *s) {
    if (s->queue.empty()) return;
    DeviceAccess open;
    while (!s->queue.empty()) {
        Op op = std::move(s->queue.front());
        s->queue.pop_front();
        op.run();
    }
}

// The legacy stream waits for (and is waited on by) every blocking stream.
static void flush(CUstream_st *s) {
    if (s == &g_legacy) {
        for (CUstream_st *b : g_streams)
            if (!(b->flags & cudaStreamNonBlocking)) run_queue(b);
    }
    run_queue(s);
}

static void flush_all(void) {
    for (CUstream_st *s : g_streams) run_queue(s);
    run_queue(&g_legacy);
}

// The first reason a capture fails is the one cudaStreamEndCapture reports.
static void invalidate_capture(CUstream_st *s, const char *why) {
    if (!s->cap_invalid) s->cap_invalid = true, s->cap_why = why;
}

// A call the capture mode forbids (it could synchronise): invalidate the captures it disturbs.
static bool capture_forbids(const char *what) {
    bool hit = false;
    for (CUstream_st *s : g_streams) {
        if (!s->capturing || s->cap_mode == cudaStreamCaptureModeRelaxed) continue;
        if (s->cap_mode == cudaStreamCaptureModeThreadLocal && s->cap_thread != std::this_thread::get_id()) continue;
        invalidate_capture(s, what);
        hit = true;
    }
    return hit;
}

static cudaError_t submit(CUstream_st *s, const char *what, std::function<void()> run) {
    if (s->capturing) {
        if (s->cap_invalid) return cudaErrorStreamCaptureInvalidated;
        s->cap_ops.push_back(Op{what, std::move(run)});
        return cudaSuccess;
    }
    if (s != &g_legacy && !(s->flags & cudaStreamNonBlocking) && !g_legacy.queue.empty()) run_queue(&g_legacy);
    s->queue.push_back(Op{what, std::move(run)});
    return cudaSuccess;
}

cudaError_t cuemu_stream_submit(cudaStream_t st, const char *what, std::function<void()> op) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    return ret(submit(s, what, std::move(op)));
}

// ---- errors and device -------------------------------------------------------------------------------
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define NAME(x)                                                                                                        \
    case x: return #x;
        NAME(cudaSuccess)
        NAME(cudaErrorInvalidValue) NAME(cudaErrorMemoryAllocation) NAME(cudaErrorInvalidConfiguration)
            NAME(cudaErrorInvalidMemcpyDirection) NAME(cudaErrorNoDevice) NAME(cudaErrorInvalidDevice)
                NAME(cudaErrorInvalidResourceHandle) NAME(cudaErrorIllegalState) NAME(cudaErrorNotReady)
                    NAME(cudaErrorIllegalAddress) NAME(cudaErrorLaunchFailure) NAME(cudaErrorStreamCaptureUnsupported)
                        NAME(cudaErrorStreamCaptureInvalidated) NAME(cudaErrorStreamCaptureUnmatched)
                            NAME(cudaErrorStreamCaptureWrongThread)
#undef NAME
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "operation not permitted when stream is capturing or in this state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from another thread";
    default: return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *dev) {
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (dev != 0) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (CUDA emulated on the CPU, sm_90 limits)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = 227 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9, p->minor = 0;
    p->multiProcessorCount = 132;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    LOCK();
    if (capture_forbids("cudaDeviceSynchronize")) return ret(cudaErrorStreamCaptureUnsupported);
    flush_all();
    return cudaSuccess;
}

// ---- memory API ----------------------------------------------------------------------------------
cudaError_t cudaMalloc(void **p, size_t bytes) {
    LOCK();
    if (capture_forbids("cudaMalloc")) return ret(cudaErrorStreamCaptureUnsupported);
    *p = new_alloc(bytes, false);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    LOCK();
    if (capture_forbids("cudaMallocHost")) return ret(cudaErrorStreamCaptureUnsupported);
    *p = new_alloc(bytes, true);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *p) {
    LOCK();
    if (capture_forbids("cudaFree")) return ret(cudaErrorStreamCaptureUnsupported);
    if (!p) return cudaSuccess;
    flush_all();  // cudaFree waits for the device
    free_alloc(p, false, "cudaFree");
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    LOCK();
    if (capture_forbids("cudaFreeHost")) return ret(cudaErrorStreamCaptureUnsupported);
    if (!p) return cudaSuccess;
    flush_all();
    free_alloc(p, true, "cudaFreeHost");
    return cudaSuccess;
}

static bool ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, CUstream_st *s,
                                const char *what) {
    if (!bytes) return cudaSuccess;
    bool dst_dev = in_alloc(dst, bytes, false), src_dev = in_alloc(src, bytes, false);
    bool dst_pin = !dst_dev && in_alloc(dst, bytes, true), src_pin = !src_dev && in_alloc(src, bytes, true);
    if (kind == cudaMemcpyDefault)
        kind = src_dev ? (dst_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                       : (dst_dev ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    switch (kind) {
    case cudaMemcpyHostToDevice:
        if (!dst_dev || src_dev)
            fail("%s host to device of %zu bytes: dst %p %s, src %p %s", what, bytes, dst,
                 dst_dev ? "is device memory" : "is not inside a device allocation", src,
                 src_dev ? "is device memory" : "is host memory");
        if (src_pin)
            return submit(s, what, [=] {
                expect_live(dst, bytes, false, what);
                expect_live(src, bytes, true, what);
                memcpy(dst, src, bytes);
            });
        if (s->capturing) {  // pageable memory is staged at the call: nothing a graph could replay
            invalidate_capture(s, "a copy from pageable host memory");
            return cudaErrorStreamCaptureUnsupported;
        } else {
            auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src,
                                                                       (const unsigned char *)src + bytes);
            return submit(s, what, [=] {
                expect_live(dst, bytes, false, what);
                memcpy(dst, staged->data(), bytes);
            });
        }
    case cudaMemcpyDeviceToHost:
        if (!src_dev || dst_dev)
            fail("%s device to host of %zu bytes: src %p %s, dst %p %s", what, bytes, src,
                 src_dev ? "is device memory" : "is not inside a device allocation", dst,
                 dst_dev ? "is device memory" : "is host memory");
        if (dst_pin)
            return submit(s, what, [=] {
                expect_live(dst, bytes, true, what);
                expect_live(src, bytes, false, what);
                memcpy(dst, src, bytes);
            });
        if (s->capturing) {
            invalidate_capture(s, "a copy to pageable host memory");
            return cudaErrorStreamCaptureUnsupported;
        }
        flush(s);  // to pageable memory: returns when the copy is done
        {
            DeviceAccess open;
            memcpy(dst, src, bytes);
        }
        return cudaSuccess;
    case cudaMemcpyDeviceToDevice:
        if (!src_dev || !dst_dev)
            fail("%s device to device of %zu bytes: %s %p is not inside a device allocation", what, bytes,
                 src_dev ? "dst" : "src", src_dev ? dst : (void *)src);
        if (ranges_overlap(dst, bytes, src, bytes))
            fail("%s device to device: %zu bytes at %p and %p overlap", what, bytes, dst, src);
        return submit(s, what, [=] {
            expect_live(dst, bytes, false, what);
            expect_live(src, bytes, false, what);
            memcpy(dst, src, bytes);
        });
    case cudaMemcpyHostToHost: return submit(s, what, [=] { memmove(dst, src, bytes); });
    default: return cudaErrorInvalidMemcpyDirection;
    }
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    return ret(memcpy_async(dst, src, bytes, kind, s, "cudaMemcpyAsync"));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    LOCK();
    if (capture_forbids("cudaMemcpy")) return ret(cudaErrorStreamCaptureUnsupported);
    cudaError_t e = memcpy_async(dst, src, bytes, kind, &g_legacy, "cudaMemcpy");
    if (e == cudaSuccess) flush(&g_legacy);
    return ret(e);
}

static cudaError_t memset_async(void *dst, int value, size_t bytes, CUstream_st *s, const char *what) {
    if (!bytes) return cudaSuccess;
    if (!in_alloc(dst, bytes, false)) fail("%s of %zu bytes at %p: not inside a device allocation", what, bytes, dst);
    return submit(s, what, [=] {
        expect_live(dst, bytes, false, what);
        memset(dst, value, bytes);
    });
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t st) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    return ret(memset_async(dst, value, bytes, s, "cudaMemsetAsync"));
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    LOCK();
    if (capture_forbids("cudaMemset")) return ret(cudaErrorStreamCaptureUnsupported);
    cudaError_t e = memset_async(dst, value, bytes, &g_legacy, "cudaMemset");
    if (e == cudaSuccess) flush(&g_legacy);
    return ret(e);
}

// ---- stream, event and graph API ----------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned flags) {
    LOCK();
    CUstream_st *s = new CUstream_st;
    s->flags = flags;
    g_streams.insert(s);
    *out = s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t st) {
    LOCK();
    if (!st || !g_streams.count(st)) return ret(cudaErrorInvalidResourceHandle);
    if (st->capturing) return ret(cudaErrorIllegalState);
    run_queue(st);  // queued work still completes
    g_streams.erase(st);
    delete st;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (s->capturing) {
        invalidate_capture(s, "cudaStreamSynchronize");
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    flush(s);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (s == &g_legacy) return ret(cudaErrorStreamCaptureUnsupported);
    if (s->capturing) return ret(cudaErrorIllegalState);
    s->capturing = true;
    s->cap_invalid = false;
    s->cap_why.clear();
    s->cap_mode = mode;
    s->cap_thread = std::this_thread::get_id();
    s->cap_ops.clear();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (!s->capturing) return ret(cudaErrorIllegalState);
    if (s->cap_mode != cudaStreamCaptureModeRelaxed && s->cap_thread != std::this_thread::get_id())
        return ret(cudaErrorStreamCaptureWrongThread);
    s->capturing = false;
    *g = nullptr;
    if (s->cap_invalid) {
        fprintf(stderr, "cuemu: capture invalidated by %s\n", s->cap_why.c_str());
        s->cap_ops.clear();
        return ret(cudaErrorStreamCaptureInvalidated);
    }
    *g = new CUgraph_st{std::move(s->cap_ops)};
    s->cap_ops.clear();
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    LOCK();
    if (!g) return ret(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{g->ops};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (!exec) return ret(cudaErrorInvalidValue);
    for (const Op &op : exec->ops) {
        cudaError_t e = submit(s, op.what, op.run);
        if (e != cudaSuccess) return ret(e);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    LOCK();
    delete g;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    LOCK();
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
    LOCK();
    *e = new CUevent_st;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    LOCK();
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
    LOCK();
    CUstream_st *s = stream_of(st);
    if (!s || !e) return ret(cudaErrorInvalidResourceHandle);
    e->stream = s;
    e->t = -1;
    return ret(submit(s, "cudaEventRecord", [e] { e->t = now_s(); }));
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    LOCK();
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (e->stream) {
        if (e->stream->capturing) return ret(cudaErrorStreamCaptureUnsupported);
        flush(e->stream);
    }
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    LOCK();
    if (!a || !b) return ret(cudaErrorInvalidResourceHandle);
    if (a->t < 0 || b->t < 0) return ret(cudaErrorNotReady);
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

// ---- kernels: coroutines -------------------------------------------------------------------------------
enum ThreadState { TS_READY, TS_RUNNING, TS_BARRIER, TS_WARP, TS_DONE };

struct Thread {
    uint3 tid;
    int lin, warp, lane;
    ThreadState st;
    void *sp;
    const char *file;  // where it waits
    int line;
    uint64_t wval, wres;
    int warg, wwidth;
    uint32_t mma_a[4], mma_b[2];  // mma.sync: this lane's A and B fragments (bf16 pairs)
    float mma_c[4], mma_d[4];     // its C fragment, and D when the warp completes
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
};

struct Warp {
    unsigned exists, exited, arrived, ready, at_barrier;  // lane masks
    int op;
    unsigned mask;
    const char *file;
    int line;
};

struct Launch {
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    std::function<void()> body;
    std::vector<const void *> ptrs;
};

static struct {
    const Launch *L;
    int n, nwarps, live, bar_arrived;
    unsigned ready_warps;  // warps with a ready lane
    const char *bar_file;
    int bar_line;
    std::vector<std::pair<void *, size_t>> shared;  // static __shared__ variables entered in this block
    size_t static_bytes;
} X;  // the kernel being run

static Thread g_th[MAX_THREADS];
static Warp g_warps[MAX_THREADS / 32];
static Thread *g_cur;
static void *g_sched_sp;
static std::vector<unsigned char> g_dyn;  // dynamic shared memory + guard
#define DYN_GUARD 64
static std::map<const void *, int> g_max_dyn;  // cudaFuncAttributeMaxDynamicSharedMemorySize

const uint3 *cuemu_thread_idx;
uint3 cuemu_block_idx;
dim3 cuemu_block_dim, cuemu_grid_dim;

[[noreturn]] __attribute__((format(printf, 2, 3))) static void kfail(const Thread *t, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!X.L) fail("%s (outside any kernel)", msg);
    const Launch &L = *X.L;
    if (t)
        fail(
            "kernel %s (launched at %s:%d, grid (%u,%u,%u), block (%u,%u,%u)), block (%u,%u,%u), thread (%u,%u,%u): %s",
            L.name, L.file, L.line, L.grid.x, L.grid.y, L.grid.z, L.block.x, L.block.y, L.block.z, cuemu_block_idx.x,
            cuemu_block_idx.y, cuemu_block_idx.z, t->tid.x, t->tid.y, t->tid.z, msg);
    fail("kernel %s (launched at %s:%d, grid (%u,%u,%u), block (%u,%u,%u)), block (%u,%u,%u): %s", L.name, L.file,
         L.line, L.grid.x, L.grid.y, L.grid.z, L.block.x, L.block.y, L.block.z, cuemu_block_idx.x, cuemu_block_idx.y,
         cuemu_block_idx.z, msg);
}

static Thread *cur_thread(const char *what) {
    if (!X.L || !g_cur) fail("%s called outside a kernel", what);
    return g_cur;
}

// ---- kernels: scheduling ------------------------------------------------------------------------------
// A thread runs until it waits; then the next ready lane of its warp runs (switching straight to
// it), and when the warp has none the scheduler picks a ready warp. fwd takes the lowest ready
// warp and lane, rev the highest, shuffle a random one.
enum Sched { SCHED_FWD, SCHED_REV, SCHED_SHUFFLE };
static Sched g_sched = SCHED_FWD;
static uint64_t g_seed = 1;
static bool g_sched_read;

static void read_sched(void) {
    if (g_sched_read) return;
    g_sched_read = true;
    const char *s = getenv("CUEMU_SCHED");
    if (!s || !*s || !strcmp(s, "fwd")) return;
    if (!strcmp(s, "rev")) {
        g_sched = SCHED_REV;
    } else if (!strncmp(s, "shuffle", 7) && (s[7] == 0 || s[7] == ':')) {
        g_sched = SCHED_SHUFFLE;
        if (s[7] == ':') g_seed = strtoull(s + 8, nullptr, 10) | 1;
    } else {
        fail("CUEMU_SCHED=%s: expected fwd, rev or shuffle[:seed]", s);
    }
}

static uint64_t rnd(void) {  // xorshift64*
    g_seed ^= g_seed >> 12, g_seed ^= g_seed << 25, g_seed ^= g_seed >> 27;
    return g_seed * 2685821657736338717ull;
}

// A set bit of m (not 0): the lowest, the highest, or a random one.
static int pick(unsigned m) {
    if (g_sched == SCHED_FWD) return __builtin_ctz(m);
    if (g_sched == SCHED_REV) return 31 - __builtin_clz(m);
    for (int k = (int)(rnd() % (uint64_t)__builtin_popcount(m)); k > 0; k--) m &= m - 1;
    return __builtin_ctz(m);
}
static void make_ready(Thread &t) {
    t.st = TS_READY;
    g_warps[t.warp].ready |= 1u << t.lane;
    X.ready_warps |= 1u << t.warp;
}

// The next ready lane of warp wi, now running.
static Thread *take(int wi) {
    Warp &w = g_warps[wi];
    int l = pick(w.ready);
    w.ready &= ~(1u << l);
    if (!w.ready) X.ready_warps &= ~(1u << wi);
    Thread *t = &g_th[wi * 32 + l];
    t->st = TS_RUNNING;
    g_cur = t;
    cuemu_thread_idx = &t->tid;
    return t;
}

static void thread_exit(Thread *t);
static void block(Thread *t);

#if CUEMU_ASAN
// The stack of a thread, or of the scheduler (the host thread running the kernel).
static void stack_of(const Thread *t, const void **bottom, size_t *size) {
    if (t) {
        *bottom = g_stacks + (size_t)t->lin * g_stack_bytes;
        *size = g_stack_bytes;
        return;
    }
    static thread_local void *b;
    static thread_local size_t n;
    if (!b) {
        pthread_attr_t a;
        pthread_getattr_np(pthread_self(), &a);
        pthread_attr_getstack(&a, &b, &n);
        pthread_attr_destroy(&a);
    }
    *bottom = b, *size = n;
}
#endif

#if defined(__x86_64__)
// cuemu_switch(save, to): push the callee-saved registers and the SSE / x87 control words, store
// the stack pointer in *save, load `to` and pop the same from there.
extern "C" void cuemu_switch(void **save, void *to);
asm(R"(
    .pushsection .text
    .globl cuemu_switch
    .type cuemu_switch, @function
cuemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuemu_switch, .-cuemu_switch
    .popsection
)");

static void thread_main(void) {
#if CUEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    Thread *t = g_cur;
    X.L->body();
    thread_exit(t);
    block(t);
    __builtin_trap();  // never resumed
}

static void thread_start(Thread *t) {
    // a stack reused from an earlier block still has that block's frames poisoned
    ASAN_UNPOISON_MEMORY_REGION(g_stacks + (size_t)t->lin * g_stack_bytes + 4096, g_stack_bytes - 4096);
    uintptr_t top = (uintptr_t)(g_stacks + (size_t)(t->lin + 1) * g_stack_bytes) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72);  // thread_main starts with rsp = top - 8, as after a call
    uint32_t mxcsr;
    uint16_t fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    sp[0] = mxcsr | (uint64_t)fcw << 32;
    for (int i = 1; i <= 6; i++) sp[i] = 0;  // r15 r14 r13 r12 rbx rbp
    sp[7] = (uint64_t)(uintptr_t)thread_main;
    sp[8] = 0;
    t->sp = sp;
}
// from / to: a thread, or NULL for the scheduler
static void switch_to(Thread *from, Thread *to) {
#if CUEMU_ASAN
    void *fake = nullptr;
    const void *bottom;
    size_t size;
    stack_of(to, &bottom, &size);
    __sanitizer_start_switch_fiber(from && from->st == TS_DONE ? nullptr : &fake, bottom, size);
#endif
    cuemu_switch(from ? &from->sp : &g_sched_sp, to ? to->sp : g_sched_sp);
#if CUEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}
#else
static ucontext_t g_sched_uc;
static void thread_main(void) {
    Thread *t = g_cur;
    X.L->body();
    thread_exit(t);
    block(t);
    abort();
}
static void thread_start(Thread *t) {
    getcontext(&t->uc);
    t->uc.uc_stack.ss_sp = g_stacks + (size_t)t->lin * g_stack_bytes;
    t->uc.uc_stack.ss_size = g_stack_bytes;
    t->uc.uc_link = nullptr;
    makecontext(&t->uc, thread_main, 0);
}
static void switch_to(Thread *from, Thread *to) {
    swapcontext(from ? &from->uc : &g_sched_uc, to ? &to->uc : &g_sched_uc);
}
#endif

static void ensure_stacks(void) {
    if (g_stacks) return;
    const char *kb = getenv("CUEMU_STACK_KB");
    g_stack_bytes = (size_t)(kb ? atoi(kb) : 64) << 10;
    if (g_stack_bytes < (16 << 10)) g_stack_bytes = 16 << 10;
    arena_init();  // the fault handler, which also reports stack overflows
    size_t page = g_page;
    g_stack_bytes = (g_stack_bytes + page - 1) / page * page;
    void *m = mmap(nullptr, g_stack_bytes * MAX_THREADS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot map %zu bytes of thread stacks", g_stack_bytes * MAX_THREADS);
    g_stacks = (unsigned char *)m;
    for (int i = 0; i < MAX_THREADS; i++)
        mprotect(g_stacks + (size_t)i * g_stack_bytes, page, PROT_NONE);  // overflow faults
}

// t has stopped (waiting or done): run the next ready lane of its warp, else the scheduler.
static void block(Thread *t) {
    Warp &w = g_warps[t->warp];
    switch_to(t, w.ready ? take(t->warp) : nullptr);
}

// ---- kernels: barriers and warp collectives ------------------------------------------------------------
static const char *op_name(int op) {
    switch (op) {
    case CUEMU_SHFL_IDX: return "__shfl_sync";
    case CUEMU_SHFL_UP: return "__shfl_up_sync";
    case CUEMU_SHFL_DOWN: return "__shfl_down_sync";
    case CUEMU_SHFL_XOR: return "__shfl_xor_sync";
    case CUEMU_BALLOT: return "__ballot_sync";
    case CUEMU_ANY: return "__any_sync";
    case CUEMU_ALL: return "__all_sync";
    case CUEMU_SYNCWARP: return "__syncwarp";
    case CUEMU_MMA: return "mma.sync.aligned.m16n8k16";
    }
    return "?";
}

static bool same_site(const char *f1, int l1, const char *f2, int l2) {
    return l1 == l2 && (f1 == f2 || !strcmp(f1, f2));
}

static void thread_exit(Thread *t) {
    Warp &w = g_warps[t->warp];
    t->st = TS_DONE;
    X.live--;
    w.exited |= 1u << t->lane;
    if (X.bar_arrived)
        kfail(t, "exited while %d thread(s) wait at __syncthreads (%s:%d): every thread of the block must reach it",
              X.bar_arrived, X.bar_file, X.bar_line);
    if (w.arrived && (w.mask >> t->lane & 1))
        kfail(t, "exited while lanes 0x%08x of its warp wait in %s (%s:%d) with mask 0x%08x, which names it", w.arrived,
              op_name(w.op), w.file, w.line, w.mask);
}

void cuemu_syncthreads(const char *file, int line) {
    Thread *t = cur_thread("__syncthreads");
    if (X.live < X.n) {
        const Thread *gone = nullptr;
        for (int i = 0; i < X.n && !gone; i++)
            if (g_th[i].st == TS_DONE) gone = &g_th[i];
        kfail(t,
              "__syncthreads (%s:%d) after %d thread(s) of the block exited (thread (%u,%u,%u) first): a barrier in "
              "code not every thread reaches",
              file, line, X.n - X.live, gone->tid.x, gone->tid.y, gone->tid.z);
    }
    Warp &w = g_warps[t->warp];
    if (w.arrived && (w.mask >> t->lane & 1))
        kfail(t, "reached __syncthreads (%s:%d) while lanes 0x%08x of its warp wait for it in %s (%s:%d)", file, line,
              w.arrived, op_name(w.op), w.file, w.line);
    if (X.bar_arrived == 0) {
        X.bar_file = file, X.bar_line = line;
    } else if (!same_site(file, line, X.bar_file, X.bar_line)) {
        kfail(t, "divergent __syncthreads: this thread is at %s:%d while %d thread(s) wait at %s:%d", file, line,
              X.bar_arrived, X.bar_file, X.bar_line);
    }
    t->file = file, t->line = line;
    if (++X.bar_arrived == X.live) {
        X.bar_arrived = 0;
        for (int i = 0; i < X.n; i++)
            if (g_th[i].st == TS_BARRIER) make_ready(g_th[i]);
        for (int wi = 0; wi < X.nwarps; wi++) g_warps[wi].at_barrier = 0;
        return;
    }
    t->st = TS_BARRIER;
    w.at_barrier |= 1u << t->lane;
    block(t);
}

static float bf16_lo(uint32_t r) { return (float)__ushort_as_bfloat16((unsigned short)(r & 0xffffu)); }
static float bf16_hi(uint32_t r) { return (float)__ushort_as_bfloat16((unsigned short)(r >> 16)); }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: D (16x8) = A (16x16) B (16x8) + C, with the
// fragment layout of the PTX ISA (warp-level matrix fragments for mma.m16n8k16, .bf16 and .f32):
// lane = 4 g + q (groupID g = lane >> 2, threadID_in_group q = lane & 3), each 32-bit register
// two bf16 of which the lower 16 bits hold the element of lower column (A) or row (B) index:
//   A: a0 = (g, 2q..2q+1), a1 = (g+8, 2q..), a2 = (g, 2q+8..), a3 = (g+8, 2q+8..)    (row, col)
//   B: b0 = (2q..2q+1, g), b1 = (2q+8..2q+9, g)                                    (row k, col n)
//   C, D: c0 c1 = (g, 2q), (g, 2q+1); c2 c3 = (g+8, 2q), (g+8, 2q+1)
// Products of bf16 are exact in double and the 16-term sum is rounded to fp32 once, plus C: the
// tensor cores' own rounding of the sum (unspecified by PTX) lies within the kernels' tolerances.
static void mma_m16n8k16(int wi) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const Thread &t = g_th[wi * 32 + l];
        int g = l >> 2, q = l & 3;
        for (int r = 0; r < 4; r++) {
            int row = g + (r & 1) * 8, col = 2 * q + (r >> 1) * 8;
            A[row][col] = bf16_lo(t.mma_a[r]), A[row][col + 1] = bf16_hi(t.mma_a[r]);
        }
        for (int r = 0; r < 2; r++) {
            int k = 2 * q + r * 8;
            B[k][g] = bf16_lo(t.mma_b[r]), B[k + 1][g] = bf16_hi(t.mma_b[r]);
        }
    }
    float C[16][8];
    for (int l = 0; l < 32; l++) {
        const Thread &t = g_th[wi * 32 + l];
        int g = l >> 2, q = l & 3;
        for (int i = 0; i < 4; i++) C[g + (i >> 1) * 8][2 * q + (i & 1)] = t.mma_c[i];
    }
    for (int l = 0; l < 32; l++) {
        Thread &t = g_th[wi * 32 + l];
        int g = l >> 2, q = l & 3;
        for (int i = 0; i < 4; i++) {
            int row = g + (i >> 1) * 8, col = 2 * q + (i & 1);
            double acc = 0.0;
            for (int k = 0; k < 16; k++) acc += (double)A[row][k] * (double)B[k][col];
            t.mma_d[i] = (float)acc + C[row][col];
        }
    }
}

static void warp_complete(Warp &w, int wi) {
    if (w.op == CUEMU_MMA) mma_m16n8k16(wi);
    unsigned vote = 0;
    for (int l = 0; l < 32; l++)
        if (w.mask >> l & 1 && g_th[wi * 32 + l].wval) vote |= 1u << l;
    for (int l = 0; l < 32; l++) {
        if (!(w.mask >> l & 1)) continue;
        Thread &t = g_th[wi * 32 + l];
        int width = t.wwidth, seg = l & ~(width - 1), src = l;
        switch (w.op) {
        case CUEMU_SHFL_IDX: src = seg + (t.warg & (width - 1)); break;
        case CUEMU_SHFL_UP: src = l - t.warg < seg ? l : l - t.warg; break;
        case CUEMU_SHFL_DOWN: src = l + t.warg >= seg + width ? l : l + t.warg; break;
        case CUEMU_SHFL_XOR: src = (l ^ t.warg) >= seg + width ? l : l ^ t.warg; break;
        default: break;
        }
        if (w.op <= CUEMU_SHFL_XOR) {
            if (src < 0 || src > 31 || !(w.mask >> src & 1))
                kfail(&t, "%s (%s:%d): lane %d reads lane %d, which is not in the mask 0x%08x (undefined on CUDA)",
                      op_name(w.op), w.file, w.line, l, src, w.mask);
            t.wres = g_th[wi * 32 + src].wval;
        } else if (w.op == CUEMU_BALLOT) {
            t.wres = vote;
        } else if (w.op == CUEMU_ANY) {
            t.wres = vote != 0;
        } else if (w.op == CUEMU_ALL) {
            t.wres = vote == w.mask;
        }
        if (t.st == TS_WARP) make_ready(t);
    }
}

uint64_t cuemu_warp_op(int op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line) {
    Thread *t = g_cur;
    if (!X.L || !t) cur_thread(op_name(op));
    Warp &w = g_warps[t->warp];
    if (!(mask >> t->lane & 1))
        kfail(t, "%s (%s:%d) with mask 0x%08x, which does not name the calling lane %d", op_name(op), file, line, mask,
              t->lane);
    if (mask & ~w.exists)
        kfail(t, "%s (%s:%d): mask 0x%08x names lanes 0x%08x that do not exist in a block of %d threads", op_name(op),
              file, line, mask, mask & ~w.exists, X.n);
    if (mask & w.exited)
        kfail(t, "%s (%s:%d): mask 0x%08x names lanes 0x%08x that have exited", op_name(op), file, line, mask,
              mask & w.exited);
    if (width < 1 || width > 32 || (width & (width - 1)))
        kfail(t, "%s (%s:%d): width %d is not a power of 2 in 1..32", op_name(op), file, line, width);
    if (mask & w.at_barrier) {
        const Thread &o = g_th[t->warp * 32 + __builtin_ctz(mask & w.at_barrier)];
        kfail(t, "%s (%s:%d) with mask 0x%08x while lane %d waits at __syncthreads (%s:%d)", op_name(op), file, line,
              mask, o.lane, o.file, o.line);
    }
    if (w.arrived) {
        if (w.op != op || w.mask != mask || !same_site(file, line, w.file, w.line))
            kfail(t,
                  "lanes of warp %d diverge: this lane is at %s (%s:%d, mask 0x%08x) while lanes 0x%08x wait in %s "
                  "(%s:%d, mask 0x%08x)",
                  t->warp, op_name(op), file, line, mask, w.arrived, op_name(w.op), w.file, w.line, w.mask);
    } else {
        w.op = op, w.mask = mask, w.file = file, w.line = line;
    }
    t->wval = value, t->warg = arg, t->wwidth = width;
    t->file = file, t->line = line;
    w.arrived |= 1u << t->lane;
    if (w.arrived == mask) {
        warp_complete(w, t->warp);
        w.arrived = 0;
        return t->wres;
    }
    t->st = TS_WARP;
    block(t);
    return t->wres;
}

// ---- inline PTX -------------------------------------------------------------------------------------
// The one instruction the kernels use, with its operand groups: {D x4}, {A x4}, {B x2}, {C x4}.
static const char MMA_BF16[] = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";

// "{%0, %1}, {%2}, %3;" -> groups of operand numbers, or false when it does not read so.
static bool ptx_groups(const char *s, std::vector<std::vector<int>> &groups) {
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        bool brace = *s == '{';
        if (brace) s++;
        std::vector<int> g;
        for (;;) {
            while (*s == ' ' || *s == '\t' || *s == '\n') s++;
            if (*s != '%' || s[1] < '0' || s[1] > '9') return false;
            char *end;
            g.push_back((int)strtol(s + 1, &end, 10));
            s = end;
            while (*s == ' ' || *s == '\t' || *s == '\n') s++;
            if (!brace || *s != ',') break;
            s++;
        }
        if (brace && *s++ != '}') return false;
        groups.push_back(g);
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s != ';') return false;
        for (s++; *s; s++)
            if (*s != ' ' && *s != '\t' && *s != '\n') return false;
        return true;
    }
}

void cuemu_asm(const char *ptx, const char *file, int line, std::initializer_list<CuemuAsmOut> outs,
               std::initializer_list<CuemuAsmIn> ins) {
    Thread *t = cur_thread("inline PTX");
    while (*ptx == ' ' || *ptx == '\t' || *ptx == '\n') ptx++;
    size_t n = strcspn(ptx, " \t\n");
    std::vector<std::vector<int>> groups;
    if (n != sizeof MMA_BF16 - 1 || strncmp(ptx, MMA_BF16, n))
        kfail(t, "inline PTX at %s:%d: `%.*s` is not emulated (tests/cuemu knows %s)", file, line, (int)n, ptx, MMA_BF16);
    if (!ptx_groups(ptx + n, groups) || groups.size() != 4 || groups[0].size() != 4 || groups[1].size() != 4 ||
        groups[2].size() != 2 || groups[3].size() != 4)
        kfail(t, "inline PTX at %s:%d: %s wants operands {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3}: `%s`", file, line,
              MMA_BF16, ptx);
    const int nout = (int)outs.size(), nin = (int)ins.size();
    const CuemuAsmOut *o = outs.begin();
    const CuemuAsmIn *in = ins.begin();
    // every operand number names an output (D) or an input (A, B: "r"; C: "f") of the right kind
    auto input = [&](int num, char kind) -> uint32_t {
        if (num < nout || num >= nout + nin || in[num - nout].kind != kind)
            kfail(t, "inline PTX at %s:%d: operand %%%d of %s must be an \"%c\" input (an \"=\" output's old value is undefined)", file, line, num, MMA_BF16, kind);
        return in[num - nout].bits;
    };
    for (int i = 0; i < 4; i++) t->mma_a[i] = input(groups[1][i], 'r');
    for (int i = 0; i < 2; i++) t->mma_b[i] = input(groups[2][i], 'r');
    for (int i = 0; i < 4; i++) {
        uint32_t b = input(groups[3][i], 'f');
        memcpy(&t->mma_c[i], &b, 4);
    }
    for (int i = 0; i < 4; i++) {
        int num = groups[0][i];
        if (num < 0 || num >= nout || o[num].kind != 'f')
            kfail(t, "inline PTX at %s:%d: operand %%%d of %s must be an \"=f\" output", file, line, num, MMA_BF16);
    }
    // .aligned: every lane of the warp executes the same mma (a full-mask collective at one site)
    cuemu_warp_op(CUEMU_MMA, 0xffffffffu, 0, 0, 32, file, line);
    for (int i = 0; i < 4; i++) *(float *)o[groups[0][i]].p = t->mma_d[i];
}

[[noreturn]] void cuemu_trap(const char *file, int line) { kfail(g_cur, "__trap() at %s:%d", file, line); }

// CUDA refuses the launch (too many resources requested); here the kernel stops at its start.
void cuemu_launch_bounds(int max_threads, const char *file, int line) {
    Thread *t = cur_thread("__launch_bounds__");
    if (X.n > max_threads)
        kfail(t, "a block of %d threads, over the kernel's __launch_bounds__(%d) (%s:%d)", X.n, max_threads, file,
              line);
}

void cuemu_shared_enter(void *p, size_t bytes, const char *name) {
    cur_thread("__shared__");
    for (auto &d : X.shared)
        if (d.first == p) return;
    X.shared.emplace_back(p, bytes);
    X.static_bytes += bytes;
    memset(p, 0xff, bytes);
}

void *cuemu_dyn_shared(void) {
    cur_thread("extern __shared__");
    return g_dyn.data();
}

[[noreturn]] static void deadlock(void) {
    std::string why;
    char line[512];
    if (X.bar_arrived) {
        snprintf(line, sizeof line, "; %d thread(s) wait at __syncthreads (%s:%d)", X.bar_arrived, X.bar_file,
                 X.bar_line);
        why += line;
    }
    for (int wi = 0; wi < X.nwarps; wi++) {
        const Warp &w = g_warps[wi];
        if (!w.arrived) continue;
        snprintf(line, sizeof line, "; warp %d: lanes 0x%08x wait in %s (%s:%d) for lanes 0x%08x", wi, w.arrived,
                 op_name(w.op), w.file, w.line, w.mask & ~w.arrived);
        why += line;
    }
    kfail(nullptr, "deadlock: no thread can run (%d of %d live)%s", X.live, X.n, why.c_str());
}

static void run_block(const Launch &L) {
    const int n = X.n;
    const unsigned bx = L.block.x, by = L.block.y;
    for (int i = 0; i < n; i++) {
        Thread &t = g_th[i];
        t.tid = uint3{(unsigned)i % bx, (unsigned)i / bx % by, (unsigned)i / (bx * by)};
        t.lin = i, t.warp = i / 32, t.lane = i % 32;
        t.st = TS_READY;
        t.file = nullptr, t.line = 0;
        thread_start(&t);
    }
    for (int wi = 0; wi < X.nwarps; wi++) {
        int lanes = n - wi * 32 < 32 ? n - wi * 32 : 32;
        unsigned exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        g_warps[wi] = Warp{exists, 0, 0, exists, 0, 0, 0, nullptr, 0};
    }
    X.ready_warps = X.nwarps == 32 ? 0xffffffffu : (1u << X.nwarps) - 1;
    X.live = n, X.bar_arrived = 0;
    X.shared.clear();
    X.static_bytes = 0;
    memset(g_dyn.data(), 0xff, L.shmem);
    memset(g_dyn.data() + L.shmem, RED_BYTE, DYN_GUARD);

    while (X.live > 0) {
        if (!X.ready_warps) deadlock();
        switch_to(nullptr, take(pick(X.ready_warps)));
    }
    g_cur = nullptr;
    for (int i = 0; i < DYN_GUARD; i++)
        if (g_dyn[L.shmem + i] != RED_BYTE)
            kfail(nullptr, "wrote past the end of its %zu bytes of dynamic shared memory (byte %zu)", L.shmem,
                  L.shmem + i);
    if (X.static_bytes > (48u << 10))
        kfail(nullptr, "%zu bytes of static shared memory (at most 48 KiB)", X.static_bytes);
    if (X.static_bytes + L.shmem > (227u << 10))
        kfail(nullptr, "%zu bytes of static + %zu of dynamic shared memory (at most 227 KiB)", X.static_bytes, L.shmem);
}

static void run_kernel(const Launch &L) {
    for (size_t i = 0; i < L.ptrs.size(); i++)
        if (L.ptrs[i] && !find_alloc(L.ptrs[i], nullptr))
            fail("kernel %s (launched at %s:%d): argument %zu (%p) points into no device allocation any more (freed "
                 "after the launch was queued or captured)",
                 L.name, L.file, L.line, i + 1, L.ptrs[i]);
    read_sched();
    ensure_stacks();
    X.L = &L;
    g_kernel_name = L.name, g_kernel_file = L.file, g_kernel_line = L.line;
    X.n = (int)(L.block.x * L.block.y * L.block.z);
    X.nwarps = (X.n + 31) / 32;
    if (g_dyn.size() < L.shmem + DYN_GUARD) g_dyn.resize(L.shmem + DYN_GUARD);
    cuemu_block_dim = L.block;
    cuemu_grid_dim = L.grid;
    const uint64_t nb = (uint64_t)L.grid.x * L.grid.y * L.grid.z;
    // blocks in order, reversed, or in an affine permutation (a stride coprime to the count)
    uint64_t stride = 1, offset = 0;
    if (g_sched == SCHED_SHUFFLE && nb > 1) {
        do stride = rnd() % nb;
        while (stride == 0 || std::gcd(stride, nb) != 1);
        offset = rnd() % nb;
    }
    for (uint64_t k = 0; k < nb; k++) {
        uint64_t b = g_sched == SCHED_REV ? nb - 1 - k : (offset + k * stride) % nb;
        cuemu_block_idx = uint3{(unsigned)(b % L.grid.x), (unsigned)(b / L.grid.x % L.grid.y),
                                (unsigned)(b / ((uint64_t)L.grid.x * L.grid.y))};
        run_block(L);
    }
    char when[512];
    snprintf(when, sizeof when, "kernel %s (launched at %s:%d)", L.name, L.file, L.line);
    for (const void *p : L.ptrs) {
        uintptr_t base;
        const Alloc *a = p ? find_alloc(p, &base) : nullptr;
        if (a) check_red_zones(base, *a, when);
    }
    X.L = nullptr;
}

cudaError_t cuemu_func_set_attribute(const void *func, cudaFuncAttribute attr, int value) {
    LOCK();
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > (227 << 10)) return ret(cudaErrorInvalidValue);
        g_max_dyn[func] = value;
    }
    return cudaSuccess;
}

void cuemu_submit_kernel(const char *name, const char *file, int line, const void *func, dim3 grid, dim3 block,
                         size_t shmem, cudaStream_t st, std::function<void()> body, std::vector<const void *> ptrs) {
    LOCK();
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024 ||
        !grid.x || !grid.y || !grid.z || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        ret(cudaErrorInvalidConfiguration);
        return;
    }
    auto it = g_max_dyn.find(func);
    size_t max_dyn = it == g_max_dyn.end() ? (48u << 10) : (size_t)it->second;
    if (shmem > max_dyn) {
        fprintf(stderr, "cuemu: kernel %s (%s:%d): %zu bytes of dynamic shared memory, the kernel allows %zu\n", name,
                file, line, shmem, max_dyn);
        ret(cudaErrorInvalidValue);
        return;
    }
    CUstream_st *s = stream_of(st);
    if (!s) {
        ret(cudaErrorInvalidResourceHandle);
        return;
    }
    for (size_t i = 0; i < ptrs.size(); i++)
        if (ptrs[i] && !find_alloc(ptrs[i], nullptr))
            fail("kernel %s (launched at %s:%d): argument %zu (%p) points into no device allocation", name, file, line,
                 i + 1, ptrs[i]);
    auto L =
        std::make_shared<const Launch>(Launch{name, file, line, grid, block, shmem, std::move(body), std::move(ptrs)});
    cudaError_t e = submit(s, name, [L] { run_kernel(*L); });
    if (e != cudaSuccess) ret(e);
}

// ---- cuBLAS ----------------------------------------------------------------------------------------------
struct cublasContext {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !cuemu_is_device_range(ws, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    // The loop GEMM needs no workspace: release its pages (the arena's protection changes walk
    // every resident page).
    uintptr_t lo = ((uintptr_t)ws + 4095) / 4096 * 4096, hi = ((uintptr_t)ws + bytes) / 4096 * 4096;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
    }
}

static size_t type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_64F ? 8 : 2; }

static float load(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == CUDA_R_16F) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

static float to_tf32(float x) {  // 10 mantissa bits, nearest even
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha_p, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta_p, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 || k < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
        ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool types_ok = at == bt && (at == CUDA_R_32F || at == CUDA_R_16BF || at == CUDA_R_16F) && ct == CUDA_R_32F;
    bool compute_ok = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
                      compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                      compute == CUBLAS_COMPUTE_32F_FAST_16F;
    if (!types_ok || !compute_ok) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const float alpha = *(const float *)alpha_p, beta = *(const float *)beta_p;  // host pointer mode: read now
    size_t es = type_size(at);
    auto extent = [](int rows, int cols, int ld, size_t esz) { return ((size_t)(cols - 1) * ld + rows) * esz; };
    size_t a_bytes = k ? extent(ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda, es) : 0;
    size_t b_bytes = k ? extent(tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb, es) : 0;
    size_t c_bytes = extent(m, n, ldc, 4);
    if (a_bytes && !cuemu_is_device_range(A, a_bytes))
        fail("cublasGemmEx: A (%s, m %d k %d, lda %d, %zu bytes at %p) is not inside one device allocation",
             ta == CUBLAS_OP_N ? "N" : "T", m, k, lda, a_bytes, A);
    if (b_bytes && !cuemu_is_device_range(B, b_bytes))
        fail("cublasGemmEx: B (%s, k %d n %d, ldb %d, %zu bytes at %p) is not inside one device allocation",
             tb == CUBLAS_OP_N ? "N" : "T", k, n, ldb, b_bytes, B);
    if (!cuemu_is_device_range(C, c_bytes))
        fail("cublasGemmEx: C (m %d n %d, ldc %d, %zu bytes at %p) is not inside one device allocation", m, n, ldc,
             c_bytes, C);
    if ((a_bytes && ranges_overlap(A, a_bytes, C, c_bytes)) || (b_bytes && ranges_overlap(B, b_bytes, C, c_bytes)))
        fail("cublasGemmEx: the output C (%zu bytes at %p) overlaps an input (A %p, B %p)", c_bytes, C, A, B);
    bool tf32 = at == CUDA_R_32F && (h->math == CUBLAS_TF32_TENSOR_OP_MATH || compute == CUBLAS_COMPUTE_32F_FAST_TF32);
    cudaError_t e = cuemu_stream_submit(h->stream, "cublasGemmEx", [=] {
        if (a_bytes) expect_live(A, a_bytes, false, "cublasGemmEx A");
        if (b_bytes) expect_live(B, b_bytes, false, "cublasGemmEx B");
        expect_live(C, c_bytes, false, "cublasGemmEx C");
        // op(A) as (m, k) rows and op(B) as (n, k) rows, in fp32; C column-major (m, n)
        std::vector<float> a((size_t)m * k), b((size_t)n * k);
        for (int i = 0; i < m; i++)
            for (int p = 0; p < k; p++)
                a[(size_t)i * k + p] = load(A, at, ta == CUBLAS_OP_N ? i + (size_t)p * lda : p + (size_t)i * lda);
        for (int j = 0; j < n; j++)
            for (int p = 0; p < k; p++)
                b[(size_t)j * k + p] = load(B, bt, tb == CUBLAS_OP_N ? p + (size_t)j * ldb : j + (size_t)p * ldb);
        if (tf32) {
            for (float &x : a) x = to_tf32(x);
            for (float &x : b) x = to_tf32(x);
        }
        float *c = (float *)C;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float *ar = a.data() + (size_t)i * k, *br = b.data() + (size_t)j * k;
                float acc = 0.0f;
                for (int p = 0; p < k; p++) acc = fmaf(ar[p], br[p], acc);
                float &out = c[i + (size_t)j * ldc];
                out = beta == 0.0f ? alpha * acc : alpha * acc + beta * out;  // beta 0: C is not read
            }
    });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
