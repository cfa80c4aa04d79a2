// cli_common.h: what every command does the same way: logging level, backend from --device /
// --threads, model resolution (directory or hub id in the local cache), id lists, errors.
#ifndef STILL_CLI_COMMON_H
#define STILL_CLI_COMMON_H

#include "../backend/backend.h"
#include "../dist/dist.h"
#include "../model/model.h"
#include "../train/trainer.h"
#include "args.h"

// Parse flags; handles --help (prints and returns 0 via *done) and logging. Returns exit code
// 0 on success, 2 on a flag error (printed).
int cli_parse(Args *a, const char *command, const char *summary, const ArgSpec *specs, int argc, char **argv,
              int *done);
// The whole of a command's entry point: parse flags (--help prints them), call run, print an
// error and return the exit code (0, 1 for input errors, 2 for flag errors, 3 for unsupported).
typedef Status (*CliRunFn)(const Args *a, Err *e);
int cli_run(const char *command, const char *summary, const ArgSpec *specs, int argc, char **argv, CliRunFn run);
// Print "still <command>: <message>" to stderr and return the exit code for a status.
int cli_fail(const char *command, const Err *e);
Status cli_backend(const Args *a, Backend **out, Err *e);
// --model (and --revision) resolved to a directory. Caller frees.
Status cli_model_dir(const Args *a, const char *flag, char **dir, Err *e);
// --dtype as a matrix storage dtype, or -1 when not given.
Status cli_dtype(const Args *a, int *out, Err *e);
// The same for another dtype flag (--teacher_dtype): float32, bfloat16 or q8_0; -1 when not
// given or auto.
Status cli_dtype_flag(const Args *a, const char *flag, int *out, Err *e);
// The same for a dtype that is written to files (--save_dtype, init --dtype): q8_0 is refused.
Status cli_save_dtype_flag(const Args *a, const char *flag, int *out, Err *e);
// --max_memory in bytes (0 when not given).
Status cli_max_memory(const Args *a, size_t *out, Err *e);
// Parse "1 2 3" (spaces, commas or newlines) into ids; each checked against vocab_size when > 0.
Status cli_parse_ids(const char *text, const char *what, int vocab_size, int32_t **ids, int *n, Err *e);
// The flags of every trainer that runs under mpirun, and the Dist they make (dist_init with
// --ddp_timeout; *zero_stage from --zero_stage, checked; the mesh of --tp_size / --fsdp_size or
// TP_SIZE / FSDP_SIZE, where either is more than 1 or --zero_stage is 3: docs/distributed.md).
#define CLI_DIST_FLAGS                                                                                                 \
    {"ddp_timeout", ARG_FLOAT, "1800", "seconds any collective may take before the run fails (mpirun)", "(0,inf)"},              \
    {"zero_stage", ARG_INT, "0", "0: optimizer state on every rank; 1: sharded over the ranks; 3: parameters, "       \
                                 "gradients and optimizer state sharded (FSDP; mpirun)", "[0,3]"},                     \
    {"tp_size", ARG_INT, NULL, "tensor-parallel group size (mpirun; default $TP_SIZE or 1)", "[1,4096]"},              \
    {"fsdp_size", ARG_INT, NULL, "ranks parameters are sharded over (mpirun; default $FSDP_SIZE, or every rank of a "  \
                                 "tensor-parallel rank's data axis with --zero_stage 3)", "[1,65536]"},                \
    {"ep_size", ARG_INT, "1", "expert parallel (sft, dpo, kto, grpo, rloo, distill): the experts of every sparse "   \
                              "layer split over this many ranks, each rank its own batches (mpirun -np EP_SIZE x "     \
                              "data-parallel replicas)", "[1,4096]"}
Status cli_dist(const Args *a, Dist *d, int *zero_stage, Err *e);
// --ep_size above 1 for a trainer without expert parallelism (reward): a usage error naming
// command and why.
Status cli_dist_no_ep(const Args *a, const char *command, const char *why, Err *e);
// The end of such a command: on failure print the error and, with several ranks, abort the job
// (the other ranks wait in a collective); MPI finalised. Returns the exit code.
int cli_dist_finish(const char *command, Dist *d, Status st, const Err *e);
// --adapter DIR: a PEFT LoRA adapter applied to a loaded model (docs/lora.md).
#define CLI_ADAPTER_FLAG {"adapter", ARG_STR, NULL, "PEFT LoRA adapter directory to apply to the model"}
// Load --adapter (when given) into m.
Status cli_apply_adapter(const Args *a, Model *m, Err *e);
// --moe_capacity_factor: the fixed-shape expert dispatch emulated on any backend (docs/backends.md)
#define CLI_MOE_FLAG                                                                                                 \
    {"moe_capacity_factor", ARG_FLOAT, "0", "mixture of experts: each expert keeps at most ceil(F * tokens * k / "    \
                                            "experts) routed tokens, the rest dropped (0 = exact, capacity-free)",      \
     "[0,inf)"}
// Set it on a loaded model (a dense model ignores it).
void cli_apply_moe(const Args *a, Model *m);
// A command's result: one compact JSON line, numbers at 9 significant digits at most (rounded in
// place). cli_json_line returns the text (caller frees); cli_print_json prints it to stdout.
char *cli_json_line(cJSON *o);
void cli_print_json(cJSON *o);
// A trainer's result line: steps, steps_run, loss (last window), train_loss (run mean),
// eval_loss, train_seconds and save_seconds apart, tokens_per_second.
void cli_print_train_result(const TrainResult *r);
// The end of a training command's run: the trainer's result (st == ST_OK) printed on rank 0; with
// several ranks a failure aborts the job here (the others wait in a collective); MPI finalised.
// Returns st, for cli_run to print.
Status cli_train_done(const char *command, Dist *d, Status st, const TrainResult *res, const Err *e);
// The sampling flags transformers' GenerationConfig refuses together (ST_EUSAGE): a temperature
// <= 0 when sampling, several sequences per prompt without sampling.
Status cli_check_sampling(int do_sample, double temperature, int num_return_sequences, Err *e);

#endif
