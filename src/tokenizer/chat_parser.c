// chat_parser.c: tokens -> syntax tree, following Jinja2's grammar and operator precedence:
//   cond:    or ['if' or ['else' cond]]
//   or / and / not, then comparisons (== != < <= > >= in, not in; chained),
//   + -, then ~, then * / // %, then ** (left-assoc), then unary - +,
//   then primary with postfix (.attr [sub] (call)) and filters / tests (| name, is name).
// Statements: if / elif / else, for (else, `if` filter), set (= and block), macro, call,
// filter, with, break, continue, generation. Anything else is an error naming the tag.
#include "chat_internal.h"

#include <stdarg.h>
#include <string.h>

typedef struct Ps {
    const TokList *toks;
    size_t i;
    const char *what;
    ChatAst *ast;
    Err *e;
    int depth;
    const char *block_stack[CHAT_MAX_DEPTH];   // open tags, for "innermost block" messages
    int nblocks;
} Ps;

static Tok *cur(Ps *p) { return &p->toks->t[p->i]; }
static Tok *peek(Ps *p, size_t k) {
    size_t j = p->i + k;
    return &p->toks->t[j < p->toks->n ? j : p->toks->n - 1];
}
static void adv(Ps *p) { if (p->i + 1 < p->toks->n) p->i++; }

static int is_op(const Tok *t, const char *op) { return t->k == TK_OP && !strcmp(t->text, op); }
static int is_name(const Tok *t, const char *nm) { return t->k == TK_NAME && !strcmp(t->text, nm); }

static const char *describe(const Tok *t) {
    switch (t->k) {
    case TK_EOF: return "end of template";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_END: return "end of statement block";
    case TK_BLOCK_BEGIN: return "begin of statement block";
    case TK_VAR_BEGIN: return "begin of print statement";
    case TK_DATA: return "template data";
    default: return t->text;
    }
}

static Status fail(Ps *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static Status fail(Ps *p, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(p->e, ST_EINVAL, "%s: line %d: %s", p->what, line, msg);
}

static Status expect_op(Ps *p, const char *op) {
    if (!is_op(cur(p), op)) return fail(p, cur(p)->line, "expected '%s', got '%s'", op, describe(cur(p)));
    adv(p);
    return ST_OK;
}

static Status expect_name(Ps *p, const char **out);

static void nl_push(NodeList *l, Node *n) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->v = xrealloc(l->v, l->cap * sizeof(Node *));
    }
    l->v[l->n++] = n;
}

static Node *mk(Ps *p, NodeKind k, int line) {
    ChatAst *a = p->ast;
    Node *n = xcalloc(1, sizeof(Node));
    n->k = k;
    n->line = line;
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->nodes = xrealloc(a->nodes, a->cap * sizeof(Node *));
    }
    a->nodes[a->n++] = n;
    return n;
}

static const char *intern(Ps *p, const char *s) {
    ChatAst *a = p->ast;
    if (a->nstrs == a->capstrs) {
        a->capstrs = a->capstrs ? a->capstrs * 2 : 32;
        a->strs = xrealloc(a->strs, a->capstrs * sizeof(char *));
    }
    return a->strs[a->nstrs++] = xstrdup(s);
}

static void push_name(const char ***arr, size_t *n, const char *s) {
    *arr = xrealloc((void *)*arr, (*n + 1) * sizeof(char *));
    (*arr)[(*n)++] = s;
}

static Status expect_name(Ps *p, const char **out) {
    if (cur(p)->k != TK_NAME) return fail(p, cur(p)->line, "expected a name, got '%s'", describe(cur(p)));
    *out = intern(p, cur(p)->text);
    adv(p);
    return ST_OK;
}

static Status enter(Ps *p) {
    if (++p->depth > CHAT_MAX_DEPTH) return fail(p, cur(p)->line, "template nested deeper than %d levels", CHAT_MAX_DEPTH);
    return ST_OK;
}

static Status parse_expr(Ps *p, int with_cond, Node **out);
static Status parse_or(Ps *p, Node **out);
static Status parse_unary(Ps *p, int with_filter, Node **out);
static Status parse_primary(Ps *p, Node **out);
static Status parse_postfix(Ps *p, Node **node);
static Status parse_filter_expr(Ps *p, Node **node);

// ---------------------------------------------------------------- expressions
// Arguments of a call, filter or test: positional then keyword (name=value).
static Status parse_call_args(Ps *p, Node *n) {
    TRY(expect_op(p, "("));
    int first = 1;
    while (!is_op(cur(p), ")")) {
        if (!first) TRY(expect_op(p, ","));
        if (is_op(cur(p), ")")) break;
        first = 0;
        if (is_op(cur(p), "*") || is_op(cur(p), "**"))
            return fail(p, cur(p)->line, "*args and **kwargs in calls are not supported");
        Node *v;
        if (cur(p)->k == TK_NAME && is_op(peek(p, 1), "=")) {
            const char *nm = intern(p, cur(p)->text);
            adv(p);
            adv(p);
            TRY(parse_expr(p, 1, &v));
            push_name(&n->kwnames, &n->nkw, nm);
            nl_push(&n->kwvals, v);
        } else {
            if (n->nkw) return fail(p, cur(p)->line, "positional argument follows keyword argument");
            TRY(parse_expr(p, 1, &v));
            nl_push(&n->args, v);
        }
    }
    adv(p);
    return ST_OK;
}

// (a, b) / a, b: `explicit` when inside parentheses. with_cond=0 for `for ... in x if y`.
static Status parse_tuple(Ps *p, int with_cond, int explicit, Node **out) {
    int line = cur(p)->line;
    Node *first = NULL;
    Node *t = NULL;
    int saw_comma = 0;
    for (;;) {
        if (saw_comma) {
            Tok *c = cur(p);
            if (c->k == TK_VAR_END || c->k == TK_BLOCK_END || is_op(c, ")") || is_name(c, "in") ||
                (!with_cond && is_name(c, "if")))
                break;
        }
        if (explicit && !saw_comma && is_op(cur(p), ")")) {   // ()
            Node *e = mk(p, N_TUPLE, line);
            *out = e;
            return ST_OK;
        }
        Node *v;
        TRY(parse_expr(p, with_cond, &v));
        if (!first) first = v;
        else {
            if (!t) { t = mk(p, N_TUPLE, line); nl_push(&t->args, first); }
            nl_push(&t->args, v);
        }
        if (!is_op(cur(p), ",")) break;
        adv(p);
        saw_comma = 1;
        if (!t) { t = mk(p, N_TUPLE, line); nl_push(&t->args, first); }
    }
    *out = t ? t : first;
    return ST_OK;
}

static Status parse_expr(Ps *p, int with_cond, Node **out) {
    TRY(enter(p));
    Node *n;
    TRY(parse_or(p, &n));
    while (with_cond && is_name(cur(p), "if")) {
        int line = cur(p)->line;
        adv(p);
        Node *c = mk(p, N_COND, line);
        c->a = n;
        TRY(parse_or(p, &c->b));
        if (is_name(cur(p), "else")) {
            adv(p);
            TRY(parse_expr(p, 1, &c->c));
        }
        n = c;
    }
    p->depth--;
    *out = n;
    return ST_OK;
}

static Status parse_not(Ps *p, Node **out);
static Status parse_and(Ps *p, Node **out) {
    TRY(parse_not(p, out));
    while (is_name(cur(p), "and")) {
        Node *n = mk(p, N_AND, cur(p)->line);
        adv(p);
        n->a = *out;
        TRY(parse_not(p, &n->b));
        *out = n;
    }
    return ST_OK;
}

static Status parse_or(Ps *p, Node **out) {
    TRY(parse_and(p, out));
    while (is_name(cur(p), "or")) {
        Node *n = mk(p, N_OR, cur(p)->line);
        adv(p);
        n->a = *out;
        TRY(parse_and(p, &n->b));
        *out = n;
    }
    return ST_OK;
}

static Status parse_compare(Ps *p, Node **out);
static Status parse_not(Ps *p, Node **out) {
    if (is_name(cur(p), "not")) {
        Node *n = mk(p, N_NOT, cur(p)->line);
        adv(p);
        TRY(enter(p));
        TRY(parse_not(p, &n->a));
        p->depth--;
        *out = n;
        return ST_OK;
    }
    return parse_compare(p, out);
}

static Status parse_math1(Ps *p, Node **out);
static Status parse_compare(Ps *p, Node **out) {
    Node *first;
    TRY(parse_math1(p, &first));
    Node *cmp = NULL;
    for (;;) {
        Tok *t = cur(p);
        int op = -1;
        if (is_op(t, "==")) op = OP_EQ;
        else if (is_op(t, "!=")) op = OP_NE;
        else if (is_op(t, "<")) op = OP_LT;
        else if (is_op(t, "<=")) op = OP_LE;
        else if (is_op(t, ">")) op = OP_GT;
        else if (is_op(t, ">=")) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(peek(p, 1), "in")) { op = OP_NOTIN; adv(p); }
        if (op < 0) break;
        adv(p);
        if (!cmp) {
            cmp = mk(p, N_CMP, t->line);
            cmp->a = first;
        }
        Node *rhs;
        TRY(parse_math1(p, &rhs));
        nl_push(&cmp->args, rhs);
        cmp->cmpops = xrealloc(cmp->cmpops, cmp->args.n * sizeof(int));
        cmp->cmpops[cmp->args.n - 1] = op;
    }
    *out = cmp ? cmp : first;
    return ST_OK;
}

static Node *binop(Ps *p, int op, int line, Node *a, Node *b) {
    Node *n = mk(p, N_BIN, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static Status parse_concat(Ps *p, Node **out);
static Status parse_math1(Ps *p, Node **out) {
    TRY(parse_concat(p, out));
    while (is_op(cur(p), "+") || is_op(cur(p), "-")) {
        int op = is_op(cur(p), "+") ? OP_ADD : OP_SUB, line = cur(p)->line;
        adv(p);
        Node *r;
        TRY(parse_concat(p, &r));
        *out = binop(p, op, line, *out, r);
    }
    return ST_OK;
}

static Status parse_math2(Ps *p, Node **out);
static Status parse_concat(Ps *p, Node **out) {
    TRY(parse_math2(p, out));
    while (is_op(cur(p), "~")) {
        int line = cur(p)->line;
        adv(p);
        Node *r;
        TRY(parse_math2(p, &r));
        *out = binop(p, OP_CONCAT, line, *out, r);
    }
    return ST_OK;
}

static Status parse_pow(Ps *p, Node **out);
static Status parse_math2(Ps *p, Node **out) {
    TRY(parse_pow(p, out));
    for (;;) {
        int op = is_op(cur(p), "*") ? OP_MUL : is_op(cur(p), "/") ? OP_DIV : is_op(cur(p), "//") ? OP_FLOORDIV
               : is_op(cur(p), "%") ? OP_MOD : -1;
        if (op < 0) break;
        int line = cur(p)->line;
        adv(p);
        Node *r;
        TRY(parse_pow(p, &r));
        *out = binop(p, op, line, *out, r);
    }
    return ST_OK;
}

static Status parse_pow(Ps *p, Node **out) {
    TRY(parse_unary(p, 1, out));
    while (is_op(cur(p), "**")) {
        int line = cur(p)->line;
        adv(p);
        Node *r;
        TRY(parse_unary(p, 1, &r));
        *out = binop(p, OP_POW, line, *out, r);
    }
    return ST_OK;
}

static Status parse_unary(Ps *p, int with_filter, Node **out) {
    TRY(enter(p));
    Node *n;
    if (is_op(cur(p), "-") || is_op(cur(p), "+")) {
        n = mk(p, is_op(cur(p), "-") ? N_NEG : N_POS, cur(p)->line);
        adv(p);
        TRY(parse_unary(p, 0, &n->a));
    } else {
        TRY(parse_primary(p, &n));
    }
    TRY(parse_postfix(p, &n));
    if (with_filter) TRY(parse_filter_expr(p, &n));
    p->depth--;
    *out = n;
    return ST_OK;
}

static Status parse_primary(Ps *p, Node **out) {
    Tok *t = cur(p);
    Node *n;
    switch (t->k) {
    case TK_NAME:
        n = mk(p, N_LIT, t->line);
        if (!strcmp(t->text, "true") || !strcmp(t->text, "True")) n->lit = cv_bool(1);
        else if (!strcmp(t->text, "false") || !strcmp(t->text, "False")) n->lit = cv_bool(0);
        else if (!strcmp(t->text, "none") || !strcmp(t->text, "None")) n->lit = cv_none();
        else { n->k = N_NAME; n->name = intern(p, t->text); }
        adv(p);
        break;
    case TK_STRING: {
        StrBuf sb = {0};
        int line = t->line;
        while (cur(p)->k == TK_STRING) {   // adjacent literals concatenate
            sb_append(&sb, cur(p)->text, cur(p)->len);
            adv(p);
        }
        n = mk(p, N_LIT, line);
        n->lit = cv_str_take(&sb);
        break;
    }
    case TK_INT: n = mk(p, N_LIT, t->line); n->lit = cv_int(t->i); adv(p); break;
    case TK_FLOAT: n = mk(p, N_LIT, t->line); n->lit = cv_float(t->f); adv(p); break;
    case TK_OP:
        if (is_op(t, "(")) {
            adv(p);
            TRY(parse_tuple(p, 1, 1, &n));
            TRY(expect_op(p, ")"));
        } else if (is_op(t, "[")) {
            n = mk(p, N_LIST, t->line);
            adv(p);
            while (!is_op(cur(p), "]")) {
                if (n->args.n) TRY(expect_op(p, ","));
                if (is_op(cur(p), "]")) break;
                Node *v;
                TRY(parse_expr(p, 1, &v));
                nl_push(&n->args, v);
            }
            adv(p);
        } else if (is_op(t, "{")) {
            n = mk(p, N_DICT, t->line);
            adv(p);
            while (!is_op(cur(p), "}")) {
                if (n->args.n) TRY(expect_op(p, ","));
                if (is_op(cur(p), "}")) break;
                Node *k, *v;
                TRY(parse_expr(p, 1, &k));
                TRY(expect_op(p, ":"));
                TRY(parse_expr(p, 1, &v));
                nl_push(&n->args, k);
                nl_push(&n->kwvals, v);
            }
            adv(p);
        } else {
            return fail(p, t->line, "unexpected '%s'", describe(t));
        }
        break;
    default:
        return fail(p, t->line, "unexpected '%s'", describe(t));
    }
    *out = n;
    return ST_OK;
}

static Status parse_subscript_part(Ps *p, Node **out) {
    if (is_op(cur(p), ":") || is_op(cur(p), "]") || is_op(cur(p), ",")) { *out = NULL; return ST_OK; }
    return parse_expr(p, 1, out);
}

static Status parse_subscript(Ps *p, Node **node) {
    int line = cur(p)->line;
    adv(p);   // [
    Node *a = NULL;
    TRY(parse_subscript_part(p, &a));
    if (is_op(cur(p), ":")) {
        Node *s = mk(p, N_SLICE, line);
        s->a = *node;
        s->b = a;
        adv(p);
        TRY(parse_subscript_part(p, &s->c));
        if (is_op(cur(p), ":")) {
            adv(p);
            TRY(parse_subscript_part(p, &s->d));
        }
        TRY(expect_op(p, "]"));
        *node = s;
        return ST_OK;
    }
    if (!a) return fail(p, line, "expected an expression inside []");
    if (is_op(cur(p), ",")) return fail(p, line, "tuple subscripts are not supported");
    TRY(expect_op(p, "]"));
    Node *it = mk(p, N_ITEM, line);
    it->a = *node;
    it->b = a;
    *node = it;
    return ST_OK;
}

static Status parse_postfix(Ps *p, Node **node) {
    for (;;) {
        Tok *t = cur(p);
        if (is_op(t, ".")) {
            adv(p);
            Tok *nt = cur(p);
            if (nt->k == TK_NAME) {
                Node *n = mk(p, N_ATTR, t->line);
                n->a = *node;
                n->name = intern(p, nt->text);
                adv(p);
                *node = n;
            } else if (nt->k == TK_INT) {
                Node *n = mk(p, N_ITEM, t->line);
                n->a = *node;
                n->b = mk(p, N_LIT, t->line);
                n->b->lit = cv_int(nt->i);
                adv(p);
                *node = n;
            } else {
                return fail(p, t->line, "expected a name after '.', got '%s'", describe(nt));
            }
        } else if (is_op(t, "[")) {
            TRY(parse_subscript(p, node));
        } else if (is_op(t, "(")) {
            Node *n = mk(p, N_CALL, t->line);
            n->a = *node;
            TRY(parse_call_args(p, n));
            *node = n;
        } else {
            return ST_OK;
        }
    }
}

static Status parse_dotted_name(Ps *p, const char **out) {
    StrBuf sb = {0};
    if (cur(p)->k != TK_NAME) return fail(p, cur(p)->line, "expected a name, got '%s'", describe(cur(p)));
    sb_puts(&sb, cur(p)->text);
    adv(p);
    while (is_op(cur(p), ".") && peek(p, 1)->k == TK_NAME) {
        adv(p);
        sb_putc(&sb, '.');
        sb_puts(&sb, cur(p)->text);
        adv(p);
    }
    *out = intern(p, sb.data);
    sb_free(&sb);
    return ST_OK;
}

// One filter application `| name(args)` with input `in` (NULL in a filter block).
static Status parse_filter(Ps *p, Node *in, Node **out) {
    Node *n = mk(p, N_FILTER, cur(p)->line);
    n->a = in;
    TRY(parse_dotted_name(p, &n->name));
    int fe = chat_filter_exists(n->name);
    if (!fe) return fail(p, n->line, "No filter named '%s'.", n->name);
    if (fe == 2) return fail(p, n->line, "filter '%s' is not supported in chat templates", n->name);
    if (is_op(cur(p), "(")) TRY(parse_call_args(p, n));
    *out = n;
    return ST_OK;
}

static Status parse_filter_expr(Ps *p, Node **node) {
    for (;;) {
        Tok *t = cur(p);
        if (is_op(t, "|")) {
            adv(p);
            TRY(parse_filter(p, *node, node));
        } else if (is_name(t, "is")) {
            adv(p);
            Node *n = mk(p, N_TEST, t->line);
            n->a = *node;
            if (is_name(cur(p), "not")) { n->op = 1; adv(p); }
            TRY(parse_dotted_name(p, &n->name));
            if (!chat_test_exists(n->name)) return fail(p, n->line, "No test named '%s'.", n->name);
            Tok *c = cur(p);
            if (is_op(c, "(")) {
                TRY(parse_call_args(p, n));
            } else if ((c->k == TK_NAME || c->k == TK_STRING || c->k == TK_INT || c->k == TK_FLOAT || is_op(c, "[") ||
                        is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is")) return fail(p, c->line, "You cannot chain multiple tests with is");
                Node *arg;
                TRY(parse_primary(p, &arg));
                TRY(parse_postfix(p, &arg));
                nl_push(&n->args, arg);
            }
            *node = n;
        } else if (is_op(t, "(")) {
            Node *n = mk(p, N_CALL, t->line);
            n->a = *node;
            TRY(parse_call_args(p, n));
            *node = n;
        } else {
            return ST_OK;
        }
    }
}

// ---------------------------------------------------------------- statements
static Status subparse(Ps *p, const char *const *ends, NodeList *body);

static Status expect_block_end(Ps *p) {
    if (cur(p)->k != TK_BLOCK_END) return fail(p, cur(p)->line, "expected end of statement block, got '%s'", describe(cur(p)));
    adv(p);
    return ST_OK;
}

// Parse a body up to one of `ends`; leaves the matching end name consumed in *which.
static Status parse_body(Ps *p, const char *tag, int line, const char *const *ends, NodeList *body, const char **which) {
    if (p->nblocks >= CHAT_MAX_DEPTH) return fail(p, line, "blocks nested deeper than %d levels", CHAT_MAX_DEPTH);
    p->block_stack[p->nblocks++] = tag;
    TRY(subparse(p, ends, body));
    p->nblocks--;
    *which = cur(p)->text;
    adv(p);
    return ST_OK;
}

// The body of a block with one end tag ({% set %} ... {% endset %}) and the end tag's close.
static Status parse_block_body(Ps *p, const char *tag, int line, const char *end, NodeList *body) {
    const char *const ends[] = {end, NULL};
    const char *which;
    TRY(parse_body(p, tag, line, ends, body, &which));
    return expect_block_end(p);
}

static Status parse_targets(Ps *p, Node *n, int allow_attr) {
    for (;;) {
        const char *nm;
        TRY(expect_name(p, &nm));
        if (allow_attr && is_op(cur(p), ".") && n->ntargets == 0) {
            adv(p);
            TRY(expect_name(p, &n->name));
            push_name(&n->targets, &n->ntargets, nm);
            return ST_OK;
        }
        push_name(&n->targets, &n->ntargets, nm);
        if (!is_op(cur(p), ",")) return ST_OK;
        adv(p);
    }
}

static Status parse_if(Ps *p, int line, Node **out) {
    Node *n = mk(p, S_IF, line);
    TRY(parse_tuple(p, 1, 0, &n->a));
    TRY(expect_block_end(p));
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *which;
    TRY(parse_body(p, "if", line, ends, &n->body, &which));
    if (!strcmp(which, "elif")) {
        Node *el;
        TRY(parse_if(p, cur(p)->line, &el));
        nl_push(&n->orelse, el);
    } else if (!strcmp(which, "else")) {
        TRY(expect_block_end(p));
        static const char *const ends2[] = {"endif", NULL};
        TRY(parse_body(p, "if", line, ends2, &n->orelse, &which));
        TRY(expect_block_end(p));
    } else {
        TRY(expect_block_end(p));
    }
    *out = n;
    return ST_OK;
}

static Status parse_for(Ps *p, int line, Node **out) {
    Node *n = mk(p, S_FOR, line);
    TRY(parse_targets(p, n, 0));
    if (!is_name(cur(p), "in")) return fail(p, cur(p)->line, "expected 'in', got '%s'", describe(cur(p)));
    adv(p);
    TRY(parse_tuple(p, 0, 0, &n->a));
    if (is_name(cur(p), "if")) {
        adv(p);
        TRY(parse_expr(p, 1, &n->b));
    }
    if (is_name(cur(p), "recursive")) return fail(p, cur(p)->line, "recursive for loops are not supported");
    TRY(expect_block_end(p));
    static const char *const ends[] = {"endfor", "else", NULL};
    const char *which;
    TRY(parse_body(p, "for", line, ends, &n->body, &which));
    if (!strcmp(which, "else")) {
        TRY(expect_block_end(p));
        static const char *const ends2[] = {"endfor", NULL};
        TRY(parse_body(p, "for", line, ends2, &n->orelse, &which));
    }
    TRY(expect_block_end(p));
    *out = n;
    return ST_OK;
}

static Status parse_set(Ps *p, int line, Node **out) {
    Node *n = mk(p, S_SET, line);
    TRY(parse_targets(p, n, 1));
    if (is_op(cur(p), "=")) {
        adv(p);
        TRY(parse_tuple(p, 1, 0, &n->a));
        TRY(expect_block_end(p));
        *out = n;
        return ST_OK;
    }
    if (n->ntargets != 1 || n->name) return fail(p, line, "a {%% set %%} block assigns one plain name");
    n->k = S_SETBLOCK;
    Node *chain = NULL;
    while (is_op(cur(p), "|")) {
        adv(p);
        TRY(parse_filter(p, chain, &chain));
    }
    n->a = chain;
    TRY(expect_block_end(p));
    TRY(parse_block_body(p, "set", line, "endset", &n->body));
    *out = n;
    return ST_OK;
}

// (a, b=1, ...) of a macro or call block.
static Status parse_signature(Ps *p, Node *n) {
    TRY(expect_op(p, "("));
    while (!is_op(cur(p), ")")) {
        if (n->ntargets) TRY(expect_op(p, ","));
        const char *nm;
        TRY(expect_name(p, &nm));
        push_name(&n->targets, &n->ntargets, nm);
        if (is_op(cur(p), "=")) {
            adv(p);
            Node *d;
            TRY(parse_expr(p, 1, &d));
            while (n->kwvals.n + 1 < n->ntargets) nl_push(&n->kwvals, NULL);
            nl_push(&n->kwvals, d);
        } else if (n->kwvals.n) {
            return fail(p, cur(p)->line, "parameter without a default follows one with a default");
        }
    }
    adv(p);
    while (n->kwvals.n < n->ntargets) nl_push(&n->kwvals, NULL);
    return ST_OK;
}

static Status parse_macro(Ps *p, int line, Node **out) {
    Node *n = mk(p, S_MACRO, line);
    TRY(expect_name(p, &n->name));
    TRY(parse_signature(p, n));
    TRY(expect_block_end(p));
    static const char *const ends[] = {"endmacro", NULL};
    const char *which;
    TRY(parse_body(p, "macro", line, ends, &n->body, &which));
    if (cur(p)->k == TK_NAME) adv(p);   // {% endmacro name %}
    TRY(expect_block_end(p));
    *out = n;
    return ST_OK;
}

static Status parse_callblock(Ps *p, int line, Node **out) {
    Node *n = mk(p, S_CALLBLOCK, line);
    if (is_op(cur(p), "(")) TRY(parse_signature(p, n));
    TRY(parse_expr(p, 1, &n->a));
    if (n->a->k != N_CALL) return fail(p, line, "expected a macro call after {%% call %%}");
    TRY(expect_block_end(p));
    TRY(parse_block_body(p, "call", line, "endcall", &n->body));
    *out = n;
    return ST_OK;
}

static Status parse_filterblock(Ps *p, int line, Node **out) {
    Node *n = mk(p, S_FILTERBLOCK, line);
    Node *chain = NULL;
    TRY(parse_filter(p, NULL, &chain));
    while (is_op(cur(p), "|")) {
        adv(p);
        TRY(parse_filter(p, chain, &chain));
    }
    n->a = chain;
    TRY(expect_block_end(p));
    TRY(parse_block_body(p, "filter", line, "endfilter", &n->body));
    *out = n;
    return ST_OK;
}

static Status parse_with(Ps *p, int line, Node **out) {
    Node *n = mk(p, S_WITH, line);
    while (cur(p)->k != TK_BLOCK_END) {
        if (n->ntargets) TRY(expect_op(p, ","));
        const char *nm;
        TRY(expect_name(p, &nm));
        push_name(&n->targets, &n->ntargets, nm);
        TRY(expect_op(p, "="));
        Node *v;
        TRY(parse_expr(p, 1, &v));
        nl_push(&n->kwvals, v);
    }
    adv(p);
    TRY(parse_block_body(p, "with", line, "endwith", &n->body));
    *out = n;
    return ST_OK;
}

static int in_loop(Ps *p) {
    for (int i = p->nblocks - 1; i >= 0; i--) {
        if (!strcmp(p->block_stack[i], "for")) return 1;
        if (!strcmp(p->block_stack[i], "macro") || !strcmp(p->block_stack[i], "call")) return 0;
    }
    return 0;
}

static Status parse_statement(Ps *p, Node **out) {
    Tok *t = cur(p);
    int line = t->line;
    if (t->k != TK_NAME) return fail(p, line, "tag name expected, got '%s'", describe(t));
    const char *tag = t->text;
    adv(p);
    if (!strcmp(tag, "if")) return parse_if(p, line, out);
    if (!strcmp(tag, "for")) return parse_for(p, line, out);
    if (!strcmp(tag, "set")) return parse_set(p, line, out);
    if (!strcmp(tag, "macro")) return parse_macro(p, line, out);
    if (!strcmp(tag, "call")) return parse_callblock(p, line, out);
    if (!strcmp(tag, "filter")) return parse_filterblock(p, line, out);
    if (!strcmp(tag, "with")) return parse_with(p, line, out);
    if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        if (!in_loop(p)) return fail(p, line, "'%s' outside of a for loop", tag);
        *out = mk(p, tag[0] == 'b' ? S_BREAK : S_CONTINUE, line);
        return expect_block_end(p);
    }
    if (!strcmp(tag, "generation")) {
        Node *n = mk(p, S_GENERATION, line);
        TRY(expect_block_end(p));
        TRY(parse_block_body(p, "generation", line, "endgeneration", &n->body));
        *out = n;
        return ST_OK;
    }
    static const char *const unsupported[] = {"include", "extends", "block", "import", "from", "autoescape", "trans", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (!strcmp(tag, unsupported[i])) return fail(p, line, "tag '%s' is not supported in chat templates", tag);
    if (p->nblocks > 0)
        return fail(p, line, "Encountered unknown tag '%s'. The innermost block that needs to be closed is '%s'.", tag,
                    p->block_stack[p->nblocks - 1]);
    return fail(p, line, "Encountered unknown tag '%s'.", tag);
}

static Status subparse(Ps *p, const char *const *ends, NodeList *body) {
    for (;;) {
        Tok *t = cur(p);
        switch (t->k) {
        case TK_DATA: {
            Node *n = mk(p, S_DATA, t->line);
            n->lit = cv_str(t->text, t->len);
            nl_push(body, n);
            adv(p);
            break;
        }
        case TK_VAR_BEGIN: {
            adv(p);
            Node *n = mk(p, S_OUTPUT, t->line);
            TRY(parse_tuple(p, 1, 0, &n->a));
            if (cur(p)->k != TK_VAR_END) return fail(p, cur(p)->line, "expected end of print statement, got '%s'", describe(cur(p)));
            adv(p);
            nl_push(body, n);
            break;
        }
        case TK_BLOCK_BEGIN: {
            adv(p);
            Tok *nt = cur(p);
            if (ends && nt->k == TK_NAME)
                for (int i = 0; ends[i]; i++)
                    if (!strcmp(nt->text, ends[i])) return ST_OK;
            Node *n;
            TRY(parse_statement(p, &n));
            nl_push(body, n);
            break;
        }
        case TK_EOF:
            if (ends) {
                StrBuf sb = {0};
                for (int i = 0; ends[i]; i++) sb_printf(&sb, "%s'%s'", i ? " or " : "", ends[i]);
                Status st = fail(p, t->line,
                                 "Unexpected end of template. Jinja was looking for the following tags: %s. The innermost "
                                 "block that needs to be closed is '%s'.",
                                 sb.data, p->nblocks ? p->block_stack[p->nblocks - 1] : "?");
                sb_free(&sb);
                return st;
            }
            return ST_OK;
        default:
            return fail(p, t->line, "unexpected '%s'", describe(t));
        }
    }
}

Status chat_parse(const TokList *toks, const char *what, ChatAst *ast, Err *e) {
    memset(ast, 0, sizeof *ast);
    Ps p = {.toks = toks, .what = what, .ast = ast, .e = e};
    Status st = subparse(&p, NULL, &ast->body);
    if (st != ST_OK) chat_ast_free(ast);
    return st;
}

void chat_ast_free(ChatAst *ast) {
    for (size_t i = 0; i < ast->n; i++) {
        Node *n = ast->nodes[i];
        cv_release(n->lit);
        free(n->args.v);
        free(n->kwvals.v);
        free((void *)n->kwnames);
        free((void *)n->targets);
        free(n->cmpops);
        free(n->body.v);
        free(n->orelse.v);
        free(n);
    }
    for (size_t i = 0; i < ast->nstrs; i++) free(ast->strs[i]);
    free(ast->nodes);
    free(ast->strs);
    free(ast->body.v);
    memset(ast, 0, sizeof *ast);
}
