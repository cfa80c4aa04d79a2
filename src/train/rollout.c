// rollout.c: prompt datasets and the static-shape scoring batches of the on-policy trainers.
#include "rollout.h"

#include "../backend/backend.h"
#include "../core/alloc.h"
#include "../core/log.h"
#include "rewards.h"

#include <math.h>
#include <string.h>

void prompt_row_free(PromptRow *r) {
    free(r->ids);
    free(r->text);
    free(r->completion);
    cJSON_Delete(r->row);
    memset(r, 0, sizeof *r);
}

void prompts_free(PromptSet *ps) {
    for (int i = 0; i < ps->n; i++) prompt_row_free(&ps->rows[i]);
    free(ps->rows);
    memset(ps, 0, sizeof *ps);
}

static Status encode_text(const TextCodec *codec, const char *text, int add_special, I32Vec *out, Err *e) {
    if (!codec) return err_set(e, ST_EINVAL, "prompts need a tokenizer (the model directory has no tokenizer.json)");
    return codec->encode(codec->ctx, text, strlen(text), add_special, out, e);
}

// The row's tools and template variables (data_template_vars) reach the template.
static Status render_messages(const TextCodec *codec, const cJSON *row, const cJSON *msgs, int add_gen,
                              const cJSON *kwargs, char **text, Err *e) {
    if (!codec || !codec->render)
        return err_set(e, ST_EINVAL, "message-list prompts need a chat template (the model has no chat_template)");
    cJSON *tools, *vars;
    TRY(data_template_vars(row, kwargs, &tools, &vars, e));
    Status st = codec->render(codec->ctx, msgs, tools, add_gen, vars, text, NULL, NULL, e);
    cJSON_Delete(tools);
    cJSON_Delete(vars);
    return st;
}

static Status check_ids(const I32Vec *v, int vocab, Err *e) {
    for (size_t i = 0; i < v->n; i++)
        if (v->v[i] < 0 || (vocab > 0 && v->v[i] >= vocab))
            return err_set(e, ST_EINVAL, "token id %d is outside the model's vocabulary [0, %d)", v->v[i], vocab);
    return ST_OK;
}

// Left truncation to max_prompt_length (keep the end, as TRL's max_prompt_length did).
static void keep_last(I32Vec *v, int max_len) {
    if (max_len <= 0 || v->n <= (size_t)max_len) return;
    memmove(v->v, v->v + (v->n - (size_t)max_len), (size_t)max_len * sizeof(int32_t));
    v->n = (size_t)max_len;
}

// Encode a prompt value (string, or message list rendered with the generation prompt).
static Status encode_prompt(const cJSON *row, const cJSON *prompt, const PromptConfig *cfg, const TextCodec *codec,
                            I32Vec *ids, char **text, Err *e) {
    if (cJSON_IsString(prompt)) {
        *text = xstrdup(prompt->valuestring);
        return encode_text(codec, prompt->valuestring, 1, ids, e);
    }
    if (!cJSON_IsArray(prompt) || cJSON_GetArraySize(prompt) == 0)
        return err_set(e, ST_EINVAL, "\"prompt\" must be a string or a non-empty list of messages");
    TRY(render_messages(codec, row, prompt, 1, cfg->chat_template_kwargs, text, e));
    return encode_text(codec, *text, 0, ids, e);
}

typedef struct LoadCtx {
    PromptSet *ps;
    const PromptConfig *cfg;
    const TextCodec *codec;
    int cap, n_bad;
    char first_bad[512];
} LoadCtx;

static Status build_row(LoadCtx *lc, const cJSON *row, PromptRow *out, Err *e) {
    if (!cJSON_IsObject(row)) return err_set(e, ST_EINVAL, "a row must be a JSON object");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(row, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(row, "messages");
    I32Vec ids = {0};
    char *text = NULL;
    Status st = ST_OK;
    memset(out, 0, sizeof *out);
    if (prompt) {
        st = encode_prompt(row, prompt, lc->cfg, lc->codec, &ids, &text, e);
        lc->ps->conversational = cJSON_IsArray(prompt);
    } else if (cJSON_IsArray(msgs)) {
        // conversational rows: the prompt is every message before the last assistant one, which is
        // kept as the dataset completion (GKD's off-policy fraction uses it)
        int n = cJSON_GetArraySize(msgs);
        const cJSON *last = cJSON_GetArrayItem(msgs, n - 1);
        const cJSON *role = last ? cJSON_GetObjectItemCaseSensitive(last, "role") : NULL;
        if (n < 2 || !cJSON_IsString(role) || strcmp(role->valuestring, "assistant") != 0)
            return err_set(e, ST_EINVAL, "\"messages\" must end with an assistant message (the completion)");
        cJSON *head = cJSON_Duplicate(msgs, 1);
        cJSON_DeleteItemFromArray(head, n - 1);
        st = render_messages(lc->codec, row, head, 1, lc->cfg->chat_template_kwargs, &text, e);
        cJSON_Delete(head);
        char *full = NULL;
        if (st == ST_OK) st = render_messages(lc->codec, row, msgs, 0, lc->cfg->chat_template_kwargs, &full, e);
        if (st == ST_OK) st = encode_text(lc->codec, text, 0, &ids, e);
        I32Vec all = {0};
        if (st == ST_OK) st = encode_text(lc->codec, full, 0, &all, e);
        if (st == ST_OK && (all.n <= ids.n || memcmp(all.v, ids.v, ids.n * sizeof(int32_t)) != 0))
            st = err_set(e, ST_EINVAL, "the chat template's prompt is not a prefix of the whole conversation");
        if (st == ST_OK) {
            out->n_completion = (int)(all.n - ids.n);
            out->completion = xmalloc((size_t)out->n_completion * sizeof(int32_t));
            memcpy(out->completion, all.v + ids.n, (size_t)out->n_completion * sizeof(int32_t));
        }
        i32vec_free(&all);
        free(full);
        lc->ps->conversational = 1;
    } else {
        return err_set(e, ST_EINVAL, "a prompt row needs \"prompt\" (a string or a list of messages) or \"messages\"");
    }
    if (st == ST_OK) st = check_ids(&ids, lc->cfg->vocab_size, e);
    if (st == ST_OK && ids.n == 0) st = err_set(e, ST_EINVAL, "the prompt encodes to no token");
    if (st != ST_OK) {
        i32vec_free(&ids);
        free(text);
        prompt_row_free(out);
        return st;
    }
    keep_last(&ids, lc->cfg->max_prompt_length);
    out->ids = ids.v;
    out->n = (int)ids.n;
    out->text = text;
    out->row = cJSON_Duplicate(row, 1);
    return ST_OK;
}

static Status load_row(void *ctx, const cJSON *row, int first, const char *where, Err *e) {
    LoadCtx *lc = ctx;
    PromptSet *ps = lc->ps;
    if (ps->n == lc->cap) {
        lc->cap = lc->cap ? lc->cap * 2 : 64;
        ps->rows = xrealloc(ps->rows, (size_t)lc->cap * sizeof(PromptRow));
    }
    Status st = build_row(lc, row, &ps->rows[ps->n], e);
    if (st == ST_OK) {
        ps->n++;
        return ST_OK;
    }
    err_prefix(e, "%s: ", where);
    if (!lc->cfg->skip_bad_rows || first) return st;
    if (!lc->n_bad) snprintf(lc->first_bad, sizeof lc->first_bad, "%s", e->msg);
    lc->n_bad++;
    err_clear(e);
    return ST_OK;
}

Status prompts_load(const char *path, const PromptConfig *cfg, const TextCodec *codec, PromptSet *ps, Err *e) {
    memset(ps, 0, sizeof *ps);
    LoadCtx lc = {.ps = ps, .cfg = cfg, .codec = codec};
    Status st = data_foreach_row(path, cfg->skip_bad_rows, load_row, &lc, &lc.n_bad, lc.first_bad, sizeof lc.first_bad, e);
    if (st == ST_OK && ps->n == 0) st = err_set(e, ST_EINVAL, "%s: no prompt rows", path);
    if (st != ST_OK) {
        prompts_free(ps);
        return st;
    }
    if (lc.n_bad) log_warn("%s: skipped %d bad rows (first: %s)", path, lc.n_bad, lc.first_bad);
    return ST_OK;
}

Status prompts_check_rewards(const PromptSet *ps, const RewardSet *rs, const char *path, Err *e) {
    const cJSON **rows = xmalloc((size_t)MAX(1, ps->n) * sizeof *rows);
    for (int i = 0; i < ps->n; i++) rows[i] = ps->rows[i].row;
    Status st = rewards_check_columns(rs, rows, ps->n, path, e);
    free(rows);
    return st;
}

// Fill {column} placeholders from a row; "{{" and "}}" are literal braces (Python str.format).
static Status fill_template(const char *tmpl, const cJSON *row, char **out, Err *e) {
    StrBuf sb = {0};
    for (const char *p = tmpl; *p;) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            sb_putc(&sb, p[0]);
            p += 2;
            continue;
        }
        if (*p != '{') {
            sb_putc(&sb, *p++);
            continue;
        }
        const char *end = strchr(p, '}');
        if (!end) {
            sb_free(&sb);
            return err_set(e, ST_EINVAL, "template: unclosed \"{\" at \"%.20s\"", p);
        }
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(end - p - 1), p + 1);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
        if (!v || cJSON_IsNull(v)) {
            sb_free(&sb);
            return err_set(e, ST_EINVAL, "template placeholder {%s}: the row has no column \"%s\"", key, key);
        }
        if (cJSON_IsString(v)) {
            sb_puts(&sb, v->valuestring);
        } else if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15) {
            sb_printf(&sb, "%lld", (long long)v->valuedouble);
        } else {
            char *j = cJSON_PrintUnformatted(v);
            sb_puts(&sb, j);
            free(j);
        }
        p = end + 1;
    }
    *out = sb_take(&sb);
    return ST_OK;
}

Status prompts_render_template(const PromptSet *ps, int index, const char *tmpl, const PromptConfig *cfg,
                               const TextCodec *codec, PromptRow *out, Err *e) {
    memset(out, 0, sizeof *out);
    const cJSON *row = ps->rows[index].row;
    char *filled = NULL;
    TRY(fill_template(tmpl, row, &filled, e));
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(row, "prompt");
    cJSON *msgs = NULL;
    if (cJSON_IsArray(prompt)) {
        msgs = cJSON_Duplicate(prompt, 1);
    } else if (!prompt && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(row, "messages"))) {
        msgs = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(row, "messages"), 1);
        cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
    }
    Status st = ST_OK;
    cJSON *value;
    if (msgs) {
        // the filled template replaces the content of the last user message
        cJSON *last_user = NULL;
        for (cJSON *m = msgs->child; m; m = m->next) {
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
            if (cJSON_IsString(role) && !strcmp(role->valuestring, "user")) last_user = m;
        }
        if (!last_user) {
            cJSON_Delete(msgs);
            free(filled);
            return err_set(e, ST_EINVAL, "row %d: the prompt has no user message for the teacher template", index);
        }
        cJSON_ReplaceItemInObjectCaseSensitive(last_user, "content", cJSON_CreateString(filled));
        value = msgs;
    } else {
        value = cJSON_CreateString(filled);
    }
    I32Vec ids = {0};
    char *text = NULL;
    st = encode_prompt(row, value, cfg, codec, &ids, &text, e);
    cJSON_Delete(value);
    free(filled);
    if (st == ST_OK) st = check_ids(&ids, cfg->vocab_size, e);
    if (st != ST_OK) {
        i32vec_free(&ids);
        free(text);
        return st;
    }
    keep_last(&ids, cfg->max_prompt_length);
    out->ids = ids.v;
    out->n = (int)ids.n;
    out->text = text;
    out->row = cJSON_Duplicate(row, 1);
    return ST_OK;
}

static int is_eos(int32_t id, const int32_t *eos, int n_eos) {
    for (int k = 0; k < n_eos; k++)
        if (id == eos[k]) return 1;
    return 0;
}

int rollout_mask_len(const int32_t *ids, int n, const int32_t *eos, int n_eos) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n_eos; k++)
            if (ids[i] == eos[k]) return i + 1;
    return n;
}

void score_batch_free(ScoreBatch *sb) {
    free(sb->ids);
    free(sb->pos);
    free(sb->seg);
    free(sb->targets);
    free(sb->comp_len);
    free(sb->truncated);
    memset(sb, 0, sizeof *sb);
}

Status score_batch_build(ScoreBatch *sb, const int32_t *const *prompts, const int *prompt_lens,
                         const int32_t *const *completions, const int *completion_lens, int B, int C, int P_min,
                         int pad_to_multiple_of, const int32_t *eos, int n_eos, Err *e) {
    memset(sb, 0, sizeof *sb);
    int P = MAX(0, P_min);
    for (int r = 0; r < B; r++) {
        if (prompt_lens[r] < 1) return err_set(e, ST_EINVAL, "row %d: a scored row needs at least one prompt token", r);
        if (completion_lens[r] > C)
            return err_set(e, ST_EINVAL, "row %d: completion of %d tokens is longer than max_completion_length %d", r,
                           completion_lens[r], C);
        P = MAX(P, prompt_lens[r]);
    }
    int T = P + C, g = pad_to_multiple_of > 1 ? pad_to_multiple_of : 1;
    T = (T + g - 1) / g * g;
    size_t N = (size_t)B * T;
    sb->B = B, sb->T = T, sb->P = P, sb->C = C;
    sb->ids = xcalloc(N, sizeof(int32_t));
    sb->pos = xcalloc(N, sizeof(int32_t));
    sb->seg = xcalloc(N, sizeof(int32_t));
    sb->targets = xmalloc(N * sizeof(int32_t));
    sb->comp_len = xcalloc((size_t)B, sizeof(int));
    sb->truncated = xcalloc((size_t)B, sizeof(int));
    for (size_t i = 0; i < N; i++) sb->targets[i] = IGNORE_INDEX;
    for (int r = 0; r < B; r++) {
        int32_t *ids = sb->ids + (size_t)r * T, *pos = sb->pos + (size_t)r * T, *seg = sb->seg + (size_t)r * T;
        int32_t *tgt = sb->targets + (size_t)r * T;
        int pl = prompt_lens[r], cl = completion_lens[r], off = P - pl;
        int m = rollout_mask_len(completions[r], cl, eos, n_eos);
        for (int t = 0; t < pl; t++) ids[off + t] = prompts[r][t], pos[off + t] = t, seg[off + t] = 1;
        for (int k = 0; k < m; k++) ids[P + k] = completions[r][k], pos[P + k] = pl + k, seg[P + k] = 1;
        for (int k = 0; k < m; k++) tgt[P - 1 + k] = completions[r][k];
        sb->comp_len[r] = m;
        // truncated: the completion ends without an EOS (max_new_tokens reached)
        sb->truncated[r] = !(m > 0 && is_eos(completions[r][m - 1], eos, n_eos));
        sb->n_targets += m;
    }
    return ST_OK;
}
