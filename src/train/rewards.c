// rewards.c: the built-in reward functions and the cmd: protocol (one long-lived child process
// per external reward, JSON lines in, one number per line out).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "rewards.h"

#include "../core/alloc.h"
#include "reward_model.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pcre2.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// The think / answer format reward of the R1 recipes (re.match with DOTALL).
static const char FORMAT_PATTERN[] = "^<think>\\n.*?\\n</think>\\n<answer>\\n.*?\\n</answer>$";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ---- exact_match -------------------------------------------------------------------------

// Content of the last \boxed{...} with balanced braces, or NULL.
static char *last_boxed(const char *text) {
    const char *best = NULL;
    size_t best_len = 0;
    for (const char *p = strstr(text, "\\boxed"); p; p = strstr(p + 1, "\\boxed")) {
        const char *q = p + 6;
        while (*q == ' ') q++;
        if (*q != '{') continue;
        int depth = 0;
        const char *s = q;
        for (; *s; s++) {
            if (*s == '{') depth++;
            else if (*s == '}' && --depth == 0) break;
        }
        if (!*s) continue;  // unbalanced: not an answer
        best = q + 1, best_len = (size_t)(s - q - 1);
    }
    return best ? xstrndup(best, best_len) : NULL;
}

// The last number: -?digits with commas between digit groups, optionally .digits.
static char *last_number(const char *text) {
    const char *best = NULL;
    size_t best_len = 0;
    for (const char *p = text; *p;) {
        if (!isdigit((unsigned char)*p)) {
            p++;
            continue;
        }
        const char *s = p > text && p[-1] == '-' ? p - 1 : p;
        const char *q = p;
        for (;;) {
            while (isdigit((unsigned char)*q)) q++;
            if (*q == ',' && isdigit((unsigned char)q[1])) {
                q++;
                continue;
            }
            break;
        }
        if (*q == '.' && isdigit((unsigned char)q[1])) {
            q++;
            while (isdigit((unsigned char)*q)) q++;
        }
        best = s, best_len = (size_t)(q - s);
        p = q;
    }
    return best ? xstrndup(best, best_len) : NULL;
}

char *reward_final_answer(const char *text) {
    char *b = last_boxed(text);
    return b ? b : last_number(text);
}

// Trimmed copy; for numbers also without "$", "," and a trailing ".".
static char *normalise(const char *s, int numeric) {
    StrBuf sb = {0};
    for (const char *p = s; *p; p++) {
        if (numeric && (*p == '$' || *p == ',' || isspace((unsigned char)*p))) continue;
        sb_putc(&sb, *p);
    }
    char *out = sb.len ? sb_take(&sb) : xstrdup("");
    size_t n = strlen(out);
    if (!numeric) {
        size_t a = 0;
        while (a < n && isspace((unsigned char)out[a])) a++;
        while (n > a && isspace((unsigned char)out[n - 1])) n--;
        memmove(out, out + a, n - a);
        out[n - a] = 0;
    } else if (n > 1 && out[n - 1] == '.') {
        out[n - 1] = 0;
    }
    return out;
}

static int parse_number(const char *s, double *v) {
    char *t = normalise(s, 1), *end;
    int ok = 0;
    if (*t) {
        errno = 0;
        *v = strtod(t, &end);
        ok = *end == 0 && errno == 0 && isfinite(*v);
    }
    free(t);
    return ok;
}

int reward_answers_equal(const char *a, const char *b) {
    double x, y;
    if (parse_number(a, &x) && parse_number(b, &y)) return fabs(x - y) <= 1e-9 * fmax(1.0, fabs(y));
    char *ta = normalise(a, 0), *tb = normalise(b, 0);
    int eq = !strcmp(ta, tb);
    free(ta), free(tb);
    return eq;
}

// The reference answer of a dataset value: a number; a string's \boxed{} content, or what
// follows its last "####" (GSM8K), or the whole string.
static char *reference_answer(const cJSON *v) {
    if (cJSON_IsNumber(v)) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
        return xstrdup(buf);
    }
    if (!cJSON_IsString(v)) return NULL;
    char *b = last_boxed(v->valuestring);
    if (b) return b;
    const char *h = NULL;
    for (const char *p = strstr(v->valuestring, "####"); p; p = strstr(p + 4, "####")) h = p + 4;
    return xstrdup(h ? h : v->valuestring);
}

static Status exact_match(const RewardFn *f, const RewardInput *in, double *out, Err *e) {
    const cJSON *v = in->row ? cJSON_GetObjectItemCaseSensitive(in->row, f->arg) : NULL;
    if (!v || cJSON_IsNull(v)) {
        *out = NAN;  // no reference: no reward (None)
        return ST_OK;
    }
    char *ref = reference_answer(v);
    if (!ref)
        return err_set(e, ST_EINVAL, "reward %s: column \"%s\" must be a string or a number", f->spec, f->arg);
    char *ans = reward_final_answer(in->completion);
    *out = ans && reward_answers_equal(ans, ref) ? 1.0 : 0.0;
    free(ans), free(ref);
    return ST_OK;
}

// ---- regex, format, length ---------------------------------------------------------------

static Status compile_re(RewardFn *f, const char *pattern, uint32_t opts, Err *e) {
    int ec;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts | PCRE2_UTF, &ec, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return err_set(e, ST_EINVAL, "reward %s: bad regular expression at offset %zu: %s", f->spec, (size_t)off,
                       (const char *)msg);
    }
    f->re = re;
    f->md = pcre2_match_data_create_from_pattern(re, NULL);
    return ST_OK;
}

static double re_match(const RewardFn *f, const char *text) {
    int rc = pcre2_match((pcre2_code *)f->re, (PCRE2_SPTR)text, strlen(text), 0, 0, (pcre2_match_data *)f->md, NULL);
    return rc >= 0 ? 1.0 : 0.0;  // invalid UTF-8 and other errors: no match
}

static double length_reward(double target, const char *text) {
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) chars += (*p & 0xC0) != 0x80;
    return -fabs(target - (double)chars) / 100.0;
}

// ---- cmd: the external program -------------------------------------------------------------

static Status cmd_start(RewardFn *f, Err *e) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return err_set(e, ST_ERUNTIME, "reward %s: socketpair: %s", f->spec, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]), close(sv[1]);
        return err_set(e, ST_ERUNTIME, "reward %s: fork: %s", f->spec, strerror(errno));
    }
    if (pid == 0) {  // child: the socket is its stdin and stdout; stderr is shared
        if (dup2(sv[1], 0) < 0 || dup2(sv[1], 1) < 0) _exit(127);
        execl("/bin/sh", "sh", "-c", f->arg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    f->pid = pid;
    f->fd = sv[0];
    return ST_OK;
}

// How the child ended, for messages; reaps it (killing it first when still running).
static void cmd_reap(RewardFn *f, char *why, size_t n) {
    if (f->pid <= 0) {
        snprintf(why, n, "is not running");
        return;
    }
    int status = 0;
    pid_t r = 0;
    for (int i = 0; i < 50 && (r = waitpid(f->pid, &status, WNOHANG)) == 0; i++) usleep(2000);
    if (r == 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, &status, 0);
        snprintf(why, n, "closed its output and was killed");
    } else if (WIFEXITED(status)) {
        snprintf(why, n, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        snprintf(why, n, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    } else {
        snprintf(why, n, "ended");
    }
    f->pid = 0;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

static void cmd_stop(RewardFn *f) {
    if (f->pid <= 0) return;
    shutdown(f->fd, SHUT_WR);  // EOF on its stdin: a well-behaved program exits
    int status;
    pid_t r = 0;
    for (int i = 0; i < 100 && (r = waitpid(f->pid, &status, WNOHANG)) == 0; i++) usleep(5000);
    if (r == 0) {
        kill(f->pid, SIGTERM);
        for (int i = 0; i < 100 && (r = waitpid(f->pid, &status, WNOHANG)) == 0; i++) usleep(5000);
        if (r == 0) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, &status, 0);
        }
    }
    f->pid = 0;
    close(f->fd);
    f->fd = -1;
}

static char *request_line(const RewardInput *in) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", in->prompt ? in->prompt : "");
    cJSON_AddStringToObject(o, "completion", in->completion ? in->completion : "");
    cJSON *ids = cJSON_AddArrayToObject(o, "completion_ids");
    for (int t = 0; t < in->n_ids; t++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(in->ids[t]));
    cJSON_AddItemToObject(o, "columns", in->row ? cJSON_Duplicate(in->row, 1) : cJSON_CreateObject());
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

// One answer line -> value. Accepts a number, null / None / nan (-> NaN).
static int parse_answer(const char *line, double *v) {
    while (isspace((unsigned char)*line)) line++;
    size_t n = strlen(line);
    while (n && isspace((unsigned char)line[n - 1])) n--;
    if ((n == 4 && !strncmp(line, "null", 4)) || (n == 4 && !strncmp(line, "None", 4)) ||
        (n == 3 && !strncasecmp(line, "nan", 3))) {
        *v = NAN;
        return 1;
    }
    if (!n) return 0;
    char *t = xstrndup(line, n), *end;
    errno = 0;
    *v = strtod(t, &end);
    int ok = *end == 0 && errno == 0 && !isinf(*v);
    free(t);
    return ok;
}

// Score n inputs with the child: requests are written while answers are read (poll), so a
// program that answers each line as it reads it never blocks on a full pipe.
static Status cmd_score(RewardSet *rs, RewardFn *f, const RewardInput *in, int n, double *out, int stride, Err *e) {
    char why[128];
    if (f->pid <= 0) return err_set(e, ST_ERUNTIME, "reward program '%s' is not running (it failed earlier)", f->arg);
    StrBuf req = {0};
    for (int i = 0; i < n; i++) {
        char *s = request_line(&in[i]);
        sb_puts(&req, s);
        sb_putc(&req, '\n');
        free(s);
    }
    size_t sent = 0;
    int got = 0;
    Status st = ST_OK;
    double deadline = now_s() + rs->timeout_s;
    while (got < n && st == ST_OK) {
        struct pollfd pf = {.fd = f->fd, .events = POLLIN | (sent < req.len ? POLLOUT : 0)};
        double left = deadline - now_s();
        if (left <= 0) {
            kill(f->pid, SIGKILL);
            cmd_reap(f, why, sizeof why);
            st = err_set(e, ST_ERUNTIME, "reward program '%s' gave no answer within %g s (--reward_timeout) for "
                                         "completion %d of %d; it was killed", f->arg, rs->timeout_s, got + 1, n);
            break;
        }
        int pr = poll(&pf, 1, (int)ceil(MIN(left, 1e6) * 1000));
        if (pr < 0) {
            if (errno == EINTR) continue;
            st = err_set(e, ST_ERUNTIME, "reward program '%s': poll: %s", f->arg, strerror(errno));
            break;
        }
        if (pr == 0) continue;
        if ((pf.revents & POLLOUT) && sent < req.len) {
            ssize_t w = send(f->fd, req.data + sent, req.len - sent, MSG_NOSIGNAL);
            if (w > 0) sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                cmd_reap(f, why, sizeof why);
                st = err_set(e, ST_ERUNTIME, "reward program '%s' %s after answering %d of %d completions (stdin: %s)",
                             f->arg, why, got, n, strerror(errno));
                break;
            }
        }
        if (pf.revents & (POLLIN | POLLHUP | POLLERR)) {
            if (f->rlen + 4096 > f->rcap) {
                f->rcap = MAX(2 * f->rcap, f->rlen + 4096);
                f->rbuf = xrealloc(f->rbuf, f->rcap);
            }
            ssize_t r = recv(f->fd, f->rbuf + f->rlen, f->rcap - f->rlen - 1, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                cmd_reap(f, why, sizeof why);
                st = err_set(e, ST_ERUNTIME, "reward program '%s' %s after answering %d of %d completions", f->arg,
                             why, got, n);
                break;
            }
            if (r < 0) continue;
            f->rlen += (size_t)r;
            // every complete line is one answer
            size_t start = 0;
            for (size_t i = 0; i < f->rlen && got < n; i++) {
                if (f->rbuf[i] != '\n') continue;
                f->rbuf[i] = 0;
                double v;
                if (!parse_answer(f->rbuf + start, &v)) {
                    char shown[80];
                    snprintf(shown, sizeof shown, "%s", f->rbuf + start);
                    kill(f->pid, SIGKILL);
                    cmd_reap(f, why, sizeof why);
                    st = err_set(e, ST_EINVAL, "reward program '%s' answered \"%s\" for completion %d of %d: expected "
                                               "one number or null per line; it was stopped", f->arg, shown, got + 1, n);
                    break;
                }
                out[(size_t)got * stride] = v;
                got++;
                start = i + 1;
                deadline = now_s() + rs->timeout_s;
            }
            if (st != ST_OK) break;
            memmove(f->rbuf, f->rbuf + start, f->rlen - start);
            f->rlen -= start;
        }
    }
    if (st == ST_OK && f->rlen > 0) {  // more output than completions: the protocol is out of step
        kill(f->pid, SIGKILL);
        cmd_reap(f, why, sizeof why);
        st = err_set(e, ST_EINVAL, "reward program '%s' wrote more than one line per completion (%d requests); it was "
                                   "stopped", f->arg, n);
    }
    sb_free(&req);
    return st;
}

// ---- the set -------------------------------------------------------------------------------

static Status parse_spec(RewardFn *f, const char *spec, Err *e) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->spec = xstrdup(spec);
    const char *colon = strchr(spec, ':');
    size_t kl = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *arg = colon ? colon + 1 : NULL;
#define IS(k) (kl == strlen(k) && !strncmp(spec, k, kl))
    if (IS("exact_match")) {
        if (!arg || !*arg)
            return err_set(e, ST_EINVAL, "reward %s: expected exact_match:COLUMN (the dataset column with the answer)",
                           spec);
        f->kind = REWARD_EXACT_MATCH;
        f->arg = xstrdup(arg);
        f->name = xstrdup("exact_match");
    } else if (IS("regex")) {
        if (!arg || !*arg) return err_set(e, ST_EINVAL, "reward %s: expected regex:PATTERN", spec);
        f->kind = REWARD_REGEX;
        f->arg = xstrdup(arg);
        f->name = xstrdup("regex");
        TRY(compile_re(f, arg, 0, e));
    } else if (IS("length")) {
        char *end;
        f->target = arg ? strtod(arg, &end) : 0;
        if (!arg || !*arg || *end || !isfinite(f->target) || f->target < 0)
            return err_set(e, ST_EINVAL, "reward %s: expected length:TARGET, a number of characters >= 0", spec);
        f->kind = REWARD_LENGTH;
        f->arg = xstrdup(arg);
        f->name = xstrdup("length");
    } else if (IS("format")) {
        if (arg) return err_set(e, ST_EINVAL, "reward %s: format takes no argument", spec);
        f->kind = REWARD_FORMAT;
        f->name = xstrdup("format");
        TRY(compile_re(f, FORMAT_PATTERN, PCRE2_DOTALL, e));
    } else if (IS("model")) {
        if (!arg || !*arg) return err_set(e, ST_EINVAL, "reward %s: expected model:DIR (a reward model directory)", spec);
        f->kind = REWARD_MODEL;
        f->arg = xstrdup(arg);
        TRY(reward_model_check(arg, e));
        // TRL's name: the model id's last path component
        size_t n = strlen(arg);
        while (n > 1 && arg[n - 1] == '/') n--;
        const char *base = arg;
        for (size_t i = 0; i + 1 < n; i++)
            if (arg[i] == '/') base = arg + i + 1;
        f->name = xstrndup(base, n - (size_t)(base - arg));
    } else if (IS("cmd")) {
        if (!arg || !*arg) return err_set(e, ST_EINVAL, "reward %s: expected cmd:PROGRAM", spec);
        f->kind = REWARD_CMD;
        f->arg = xstrdup(arg);
        // the name: the program's file name without directories and arguments
        const char *s = arg;
        while (isspace((unsigned char)*s)) s++;
        size_t n = strcspn(s, " \t");
        const char *base = s;
        for (size_t i = 0; i < n; i++)
            if (s[i] == '/') base = s + i + 1;
        f->name = n > (size_t)(base - s) ? xstrndup(base, n - (size_t)(base - s)) : xstrdup("cmd");
        TRY(cmd_start(f, e));
    } else {
        return err_set(e, ST_EINVAL, "reward %s: unknown reward; expected exact_match:COLUMN, regex:PATTERN, "
                                     "length:TARGET, format, model:DIR or cmd:PROGRAM", spec);
    }
#undef IS
    return ST_OK;
}

Status rewards_init(RewardSet *rs, const char *const *specs, int n, const double *weights, int n_weights,
                    double timeout_s, Err *e) {
    memset(rs, 0, sizeof *rs);
    if (n <= 0) return err_set(e, ST_EINVAL, "no reward function: give --reward SPEC (e.g. exact_match:answer)");
    if (n_weights && n_weights != n)
        return err_set(e, ST_EINVAL, "--reward_weights has %d values for %d reward functions", n_weights, n);
    if (!(timeout_s > 0)) return err_set(e, ST_EINVAL, "--reward_timeout must be positive (seconds)");
    rs->fns = xcalloc((size_t)n, sizeof(RewardFn));
    rs->weights = xmalloc((size_t)n * sizeof(double));
    rs->timeout_s = timeout_s;
    for (int k = 0; k < n; k++) {
        rs->weights[k] = n_weights ? weights[k] : 1.0;
        rs->n = k + 1;
        Status st = parse_spec(&rs->fns[k], specs[k], e);
        if (st != ST_OK) {
            rewards_free(rs);
            return st;
        }
    }
    // equal names get a suffix (length, length_2, length_3, ...) so every rewards/<name>/mean is
    // distinct: the k-th function of a name is counted against the names as given
    char **given = xmalloc((size_t)n * sizeof(char *));
    for (int k = 0; k < n; k++) given[k] = xstrdup(rs->fns[k].name);
    for (int k = 1; k < n; k++) {
        int dup = 1;
        for (int j = 0; j < k; j++) dup += !strcmp(given[j], given[k]);
        if (dup > 1) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s_%d", given[k], dup);
            free(rs->fns[k].name);
            rs->fns[k].name = xstrdup(buf);
        }
    }
    for (int k = 0; k < n; k++) free(given[k]);
    free(given);
    for (int k = 0; k < n; k++) {
        char buf[300];
        snprintf(buf, sizeof buf, "rewards/%s/mean", rs->fns[k].name);
        rs->fns[k].metric_mean = xstrdup(buf);
        snprintf(buf, sizeof buf, "rewards/%s/std", rs->fns[k].name);
        rs->fns[k].metric_std = xstrdup(buf);
    }
    // a suffixed name can still meet a given one (cmd:./length_2 beside two length rewards): two
    // functions logging one metric would merge their values, so that is an error
    for (int k = 1; k < n; k++)
        for (int j = 0; j < k; j++)
            if (!strcmp(rs->fns[j].name, rs->fns[k].name)) {
                Status st = err_set(e, ST_EINVAL, "rewards %s and %s would both log the metric rewards/%s/mean; "
                                                  "every reward function needs its own name", rs->fns[j].spec,
                                    rs->fns[k].spec, rs->fns[k].name);
                rewards_free(rs);
                return st;
            }
    return ST_OK;
}

Status rewards_load_models(RewardSet *rs, struct Backend *be, int dtype, Err *e) {
    for (int k = 0; k < rs->n; k++) {
        RewardFn *f = &rs->fns[k];
        if (f->kind != REWARD_MODEL || f->model) continue;
        TRY(reward_model_open(f->arg, be, dtype, &f->model, e));
    }
    return ST_OK;
}

static int any_row_has(const cJSON *const *rows, int n_rows, const char *col) {
    for (int i = 0; i < n_rows; i++)
        if (rows[i] && cJSON_GetObjectItemCaseSensitive(rows[i], col)) return 1;
    return 0;
}

Status rewards_check_columns(const RewardSet *rs, const cJSON *const *rows, int n_rows, const char *path, Err *e) {
    for (int k = 0; k < rs->n; k++) {
        const RewardFn *f = &rs->fns[k];
        if (f->kind != REWARD_EXACT_MATCH || any_row_has(rows, n_rows, f->arg)) continue;
        StrBuf cols = {0};  // the dataset's columns: every key of any row, in order of appearance
        for (int i = 0; i < n_rows; i++) {
            const cJSON *c;
            cJSON_ArrayForEach(c, rows[i]) {
                if (!c->string || any_row_has(rows, i, c->string)) continue;
                sb_printf(&cols, "%s\"%s\"", cols.len ? ", " : "", c->string);
            }
        }
        Status st = err_set(e, ST_EINVAL, "%s: reward %s needs a column \"%s\", which the dataset does not have (its "
                                          "columns: %s)", path, f->spec, f->arg, cols.len ? cols.data : "none");
        sb_free(&cols);
        return st;
    }
    return ST_OK;
}

void rewards_free(RewardSet *rs) {
    for (int k = 0; k < rs->n; k++) {
        RewardFn *f = &rs->fns[k];
        if (f->kind == REWARD_CMD) cmd_stop(f);
        reward_model_close(f->model);
        if (f->md) pcre2_match_data_free((pcre2_match_data *)f->md);
        if (f->re) pcre2_code_free((pcre2_code *)f->re);
        free(f->spec), free(f->name), free(f->arg), free(f->rbuf), free(f->metric_mean), free(f->metric_std);
    }
    free(rs->fns);
    free(rs->weights);
    memset(rs, 0, sizeof *rs);
}

Status rewards_score(RewardSet *rs, const RewardInput *in, int n_in, double *out, Err *e) {
    int K = rs->n;
    for (int k = 0; k < K; k++) {
        RewardFn *f = &rs->fns[k];
        if (f->kind == REWARD_CMD) {
            if (n_in > 0) TRY(cmd_score(rs, f, in, n_in, out + k, K, e));
            continue;
        }
        if (f->kind == REWARD_MODEL) {
            if (!f->model) return err_set(e, ST_EINVAL, "reward %s: the model is not loaded", f->spec);
            int B = rs->model_batch_size > 0 ? rs->model_batch_size : 8;
            if (n_in > 0)
                TRY(reward_model_rewards(f->model, in, n_in, rs->chat_template_kwargs, B, rs->model_pad_to_multiple_of,
                                         out + k, K, e));
            continue;
        }
        for (int i = 0; i < n_in; i++) {
            const char *text = in[i].completion ? in[i].completion : "";
            double *o = &out[(size_t)i * K + k];
            switch (f->kind) {
            case REWARD_EXACT_MATCH: TRY(exact_match(f, &in[i], o, e)); break;
            case REWARD_REGEX:
            case REWARD_FORMAT: *o = re_match(f, text); break;
            case REWARD_LENGTH: *o = length_reward(f->target, text); break;
            case REWARD_CMD:
            case REWARD_MODEL: break;
            }
        }
    }
    return ST_OK;
}
