// tokenizer.c: loading tokenizer.json + tokenizer_config.json, the encode pipeline (added tokens,
// normalizer, pre-tokenizer, BPE, post-processor), decode and streaming decode.
#include "tok_internal.h"

#include "unicode.h"

#include "../core/fileio.h"

#include <string.h>
#include <sys/stat.h>

// ---- added tokens ---------------------------------------------------------------------------
static int patref_cmp(const void *x, const void *y) {
    const PatRef *a = x, *b = y;
    unsigned char fa = (unsigned char)a->pat[0], fb = (unsigned char)b->pat[0];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->order - b->order;
}

void matcher_build(AddedMatcher *m, PatRef *refs, int n) {
    qsort(refs, (size_t)n, sizeof *refs, patref_cmp);
    m->n = n;
    m->toks = xcalloc((size_t)n + 1, sizeof *m->toks);
    m->patterns = xcalloc((size_t)n + 1, sizeof *m->patterns);
    m->pat_len = xcalloc((size_t)n + 1, sizeof *m->pat_len);
    for (int i = 0; i < n; i++) {
        m->toks[i] = refs[i].tok;
        m->patterns[i] = refs[i].pat;
        m->pat_len[i] = refs[i].len;
    }
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < n && (unsigned char)m->patterns[k][0] < b) k++;
        m->first[b] = k;
    }
}

void matcher_free(AddedMatcher *m) {
    for (int i = 0; i < m->n; i++) free(m->patterns[i]);
    free(m->patterns);
    free(m->toks);
    free(m->pat_len);
    memset(m, 0, sizeof *m);
}

typedef struct Section {
    const char *s;
    size_t len;
    int32_t id;         // >= 0: an added token
    uint8_t at_start;
} Section;

typedef struct SectionVec {
    Section *v;
    size_t n, cap;
} SectionVec;

static void section_push(SectionVec *sv, const char *s, size_t len, int32_t id, int at_start) {
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 16;
        sv->v = xrealloc(sv->v, sv->cap * sizeof *sv->v);
    }
    sv->v[sv->n++] = (Section){s, len, id, (uint8_t)at_start};
}

static int32_t prev_cp(const char *s, size_t end) {
    if (end == 0) return -1;
    size_t k = end - 1, adv;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return utf8_decode(s + k, end - k, &adv);
}

// AddedVocabulary::find_matches: leftmost-longest matches with single_word / lstrip / rstrip.
static void added_split(const Tokenizer *tok, const AddedMatcher *m, const char *s, size_t len, int at_start,
                        SectionVec *out) {
    size_t start_offset = 0, i = 0;
    while (m->n && i < len) {
        unsigned char b = (unsigned char)s[i];
        int best = -1;
        for (int k = m->first[b]; k < m->first[b + 1]; k++) {
            if (m->pat_len[k] <= len - i && !memcmp(s + i, m->patterns[k], m->pat_len[k])) {
                best = k;  // sorted longest first
                break;
            }
        }
        if (best < 0) {
            i++;
            continue;
        }
        const AddedToken *t = m->toks[best];
        size_t start = i, stop = i + m->pat_len[best], adv;
        i = stop;  // matches never overlap, kept or not
        if (tok->split_special_tokens && t->special) continue;
        if (t->single_word) {
            int32_t before = prev_cp(s, start);
            int32_t after = stop < len ? utf8_decode(s + stop, len - stop, &adv) : -1;
            if ((before >= 0 && unicode_is_word((uint32_t)before)) || (after >= 0 && unicode_is_word((uint32_t)after)))
                continue;
        }
        if (t->lstrip) {
            size_t ns = start;
            for (;;) {
                int32_t cp = prev_cp(s, ns);
                if (cp < 0 || !unicode_is_whitespace((uint32_t)cp)) break;
                ns -= (size_t)utf8_encode((uint32_t)cp, (char[4]){0});
            }
            start = MAX(ns, start_offset);
        }
        if (t->rstrip) {
            while (stop < len) {
                int32_t cp = utf8_decode(s + stop, len - stop, &adv);
                if (cp < 0 || !unicode_is_whitespace((uint32_t)cp)) break;
                stop += adv;
            }
            i = MAX(i, stop);
        }
        if (start_offset < start) section_push(out, s + start_offset, start - start_offset, -1, at_start && start_offset == 0);
        section_push(out, s + start, stop - start, t->id, 0);
        start_offset = stop;
    }
    if (start_offset < len) section_push(out, s + start_offset, len - start_offset, -1, at_start && start_offset == 0);
}

// ---- encode ---------------------------------------------------------------------------------
static void ids_push(TokenIds *out, int32_t id) {
    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 64;
        out->ids = xrealloc(out->ids, out->cap * sizeof *out->ids);
    }
    out->ids[out->n++] = id;
}

static void ctx_free(EncodeCtx *ctx) {
    if (ctx->md) pcre2_match_data_free(ctx->md);
    for (ArenaBlock *b = ctx->blocks, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(ctx->spans.v);
}

static Status encode_text(const Tokenizer *tok, const Section *sec, EncodeCtx *ctx, PieceVec *pa, PieceVec *pb,
                          TokenIds *out, Err *e) {
    const char *s = sec->s;
    size_t len = sec->len;
    if (tok->normalizer) TRY(normalizer_apply(tok->normalizer, s, len, ctx, &s, &len, e));
    SectionVec subs = {0};
    if (tok->norm_matcher.n) added_split(tok, &tok->norm_matcher, s, len, sec->at_start, &subs);
    else section_push(&subs, s, len, -1, sec->at_start);
    Status st = ST_OK;
    for (size_t k = 0; k < subs.n && st == ST_OK; k++) {
        Section *q = &subs.v[k];
        if (q->id >= 0) {
            ids_push(out, q->id);
            continue;
        }
        if (!q->len) continue;
        pa->n = 0;
        piecevec_push(pa, q->s, q->len, q->at_start);
        PieceVec *pieces = pa;
        if (tok->pre) {
            st = pretok_apply(tok->pre, pa, pb, ctx, e);
            pieces = pb;
        }
        for (size_t i = 0; i < pieces->n && st == ST_OK; i++) bpe_encode_piece(&tok->bpe, pieces->v[i].s, pieces->v[i].len, out);
    }
    free(subs.v);
    return st;
}

Status tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int add_special_tokens, TokenIds *out,
                        Err *e) {
    size_t bad = utf8_validate(text, len);
    if (bad != len) return err_set(e, ST_EINVAL, "text is not valid UTF-8 (byte %zu: 0x%02X)", bad, (unsigned char)text[bad]);
    if (add_special_tokens)
        for (int i = 0; i < tok->n_post_pre; i++) ids_push(out, tok->post_pre[i]);
    EncodeCtx ctx = {0};
    SectionVec secs = {0};
    PieceVec pa = {0}, pb = {0};
    added_split(tok, &tok->raw_matcher, text, len, 1, &secs);
    Status st = ST_OK;
    for (size_t i = 0; i < secs.n && st == ST_OK; i++) {
        if (secs.v[i].id >= 0) ids_push(out, secs.v[i].id);
        else st = encode_text(tok, &secs.v[i], &ctx, &pa, &pb, out, e);
    }
    if (st == ST_OK && add_special_tokens)
        for (int i = 0; i < tok->n_post_post; i++) ids_push(out, tok->post_post[i]);
    free(secs.v);
    free(pa.v);
    free(pb.v);
    ctx_free(&ctx);
    return st;
}

// ---- decode ---------------------------------------------------------------------------------
static char *decode_raw(const Tokenizer *tok, const int32_t *ids, size_t n, int skip_special) {
    StrVec t = {0};
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab_size) continue;
        const char *s = tok->id_dec[ids[i]];
        if (!s || (skip_special && tok->skip_dec[ids[i]])) continue;
        strvec_push(&t, s, strlen(s));
    }
    StrBuf sb = {0};
    sb_puts(&sb, "");
    if (tok->decoder) {
        decoder_apply(tok->decoder, &t);
        for (size_t i = 0; i < t.n; i++) sb_puts(&sb, t.v[i]);
    } else {
        for (size_t i = 0; i < t.n; i++) {
            if (i) sb_putc(&sb, ' ');
            sb_puts(&sb, t.v[i]);
        }
    }
    strvec_free(&t);
    return sb_take(&sb);
}

// transformers' clean_up_tokenization: sequential plain replacements.
static char *clean_up(char *s) {
    static const char *from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < ARRAY_LEN(from); k++) {
        if (!strstr(s, from[k])) continue;
        StrBuf sb = {0};
        sb_puts(&sb, "");
        size_t fl = strlen(from[k]);
        for (const char *p = s; *p;) {
            if (!strncmp(p, from[k], fl)) {
                sb_puts(&sb, to[k]);
                p += fl;
            } else {
                sb_putc(&sb, *p++);
            }
        }
        free(s);
        s = sb_take(&sb);
    }
    return s;
}

char *tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, int skip_special_tokens) {
    char *s = decode_raw(tok, ids, n, skip_special_tokens);
    return tok->clean_up_spaces ? clean_up(s) : s;
}

void tokenizer_stream_init(TokenizerStream *s, const Tokenizer *tok, int skip_special_tokens) {
    memset(s, 0, sizeof *s);
    s->tok = tok;
    s->skip_special_tokens = skip_special_tokens;
    s->prefix = xstrdup("");
}

char *tokenizer_stream_step(TokenizerStream *s, int32_t id) {
    ids_push(&s->ids, id);
    char *str = decode_raw(s->tok, s->ids.ids, s->ids.n, s->skip_special_tokens);
    size_t sl = strlen(str), pl = strlen(s->prefix);
    if (sl > pl && !(sl >= 3 && !memcmp(str + sl - 3, "\xEF\xBF\xBD", 3))) {
        // A decoder may rewrite earlier text (e.g. strip a leading space); then emit from the
        // first difference onwards, which keeps the stream's concatenation equal to decode().
        size_t common = 0;
        while (common < pl && str[common] == s->prefix[common]) common++;
        char *out = xstrdup(str + common);
        size_t new_prefix_index = s->ids.n - s->prefix_index;
        memmove(s->ids.ids, s->ids.ids + s->prefix_index, new_prefix_index * sizeof *s->ids.ids);
        s->ids.n = new_prefix_index;
        free(s->prefix);
        s->prefix = decode_raw(s->tok, s->ids.ids, s->ids.n, s->skip_special_tokens);
        s->prefix_index = new_prefix_index;
        free(str);
        return out;
    }
    free(str);
    return xstrdup("");
}

void tokenizer_stream_free(TokenizerStream *s) {
    tokenizer_ids_free(&s->ids);
    free(s->prefix);
    memset(s, 0, sizeof *s);
}

// ---- accessors ------------------------------------------------------------------------------
int32_t tokenizer_vocab_size(const Tokenizer *tok) { return tok->vocab_size; }

int32_t tokenizer_token_to_id(const Tokenizer *tok, const char *token) {
    size_t len = strlen(token);
    int32_t id = strmap_get(&tok->added_map, token, len);
    return id >= 0 ? id : strmap_get(&tok->bpe.vocab, token, len);
}

const char *tokenizer_id_to_token(const Tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->vocab_size) return NULL;
    return tok->id_tok[id];
}

int tokenizer_is_special(const Tokenizer *tok, int32_t id) { return id >= 0 && id < tok->vocab_size && tok->special[id]; }

int32_t tokenizer_bos_id(const Tokenizer *tok) { return tok->bos_id; }
int32_t tokenizer_eos_id(const Tokenizer *tok) { return tok->eos_id; }
int32_t tokenizer_pad_id(const Tokenizer *tok) { return tok->pad_id; }
int32_t tokenizer_unk_id(const Tokenizer *tok) { return tok->unk_id; }
const char *tokenizer_bos_token(const Tokenizer *tok) { return tok->bos; }
const char *tokenizer_eos_token(const Tokenizer *tok) { return tok->eos; }
const char *tokenizer_pad_token(const Tokenizer *tok) { return tok->pad; }
const char *tokenizer_unk_token(const Tokenizer *tok) { return tok->unk; }
