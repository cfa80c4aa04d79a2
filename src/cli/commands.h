// commands.h: one entry point per subcommand (src/cli/cmd_*.c). Each parses its flags with
// args_parse, calls the library, prints results to stdout and returns the process exit code.
#ifndef STILL_COMMANDS_H
#define STILL_COMMANDS_H

typedef int (*CommandFn)(int argc, char **argv);

typedef struct Command {
    const char *name;
    CommandFn fn;       // NULL: on the roadmap, not built yet
    const char *summary;
} Command;

int cmd_init(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_loss(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_sft(int argc, char **argv);
int cmd_distill(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_grpo(int argc, char **argv);
int cmd_rloo(int argc, char **argv);
int cmd_dpo(int argc, char **argv);
int cmd_kto(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_export_gguf(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_reward(int argc, char **argv);

#endif
