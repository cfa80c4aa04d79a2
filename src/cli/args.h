// args.h: the one command-line parser every command uses (ARCHITECTURE §9).
//
// Flags are written with underscores (`--learning_rate`); the hyphenated spelling is an alias.
// Booleans follow HfArgumentParser: `--x`, `--x true|false`, `--no_x`. `--config FILE` (JSON or
// YAML) supplies defaults whose keys are flag names; the command line wins. TRL/Transformers
// flags still does not implement are recognised and either ignored with one line saying why, or
// refused as "not supported yet". Unknown flags are errors that suggest the nearest known one.
#ifndef STILL_ARGS_H
#define STILL_ARGS_H

#include "../core/common.h"

typedef enum {
    ARG_STR,
    ARG_INT,
    ARG_FLOAT,
    ARG_BOOL,
    ARG_LIST,   // may be given several times; every value kept in order
} ArgType;

// A help text that starts with ARG_REQUIRED marks a flag the command cannot run without: --help
// shows it as "(required)".
#define ARG_REQUIRED "[required] "

// Every ARG_INT and ARG_FLOAT flag carries its allowed values as an interval, "[1,inf)",
// "(0,1]", "[-1,inf)" (inf: no bound), where torch / TRL / Transformers check the same value;
// a value outside is a flag error (exit 2) naming the flag, the value and the interval. Values
// that are only wrong together with another flag are the command's to check (ST_EUSAGE).
typedef struct ArgSpec {
    const char *name;   // underscore spelling
    ArgType type;
    const char *def;    // default as text, or NULL (unset)
    const char *help;
    const char *range;  // ARG_INT / ARG_FLOAT: allowed interval (required); NULL for the other types
} ArgSpec;

typedef struct ArgValue {
    const ArgSpec *spec;
    char **values;      // (n_values) texts; booleans normalised to "true"/"false"
    int n_values;
    int from_cli;       // 1 if given on the command line (else config file or default)
} ArgValue;

typedef struct Args {
    const char *command;
    ArgValue *vals;     // (n_vals) one per spec of the command plus the common flags
    int n_vals;
    char **positional;  // (n_positional)
    int n_positional;
} Args;

// Parse argv (after the command name). specs ends with a {NULL} entry. Common flags (config,
// threads, dtype, log_level, help, seed...) are added by the parser. On error, e names the flag.
Status args_parse(Args *a, const char *command, const ArgSpec *specs, int argc, char **argv, Err *e);
void args_free(Args *a);

// Was the flag set (command line or config), as opposed to left at its default?
int args_is_set(const Args *a, const char *name);
// Value as text (the default when unset; NULL when unset without default).
const char *args_str(const Args *a, const char *name);
// Typed getters; the parser already checked the syntax, so these cannot fail.
long long args_int(const Args *a, const char *name);
double args_float(const Args *a, const char *name);
int args_bool(const Args *a, const char *name);
// Values of an ARG_LIST flag.
int args_list(const Args *a, const char *name, char ***values);

// Print the flags of a command (for --help) to f: required ones marked, then the TRL /
// Transformers spellings accepted for them.
void args_print_help(FILE *f, const char *command, const char *summary, const ArgSpec *specs);

// A numeric value against a spec's interval: 1 inside (or no interval), 0 outside. The interval
// as text for messages ("an integer >= 1", "a number in (0, 1]") goes to what.
int args_in_range(const ArgSpec *s, double v, char *what, size_t cap);

// Levenshtein distance, used for "did you mean".
int args_edit_distance(const char *a, const char *b);

#endif
