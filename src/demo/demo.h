// demo.h: `still demo` — the whole system on a task it generates itself (task.h), with nothing
// to download: (1) a teacher trained from scratch with SFT, (2) a smaller student trained briefly
// with SFT (on problems as they are and with their answer written first), (3) the student
// self-distilled on its own rollouts with the answer as the teacher's privileged context (OPSD:
// the teacher is the student's frozen SFT weights reading the hinted prompt), (4) the student
// distilled from the teacher on its own rollouts, (5) GRPO on the student with an exact-match
// reward, (6) DPO on preference pairs from the GRPO student's own wrong answers to the training
// prompts (pairs.h), and a variant row: (7) the same DPO as a LoRA adapter on the GRPO student.
// After each stage the student (or teacher) is measured by greedy exact match on held-out
// problems. Every stage is one call of the library function behind its command (sft_run,
// distill_run, grpo_run, dpo_run, eval_run, demo_write_pairs) with the configuration that command
// builds from the flags the demo prints, so each stage can be re-run by hand. docs/demo.md.
#ifndef STILL_DEMO_H
#define STILL_DEMO_H

#include "../core/common.h"

typedef struct DemoConfig {
    const char *output_dir;   // a fresh directory (an earlier demo's output is replaced)
    const char *still;        // how the printed commands spell the binary ("./still")
    const char *backend;      // "cpu"
    int threads;              // fixed, so that the numbers repeat from run to run
    int quick;                // the under-a-minute variant (tests)
    int max_steps;            // > 0: at most this many optimizer steps per stage (smoke tests)
    uint64_t seed;
} DemoConfig;

typedef enum {
    DEMO_TEACHER = 0,   // teacher: SFT from scratch
    DEMO_STUDENT,       // student: brief SFT from scratch
    DEMO_OPSD,          // student: on-policy self-distillation, the answer as privileged context
    DEMO_DISTILL,       // student: on-policy distillation from the teacher
    DEMO_GRPO,          // student: GRPO with an exact-match reward
    DEMO_DPO,           // student: DPO on its own wrong greedy answers (rejected) against the answers (chosen)
    DEMO_DPO_LORA,      // a variant of DEMO_DPO from the same start (the GRPO student): a LoRA adapter
    DEMO_N_STAGES
} DemoStageId;

typedef struct DemoStage {
    const char *name;          // "teacher SFT", ...
    int from;                  // the stage whose model this one starts from (-1: a random init)
    int variant;               // not in the chain: a variant of the stage before it, from the same start
    char *model_dir;           // the model (or the LoRA adapter) this stage wrote
    char *base_dir;            // a LoRA stage's base model (the adapter applies to it), else NULL
    size_t params;
    int steps;
    double accuracy;           // greedy exact match on the held-out problems, in [0, 1]
    double train_seconds;      // the trainer's loop
    double tokens_per_second;  // training tokens per second (the trainer's count)
    double eval_seconds;
    double seconds;            // wall time of the whole stage (init, training, evaluation)
    char *commands;            // the still commands that reproduce the stage, one per line
} DemoStage;

typedef struct DemoReport {
    DemoStage stages[DEMO_N_STAGES];
    int n_stages;              // stages completed
    int n_train, n_test;       // problems in the training pool / held out
    double hinted_accuracy;    // the student after SFT on the held-out problems with their answer
                               // written first: its self-distillation teacher's accuracy
    int n_pairs;               // DPO's preference pairs (the GRPO student's wrong greedy answers)
    int lora_r;                // the LoRA variant's rank
    int digits;
    int threads;
    double data_seconds, seconds;
} DemoReport;

// Run every stage. The report is filled as stages complete (also when one fails).
Status demo_run(const DemoConfig *c, DemoReport *r, Err *e);
// The table, the model paths and the commands.
void demo_print_report(FILE *f, const DemoConfig *c, const DemoReport *r);
// Write the report as JSON (demo.json in the output directory).
Status demo_write_json(const DemoConfig *c, const DemoReport *r, Err *e);
void demo_report_free(DemoReport *r);

#endif
