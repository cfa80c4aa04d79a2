// main.c: still <command> [--flags]. Dispatch only; every command lives in its cmd_*.c.
#include "commands.h"

#include "args.h"
#include "../backend/backend.h"
#include "still_commit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const Command commands[] = {
    {"init", cmd_init, "write a randomly initialised model in Hugging Face layout"},
    {"info", cmd_info, "architecture, parameter count, plans and memory at a shape"},
    {"logits", cmd_logits, "logits for token ids, one line per position"},
    {"loss", cmd_loss, "mean next-token cross-entropy (and every gradient)"},
    {"tokenize", cmd_tokenize, "encode text to ids (or decode ids) with tokenizer.json"},
    {"chat-template", cmd_chat_template, "render messages through the model's chat template"},
    {"generate", cmd_generate, "generate text (static KV cache, sort-free sampling)"},
    {"chat", cmd_chat, "interactive chat through the chat template"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (chat, completions, streaming, tools)"},
    {"eval", cmd_eval, "generate for a dataset and report metrics"},
    {"sft", cmd_sft, "supervised fine-tuning (TRL SFTTrainer semantics)"},
    {"distill", cmd_distill, "on-policy distillation (TRL DistillationTrainer / GKD, OPSD)"},
    {"grpo", cmd_grpo, "online RL with GRPO"},
    {"rloo", cmd_rloo, "online RL with RLOO"},
    {"dpo", cmd_dpo, "preference optimisation (TRL DPOTrainer semantics, every DPO loss)"},
    {"kto", cmd_kto, "unpaired preference optimisation (TRL KTOTrainer semantics)"},
    {"reward", cmd_reward, "train a reward model (TRL RewardTrainer semantics)"},
    {"score", cmd_score, "one reward per dataset row from a reward model"},
    {"merge", cmd_merge, "merge a PEFT LoRA adapter into its base model (a plain checkpoint)"},
    {"export-gguf", cmd_export_gguf, "write a model as a llama.cpp GGUF file (f32, f16, bf16, q8_0)"},
    {"demo", cmd_demo, "the whole system on a synthetic task, in minutes, nothing to download"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: still <command> [--flags] [--config FILE]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s%s\n", commands[i].name, commands[i].summary,
                commands[i].fn ? "" : " (not available yet)");
    fprintf(f, "\n`still <command> --help` lists a command's flags; `still --version` the build.\n");
}

// Settings libgomp and OpenBLAS read once, when the program loads, so still starts itself again
// with them unless the caller chose:
// - OMP_WAIT_POLICY=passive. OpenMP threads that wait by spinning (libgomp's default) slow the many
//   short parallel regions of decoding and small models down several times as soon as another
//   process wants the same cores (bench/RESULTS.md: 5x-20x on a shared 2-core machine); threads
//   that sleep while waiting cost little when the cores are free.
// - OPENBLAS_CORETYPE, only where OpenBLAS did not recognise the CPU and fell back to kernels
//   without AVX2 on a machine that has AVX2 (src/backend/cpu/blas_core.c): the AVX2 or AVX-512
//   kernels instead.
static void exec_with_runtime_env(char **argv) {
    int again = 0;
    if (!getenv("OMP_WAIT_POLICY")) setenv("OMP_WAIT_POLICY", "passive", 1), again = 1;
    const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : cpu_blas_core_override();
    if (core) setenv("OPENBLAS_CORETYPE", core, 1), again = 1;
    if (again) execv("/proc/self/exe", argv);
    // exec failed (no /proc): run on with the libraries' defaults
}

#define STILL_VERSION "0.1.0"

// What this binary was built from and with.
static void print_version(void) {
    printf("still %s (commit %s)\nbuild:", STILL_VERSION, STILL_GIT_COMMIT);
#ifdef STILL_OPENBLAS
    printf(" openblas-openmp (%s kernels)", cpu_blas_core());
#else
    printf(" no-blas");
#endif
    printf(" openmp");
#ifdef STILL_MPI
    printf(" mpi");
#endif
#ifdef STILL_CUDA
    printf(" cuda");
#endif
#ifdef STILL_LIBEDIT
    printf(" libedit");
#endif
#ifdef __AVX512F__
    printf(" avx512");
#elif defined(__AVX2__)
    printf(" avx2");
#endif
#ifdef __SANITIZE_ADDRESS__
    printf(" asan");
#endif
    printf("\ncompiler: gcc %d.%d.%d\n", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
}

int main(int argc, char **argv) {
    exec_with_runtime_env(argv);
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version"))) {
        print_version();
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *name = argv[1];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(commands[i].name, name) != 0) continue;
        if (!commands[i].fn) {
            fprintf(stderr, "still: '%s' is not available yet in this build (see the roadmap in README.md)\n", name);
            return 2;
        }
        return commands[i].fn(argc - 2, argv + 2);
    }
    const char *best = NULL;
    int best_d = 1 << 30;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        int d = args_edit_distance(name, commands[i].name);
        if (d < best_d) best_d = d, best = commands[i].name;
    }
    if (best_d <= 3)
        fprintf(stderr, "still: unknown command '%s'; did you mean '%s'?\n", name, best);
    else
        fprintf(stderr, "still: unknown command '%s'\n", name);
    usage(stderr);
    return 2;
}
