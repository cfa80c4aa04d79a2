// chat_internal.h: the pieces of the chat-template interpreter, shared by its files only.
//   chat_lexer.c   template text -> tokens (whitespace control, trim_blocks, lstrip_blocks)
//   chat_parser.c  tokens -> syntax tree (Jinja2's grammar and precedence)
//   chat_value.c   values with Python semantics: str(), repr(), json.dumps, ==, <, truthiness
//   chat_json.c    JSON text / cJSON -> values (Python json.loads number rules)
//   chat_interp.c  statements and expressions: scopes, loops, macros, generation spans
//   chat_filters.c filters, tests, global functions, str / dict methods
#ifndef STILL_CHAT_INTERNAL_H
#define STILL_CHAT_INTERNAL_H

#include "chat.h"

#include "../core/alloc.h"

#include <stdint.h>

// ---------------------------------------------------------------- values
typedef enum {
    CV_UNDEF = 0, CV_NONE, CV_BOOL, CV_INT, CV_FLOAT, CV_STR, CV_LIST, CV_DICT, CV_NS, CV_LOOP, CV_FUNC,
} CvType;

typedef struct CStr {
    int refs;
    size_t len;      // bytes, excluding the NUL
    size_t nchars;   // code points; SIZE_MAX until counted
    char data[];     // NUL-terminated UTF-8
} CStr;

typedef struct CVal CVal;
typedef struct CList CList;
typedef struct CDict CDict;
typedef struct CLoop CLoop;
typedef struct CFunc CFunc;

struct CVal {
    CvType t;
    union {
        int b;
        int64_t i;
        double f;
        CStr *s;
        CList *l;
        CDict *d;    // CV_DICT and CV_NS
        CLoop *loop;
        CFunc *fn;
        const char *undef_name;   // CV_UNDEF: the missing name or attribute (may be NULL)
    };
    const char *undef_owner;      // CV_UNDEF: "dict object" etc. when an attribute was missing
};

enum { CL_LIST = 0, CL_TUPLE = 1, CL_ITER = 2 };

struct CList {
    int refs;
    int is_tuple;    // CL_LIST, CL_TUPLE (repr as (a, b)), CL_ITER (a generator: always true, no len)
    size_t n, cap;
    CVal *items;     // (n)
};

struct CDict {
    int refs;
    size_t n, cap;
    CVal *keys, *vals;   // (n) in insertion order
};

struct CLoop {
    int refs;
    int64_t index0, length, depth0;
    CList *items;        // the iterated items (previtem / nextitem)
};

typedef enum {
    CF_BUILTIN,   // a global function: range, namespace, dict, raise_exception, strftime_now, ...
    CF_METHOD,    // a method bound to `self`: 'a'.split, d.items, loop.cycle, ...
    CF_MACRO,     // {% macro %}
    CF_CALLER,    // caller() inside a {% call %} block
} CFuncKind;

struct Node;
struct Scope;
struct CFunc {
    int refs;
    CFuncKind kind;
    const char *name;          // function or method name (static or template-owned)
    CVal self;                 // CF_METHOD: the receiver
    const struct Node *node;   // CF_MACRO / CF_CALLER: the definition
    struct Scope *scope;       // CF_CALLER: the scope of the call block; NULL once it ended
};

static inline CVal cv_undef(const char *name, const char *owner) {
    CVal v = {.t = CV_UNDEF};
    v.undef_name = name;
    v.undef_owner = owner;
    return v;
}
static inline CVal cv_none(void) { return (CVal){.t = CV_NONE}; }
static inline CVal cv_bool(int b) { CVal v = {.t = CV_BOOL}; v.b = !!b; return v; }
static inline CVal cv_int(int64_t i) { CVal v = {.t = CV_INT}; v.i = i; return v; }
static inline CVal cv_float(double f) { CVal v = {.t = CV_FLOAT}; v.f = f; return v; }

CVal cv_str(const char *s, size_t n);
CVal cv_cstr(const char *s);
CVal cv_str_take(StrBuf *sb);   // takes the buffer's text; sb is reset
CVal cv_list(size_t cap);
CVal cv_dict(void);
CVal cv_ns(void);
CVal cv_func(CFuncKind kind, const char *name);
CVal cv_retain(CVal v);
void cv_release(CVal v);

void cv_list_push(CVal list, CVal item);           // takes item
void cv_dict_set(CVal dict, CVal key, CVal val);   // takes key and val
// Borrowed value for key, or NULL.
CVal *cv_dict_get(CVal dict, CVal key);
CVal *cv_dict_get_str(CVal dict, const char *key);

size_t cv_str_nchars(CStr *s);
int cv_truthy(CVal v);
int cv_is_num(CVal v);              // int, float or bool (Python numbers)
double cv_as_double(CVal v);
const char *cv_type_name(CVal v);   // Python type name: "str", "int", "dict", ...
int cv_equal(CVal a, CVal b);
// Python ordering; ST_EINVAL when the types do not compare (message in e).
Status cv_compare(CVal a, CVal b, int *out, Err *e);

// Python str() / repr() appended to sb. Fail only on nesting deeper than the limit.
Status cv_to_str(StrBuf *sb, CVal v, Err *e);
Status cv_repr(StrBuf *sb, CVal v, Err *e);
// json.dumps options; the defaults are transformers' tojson: ensure_ascii=False, indent=None.
typedef struct JsonOpts {
    const char *indent;     // NULL: None (one line); else the indent unit ("  " for indent=2)
    int sort_keys, ensure_ascii;
    const char *item_sep, *key_sep;   // NULL: Python's defaults for the indent
} JsonOpts;
Status cv_to_json(StrBuf *sb, CVal v, const JsonOpts *o, Err *e);
// Python float repr (shortest round trip).
void cv_format_float(StrBuf *sb, double f);

// JSON -> values.
CVal cv_from_cjson(const cJSON *j);
Status cv_from_json_text(const char *text, const char *what, CVal *out, Err *e);

// UTF-8 helpers.
uint32_t chat_utf8_decode(const char *s, size_t n, size_t *adv);
void chat_utf8_encode(StrBuf *sb, uint32_t cp);
int uni_isspace(uint32_t cp);   // Python str.isspace

// ---------------------------------------------------------------- tokens
typedef enum {
    TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP, TK_EOF,
} TokKind;

typedef struct Tok {
    TokKind k;
    int line;
    char *text;      // TK_DATA, TK_STRING: decoded text (owned); TK_NAME, TK_OP: the spelling
    size_t len;
    int64_t i;
    double f;
} Tok;

typedef struct TokList {
    Tok *t;
    size_t n, cap;
} TokList;

Status chat_lex(const char *src, const char *what, TokList *out, Err *e);
void chat_toks_free(TokList *l);

// ---------------------------------------------------------------- syntax tree
typedef enum {
    // expressions
    N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_NEG, N_POS, N_NOT, N_BIN, N_AND, N_OR, N_CMP, N_COND,
    // statements
    S_DATA, S_OUTPUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK,
    S_BREAK, S_CONTINUE, S_GENERATION, S_WITH,
} NodeKind;

typedef enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} BinOp;

typedef struct NodeList {
    struct Node **v;
    size_t n, cap;
} NodeList;

typedef struct Node {
    NodeKind k;
    int line;
    int op;                 // BinOp; N_TEST: negated; S_FOR: recursive
    const char *name;       // N_NAME, N_ATTR, N_FILTER, N_TEST, S_MACRO; S_SET: namespace attribute
    CVal lit;               // N_LIT, S_DATA
    struct Node *a, *b, *c; // operands; S_FOR: a iter, b condition; N_SLICE: a target, b/c/d below
    struct Node *d;         // N_SLICE step
    NodeList args;          // call / filter / test arguments; list items; dict keys; S_CMP operands
    NodeList kwvals;        // keyword argument values; dict values; macro defaults
    const char **kwnames;   // (kwvals.n) keyword names; macro parameter names (params.n)
    size_t nkw;
    const char **targets;   // S_FOR / S_SET / S_WITH / S_MACRO / S_CALLBLOCK: assigned names
    size_t ntargets;
    int *cmpops;            // N_CMP: (args.n) operators
    NodeList body, orelse;  // statement bodies
} Node;

typedef struct ChatAst {
    Node **nodes;           // every node, for freeing
    size_t n, cap;
    char **strs;            // every interned name
    size_t nstrs, capstrs;
    NodeList body;
} ChatAst;

Status chat_parse(const TokList *toks, const char *what, ChatAst *ast, Err *e);
void chat_ast_free(ChatAst *ast);

// ---------------------------------------------------------------- interpreter
#define CHAT_MAX_DEPTH 200          // nesting of expressions, blocks and macro calls
#define CHAT_MAX_STR (1u << 28)     // largest string a template may build
#define CHAT_MAX_RANGE 100000       // Jinja's sandbox MAX_RANGE

typedef struct Scope {
    struct Scope *parent;
    CVal vars;   // dict
} Scope;

typedef struct Interp {
    const ChatAst *ast;
    const char *what;      // template name for messages
    Err *e;
    Scope *root;
    Scope *scope;          // the innermost scope
    StrBuf *out;           // the current output buffer
    StrBuf *root_out;      // the template's own output (generation spans index into it)
    int root_emitted;      // something was emitted at the top level (transformers' tracker is active)
    GenSpans *spans;
    CVal namespaces;       // list of every namespace made (cycles are broken at the end)
    time_t now;
    int depth;
    int loop_ctl;          // 1 break, 2 continue pending
} Interp;

Status interp_error(Interp *in, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
Status interp_run(Interp *in, const NodeList *body);
Status interp_eval(Interp *in, const Node *n, CVal *out);
// Call any callable value with evaluated arguments (kw: dict of keyword arguments or undefined).
Status interp_call(Interp *in, int line, CVal fn, CVal *args, size_t nargs, CVal kw, CVal *out);
// Attribute access and subscription with Jinja's sandbox rules.
Status interp_getattr(Interp *in, int line, CVal obj, const char *name, CVal *out);
Status interp_getitem(Interp *in, int line, CVal obj, CVal key, CVal *out);

// chat.c: render with a complete dict of variables (the template's own variables are not added).
Status chat_render_values(const ChatTemplate *t, CVal vars, char **out, GenSpans *spans, Err *e);

// chat_filters.c
Status chat_filter(Interp *in, int line, const char *name, CVal v, CVal *args, size_t nargs, CVal kw, CVal *out);
Status chat_test(Interp *in, int line, const char *name, CVal v, CVal *args, size_t nargs, int *out);
int chat_filter_exists(const char *name);
int chat_test_exists(const char *name);
// Global functions (range, namespace, dict, raise_exception, strftime_now, ...): a CV_FUNC or undef.
CVal chat_global(const char *name);
Status chat_call_builtin(Interp *in, int line, const CFunc *f, CVal *args, size_t nargs, CVal kw, CVal *out);
// Methods of str / dict / list / loop: is there one named `name` for v?
int chat_has_method(CVal v, const char *name);
Status chat_call_method(Interp *in, int line, const CFunc *f, CVal *args, size_t nargs, CVal kw, CVal *out);

// Python-style helpers shared by filters and the interpreter.
Status chat_str_of(Interp *in, int line, CVal v, CVal *out);   // str(v) as a CV_STR
Status chat_iterate(Interp *in, int line, CVal v, CVal *list_out); // list(v)
Status chat_slice(Interp *in, int line, CVal v, CVal start, CVal stop, CVal step, CVal *out);

#endif
