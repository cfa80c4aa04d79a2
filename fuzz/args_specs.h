// args_specs.h: the flag table the args fuzz targets parse against: every ArgType, a list flag,
// and names that sit close to the aliases and unsupported TRL flags args.c knows.
#ifndef STILL_FUZZ_ARGS_SPECS_H
#define STILL_FUZZ_ARGS_SPECS_H

#include "cli/args.h"

static const ArgSpec fuzz_arg_specs[] = {
    {"model", ARG_STR, NULL, "model dir"},
    {"dataset", ARG_STR, NULL, "data"},
    {"learning_rate", ARG_FLOAT, "2e-5", "lr", "[0,inf)"},
    {"max_new_tokens", ARG_INT, "16", "tokens", "[1,inf)"},
    {"packing", ARG_BOOL, "false", "pack"},
    {"do_sample", ARG_BOOL, "true", "sample"},
    {"reward", ARG_LIST, NULL, "rewards"},
    {"seed", ARG_INT, "42", "a common flag declared again", "[0,inf)"},
    {NULL, 0, NULL, NULL},
};

// Read every value back the way commands do.
static inline void fuzz_args_read_all(const Args *a) {
    for (int i = 0; i < a->n_vals; i++) {
        const ArgSpec *s = a->vals[i].spec;
        args_is_set(a, s->name);
        args_str(a, s->name);
        switch (s->type) {
        case ARG_INT: args_int(a, s->name); break;
        case ARG_FLOAT: args_float(a, s->name); break;
        case ARG_BOOL: args_bool(a, s->name); break;
        case ARG_LIST: {
            char **v;
            args_list(a, s->name, &v);
            break;
        }
        default: break;
        }
    }
}

#endif
