// unicode.c: UTF-8 helpers, utf8proc-backed classes and normalisation, the GPT-2 byte table.
#include "unicode.h"

#include "../core/alloc.h"

#include <string.h>
#include <utf8proc.h>

int utf8_seq_len(unsigned char b) {
    if (b < 0x80) return 1;
    if ((b & 0xE0) == 0xC0) return 2;
    if ((b & 0xF0) == 0xE0) return 3;
    if ((b & 0xF8) == 0xF0) return 4;
    return 1;
}

int32_t utf8_decode(const char *s, size_t len, size_t *adv) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &cp);
    if (n <= 0) {
        *adv = 1;
        return -1;
    }
    *adv = (size_t)n;
    return cp;
}

int utf8_encode(uint32_t cp, char *out) {
    return (int)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

size_t utf8_validate(const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t adv;
        if (utf8_decode(s + i, len - i, &adv) < 0) return i;
        i += adv;
    }
    return len;
}

int unicode_is_whitespace(uint32_t cp) {
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return 1;
    if (cp < 0x80) return 0;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

int unicode_is_alnum(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

int unicode_is_numeric(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

int unicode_is_word(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    if (cp == 0x200C || cp == 0x200D) return 1;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || (c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME) ||
           c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}

// Length of the valid prefix of a sequence starting at s (Unicode Table 3-7), and whether it is
// complete.
static size_t utf8_prefix(const unsigned char *s, size_t len, int *complete) {
    unsigned char b = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b < 0x80) { *complete = 1; return 1; }
    if (b >= 0xC2 && b <= 0xDF) need = 2;
    else if (b >= 0xE0 && b <= 0xEF) need = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) need = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else { *complete = 0; return 1; }
    size_t i = 1;
    if (i < len && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < need && i < len && s[i] >= 0x80 && s[i] <= 0xBF) i++;
    }
    *complete = i == need;
    return i;
}

char *utf8_lossy(const char *s, size_t len, size_t *out_len) {
    StrBuf sb = {0};
    size_t i = 0;
    while (i < len) {
        int complete;
        size_t n = utf8_prefix((const unsigned char *)s + i, len - i, &complete);
        if (complete) sb_append(&sb, s + i, n);
        else sb_append(&sb, "\xEF\xBF\xBD", 3);
        i += n;
    }
    *out_len = sb.len;
    return sb.data ? sb_take(&sb) : xstrdup("");
}

int unicode_is_mark(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

static int all_ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

char *unicode_normalize(const char *s, size_t len, UnicodeForm form, size_t *out_len) {
    if (all_ascii(s, len)) {
        *out_len = len;
        return xstrndup(s, len);
    }
    int opt = UTF8PROC_STABLE;
    switch (form) {
    case UNICODE_NFC: opt |= UTF8PROC_COMPOSE; break;
    case UNICODE_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case UNICODE_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UNICODE_NFKD: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                      (utf8proc_option_t)opt);
    // The tokenizer validates its input first, so utf8proc cannot reject it; only an
    // allocation failure remains, which is fatal everywhere in still.
    CHECK_MSG(n >= 0, "utf8proc_map: %s", utf8proc_errmsg(n));
    *out_len = (size_t)n;
    return (char *)dst;
}

char *unicode_lowercase(const char *s, size_t len, size_t *out_len) {
    StrBuf sb = {0};
    size_t i = 0;
    char enc[4];
    while (i < len) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x80) {
            sb_putc(&sb, (char)(b >= 'A' && b <= 'Z' ? b + 32 : b));
            i++;
            continue;
        }
        size_t adv;
        int32_t cp = utf8_decode(s + i, len - i, &adv);
        if (cp < 0) {
            sb_append(&sb, s + i, 1);
            i++;
            continue;
        }
        if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping
            sb_append(&sb, "i\xCC\x87", 3);
        } else {
            int n = utf8_encode((uint32_t)utf8proc_tolower(cp), enc);
            sb_append(&sb, enc, (size_t)n);
        }
        i += adv;
    }
    *out_len = sb.len;
    if (!sb.data) return xstrdup("");
    return sb_take(&sb);
}

// The alphabet keeps printable Latin-1 bytes as themselves and moves the other 68 bytes, in
// increasing order, to U+0100 onwards, so that every byte has a visible character.
static int byte_is_kept(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t unicode_byte_to_cp(uint8_t b) {
    if (byte_is_kept(b)) return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++) n += !byte_is_kept(x);
    return 0x100 + n;
}

int unicode_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_kept(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    unsigned n = cp - 0x100;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_kept(x) && n-- == 0) return (int)x;
    return -1;
}
