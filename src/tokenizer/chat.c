// chat.c: loading a model's chat template (chat_template.jinja or tokenizer_config.json) with its
// special tokens, and rendering it with transformers' variables.
#include "chat_internal.h"
#include "tok_gguf.h"

#include "../core/fileio.h"
#include "../core/json.h"

#include <string.h>

struct ChatTemplate {
    char *what;     // the source, for messages
    ChatAst ast;
    CVal vars;      // dict: special tokens and other fixed variables
    time_t now;     // 0: the clock
};

void gen_spans_free(GenSpans *s) {
    free(s->spans);
    memset(s, 0, sizeof *s);
}

Status chat_template_compile(const char *source, const char *what, ChatTemplate **out, Err *e) {
    TokList toks;
    TRY(chat_lex(source, what, &toks, e));
    ChatTemplate *t = xcalloc(1, sizeof *t);
    t->what = xstrdup(what);
    Status st = chat_parse(&toks, what, &t->ast, e);
    chat_toks_free(&toks);
    if (st != ST_OK) {
        free(t->what);
        free(t);
        return st;
    }
    t->vars = cv_dict();
    *out = t;
    return ST_OK;
}

void chat_template_free(ChatTemplate *t) {
    if (!t) return;
    chat_ast_free(&t->ast);
    cv_release(t->vars);
    free(t->what);
    free(t);
}

Status chat_template_set_var(ChatTemplate *t, const char *name, const cJSON *v, Err *e) {
    UNUSED(e);
    cv_dict_set(t->vars, cv_cstr(name), cv_from_cjson(v));
    return ST_OK;
}

void chat_template_set_now(ChatTemplate *t, time_t now) { t->now = now; }

// ---------------------------------------------------------------- loading
// A special token: a string or an AddedToken object {"content": ...}.
static const char *token_text(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

// transformers' special_tokens_map: only the tokens that are set (and non-empty).
static void add_special_tokens(ChatTemplate *t, const cJSON *cfg) {
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", NULL};
    for (int i = 0; keys[i]; i++) {
        if (cv_dict_get_str(t->vars, keys[i])) continue;
        const char *s = token_text(cJSON_GetObjectItemCaseSensitive(cfg, keys[i]));
        if (s && *s) cv_dict_set(t->vars, cv_cstr(keys[i]), cv_cstr(s));
    }
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(cfg, "additional_special_tokens");
    if (cJSON_IsArray(extra) && cJSON_GetArraySize(extra) > 0 && !cv_dict_get_str(t->vars, "additional_special_tokens")) {
        CVal l = cv_list(0);
        for (const cJSON *c = extra->child; c; c = c->next) {
            const char *s = token_text(c);
            if (s) cv_list_push(l, cv_cstr(s));
        }
        cv_dict_set(t->vars, cv_cstr("additional_special_tokens"), l);
    }
}

// Pick the template text from tokenizer_config.json's chat_template (string or named list).
static Status pick_template(const cJSON *ct, const char *name, const char *path, const char **src, Err *e) {
    if (cJSON_IsString(ct)) {
        if (name && strcmp(name, "default"))
            return err_set(e, ST_ENOTFOUND, "%s: chat_template is a single template; there is no template named '%s'", path, name);
        *src = ct->valuestring;
        return ST_OK;
    }
    if (!cJSON_IsArray(ct)) return err_set(e, ST_EINVAL, "%s: chat_template must be a string or a list of {name, template}", path);
    StrBuf names = {0};
    const char *want = name ? name : "default";
    for (const cJSON *c = ct->child; c; c = c->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(c, "template");
        if (!cJSON_IsString(n) || !cJSON_IsString(tx)) {
            sb_free(&names);
            return err_set(e, ST_EINVAL, "%s: each chat_template entry needs string fields name and template", path);
        }
        if (!strcmp(n->valuestring, want)) {
            sb_free(&names);
            *src = tx->valuestring;
            return ST_OK;
        }
        sb_printf(&names, "%s'%s'", names.len ? ", " : "", n->valuestring);
    }
    Status st = name ? err_set(e, ST_ENOTFOUND, "%s: no chat template named '%s'; available: %s", path, name, names.data ? names.data : "none")
                     : err_set(e, ST_EINVAL,
                               "%s: this model has several chat templates and none is named 'default'; choose one by name "
                               "(available: %s)",
                               path, names.data ? names.data : "none");
    sb_free(&names);
    return st;
}

// A GGUF file's tokenizer.chat_template, with the special tokens its metadata names.
static Status load_gguf(const char *path, const char *name, ChatTemplate **out, Err *e) {
    if (name && strcmp(name, "default"))
        return err_set(e, ST_ENOTFOUND, "%s: a GGUF file holds one chat template; there is no template named '%s'", path, name);
    cJSON *j, *cfg;
    TRY(tok_gguf_json(path, &j, &cfg, e));
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    char what[1100];
    snprintf(what, sizeof what, "%s (tokenizer.chat_template)", path);
    Status st = cJSON_IsString(ct) ? chat_template_compile(ct->valuestring, what, out, e)
                                   : err_set(e, ST_ENOTFOUND, "%s: no chat template (no tokenizer.chat_template in the GGUF metadata)", path);
    if (st == ST_OK) add_special_tokens(*out, cfg);
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    return st;
}

Status chat_template_load(const char *model_dir, const char *name, ChatTemplate **out, Err *e) {
    if (gguf_is_file(model_dir)) return load_gguf(model_dir, name, out, e);
    if (!dir_exists(model_dir)) return err_set(e, ST_ENOTFOUND, "%s: not a directory", model_dir);
    char *cfg_path = path_join(model_dir, "tokenizer_config.json");
    char *jinja_path = path_join(model_dir, "chat_template.jinja");
    char *named_path = NULL;
    if (name && strcmp(name, "default")) {
        StrBuf sb = {0};
        sb_printf(&sb, "additional_chat_templates/%s.jinja", name);
        named_path = path_join(model_dir, sb.data);
        sb_free(&sb);
    }
    cJSON *cfg = NULL;
    char *text = NULL;
    Status st = ST_OK;
    if (file_exists(cfg_path)) st = json_parse_file(cfg_path, &cfg, e);
    const char *use_path = NULL;
    if (st == ST_OK && named_path && file_exists(named_path)) use_path = named_path;
    else if (st == ST_OK && !named_path && file_exists(jinja_path)) use_path = jinja_path;
    if (st == ST_OK && use_path) {
        size_t len;
        st = file_read_all(use_path, &text, &len, e);
        if (st == ST_OK) st = chat_template_compile(text, use_path, out, e);
    } else if (st == ST_OK) {
        const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
        if (!ct || cJSON_IsNull(ct)) {
            st = err_set(e, ST_ENOTFOUND, "%s: no chat template (neither chat_template.jinja nor chat_template in tokenizer_config.json)", model_dir);
        } else {
            const char *src = NULL;
            st = pick_template(ct, name, cfg_path, &src, e);
            if (st == ST_OK) st = chat_template_compile(src, cfg_path, out, e);
        }
    }
    if (st == ST_OK && cfg) add_special_tokens(*out, cfg);
    if (st == ST_OK) {   // tokens missing from tokenizer_config.json may sit in special_tokens_map.json
        char *stm_path = path_join(model_dir, "special_tokens_map.json");
        cJSON *stm = NULL;
        if (file_exists(stm_path) && json_parse_file(stm_path, &stm, e) == ST_OK) add_special_tokens(*out, stm);
        err_clear(e);
        cJSON_Delete(stm);
        free(stm_path);
    }
    cJSON_Delete(cfg);
    free(text);
    free(cfg_path);
    free(jinja_path);
    free(named_path);
    return st;
}

// ---------------------------------------------------------------- rendering
Status chat_render_values(const ChatTemplate *t, CVal vars, char **out, GenSpans *spans, Err *e) {
    StrBuf buf = {0};
    Scope root = {.parent = NULL, .vars = vars};
    Interp in = {
        .ast = &t->ast, .what = t->what, .e = e, .root = &root, .scope = &root, .out = &buf, .root_out = &buf,
        .spans = spans, .namespaces = cv_list(0), .now = t->now,
    };
    if (spans) spans->n = 0;
    Status st = interp_run(&in, &t->ast.body);
    // Namespaces may refer to themselves; empty them so every reference is released.
    for (size_t i = 0; i < in.namespaces.l->n; i++) {
        CDict *d = in.namespaces.l->items[i].d;
        size_t n = d->n;
        d->n = 0;
        for (size_t k = 0; k < n; k++) { cv_release(d->keys[k]); cv_release(d->vals[k]); }
    }
    cv_release(in.namespaces);
    if (st != ST_OK) {
        sb_free(&buf);
        if (spans) spans->n = 0;
        return st;
    }
    sb_putc(&buf, 0);
    *out = buf.data;
    return ST_OK;
}

static CVal base_vars(const ChatTemplate *t) {
    CVal d = cv_dict();
    for (size_t i = 0; i < t->vars.d->n; i++) cv_dict_set(d, cv_retain(t->vars.d->keys[i]), cv_retain(t->vars.d->vals[i]));
    return d;
}

static int is_named_arg(const char *k) {
    return !strcmp(k, "messages") || !strcmp(k, "tools") || !strcmp(k, "documents") || !strcmp(k, "add_generation_prompt");
}

Status chat_template_render(const ChatTemplate *t, const cJSON *messages, const cJSON *tools, const cJSON *documents,
                            int add_generation_prompt, const cJSON *extra_vars, char **out, GenSpans *spans, Err *e) {
    CVal vars = base_vars(t);
    if (extra_vars) {
        if (!cJSON_IsObject(extra_vars)) { cv_release(vars); return err_set(e, ST_EINVAL, "template variables must be a JSON object"); }
        for (const cJSON *c = extra_vars->child; c; c = c->next) {
            if (is_named_arg(c->string)) {
                cv_release(vars);
                return err_set(e, ST_EINVAL, "template variable '%s' is given twice (it is a named argument)", c->string);
            }
            cv_dict_set(vars, cv_cstr(c->string), cv_from_cjson(c));
        }
    }
    cv_dict_set(vars, cv_cstr("messages"), cv_from_cjson(messages));
    cv_dict_set(vars, cv_cstr("tools"), cv_from_cjson(tools));
    cv_dict_set(vars, cv_cstr("documents"), cv_from_cjson(documents));
    cv_dict_set(vars, cv_cstr("add_generation_prompt"), cv_bool(add_generation_prompt));
    Status st = chat_render_values(t, vars, out, spans, e);
    cv_release(vars);
    return st;
}

Status chat_template_render_json(const ChatTemplate *t, const char *input_json, const char *kwargs_json,
                                 int add_generation_prompt, char **out, GenSpans *spans, Err *e) {
    CVal in, kw = cv_none();
    TRY(cv_from_json_text(input_json, "input", &in, e));
    if (kwargs_json) {
        Status st = cv_from_json_text(kwargs_json, "chat_template_kwargs", &kw, e);
        if (st != ST_OK) { cv_release(in); return st; }
        if (kw.t != CV_DICT) {
            cv_release(in);
            cv_release(kw);
            return err_set(e, ST_EINVAL, "chat_template_kwargs must be a JSON object");
        }
    }
    CVal vars = base_vars(t);
    cv_dict_set(vars, cv_cstr("tools"), cv_none());
    cv_dict_set(vars, cv_cstr("documents"), cv_none());
    cv_dict_set(vars, cv_cstr("add_generation_prompt"), cv_bool(add_generation_prompt));
    Status st = ST_OK;
    if (in.t == CV_LIST) {
        cv_dict_set(vars, cv_cstr("messages"), cv_retain(in));
    } else if (in.t == CV_DICT) {
        if (!cv_dict_get_str(in, "messages")) st = err_set(e, ST_EINVAL, "input: the object has no \"messages\" key");
        for (size_t i = 0; i < in.d->n && st == ST_OK; i++) cv_dict_set(vars, cv_retain(in.d->keys[i]), cv_retain(in.d->vals[i]));
    } else {
        st = err_set(e, ST_EINVAL, "input: expected a JSON array of messages or an object with \"messages\"");
    }
    if (st == ST_OK && kw.t == CV_DICT)
        for (size_t i = 0; i < kw.d->n && st == ST_OK; i++) {
            if (kw.d->keys[i].t == CV_STR && is_named_arg(kw.d->keys[i].s->data))
                st = err_set(e, ST_EINVAL, "chat_template_kwargs: '%s' is a named argument, not a keyword", kw.d->keys[i].s->data);
            else cv_dict_set(vars, cv_retain(kw.d->keys[i]), cv_retain(kw.d->vals[i]));
        }
    if (st == ST_OK) st = chat_render_values(t, vars, out, spans, e);
    cv_release(vars);
    cv_release(in);
    cv_release(kw);
    return st;
}

Status chat_kwargs_parse(const char *text, cJSON **out, Err *e) {
    *out = NULL;
    if (!text) return ST_OK;
    cJSON *kw;
    TRY(json_parse_text(text, strlen(text), "--chat_template_kwargs", &kw, e));
    if (!cJSON_IsObject(kw)) {
        cJSON_Delete(kw);
        return err_set(e, ST_EINVAL, "--chat_template_kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'");
    }
    *out = kw;
    return ST_OK;
}
