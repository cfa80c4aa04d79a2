// cli_common.c: shared command plumbing.
#include "cli_common.h"

#include "../model/lora.h"
#include "../train/tp.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/hf_cache.h"
#include "../core/log.h"
#include "../core/meminfo.h"

#include <ctype.h>
#include <math.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <strings.h>

// --report_memory: the command's name for the line printed at exit. An atexit handler takes no
// argument, so the name is kept here, set once per process before the command runs.
static const char *g_report_command;

static void report_memory(void) {
    fprintf(stderr, "still %s: peak RSS %.1f MiB (VmHWM %zu bytes)\n", g_report_command, mem_peak_rss() / 1048576.0,
            mem_peak_rss());
}

int cli_parse(Args *a, const char *command, const char *summary, const ArgSpec *specs, int argc, char **argv,
              int *done) {
    Err e = {0};
    *done = 0;
    Status st = args_parse(a, command, specs, argc, argv, &e);
    if (st != ST_OK) {
        fprintf(stderr, "still %s: %s\n", command, e.msg);
        args_free(a);
        return 2;
    }
    if (args_bool(a, "help")) {
        args_print_help(stdout, command, summary, specs);
        args_free(a);
        *done = 1;
        return 0;
    }
    if (args_bool(a, "report_memory") && !g_report_command) {
        g_report_command = command;
        atexit(report_memory);
    }
    const char *lvl = args_str(a, "log_level");
    if (!strcmp(lvl, "error")) log_set_level(LOG_ERROR);
    else if (!strcmp(lvl, "warning") || !strcmp(lvl, "warn")) log_set_level(LOG_WARN);
    else if (!strcmp(lvl, "debug")) log_set_level(LOG_DEBUG);
    else if (!strcmp(lvl, "info")) log_set_level(LOG_INFO);
    else {
        fprintf(stderr, "still %s: --log_level %s: expected error, warning, info or debug\n", command, lvl);
        args_free(a);
        return 2;
    }
    return 0;
}

int cli_run(const char *command, const char *summary, const ArgSpec *specs, int argc, char **argv, CliRunFn run) {
    Args a;
    int done;
    int rc = cli_parse(&a, command, summary, specs, argc, argv, &done);
    if (rc || done) return rc;
    Err e = {0};
    Status st = run(&a, &e);
    args_free(&a);
    return st == ST_OK ? 0 : cli_fail(command, &e);
}

int cli_fail(const char *command, const Err *e) {
    if (e->code == ST_EINTR) {  // stopped by SIGINT or SIGTERM after saving: not an error; 130 for both
        fprintf(stderr, "still %s: %s\n", command, e->msg[0] ? e->msg : status_name(e->code));
        return 128 + SIGINT;
    }
    if (e->code == ST_EUSAGE) {  // printed and counted as a flag error
        fprintf(stderr, "still %s: %s\n", command, e->msg[0] ? e->msg : status_name(e->code));
        return 2;
    }
    fprintf(stderr, "still %s: error: %s\n", command, e->msg[0] ? e->msg : status_name(e->code));
    return e->code == ST_EUNSUPPORTED ? 3 : 1;
}

Status cli_max_memory(const Args *a, size_t *out, Err *e) {
    *out = 0;
    const char *mm = args_str(a, "max_memory");
    if (mm && mem_parse_size(mm, out) != 0)
        return err_set(e, ST_EINVAL, "--max_memory %s: expected a size such as 8GiB, 512MiB or a number of bytes", mm);
    return ST_OK;
}

void cli_apply_moe(const Args *a, Model *m) { m->moe_capacity_factor = args_float(a, "moe_capacity_factor"); }

Status cli_apply_adapter(const Args *a, Model *m, Err *e) {
    const char *dir = args_str(a, "adapter");
    if (!dir) return ST_OK;
    TRY(tp_lora_load(m, dir, e));  // a part of a model (tensor parallel): its part of the adapter
    m->lora->cfg.dropout = 0;  // applied, never trained: no dropout (PEFT in eval mode), even for --grads
    log_info("adapter %s: LoRA r %d, alpha %g%s, %d tensors", dir, m->lora->cfg.r, m->lora->cfg.alpha,
             m->lora->cfg.use_rslora ? " (rslora)" : "", m->lora->tt.n);
    return ST_OK;
}

Status cli_backend(const Args *a, Backend **out, Err *e) {
    size_t max_memory;
    TRY(cli_max_memory(a, &max_memory, e));
    TRY(backend_create(args_str(a, "device"), (int)args_int(a, "threads"), out, e));
    (*out)->max_memory = max_memory;
    return ST_OK;
}

Status cli_model_dir(const Args *a, const char *flag, char **dir, Err *e) {
    const char *model = args_str(a, flag);
    if (!model) return err_set(e, ST_EINVAL, "--%s is required (a model directory or a hub id in the local cache)", flag);
    const char *rev = NULL;
    if (args_is_set(a, "revision")) rev = args_str(a, "revision");
    return hf_resolve_model(model, rev, dir, e);
}

Status cli_dtype_flag(const Args *a, const char *flag, int *out, Err *e) {
    *out = -1;
    const char *s = args_str(a, flag);
    if (!s || !strcmp(s, "auto")) return ST_OK;
    DType d;
    if (!strcasecmp(s, "q8_0")) d = DT_Q8_0;
    else if (dtype_parse(s, &d) != 0 || d == DT_F16)
        return err_set(e, ST_EINVAL, "--%s %s: expected float32, bfloat16 or q8_0", flag, s);
    *out = (int)d;
    return ST_OK;
}

Status cli_save_dtype_flag(const Args *a, const char *flag, int *out, Err *e) {
    TRY(cli_dtype_flag(a, flag, out, e));
    if (*out == DT_Q8_0)
        return err_set(e, ST_EINVAL, "--%s q8_0: checkpoints are written as float32 or bfloat16 (q8_0 is a storage for "
                       "running a model: --dtype q8_0 on generate, chat, eval, logits)", flag);
    return ST_OK;
}

Status cli_dtype(const Args *a, int *out, Err *e) { return cli_dtype_flag(a, "dtype", out, e); }

Status cli_parse_ids(const char *text, const char *what, int vocab_size, int32_t **ids, int *n, Err *e) {
    int cap = 16, cnt = 0;
    int32_t *v = xmalloc((size_t)cap * sizeof(int32_t));
    const char *p = text;
    while (*p) {
        while (*p && (isspace((unsigned char)*p) || *p == ',')) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || (*end && !isspace((unsigned char)*end) && *end != ',')) {
            int len = 0;
            while (p[len] && !isspace((unsigned char)p[len]) && p[len] != ',') len++;
            free(v);
            return err_set(e, ST_EINVAL, "%s: \"%.*s\" is not a token id", what, len, p);
        }
        if (x < 0 || (vocab_size > 0 && x >= vocab_size)) {
            free(v);
            return err_set(e, ST_EINVAL, "%s: token id %lld is outside the vocabulary [0, %d)", what, x, vocab_size);
        }
        if (cnt == cap) v = xrealloc(v, (size_t)(cap *= 2) * sizeof(int32_t));
        v[cnt++] = (int32_t)x;
        p = end;
    }
    if (cnt == 0) {
        free(v);
        return err_set(e, ST_EINVAL, "%s: no token ids given", what);
    }
    *ids = v;
    *n = cnt;
    return ST_OK;
}

// A mesh size from its flag, else its environment variable (TP_SIZE, FSDP_SIZE), else 0.
static Status mesh_size(const Args *a, const char *flag, const char *env, int *out, Err *e) {
    *out = 0;
    if (args_is_set(a, flag)) return *out = (int)args_int(a, flag), ST_OK;
    const char *s = getenv(env);
    if (!s || !*s) return ST_OK;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 65536) return err_set(e, ST_EUSAGE, "%s=%s: expected a positive integer", env, s);
    *out = (int)v;
    return ST_OK;
}

Status cli_dist(const Args *a, Dist *d, int *zero_stage, Err *e) {
    dist_single(d);
    *zero_stage = (int)args_int(a, "zero_stage");
    if (*zero_stage == 2)
        return err_set(e, ST_EUNSUPPORTED, "--zero_stage 2 is not supported (0, 1 or 3)");
    double timeout = args_float(a, "ddp_timeout");
    if (!(timeout > 0)) return err_set(e, ST_EINVAL, "--ddp_timeout must be a positive number of seconds");
    int tp, fsdp;
    TRY(mesh_size(a, "tp_size", "TP_SIZE", &tp, e));
    TRY(mesh_size(a, "fsdp_size", "FSDP_SIZE", &fsdp, e));
    if (fsdp > 1 && *zero_stage == 1)
        return err_set(e, ST_EUSAGE, "--fsdp_size %d shards parameters (ZeRO-3); it does not go with --zero_stage 1",
                       fsdp);
    TRY(dist_init(d, timeout, e));
    if (tp < 1) tp = 1;
    if (fsdp > 1) *zero_stage = 3;
    if (fsdp < 1) fsdp = *zero_stage == 3 ? MAX(1, d->world / tp) : 1;
    if (tp == 1 && fsdp == 1 && *zero_stage != 3) return ST_OK;
    return dist_mesh_init(d, tp, fsdp, e);
}

Status cli_train_done(const char *command, Dist *d, Status st, const TrainResult *res, const Err *e) {
    if (st == ST_OK && d->rank == 0) cli_print_train_result(res);
    if (st != ST_OK && d->world > 1) cli_dist_finish(command, d, st, e);
    dist_finalize(d);
    return st;
}

Status cli_dist_no_ep(const Args *a, const char *command, const char *why, Err *e) {
    int P = (int)args_int(a, "ep_size");
    if (P <= 1) return ST_OK;
    return err_set(e, ST_EUSAGE, "--ep_size %d: expert parallelism trains with still sft, dpo, kto, grpo, rloo and "
                                 "distill, not still %s (%s; docs/distributed.md)", P, command, why);
}

int cli_dist_finish(const char *command, Dist *d, Status st, const Err *e) {
    int rc = st == ST_OK ? 0 : cli_fail(command, e);
    if (rc && d->world > 1 && st != ST_EINTR) dist_abort(d, rc);  // interrupted: every rank stopped together
    dist_finalize(d);
    return rc;
}

// Numbers rounded to 9 significant digits, so cJSON prints them with at most 9 (integers stay).
static void round_numbers(cJSON *o) {
    for (cJSON *it = o ? o->child : NULL; it; it = it->next) {
        if (cJSON_IsNumber(it) && isfinite(it->valuedouble) && it->valuedouble != floor(it->valuedouble)) {
            char buf[32];
            snprintf(buf, sizeof buf, "%.9g", it->valuedouble);
            cJSON_SetNumberValue(it, strtod(buf, NULL));
        } else if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
            round_numbers(it);
        }
    }
}

char *cli_json_line(cJSON *o) {
    round_numbers(o);
    return cJSON_PrintUnformatted(o);
}

void cli_print_json(cJSON *o) {
    char *s = cli_json_line(o);
    printf("%s\n", s);
    fflush(stdout);
    free(s);
}

void cli_print_train_result(const TrainResult *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "steps", r->steps);
    cJSON_AddNumberToObject(o, "steps_run", r->steps_run);
    cJSON_AddNumberToObject(o, "loss", r->last_loss);
    cJSON_AddNumberToObject(o, "train_loss", r->train_loss);
    if (isfinite(r->eval_loss)) cJSON_AddNumberToObject(o, "eval_loss", r->eval_loss);
    cJSON_AddNumberToObject(o, "train_seconds", r->train_seconds - r->save_seconds);
    cJSON_AddNumberToObject(o, "save_seconds", r->save_seconds);
    cJSON_AddNumberToObject(o, "tokens_per_second", r->tokens_per_second);
    if (r->skipped_steps) cJSON_AddNumberToObject(o, "skipped_steps", r->skipped_steps);
    cli_print_json(o);
    cJSON_Delete(o);
}

Status cli_check_sampling(int do_sample, double temperature, int num_return_sequences, Err *e) {
    if (do_sample && !(temperature > 0))
        return err_set(e, ST_EUSAGE, "--temperature %g: must be > 0 when sampling (for greedy decoding pass --do_sample "
                                     "false)", temperature);
    if (!do_sample && num_return_sequences > 1)
        return err_set(e, ST_EUSAGE, "--num_return_sequences %d needs sampling (--do_sample true): greedy decoding "
                                     "gives one sequence per prompt", num_return_sequences);
    return ST_OK;
}
