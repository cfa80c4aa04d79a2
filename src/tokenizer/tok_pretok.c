// tok_pretok.c: pre-tokenizers (tokenizers/src/pre_tokenizers). Each turns a list of pieces into
// a finer list; pieces are (pointer, length) views into the input or the call's scratch storage.
#include "tok_internal.h"

#include "unicode.h"

#include <string.h>

// The GPT-2 pattern ByteLevel uses when use_regex is set.
static const char *GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// Whitespace: \w+|[^\w\s]+ with the regex crate's Unicode \w (Alphabetic, M, Nd, Pc, Join_Control).
static const char *WHITESPACE_PATTERN =
    "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+|"
    "[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\s]+";

static Status parse_behavior(const char *s, const char *what, SplitBehavior *b, Err *e) {
    static const struct {
        const char *name;
        SplitBehavior b;
    } names[] = {{"Removed", SPLIT_REMOVED}, {"Isolated", SPLIT_ISOLATED}, {"MergedWithPrevious", SPLIT_MERGED_PREV},
                 {"MergedWithNext", SPLIT_MERGED_NEXT}, {"Contiguous", SPLIT_CONTIGUOUS}};
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (!strcmp(s, names[i].name)) {
            *b = names[i].b;
            return ST_OK;
        }
    return err_set(e, ST_EINVAL, "%s: unknown Split behavior \"%s\"", what, s);
}

static Status parse_prepend_scheme(const cJSON *j, const char *what, PrependScheme *ps, Err *e) {
    const char *s;
    Status st = json_get_string(j, "prepend_scheme", what, 0, &s, e);
    if (st == ST_ENOTFOUND) {
        int add = 1;
        if (json_get_bool(j, "add_prefix_space", what, 0, &add, e) == ST_EINVAL) return ST_EINVAL;
        *ps = add ? PREPEND_ALWAYS : PREPEND_NEVER;
        err_clear(e);
        return ST_OK;
    }
    TRY(st);
    if (!strcmp(s, "always")) *ps = PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *ps = PREPEND_FIRST;
    else if (!strcmp(s, "never")) *ps = PREPEND_NEVER;
    else return err_set(e, ST_EINVAL, "%s: unknown prepend_scheme \"%s\"", what, s);
    return ST_OK;
}

static Status get_bool_default(const cJSON *j, const char *key, const char *what, int def, int *out, Err *e) {
    *out = def;
    Status st = json_get_bool(j, key, what, 0, out, e);
    if (st == ST_ENOTFOUND) {
        err_clear(e);
        return ST_OK;
    }
    return st;
}

Status pretok_parse(const cJSON *j, const char *what, PreTokenizer **out, Err *e) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return ST_OK;
    const char *type;
    TRY(json_get_string(j, "type", what, 1, &type, e));
    PreTokenizer *p = xcalloc(1, sizeof *p);
    Status st = ST_OK;
    const char *s;
    if (!strcmp(type, "Split")) {
        p->kind = PRE_SPLIT;
        st = tokre_compile(cJSON_GetObjectItemCaseSensitive(j, "pattern"), what, &p->re, e);
        if (st == ST_OK) st = json_get_string(j, "behavior", what, 1, &s, e);
        if (st == ST_OK) st = parse_behavior(s, what, &p->behavior, e);
        if (st == ST_OK) st = get_bool_default(j, "invert", what, 0, &p->invert, e);
    } else if (!strcmp(type, "ByteLevel")) {
        p->kind = PRE_BYTELEVEL;
        st = get_bool_default(j, "add_prefix_space", what, 1, &p->add_prefix_space, e);
        if (st == ST_OK) st = get_bool_default(j, "use_regex", what, 1, &p->use_regex, e);
        if (st == ST_OK && p->use_regex) st = tokre_compile_regex(GPT2_PATTERN, what, &p->re, e);
        for (int b = 0; b < 256; b++) p->bl_len[b] = (uint8_t)utf8_encode(unicode_byte_to_cp((uint8_t)b), p->bl_enc[b]);
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = PRE_METASPACE;
        st = json_get_string(j, "replacement", what, 1, &s, e);
        if (st == ST_OK) {
            size_t adv;
            if (!*s || utf8_decode(s, strlen(s), &adv) < 0 || s[adv])
                st = err_set(e, ST_EINVAL, "%s: Metaspace replacement must be one character", what);
            else
                p->replacement = xstrdup(s);
        }
        if (st == ST_OK) st = parse_prepend_scheme(j, what, &p->prepend, e);
        if (st == ST_OK) st = get_bool_default(j, "split", what, 1, &p->split, e);
    } else if (!strcmp(type, "Digits")) {
        p->kind = PRE_DIGITS;
        st = get_bool_default(j, "individual_digits", what, 0, &p->individual_digits, e);
    } else if (!strcmp(type, "Whitespace")) {
        p->kind = PRE_WHITESPACE;
        st = tokre_compile_regex(WHITESPACE_PATTERN, what, &p->re, e);
    } else if (!strcmp(type, "WhitespaceSplit")) {
        p->kind = PRE_WHITESPACE_SPLIT;
    } else if (!strcmp(type, "Sequence")) {
        p->kind = PRE_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr)) {
            st = err_set(e, ST_EINVAL, "%s: Sequence pre_tokenizer needs a \"pretokenizers\" array", what);
        } else {
            p->n_children = cJSON_GetArraySize(arr);
            p->children = xcalloc((size_t)p->n_children + 1, sizeof *p->children);
            for (int i = 0; i < p->n_children && st == ST_OK; i++)
                st = pretok_parse(cJSON_GetArrayItem(arr, i), what, &p->children[i], e);
        }
    } else {
        free(p);
        return err_set(e, ST_EUNSUPPORTED, "%s: pre_tokenizer type \"%s\" is not supported", what, type);
    }
    if (st != ST_OK) {
        pretok_free(p);
        return st;
    }
    *out = p;
    return ST_OK;
}

void pretok_free(PreTokenizer *p) {
    if (!p) return;
    for (int i = 0; i < p->n_children; i++) pretok_free(p->children[i]);
    free(p->children);
    tokre_free(&p->re);
    free(p->replacement);
    free(p);
}

int pretok_max_captures(const PreTokenizer *p) {
    if (!p) return 0;
    uint32_t n = 0;
    if (p->re.code) pcre2_pattern_info(p->re.code, PCRE2_INFO_CAPTURECOUNT, &n);
    int m = (int)n;
    for (int i = 0; i < p->n_children; i++) m = MAX(m, pretok_max_captures(p->children[i]));
    return m;
}

// ---- splitting one piece -------------------------------------------------------------------
// Segments of a piece: matches and the gaps between them, in order, covering the piece.
typedef struct Seg {
    size_t a, b;
    int match;
} Seg;

typedef struct SegVec {
    Seg *v;
    size_t n, cap;
} SegVec;

static void seg_push(SegVec *sv, size_t a, size_t b, int match) {
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 64;
        sv->v = xrealloc(sv->v, sv->cap * sizeof *sv->v);
    }
    sv->v[sv->n++] = (Seg){a, b, match};
}

// Spans (sorted, non-overlapping) -> segments covering [0, len).
static void segs_from_spans(const SpanVec *sp, size_t len, SegVec *out) {
    out->n = 0;
    size_t prev = 0;
    for (size_t i = 0; i < sp->n; i++) {
        if (sp->v[i].start > prev) seg_push(out, prev, sp->v[i].start, 0);
        seg_push(out, sp->v[i].start, sp->v[i].end, 1);
        prev = sp->v[i].end;
    }
    if (prev < len) seg_push(out, prev, len, 0);
}

// NormalizedString::split: combine segments by behaviour, drop empty pieces.
static void split_apply(const Piece *pc, SegVec *segs, SplitBehavior beh, int invert, PieceVec *out) {
    if (invert)
        for (size_t i = 0; i < segs->n; i++) segs->v[i].match = !segs->v[i].match;
    size_t n = 0;  // combined segments are written back into segs->v[0..n)
    Seg *v = segs->v;
    switch (beh) {
    case SPLIT_REMOVED:
        for (size_t i = 0; i < segs->n; i++)
            if (!v[i].match) v[n++] = v[i];
        break;
    case SPLIT_ISOLATED: n = segs->n; break;
    case SPLIT_MERGED_PREV: {
        int prev_match = 0;
        for (size_t i = 0; i < segs->n; i++) {
            Seg s = v[i];
            if (s.match && !prev_match && n > 0) v[n - 1].b = s.b;
            else v[n++] = s;
            prev_match = s.match;
        }
        break;
    }
    case SPLIT_MERGED_NEXT: {
        // Walk backwards: a match glues onto the piece after it.
        int prev_match = 0;
        size_t w = segs->n;  // write position from the end
        for (size_t k = segs->n; k-- > 0;) {
            Seg s = v[k];
            if (s.match && !prev_match && w < segs->n) v[w].a = s.a;
            else v[--w] = s;
            prev_match = s.match;
        }
        n = segs->n - w;
        memmove(v, v + w, n * sizeof *v);
        break;
    }
    case SPLIT_CONTIGUOUS: {
        int prev_match = 0;
        for (size_t i = 0; i < segs->n; i++) {
            Seg s = v[i];
            if (s.match == prev_match && n > 0) v[n - 1].b = s.b;
            else v[n++] = s;
            prev_match = s.match;
        }
        break;
    }
    }
    for (size_t i = 0; i < n; i++)
        if (v[i].b > v[i].a) piecevec_push(out, pc->s + v[i].a, v[i].b - v[i].a, pc->at_start && v[i].a == 0);
}

// Character-predicate patterns produce one match per matching character.
static void segs_from_pred(const char *s, size_t len, int (*pred)(uint32_t), SegVec *out) {
    out->n = 0;
    size_t i = 0, prev = 0, adv;
    while (i < len) {
        int32_t cp = utf8_decode(s + i, len - i, &adv);
        if (cp >= 0 && pred((uint32_t)cp)) {
            if (i > prev) seg_push(out, prev, i, 0);
            seg_push(out, i, i + adv, 1);
            prev = i + adv;
        }
        i += adv;
    }
    if (prev < len) seg_push(out, prev, len, 0);
}

static int is_ws(uint32_t c) { return unicode_is_whitespace(c); }

static const char *replace_all(EncodeCtx *ctx, const char *s, size_t len, const char *from, size_t fl, const char *to,
                               size_t tl, const char *prefix, size_t pl, size_t *out_len) {
    size_t cnt = 0;
    for (size_t i = 0; i + fl <= len; i++)
        if (!memcmp(s + i, from, fl)) cnt++, i += fl - 1;
    size_t n = pl + len - cnt * fl + cnt * tl;
    char *p = ctx_alloc(ctx, n + 1), *o = p;
    memcpy(o, prefix, pl);
    o += pl;
    for (size_t i = 0; i < len;) {
        if (i + fl <= len && !memcmp(s + i, from, fl)) {
            memcpy(o, to, tl);
            o += tl;
            i += fl;
        } else {
            *o++ = s[i++];
        }
    }
    *o = 0;
    *out_len = n;
    return p;
}

static Status pretok_one(const PreTokenizer *p, const Piece *pc, PieceVec *out, EncodeCtx *ctx, SegVec *segs, Err *e) {
    switch (p->kind) {
    case PRE_SPLIT:
    case PRE_WHITESPACE:
        TRY(tokre_find_all(&p->re, pc->s, pc->len, ctx, e));
        segs_from_spans(&ctx->spans, pc->len, segs);
        if (p->kind == PRE_SPLIT) split_apply(pc, segs, p->behavior, p->invert, out);
        else split_apply(pc, segs, SPLIT_REMOVED, 1, out);
        return ST_OK;
    case PRE_WHITESPACE_SPLIT:
        segs_from_pred(pc->s, pc->len, is_ws, segs);
        split_apply(pc, segs, SPLIT_REMOVED, 0, out);
        return ST_OK;
    case PRE_DIGITS:
        segs_from_pred(pc->s, pc->len, unicode_is_numeric, segs);  // Rust: char::is_numeric
        split_apply(pc, segs, p->individual_digits ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS, 0, out);
        return ST_OK;
    case PRE_METASPACE: {
        size_t rl = strlen(p->replacement), nl;
        int prepend = 0;
        if (p->prepend != PREPEND_NEVER && (pc->len < 1 || pc->s[0] != ' ') &&
            !(pc->len >= rl && !memcmp(pc->s, p->replacement, rl)))
            prepend = p->prepend == PREPEND_ALWAYS || pc->at_start;
        // A leading space becomes the replacement, so "starts with the replacement" covers it.
        const char *s = replace_all(ctx, pc->s, pc->len, " ", 1, p->replacement, rl, p->replacement, prepend ? rl : 0, &nl);
        Piece np = {s, nl, pc->at_start};
        if (!p->split) {
            if (nl) piecevec_push(out, s, nl, pc->at_start);
            return ST_OK;
        }
        SpanVec *sp = &ctx->spans;
        sp->n = 0;
        TokRegex lit = {NULL, p->replacement, rl};
        TRY(tokre_find_all(&lit, s, nl, ctx, e));
        segs_from_spans(sp, nl, segs);
        split_apply(&np, segs, SPLIT_MERGED_NEXT, 0, out);
        return ST_OK;
    }
    case PRE_BYTELEVEL: {
        PieceVec tmp = {0};
        const Piece *src = pc;
        size_t n_src = 1;
        Piece pref;
        if (p->add_prefix_space && (pc->len == 0 || pc->s[0] != ' ')) {
            char *s = ctx_alloc(ctx, pc->len + 1);
            s[0] = ' ';
            memcpy(s + 1, pc->s, pc->len);
            pref = (Piece){s, pc->len + 1, pc->at_start};
            src = &pref;
        }
        if (p->use_regex) {
            TRY(tokre_find_all(&p->re, src->s, src->len, ctx, e));
            segs_from_spans(&ctx->spans, src->len, segs);
            split_apply(src, segs, SPLIT_ISOLATED, 0, &tmp);
            src = tmp.v;
            n_src = tmp.n;
        }
        for (size_t k = 0; k < n_src; k++) {
            const Piece *q = &src[k];
            size_t n = 0;
            for (size_t i = 0; i < q->len; i++) n += p->bl_len[(unsigned char)q->s[i]];
            char *o = ctx_alloc(ctx, n), *w = o;
            for (size_t i = 0; i < q->len; i++) {
                unsigned char b = (unsigned char)q->s[i];
                w[0] = p->bl_enc[b][0];
                if (p->bl_len[b] == 2) w[1] = p->bl_enc[b][1];
                w += p->bl_len[b];
            }
            if (n) piecevec_push(out, o, n, q->at_start);
        }
        free(tmp.v);
        return ST_OK;
    }
    case PRE_SEQUENCE: break;
    }
    CHECK(0);
    return ST_OK;
}

Status pretok_apply(const PreTokenizer *p, PieceVec *in, PieceVec *out, EncodeCtx *ctx, Err *e) {
    out->n = 0;
    if (p->kind == PRE_SEQUENCE) {
        // Ping-pong between in and out; the result must end in out.
        PieceVec *a = in, *b = out;
        if (p->n_children == 0) {
            for (size_t i = 0; i < in->n; i++) piecevec_push(out, in->v[i].s, in->v[i].len, in->v[i].at_start);
            return ST_OK;
        }
        for (int i = 0; i < p->n_children; i++) {
            TRY(pretok_apply(p->children[i], a, b, ctx, e));
            PieceVec *t = a;
            a = b;
            b = t;
        }
        if (a != out) {
            PieceVec t = *out;
            *out = *a;
            *a = t;
        }
        return ST_OK;
    }
    SegVec segs = {0};
    Status st = ST_OK;
    for (size_t i = 0; i < in->n && st == ST_OK; i++) st = pretok_one(p, &in->v[i], out, ctx, &segs, e);
    free(segs.v);
    return st;
}
