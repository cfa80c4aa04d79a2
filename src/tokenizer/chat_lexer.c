// chat_lexer.c: template text -> tokens, as Jinja2's lexer does it under transformers' settings:
// newlines normalised to \n and one trailing newline dropped; `{%- -%}` strip whitespace;
// trim_blocks drops the newline after a block or comment tag; lstrip_blocks drops the spaces
// before one on its line (`{%+` keeps them); `{% raw %}` passes text through.
#include "chat_internal.h"

#include <errno.h>
#include <string.h>

typedef struct Lx {
    const char *src;    // normalised source
    size_t n, pos;
    int line;
    const char *what;
    TokList *out;
    Err *e;
} Lx;

static Status lx_fail(Lx *x, int line, const char *fmt, const char *arg) {
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg);
    return err_set(x->e, ST_EINVAL, "%s: line %d: %s", x->what, line, msg);
}

static void push_tok(Lx *x, TokKind k, int line, const char *text, size_t len) {
    TokList *l = x->out;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->t = xrealloc(l->t, l->cap * sizeof(Tok));
    }
    Tok *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line;
    t->text = xstrndup(text ? text : "", len);
    t->len = len;
}

static int count_nl(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return c;
}

// Length of the whitespace run at s (Python's \s, Unicode-aware).
static size_t ws_run(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t adv;
        uint32_t cp = chat_utf8_decode(s + i, n - i, &adv);
        if (!uni_isspace(cp)) break;
        i += adv;
    }
    return i;
}

// Length of text without its trailing whitespace (Python's str.rstrip()).
static size_t rstrip_len(const char *s, size_t n) {
    size_t keep = 0, i = 0;
    while (i < n) {
        size_t adv;
        uint32_t cp = chat_utf8_decode(s + i, n - i, &adv);
        i += adv;
        if (!uni_isspace(cp)) keep = i;
    }
    return keep;
}

// Data before a tag, after the tag's whitespace control. sign: '-', '+' or 0.
static void emit_data(Lx *x, const char *text, size_t len, char sign, int lstrip_ok, int line_starting, int line) {
    if (sign == '-') {
        len = rstrip_len(text, len);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = len;
        while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
        if ((l_pos > 0 || line_starting) && len > l_pos && ws_run(text + l_pos, len - l_pos) == len - l_pos)
            len = l_pos;
    }
    if (len) push_tok(x, TK_DATA, line, text, len);
}

static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's unicode-escape decoding of a string literal body.
static void unescape(StrBuf *sb, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) { sb_putc(sb, c); continue; }
        char d = s[++i];
        uint32_t cp;
        int hexn = 0;
        switch (d) {
        case '\n': break;
        case '\\': sb_putc(sb, '\\'); break;
        case '\'': sb_putc(sb, '\''); break;
        case '"': sb_putc(sb, '"'); break;
        case 'a': sb_putc(sb, '\a'); break;
        case 'b': sb_putc(sb, '\b'); break;
        case 'f': sb_putc(sb, '\f'); break;
        case 'n': sb_putc(sb, '\n'); break;
        case 'r': sb_putc(sb, '\r'); break;
        case 't': sb_putc(sb, '\t'); break;
        case 'v': sb_putc(sb, '\v'); break;
        case 'x': hexn = 2; break;
        case 'u': hexn = 4; break;
        case 'U': hexn = 8; break;
        default:
            if (d >= '0' && d <= '7') {
                cp = (uint32_t)(d - '0');
                for (int k = 0; k < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; k++) cp = cp * 8 + (uint32_t)(s[++i] - '0');
                chat_utf8_encode(sb, cp);
            } else {
                sb_putc(sb, '\\');
                sb_putc(sb, d);
            }
        }
        if (hexn) {
            cp = 0;
            int ok = i + (size_t)hexn < n;
            for (int k = 1; ok && k <= hexn; k++) {
                char h = s[i + (size_t)k];
                int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (v < 0) ok = 0;
                else cp = cp * 16 + (uint32_t)v;
            }
            if (ok) {
                chat_utf8_encode(sb, (cp >= 0xD800 && cp < 0xE000) ? 0xFFFD : cp);
                i += (size_t)hexn;
            } else {   // Python refuses a truncated escape; keep the text so the error is visible
                sb_putc(sb, '\\');
                sb_putc(sb, d);
            }
        }
    }
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<=", NULL};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";

// Tokens inside {{ }} or {% %} up to and including the end delimiter.
static Status lex_tag(Lx *x, int is_block) {
    char stack[CHAT_MAX_DEPTH];
    int sp = 0;
    for (;;) {
        const char *s = x->src + x->pos;
        size_t rem = x->n - x->pos;
        if (rem == 0) return lx_fail(x, x->line, "unexpected end of template, expected '%s'", is_block ? "%}" : "}}");
        if (sp == 0) {
            const char *end = is_block ? "%}" : "}}";
            if (rem >= 3 && s[0] == '-' && !memcmp(s + 1, end, 2)) {
                push_tok(x, is_block ? TK_BLOCK_END : TK_VAR_END, x->line, end, 2);
                size_t w = ws_run(s + 3, rem - 3);
                x->line += count_nl(s, 3 + w);
                x->pos += 3 + w;
                return ST_OK;
            }
            if (is_block && rem >= 3 && s[0] == '+' && !memcmp(s + 1, end, 2)) {
                push_tok(x, TK_BLOCK_END, x->line, end, 2);
                x->pos += 3;
                return ST_OK;
            }
            if (rem >= 2 && !memcmp(s, end, 2)) {
                push_tok(x, is_block ? TK_BLOCK_END : TK_VAR_END, x->line, end, 2);
                x->pos += 2;
                if (is_block && rem >= 3 && s[2] == '\n') { x->pos++; x->line++; }
                return ST_OK;
            }
        }
        size_t w = ws_run(s, rem);
        if (w) { x->line += count_nl(s, w); x->pos += w; continue; }
        char c = s[0];
        if (is_digit(c)) {
            size_t i = 0;
            int is_float = 0;
            StrBuf num = {0};
            while (i < rem && (is_digit(s[i]) || (s[i] == '_' && i + 1 < rem && is_digit(s[i + 1])))) {
                if (s[i] != '_') sb_putc(&num, s[i]);
                i++;
            }
            if (i + 1 < rem && s[i] == '.' && is_digit(s[i + 1])) {
                is_float = 1;
                sb_putc(&num, s[i++]);
                while (i < rem && (is_digit(s[i]) || (s[i] == '_' && i + 1 < rem && is_digit(s[i + 1])))) {
                    if (s[i] != '_') sb_putc(&num, s[i]);
                    i++;
                }
            }
            if (i < rem && (s[i] == 'e' || s[i] == 'E')) {
                size_t j = i + 1;
                if (j < rem && (s[j] == '+' || s[j] == '-')) j++;
                if (j < rem && is_digit(s[j])) {
                    is_float = 1;
                    sb_append(&num, s + i, j - i);
                    i = j;
                    while (i < rem && (is_digit(s[i]) || (s[i] == '_' && i + 1 < rem && is_digit(s[i + 1])))) {
                        if (s[i] != '_') sb_putc(&num, s[i]);
                        i++;
                    }
                }
            }
            push_tok(x, is_float ? TK_FLOAT : TK_INT, x->line, s, i);
            Tok *t = &x->out->t[x->out->n - 1];
            if (is_float) t->f = strtod(num.data, NULL);
            else {
                errno = 0;
                t->i = strtoll(num.data, NULL, 10);
                if (errno == ERANGE) { sb_free(&num); return lx_fail(x, x->line, "integer literal %s is outside the 64-bit range", t->text); }
            }
            sb_free(&num);
            x->pos += i;
            continue;
        }
        if (is_name_start(c)) {
            size_t i = 1;
            while (i < rem && (is_name_start(s[i]) || is_digit(s[i]))) i++;
            push_tok(x, TK_NAME, x->line, s, i);
            x->pos += i;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t i = 1;
            while (i < rem && s[i] != c) i += (s[i] == '\\' && i + 1 < rem) ? 2 : 1;
            if (i >= rem) return lx_fail(x, x->line, "unterminated string literal%s", "");
            StrBuf sb = {0};
            unescape(&sb, s + 1, i - 1);
            push_tok(x, TK_STRING, x->line, NULL, 0);
            Tok *t = &x->out->t[x->out->n - 1];
            free(t->text);
            t->len = sb.len;
            t->text = sb.data ? sb_take(&sb) : xstrdup("");
            x->line += count_nl(s, i + 1);
            x->pos += i + 1;
            continue;
        }
        size_t oplen = 0;
        for (int k = 0; OPS2[k] && !oplen; k++)
            if (rem >= 2 && !memcmp(s, OPS2[k], 2)) oplen = 2;
        if (!oplen && strchr(OPS1, c) && c) oplen = 1;
        if (!oplen) {
            char ch[8] = {0};
            size_t adv;
            chat_utf8_decode(s, rem, &adv);
            memcpy(ch, s, MIN(adv, 4));
            return lx_fail(x, x->line, "unexpected char '%s'", ch);
        }
        if (oplen == 1 && (c == '(' || c == '[' || c == '{')) {
            if (sp >= CHAT_MAX_DEPTH) return lx_fail(x, x->line, "brackets nested too deeply%s", "");
            stack[sp++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (oplen == 1 && (c == ')' || c == ']' || c == '}')) {
            char opn[2] = {c, 0};
            if (sp == 0) return lx_fail(x, x->line, "unexpected '%s'", opn);
            if (stack[--sp] != c) {
                char m[64];
                snprintf(m, sizeof m, "unexpected '%c', expected '%c'", c, stack[sp]);
                return lx_fail(x, x->line, "%s", m);
            }
        }
        push_tok(x, TK_OP, x->line, s, oplen);
        x->pos += oplen;
    }
}

// `{% raw %}` at s? Returns the length of the opening tag, or 0.
static size_t raw_begin(const char *s, size_t rem) {
    size_t i = 2;
    if (i < rem && (s[i] == '-' || s[i] == '+')) i++;
    i += ws_run(s + i, rem - i);
    if (rem - i < 3 || memcmp(s + i, "raw", 3)) return 0;
    i += 3;
    i += ws_run(s + i, rem - i);
    if (rem - i >= 3 && !memcmp(s + i, "-%}", 3)) return i + 3 + ws_run(s + i + 3, rem - i - 3);
    if (rem - i >= 2 && !memcmp(s + i, "%}", 2)) return i + 2;
    return 0;
}

static Status lex_raw(Lx *x, int line_starting) {
    const char *s = x->src + x->pos;
    size_t rem = x->n - x->pos;
    for (size_t i = 0; i + 1 < rem; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t j = i + 2;
        char sign = 0;
        if (j < rem && (s[j] == '-' || s[j] == '+')) sign = s[j++];
        j += ws_run(s + j, rem - j);
        if (rem - j < 6 || memcmp(s + j, "endraw", 6)) continue;
        j += 6;
        j += ws_run(s + j, rem - j);
        size_t endlen;
        if (rem - j >= 3 && !memcmp(s + j, "+%}", 3)) endlen = 3;
        else if (rem - j >= 3 && !memcmp(s + j, "-%}", 3)) endlen = 3 + ws_run(s + j + 3, rem - j - 3);
        else if (rem - j >= 2 && !memcmp(s + j, "%}", 2)) endlen = 2 + (rem - j > 2 && s[j + 2] == '\n');
        else continue;
        emit_data(x, s, i, sign, 1, line_starting, x->line);
        x->line += count_nl(s, j + endlen);
        x->pos += j + endlen;
        return ST_OK;
    }
    return lx_fail(x, x->line, "Missing end of raw directive%s", "");
}

Status chat_lex(const char *src_in, const char *what, TokList *out, Err *e) {
    // Normalise newlines and drop one trailing newline (keep_trailing_newline=False).
    StrBuf norm = {0};
    for (const char *p = src_in; *p; p++) {
        if (*p == '\r') { sb_putc(&norm, '\n'); if (p[1] == '\n') p++; }
        else sb_putc(&norm, *p);
    }
    if (norm.len && norm.data[norm.len - 1] == '\n') norm.len--;
    sb_putc(&norm, 0);
    norm.len--;
    Lx x = {.src = norm.data, .n = norm.len, .pos = 0, .line = 1, .what = what, .out = out, .e = e};
    memset(out, 0, sizeof *out);
    int line_starting = 1;
    Status st = ST_OK;
    while (x.pos < x.n && st == ST_OK) {
        const char *s = x.src + x.pos;
        size_t rem = x.n - x.pos, t = 0;
        while (t + 1 < rem && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#'))) t++;
        if (t + 1 >= rem) {   // no more tags
            push_tok(&x, TK_DATA, x.line, s, rem);
            break;
        }
        char kind = s[t + 1];
        char sign = (t + 2 < rem && (s[t + 2] == '-' || s[t + 2] == '+')) ? s[t + 2] : 0;
        size_t rb = kind == '%' ? raw_begin(s + t, rem - t) : 0;
        emit_data(&x, s, t, sign, kind != '{', line_starting, x.line);
        x.line += count_nl(s, t);
        if (rb) {
            x.line += count_nl(s + t, rb);
            x.pos += t + rb;
            st = lex_raw(&x, x.src[x.pos - 1] == '\n');
            line_starting = x.pos > 0 && x.src[x.pos - 1] == '\n';
            continue;
        }
        x.pos += t + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *b = x.src + x.pos;
            size_t brem = x.n - x.pos, k = 0;
            while (k + 1 < brem && !(b[k] == '#' && b[k + 1] == '}')) k++;
            if (k + 1 >= brem) { st = lx_fail(&x, x.line, "Missing end of comment tag%s", ""); break; }
            size_t end = k + 2;
            if (k > 0 && b[k - 1] == '-') end += ws_run(b + end, brem - end);
            else if (!(k > 0 && b[k - 1] == '+') && end < brem && b[end] == '\n') end++;
            x.line += count_nl(b, end);
            x.pos += end;
        } else {
            push_tok(&x, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, x.line, s + t, 2);
            st = lex_tag(&x, kind == '%');
        }
        line_starting = x.pos > 0 && x.src[x.pos - 1] == '\n';
    }
    if (st == ST_OK) push_tok(&x, TK_EOF, x.line, NULL, 0);
    sb_free(&norm);
    if (st != ST_OK) chat_toks_free(out);
    return st;
}

void chat_toks_free(TokList *l) {
    for (size_t i = 0; i < l->n; i++) free(l->t[i].text);
    free(l->t);
    memset(l, 0, sizeof *l);
}
