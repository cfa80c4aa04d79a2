// interrupt.c: the SIGINT / SIGTERM handler (see interrupt.h for why its flag is global).
#include "interrupt.h"

#include <string.h>

static volatile sig_atomic_t g_count, g_mode;

static void on_signal(int sig) {
    if (g_mode == INTERRUPT_ESCALATE && g_count > 0) {  // second signal: stop at once
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_count = g_count + 1;
}

void interrupt_install(InterruptMode mode) {
    g_mode = mode;
    g_count = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    // training: interrupted system calls restart (pipes to reward processes, MPI); chat: a blocking
    // read of the next line returns EINTR
    sa.sa_flags = mode == INTERRUPT_ESCALATE ? SA_RESTART : 0;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

const volatile sig_atomic_t *interrupt_flag(void) { return &g_count; }

void interrupt_clear(void) { g_count = 0; }
