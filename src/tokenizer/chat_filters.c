// chat_filters.c: Jinja2's filters and tests, the globals transformers adds (raise_exception,
// strftime_now) next to Jinja's (range, namespace, dict), and the Python str / dict / list
// methods templates call. Filters that return generators in Jinja2 (map, select, reject,
// selectattr, rejectattr, unique, batch, items, reverse of a list) return CL_ITER lists: always
// true, no length, not subscriptable, as in Python.
#include "chat_internal.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <utf8proc.h>

// ---------------------------------------------------------------- argument helpers
// Argument `pos` (positional index) or keyword `name`, or NULL when absent.
static CVal *arg(CVal *args, size_t nargs, CVal kw, size_t pos, const char *name) {
    if (pos < nargs) return &args[pos];
    if (kw.t == CV_DICT && name) return cv_dict_get_str(kw, name);
    return NULL;
}

static Status check_kw(Interp *in, int line, const char *fn, CVal kw, const char *const *allowed) {
    if (kw.t != CV_DICT) return ST_OK;
    for (size_t i = 0; i < kw.d->n; i++) {
        int ok = 0;
        for (int j = 0; allowed && allowed[j]; j++)
            if (kw.d->keys[i].t == CV_STR && !strcmp(kw.d->keys[i].s->data, allowed[j])) ok = 1;
        if (!ok) return interp_error(in, line, "%s() got an unexpected keyword argument '%s'", fn,
                                     kw.d->keys[i].t == CV_STR ? kw.d->keys[i].s->data : "?");
    }
    return ST_OK;
}

static Status need_str(Interp *in, int line, const char *fn, CVal *v) {
    if (!v || v->t != CV_STR) return interp_error(in, line, "%s: expected a string argument, got %s", fn, v ? cv_type_name(*v) : "nothing");
    return ST_OK;
}

static Status need_int(Interp *in, int line, const char *fn, CVal *v, int64_t *out) {
    if (v && v->t == CV_INT) { *out = v->i; return ST_OK; }
    if (v && v->t == CV_BOOL) { *out = v->b; return ST_OK; }
    return interp_error(in, line, "%s: expected an integer argument, got %s", fn, v ? cv_type_name(*v) : "nothing");
}

static CVal make_iter(CVal list) {
    list.l->is_tuple = CL_ITER;
    return list;
}

static Status length_of(Interp *in, int line, CVal v, int64_t *out) {
    switch (v.t) {
    case CV_STR: *out = (int64_t)cv_str_nchars(v.s); return ST_OK;
    case CV_LIST:
        if (v.l->is_tuple == CL_ITER) break;
        *out = (int64_t)v.l->n;
        return ST_OK;
    case CV_DICT: *out = (int64_t)v.d->n; return ST_OK;
    case CV_UNDEF: *out = 0; return ST_OK;
    default: break;
    }
    return interp_error(in, line, "object of type '%s' has no len()", cv_type_name(v));
}

// ---------------------------------------------------------------- Unicode case helpers
typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_SWAP } CaseMode;

static int is_cased(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

// Python's str.upper / title use Unicode's full mappings where one character becomes several.
static int special_upper(StrBuf *sb, uint32_t cp, int title) {
    static const struct { uint32_t cp; const char *up, *tl; } T[] = {
        {0x00DF, "SS", "Ss"}, {0xFB00, "FF", "Ff"}, {0xFB01, "FI", "Fi"}, {0xFB02, "FL", "Fl"},
        {0xFB03, "FFI", "Ffi"}, {0xFB04, "FFL", "Ffl"}, {0xFB05, "ST", "St"}, {0xFB06, "ST", "St"},
        {0x0149, "\xCA\xBCN", "\xCA\xBCN"},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (T[i].cp == cp) { sb_puts(sb, title ? T[i].tl : T[i].up); return 1; }
    return 0;
}

static CVal change_case(CVal s, CaseMode mode) {
    StrBuf sb = {0};
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s.s->len;) {
        size_t adv;
        uint32_t cp = chat_utf8_decode(s.s->data + i, s.s->len - i, &adv), o = cp;
        int up = mode == CASE_UPPER || (mode == CASE_TITLE && !prev_cased) || (mode == CASE_CAPITALIZE && first) ||
                 (mode == CASE_SWAP && is_cased(cp) && utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_LL);
        if (up && special_upper(&sb, cp, mode == CASE_TITLE || mode == CASE_CAPITALIZE)) {
            if (mode == CASE_TITLE) prev_cased = 1;
            first = 0;
            i += adv;
            continue;
        }
        if (cp == 0x0130 && (mode == CASE_LOWER || (mode == CASE_TITLE && prev_cased) || (mode == CASE_CAPITALIZE && !first))) {
            sb_puts(&sb, "i\xCC\x87");   // İ lowers to i + combining dot above
            if (mode == CASE_TITLE) prev_cased = 1;
            first = 0;
            i += adv;
            continue;
        }
        switch (mode) {
        case CASE_UPPER: o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); break;
        case CASE_LOWER: o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); break;
        case CASE_TITLE:
            o = prev_cased ? (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
            prev_cased = is_cased(cp);
            break;
        case CASE_CAPITALIZE:
            o = first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            break;
        case CASE_SWAP: {
            uint32_t up = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp);
            o = up != cp ? up : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            break;
        }
        }
        chat_utf8_encode(&sb, o);
        first = 0;
        i += adv;
    }
    return cv_str_take(&sb);
}

// Code-point membership in a strip set (NULL: whitespace).
static int in_set(uint32_t cp, const CStr *set) {
    if (!set) return uni_isspace(cp);
    for (size_t i = 0; i < set->len;) {
        size_t adv;
        if (chat_utf8_decode(set->data + i, set->len - i, &adv) == cp) return 1;
        i += adv;
    }
    return 0;
}

static CVal strip(CVal s, const CStr *set, int left, int right) {
    size_t a = 0, b = s.s->len;
    if (left)
        while (a < b) {
            size_t adv;
            uint32_t cp = chat_utf8_decode(s.s->data + a, b - a, &adv);
            if (!in_set(cp, set)) break;
            a += adv;
        }
    if (right)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s.s->data[k] & 0xC0) == 0x80) k--;
            size_t adv;
            uint32_t cp = chat_utf8_decode(s.s->data + k, b - k, &adv);
            if (!in_set(cp, set)) break;
            b = k;
        }
    return cv_str(s.s->data + a, b - a);
}

static Status strip_set(Interp *in, int line, const char *fn, CVal *c, const CStr **set) {
    *set = NULL;
    if (!c || c->t == CV_NONE) return ST_OK;
    if (c->t != CV_STR) return interp_error(in, line, "%s arg must be None or str", fn);
    *set = c->s;
    return ST_OK;
}

static size_t ws_len_at(const char *s, size_t n) {
    size_t adv;
    uint32_t cp = chat_utf8_decode(s, n, &adv);
    return uni_isspace(cp) ? adv : 0;
}

// str.split / str.rsplit (sep NULL: runs of whitespace).
static Status split(Interp *in, int line, CVal s, CVal *sepv, CVal *maxv, int from_right, CVal *out) {
    int64_t maxsplit = -1;
    if (maxv && maxv->t != CV_NONE) TRY(need_int(in, line, "split", maxv, &maxsplit));
    const CStr *sep = NULL;
    if (sepv && sepv->t != CV_NONE) {
        TRY(need_str(in, line, "split", sepv));
        sep = sepv->s;
        if (sep->len == 0) return interp_error(in, line, "empty separator");
    }
    const char *d = s.s->data;
    size_t n = s.s->len;
    CVal parts = cv_list(0);
    if (!from_right) {
        size_t i = 0;
        if (!sep) {
            for (;;) {
                size_t w;
                while (i < n && (w = ws_len_at(d + i, n - i))) i += w;
                if (i >= n) break;
                size_t st = i;
                if (maxsplit >= 0 && (int64_t)parts.l->n >= maxsplit) {   // the rest, as is
                    cv_list_push(parts, cv_str(d + st, n - st));
                    break;
                }
                while (i < n && !ws_len_at(d + i, n - i)) {
                    size_t adv;
                    chat_utf8_decode(d + i, n - i, &adv);
                    i += adv;
                }
                cv_list_push(parts, cv_str(d + st, i - st));
            }
        } else {
            size_t st = 0;
            for (;;) {
                const char *hit = (maxsplit < 0 || (int64_t)parts.l->n < maxsplit) ? memmem(d + st, n - st, sep->data, sep->len) : NULL;
                if (!hit) { cv_list_push(parts, cv_str(d + st, n - st)); break; }
                cv_list_push(parts, cv_str(d + st, (size_t)(hit - (d + st))));
                st = (size_t)(hit - d) + sep->len;
            }
        }
        *out = parts;
        return ST_OK;
    }
    // rsplit: collect from the right, then reverse
    if (!sep) {
        size_t e = n;
        for (;;) {
            while (e > 0) {
                size_t k = e - 1;
                while (k > 0 && ((unsigned char)d[k] & 0xC0) == 0x80) k--;
                if (!ws_len_at(d + k, e - k)) break;
                e = k;
            }
            if (e == 0) break;
            if (maxsplit >= 0 && (int64_t)parts.l->n >= maxsplit) {   // the rest, as is
                cv_list_push(parts, cv_str(d, e));
                break;
            }
            size_t st = e;
            while (st > 0) {
                size_t k = st - 1;
                while (k > 0 && ((unsigned char)d[k] & 0xC0) == 0x80) k--;
                if (ws_len_at(d + k, st - k)) break;
                st = k;
            }
            cv_list_push(parts, cv_str(d + st, e - st));
            e = st;
        }
    } else {
        size_t e = n;
        for (;;) {
            const char *hit = NULL;
            if (maxsplit < 0 || (int64_t)parts.l->n < maxsplit)
                for (size_t k = e >= sep->len ? e - sep->len + 1 : 0; k-- > 0;)
                    if (!memcmp(d + k, sep->data, sep->len)) { hit = d + k; break; }
            if (!hit) { cv_list_push(parts, cv_str(d, e)); break; }
            size_t hs = (size_t)(hit - d);
            cv_list_push(parts, cv_str(d + hs + sep->len, e - hs - sep->len));
            e = hs;
        }
    }
    for (size_t i = 0, j = parts.l->n ? parts.l->n - 1 : 0; i < j; i++, j--) {
        CVal t = parts.l->items[i];
        parts.l->items[i] = parts.l->items[j];
        parts.l->items[j] = t;
    }
    *out = parts;
    return ST_OK;
}

static CVal replace(CVal s, const CStr *old, const CStr *new, int64_t count) {
    StrBuf sb = {0};
    const char *d = s.s->data;
    size_t n = s.s->len, i = 0;
    int64_t done = 0;
    if (old->len == 0) {   // Python inserts `new` between every character (and at both ends)
        for (;;) {
            if (count >= 0 && done >= count) { sb_append(&sb, d + i, n - i); break; }
            sb_append(&sb, new->data, new->len);
            done++;
            if (i >= n) break;
            size_t adv;
            chat_utf8_decode(d + i, n - i, &adv);
            sb_append(&sb, d + i, adv);
            i += adv;
        }
        return cv_str_take(&sb);
    }
    for (;;) {
        const char *hit = (count < 0 || done < count) ? memmem(d + i, n - i, old->data, old->len) : NULL;
        if (!hit) { sb_append(&sb, d + i, n - i); break; }
        sb_append(&sb, d + i, (size_t)(hit - (d + i)));
        sb_append(&sb, new->data, new->len);
        i = (size_t)(hit - d) + old->len;
        done++;
    }
    return cv_str_take(&sb);
}

// Python str.splitlines() boundaries.
static size_t line_break_at(const char *s, size_t n) {
    size_t adv;
    uint32_t cp = chat_utf8_decode(s, n, &adv);
    if (cp == '\r' && n > 1 && s[1] == '\n') return 2;
    if (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E || cp == 0x85 ||
        cp == 0x2028 || cp == 0x2029)
        return adv;
    return 0;
}

static CVal splitlines(CVal s) {
    CVal l = cv_list(0);
    const char *d = s.s->data;
    size_t n = s.s->len, st = 0, i = 0;
    while (i < n) {
        size_t b = line_break_at(d + i, n - i);
        if (b) {
            cv_list_push(l, cv_str(d + st, i - st));
            i += b;
            st = i;
        } else {
            size_t adv;
            chat_utf8_decode(d + i, n - i, &adv);
            i += adv;
        }
    }
    if (st < n) cv_list_push(l, cv_str(d + st, n - st));
    return l;
}

static int64_t find(CVal s, const CStr *sub, int from_right) {
    const char *d = s.s->data;
    size_t n = s.s->len;
    const char *hit = NULL;
    if (!from_right) hit = memmem(d, n, sub->data, sub->len);
    else
        for (size_t k = n >= sub->len ? n - sub->len + 1 : 0; k-- > 0;)
            if (!memcmp(d + k, sub->data, sub->len)) { hit = d + k; break; }
    if (!hit) return -1;
    int64_t c = 0;
    for (const char *p = d; p < hit; p++) c += ((unsigned char)*p & 0xC0) != 0x80;
    return c;
}

static int64_t count_sub(CVal s, const CStr *sub) {
    if (sub->len == 0) return (int64_t)cv_str_nchars(s.s) + 1;
    int64_t c = 0;
    const char *d = s.s->data, *p = d, *end = d + s.s->len;
    while ((p = memmem(p, (size_t)(end - p), sub->data, sub->len))) { c++; p += sub->len; }
    return c;
}

typedef int (*CpPred)(uint32_t);
static int cp_digit(uint32_t c) { utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c); return k == UTF8PROC_CATEGORY_ND || (c >= '0' && c <= '9'); }
static int cp_alpha(uint32_t c) { utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c); return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO; }
static int cp_alnum(uint32_t c) { return cp_alpha(c) || cp_digit(c) || utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_NL || utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_NO; }
static int cp_space(uint32_t c) { return uni_isspace(c); }

static int all_chars(CVal s, CpPred pred) {
    if (s.s->len == 0) return 0;
    for (size_t i = 0; i < s.s->len;) {
        size_t adv;
        if (!pred(chat_utf8_decode(s.s->data + i, s.s->len - i, &adv))) return 0;
        i += adv;
    }
    return 1;
}

// islower / isupper: at least one cased character and none of the other case.
static int case_test(CVal s, int upper) {
    int cased = 0;
    for (size_t i = 0; i < s.s->len;) {
        size_t adv;
        uint32_t cp = chat_utf8_decode(s.s->data + i, s.s->len - i, &adv);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
        if (k == UTF8PROC_CATEGORY_LT) return 0;
        if (k == UTF8PROC_CATEGORY_LU) { if (!upper) return 0; cased = 1; }
        if (k == UTF8PROC_CATEGORY_LL) { if (upper) return 0; cased = 1; }
        i += adv;
    }
    return cased;
}

static Status prefix_test(Interp *in, int line, CVal s, CVal *p, int suffix, int *out) {
    if (!p) return interp_error(in, line, "%s() takes at least 1 argument", suffix ? "endswith" : "startswith");
    if (p->t == CV_LIST && p->l->is_tuple == CL_TUPLE) {
        *out = 0;
        for (size_t i = 0; i < p->l->n && !*out; i++) TRY(prefix_test(in, line, s, &p->l->items[i], suffix, out));
        return ST_OK;
    }
    if (p->t != CV_STR)
        return interp_error(in, line, "%s first arg must be str or a tuple of str, not %s", suffix ? "endswith" : "startswith", cv_type_name(*p));
    size_t n = p->s->len;
    *out = n <= s.s->len && !memcmp(suffix ? s.s->data + s.s->len - n : s.s->data, p->s->data, n);
    return ST_OK;
}

static Status join_items(Interp *in, int line, CVal items, const CStr *sep, CVal *out) {
    StrBuf sb = {0};
    for (size_t i = 0; i < items.l->n; i++) {
        if (i && sep) sb_append(&sb, sep->data, sep->len);
        Status st = cv_to_str(&sb, items.l->items[i], in->e);
        if (st != ST_OK) { sb_free(&sb); return interp_error(in, line, "%s", in->e->msg); }
        if (sb.len > CHAT_MAX_STR) { sb_free(&sb); return interp_error(in, line, "string larger than %u bytes", CHAT_MAX_STR); }
    }
    *out = cv_str_take(&sb);
    return ST_OK;
}

// ---------------------------------------------------------------- methods
static const char *const STR_METHODS[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "replace", "upper", "lower", "title",
    "capitalize", "swapcase", "find", "rfind", "index", "rindex", "count", "join", "splitlines", "isdigit", "isalpha",
    "isalnum", "isspace", "islower", "isupper", "isnumeric", "isdecimal", "format", "zfill", "center", "ljust", "rjust",
    "removeprefix", "removesuffix", "partition", "rpartition", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const LIST_METHODS[] = {"count", "index", "copy", NULL};

static int in_table(const char *const *t, const char *name) {
    for (; *t; t++)
        if (!strcmp(*t, name)) return 1;
    return 0;
}

int chat_has_method(CVal v, const char *name) {
    switch (v.t) {
    case CV_STR: return in_table(STR_METHODS, name);
    case CV_DICT: return in_table(DICT_METHODS, name);
    case CV_LIST: return v.l->is_tuple != CL_ITER && in_table(LIST_METHODS, name);
    case CV_LOOP: return !strcmp(name, "cycle");
    default: return 0;
    }
}

static Status pad(Interp *in, int line, CVal s, CVal *args, size_t nargs, int mode, CVal *out) {
    int64_t width = 0;
    TRY(need_int(in, line, "pad", nargs ? &args[0] : NULL, &width));
    const char *fill = " ";
    size_t fl = 1;
    if (nargs > 1) {
        TRY(need_str(in, line, "pad", &args[1]));
        if (cv_str_nchars(args[1].s) != 1) return interp_error(in, line, "The fill character must be exactly one character long");
        fill = args[1].s->data;
        fl = args[1].s->len;
    }
    int64_t n = (int64_t)cv_str_nchars(s.s);
    if (width > CHAT_MAX_STR) return interp_error(in, line, "string larger than %u bytes", CHAT_MAX_STR);
    if (width <= n) { *out = cv_retain(s); return ST_OK; }
    int64_t total = width - n, left = mode == 0 ? 0 : mode == 1 ? total : total / 2 + (total & width & 1);
    StrBuf sb = {0};
    for (int64_t i = 0; i < left; i++) sb_append(&sb, fill, fl);
    sb_append(&sb, s.s->data, s.s->len);
    for (int64_t i = left; i < total; i++) sb_append(&sb, fill, fl);
    *out = cv_str_take(&sb);
    return ST_OK;
}

static Status str_method(Interp *in, int line, const char *m, CVal s, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal *a0 = arg(args, nargs, kw, 0, NULL);
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        int r;
        TRY(prefix_test(in, line, s, a0, m[0] == 'e', &r));
        *out = cv_bool(r);
        return ST_OK;
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const ok[] = {"sep", "maxsplit", NULL};
        TRY(check_kw(in, line, m, kw, ok));
        return split(in, line, s, arg(args, nargs, kw, 0, "sep"), arg(args, nargs, kw, 1, "maxsplit"), m[0] == 'r', out);
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        const CStr *set;
        TRY(strip_set(in, line, m, a0, &set));
        *out = strip(s, set, m[0] != 'r', m[0] != 'l');
        return ST_OK;
    }
    if (!strcmp(m, "replace")) {
        if (nargs < 2 || args[0].t != CV_STR || args[1].t != CV_STR) return interp_error(in, line, "replace() expects two strings");
        int64_t count = -1;
        if (nargs > 2) TRY(need_int(in, line, "replace", &args[2], &count));
        *out = replace(s, args[0].s, args[1].s, count);
        return ST_OK;
    }
    if (!strcmp(m, "upper")) { *out = change_case(s, CASE_UPPER); return ST_OK; }
    if (!strcmp(m, "lower")) { *out = change_case(s, CASE_LOWER); return ST_OK; }
    if (!strcmp(m, "title")) { *out = change_case(s, CASE_TITLE); return ST_OK; }
    if (!strcmp(m, "capitalize")) { *out = change_case(s, CASE_CAPITALIZE); return ST_OK; }
    if (!strcmp(m, "swapcase")) { *out = change_case(s, CASE_SWAP); return ST_OK; }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex")) {
        TRY(need_str(in, line, m, a0));
        if (nargs > 1) return interp_error(in, line, "%s() with start / end is not supported", m);
        int64_t r = find(s, a0->s, m[0] == 'r');
        if (r < 0 && strstr(m, "index")) return interp_error(in, line, "substring not found");
        *out = cv_int(r);
        return ST_OK;
    }
    if (!strcmp(m, "count")) {
        TRY(need_str(in, line, m, a0));
        *out = cv_int(count_sub(s, a0->s));
        return ST_OK;
    }
    if (!strcmp(m, "join")) {
        if (!a0) return interp_error(in, line, "join() takes exactly one argument");
        CVal items;
        TRY(chat_iterate(in, line, *a0, &items));
        for (size_t i = 0; i < items.l->n; i++)
            if (items.l->items[i].t != CV_STR) {
                Status st = interp_error(in, line, "sequence item %zu: expected str instance, %s found", i, cv_type_name(items.l->items[i]));
                cv_release(items);
                return st;
            }
        Status st = join_items(in, line, items, s.s, out);
        cv_release(items);
        return st;
    }
    if (!strcmp(m, "splitlines")) { *out = splitlines(s); return ST_OK; }
    if (!strcmp(m, "isdigit") || !strcmp(m, "isnumeric") || !strcmp(m, "isdecimal")) { *out = cv_bool(all_chars(s, cp_digit)); return ST_OK; }
    if (!strcmp(m, "isalpha")) { *out = cv_bool(all_chars(s, cp_alpha)); return ST_OK; }
    if (!strcmp(m, "isalnum")) { *out = cv_bool(all_chars(s, cp_alnum)); return ST_OK; }
    if (!strcmp(m, "isspace")) { *out = cv_bool(all_chars(s, cp_space)); return ST_OK; }
    if (!strcmp(m, "islower")) { *out = cv_bool(case_test(s, 0)); return ST_OK; }
    if (!strcmp(m, "isupper")) { *out = cv_bool(case_test(s, 1)); return ST_OK; }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        TRY(need_str(in, line, m, a0));
        int r;
        TRY(prefix_test(in, line, s, a0, m[6] == 's', &r));
        if (!r) { *out = cv_retain(s); return ST_OK; }
        size_t k = a0->s->len;
        *out = m[6] == 's' ? cv_str(s.s->data, s.s->len - k) : cv_str(s.s->data + k, s.s->len - k);
        return ST_OK;
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        TRY(need_str(in, line, m, a0));
        if (a0->s->len == 0) return interp_error(in, line, "empty separator");
        int64_t at = find(s, a0->s, m[0] == 'r');
        CVal t = cv_list(3);
        t.l->is_tuple = CL_TUPLE;
        if (at < 0) {
            CVal e1 = cv_str("", 0), e2 = cv_str("", 0);
            if (m[0] == 'r') { cv_list_push(t, e1); cv_list_push(t, e2); cv_list_push(t, cv_retain(s)); }
            else { cv_list_push(t, cv_retain(s)); cv_list_push(t, e1); cv_list_push(t, e2); }
        } else {
            size_t b = 0;
            for (int64_t c = 0; c < at; c++) {
                size_t adv;
                chat_utf8_decode(s.s->data + b, s.s->len - b, &adv);
                b += adv;
            }
            cv_list_push(t, cv_str(s.s->data, b));
            cv_list_push(t, cv_retain(*a0));
            cv_list_push(t, cv_str(s.s->data + b + a0->s->len, s.s->len - b - a0->s->len));
        }
        *out = t;
        return ST_OK;
    }
    if (!strcmp(m, "zfill")) {
        int64_t w;
        TRY(need_int(in, line, m, a0, &w));
        int64_t n = (int64_t)cv_str_nchars(s.s);
        if (w > CHAT_MAX_STR) return interp_error(in, line, "string larger than %u bytes", CHAT_MAX_STR);
        StrBuf sb = {0};
        size_t st = 0;
        if (s.s->len && (s.s->data[0] == '+' || s.s->data[0] == '-')) { sb_putc(&sb, s.s->data[0]); st = 1; }
        for (int64_t i = n; i < w; i++) sb_putc(&sb, '0');
        sb_append(&sb, s.s->data + st, s.s->len - st);
        *out = cv_str_take(&sb);
        return ST_OK;
    }
    if (!strcmp(m, "ljust")) return pad(in, line, s, args, nargs, 0, out);
    if (!strcmp(m, "rjust")) return pad(in, line, s, args, nargs, 1, out);
    if (!strcmp(m, "center")) return pad(in, line, s, args, nargs, 2, out);
    return interp_error(in, line, "str.%s() is not supported", m);
}

Status chat_call_method(Interp *in, int line, const CFunc *f, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal self = f->self;
    const char *m = f->name;
    if (self.t == CV_STR) return str_method(in, line, m, self, args, nargs, kw, out);
    if (self.t == CV_DICT) {
        if (!strcmp(m, "get")) {
            if (nargs < 1 || nargs > 2) return interp_error(in, line, "get expected 1 or 2 arguments, got %zu", nargs);
            CVal *v = cv_dict_get(self, args[0]);
            *out = v ? cv_retain(*v) : nargs > 1 ? cv_retain(args[1]) : cv_none();
            return ST_OK;
        }
        if (!strcmp(m, "copy")) {
            CVal d = cv_dict();
            for (size_t i = 0; i < self.d->n; i++) cv_dict_set(d, cv_retain(self.d->keys[i]), cv_retain(self.d->vals[i]));
            *out = d;
            return ST_OK;
        }
        CVal l = cv_list(self.d->n);
        for (size_t i = 0; i < self.d->n; i++) {
            if (!strcmp(m, "keys")) cv_list_push(l, cv_retain(self.d->keys[i]));
            else if (!strcmp(m, "values")) cv_list_push(l, cv_retain(self.d->vals[i]));
            else {
                CVal t = cv_list(2);
                t.l->is_tuple = CL_TUPLE;
                cv_list_push(t, cv_retain(self.d->keys[i]));
                cv_list_push(t, cv_retain(self.d->vals[i]));
                cv_list_push(l, t);
            }
        }
        *out = l;
        return ST_OK;
    }
    if (self.t == CV_LIST) {
        if (!strcmp(m, "copy")) {
            CVal l = cv_list(self.l->n);
            for (size_t i = 0; i < self.l->n; i++) cv_list_push(l, cv_retain(self.l->items[i]));
            *out = l;
            return ST_OK;
        }
        if (nargs != 1) return interp_error(in, line, "%s() takes exactly one argument", m);
        int64_t c = 0, at = -1;
        for (size_t i = 0; i < self.l->n; i++)
            if (cv_equal(self.l->items[i], args[0])) { c++; if (at < 0) at = (int64_t)i; }
        if (!strcmp(m, "index") && at < 0) return interp_error(in, line, "value is not in list");
        *out = cv_int(!strcmp(m, "count") ? c : at);
        return ST_OK;
    }
    if (self.t == CV_LOOP) {   // loop.cycle(a, b, ...)
        if (nargs == 0) return interp_error(in, line, "no items for cycling given");
        *out = cv_retain(args[self.loop->index0 % (int64_t)nargs]);
        return ST_OK;
    }
    return interp_error(in, line, "'%s' object has no method '%s'", cv_type_name(self), m);
}

// ---------------------------------------------------------------- globals
static const char *const GLOBALS[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

CVal chat_global(const char *name) {
    for (int i = 0; GLOBALS[i]; i++)
        if (!strcmp(GLOBALS[i], name)) return cv_func(CF_BUILTIN, GLOBALS[i]);
    return cv_undef(name, NULL);
}

static Status dict_from(Interp *in, int line, CVal target, CVal *args, size_t nargs, CVal kw) {
    if (nargs > 1) return interp_error(in, line, "expected at most 1 positional argument, got %zu", nargs);
    if (nargs == 1) {
        CVal src = args[0];
        if (src.t == CV_DICT || src.t == CV_NS) {
            for (size_t i = 0; i < src.d->n; i++) cv_dict_set(target, cv_retain(src.d->keys[i]), cv_retain(src.d->vals[i]));
        } else {
            CVal items;
            TRY(chat_iterate(in, line, src, &items));
            for (size_t i = 0; i < items.l->n; i++) {
                CVal p = items.l->items[i];
                if (p.t != CV_LIST || p.l->n != 2) {
                    cv_release(items);
                    return interp_error(in, line, "dictionary update sequence element #%zu has the wrong length", i);
                }
                cv_dict_set(target, cv_retain(p.l->items[0]), cv_retain(p.l->items[1]));
            }
            cv_release(items);
        }
    }
    if (kw.t == CV_DICT)
        for (size_t i = 0; i < kw.d->n; i++) cv_dict_set(target, cv_retain(kw.d->keys[i]), cv_retain(kw.d->vals[i]));
    return ST_OK;
}

Status chat_call_builtin(Interp *in, int line, const CFunc *f, CVal *args, size_t nargs, CVal kw, CVal *out) {
    const char *n = f->name;
    if (!strcmp(n, "range")) {
        TRY(check_kw(in, line, "range", kw, NULL));
        int64_t v[3] = {0, 0, 1};
        if (nargs < 1 || nargs > 3) return interp_error(in, line, "range expected 1 to 3 arguments, got %zu", nargs);
        for (size_t i = 0; i < nargs; i++) TRY(need_int(in, line, "range", &args[i], &v[nargs == 1 ? 1 : i]));
        if (v[2] == 0) return interp_error(in, line, "range() arg 3 must not be zero");
        double len = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
        if (len > CHAT_MAX_RANGE)
            return interp_error(in, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", CHAT_MAX_RANGE);
        CVal l = cv_list(0);
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) cv_list_push(l, cv_int(x));
        *out = l;
        return ST_OK;
    }
    if (!strcmp(n, "namespace") || !strcmp(n, "dict")) {
        CVal d = n[0] == 'n' ? cv_ns() : cv_dict();
        Status st = dict_from(in, line, d, args, nargs, kw);
        if (st != ST_OK) { cv_release(d); return st; }
        if (d.t == CV_NS) cv_list_push(in->namespaces, cv_retain(d));
        *out = d;
        return ST_OK;
    }
    if (!strcmp(n, "raise_exception")) {
        StrBuf sb = {0};
        if (nargs > 0) {
            Status st = cv_to_str(&sb, args[0], in->e);
            if (st != ST_OK) { sb_free(&sb); return interp_error(in, line, "%s", in->e->msg); }
        }
        interp_error(in, line, "raise_exception: %s", sb.data ? sb.data : "");
        sb_free(&sb);
        in->e->code = ST_ERUNTIME;
        return ST_ERUNTIME;
    }
    if (!strcmp(n, "strftime_now")) {
        if (nargs != 1 || args[0].t != CV_STR) return interp_error(in, line, "strftime_now(format) expects one string");
        time_t now = in->now ? in->now : time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char buf[1024];
        size_t k = args[0].s->len ? strftime(buf, sizeof buf, args[0].s->data, &tmv) : 0;
        if (args[0].s->len && k == 0 && args[0].s->len < 256) buf[0] = 0;
        *out = cv_str(buf, k);
        return ST_OK;
    }
    return interp_error(in, line, "'%s' is not callable here", n);
}

// ---------------------------------------------------------------- tests
static const char *const TESTS[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string", "mapping",
    "iterable", "sequence", "callable", "odd", "even", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt",
    "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas", "lower", "upper", "filter",
    "test", "escaped", NULL};

int chat_test_exists(const char *name) { return in_table(TESTS, name); }

Status chat_test(Interp *in, int line, const char *t, CVal v, CVal *args, size_t nargs, int *out) {
    CVal *a0 = nargs ? &args[0] : NULL;
    if (!strcmp(t, "defined")) { *out = v.t != CV_UNDEF; return ST_OK; }
    if (!strcmp(t, "undefined")) { *out = v.t == CV_UNDEF; return ST_OK; }
    if (!strcmp(t, "none")) { *out = v.t == CV_NONE; return ST_OK; }
    if (!strcmp(t, "boolean")) { *out = v.t == CV_BOOL; return ST_OK; }
    if (!strcmp(t, "false")) { *out = v.t == CV_BOOL && !v.b; return ST_OK; }
    if (!strcmp(t, "true")) { *out = v.t == CV_BOOL && v.b; return ST_OK; }
    if (!strcmp(t, "integer")) { *out = v.t == CV_INT; return ST_OK; }
    if (!strcmp(t, "float")) { *out = v.t == CV_FLOAT; return ST_OK; }
    if (!strcmp(t, "number")) { *out = cv_is_num(v); return ST_OK; }
    if (!strcmp(t, "string")) { *out = v.t == CV_STR; return ST_OK; }
    if (!strcmp(t, "mapping")) { *out = v.t == CV_DICT; return ST_OK; }
    if (!strcmp(t, "iterable")) { *out = v.t == CV_STR || v.t == CV_LIST || v.t == CV_DICT || v.t == CV_UNDEF; return ST_OK; }
    if (!strcmp(t, "sequence")) {
        *out = v.t == CV_STR || (v.t == CV_LIST && v.l->is_tuple != CL_ITER) || v.t == CV_DICT || v.t == CV_UNDEF;
        return ST_OK;
    }
    if (!strcmp(t, "callable")) { *out = v.t == CV_FUNC; return ST_OK; }
    if (!strcmp(t, "escaped")) { *out = 0; return ST_OK; }
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        if (v.t == CV_UNDEF) return interp_error(in, line, "'%s' is undefined", v.undef_name ? v.undef_name : "value");
        int64_t d = 2;
        if (t[0] == 'd') TRY(need_int(in, line, "divisibleby", a0, &d));
        if (!(v.t == CV_INT || v.t == CV_BOOL)) {
            if (v.t != CV_FLOAT) return interp_error(in, line, "unsupported operand type(s) for %%: '%s' and 'int'", cv_type_name(v));
            if (d == 0) return interp_error(in, line, "float modulo");
            double m = fmod(v.f, (double)d);
            *out = t[0] == 'o' ? m != 0 : m == 0;
            return ST_OK;
        }
        if (d == 0) return interp_error(in, line, "integer division or modulo by zero");
        int64_t x = v.t == CV_INT ? v.i : v.b, m = x % d;
        *out = t[0] == 'o' ? m != 0 : m == 0;
        return ST_OK;
    }
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (v.t != CV_STR) return interp_error(in, line, "'%s' object has no attribute 'is%s'", cv_type_name(v), t);
        *out = case_test(v, t[0] == 'u');
        return ST_OK;
    }
    if (!strcmp(t, "filter") || !strcmp(t, "test")) {
        *out = v.t == CV_STR && (t[0] == 'f' ? chat_filter_exists(v.s->data) == 1 : chat_test_exists(v.s->data));
        return ST_OK;
    }
    if (!a0) return interp_error(in, line, "test '%s' needs an argument", t);
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==")) { *out = cv_equal(v, *a0); return ST_OK; }
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) { *out = !cv_equal(v, *a0); return ST_OK; }
    if (!strcmp(t, "sameas")) {
        CVal b = *a0;
        if (v.t != b.t) *out = 0;
        else if (v.t == CV_NONE || v.t == CV_UNDEF) *out = 1;
        else if (v.t == CV_BOOL) *out = v.b == b.b;
        else if (v.t == CV_INT) *out = v.i == b.i && v.i >= -5 && v.i <= 256;
        else if (v.t == CV_FLOAT) *out = 0;
        else *out = cv_equal(v, b) && (v.t == CV_STR ? v.s == b.s : v.t == CV_LIST ? v.l == b.l : v.d == b.d);
        return ST_OK;
    }
    if (!strcmp(t, "in")) {
        CVal c = *a0;
        if (c.t == CV_STR) {
            if (v.t != CV_STR) return interp_error(in, line, "'in <string>' requires string as left operand, not %s", cv_type_name(v));
            *out = memmem(c.s->data, c.s->len, v.s->data, v.s->len) != NULL || v.s->len == 0;
        } else if (c.t == CV_LIST) {
            *out = 0;
            for (size_t i = 0; i < c.l->n && !*out; i++) *out = cv_equal(c.l->items[i], v);
        } else if (c.t == CV_DICT) {
            *out = cv_dict_get(c, v) != NULL;
        } else if (c.t == CV_UNDEF) {
            *out = 0;
        } else {
            return interp_error(in, line, "argument of type '%s' is not iterable", cv_type_name(c));
        }
        return ST_OK;
    }
    // ordering tests
    if (v.t == CV_UNDEF || a0->t == CV_UNDEF) return interp_error(in, line, "'%s' is undefined", v.t == CV_UNDEF && v.undef_name ? v.undef_name : "value");
    int c;
    Status st = cv_compare(v, *a0, &c, in->e);
    if (st != ST_OK) return interp_error(in, line, "%s", in->e->msg);
    if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<")) *out = c < 0;
    else if (!strcmp(t, "le") || !strcmp(t, "<=")) *out = c <= 0;
    else if (!strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">")) *out = c > 0;
    else *out = c >= 0;
    return ST_OK;
}

// ---------------------------------------------------------------- filters
static const char *const FILTERS[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
    "unique", "upper", "wordcount", NULL};
static const char *const FILTERS_UNSUPPORTED[] = {
    "filesizeformat", "forceescape", "format", "groupby", "pprint", "random", "slice", "striptags", "truncate",
    "urlencode", "urlize", "wordwrap", "xmlattr", NULL};

int chat_filter_exists(const char *name) {
    if (in_table(FILTERS, name)) return 1;
    if (in_table(FILTERS_UNSUPPORTED, name)) return 2;
    return 0;
}

// Jinja's attribute getter: "a.b.0" walks attributes / items (integers as indices).
static Status get_attr_path(Interp *in, int line, CVal v, CVal path, CVal *out) {
    if (path.t == CV_INT) return interp_getitem(in, line, v, path, out);
    if (path.t != CV_STR) return interp_error(in, line, "attribute must be a string or integer");
    CVal cur = cv_retain(v);
    const char *p = path.s->data;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char part[256];
        if (n >= sizeof part) { cv_release(cur); return interp_error(in, line, "attribute name too long"); }
        memcpy(part, p, n);
        part[n] = 0;
        CVal key, next;
        int is_num = n > 0 && strspn(part, "0123456789") == n;
        key = is_num ? cv_int(strtoll(part, NULL, 10)) : cv_str(part, n);
        Status st = cur.t == CV_UNDEF ? ST_OK : interp_getitem(in, line, cur, key, &next);
        if (cur.t == CV_UNDEF) next = cv_retain(cur);
        cv_release(key);
        cv_release(cur);
        if (st != ST_OK) return st;
        cur = next;
        if (!dot) break;
        p = dot + 1;
    }
    *out = cur;
    return ST_OK;
}

// A filter value used as a test or map function: `select('odd')`, `map('upper')`.
static Status select_impl(Interp *in, int line, CVal seq, CVal *args, size_t nargs, int by_attr, int want, CVal *out) {
    CVal items;
    TRY(chat_iterate(in, line, seq, &items));
    size_t skip = by_attr ? 1 : 0;
    if (by_attr && nargs < 1) { cv_release(items); return interp_error(in, line, "selectattr / rejectattr need an attribute"); }
    const char *test = NULL;
    if (nargs > skip) {
        if (args[skip].t != CV_STR) { cv_release(items); return interp_error(in, line, "the test name must be a string"); }
        test = args[skip].s->data;
        if (!chat_test_exists(test)) { cv_release(items); return interp_error(in, line, "No test named '%s'.", test); }
    }
    CVal res = cv_list(0);
    Status st = ST_OK;
    for (size_t i = 0; i < items.l->n && st == ST_OK; i++) {
        CVal item = items.l->items[i], probe;
        if (by_attr) st = get_attr_path(in, line, item, args[0], &probe);
        else probe = cv_retain(item);
        if (st != ST_OK) break;
        int r;
        if (test) st = chat_test(in, line, test, probe, args + skip + 1, nargs - skip - 1, &r);
        else r = cv_truthy(probe);
        cv_release(probe);
        if (st == ST_OK && r == want) cv_list_push(res, cv_retain(item));
    }
    cv_release(items);
    if (st != ST_OK) { cv_release(res); return st; }
    *out = make_iter(res);
    return ST_OK;
}

static Status map_impl(Interp *in, int line, CVal seq, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal items;
    TRY(chat_iterate(in, line, seq, &items));
    CVal *attr = kw.t == CV_DICT ? cv_dict_get_str(kw, "attribute") : NULL;
    CVal *def = kw.t == CV_DICT ? cv_dict_get_str(kw, "default") : NULL;
    if (!attr && (nargs < 1 || args[0].t != CV_STR)) {
        cv_release(items);
        return interp_error(in, line, "map() needs a filter name or attribute=");
    }
    CVal res = cv_list(items.l->n);
    Status st = ST_OK;
    for (size_t i = 0; i < items.l->n && st == ST_OK; i++) {
        CVal r;
        if (attr) {
            st = get_attr_path(in, line, items.l->items[i], *attr, &r);
            if (st == ST_OK && r.t == CV_UNDEF && def) { cv_release(r); r = cv_retain(*def); }
        } else {
            st = chat_filter(in, line, args[0].s->data, items.l->items[i], args + 1, nargs - 1, cv_undef(NULL, NULL), &r);
        }
        if (st == ST_OK) cv_list_push(res, r);
    }
    cv_release(items);
    if (st != ST_OK) { cv_release(res); return st; }
    *out = make_iter(res);
    return ST_OK;
}

// Sort key: the attribute (if any), lower-cased when a string and not case_sensitive.
typedef struct SortItem {
    CVal key, item;
} SortItem;

static Status make_key(Interp *in, int line, CVal item, CVal *attr, int case_sensitive, CVal *key) {
    CVal k;
    if (attr && attr->t != CV_NONE) TRY(get_attr_path(in, line, item, *attr, &k));
    else k = cv_retain(item);
    if (!case_sensitive && k.t == CV_STR) {
        CVal lo = change_case(k, CASE_LOWER);
        cv_release(k);
        k = lo;
    }
    *key = k;
    return ST_OK;
}

static Status sort_items(Interp *in, int line, SortItem *v, size_t n, int reverse) {
    // Insertion sort keeps Python's stability; sizes in templates are small.
    for (size_t i = 1; i < n; i++) {
        SortItem x = v[i];
        size_t j = i;
        while (j > 0) {
            int c;
            Status st = cv_compare(v[j - 1].key, x.key, &c, in->e);
            if (st != ST_OK) return interp_error(in, line, "%s", in->e->msg);
            if (reverse ? c >= 0 : c <= 0) break;
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    return ST_OK;
}

static Status sort_impl(Interp *in, int line, CVal seq, int reverse, int case_sensitive, CVal *attr, int dict_pairs,
                        int by_value, CVal *out) {
    CVal items;
    if (dict_pairs) {
        if (seq.t != CV_DICT) return interp_error(in, line, "dictsort expects a mapping, got %s", cv_type_name(seq));
        items = cv_list(seq.d->n);
        for (size_t i = 0; i < seq.d->n; i++) {
            CVal t = cv_list(2);
            t.l->is_tuple = CL_TUPLE;
            cv_list_push(t, cv_retain(seq.d->keys[i]));
            cv_list_push(t, cv_retain(seq.d->vals[i]));
            cv_list_push(items, t);
        }
    } else {
        TRY(chat_iterate(in, line, seq, &items));
    }
    size_t n = items.l->n;
    SortItem *v = xcalloc(n ? n : 1, sizeof(SortItem));
    Status st = ST_OK;
    for (size_t i = 0; i < n && st == ST_OK; i++) {
        v[i].item = items.l->items[i];
        CVal src = dict_pairs ? items.l->items[i].l->items[by_value ? 1 : 0] : items.l->items[i];
        st = make_key(in, line, src, dict_pairs ? NULL : attr, case_sensitive, &v[i].key);
        if (st != ST_OK) v[i].key = cv_none();
    }
    if (st == ST_OK) st = sort_items(in, line, v, n, reverse);
    CVal res = cv_list(n);
    for (size_t i = 0; i < n; i++) {
        cv_list_push(res, cv_retain(v[i].item));
        cv_release(v[i].key);
    }
    free(v);
    cv_release(items);
    if (st != ST_OK) { cv_release(res); return st; }
    *out = res;
    return ST_OK;
}

static Status minmax(Interp *in, int line, CVal seq, CVal *args, size_t nargs, CVal kw, int want_max, CVal *out) {
    CVal items;
    TRY(chat_iterate(in, line, seq, &items));
    int cs = 0;
    CVal *c = arg(args, nargs, kw, 0, "case_sensitive");
    if (c) cs = cv_truthy(*c);
    CVal *attr = arg(args, nargs, kw, 1, "attribute");
    if (items.l->n == 0) {
        cv_release(items);
        *out = cv_undef(want_max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.", NULL);
        return ST_OK;
    }
    size_t best = 0;
    CVal bk;
    Status st = make_key(in, line, items.l->items[0], attr, cs, &bk);
    for (size_t i = 1; i < items.l->n && st == ST_OK; i++) {
        CVal k;
        st = make_key(in, line, items.l->items[i], attr, cs, &k);
        if (st != ST_OK) break;
        int r;
        st = cv_compare(k, bk, &r, in->e);
        if (st != ST_OK) { cv_release(k); st = interp_error(in, line, "%s", in->e->msg); break; }
        if (want_max ? r > 0 : r < 0) { cv_release(bk); bk = k; best = i; }
        else cv_release(k);
    }
    if (st == ST_OK) { cv_release(bk); *out = cv_retain(items.l->items[best]); }
    cv_release(items);
    return st;
}

static Status to_int(Interp *in, int line, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal *def = arg(args, nargs, kw, 0, "default");
    CVal *basev = arg(args, nargs, kw, 1, "base");
    int64_t base = 10;
    if (basev) TRY(need_int(in, line, "int", basev, &base));
    switch (v.t) {
    case CV_INT: *out = v; return ST_OK;
    case CV_BOOL: *out = cv_int(v.b); return ST_OK;
    case CV_FLOAT:
        if (isfinite(v.f) && fabs(v.f) < 9.2e18) { *out = cv_int((int64_t)v.f); return ST_OK; }
        break;
    case CV_STR: {
        CVal t = strip(v, NULL, 1, 1);
        char *end;
        errno = 0;
        const char *s = t.s->data;
        int ok = 0;
        if (t.s->len) {
            long long x = strtoll(s, &end, (int)base);
            if (*end == 0 && errno == 0 && !strchr(s, ' ')) { *out = cv_int(x); ok = 1; }
            else {
                double d = strtod(s, &end);
                if (*end == 0 && isfinite(d) && fabs(d) < 9.2e18) { *out = cv_int((int64_t)d); ok = 1; }
            }
        }
        cv_release(t);
        if (ok) return ST_OK;
        break;
    }
    default: break;
    }
    *out = def ? cv_retain(*def) : cv_int(0);
    return ST_OK;
}

static Status to_float(Interp *in, int line, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal *def = arg(args, nargs, kw, 0, "default");
    if (cv_is_num(v)) { *out = cv_float(cv_as_double(v)); return ST_OK; }
    if (v.t == CV_STR) {
        CVal t = strip(v, NULL, 1, 1);
        char *end;
        double d = t.s->len ? strtod(t.s->data, &end) : 0;
        int ok = t.s->len && *end == 0;
        cv_release(t);
        if (ok) { *out = cv_float(d); return ST_OK; }
    }
    *out = def ? cv_retain(*def) : cv_float(0.0);
    return ST_OK;
}

static Status round_impl(Interp *in, int line, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    int64_t prec = 0;
    CVal *p = arg(args, nargs, kw, 0, "precision");
    if (p) TRY(need_int(in, line, "round", p, &prec));
    CVal *m = arg(args, nargs, kw, 1, "method");
    const char *method = m && m->t == CV_STR ? m->s->data : "common";
    if (!cv_is_num(v)) return interp_error(in, line, "round expects a number, got %s", cv_type_name(v));
    double x = cv_as_double(v), scale = pow(10.0, (double)prec), r;
    if (!strcmp(method, "common")) {
        if (v.t != CV_FLOAT) { *out = v.t == CV_BOOL ? cv_int(v.b) : v; return ST_OK; }
        char buf[512];
        if (prec >= 0 && prec < 300) {
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            r = strtod(buf, NULL);
        } else {
            r = nearbyint(x * scale) / scale;
        }
    } else if (!strcmp(method, "ceil")) {
        r = ceil(x * scale) / scale;
    } else if (!strcmp(method, "floor")) {
        r = floor(x * scale) / scale;
    } else {
        return interp_error(in, line, "method must be common, ceil or floor");
    }
    *out = cv_float(r);
    return ST_OK;
}

static Status indent_impl(Interp *in, int line, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal sv;
    TRY(chat_str_of(in, line, v, &sv));
    CVal *w = arg(args, nargs, kw, 0, "width");
    CVal *first = arg(args, nargs, kw, 1, "first");
    CVal *blank = arg(args, nargs, kw, 2, "blank");
    StrBuf ind = {0};
    if (w && w->t == CV_STR) sb_append(&ind, w->s->data, w->s->len);
    else {
        int64_t n = 4;
        if (w) {
            Status st = need_int(in, line, "indent", w, &n);
            if (st != ST_OK) { cv_release(sv); return st; }
        }
        if (n > 4096) n = 4096;
        for (int64_t i = 0; i < n; i++) sb_putc(&ind, ' ');
    }
    const char *istr = ind.data ? ind.data : "";
    StrBuf src = {0};
    sb_append(&src, sv.s->data, sv.s->len);
    sb_putc(&src, '\n');
    CVal tmp = cv_str_take(&src);
    CVal lines = splitlines(tmp);
    cv_release(tmp);
    StrBuf sb = {0};
    if (first && cv_truthy(*first)) sb_puts(&sb, istr);
    for (size_t i = 0; i < lines.l->n; i++) {
        CStr *ln = lines.l->items[i].s;
        if (i) {
            sb_putc(&sb, '\n');
            if ((blank && cv_truthy(*blank)) || ln->len) sb_puts(&sb, istr);
        }
        sb_append(&sb, ln->data, ln->len);
    }
    cv_release(lines);
    cv_release(sv);
    sb_free(&ind);
    *out = cv_str_take(&sb);
    return ST_OK;
}

static Status tojson_impl(Interp *in, int line, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    static const char *const ok[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    TRY(check_kw(in, line, "tojson", kw, ok));
    if (nargs > 4) return interp_error(in, line, "tojson() takes at most 4 arguments");
    CVal *ea = arg(args, nargs, kw, 0, "ensure_ascii");
    CVal *ind = arg(args, nargs, kw, 1, "indent");
    CVal *seps = arg(args, nargs, kw, 2, "separators");
    CVal *sk = arg(args, nargs, kw, 3, "sort_keys");
    JsonOpts o = {0};
    o.ensure_ascii = ea && cv_truthy(*ea);
    o.sort_keys = sk && cv_truthy(*sk);
    StrBuf unit = {0};
    if (ind && ind->t != CV_NONE) {
        if (ind->t == CV_STR) sb_append(&unit, ind->s->data, ind->s->len);
        else {
            int64_t n = 0;
            TRY(need_int(in, line, "tojson indent", ind, &n));
            if (n > 4096) n = 4096;
            for (int64_t i = 0; i < n; i++) sb_putc(&unit, ' ');
        }
        sb_putc(&unit, 0);
        unit.len--;
        o.indent = unit.data;
    }
    if (seps && seps->t != CV_NONE) {
        if (seps->t != CV_LIST || seps->l->n != 2 || seps->l->items[0].t != CV_STR || seps->l->items[1].t != CV_STR) {
            sb_free(&unit);
            return interp_error(in, line, "separators must be a pair of strings");
        }
        o.item_sep = seps->l->items[0].s->data;
        o.key_sep = seps->l->items[1].s->data;
    }
    StrBuf sb = {0};
    Status st = cv_to_json(&sb, v, &o, in->e);
    sb_free(&unit);
    if (st != ST_OK) { sb_free(&sb); return interp_error(in, line, "%s", in->e->msg); }
    *out = cv_str_take(&sb);
    return ST_OK;
}

static Status unique_impl(Interp *in, int line, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal items;
    TRY(chat_iterate(in, line, v, &items));
    CVal *csv = arg(args, nargs, kw, 0, "case_sensitive");
    CVal *attr = arg(args, nargs, kw, 1, "attribute");
    int cs = csv && cv_truthy(*csv);
    CVal seen = cv_list(0), res = cv_list(0);
    Status st = ST_OK;
    for (size_t i = 0; i < items.l->n && st == ST_OK; i++) {
        CVal k;
        st = make_key(in, line, items.l->items[i], attr, cs, &k);
        if (st != ST_OK) break;
        int dup = 0;
        for (size_t j = 0; j < seen.l->n && !dup; j++) dup = cv_equal(seen.l->items[j], k);
        if (dup) cv_release(k);
        else { cv_list_push(seen, k); cv_list_push(res, cv_retain(items.l->items[i])); }
    }
    cv_release(seen);
    cv_release(items);
    if (st != ST_OK) { cv_release(res); return st; }
    *out = make_iter(res);
    return ST_OK;
}

static Status batch_impl(Interp *in, int line, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    int64_t n = 0;
    TRY(need_int(in, line, "batch", arg(args, nargs, kw, 0, "linecount"), &n));
    if (n <= 0) return interp_error(in, line, "batch size must be positive");
    CVal *fill = arg(args, nargs, kw, 1, "fill_with");
    CVal items;
    TRY(chat_iterate(in, line, v, &items));
    CVal res = cv_list(0), cur = cv_list(0);
    for (size_t i = 0; i < items.l->n; i++) {
        cv_list_push(cur, cv_retain(items.l->items[i]));
        if ((int64_t)cur.l->n == n) { cv_list_push(res, cur); cur = cv_list(0); }
    }
    if (cur.l->n) {
        if (fill && fill->t != CV_NONE)
            while ((int64_t)cur.l->n < n) cv_list_push(cur, cv_retain(*fill));
        cv_list_push(res, cur);
    } else {
        cv_release(cur);
    }
    cv_release(items);
    *out = make_iter(res);
    return ST_OK;
}

static CVal html_escape(CVal s) {
    StrBuf sb = {0};
    for (size_t i = 0; i < s.s->len; i++) {
        char c = s.s->data[i];
        switch (c) {
        case '&': sb_puts(&sb, "&amp;"); break;
        case '<': sb_puts(&sb, "&lt;"); break;
        case '>': sb_puts(&sb, "&gt;"); break;
        case '"': sb_puts(&sb, "&#34;"); break;
        case '\'': sb_puts(&sb, "&#39;"); break;
        default: sb_putc(&sb, c);
        }
    }
    return cv_str_take(&sb);
}

// Jinja's title filter: upper-case the first letter of each word, lower-case the rest, where
// words are split at runs of whitespace and the characters - ( { [ <.
static CVal jinja_title(CVal s) {
    StrBuf sb = {0};
    int at_start = 1;
    for (size_t i = 0; i < s.s->len;) {
        size_t adv;
        uint32_t cp = chat_utf8_decode(s.s->data + i, s.s->len - i, &adv);
        int sep = uni_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        if (sep) { chat_utf8_encode(&sb, cp); at_start = 1; }
        else {
            chat_utf8_encode(&sb, at_start ? (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
            at_start = 0;
        }
        i += adv;
    }
    return cv_str_take(&sb);
}

Status chat_filter(Interp *in, int line, const char *f, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out) {
    CVal *a0 = arg(args, nargs, kw, 0, NULL);
    if (in_table(FILTERS_UNSUPPORTED, f)) return interp_error(in, line, "filter '%s' is not supported in chat templates", f);
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        CVal *dv = arg(args, nargs, kw, 0, "default_value");
        CVal *b = arg(args, nargs, kw, 1, "boolean");
        int use = v.t == CV_UNDEF || (b && cv_truthy(*b) && !cv_truthy(v));
        *out = use ? (dv ? cv_retain(*dv) : cv_str("", 0)) : cv_retain(v);
        return ST_OK;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        int64_t n = 0;
        TRY(length_of(in, line, v, &n));
        *out = cv_int(n);
        return ST_OK;
    }
    if (!strcmp(f, "tojson")) return tojson_impl(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "safe") || !strcmp(f, "string")) return chat_str_of(in, line, v, out);
    if (!strcmp(f, "e") || !strcmp(f, "escape")) {
        CVal s;
        TRY(chat_str_of(in, line, v, &s));
        *out = html_escape(s);
        cv_release(s);
        return ST_OK;
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") || !strcmp(f, "title") || !strcmp(f, "trim") ||
        !strcmp(f, "replace") || !strcmp(f, "center") || !strcmp(f, "wordcount")) {
        CVal s;
        TRY(chat_str_of(in, line, v, &s));
        Status st = ST_OK;
        if (!strcmp(f, "upper")) *out = change_case(s, CASE_UPPER);
        else if (!strcmp(f, "lower")) *out = change_case(s, CASE_LOWER);
        else if (!strcmp(f, "capitalize")) *out = change_case(s, CASE_CAPITALIZE);
        else if (!strcmp(f, "title")) *out = jinja_title(s);
        else if (!strcmp(f, "trim")) {
            const CStr *set;
            st = strip_set(in, line, "trim", arg(args, nargs, kw, 0, "chars"), &set);
            if (st == ST_OK) *out = strip(s, set, 1, 1);
        } else if (!strcmp(f, "replace")) {
            CVal *o = arg(args, nargs, kw, 0, "old"), *nw = arg(args, nargs, kw, 1, "new"), *c = arg(args, nargs, kw, 2, "count");
            int64_t count = -1;
            if (!o || !nw) st = interp_error(in, line, "replace needs old and new");
            else if (c && c->t != CV_NONE) st = need_int(in, line, "replace", c, &count);
            CVal os = {0}, ns = {0};
            if (st == ST_OK) st = chat_str_of(in, line, *o, &os);
            if (st == ST_OK) st = chat_str_of(in, line, *nw, &ns);
            if (st == ST_OK) *out = replace(s, os.s, ns.s, count);
            cv_release(os);
            cv_release(ns);
        } else if (!strcmp(f, "center")) {
            CVal w = a0 ? cv_retain(*a0) : cv_int(80);
            st = pad(in, line, s, &w, 1, 2, out);
            cv_release(w);
        } else {   // wordcount: runs of word characters
            int64_t n = 0;
            int inword = 0;
            for (size_t i = 0; i < s.s->len;) {
                size_t adv;
                uint32_t cp = chat_utf8_decode(s.s->data + i, s.s->len - i, &adv);
                int w = cp_alnum(cp) || cp == '_';
                if (w && !inword) n++;
                inword = w;
                i += adv;
            }
            *out = cv_int(n);
        }
        cv_release(s);
        return st;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        if (f[0] == 'l' && v.t == CV_LIST && v.l->is_tuple == CL_ITER) return interp_error(in, line, "'generator' object is not reversible");
        if (f[0] == 'l' && v.t == CV_UNDEF) return interp_error(in, line, "'%s' is undefined", v.undef_name ? v.undef_name : "value");
        CVal items;
        TRY(chat_iterate(in, line, v, &items));
        if (items.l->n == 0) *out = cv_undef(f[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.", NULL);
        else *out = cv_retain(items.l->items[f[0] == 'f' ? 0 : items.l->n - 1]);
        cv_release(items);
        return ST_OK;
    }
    if (!strcmp(f, "list")) {
        CVal items;
        TRY(chat_iterate(in, line, v, &items));
        CVal l = cv_list(items.l->n);
        for (size_t i = 0; i < items.l->n; i++) cv_list_push(l, cv_retain(items.l->items[i]));
        cv_release(items);
        *out = l;
        return ST_OK;
    }
    if (!strcmp(f, "reverse")) {
        if (v.t == CV_STR) {
            CVal z = cv_none(), st = cv_int(-1);
            return chat_slice(in, line, v, z, z, st, out);
        }
        CVal items;
        TRY(chat_iterate(in, line, v, &items));
        CVal l = cv_list(items.l->n);
        for (size_t i = items.l->n; i-- > 0;) cv_list_push(l, cv_retain(items.l->items[i]));
        cv_release(items);
        *out = make_iter(l);
        return ST_OK;
    }
    if (!strcmp(f, "join")) {
        CVal *sep = arg(args, nargs, kw, 0, "d");
        CVal *attr = arg(args, nargs, kw, 1, "attribute");
        CVal items;
        TRY(chat_iterate(in, line, v, &items));
        if (attr && attr->t != CV_NONE) {
            CVal mapped = cv_list(items.l->n);
            Status st = ST_OK;
            for (size_t i = 0; i < items.l->n && st == ST_OK; i++) {
                CVal r;
                st = get_attr_path(in, line, items.l->items[i], *attr, &r);
                if (st == ST_OK) cv_list_push(mapped, r);
            }
            cv_release(items);
            if (st != ST_OK) { cv_release(mapped); return st; }
            items = mapped;
        }
        CVal sepv = cv_str("", 0);
        Status st = ST_OK;
        if (sep) { cv_release(sepv); st = chat_str_of(in, line, *sep, &sepv); }
        if (st == ST_OK) st = join_items(in, line, items, sepv.s, out);
        cv_release(sepv);
        cv_release(items);
        return st;
    }
    if (!strcmp(f, "map")) return map_impl(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "select")) return select_impl(in, line, v, args, nargs, 0, 1, out);
    if (!strcmp(f, "reject")) return select_impl(in, line, v, args, nargs, 0, 0, out);
    if (!strcmp(f, "selectattr")) return select_impl(in, line, v, args, nargs, 1, 1, out);
    if (!strcmp(f, "rejectattr")) return select_impl(in, line, v, args, nargs, 1, 0, out);
    if (!strcmp(f, "items")) {
        if (v.t == CV_UNDEF) { *out = make_iter(cv_list(0)); return ST_OK; }
        if (v.t != CV_DICT) return interp_error(in, line, "Can only get item pairs from a mapping.");
        CFunc fn = {.kind = CF_METHOD, .name = "items", .self = v};
        TRY(chat_call_method(in, line, &fn, NULL, 0, cv_undef(NULL, NULL), out));
        *out = make_iter(*out);
        return ST_OK;
    }
    if (!strcmp(f, "dictsort")) {
        CVal *cs = arg(args, nargs, kw, 0, "case_sensitive"), *by = arg(args, nargs, kw, 1, "by"), *rev = arg(args, nargs, kw, 2, "reverse");
        int by_value = 0;
        if (by && by->t == CV_STR) {
            if (!strcmp(by->s->data, "value")) by_value = 1;
            else if (strcmp(by->s->data, "key")) return interp_error(in, line, "You can only sort by either \"key\" or \"value\"");
        }
        return sort_impl(in, line, v, rev && cv_truthy(*rev), cs && cv_truthy(*cs), NULL, 1, by_value, out);
    }
    if (!strcmp(f, "sort")) {
        CVal *rev = arg(args, nargs, kw, 0, "reverse"), *cs = arg(args, nargs, kw, 1, "case_sensitive"), *attr = arg(args, nargs, kw, 2, "attribute");
        return sort_impl(in, line, v, rev && cv_truthy(*rev), cs && cv_truthy(*cs), attr, 0, 0, out);
    }
    if (!strcmp(f, "unique")) return unique_impl(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "batch")) return batch_impl(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "min") || !strcmp(f, "max")) return minmax(in, line, v, args, nargs, kw, f[1] == 'a', out);
    if (!strcmp(f, "sum")) {
        CVal *attr = arg(args, nargs, kw, 0, "attribute"), *start = arg(args, nargs, kw, 1, "start");
        CVal items, acc = start ? cv_retain(*start) : cv_int(0);
        TRY(chat_iterate(in, line, v, &items));
        Status st = ST_OK;
        for (size_t i = 0; i < items.l->n && st == ST_OK; i++) {
            CVal x, r;
            if (attr && attr->t != CV_NONE) st = get_attr_path(in, line, items.l->items[i], *attr, &x);
            else x = cv_retain(items.l->items[i]);
            if (st != ST_OK) break;
            if (!cv_is_num(x) || !cv_is_num(acc)) st = interp_error(in, line, "unsupported operand type(s) for +: '%s' and '%s'", cv_type_name(acc), cv_type_name(x));
            else if (acc.t != CV_FLOAT && x.t != CV_FLOAT) {
                int64_t s;
                if (__builtin_add_overflow(acc.t == CV_BOOL ? acc.b : acc.i, x.t == CV_BOOL ? x.b : x.i, &s)) st = interp_error(in, line, "integer overflow");
                else { r = cv_int(s); cv_release(acc); acc = r; }
            } else {
                r = cv_float(cv_as_double(acc) + cv_as_double(x));
                cv_release(acc);
                acc = r;
            }
            cv_release(x);
        }
        cv_release(items);
        if (st != ST_OK) { cv_release(acc); return st; }
        *out = acc;
        return ST_OK;
    }
    if (!strcmp(f, "int")) return to_int(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "float")) return to_float(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "abs")) {
        if (v.t == CV_INT) { if (v.i == INT64_MIN) return interp_error(in, line, "integer overflow"); *out = cv_int(v.i < 0 ? -v.i : v.i); }
        else if (v.t == CV_BOOL) *out = cv_int(v.b);
        else if (v.t == CV_FLOAT) *out = cv_float(fabs(v.f));
        else return interp_error(in, line, "bad operand type for abs(): '%s'", cv_type_name(v));
        return ST_OK;
    }
    if (!strcmp(f, "round")) return round_impl(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "indent")) return indent_impl(in, line, v, args, nargs, kw, out);
    if (!strcmp(f, "attr")) {
        TRY(need_str(in, line, "attr", a0));
        if (v.t == CV_UNDEF) { *out = cv_retain(v); return ST_OK; }
        if (v.t == CV_DICT && !chat_has_method(v, a0->s->data)) { *out = cv_undef(NULL, "dict object"); return ST_OK; }
        return interp_getattr(in, line, v, a0->s->data, out);
    }
    return interp_error(in, line, "No filter named '%s'.", f);
}
