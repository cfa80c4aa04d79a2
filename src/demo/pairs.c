// pairs.c: on-policy preference pairs from scored samples (pairs.h).
#include "pairs.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "../train/data.h"

#include <string.h>

typedef struct PairsCtx {
    const PairsConfig *c;
    int n, cap;              // prompt rows read
    char **prompt, **chosen; // (n) each row's prompt and reference answer
    char **rejected;         // (n) the first sample scored 0, or NULL
} PairsCtx;

static Status read_prompt(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    (void)first;
    PairsCtx *p = ctx;
    const char *prompt, *answer;
    TRY(json_get_string(row, "prompt", where, 1, &prompt, e));
    TRY(json_get_string(row, p->c->answer_key, where, 1, &answer, e));
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->prompt = xrealloc(p->prompt, (size_t)p->cap * sizeof(char *));
        p->chosen = xrealloc(p->chosen, (size_t)p->cap * sizeof(char *));
    }
    p->prompt[p->n] = xstrdup(prompt);
    p->chosen[p->n] = xstrdup(answer);
    p->n++;
    return ST_OK;
}

static Status read_sample(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    (void)first;
    PairsCtx *p = ctx;
    long long i;
    double score;
    const char *prompt, *completion;
    TRY(json_get_int(row, "prompt_index", where, 1, &i, e));
    TRY(json_get_string(row, "prompt", where, 1, &prompt, e));
    TRY(json_get_string(row, "completion", where, 1, &completion, e));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(row, "metrics");
    if (!cJSON_IsObject(m)) return err_set(e, ST_EINVAL, "%s: no \"metrics\" object (a still eval generations.jsonl row)", where);
    TRY(json_get_double(m, p->c->metric, where, 1, &score, e));
    if (i < 0 || i >= p->n)
        return err_set(e, ST_EINVAL, "%s: prompt_index %lld, but %s has %d rows", where, i, p->c->prompts, p->n);
    if (strcmp(prompt, p->prompt[i]))
        return err_set(e, ST_EINVAL, "%s: prompt \"%s\" is not row %lld's prompt of %s (\"%s\"): generations of another file?",
                       where, prompt, i + 1, p->c->prompts, p->prompt[i]);
    if (score == 0 && !p->rejected[i]) p->rejected[i] = xstrdup(completion);
    return ST_OK;
}

Status demo_write_pairs(const PairsConfig *c, int *n_pairs, Err *e) {
    PairsCtx p = {.c = c};
    Status st = data_foreach_row(c->prompts, 0, read_prompt, &p, NULL, NULL, 0, e);
    if (st == ST_OK && p.n == 0) st = err_set(e, ST_EINVAL, "%s: no prompt rows", c->prompts);
    if (st == ST_OK) {
        p.rejected = xcalloc((size_t)p.n, sizeof(char *));
        st = data_foreach_row(c->generations, 0, read_sample, &p, NULL, NULL, 0, e);
    }
    StrBuf sb = {0};
    int n = 0;
    for (int i = 0; st == ST_OK && i < p.n; i++) {
        if (!p.rejected[i]) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", p.prompt[i]);
        cJSON_AddStringToObject(o, "chosen", p.chosen[i]);
        cJSON_AddStringToObject(o, "rejected", p.rejected[i]);
        char *line = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        sb_puts(&sb, line);
        sb_putc(&sb, '\n');
        free(line);
        n++;
    }
    if (st == ST_OK && n == 0)
        st = err_set(e, ST_EINVAL, "%s: no sample scored 0 by %s: no preference pair to write", c->generations, c->metric);
    if (st == ST_OK) st = file_write_atomic(c->output, sb.data, sb.len, e);
    if (st == ST_OK && n_pairs) *n_pairs = n;
    sb_free(&sb);
    for (int i = 0; i < p.n; i++) {
        free(p.prompt[i]), free(p.chosen[i]);
        if (p.rejected) free(p.rejected[i]);
    }
    free(p.prompt), free(p.chosen), free(p.rejected);
    return st;
}
