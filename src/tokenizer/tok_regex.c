// tok_regex.c: tokenizer.json patterns on PCRE2.
//
// tokenizers compiles patterns with Oniguruma (Ruby syntax). PCRE2 with UTF + UCP agrees on
// \p{..}, (?i:..), lookarounds and quantifiers; the class escapes differ, so they are rewritten:
//   \s  Oniguruma: U+0009-000D, U+0085, Zs/Zl/Zp   (PCRE2 lacks U+0085)
//   \w  Oniguruma: L, M, Nd, Pc                    (PCRE2: L, N, '_')
//   \h  Oniguruma: a hex digit                     (PCRE2: horizontal space)
//   \uHHHH                                         (PCRE2: \x{HHHH})
// and ^ / $ are line anchors, as in Ruby. Nested classes and && are refused.
// Iteration follows the onig crate's find_iter: an empty match right after the previous match is
// skipped by advancing one character.
#include "tok_internal.h"

#include "unicode.h"

#include <string.h>

#define ONIG_SPACE "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}"
#define ONIG_WORD "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"
#define ONIG_HEX "0-9a-fA-F"

static void put_class(StrBuf *sb, const char *body, int in_class, int negate) {
    if (in_class) {
        sb_puts(sb, body);
        return;
    }
    sb_puts(sb, negate ? "[^" : "[");
    sb_puts(sb, body);
    sb_putc(sb, ']');
}

char *tokre_translate(const char *p, Err *e) {
    StrBuf sb = {0};
    int in_class = 0;
    size_t n = strlen(p);
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            switch (d) {
            case 's': put_class(&sb, ONIG_SPACE, in_class, 0); continue;
            case 'w': put_class(&sb, ONIG_WORD, in_class, 0); continue;
            case 'h': put_class(&sb, ONIG_HEX, in_class, 0); continue;
            case 'S':
            case 'W':
            case 'H':
                if (in_class) {
                    if (d == 'H') {
                        free(sb.data);
                        err_set(e, ST_EUNSUPPORTED, "regex /%s/: \\H inside a character class is not supported", p);
                        return NULL;
                    }
                    sb_putc(&sb, '\\');  // PCRE2's own \S / \W: differs from Oniguruma only at the edges
                    sb_putc(&sb, d);
                } else {
                    put_class(&sb, d == 'S' ? ONIG_SPACE : d == 'W' ? ONIG_WORD : ONIG_HEX, 0, 1);
                }
                continue;
            case 'u':
                if (i + 4 < n + 0 && strspn(p + i + 1, "0123456789abcdefABCDEF") >= 4) {
                    sb_printf(&sb, "\\x{%.4s}", p + i + 1);
                    i += 4;
                    continue;
                }
                break;
            default: break;
            }
            sb_putc(&sb, '\\');
            int l = utf8_seq_len((unsigned char)d);
            sb_append(&sb, p + i, (size_t)l);
            i += (size_t)l - 1;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            sb_putc(&sb, c);
            if (p[i + 1] == '^') sb_putc(&sb, p[++i]);
            if (p[i + 1] == ']') sb_putc(&sb, p[++i]);
            continue;
        }
        if (in_class && c == '[') {
            if (p[i + 1] == ':') {
                const char *end = strstr(p + i, ":]");
                if (end) {
                    sb_append(&sb, p + i, (size_t)(end + 2 - (p + i)));
                    i = (size_t)(end + 1 - p);
                    continue;
                }
            }
            free(sb.data);
            err_set(e, ST_EUNSUPPORTED, "regex /%s/: nested character classes are not supported", p);
            return NULL;
        }
        if (in_class && c == '&' && p[i + 1] == '&') {
            free(sb.data);
            err_set(e, ST_EUNSUPPORTED, "regex /%s/: class intersection (&&) is not supported", p);
            return NULL;
        }
        if (in_class && c == ']') in_class = 0;
        sb_putc(&sb, c);
    }
    if (!sb.data) return xstrdup("");
    return sb_take(&sb);
}

Status tokre_compile_regex(const char *pattern, const char *what, TokRegex *re, Err *e) {
    memset(re, 0, sizeof *re);
    char *tr = tokre_translate(pattern, e);
    if (!tr) return err_prefix(e, "%s: ", what);
    int errcode;
    PCRE2_SIZE erroff;
    re->code = pcre2_compile((PCRE2_SPTR)tr, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE,
                             &errcode, &erroff, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        err_set(e, ST_EINVAL, "%s: regex /%s/ does not compile (as /%s/ at offset %zu): %s", what, pattern, tr,
                (size_t)erroff, (char *)msg);
        free(tr);
        return ST_EINVAL;
    }
    free(tr);
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // without JIT support pcre2_match interprets
    return ST_OK;
}

Status tokre_compile(const cJSON *pattern, const char *what, TokRegex *re, Err *e) {
    memset(re, 0, sizeof *re);
    if (!cJSON_IsObject(pattern))
        return err_set(e, ST_EINVAL, "%s: \"pattern\" must be an object {\"String\": ...} or {\"Regex\": ...}", what);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(pattern, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
    if (cJSON_IsString(s)) {
        re->literal = xstrdup(s->valuestring);
        re->lit_len = strlen(s->valuestring);
        return ST_OK;
    }
    if (cJSON_IsString(r)) return tokre_compile_regex(r->valuestring, what, re, e);
    return err_set(e, ST_EINVAL, "%s: \"pattern\" must hold a \"String\" or a \"Regex\"", what);
}

void tokre_free(TokRegex *re) {
    if (re->code) pcre2_code_free(re->code);
    free(re->literal);
    memset(re, 0, sizeof *re);
}

static void span_push(SpanVec *sv, size_t a, size_t b) {
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 64;
        sv->v = xrealloc(sv->v, sv->cap * sizeof *sv->v);
    }
    sv->v[sv->n++] = (Span){a, b};
}

Status tokre_find_all(const TokRegex *re, const char *s, size_t len, EncodeCtx *ctx, Err *e) {
    ctx->spans.n = 0;
    if (!re->code) {
        if (re->lit_len == 0) return ST_OK;
        size_t pos = 0;
        while (pos + re->lit_len <= len) {
            const char *hit = memmem(s + pos, len - pos, re->literal, re->lit_len);
            if (!hit) break;
            size_t a = (size_t)(hit - s);
            span_push(&ctx->spans, a, a + re->lit_len);
            pos = a + re->lit_len;
        }
        return ST_OK;
    }
    if (!ctx->md) ctx->md = pcre2_match_data_create(64, NULL);
    size_t last_end = 0;
    size_t last_match_end = (size_t)-1;
    while (last_end <= len) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, last_end, PCRE2_NO_UTF_CHECK, ctx->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, ctx->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(e, ST_ERUNTIME, "regex match failed at byte %zu of a %zu-byte piece: %s", last_end, len,
                           (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(ctx->md);
        size_t a = ov[0], b = ov[1];
        if (a == b && last_match_end == b) {
            if (last_end >= len) break;
            last_end += (size_t)utf8_seq_len((unsigned char)s[last_end]);
            continue;
        }
        span_push(&ctx->spans, a, b);
        last_end = b;
        last_match_end = b;
    }
    return ST_OK;
}
