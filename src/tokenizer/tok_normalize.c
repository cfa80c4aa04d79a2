// tok_normalize.c: normalizers (tokenizers/src/normalizers), applied to each text section that
// the added-token split leaves.
#include "tok_internal.h"

#include "unicode.h"

#include <string.h>

static const struct {
    const char *name;
    NormKind kind;
} norm_names[] = {
    {"NFC", NORM_NFC}, {"NFD", NORM_NFD}, {"NFKC", NORM_NFKC}, {"NFKD", NORM_NFKD},
    {"Lowercase", NORM_LOWERCASE}, {"Replace", NORM_REPLACE}, {"Prepend", NORM_PREPEND},
    {"Strip", NORM_STRIP}, {"StripAccents", NORM_STRIP_ACCENTS}, {"Sequence", NORM_SEQUENCE},
};

Status normalizer_parse(const cJSON *j, const char *what, Normalizer **out, Err *e) {
    *out = NULL;
    if (!j || cJSON_IsNull(j)) return ST_OK;
    const char *type;
    TRY(json_get_string(j, "type", what, 1, &type, e));
    Normalizer *n = xcalloc(1, sizeof *n);
    size_t k = 0;
    for (; k < ARRAY_LEN(norm_names); k++)
        if (!strcmp(norm_names[k].name, type)) break;
    if (k == ARRAY_LEN(norm_names)) {
        free(n);
        return err_set(e, ST_EUNSUPPORTED, "%s: normalizer type \"%s\" is not supported", what, type);
    }
    n->kind = norm_names[k].kind;
    Status st = ST_OK;
    const char *s;
    switch (n->kind) {
    case NORM_REPLACE:
        st = tokre_compile(cJSON_GetObjectItemCaseSensitive(j, "pattern"), what, &n->re, e);
        if (st == ST_OK) st = json_get_string(j, "content", what, 1, &s, e);
        if (st == ST_OK) n->content = xstrdup(s);
        break;
    case NORM_PREPEND:
        st = json_get_string(j, "prepend", what, 1, &s, e);
        if (st == ST_OK) n->content = xstrdup(s);
        break;
    case NORM_STRIP:
        // Serialized as {"strip_left": bool, "strip_right": bool}; both are required in Rust.
        st = json_get_bool(j, "strip_left", what, 1, &n->left, e);
        if (st == ST_OK) st = json_get_bool(j, "strip_right", what, 1, &n->right, e);
        break;
    case NORM_SEQUENCE: {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr)) {
            st = err_set(e, ST_EINVAL, "%s: Sequence normalizer needs a \"normalizers\" array", what);
            break;
        }
        n->n_children = cJSON_GetArraySize(arr);
        n->children = xcalloc((size_t)n->n_children + 1, sizeof *n->children);
        for (int i = 0; i < n->n_children && st == ST_OK; i++)
            st = normalizer_parse(cJSON_GetArrayItem(arr, i), what, &n->children[i], e);
        break;
    }
    default: break;
    }
    if (st != ST_OK) {
        normalizer_free(n);
        return st;
    }
    *out = n;
    return ST_OK;
}

void normalizer_free(Normalizer *n) {
    if (!n) return;
    for (int i = 0; i < n->n_children; i++) normalizer_free(n->children[i]);
    free(n->children);
    tokre_free(&n->re);
    free(n->content);
    free(n);
}

static const char *to_ctx(EncodeCtx *ctx, char *heap, size_t len) {
    char *p = ctx_alloc(ctx, len + 1);
    memcpy(p, heap, len + 1);
    free(heap);
    return p;
}

Status normalizer_apply(const Normalizer *n, const char *s, size_t len, EncodeCtx *ctx, const char **out,
                        size_t *out_len, Err *e) {
    size_t ol = len;
    char *heap = NULL;
    switch (n->kind) {
    case NORM_NFC: heap = unicode_normalize(s, len, UNICODE_NFC, &ol); break;
    case NORM_NFD: heap = unicode_normalize(s, len, UNICODE_NFD, &ol); break;
    case NORM_NFKC: heap = unicode_normalize(s, len, UNICODE_NFKC, &ol); break;
    case NORM_NFKD: heap = unicode_normalize(s, len, UNICODE_NFKD, &ol); break;
    case NORM_LOWERCASE: heap = unicode_lowercase(s, len, &ol); break;
    case NORM_REPLACE: {
        TRY(tokre_find_all(&n->re, s, len, ctx, e));
        StrBuf sb = {0};
        size_t prev = 0;
        for (size_t i = 0; i < ctx->spans.n; i++) {
            sb_append(&sb, s + prev, ctx->spans.v[i].start - prev);
            sb_puts(&sb, n->content);
            prev = ctx->spans.v[i].end;
        }
        sb_append(&sb, s + prev, len - prev);
        ol = sb.len;
        heap = sb.data ? sb_take(&sb) : xstrdup("");
        break;
    }
    case NORM_PREPEND: {
        if (len == 0) break;
        size_t pl = strlen(n->content);
        char *p = ctx_alloc(ctx, pl + len + 1);
        memcpy(p, n->content, pl);
        memcpy(p + pl, s, len);
        p[pl + len] = 0;
        *out = p;
        *out_len = pl + len;
        return ST_OK;
    }
    case NORM_STRIP: {
        size_t a = 0, b = len, adv;
        while (n->left && a < b) {
            int32_t cp = utf8_decode(s + a, b - a, &adv);
            if (cp < 0 || !unicode_is_whitespace((uint32_t)cp)) break;
            a += adv;
        }
        while (n->right && b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            int32_t cp = utf8_decode(s + k, b - k, &adv);
            if (cp < 0 || !unicode_is_whitespace((uint32_t)cp)) break;
            b = k;
        }
        *out = s + a;
        *out_len = b - a;
        return ST_OK;
    }
    case NORM_STRIP_ACCENTS: {
        char *p = ctx_alloc(ctx, len + 1);
        size_t o = 0, i = 0, adv;
        while (i < len) {
            int32_t cp = utf8_decode(s + i, len - i, &adv);
            if (cp < 0 || !unicode_is_mark((uint32_t)cp)) {
                memcpy(p + o, s + i, adv);
                o += adv;
            }
            i += adv;
        }
        p[o] = 0;
        *out = p;
        *out_len = o;
        return ST_OK;
    }
    case NORM_SEQUENCE:
        for (int i = 0; i < n->n_children; i++) {
            TRY(normalizer_apply(n->children[i], s, len, ctx, &s, &len, e));
        }
        *out = s;
        *out_len = len;
        return ST_OK;
    }
    if (heap) {
        *out = to_ctx(ctx, heap, ol);
        *out_len = ol;
    } else {
        *out = s;
        *out_len = len;
    }
    return ST_OK;
}
