// chat_json.c: JSON text -> template values with Python json.loads rules: a number with a
// fraction or exponent is a float, otherwise an int; NaN / Infinity accepted; the last of
// duplicate keys wins, in the position of the first.
#include "chat_internal.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define JSON_MAX_DEPTH 1000

typedef struct JP {
    const char *s, *p;
    const char *what;
    Err *e;
} JP;

static Status jp_fail(JP *j, const char *msg) {
    int line = 1, col = 1;
    for (const char *q = j->s; q < j->p; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    return err_set(j->e, ST_EINVAL, "%s: invalid JSON at line %d column %d: %s", j->what, line, col, msg);
}

static void jp_ws(JP *j) {
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++;
}

static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static Status jp_string(JP *j, CVal *out) {
    StrBuf sb = {0};
    j->p++;
    for (;;) {
        unsigned char c = (unsigned char)*j->p;
        if (c == 0) { sb_free(&sb); return jp_fail(j, "unterminated string"); }
        if (c == '"') { j->p++; break; }
        if (c < 0x20) { sb_free(&sb); return jp_fail(j, "control character in string"); }
        if (c != '\\') { sb_putc(&sb, (char)c); j->p++; continue; }
        char x = j->p[1];
        j->p += 2;
        switch (x) {
        case '"': sb_putc(&sb, '"'); break;
        case '\\': sb_putc(&sb, '\\'); break;
        case '/': sb_putc(&sb, '/'); break;
        case 'b': sb_putc(&sb, '\b'); break;
        case 'f': sb_putc(&sb, '\f'); break;
        case 'n': sb_putc(&sb, '\n'); break;
        case 'r': sb_putc(&sb, '\r'); break;
        case 't': sb_putc(&sb, '\t'); break;
        case 'u': {
            uint32_t cp, lo;
            if (!hex4(j->p, &cp)) { sb_free(&sb); return jp_fail(j, "bad \\u escape"); }
            j->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && j->p[0] == '\\' && j->p[1] == 'u' && hex4(j->p + 2, &lo) &&
                lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                j->p += 6;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD;   // a lone surrogate cannot be UTF-8
            }
            chat_utf8_encode(&sb, cp);
            break;
        }
        default: sb_free(&sb); j->p--; return jp_fail(j, "bad escape");
        }
    }
    *out = cv_str_take(&sb);
    return ST_OK;
}

static Status jp_number(JP *j, CVal *out) {
    const char *st = j->p;
    int is_float = 0;
    if (*j->p == '-') j->p++;
    if (!strncmp(j->p, "Infinity", 8)) {
        j->p += 8;
        *out = cv_float(*st == '-' ? -INFINITY : INFINITY);
        return ST_OK;
    }
    if (*j->p < '0' || *j->p > '9') return jp_fail(j, "expected a value");
    if (*j->p == '0' && j->p[1] >= '0' && j->p[1] <= '9') return jp_fail(j, "leading zero");
    while (*j->p >= '0' && *j->p <= '9') j->p++;
    if (*j->p == '.') {
        is_float = 1;
        j->p++;
        if (*j->p < '0' || *j->p > '9') return jp_fail(j, "expected digits after '.'");
        while (*j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (*j->p == 'e' || *j->p == 'E') {
        is_float = 1;
        j->p++;
        if (*j->p == '+' || *j->p == '-') j->p++;
        if (*j->p < '0' || *j->p > '9') return jp_fail(j, "expected exponent digits");
        while (*j->p >= '0' && *j->p <= '9') j->p++;
    }
    char buf[400];
    size_t n = (size_t)(j->p - st);
    if (n >= sizeof buf) return jp_fail(j, "number too long");
    memcpy(buf, st, n);
    buf[n] = 0;
    if (is_float) {
        *out = cv_float(strtod(buf, NULL));
        return ST_OK;
    }
    errno = 0;
    long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return jp_fail(j, "integer outside the 64-bit range");
    *out = cv_int(v);
    return ST_OK;
}

static Status jp_value(JP *j, CVal *out, int depth);

static Status jp_array(JP *j, CVal *out, int depth) {
    CVal l = cv_list(0);
    j->p++;
    jp_ws(j);
    if (*j->p == ']') { j->p++; *out = l; return ST_OK; }
    for (;;) {
        CVal v;
        Status st = jp_value(j, &v, depth + 1);
        if (st != ST_OK) { cv_release(l); return st; }
        cv_list_push(l, v);
        jp_ws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == ']') { j->p++; break; }
        cv_release(l);
        return jp_fail(j, "expected ',' or ']'");
    }
    *out = l;
    return ST_OK;
}

static Status jp_object(JP *j, CVal *out, int depth) {
    CVal d = cv_dict();
    j->p++;
    jp_ws(j);
    if (*j->p == '}') { j->p++; *out = d; return ST_OK; }
    for (;;) {
        jp_ws(j);
        if (*j->p != '"') { cv_release(d); return jp_fail(j, "expected a string key"); }
        CVal k, v;
        Status st = jp_string(j, &k);
        if (st != ST_OK) { cv_release(d); return st; }
        jp_ws(j);
        if (*j->p != ':') { cv_release(k); cv_release(d); return jp_fail(j, "expected ':'"); }
        j->p++;
        st = jp_value(j, &v, depth + 1);
        if (st != ST_OK) { cv_release(k); cv_release(d); return st; }
        cv_dict_set(d, k, v);
        jp_ws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == '}') { j->p++; break; }
        cv_release(d);
        return jp_fail(j, "expected ',' or '}'");
    }
    *out = d;
    return ST_OK;
}

static Status jp_value(JP *j, CVal *out, int depth) {
    if (depth > JSON_MAX_DEPTH) return jp_fail(j, "nested too deeply");
    jp_ws(j);
    switch (*j->p) {
    case '{': return jp_object(j, out, depth);
    case '[': return jp_array(j, out, depth);
    case '"': return jp_string(j, out);
    case 't': if (!strncmp(j->p, "true", 4)) { j->p += 4; *out = cv_bool(1); return ST_OK; } break;
    case 'f': if (!strncmp(j->p, "false", 5)) { j->p += 5; *out = cv_bool(0); return ST_OK; } break;
    case 'n': if (!strncmp(j->p, "null", 4)) { j->p += 4; *out = cv_none(); return ST_OK; } break;
    case 'N': if (!strncmp(j->p, "NaN", 3)) { j->p += 3; *out = cv_float(NAN); return ST_OK; } break;
    default: return jp_number(j, out);
    }
    return jp_fail(j, "expected a value");
}

Status cv_from_json_text(const char *text, const char *what, CVal *out, Err *e) {
    JP j = {.s = text, .p = text, .what = what, .e = e};
    CVal v;
    TRY(jp_value(&j, &v, 0));
    jp_ws(&j);
    if (*j.p) { cv_release(v); return jp_fail(&j, "extra data after the value"); }
    *out = v;
    return ST_OK;
}
