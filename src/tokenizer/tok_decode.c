// tok_decode.c: decoders (tokenizers/src/decoders). Each rewrites the list of token strings
// (decode_chain); the tokenizer joins what is left.
#include "tok_internal.h"

#include "unicode.h"

#include <string.h>

static Status dec_bool(const cJSON *j, const char *key, const char *what, int def, int *out, Err *e) {
    *out = def;
    Status st = json_get_bool(j, key, what, 0, out, e);
    if (st == ST_ENOTFOUND) {
        err_clear(e);
        return ST_OK;
    }
    return st;
}

static Status dec_int(const cJSON *j, const char *key, const char *what, int *out, Err *e) {
    long long v = 0;
    Status st = json_get_int(j, key, what, 0, &v, e);
    if (st == ST_ENOTFOUND) {
        err_clear(e);
        *out = 0;
        return ST_OK;
    }
    TRY(st);
    if (v < 0 || v > 1000000) return err_set(e, ST_EINVAL, "%s: \"%s\" must be a small non-negative integer", what, key);
    *out = (int)v;
    return ST_OK;
}

static Status one_char(const cJSON *j, const char *key, const char *what, char **out, Err *e) {
    const char *s;
    TRY(json_get_string(j, key, what, 1, &s, e));
    size_t adv;
    if (!*s || utf8_decode(s, strlen(s), &adv) < 0 || s[adv])
        return err_set(e, ST_EINVAL, "%s: \"%s\" must be a single character", what, key);
    *out = xstrdup(s);
    return ST_OK;
}

Status decoder_parse(const cJSON *j, const char *what, Decoder **out, Err *e) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return ST_OK;
    const char *type, *s;
    TRY(json_get_string(j, "type", what, 1, &type, e));
    Decoder *d = xcalloc(1, sizeof *d);
    Status st = ST_OK;
    if (!strcmp(type, "ByteLevel")) {
        d->kind = DEC_BYTELEVEL;
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = DEC_METASPACE;
        st = one_char(j, "replacement", what, &d->replacement, e);
        if (st == ST_OK) {
            Status ps = json_get_string(j, "prepend_scheme", what, 0, &s, e);
            if (ps == ST_ENOTFOUND) {
                int add = 1;
                st = dec_bool(j, "add_prefix_space", what, 1, &add, e);
                d->prepend = add ? PREPEND_ALWAYS : PREPEND_NEVER;
            } else if (ps != ST_OK) {
                st = ps;
            } else if (!strcmp(s, "always")) d->prepend = PREPEND_ALWAYS;
            else if (!strcmp(s, "first")) d->prepend = PREPEND_FIRST;
            else if (!strcmp(s, "never")) d->prepend = PREPEND_NEVER;
            else st = err_set(e, ST_EINVAL, "%s: unknown prepend_scheme \"%s\"", what, s);
        }
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        d->kind = DEC_STRIP;
        st = one_char(j, "content", what, &d->content, e);
        if (st == ST_OK) st = dec_int(j, "start", what, &d->start, e);
        if (st == ST_OK) st = dec_int(j, "stop", what, &d->stop, e);
    } else if (!strcmp(type, "Replace")) {
        d->kind = DEC_REPLACE;
        st = tokre_compile(cJSON_GetObjectItemCaseSensitive(j, "pattern"), what, &d->re, e);
        if (st == ST_OK) st = json_get_string(j, "content", what, 1, &s, e);
        if (st == ST_OK) d->content = xstrdup(s);
    } else if (!strcmp(type, "Sequence")) {
        d->kind = DEC_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr)) {
            st = err_set(e, ST_EINVAL, "%s: Sequence decoder needs a \"decoders\" array", what);
        } else {
            d->n_children = cJSON_GetArraySize(arr);
            d->children = xcalloc((size_t)d->n_children + 1, sizeof *d->children);
            for (int i = 0; i < d->n_children && st == ST_OK; i++)
                st = decoder_parse(cJSON_GetArrayItem(arr, i), what, &d->children[i], e);
        }
    } else {
        free(d);
        return err_set(e, ST_EUNSUPPORTED, "%s: decoder type \"%s\" is not supported", what, type);
    }
    if (st != ST_OK) {
        decoder_free(d);
        return st;
    }
    *out = d;
    return ST_OK;
}

void decoder_free(Decoder *d) {
    if (!d) return;
    for (int i = 0; i < d->n_children; i++) decoder_free(d->children[i]);
    free(d->children);
    free(d->replacement);
    free(d->content);
    tokre_free(&d->re);
    free(d);
}

static void replace_token(StrVec *t, size_t i, char *s) {
    free(t->v[i]);
    t->v[i] = s;
}

static void dec_bytelevel(StrVec *t) {
    StrBuf bytes = {0};
    for (size_t i = 0; i < t->n; i++) {
        const char *s = t->v[i];
        size_t len = strlen(s), start = bytes.len, k = 0, adv;
        int all = 1;
        while (k < len) {
            int32_t cp = utf8_decode(s + k, len - k, &adv);
            int b = cp < 0 ? -1 : unicode_cp_to_byte((uint32_t)cp);
            if (b < 0) {
                all = 0;
                break;
            }
            sb_putc(&bytes, (char)b);
            k += adv;
        }
        if (!all) {
            bytes.len = start;
            sb_append(&bytes, s, len);
        }
    }
    size_t ol;
    char *out = utf8_lossy(bytes.data ? bytes.data : "", bytes.len, &ol);
    sb_free(&bytes);
    strvec_free(t);
    t->v = xmalloc(sizeof *t->v);
    t->v[0] = out;
    t->n = t->cap = 1;
}

static void dec_metaspace(const Decoder *d, StrVec *t) {
    size_t rl = strlen(d->replacement);
    for (size_t i = 0; i < t->n; i++) {
        const char *s = t->v[i];
        StrBuf sb = {0};
        sb_puts(&sb, "");
        for (const char *p = s; *p;) {
            if (!strncmp(p, d->replacement, rl)) {
                if (!(i == 0 && d->prepend != PREPEND_NEVER)) sb_putc(&sb, ' ');
                p += rl;
            } else {
                sb_putc(&sb, *p++);
            }
        }
        replace_token(t, i, sb_take(&sb));
    }
}

static int byte_token(const char *s) {
    if (strlen(s) != 6 || strncmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static void dec_bytefallback(StrVec *t) {
    StrVec out = {0};
    StrBuf bytes = {0};
    size_t n_bytes = 0;
    for (size_t i = 0; i <= t->n; i++) {
        int b = i < t->n ? byte_token(t->v[i]) : -1;
        if (b >= 0) {
            sb_putc(&bytes, (char)b);
            n_bytes++;
            continue;
        }
        if (n_bytes) {
            if (utf8_validate(bytes.data, bytes.len) == bytes.len) strvec_push(&out, bytes.data, bytes.len);
            else
                for (size_t k = 0; k < n_bytes; k++) strvec_push(&out, "\xEF\xBF\xBD", 3);
            bytes.len = 0;
            n_bytes = 0;
        }
        if (i < t->n) strvec_push(&out, t->v[i], strlen(t->v[i]));
    }
    sb_free(&bytes);
    strvec_free(t);
    *t = out;
}

static void dec_fuse(StrVec *t) {
    StrBuf sb = {0};
    sb_puts(&sb, "");
    for (size_t i = 0; i < t->n; i++) sb_puts(&sb, t->v[i]);
    strvec_free(t);
    t->v = xmalloc(sizeof *t->v);
    t->v[0] = sb_take(&sb);
    t->n = t->cap = 1;
}

static void dec_strip(const Decoder *d, StrVec *t) {
    size_t cl = strlen(d->content);
    for (size_t i = 0; i < t->n; i++) {
        char *s = t->v[i];
        size_t len = strlen(s), a = 0, b = len;
        for (int k = 0; k < d->start && a + cl <= len && !memcmp(s + a, d->content, cl); k++) a += cl;
        for (int k = 0; k < d->stop && b >= a + cl && !memcmp(s + b - cl, d->content, cl); k++) b -= cl;
        memmove(s, s + a, b - a);
        s[b - a] = 0;
    }
}

static void dec_replace(const Decoder *d, StrVec *t) {
    EncodeCtx ctx = {0};
    Err e = {0};
    for (size_t i = 0; i < t->n; i++) {
        const char *s = t->v[i];
        size_t len = strlen(s);
        if (tokre_find_all(&d->re, s, len, &ctx, &e) != ST_OK) continue;  // a match-limit failure keeps the token
        StrBuf sb = {0};
        sb_puts(&sb, "");
        size_t prev = 0;
        for (size_t k = 0; k < ctx.spans.n; k++) {
            sb_append(&sb, s + prev, ctx.spans.v[k].start - prev);
            sb_puts(&sb, d->content);
            prev = ctx.spans.v[k].end;
        }
        sb_append(&sb, s + prev, len - prev);
        replace_token(t, i, sb_take(&sb));
    }
    if (ctx.md) pcre2_match_data_free(ctx.md);
    free(ctx.spans.v);
}

void decoder_apply(const Decoder *d, StrVec *t) {
    switch (d->kind) {
    case DEC_BYTELEVEL: dec_bytelevel(t); break;
    case DEC_METASPACE: dec_metaspace(d, t); break;
    case DEC_BYTEFALLBACK: dec_bytefallback(t); break;
    case DEC_FUSE: dec_fuse(t); break;
    case DEC_STRIP: dec_strip(d, t); break;
    case DEC_REPLACE: dec_replace(d, t); break;
    case DEC_SEQUENCE:
        for (int i = 0; i < d->n_children; i++) decoder_apply(d->children[i], t);
        break;
    }
}
