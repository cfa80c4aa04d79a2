// chat_value.c: template values with Python semantics: reference counting, str(), repr(),
// json.dumps(ensure_ascii=False), equality, ordering and truthiness.
#include "chat_internal.h"

#include <math.h>
#include <string.h>
#include <utf8proc.h>

#define CV_MAX_NEST 512   // repr / json of deeper structures (or of cycles) is an error

// ---------------------------------------------------------------- UTF-8
uint32_t chat_utf8_decode(const char *s, size_t n, size_t *adv) {
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) { *adv = 0; return 0; }
    if (u[0] < 0x80) { *adv = 1; return u[0]; }
    int len = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 1;
    if (len == 1 || (size_t)len > n) { *adv = 1; return 0xFFFD; }
    uint32_t cp = u[0] & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) { *adv = 1; return 0xFFFD; }
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    *adv = (size_t)len;
    return cp;
}

void chat_utf8_encode(StrBuf *sb, uint32_t cp) {
    char b[4];
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x80) { b[0] = (char)cp; sb_append(sb, b, 1); }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 0x3F)); sb_append(sb, b, 2); }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[2] = (char)(0x80 | (cp & 0x3F));
        sb_append(sb, b, 3);
    } else {
        b[0] = (char)(0xF0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F));
        sb_append(sb, b, 4);
    }
}

int uni_isspace(uint32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85) return 1;
    if (cp < 0x80) return 0;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

// ---------------------------------------------------------------- construction, reference counts
CVal cv_str(const char *s, size_t n) {
    CHECK(n < ((size_t)1 << 40));
    CStr *p = xmalloc(sizeof(CStr) + n + 1);
    p->refs = 1;
    p->len = n;
    p->nchars = SIZE_MAX;
    if (n) memcpy(p->data, s, n);
    p->data[n] = 0;
    CVal v = {.t = CV_STR};
    v.s = p;
    return v;
}

CVal cv_cstr(const char *s) { return cv_str(s, strlen(s)); }

CVal cv_str_take(StrBuf *sb) {
    CVal v = cv_str(sb->data ? sb->data : "", sb->len);
    sb_free(sb);
    return v;
}

CVal cv_list(size_t cap) {
    CList *l = xcalloc(1, sizeof(CList));
    l->refs = 1;
    if (cap) { l->items = xmalloc(cap * sizeof(CVal)); l->cap = cap; }
    CVal v = {.t = CV_LIST};
    v.l = l;
    return v;
}

static CVal dict_new(CvType t) {
    CDict *d = xcalloc(1, sizeof(CDict));
    d->refs = 1;
    CVal v = {.t = t};
    v.d = d;
    return v;
}
CVal cv_dict(void) { return dict_new(CV_DICT); }
CVal cv_ns(void) { return dict_new(CV_NS); }

CVal cv_func(CFuncKind kind, const char *name) {
    CFunc *f = xcalloc(1, sizeof(CFunc));
    f->refs = 1;
    f->kind = kind;
    f->name = name;
    CVal v = {.t = CV_FUNC};
    v.fn = f;
    return v;
}

CVal cv_retain(CVal v) {
    switch (v.t) {
    case CV_STR: v.s->refs++; break;
    case CV_LIST: v.l->refs++; break;
    case CV_DICT: case CV_NS: v.d->refs++; break;
    case CV_LOOP: v.loop->refs++; break;
    case CV_FUNC: v.fn->refs++; break;
    default: break;
    }
    return v;
}

void cv_release(CVal v) {
    switch (v.t) {
    case CV_STR:
        if (--v.s->refs == 0) free(v.s);
        break;
    case CV_LIST:
        if (--v.l->refs == 0) {
            for (size_t i = 0; i < v.l->n; i++) cv_release(v.l->items[i]);
            free(v.l->items);
            free(v.l);
        }
        break;
    case CV_DICT: case CV_NS:
        if (--v.d->refs == 0) {
            for (size_t i = 0; i < v.d->n; i++) { cv_release(v.d->keys[i]); cv_release(v.d->vals[i]); }
            free(v.d->keys);
            free(v.d->vals);
            free(v.d);
        }
        break;
    case CV_LOOP:
        if (--v.loop->refs == 0) {
            if (v.loop->items) { CVal l = {.t = CV_LIST}; l.l = v.loop->items; cv_release(l); }
            free(v.loop);
        }
        break;
    case CV_FUNC:
        if (--v.fn->refs == 0) {
            cv_release(v.fn->self);
            free(v.fn);
        }
        break;
    default: break;
    }
}

void cv_list_push(CVal list, CVal item) {
    CList *l = list.l;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->items = xrealloc(l->items, l->cap * sizeof(CVal));
    }
    l->items[l->n++] = item;
}

static ssize_t dict_find(const CDict *d, CVal key) {
    for (size_t i = 0; i < d->n; i++)
        if (cv_equal(d->keys[i], key)) return (ssize_t)i;
    return -1;
}

void cv_dict_set(CVal dict, CVal key, CVal val) {
    CDict *d = dict.d;
    ssize_t i = dict_find(d, key);
    if (i >= 0) {
        cv_release(key);
        cv_release(d->vals[i]);
        d->vals[i] = val;
        return;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 4;
        d->keys = xrealloc(d->keys, d->cap * sizeof(CVal));
        d->vals = xrealloc(d->vals, d->cap * sizeof(CVal));
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
}

CVal *cv_dict_get(CVal dict, CVal key) {
    ssize_t i = dict_find(dict.d, key);
    return i < 0 ? NULL : &dict.d->vals[i];
}

CVal *cv_dict_get_str(CVal dict, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < dict.d->n; i++) {
        CVal k = dict.d->keys[i];
        if (k.t == CV_STR && k.s->len == n && !memcmp(k.s->data, key, n)) return &dict.d->vals[i];
    }
    return NULL;
}

size_t cv_str_nchars(CStr *s) {
    if (s->nchars == SIZE_MAX) {
        size_t n = 0;
        for (size_t i = 0; i < s->len; i++)
            if (((unsigned char)s->data[i] & 0xC0) != 0x80) n++;
        s->nchars = n;
    }
    return s->nchars;
}

// ---------------------------------------------------------------- predicates
int cv_truthy(CVal v) {
    switch (v.t) {
    case CV_UNDEF: case CV_NONE: return 0;
    case CV_BOOL: return v.b;
    case CV_INT: return v.i != 0;
    case CV_FLOAT: return v.f != 0.0;
    case CV_STR: return v.s->len != 0;
    case CV_LIST: return v.l->is_tuple == CL_ITER || v.l->n != 0;
    case CV_DICT: return v.d->n != 0;
    default: return 1;
    }
}

int cv_is_num(CVal v) { return v.t == CV_INT || v.t == CV_FLOAT || v.t == CV_BOOL; }

double cv_as_double(CVal v) {
    return v.t == CV_FLOAT ? v.f : v.t == CV_INT ? (double)v.i : v.t == CV_BOOL ? (double)v.b : 0.0;
}

const char *cv_type_name(CVal v) {
    switch (v.t) {
    case CV_UNDEF: return "Undefined";
    case CV_NONE: return "NoneType";
    case CV_BOOL: return "bool";
    case CV_INT: return "int";
    case CV_FLOAT: return "float";
    case CV_STR: return "str";
    case CV_LIST: return v.l->is_tuple == CL_TUPLE ? "tuple" : v.l->is_tuple == CL_ITER ? "generator" : "list";
    case CV_DICT: return "dict";
    case CV_NS: return "Namespace";
    case CV_LOOP: return "LoopContext";
    case CV_FUNC: return v.fn->kind == CF_MACRO || v.fn->kind == CF_CALLER ? "Macro" : "builtin_function_or_method";
    }
    return "object";
}

static int num_equal(CVal a, CVal b) {
    if (a.t != CV_FLOAT && b.t != CV_FLOAT) {
        int64_t x = a.t == CV_BOOL ? a.b : a.i, y = b.t == CV_BOOL ? b.b : b.i;
        return x == y;
    }
    return cv_as_double(a) == cv_as_double(b);
}

int cv_equal(CVal a, CVal b) {
    if (cv_is_num(a) && cv_is_num(b)) return num_equal(a, b);
    if (a.t != b.t) return 0;
    switch (a.t) {
    case CV_UNDEF: case CV_NONE: return 1;
    case CV_STR: return a.s->len == b.s->len && !memcmp(a.s->data, b.s->data, a.s->len);
    case CV_LIST:
        if (a.l->is_tuple == CL_ITER || b.l->is_tuple == CL_ITER) return a.l == b.l;
        if (a.l->is_tuple != b.l->is_tuple || a.l->n != b.l->n) return 0;
        for (size_t i = 0; i < a.l->n; i++)
            if (!cv_equal(a.l->items[i], b.l->items[i])) return 0;
        return 1;
    case CV_DICT:
        if (a.d->n != b.d->n) return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            CVal *o = cv_dict_get(b, a.d->keys[i]);
            if (!o || !cv_equal(a.d->vals[i], *o)) return 0;
        }
        return 1;
    case CV_NS: return a.d == b.d;
    case CV_LOOP: return a.loop == b.loop;
    case CV_FUNC: return a.fn == b.fn;
    default: return 0;
    }
}

Status cv_compare(CVal a, CVal b, int *out, Err *e) {
    if (cv_is_num(a) && cv_is_num(b)) {
        if (a.t != CV_FLOAT && b.t != CV_FLOAT) {
            int64_t x = a.t == CV_BOOL ? a.b : a.i, y = b.t == CV_BOOL ? b.b : b.i;
            *out = x < y ? -1 : x > y;
        } else {
            double x = cv_as_double(a), y = cv_as_double(b);
            *out = x < y ? -1 : x > y ? 1 : 0;   // NaN compares as equal here; Python says False both ways
        }
        return ST_OK;
    }
    if (a.t == CV_STR && b.t == CV_STR) {
        size_t n = MIN(a.s->len, b.s->len);
        int c = memcmp(a.s->data, b.s->data, n);
        *out = c < 0 ? -1 : c > 0 ? 1 : a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
        return ST_OK;
    }
    if (a.t == CV_LIST && b.t == CV_LIST && a.l->is_tuple == b.l->is_tuple && a.l->is_tuple != CL_ITER) {
        size_t n = MIN(a.l->n, b.l->n);
        for (size_t i = 0; i < n; i++) {
            if (cv_equal(a.l->items[i], b.l->items[i])) continue;
            return cv_compare(a.l->items[i], b.l->items[i], out, e);
        }
        *out = a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
        return ST_OK;
    }
    return err_set(e, ST_EINVAL, "'<' not supported between instances of '%s' and '%s'", cv_type_name(a),
                   cv_type_name(b));
}

// ---------------------------------------------------------------- str / repr
void cv_format_float(StrBuf *sb, double f) {
    if (isnan(f)) { sb_puts(sb, "nan"); return; }
    if (isinf(f)) { sb_puts(sb, f < 0 ? "-inf" : "inf"); return; }
    char buf[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    // buf: [-]d[.ddd]e[+-]XX
    char digits[32];
    int nd = 0, neg = 0;
    const char *p = buf;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1;
    if (neg) sb_putc(sb, '-');
    if (decpt <= -4 || decpt > 16) {
        sb_putc(sb, digits[0]);
        if (nd > 1) { sb_putc(sb, '.'); sb_append(sb, digits + 1, (size_t)nd - 1); }
        sb_printf(sb, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        sb_puts(sb, "0.");
        for (int i = 0; i < -decpt; i++) sb_putc(sb, '0');
        sb_append(sb, digits, (size_t)nd);
    } else if (decpt >= nd) {
        sb_append(sb, digits, (size_t)nd);
        for (int i = nd; i < decpt; i++) sb_putc(sb, '0');
        sb_puts(sb, ".0");
    } else {
        sb_append(sb, digits, (size_t)decpt);
        sb_putc(sb, '.');
        sb_append(sb, digits + decpt, (size_t)(nd - decpt));
    }
}

static int uni_isprintable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7F) return 0;
    if (cp < 0x7F) return 1;
    if (cp == 0xFFFD) return 1;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    switch (c) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return cp == ' ';
    default: return 1;
    }
}

static void repr_str(StrBuf *sb, const char *s, size_t n) {
    char q = '\'';
    if (memchr(s, '\'', n) && !memchr(s, '"', n)) q = '"';
    sb_putc(sb, q);
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = chat_utf8_decode(s + i, n - i, &adv);
        if (cp == (uint32_t)q || cp == '\\') { sb_putc(sb, '\\'); sb_putc(sb, (char)cp); }
        else if (cp == '\n') sb_puts(sb, "\\n");
        else if (cp == '\r') sb_puts(sb, "\\r");
        else if (cp == '\t') sb_puts(sb, "\\t");
        else if (uni_isprintable(cp)) sb_append(sb, s + i, adv);
        else if (cp < 0x100) sb_printf(sb, "\\x%02x", cp);
        else if (cp < 0x10000) sb_printf(sb, "\\u%04x", cp);
        else sb_printf(sb, "\\U%08x", cp);
        i += adv;
    }
    sb_putc(sb, q);
}

static Status repr_at(StrBuf *sb, CVal v, int depth, Err *e);

static Status str_at(StrBuf *sb, CVal v, int depth, Err *e) {
    switch (v.t) {
    case CV_UNDEF: return ST_OK;
    case CV_STR: sb_append(sb, v.s->data, v.s->len); return ST_OK;
    default: return repr_at(sb, v, depth, e);
    }
}

static Status repr_at(StrBuf *sb, CVal v, int depth, Err *e) {
    if (depth > CV_MAX_NEST) return err_set(e, ST_EINVAL, "value nested deeper than %d levels (or a cycle)", CV_MAX_NEST);
    switch (v.t) {
    case CV_UNDEF: sb_puts(sb, "Undefined"); break;
    case CV_NONE: sb_puts(sb, "None"); break;
    case CV_BOOL: sb_puts(sb, v.b ? "True" : "False"); break;
    case CV_INT: sb_printf(sb, "%lld", (long long)v.i); break;
    case CV_FLOAT: cv_format_float(sb, v.f); break;
    case CV_STR: repr_str(sb, v.s->data, v.s->len); break;
    case CV_LIST:
        if (v.l->is_tuple == CL_ITER) { sb_puts(sb, "<generator object>"); break; }
        sb_putc(sb, v.l->is_tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) sb_puts(sb, ", ");
            TRY(repr_at(sb, v.l->items[i], depth + 1, e));
        }
        if (v.l->is_tuple && v.l->n == 1) sb_putc(sb, ',');
        sb_putc(sb, v.l->is_tuple ? ')' : ']');
        break;
    case CV_DICT: case CV_NS:
        if (v.t == CV_NS) sb_puts(sb, "<Namespace ");
        sb_putc(sb, '{');
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) sb_puts(sb, ", ");
            TRY(repr_at(sb, v.d->keys[i], depth + 1, e));
            sb_puts(sb, ": ");
            TRY(repr_at(sb, v.d->vals[i], depth + 1, e));
        }
        sb_putc(sb, '}');
        if (v.t == CV_NS) sb_putc(sb, '>');
        break;
    case CV_LOOP: sb_printf(sb, "<LoopContext %lld/%lld>", (long long)v.loop->index0 + 1, (long long)v.loop->length); break;
    case CV_FUNC: sb_printf(sb, "<%s %s>", v.fn->kind == CF_MACRO ? "Macro" : "function", v.fn->name ? v.fn->name : "?"); break;
    }
    return ST_OK;
}

Status cv_to_str(StrBuf *sb, CVal v, Err *e) { return str_at(sb, v, 0, e); }
Status cv_repr(StrBuf *sb, CVal v, Err *e) { return repr_at(sb, v, 0, e); }

// ---------------------------------------------------------------- json.dumps
static void json_str(StrBuf *sb, const char *s, size_t n, int ascii) {
    sb_putc(sb, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': sb_puts(sb, "\\\""); i++; continue;
        case '\\': sb_puts(sb, "\\\\"); i++; continue;
        case '\n': sb_puts(sb, "\\n"); i++; continue;
        case '\r': sb_puts(sb, "\\r"); i++; continue;
        case '\t': sb_puts(sb, "\\t"); i++; continue;
        case '\b': sb_puts(sb, "\\b"); i++; continue;
        case '\f': sb_puts(sb, "\\f"); i++; continue;
        default: break;
        }
        if (c < 0x20) { sb_printf(sb, "\\u%04x", c); i++; continue; }
        if (c < 0x80 || !ascii) { sb_putc(sb, (char)c); i++; continue; }
        size_t adv;
        uint32_t cp = chat_utf8_decode(s + i, n - i, &adv);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            sb_printf(sb, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
        } else {
            sb_printf(sb, "\\u%04x", cp);
        }
        i += adv;
    }
    sb_putc(sb, '"');
}

static void json_newline(StrBuf *sb, const JsonOpts *o, int level) {
    sb_putc(sb, '\n');
    for (int i = 0; i < level; i++) sb_puts(sb, o->indent);
}

static Status json_key(StrBuf *sb, CVal k, const JsonOpts *o, Err *e) {
    switch (k.t) {
    case CV_STR: json_str(sb, k.s->data, k.s->len, o->ensure_ascii); return ST_OK;
    case CV_INT: sb_printf(sb, "\"%lld\"", (long long)k.i); return ST_OK;
    case CV_BOOL: sb_puts(sb, k.b ? "\"true\"" : "\"false\""); return ST_OK;
    case CV_NONE: sb_puts(sb, "\"null\""); return ST_OK;
    case CV_FLOAT: sb_putc(sb, '"'); cv_format_float(sb, k.f); sb_putc(sb, '"'); return ST_OK;
    default: return err_set(e, ST_EINVAL, "keys must be str, int, float, bool or None, not %s", cv_type_name(k));
    }
}

static int key_order(const void *pa, const void *pb, void *ctx) {
    const CVal *keys = ctx;
    const CVal *a = &keys[*(const size_t *)pa], *b = &keys[*(const size_t *)pb];
    int c = 0;
    Err e;
    if (cv_compare(*a, *b, &c, &e) != ST_OK) c = 0;
    return c;
}

static Status json_at(StrBuf *sb, CVal v, const JsonOpts *o, int level, Err *e) {
    if (level > CV_MAX_NEST) return err_set(e, ST_EINVAL, "value nested deeper than %d levels (or a cycle)", CV_MAX_NEST);
    const char *isep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    switch (v.t) {
    case CV_NONE: sb_puts(sb, "null"); return ST_OK;
    case CV_BOOL: sb_puts(sb, v.b ? "true" : "false"); return ST_OK;
    case CV_INT: sb_printf(sb, "%lld", (long long)v.i); return ST_OK;
    case CV_FLOAT:
        if (isnan(v.f)) sb_puts(sb, "NaN");
        else if (isinf(v.f)) sb_puts(sb, v.f < 0 ? "-Infinity" : "Infinity");
        else cv_format_float(sb, v.f);
        return ST_OK;
    case CV_STR: json_str(sb, v.s->data, v.s->len, o->ensure_ascii); return ST_OK;
    case CV_LIST:
        if (v.l->is_tuple == CL_ITER) break;
        if (v.l->n == 0) { sb_puts(sb, "[]"); return ST_OK; }
        sb_putc(sb, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) sb_puts(sb, isep);
            if (o->indent) json_newline(sb, o, level + 1);
            TRY(json_at(sb, v.l->items[i], o, level + 1, e));
        }
        if (o->indent) json_newline(sb, o, level);
        sb_putc(sb, ']');
        return ST_OK;
    case CV_DICT: {
        if (v.d->n == 0) { sb_puts(sb, "{}"); return ST_OK; }
        size_t *order = xmalloc(v.d->n * sizeof(size_t));
        for (size_t i = 0; i < v.d->n; i++) order[i] = i;
        if (o->sort_keys) qsort_r(order, v.d->n, sizeof(size_t), key_order, v.d->keys);
        sb_putc(sb, '{');
        Status st = ST_OK;
        for (size_t j = 0; j < v.d->n && st == ST_OK; j++) {
            size_t i = order[j];
            if (j) sb_puts(sb, isep);
            if (o->indent) json_newline(sb, o, level + 1);
            st = json_key(sb, v.d->keys[i], o, e);
            if (st == ST_OK) {
                sb_puts(sb, ksep);
                st = json_at(sb, v.d->vals[i], o, level + 1, e);
            }
        }
        free(order);
        if (st != ST_OK) return st;
        if (o->indent) json_newline(sb, o, level);
        sb_putc(sb, '}');
        return ST_OK;
    }
    default: break;
    }
    return err_set(e, ST_EINVAL, "Object of type %s is not JSON serializable", v.t == CV_LIST ? "generator" : cv_type_name(v));
}

Status cv_to_json(StrBuf *sb, CVal v, const JsonOpts *o, Err *e) { return json_at(sb, v, o, 0, e); }

// ---------------------------------------------------------------- cJSON -> values
CVal cv_from_cjson(const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return cv_none();
    if (cJSON_IsTrue(j)) return cv_bool(1);
    if (cJSON_IsFalse(j)) return cv_bool(0);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) return cv_int((int64_t)d);
        return cv_float(d);
    }
    if (cJSON_IsString(j)) return cv_cstr(j->valuestring ? j->valuestring : "");
    if (cJSON_IsArray(j)) {
        CVal l = cv_list((size_t)cJSON_GetArraySize(j));
        for (const cJSON *c = j->child; c; c = c->next) cv_list_push(l, cv_from_cjson(c));
        return l;
    }
    if (cJSON_IsObject(j)) {
        CVal d = cv_dict();
        for (const cJSON *c = j->child; c; c = c->next) cv_dict_set(d, cv_cstr(c->string ? c->string : ""), cv_from_cjson(c));
        return d;
    }
    return cv_none();
}
