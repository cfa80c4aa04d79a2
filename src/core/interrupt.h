// interrupt.h: SIGINT / SIGTERM as a request to stop at the next safe point.
//
// A signal handler has nowhere to write but a global, so the flag below is the one piece of
// global mutable state besides the log level (STYLE.md rule 7). Library code never reads it by
// name: the CLI installs the handler and passes interrupt_flag() down as a pointer
// (TrainConfig.stop, the chat loop), which the loops poll at their safe points.
//
// INTERRUPT_ESCALATE (training): the first signal sets the flag (the run finishes its optimizer
// step, saves a complete checkpoint and exits 130, for SIGTERM too); a second one ends the process at
// once with the signal's default action (a temp file it was writing is swept when the next run
// in that output_dir starts). INTERRUPT_REPEAT (chat): every signal sets the flag; the loop
// clears it when it has stopped the reply.
#ifndef STILL_INTERRUPT_H
#define STILL_INTERRUPT_H

#include <signal.h>

typedef enum { INTERRUPT_ESCALATE = 0, INTERRUPT_REPEAT = 1 } InterruptMode;

void interrupt_install(InterruptMode mode);
// The flag the handler sets: the number of signals received (0: none).
const volatile sig_atomic_t *interrupt_flag(void);
void interrupt_clear(void);

#endif
