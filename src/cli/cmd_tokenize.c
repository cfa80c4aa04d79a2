// cmd_tokenize.c: still tokenize: text to ids, or ids to text, with a model's tokenizer.json.
#include "commands.h"

#include "args.h"

#include "../core/hf_cache.h"
#include "../core/fileio.h"
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *SUMMARY = "encode text to ids (or decode ids) with tokenizer.json";

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory holding tokenizer.json (and tokenizer_config.json), a tokenizer.json, or a hub id in the local cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"add_special_tokens", ARG_BOOL, "false", "run the post-processor (e.g. BOS for Llama 2), as transformers' add_special_tokens"},
    {"jsonl", ARG_BOOL, "false", "one JSON string per input line -> one JSON array of ids per output line (reversed with --decode)"},
    {"decode", ARG_BOOL, "false", "ids in, text out"},
    {"skip_special_tokens", ARG_BOOL, "false", "with --decode: drop special added tokens"},
    {NULL, 0, NULL, NULL},
};

typedef struct Opts {
    const Tokenizer *tok;
    int add_special, skip_special;
} Opts;

static char *read_stdin(size_t *len) {
    StrBuf sb = {0};
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) sb_append(&sb, buf, n);
    *len = sb.len;
    return sb.data ? sb.data : xstrdup("");
}

static void print_ids(const TokenIds *ids, int json) {
    StrBuf sb = {0};
    if (json) sb_putc(&sb, '[');
    for (size_t i = 0; i < ids->n; i++) sb_printf(&sb, i ? (json ? ", %d" : " %d") : "%d", ids->ids[i]);
    if (json) sb_putc(&sb, ']');
    sb_putc(&sb, '\n');
    fwrite(sb.data, 1, sb.len, stdout);
    sb_free(&sb);
}

static Status check_id(const Tokenizer *tok, double v, const char *text, size_t line, int32_t *out, Err *e) {
    if (v != (double)(long long)v) return err_set(e, ST_EINVAL, "line %zu: %s is not an integer id", line, text);
    if (v < 0 || v >= tokenizer_vocab_size(tok) || !tokenizer_id_to_token(tok, (int32_t)v))
        return err_set(e, ST_EINVAL, "line %zu: id %s is outside the vocabulary (ids 0..%d)", line, text,
                       tokenizer_vocab_size(tok) - 1);
    *out = (int32_t)v;
    return ST_OK;
}

static Status encode_plain(const Opts *o, Err *e) {
    size_t len;
    char *text = read_stdin(&len);
    TokenIds ids = {0};
    Status st = tokenizer_encode(o->tok, text, len, o->add_special, &ids, e);
    if (st == ST_OK) print_ids(&ids, 0);
    else err_prefix(e, "stdin: ");
    tokenizer_ids_free(&ids);
    free(text);
    return st;
}

static Status decode_plain(const Opts *o, Err *e) {
    size_t len;
    char *text = read_stdin(&len);
    TokenIds ids = {0};
    Status st = ST_OK;
    size_t line = 1;
    for (char *p = text; *p && st == ST_OK;) {
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            line += *p++ == '\n';
            continue;
        }
        char *end = p;
        while (*end && !strchr(" \t\r\n", *end)) end++;
        char saved = *end;
        *end = 0;
        char *num_end;
        errno = 0;
        long long v = strtoll(p, &num_end, 10);
        int32_t id = 0;
        if (*num_end || errno) st = err_set(e, ST_EINVAL, "line %zu: \"%s\" is not an integer id", line, p);
        else st = check_id(o->tok, (double)v, p, line, &id, e);
        if (st == ST_OK) {
            if (ids.n == ids.cap) ids.cap = ids.cap ? ids.cap * 2 : 256, ids.ids = xrealloc(ids.ids, ids.cap * sizeof *ids.ids);
            ids.ids[ids.n++] = id;
        }
        *end = saved;
        p = end;
    }
    if (st == ST_OK) {
        char *s = tokenizer_decode(o->tok, ids.ids, ids.n, o->skip_special);
        fwrite(s, 1, strlen(s), stdout);
        free(s);
    }
    tokenizer_ids_free(&ids);
    free(text);
    return st;
}

static Status jsonl_line(const Opts *o, int decode, const char *line, size_t len, size_t lineno, Err *e) {
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j) return err_set(e, ST_EINVAL, "line %zu: invalid JSON: %.80s", lineno, line);
    Status st = ST_OK;
    TokenIds ids = {0};
    if (!decode) {
        if (!cJSON_IsString(j)) {
            st = err_set(e, ST_EINVAL, "line %zu: expected a JSON string, got %.80s", lineno, line);
        } else {
            st = tokenizer_encode(o->tok, j->valuestring, strlen(j->valuestring), o->add_special, &ids, e);
            if (st == ST_OK) print_ids(&ids, 1);
            else err_prefix(e, "line %zu: ", lineno);
        }
    } else if (!cJSON_IsArray(j)) {
        st = err_set(e, ST_EINVAL, "line %zu: expected a JSON array of ids, got %.80s", lineno, line);
    } else {
        for (const cJSON *x = j->child; x && st == ST_OK; x = x->next) {
            char num[64];
            if (!cJSON_IsNumber(x)) {
                char *txt = cJSON_PrintUnformatted(x);
                st = err_set(e, ST_EINVAL, "line %zu: %.60s is not an integer id", lineno, txt);
                free(txt);
                break;
            }
            snprintf(num, sizeof num, "%.17g", x->valuedouble);
            int32_t id;
            st = check_id(o->tok, x->valuedouble, num, lineno, &id, e);
            if (st == ST_OK) {
                if (ids.n == ids.cap) ids.cap = ids.cap ? ids.cap * 2 : 64, ids.ids = xrealloc(ids.ids, ids.cap * sizeof *ids.ids);
                ids.ids[ids.n++] = id;
            }
        }
        if (st == ST_OK) {
            char *s = tokenizer_decode(o->tok, ids.ids, ids.n, o->skip_special);
            cJSON *js = cJSON_CreateString(s);
            char *out = cJSON_PrintUnformatted(js);
            printf("%s\n", out);
            free(out);
            cJSON_Delete(js);
            free(s);
        }
    }
    tokenizer_ids_free(&ids);
    cJSON_Delete(j);
    return st;
}

static Status run_jsonl(const Opts *o, int decode, Err *e) {
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    Status st = ST_OK;
    while (st == ST_OK && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        st = jsonl_line(o, decode, line, len, lineno, e);
    }
    free(line);
    return st;
}

int cmd_tokenize(int argc, char **argv) {
    Args a;
    Err e = {0};
    if (args_parse(&a, "tokenize", specs, argc, argv, &e) != ST_OK) {
        fprintf(stderr, "still tokenize: %s\n", e.msg);
        args_free(&a);
        return 2;
    }
    if (args_bool(&a, "help")) {
        args_print_help(stdout, "tokenize", SUMMARY, specs);
        args_free(&a);
        return 0;
    }
    const char *model = args_str(&a, "model");
    if (!model) {
        fprintf(stderr, "still tokenize: --model is required (a directory holding tokenizer.json)\n");
        args_free(&a);
        return 2;
    }
    // a tokenizer.json path as is; otherwise a directory or a hub id in the local cache
    char *dir = NULL;
    if (!file_exists(model) && hf_resolve_model(model, args_str(&a, "revision"), &dir, &e) != ST_OK) {
        fprintf(stderr, "still tokenize: %s\n", e.msg);
        args_free(&a);
        return 1;
    }
    Tokenizer *tok = NULL;
    Status lst = tokenizer_load(dir ? dir : model, &tok, &e);
    free(dir);
    if (lst != ST_OK) {
        fprintf(stderr, "still tokenize: %s\n", e.msg);
        args_free(&a);
        return 1;
    }
    Opts o = {tok, args_bool(&a, "add_special_tokens"), args_bool(&a, "skip_special_tokens")};
    int decode = args_bool(&a, "decode");
    Status st;
    if (args_bool(&a, "jsonl")) st = run_jsonl(&o, decode, &e);
    else st = decode ? decode_plain(&o, &e) : encode_plain(&o, &e);
    fflush(stdout);
    if (st != ST_OK) fprintf(stderr, "still tokenize: %s\n", e.msg);
    tokenizer_free(tok);
    args_free(&a);
    return st == ST_OK ? 0 : 1;
}
