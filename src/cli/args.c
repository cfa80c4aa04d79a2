// args.c: flag parsing, config files (JSON / YAML), TRL aliases and unsupported-flag handling.
#include "args.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "../core/log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <yaml.h>

static const ArgSpec common_specs[] = {
    {"config", ARG_STR, NULL, "JSON or YAML file whose keys are flag names (the command line wins)"},
    {"threads", ARG_INT, NULL, "CPU threads (default: OMP_NUM_THREADS, else all cores)", "[1,inf)"},
    {"dtype", ARG_STR, NULL, "weight storage: float32 | bfloat16 | q8_0 (q8_0: frozen models only; compute stays fp32 on CPU)"},
    {"device", ARG_STR, "cpu", "backend: cpu | ref (scalar reference) | cuda"},
    {"log_level", ARG_STR, "info", "error | warning | info | debug"},
    {"seed", ARG_INT, "42", "random seed (numpy's range, as transformers' set_seed)", "[0,4294967295]"},
    {"max_memory", ARG_STR, NULL, "memory budget for the process, e.g. 8GiB (default: what the machine has available)"},
    {"report_memory", ARG_BOOL, "false", "print the peak resident memory (VmHWM) on stderr when the command ends"},
    {"help", ARG_BOOL, "false", "print the flags of this command"},
    {NULL},
};

// TRL / Transformers spellings of still's flags.
static const struct { const char *alias, *name; } aliases[] = {
    {"model_name_or_path", "model"},
    {"dataset_name", "dataset"},
    {"train_file", "dataset"},
    {"teacher_model_name_or_path", "teacher"},
    {"torch_dtype", "dtype"},
    {"num_threads", "threads"},
};

// Flags users bring from TRL / Transformers that still does not implement. IGNORE: harmless to
// drop (one line says why). REFUSE: changes what is computed, so a value other than the neutral
// one is refused as "not supported yet".
typedef enum { UNSUP_IGNORE, UNSUP_REFUSE } UnsupKind;
static const struct {
    const char *name;
    UnsupKind kind;
    const char *neutral;  // value accepted silently for REFUSE flags (NULL: none)
    const char *why;
} unsupported[] = {
    {"gradient_checkpointing", UNSUP_IGNORE, NULL, "a training flag: nothing is recomputed outside training"},
    {"report_to", UNSUP_IGNORE, NULL, "metrics go to output_dir/metrics.jsonl"},
    {"logging_dir", UNSUP_IGNORE, NULL, "metrics go to output_dir/metrics.jsonl"},
    {"run_name", UNSUP_IGNORE, NULL, "runs are named by their output_dir"},
    {"bf16", UNSUP_IGNORE, NULL, "CPU computes in fp32; use --dtype for weight storage"},
    {"fp16", UNSUP_IGNORE, NULL, "CPU computes in fp32; use --dtype for weight storage"},
    {"tf32", UNSUP_IGNORE, NULL, "no effect on this backend"},
    {"dataloader_num_workers", UNSUP_IGNORE, NULL, "data is tokenised once before training"},
    {"dataloader_pin_memory", UNSUP_IGNORE, NULL, "no effect on this backend"},
    {"dataset_num_proc", UNSUP_IGNORE, NULL, "data is tokenised once before training"},
    {"dataset_train_split", UNSUP_IGNORE, NULL, "datasets are local JSONL files with one split each"},
    {"dataset_test_split", UNSUP_IGNORE, NULL, "use --eval_dataset for an evaluation file"},
    {"ddp_find_unused_parameters", UNSUP_IGNORE, NULL, "every parameter receives a gradient"},
    {"remove_unused_columns", UNSUP_IGNORE, NULL, "extra columns are passed to reward functions"},
    {"disable_dropout", UNSUP_IGNORE, NULL, "Qwen3-family models have no dropout in still"},
    {"attn_implementation", UNSUP_IGNORE, NULL, "still has one attention implementation per backend"},
    {"trust_remote_code", UNSUP_IGNORE, NULL, "still runs no Python code from checkpoints"},
    {"overwrite_output_dir", UNSUP_IGNORE, NULL, "files in output_dir are replaced atomically"},
    {"push_to_hub", UNSUP_REFUSE, "false", "still never uploads; copy output_dir yourself"},
    {"hub_model_id", UNSUP_REFUSE, NULL, "still never uploads; copy output_dir yourself"},
    {"use_peft", UNSUP_REFUSE, "false", "a training flag; --adapter DIR applies a trained adapter"},
    {"lora_r", UNSUP_REFUSE, NULL, "a training flag; --adapter DIR applies a trained adapter"},
    {"lora_alpha", UNSUP_REFUSE, NULL, "a training flag; --adapter DIR applies a trained adapter"},
    {"lora_dropout", UNSUP_REFUSE, NULL, "a training flag; --adapter DIR applies a trained adapter"},
    {"lora_target_modules", UNSUP_REFUSE, NULL, "a training flag; --adapter DIR applies a trained adapter"},
    {"load_in_4bit", UNSUP_REFUSE, "false", "quantised loading"},
    {"load_in_8bit", UNSUP_REFUSE, "false", "quantised loading"},
    {"deepspeed", UNSUP_REFUSE, NULL, "DeepSpeed; use mpirun with --zero_stage 1"},
    {"fsdp", UNSUP_REFUSE, NULL, "FSDP; use mpirun with --zero_stage 1"},
    {"use_vllm", UNSUP_REFUSE, "false", "vLLM; rollouts use still's static-shape engine"},
    {"use_liger_kernel", UNSUP_REFUSE, "false", "Liger kernels; loss heads are already chunked and fused"},
    {"num_beams", UNSUP_REFUSE, "1", "beam search"},
};

static const char *canonical(const char *name) {
    for (size_t i = 0; i < ARRAY_LEN(aliases); i++)
        if (!strcmp(aliases[i].alias, name)) return aliases[i].name;
    return name;
}

int args_edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    int *prev = xmalloc((m + 1) * sizeof(int)), *cur = xmalloc((m + 1) * sizeof(int));
    for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = MIN(sub, MIN(del, ins));
        }
        int *t = prev;
        prev = cur;
        cur = t;
    }
    int d = prev[m];
    free(prev);
    free(cur);
    return d;
}

static ArgValue *find_val(const Args *a, const char *name) {
    for (int i = 0; i < a->n_vals; i++)
        if (!strcmp(a->vals[i].spec->name, name)) return &a->vals[i];
    return NULL;
}

static void set_value(ArgValue *v, const char *text, int from_cli, int append) {
    if (!append || v->spec->type != ARG_LIST) {
        for (int i = 0; i < v->n_values; i++) free(v->values[i]);
        v->n_values = 0;
    }
    v->values = xrealloc(v->values, (size_t)(v->n_values + 1) * sizeof(char *));
    v->values[v->n_values++] = xstrdup(text);
    v->from_cli = from_cli;
}

static int parse_bool_text(const char *s, int *out) {
    static const char *t[] = {"true", "True", "TRUE", "1", "yes", "y"};
    static const char *f[] = {"false", "False", "FALSE", "0", "no", "n"};
    for (size_t i = 0; i < ARRAY_LEN(t); i++)
        if (!strcmp(s, t[i])) return *out = 1, 1;
    for (size_t i = 0; i < ARRAY_LEN(f); i++)
        if (!strcmp(s, f[i])) return *out = 0, 1;
    return 0;
}

// ---- value intervals ----------------------------------------------------------------------

typedef struct Interval {
    double lo, hi;        // -inf / inf: unbounded
    int lo_open, hi_open;
} Interval;

// "[a,b]", "(a,b)", ... with a, b numbers or -inf / inf. 0 when the text is not an interval.
static int parse_interval(const char *r, Interval *iv) {
    if (!r || (r[0] != '[' && r[0] != '(')) return 0;
    iv->lo_open = r[0] == '(';
    char *end;
    const char *p = r + 1;
    iv->lo = strtod(p, &end);
    if (end == p || *end != ',') return 0;
    p = end + 1;
    iv->hi = strtod(p, &end);
    if (end == p || (*end != ']' && *end != ')') || end[1] != '\0') return 0;
    iv->hi_open = *end == ')';
    return iv->lo <= iv->hi;
}

// The interval of a numeric spec; a spec without a valid one is a bug in the flag table.
static Interval spec_interval(const ArgSpec *s) {
    Interval iv;
    CHECK_MSG(parse_interval(s->range, &iv), "--%s: numeric flag without a valid range (\"%s\")", s->name,
              s->range ? s->range : "NULL");
    return iv;
}

int args_in_range(const ArgSpec *s, double v, char *what, size_t cap) {
    if (s->type != ARG_INT && s->type != ARG_FLOAT) return 1;
    Interval iv = spec_interval(s);
    const char *kind = s->type == ARG_INT ? "an integer" : "a number";
    // integers are read into an int unless the interval says more (--seed)
    double lo = s->type == ARG_INT && isinf(iv.lo) ? INT_MIN : iv.lo, hi = s->type == ARG_INT && isinf(iv.hi) ? INT_MAX : iv.hi;
    if (what) {
        if (isinf(lo) && isinf(hi)) snprintf(what, cap, "%s", kind);
        else if (isinf(iv.hi) && !(v > hi)) snprintf(what, cap, "%s %s %.15g", kind, iv.lo_open ? ">" : ">=", iv.lo);
        else if (isinf(iv.lo) && !(v < lo)) snprintf(what, cap, "%s %s %.15g", kind, iv.hi_open ? "<" : "<=", iv.hi);
        else snprintf(what, cap, "%s in %c%.15g, %.15g%c", kind, iv.lo_open && !isinf(iv.lo) ? '(' : '[', lo, hi,
                      iv.hi_open && !isinf(iv.hi) ? ')' : ']');
    }
    if (v < lo || (iv.lo_open && v == iv.lo)) return 0;  // INT_MIN / INT_MAX for an infinite end are closed
    if (v > hi || (iv.hi_open && v == iv.hi)) return 0;
    return 1;
}

static Status check_range(const ArgSpec *sp, const char *text, double v, const char *where, Err *e) {
    char what[128];
    if (args_in_range(sp, v, what, sizeof what)) return ST_OK;
    return err_set(e, ST_EINVAL, "%s--%s %s is out of range: expected %s", where, sp->name, text, what);
}

static Status check_syntax(const ArgSpec *sp, const char *text, const char *where, Err *e) {
    char *end;
    errno = 0;
    switch (sp->type) {
    case ARG_INT: {
        long long v = strtoll(text, &end, 10);
        if (*text == '\0' || *end != '\0' || errno)
            return err_set(e, ST_EINVAL, "%s--%s expects an integer, got \"%s\"", where, sp->name, text);
        return check_range(sp, text, (double)v, where, e);
    }
    case ARG_FLOAT: {
        double v = strtod(text, &end);
        if (*text == '\0' || *end != '\0' || errno || !isfinite(v))
            return err_set(e, ST_EINVAL, "%s--%s expects a number, got \"%s\"", where, sp->name, text);
        return check_range(sp, text, v, where, e);
    }
    case ARG_BOOL: {
        int b;
        if (!parse_bool_text(text, &b))
            return err_set(e, ST_EINVAL, "%s--%s expects true or false, got \"%s\"", where, sp->name, text);
        break;
    }
    default: break;
    }
    return ST_OK;
}

static int unsupported_index(const char *name) {
    for (size_t i = 0; i < ARRAY_LEN(unsupported); i++)
        if (!strcmp(unsupported[i].name, name)) return (int)i;
    return -1;
}

// Handle a recognised-but-unsupported flag: ST_OK (ignored, logged) or an error.
static Status handle_unsupported(int idx, const char *value, Err *e) {
    if (unsupported[idx].kind == UNSUP_IGNORE) {
        log_info("ignoring --%s: %s", unsupported[idx].name, unsupported[idx].why);
        return ST_OK;
    }
    const char *neutral = unsupported[idx].neutral;
    if (neutral && value) {
        int b1, b2;
        if (!strcmp(value, neutral) || (parse_bool_text(value, &b1) && parse_bool_text(neutral, &b2) && b1 == b2))
            return ST_OK;
    }
    return err_set(e, ST_EUNSUPPORTED, "--%s is not supported yet (%s)", unsupported[idx].name, unsupported[idx].why);
}

static Status unknown_flag(const Args *a, const char *name, const char *where, Err *e) {
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < a->n_vals; i++) {
        int d = args_edit_distance(name, a->vals[i].spec->name);
        if (d < best_d) best_d = d, best = a->vals[i].spec->name;
    }
    if (best && best_d <= MAX(2, (int)strlen(name) / 3))
        return err_set(e, ST_EINVAL, "%sunknown flag --%s for 'still %s'; did you mean --%s?", where, name, a->command, best);
    return err_set(e, ST_EINVAL, "%sunknown flag --%s for 'still %s' (see still %s --help)", where, name, a->command, a->command);
}

// Apply one name=value pair (from the config file or the command line). value NULL = bare flag.
static Status apply(Args *a, const char *raw_name, const char *value, int from_cli, const char *where, Err *e) {
    char name[256];
    snprintf(name, sizeof name, "%s", raw_name);
    for (char *p = name; *p; p++)
        if (*p == '-') *p = '_';
    int negated = 0;
    const char *cname = canonical(name);
    ArgValue *v = find_val(a, cname);
    if (!v && !strncmp(name, "no_", 3)) {
        ArgValue *pv = find_val(a, canonical(name + 3));
        if (pv && pv->spec->type == ARG_BOOL) v = pv, negated = 1;
    }
    if (!v) {
        int u = unsupported_index(name);
        if (u >= 0) return handle_unsupported(u, value, e);
        return unknown_flag(a, name, where, e);
    }
    if (v->spec->type == ARG_BOOL) {
        if (negated) {
            if (value) return err_set(e, ST_EINVAL, "%s--%s takes no value", where, name);
            set_value(v, "false", from_cli, 0);
            return ST_OK;
        }
        int b = 1;
        if (value && !parse_bool_text(value, &b))
            return err_set(e, ST_EINVAL, "%s--%s expects true or false, got \"%s\"", where, v->spec->name, value);
        set_value(v, b ? "true" : "false", from_cli, 0);
        return ST_OK;
    }
    if (!value) return err_set(e, ST_EINVAL, "%s--%s needs a value", where, v->spec->name);
    TRY(check_syntax(v->spec, value, where, e));
    // Repeated list flags append within one source; the command line replaces the config file.
    int append = v->n_values > 0 && v->from_cli == from_cli;
    set_value(v, value, from_cli, append);
    return ST_OK;
}

// ---- config files -----------------------------------------------------------------------

static char *json_scalar_text(const cJSON *it) {
    if (cJSON_IsString(it)) return xstrdup(it->valuestring);
    if (cJSON_IsBool(it)) return xstrdup(cJSON_IsTrue(it) ? "true" : "false");
    if (cJSON_IsNumber(it)) {
        char buf[64];
        double d = it->valuedouble;
        if (d == floor(d) && fabs(d) < 1e15)
            snprintf(buf, sizeof buf, "%lld", (long long)d);
        else
            snprintf(buf, sizeof buf, "%.17g", d);
        return xstrdup(buf);
    }
    return cJSON_PrintUnformatted(it);  // objects: passed through as JSON text
}

static Status apply_json_config(Args *a, const char *path, const char *text, size_t len, Err *e) {
    cJSON *root;
    TRY(json_parse_text(text, len, path, &root, e));
    Status st = ST_OK;
    if (!cJSON_IsObject(root)) {
        st = err_set(e, ST_EINVAL, "%s: a config file must be an object of flag names", path);
        goto done;
    }
    char where[512];
    snprintf(where, sizeof where, "%s: ", path);
    for (cJSON *it = root->child; it && st == ST_OK; it = it->next) {
        if (cJSON_IsNull(it)) continue;
        if (cJSON_IsArray(it)) {
            for (cJSON *x = it->child; x && st == ST_OK; x = x->next) {
                char *t = json_scalar_text(x);
                st = apply(a, it->string, t, 0, where, e);
                free(t);
            }
            continue;
        }
        char *t = json_scalar_text(it);
        st = apply(a, it->string, t, 0, where, e);
        free(t);
    }
done:
    cJSON_Delete(root);
    return st;
}

// YAML: a flat mapping of scalars (and sequences of scalars for list flags).
static Status apply_yaml_config(Args *a, const char *path, const char *text, size_t len, Err *e) {
    yaml_parser_t parser;
    yaml_event_t ev;
    if (!yaml_parser_initialize(&parser)) return err_set(e, ST_EINVAL, "%s: cannot start YAML parser", path);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    Status st = ST_OK;
    int depth = 0, in_seq = 0;
    char *key = NULL;
    char where[512];
    snprintf(where, sizeof where, "%s: ", path);
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            st = err_set(e, ST_EINVAL, "%s: invalid YAML at line %zu: %s", path, parser.problem_mark.line + 1,
                         parser.problem ? parser.problem : "?");
            break;
        }
        yaml_event_type_t type = ev.type;
        if (type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        size_t line = ev.start_mark.line + 1;
        if (type == YAML_MAPPING_START_EVENT) {
            depth++;
            if (depth > 1) st = err_set(e, ST_EINVAL, "%s:%zu: nested mappings are not flag values", path, line);
        } else if (type == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (type == YAML_SEQUENCE_START_EVENT) {
            if (!key || in_seq) st = err_set(e, ST_EINVAL, "%s:%zu: a list must be the value of a flag", path, line);
            in_seq = 1;
        } else if (type == YAML_SEQUENCE_END_EVENT) {
            in_seq = 0;
            free(key);
            key = NULL;
        } else if (type == YAML_SCALAR_EVENT) {
            const char *s = (const char *)ev.data.scalar.value;
            if (depth != 1) {
                st = err_set(e, ST_EINVAL, "%s:%zu: a config file must be a mapping of flag names", path, line);
            } else if (!key) {
                key = xstrdup(s);
            } else {
                int is_null = ev.data.scalar.plain_implicit && (!strcmp(s, "null") || !strcmp(s, "~") || !*s);
                if (!is_null) {
                    char lw[560];
                    snprintf(lw, sizeof lw, "%s:%zu: ", path, line);
                    st = apply(a, key, s, 0, lw, e);
                }
                if (!in_seq) {
                    free(key);
                    key = NULL;
                }
            }
        } else if (type == YAML_ALIAS_EVENT) {
            st = err_set(e, ST_EINVAL, "%s:%zu: YAML aliases are not supported in config files", path, line);
        }
        yaml_event_delete(&ev);
        if (st != ST_OK) break;
    }
    free(key);
    yaml_parser_delete(&parser);
    return st;
}

static Status apply_config_file(Args *a, const char *path, Err *e) {
    char *text;
    size_t len;
    TRY(file_read_all(path, &text, &len, e));
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i])) i++;
    Status st = (i < len && text[i] == '{') ? apply_json_config(a, path, text, len, e)
                                            : apply_yaml_config(a, path, text, len, e);
    free(text);
    return st;
}

// ---- main entry -----------------------------------------------------------------------

Status args_parse(Args *a, const char *command, const ArgSpec *specs, int argc, char **argv, Err *e) {
    memset(a, 0, sizeof *a);
    a->command = command;
    int n = 0;
    for (const ArgSpec *s = specs; s && s->name; s++) n++;
    for (const ArgSpec *s = common_specs; s->name; s++) n++;
    a->vals = xcalloc((size_t)n, sizeof(ArgValue));
    for (const ArgSpec *s = specs; s && s->name; s++) a->vals[a->n_vals++].spec = s;
    for (const ArgSpec *s = common_specs; s->name; s++) {
        int dup = 0;
        for (int i = 0; i < a->n_vals; i++)
            if (!strcmp(a->vals[i].spec->name, s->name)) dup = 1;
        if (!dup) a->vals[a->n_vals++].spec = s;
    }
    for (int i = 0; i < a->n_vals; i++) {  // the table itself: every numeric flag bounded, its default inside
        const ArgSpec *s = a->vals[i].spec;
        if (s->type != ARG_INT && s->type != ARG_FLOAT) continue;
        spec_interval(s);
        CHECK_MSG(!s->def || args_in_range(s, strtod(s->def, NULL), NULL, 0), "--%s: default %s outside %s", s->name,
                  s->def, s->range);
    }
    // Pass 1: find --config so the file applies first and the command line wins.
    const char *config = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9)) config = argv[i] + 9;
    }
    if (config) TRY(apply_config_file(a, config, e));
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            a->positional = xrealloc(a->positional, (size_t)(a->n_positional + 1) * sizeof(char *));
            a->positional[a->n_positional++] = xstrdup(arg);
            continue;
        }
        char name[256];
        const char *value = NULL;
        const char *eq = strchr(arg + 2, '=');
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - arg - 2), arg + 2);
            value = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg + 2);
        }
        for (char *p = name; *p; p++)
            if (*p == '-') *p = '_';
        if (!strcmp(name, "config")) {
            if (!eq) i++;
            continue;
        }
        const char *cname = canonical(name);
        ArgValue *v = find_val(a, cname);
        int takes_value;
        if (v) {
            takes_value = v->spec->type != ARG_BOOL;
        } else if (!strncmp(name, "no_", 3) && find_val(a, canonical(name + 3))) {
            takes_value = 0;
        } else {
            int u = unsupported_index(name);
            takes_value = u >= 0;  // unsupported flags may carry a value
            if (u >= 0 && !eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2) == 0) takes_value = 0;
        }
        if (!eq) {
            if (takes_value) {
                if (i + 1 >= argc) return err_set(e, ST_EINVAL, "--%s needs a value", name);
                value = argv[++i];
            } else if (v && v->spec->type == ARG_BOOL && i + 1 < argc) {
                int b;
                if (parse_bool_text(argv[i + 1], &b)) value = argv[++i];
            }
        }
        TRY(apply(a, name, value, 1, "", e));
        // a list flag takes every following word up to the next flag (argparse's nargs="+")
        while (!eq && v && v->spec->type == ARG_LIST && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
            TRY(apply(a, name, argv[++i], 1, "", e));
    }
    return ST_OK;
}

void args_free(Args *a) {
    for (int i = 0; i < a->n_vals; i++) {
        for (int j = 0; j < a->vals[i].n_values; j++) free(a->vals[i].values[j]);
        free(a->vals[i].values);
    }
    free(a->vals);
    for (int i = 0; i < a->n_positional; i++) free(a->positional[i]);
    free(a->positional);
    memset(a, 0, sizeof *a);
}

int args_is_set(const Args *a, const char *name) {
    ArgValue *v = find_val(a, name);
    CHECK_MSG(v, "flag --%s is not declared for '%s'", name, a->command);
    return v->n_values > 0;
}

const char *args_str(const Args *a, const char *name) {
    ArgValue *v = find_val(a, name);
    CHECK_MSG(v, "flag --%s is not declared for '%s'", name, a->command);
    if (v->n_values > 0) return v->values[v->n_values - 1];
    return v->spec->def;
}

long long args_int(const Args *a, const char *name) {
    const char *s = args_str(a, name);
    return s ? strtoll(s, NULL, 10) : 0;
}

double args_float(const Args *a, const char *name) {
    const char *s = args_str(a, name);
    return s ? strtod(s, NULL) : 0.0;
}

int args_bool(const Args *a, const char *name) {
    const char *s = args_str(a, name);
    int b = 0;
    if (s) parse_bool_text(s, &b);
    return b;
}

int args_list(const Args *a, const char *name, char ***values) {
    ArgValue *v = find_val(a, name);
    CHECK_MSG(v, "flag --%s is not declared for '%s'", name, a->command);
    *values = v->values;
    return v->n_values;
}

void args_print_help(FILE *f, const char *command, const char *summary, const ArgSpec *specs) {
    fprintf(f, "usage: still %s [flags]\n%s\n\nflags:\n", command, summary);
    for (int pass = 0; pass < 2; pass++) {
        const ArgSpec *s = pass == 0 ? specs : common_specs;
        if (pass == 1) fprintf(f, "\ncommon flags:\n");
        for (; s && s->name; s++) {
            static const char *tn[] = {"TEXT", "N", "X", "[true|false]", "VALUE (repeatable)"};
            size_t rl = strlen(ARG_REQUIRED);
            int req = s->help && !strncmp(s->help, ARG_REQUIRED, rl);
            fprintf(f, "  --%s %s%s%s%s\n      %s", s->name, tn[s->type], s->range ? " in " : "", s->range ? s->range : "",
                    req ? "  (required)" : "", req ? s->help + rl : s->help);
            if (s->def) fprintf(f, " (default: %s)", s->def);
            fputc('\n', f);
        }
    }
    int any = 0;
    for (size_t i = 0; i < ARRAY_LEN(aliases); i++) {
        int here = 0;
        for (const ArgSpec *s = specs; s && s->name; s++) here |= !strcmp(s->name, aliases[i].name);
        for (const ArgSpec *s = common_specs; s->name; s++) here |= !strcmp(s->name, aliases[i].name);
        if (!here) continue;
        if (!any++) fprintf(f, "\nTRL / Transformers names accepted:\n");
        fprintf(f, "  --%-28s = --%s\n", aliases[i].alias, aliases[i].name);
    }
    fprintf(f, "\nFlags are written with underscores; --flag-name also works. Booleans: --x, --x true|false, --no_x.\n");
}
