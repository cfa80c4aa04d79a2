// chat_interp.c: runs the syntax tree. Scopes follow Jinja2: `for` bodies and macros get a fresh
// scope (each iteration), `if` does not; attribute and item access follow the sandbox (methods
// first for attributes, mutating methods refused); Undefined prints as "" and fails on use.
// `{% generation %}` spans are recorded as transformers' AssistantTracker records them.
#include "chat_internal.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

Status interp_error(Interp *in, int line, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(in->e, ST_EINVAL, "%s: line %d: %s", in->what, line, msg);
}

// Put the template line in front of a message from a value helper.
static Status located(Interp *in, int line, Status st) {
    if (st == ST_OK) return st;
    char msg[ERR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", in->e->msg);
    return interp_error(in, line, "%s", msg);
}

static Status undef_error(Interp *in, int line, CVal v) {
    if (v.undef_owner) return interp_error(in, line, "'%s' has no attribute '%s'", v.undef_owner, v.undef_name ? v.undef_name : "?");
    if (v.undef_name) return interp_error(in, line, "'%s' is undefined", v.undef_name);
    return interp_error(in, line, "undefined value used");
}

// ---------------------------------------------------------------- scopes
static void scope_set(Scope *s, const char *name, CVal v) { cv_dict_set(s->vars, cv_cstr(name), v); }

static CVal lookup(Interp *in, const char *name) {
    for (Scope *s = in->scope; s; s = s->parent) {
        CVal *v = cv_dict_get_str(s->vars, name);
        if (v) return cv_retain(*v);
    }
    CVal g = chat_global(name);
    if (g.t != CV_UNDEF) return g;
    return cv_undef(name, NULL);
}

static Status emit(Interp *in, int line, const char *s, size_t n) {
    if (in->out->len + n > CHAT_MAX_STR) return interp_error(in, line, "output larger than %u bytes", CHAT_MAX_STR);
    sb_append(in->out, s, n);
    if (in->out == in->root_out) in->root_emitted = 1;
    return ST_OK;
}

// ---------------------------------------------------------------- attribute / item access
static int is_unsafe_method(CVal obj, const char *name) {
    static const char *const list_mut[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", NULL};
    static const char *const dict_mut[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};
    const char *const *m = obj.t == CV_LIST ? list_mut : obj.t == CV_DICT ? dict_mut : NULL;
    for (; m && *m; m++)
        if (!strcmp(*m, name)) return 1;
    return 0;
}

static CVal bound_method(CVal obj, const char *name) {
    CVal f = cv_func(CF_METHOD, name);
    f.fn->self = cv_retain(obj);
    return f;
}

static const char *owner_name(CVal v) {
    switch (v.t) {
    case CV_DICT: return "dict object";
    case CV_LIST: return v.l->is_tuple == CL_TUPLE ? "tuple object" : "list object";
    case CV_STR: return "str object";
    case CV_NS: return "Namespace object";
    case CV_INT: return "int object";
    case CV_FLOAT: return "float object";
    case CV_BOOL: return "bool object";
    case CV_NONE: return "None";
    default: return "object";
    }
}

Status interp_getattr(Interp *in, int line, CVal obj, const char *name, CVal *out) {
    if (obj.t == CV_UNDEF) return undef_error(in, line, obj);
    if (is_unsafe_method(obj, name))
        return interp_error(in, line, "access to attribute '%s' of '%s' object is unsafe.", name, cv_type_name(obj));
    if (chat_has_method(obj, name)) { *out = bound_method(obj, name); return ST_OK; }
    if (obj.t == CV_DICT || obj.t == CV_NS) {
        CVal *v = cv_dict_get_str(obj, name);
        *out = v ? cv_retain(*v) : cv_undef(name, owner_name(obj));
        return ST_OK;
    }
    if (obj.t == CV_LOOP) {
        CLoop *l = obj.loop;
        int64_t i = l->index0, n = l->length;
        if (!strcmp(name, "index")) *out = cv_int(i + 1);
        else if (!strcmp(name, "index0")) *out = cv_int(i);
        else if (!strcmp(name, "revindex")) *out = cv_int(n - i);
        else if (!strcmp(name, "revindex0")) *out = cv_int(n - i - 1);
        else if (!strcmp(name, "first")) *out = cv_bool(i == 0);
        else if (!strcmp(name, "last")) *out = cv_bool(i == n - 1);
        else if (!strcmp(name, "length")) *out = cv_int(n);
        else if (!strcmp(name, "depth")) *out = cv_int(l->depth0 + 1);
        else if (!strcmp(name, "depth0")) *out = cv_int(l->depth0);
        else if (!strcmp(name, "previtem"))
            *out = i > 0 ? cv_retain(l->items->items[i - 1]) : cv_undef("previtem", "LoopContext object");
        else if (!strcmp(name, "nextitem"))
            *out = i + 1 < n ? cv_retain(l->items->items[i + 1]) : cv_undef("nextitem", "LoopContext object");
        else *out = cv_undef(name, "LoopContext object");
        return ST_OK;
    }
    *out = cv_undef(name, owner_name(obj));
    return ST_OK;
}

static Status as_index(Interp *in, int line, CVal v, int64_t *out) {
    if (v.t == CV_INT) { *out = v.i; return ST_OK; }
    if (v.t == CV_BOOL) { *out = v.b; return ST_OK; }
    if (v.t == CV_UNDEF) return undef_error(in, line, v);
    return interp_error(in, line, "indices must be integers or None, not %s", cv_type_name(v));
}

// Byte offset of code point `ci` in s (ci <= nchars).
static size_t char_offset(const CStr *s, size_t ci) {
    size_t i = 0, c = 0;
    while (i < s->len && c < ci) {
        i++;
        while (i < s->len && ((unsigned char)s->data[i] & 0xC0) == 0x80) i++;
        c++;
    }
    return i;
}

Status interp_getitem(Interp *in, int line, CVal obj, CVal key, CVal *out) {
    if (obj.t == CV_UNDEF) return undef_error(in, line, obj);
    if (obj.t == CV_LIST && obj.l->is_tuple == CL_ITER) return interp_error(in, line, "'generator' object is not subscriptable");
    if (obj.t == CV_DICT) {
        CVal *v = cv_dict_get(obj, key);
        if (v) { *out = cv_retain(*v); return ST_OK; }
        if (key.t == CV_STR) return interp_getattr(in, line, obj, key.s->data, out);
        *out = cv_undef(NULL, "dict object");
        return ST_OK;
    }
    if ((obj.t == CV_LIST || obj.t == CV_STR) && (key.t == CV_INT || key.t == CV_BOOL)) {
        int64_t i = key.t == CV_INT ? key.i : key.b;
        int64_t n = obj.t == CV_LIST ? (int64_t)obj.l->n : (int64_t)cv_str_nchars(obj.s);
        if (i < 0) i += n;
        if (i < 0 || i >= n) {
            *out = cv_undef(NULL, owner_name(obj));
            return ST_OK;
        }
        if (obj.t == CV_LIST) { *out = cv_retain(obj.l->items[i]); return ST_OK; }
        size_t a = char_offset(obj.s, (size_t)i), adv;
        chat_utf8_decode(obj.s->data + a, obj.s->len - a, &adv);
        *out = cv_str(obj.s->data + a, adv);
        return ST_OK;
    }
    if (key.t == CV_STR) return interp_getattr(in, line, obj, key.s->data, out);
    *out = cv_undef(NULL, owner_name(obj));
    return ST_OK;
}

// Python's slice.indices: clamp start / stop for a sequence of length n.
static void slice_indices(int64_t n, CVal start, CVal stop, int64_t step, int64_t *a, int64_t *b) {
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
    if (start.t == CV_NONE) *a = step < 0 ? hi : lo;
    else {
        int64_t s = start.t == CV_BOOL ? start.b : start.i;
        if (s < 0) { s += n; if (s < lo) s = lo; }
        else if (s > hi) s = hi;
        *a = s;
    }
    if (stop.t == CV_NONE) *b = step < 0 ? lo : hi;
    else {
        int64_t s = stop.t == CV_BOOL ? stop.b : stop.i;
        if (s < 0) { s += n; if (s < lo) s = lo; }
        else if (s > hi) s = hi;
        *b = s;
    }
}

Status chat_slice(Interp *in, int line, CVal v, CVal start, CVal stop, CVal step, CVal *out) {
    if (v.t == CV_UNDEF) return undef_error(in, line, v);
    int64_t st = 1, tmp;
    if (step.t != CV_NONE) { TRY(as_index(in, line, step, &st)); }
    if (start.t != CV_NONE) TRY(as_index(in, line, start, &tmp));
    if (stop.t != CV_NONE) TRY(as_index(in, line, stop, &tmp));
    if (st == 0) return interp_error(in, line, "slice step cannot be zero");
    if ((v.t != CV_LIST && v.t != CV_STR) || (v.t == CV_LIST && v.l->is_tuple == CL_ITER)) return interp_error(in, line, "'%s' object is not subscriptable", cv_type_name(v));
    int64_t n = v.t == CV_LIST ? (int64_t)v.l->n : (int64_t)cv_str_nchars(v.s);
    int64_t a, b;
    slice_indices(n, start, stop, st, &a, &b);
    if (v.t == CV_LIST) {
        CVal l = cv_list(0);
        l.l->is_tuple = v.l->is_tuple;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) cv_list_push(l, cv_retain(v.l->items[i]));
        *out = l;
        return ST_OK;
    }
    // strings: offsets of every code point
    size_t *offs = xmalloc(((size_t)n + 1) * sizeof(size_t));
    size_t c = 0;
    for (size_t i = 0; i < v.s->len; i++)
        if (((unsigned char)v.s->data[i] & 0xC0) != 0x80) offs[c++] = i;
    offs[n] = v.s->len;
    StrBuf sb = {0};
    if (st == 1 && a < b) sb_append(&sb, v.s->data + offs[a], offs[b] - offs[a]);
    else
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) sb_append(&sb, v.s->data + offs[i], offs[i + 1] - offs[i]);
    free(offs);
    *out = cv_str_take(&sb);
    return ST_OK;
}

Status chat_iterate(Interp *in, int line, CVal v, CVal *out) {
    switch (v.t) {
    case CV_LIST: *out = cv_retain(v); return ST_OK;
    case CV_UNDEF: *out = cv_list(0); return ST_OK;
    case CV_DICT: {
        CVal l = cv_list(v.d->n);
        for (size_t i = 0; i < v.d->n; i++) cv_list_push(l, cv_retain(v.d->keys[i]));
        *out = l;
        return ST_OK;
    }
    case CV_STR: {
        CVal l = cv_list(v.s->len);
        for (size_t i = 0; i < v.s->len;) {
            size_t adv;
            chat_utf8_decode(v.s->data + i, v.s->len - i, &adv);
            cv_list_push(l, cv_str(v.s->data + i, adv));
            i += adv;
        }
        *out = l;
        return ST_OK;
    }
    default: return interp_error(in, line, "'%s' object is not iterable", cv_type_name(v));
    }
}

Status chat_str_of(Interp *in, int line, CVal v, CVal *out) {
    if (v.t == CV_STR) { *out = cv_retain(v); return ST_OK; }
    StrBuf sb = {0};
    Status st = cv_to_str(&sb, v, in->e);
    if (st != ST_OK) { sb_free(&sb); return located(in, line, st); }
    *out = cv_str_take(&sb);
    return ST_OK;
}

// ---------------------------------------------------------------- operators
static Status type_error2(Interp *in, int line, const char *op, CVal a, CVal b) {
    return interp_error(in, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, cv_type_name(a), cv_type_name(b));
}

static int64_t ival(CVal v) { return v.t == CV_BOOL ? v.b : v.i; }
static int is_intlike(CVal v) { return v.t == CV_INT || v.t == CV_BOOL; }

static Status repeat(Interp *in, int line, CVal seq, int64_t times, CVal *out) {
    if (times < 0) times = 0;
    if (seq.t == CV_STR) {
        if (seq.s->len && (uint64_t)times > CHAT_MAX_STR / seq.s->len) return interp_error(in, line, "string larger than %u bytes", CHAT_MAX_STR);
        StrBuf sb = {0};
        for (int64_t i = 0; i < times; i++) sb_append(&sb, seq.s->data, seq.s->len);
        *out = cv_str_take(&sb);
        return ST_OK;
    }
    if (seq.l->n && (uint64_t)times > (CHAT_MAX_STR / 16) / seq.l->n) return interp_error(in, line, "list too large");
    CVal l = cv_list(0);
    l.l->is_tuple = seq.l->is_tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < seq.l->n; j++) cv_list_push(l, cv_retain(seq.l->items[j]));
    *out = l;
    return ST_OK;
}

static Status arith(Interp *in, int line, int op, CVal a, CVal b, CVal *out) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    if (op == OP_CONCAT) {
        StrBuf sb = {0};
        Status st = cv_to_str(&sb, a, in->e);
        if (st == ST_OK) st = cv_to_str(&sb, b, in->e);
        if (st != ST_OK) { sb_free(&sb); return located(in, line, st); }
        if (sb.len > CHAT_MAX_STR) { sb_free(&sb); return interp_error(in, line, "string larger than %u bytes", CHAT_MAX_STR); }
        *out = cv_str_take(&sb);
        return ST_OK;
    }
    if (a.t == CV_UNDEF) return undef_error(in, line, a);
    if (b.t == CV_UNDEF) return undef_error(in, line, b);
    if (cv_is_num(a) && cv_is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) {
            int64_t x = ival(a), y = ival(b), r;
            switch (op) {
            case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; *out = cv_int(r); return ST_OK;
            case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; *out = cv_int(r); return ST_OK;
            case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; *out = cv_int(r); return ST_OK;
            case OP_DIV:
                if (y == 0) return interp_error(in, line, "division by zero");
                *out = cv_float((double)x / (double)y);
                return ST_OK;
            case OP_FLOORDIV: case OP_MOD: {
                if (y == 0) return interp_error(in, line, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto overflow;
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
                *out = cv_int(op == OP_FLOORDIV ? q : m);
                return ST_OK;
            }
            case OP_POW: {
                if (y < 0) { *out = cv_float(pow((double)x, (double)y)); return ST_OK; }
                int64_t res = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if (e & 1) { if (__builtin_mul_overflow(res, base, &res)) goto overflow; }
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
                }
                *out = cv_int(res);
                return ST_OK;
            }
            }
        } else {
            double x = cv_as_double(a), y = cv_as_double(b);
            switch (op) {
            case OP_ADD: *out = cv_float(x + y); return ST_OK;
            case OP_SUB: *out = cv_float(x - y); return ST_OK;
            case OP_MUL: *out = cv_float(x * y); return ST_OK;
            case OP_DIV:
                if (y == 0) return interp_error(in, line, "float division by zero");
                *out = cv_float(x / y);
                return ST_OK;
            case OP_FLOORDIV: case OP_MOD: {
                if (y == 0) return interp_error(in, line, "float divmod()");
                double m = fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                double q = (x - m) / y;
                if (op == OP_MOD) *out = cv_float(m == 0 ? copysign(0.0, y) : m);
                else *out = cv_float(q == 0 ? copysign(0.0, x / y) : round(q));
                return ST_OK;
            }
            case OP_POW:
                if (x == 0 && y < 0) return interp_error(in, line, "0.0 cannot be raised to a negative power");
                if (x < 0 && y != floor(y)) return interp_error(in, line, "complex results are not supported");
                *out = cv_float(pow(x, y));
                return ST_OK;
            }
        }
    }
    if (op == OP_ADD && a.t == CV_STR && b.t == CV_STR) {
        if (a.s->len + b.s->len > CHAT_MAX_STR) return interp_error(in, line, "string larger than %u bytes", CHAT_MAX_STR);
        StrBuf sb = {0};
        sb_append(&sb, a.s->data, a.s->len);
        sb_append(&sb, b.s->data, b.s->len);
        *out = cv_str_take(&sb);
        return ST_OK;
    }
    if (op == OP_ADD && a.t == CV_LIST && b.t == CV_LIST && a.l->is_tuple == b.l->is_tuple && a.l->is_tuple != CL_ITER) {
        CVal l = cv_list(a.l->n + b.l->n);
        l.l->is_tuple = a.l->is_tuple;
        for (size_t i = 0; i < a.l->n; i++) cv_list_push(l, cv_retain(a.l->items[i]));
        for (size_t i = 0; i < b.l->n; i++) cv_list_push(l, cv_retain(b.l->items[i]));
        *out = l;
        return ST_OK;
    }
    if (op == OP_ADD && a.t == CV_STR)
        return interp_error(in, line, "can only concatenate str (not \"%s\") to str", cv_type_name(b));
#define SEQ(v) ((v).t == CV_STR || ((v).t == CV_LIST && (v).l->is_tuple != CL_ITER))
    if (op == OP_MUL && SEQ(a) && is_intlike(b)) return repeat(in, line, a, ival(b), out);
    if (op == OP_MUL && SEQ(b) && is_intlike(a)) return repeat(in, line, b, ival(a), out);
#undef SEQ
    if (op == OP_MOD && a.t == CV_STR) return interp_error(in, line, "printf-style string formatting ('%%') is not supported");
    return type_error2(in, line, names[op], a, b);
overflow:
    return interp_error(in, line, "integer overflow in '%s' (Python integers are unbounded; this engine uses 64 bits)", names[op]);
}

static Status contains(Interp *in, int line, CVal container, CVal item, int *out) {
    switch (container.t) {
    case CV_STR:
        if (item.t != CV_STR) return interp_error(in, line, "'in <string>' requires string as left operand, not %s", cv_type_name(item));
        *out = item.s->len == 0 || memmem(container.s->data, container.s->len, item.s->data, item.s->len) != NULL;
        return ST_OK;
    case CV_LIST:
        *out = 0;
        for (size_t i = 0; i < container.l->n && !*out; i++) *out = cv_equal(container.l->items[i], item);
        return ST_OK;
    case CV_DICT: *out = cv_dict_get(container, item) != NULL; return ST_OK;
    case CV_UNDEF: *out = 0; return ST_OK;
    default: return interp_error(in, line, "argument of type '%s' is not iterable", cv_type_name(container));
    }
}

static Status compare_op(Interp *in, int line, int op, CVal a, CVal b, int *out) {
    switch (op) {
    case OP_EQ: *out = cv_equal(a, b); return ST_OK;
    case OP_NE: *out = !cv_equal(a, b); return ST_OK;
    case OP_IN: return contains(in, line, b, a, out);
    case OP_NOTIN: TRY(contains(in, line, b, a, out)); *out = !*out; return ST_OK;
    default: break;
    }
    if (a.t == CV_UNDEF) return undef_error(in, line, a);
    if (b.t == CV_UNDEF) return undef_error(in, line, b);
    int c;
    if (cv_is_num(a) && cv_is_num(b) && (isnan(cv_as_double(a)) || isnan(cv_as_double(b)))) { *out = 0; return ST_OK; }
    TRY(located(in, line, cv_compare(a, b, &c, in->e)));
    *out = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
    return ST_OK;
}

// ---------------------------------------------------------------- expressions
static void release_all(CVal *v, size_t n) {
    for (size_t i = 0; i < n; i++) cv_release(v[i]);
}

// Evaluate positional and keyword arguments of a call / filter / test node.
static Status eval_args(Interp *in, const Node *n, CVal **args, CVal *kw) {
    *args = n->args.n ? xcalloc(n->args.n, sizeof(CVal)) : NULL;
    *kw = cv_undef(NULL, NULL);
    for (size_t i = 0; i < n->args.n; i++) {
        Status st = interp_eval(in, n->args.v[i], &(*args)[i]);
        if (st != ST_OK) { release_all(*args, i); free(*args); *args = NULL; return st; }
    }
    if (n->nkw) {
        *kw = cv_dict();
        for (size_t i = 0; i < n->nkw; i++) {
            CVal v;
            Status st = interp_eval(in, n->kwvals.v[i], &v);
            if (st != ST_OK) {
                release_all(*args, n->args.n);
                free(*args);
                *args = NULL;
                cv_release(*kw);
                return st;
            }
            cv_dict_set(*kw, cv_cstr(n->kwnames[i]), v);
        }
    }
    return ST_OK;
}

static Status apply_filter(Interp *in, const Node *n, CVal input, CVal *out) {
    CVal *args, kw;
    TRY(eval_args(in, n, &args, &kw));
    Status st = chat_filter(in, n->line, n->name, input, args, n->args.n, kw, out);
    release_all(args, n->args.n);
    free(args);
    cv_release(kw);
    return st;
}

// A filter chain whose innermost input is `input` (filter blocks, set blocks).
static Status apply_chain(Interp *in, const Node *chain, CVal input, CVal *out) {
    if (!chain) { *out = cv_retain(input); return ST_OK; }
    CVal mid;
    TRY(apply_chain(in, chain->a, input, &mid));
    Status st = apply_filter(in, chain, mid, out);
    cv_release(mid);
    return st;
}

static Status eval_inner(Interp *in, const Node *n, CVal *out) {
    CVal a = {0}, b = {0};
    Status st = ST_OK;
    switch (n->k) {
    case N_LIT: *out = cv_retain(n->lit); return ST_OK;
    case N_NAME: *out = lookup(in, n->name); return ST_OK;
    case N_LIST: case N_TUPLE: {
        CVal l = cv_list(n->args.n);
        l.l->is_tuple = n->k == N_TUPLE;
        for (size_t i = 0; i < n->args.n; i++) {
            CVal v;
            st = interp_eval(in, n->args.v[i], &v);
            if (st != ST_OK) { cv_release(l); return st; }
            cv_list_push(l, v);
        }
        *out = l;
        return ST_OK;
    }
    case N_DICT: {
        CVal d = cv_dict();
        for (size_t i = 0; i < n->args.n; i++) {
            CVal k, v;
            st = interp_eval(in, n->args.v[i], &k);
            if (st != ST_OK) { cv_release(d); return st; }
            if (k.t == CV_LIST || k.t == CV_DICT || k.t == CV_UNDEF) {
                cv_release(k);
                cv_release(d);
                return interp_error(in, n->line, "unhashable type: '%s'", cv_type_name(k));
            }
            st = interp_eval(in, n->kwvals.v[i], &v);
            if (st != ST_OK) { cv_release(k); cv_release(d); return st; }
            cv_dict_set(d, k, v);
        }
        *out = d;
        return ST_OK;
    }
    case N_ATTR:
        TRY(interp_eval(in, n->a, &a));
        st = interp_getattr(in, n->line, a, n->name, out);
        cv_release(a);
        return st;
    case N_ITEM:
        TRY(interp_eval(in, n->a, &a));
        st = interp_eval(in, n->b, &b);
        if (st == ST_OK) st = interp_getitem(in, n->line, a, b, out);
        cv_release(a);
        cv_release(b);
        return st;
    case N_SLICE: {
        CVal parts[3] = {cv_none(), cv_none(), cv_none()};
        const Node *pn[3] = {n->b, n->c, n->d};
        TRY(interp_eval(in, n->a, &a));
        for (int i = 0; i < 3 && st == ST_OK; i++)
            if (pn[i]) st = interp_eval(in, pn[i], &parts[i]);
        if (st == ST_OK) st = chat_slice(in, n->line, a, parts[0], parts[1], parts[2], out);
        for (int i = 0; i < 3; i++) cv_release(parts[i]);
        cv_release(a);
        return st;
    }
    case N_CALL: {
        TRY(interp_eval(in, n->a, &a));
        CVal *args, kw;
        st = eval_args(in, n, &args, &kw);
        if (st != ST_OK) { cv_release(a); return st; }
        if (a.t == CV_UNDEF) st = undef_error(in, n->line, a);
        else st = interp_call(in, n->line, a, args, n->args.n, kw, out);
        release_all(args, n->args.n);
        free(args);
        cv_release(kw);
        cv_release(a);
        return st;
    }
    case N_FILTER:
        TRY(interp_eval(in, n->a, &a));
        st = apply_filter(in, n, a, out);
        cv_release(a);
        return st;
    case N_TEST: {
        TRY(interp_eval(in, n->a, &a));
        CVal *args, kw;
        st = eval_args(in, n, &args, &kw);
        if (st != ST_OK) { cv_release(a); return st; }
        int r = 0;
        if (kw.t != CV_UNDEF) st = interp_error(in, n->line, "test '%s' takes no keyword arguments", n->name);
        else st = chat_test(in, n->line, n->name, a, args, n->args.n, &r);
        release_all(args, n->args.n);
        free(args);
        cv_release(kw);
        cv_release(a);
        if (st == ST_OK) *out = cv_bool(n->op ? !r : r);
        return st;
    }
    case N_NEG: case N_POS:
        TRY(interp_eval(in, n->a, &a));
        if (a.t == CV_UNDEF) st = undef_error(in, n->line, a);
        else if (a.t == CV_INT || a.t == CV_BOOL) {
            int64_t x = ival(a);
            if (n->k == N_NEG && x == INT64_MIN) st = interp_error(in, n->line, "integer overflow");
            else *out = cv_int(n->k == N_NEG ? -x : x);
        } else if (a.t == CV_FLOAT) *out = cv_float(n->k == N_NEG ? -a.f : a.f);
        else st = interp_error(in, n->line, "bad operand type for unary %c: '%s'", n->k == N_NEG ? '-' : '+', cv_type_name(a));
        cv_release(a);
        return st;
    case N_NOT:
        TRY(interp_eval(in, n->a, &a));
        *out = cv_bool(!cv_truthy(a));
        cv_release(a);
        return ST_OK;
    case N_AND: case N_OR:
        TRY(interp_eval(in, n->a, &a));
        if (cv_truthy(a) == (n->k == N_OR)) { *out = a; return ST_OK; }
        cv_release(a);
        return interp_eval(in, n->b, out);
    case N_BIN:
        TRY(interp_eval(in, n->a, &a));
        st = interp_eval(in, n->b, &b);
        if (st == ST_OK) st = arith(in, n->line, n->op, a, b, out);
        cv_release(a);
        cv_release(b);
        return st;
    case N_CMP: {
        TRY(interp_eval(in, n->a, &a));
        int r = 1;
        for (size_t i = 0; i < n->args.n && r && st == ST_OK; i++) {
            st = interp_eval(in, n->args.v[i], &b);
            if (st != ST_OK) break;
            st = compare_op(in, n->line, n->cmpops[i], a, b, &r);
            cv_release(a);
            a = b;
        }
        cv_release(a);
        if (st == ST_OK) *out = cv_bool(r);
        return st;
    }
    case N_COND:
        TRY(interp_eval(in, n->b, &a));
        int t = cv_truthy(a);
        cv_release(a);
        if (t) return interp_eval(in, n->a, out);
        if (n->c) return interp_eval(in, n->c, out);
        *out = cv_undef(NULL, NULL);
        return ST_OK;
    default:
        return interp_error(in, n->line, "statement used as an expression");
    }
}

Status interp_eval(Interp *in, const Node *n, CVal *out) {
    if (++in->depth > CHAT_MAX_DEPTH * 4) { in->depth--; return interp_error(in, n->line, "expression nested too deeply"); }
    Status st = eval_inner(in, n, out);
    in->depth--;
    return st;
}

// ---------------------------------------------------------------- calls
static Status run_captured(Interp *in, const NodeList *body, Scope *scope, CVal *out) {
    StrBuf buf = {0};
    StrBuf *saved_out = in->out;
    Scope *saved_scope = in->scope;
    in->out = &buf;
    in->scope = scope;
    Status st = interp_run(in, body);
    in->out = saved_out;
    in->scope = saved_scope;
    if (st != ST_OK) { sb_free(&buf); return st; }
    *out = cv_str_take(&buf);
    return ST_OK;
}

// Bind a macro's (or caller's) parameters: positional, then keywords, then defaults.
static Status bind_params(Interp *in, int line, const Node *def, Scope *s, CVal *args, size_t nargs, CVal kw) {
    CVal varargs = cv_list(0);
    varargs.l->is_tuple = CL_TUPLE;
    CVal kwargs = cv_dict();
    for (size_t i = nargs < def->ntargets ? nargs : def->ntargets; i < nargs; i++) cv_list_push(varargs, cv_retain(args[i]));
    for (size_t i = 0; i < def->ntargets; i++) {
        const char *pname = def->targets[i];
        CVal *k = kw.t == CV_DICT ? cv_dict_get_str(kw, pname) : NULL;
        if (i < nargs && k) {
            cv_release(varargs);
            cv_release(kwargs);
            return interp_error(in, line, "macro '%s' got multiple values for argument '%s'", def->name ? def->name : "caller", pname);
        }
        if (i < nargs) scope_set(s, pname, cv_retain(args[i]));
        else if (k) scope_set(s, pname, cv_retain(*k));
        else if (def->kwvals.v[i]) {
            CVal v;
            Scope *saved = in->scope;
            in->scope = s;
            Status st = interp_eval(in, def->kwvals.v[i], &v);
            in->scope = saved;
            if (st != ST_OK) { cv_release(varargs); cv_release(kwargs); return st; }
            scope_set(s, pname, v);
        } else {
            scope_set(s, pname, cv_undef(pname, NULL));
        }
    }
    if (kw.t == CV_DICT)
        for (size_t i = 0; i < kw.d->n; i++) {
            int is_param = 0;
            for (size_t j = 0; j < def->ntargets; j++)
                if (kw.d->keys[i].t == CV_STR && !strcmp(kw.d->keys[i].s->data, def->targets[j])) is_param = 1;
            if (!is_param && !(kw.d->keys[i].t == CV_STR && !strcmp(kw.d->keys[i].s->data, "caller")))
                cv_dict_set(kwargs, cv_retain(kw.d->keys[i]), cv_retain(kw.d->vals[i]));
        }
    scope_set(s, "varargs", varargs);
    scope_set(s, "kwargs", kwargs);
    return ST_OK;
}

static Status call_macro(Interp *in, int line, const CFunc *f, CVal *args, size_t nargs, CVal kw, CVal *out) {
    if (in->depth > CHAT_MAX_DEPTH * 3) return interp_error(in, line, "macro calls nested deeper than %d (runaway recursion?)", CHAT_MAX_DEPTH);
    const Node *def = f->node;
    Scope s = {.parent = f->kind == CF_CALLER ? f->scope : in->root, .vars = cv_dict()};
    if (f->kind == CF_CALLER && !f->scope) {
        cv_release(s.vars);
        return interp_error(in, line, "caller() used after its {%% call %%} block ended");
    }
    Status st = bind_params(in, line, def, &s, args, nargs, kw);
    if (st == ST_OK && f->kind == CF_MACRO) {
        CVal *c = kw.t == CV_DICT ? cv_dict_get_str(kw, "caller") : NULL;
        if (c) scope_set(&s, "caller", cv_retain(*c));
    }
    if (st == ST_OK) {
        int saved_ctl = in->loop_ctl;
        in->depth += 4;
        st = run_captured(in, &def->body, &s, out);
        in->depth -= 4;
        in->loop_ctl = saved_ctl;
    }
    cv_release(s.vars);
    return st;
}

Status interp_call(Interp *in, int line, CVal fn, CVal *args, size_t nargs, CVal kw, CVal *out) {
    if (fn.t == CV_UNDEF) return undef_error(in, line, fn);
    if (fn.t != CV_FUNC) return interp_error(in, line, "'%s' object is not callable", cv_type_name(fn));
    switch (fn.fn->kind) {
    case CF_BUILTIN: return chat_call_builtin(in, line, fn.fn, args, nargs, kw, out);
    case CF_METHOD: return chat_call_method(in, line, fn.fn, args, nargs, kw, out);
    case CF_MACRO: case CF_CALLER: return call_macro(in, line, fn.fn, args, nargs, kw, out);
    }
    return interp_error(in, line, "not callable");
}

// ---------------------------------------------------------------- statements
static Status assign_targets(Interp *in, int line, const char *const *targets, size_t n, CVal v) {
    if (n == 1) { scope_set(in->scope, targets[0], cv_retain(v)); return ST_OK; }
    CVal items;
    TRY(chat_iterate(in, line, v, &items));
    if (items.l->n != n) {
        Status st = interp_error(in, line, items.l->n > n ? "too many values to unpack (expected %zu)"
                                                           : "not enough values to unpack (expected %zu, got %zu)",
                                 n, items.l->n);
        cv_release(items);
        return st;
    }
    for (size_t i = 0; i < n; i++) scope_set(in->scope, targets[i], cv_retain(items.l->items[i]));
    cv_release(items);
    return ST_OK;
}

static Status run_for(Interp *in, const Node *n) {
    CVal seq, items;
    TRY(interp_eval(in, n->a, &seq));
    Status st = chat_iterate(in, n->line, seq, &items);
    cv_release(seq);
    if (st != ST_OK) return st;
    Scope *outer = in->scope;
    if (n->b) {   // `for x in xs if cond`: filter first, so loop.length counts kept items
        CVal kept = cv_list(0);
        for (size_t i = 0; i < items.l->n && st == ST_OK; i++) {
            Scope s = {.parent = outer, .vars = cv_dict()};
            in->scope = &s;
            CVal c;
            st = assign_targets(in, n->line, n->targets, n->ntargets, items.l->items[i]);
            if (st == ST_OK) st = interp_eval(in, n->b, &c);
            in->scope = outer;
            if (st == ST_OK) {
                if (cv_truthy(c)) cv_list_push(kept, cv_retain(items.l->items[i]));
                cv_release(c);
            }
            cv_release(s.vars);
        }
        cv_release(items);
        items = kept;
        if (st != ST_OK) { cv_release(items); return st; }
    }
    CLoop *lp = xcalloc(1, sizeof(CLoop));
    lp->refs = 1;
    lp->length = (int64_t)items.l->n;
    lp->items = items.l;
    items.l->refs++;
    CVal loopv = {.t = CV_LOOP};
    loopv.loop = lp;
    for (size_t i = 0; i < items.l->n && st == ST_OK; i++) {
        lp->index0 = (int64_t)i;
        Scope s = {.parent = outer, .vars = cv_dict()};
        in->scope = &s;
        scope_set(&s, "loop", cv_retain(loopv));
        st = assign_targets(in, n->line, n->targets, n->ntargets, items.l->items[i]);
        if (st == ST_OK) st = interp_run(in, &n->body);
        in->scope = outer;
        cv_release(s.vars);
        int ctl = in->loop_ctl;
        in->loop_ctl = 0;
        if (ctl == 1) break;
    }
    if (st == ST_OK && items.l->n == 0 && n->orelse.n) st = interp_run(in, &n->orelse);
    cv_release(loopv);
    cv_release(items);
    return st;
}

static Status run_set(Interp *in, const Node *n) {
    CVal v;
    TRY(interp_eval(in, n->a, &v));
    Status st;
    if (n->name) {   // {% set ns.attr = v %}
        CVal target = lookup(in, n->targets[0]);
        if (target.t != CV_NS) st = interp_error(in, n->line, "cannot assign attribute on non-namespace object");
        else { cv_dict_set(target, cv_cstr(n->name), cv_retain(v)); st = ST_OK; }
        cv_release(target);
    } else {
        st = assign_targets(in, n->line, n->targets, n->ntargets, v);
    }
    cv_release(v);
    return st;
}

static Status run_callblock(Interp *in, const Node *n) {
    const Node *call = n->a;
    CVal fn, *args, kw, res;
    TRY(interp_eval(in, call->a, &fn));
    Status st = eval_args(in, call, &args, &kw);
    if (st != ST_OK) { cv_release(fn); return st; }
    if (kw.t != CV_DICT) kw = cv_dict();
    CVal caller = cv_func(CF_CALLER, "caller");
    caller.fn->node = n;
    caller.fn->scope = in->scope;
    cv_dict_set(kw, cv_cstr("caller"), cv_retain(caller));
    st = interp_call(in, n->line, fn, args, call->args.n, kw, &res);
    caller.fn->scope = NULL;
    cv_release(caller);
    release_all(args, call->args.n);
    free(args);
    cv_release(kw);
    cv_release(fn);
    if (st != ST_OK) return st;
    st = res.t == CV_STR ? emit(in, n->line, res.s->data, res.s->len) : ST_OK;
    cv_release(res);
    return st;
}

static size_t count_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static Status run_generation(Interp *in, const Node *n) {
    int active = in->root_emitted;
    size_t start = in->root_out->len;
    CVal body;
    TRY(run_captured(in, &n->body, in->scope, &body));
    if (active && in->spans) {
        GenSpans *g = in->spans;
        if (g->n == g->cap) {
            g->cap = g->cap ? g->cap * 2 : 8;
            g->spans = xrealloc(g->spans, g->cap * sizeof(GenSpan));
        }
        size_t cs = count_chars(in->root_out->data ? in->root_out->data : "", start);
        g->spans[g->n++] = (GenSpan){start, start + body.s->len, cs, cs + cv_str_nchars(body.s)};
    }
    Status st = emit(in, n->line, body.s->data, body.s->len);
    cv_release(body);
    return st;
}

static Status run_stmt(Interp *in, const Node *n) {
    CVal v, r;
    Status st;
    switch (n->k) {
    case S_DATA: return emit(in, n->line, n->lit.s->data, n->lit.s->len);
    case S_OUTPUT:
        TRY(interp_eval(in, n->a, &v));
        st = chat_str_of(in, n->line, v, &r);
        cv_release(v);
        if (st != ST_OK) return st;
        st = emit(in, n->line, r.s->data, r.s->len);
        cv_release(r);
        return st;
    case S_IF: {
        TRY(interp_eval(in, n->a, &v));
        int t = cv_truthy(v);
        cv_release(v);
        return interp_run(in, t ? &n->body : &n->orelse);
    }
    case S_FOR: return run_for(in, n);
    case S_SET: return run_set(in, n);
    case S_SETBLOCK:
        TRY(run_captured(in, &n->body, in->scope, &v));
        st = apply_chain(in, n->a, v, &r);
        cv_release(v);
        if (st == ST_OK) scope_set(in->scope, n->targets[0], r);
        return st;
    case S_MACRO: {
        CVal f = cv_func(CF_MACRO, n->name);
        f.fn->node = n;
        scope_set(in->scope, n->name, f);
        return ST_OK;
    }
    case S_CALLBLOCK: return run_callblock(in, n);
    case S_FILTERBLOCK:
        TRY(run_captured(in, &n->body, in->scope, &v));
        st = apply_chain(in, n->a, v, &r);
        cv_release(v);
        if (st != ST_OK) return st;
        st = chat_str_of(in, n->line, r, &v);
        cv_release(r);
        if (st != ST_OK) return st;
        st = emit(in, n->line, v.s->data, v.s->len);
        cv_release(v);
        return st;
    case S_BREAK: in->loop_ctl = 1; return ST_OK;
    case S_CONTINUE: in->loop_ctl = 2; return ST_OK;
    case S_GENERATION: return run_generation(in, n);
    case S_WITH: {
        Scope s = {.parent = in->scope, .vars = cv_dict()};
        st = ST_OK;
        for (size_t i = 0; i < n->ntargets && st == ST_OK; i++) {
            st = interp_eval(in, n->kwvals.v[i], &v);
            if (st == ST_OK) scope_set(&s, n->targets[i], v);
        }
        if (st == ST_OK) {
            Scope *saved = in->scope;
            in->scope = &s;
            st = interp_run(in, &n->body);
            in->scope = saved;
        }
        cv_release(s.vars);
        return st;
    }
    default: return interp_error(in, n->line, "expression used as a statement");
    }
}

Status interp_run(Interp *in, const NodeList *body) {
    if (++in->depth > CHAT_MAX_DEPTH * 4) { in->depth--; return interp_error(in, body->n ? body->v[0]->line : 0, "blocks nested too deeply"); }
    Status st = ST_OK;
    for (size_t i = 0; i < body->n && st == ST_OK && !in->loop_ctl; i++) st = run_stmt(in, body->v[i]);
    in->depth--;
    return st;
}
