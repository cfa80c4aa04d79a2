// tok_util.c: hash maps, scratch storage and vectors used by the tokenizer.
#include "tok_internal.h"

#include <string.h>

uint64_t tok_hash(const char *s, size_t len) {
    // FNV-1a over 8-byte words, then a final mix: short tokens dominate, so keep it simple.
    uint64_t h = 0xcbf29ce484222325ULL ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

static void strmap_grow(StrMap *m) {
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    StrMapSlot *ns = xcalloc(ncap, sizeof *ns);
    for (size_t i = 0; i < m->cap; i++) {
        StrMapSlot *o = &m->slots[i];
        if (!o->key) continue;
        size_t j = tok_hash(o->key, o->len) & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = *o;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
}

void strmap_put(StrMap *m, const char *key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap) strmap_grow(m);
    size_t j = tok_hash(key, len) & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].len == len && !memcmp(m->slots[j].key, key, len)) {
            m->slots[j].val = val;
            return;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j].key = xstrndup(key, len);
    m->slots[j].len = (uint32_t)len;
    m->slots[j].val = val;
    m->n++;
}

int32_t strmap_get(const StrMap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    size_t j = tok_hash(key, len) & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].len == len && !memcmp(m->slots[j].key, key, len)) return m->slots[j].val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void strmap_free(StrMap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

char *ctx_alloc(EncodeCtx *ctx, size_t n) {
    ArenaBlock *b = ctx->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 16) ? n : (1u << 16);
        ArenaBlock *nb = xmalloc(sizeof *nb + cap);
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        ctx->blocks = b = nb;
    }
    char *p = b->data + b->used;
    b->used += n;
    return p;
}

void piecevec_push(PieceVec *pv, const char *s, size_t len, int at_start) {
    if (pv->n == pv->cap) {
        pv->cap = pv->cap ? pv->cap * 2 : 64;
        pv->v = xrealloc(pv->v, pv->cap * sizeof *pv->v);
    }
    pv->v[pv->n++] = (Piece){s, len, (uint8_t)at_start};
}

void strvec_push(StrVec *sv, const char *s, size_t len) {
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 16;
        sv->v = xrealloc(sv->v, sv->cap * sizeof *sv->v);
    }
    sv->v[sv->n++] = xstrndup(s, len);
}

void strvec_free(StrVec *sv) {
    for (size_t i = 0; i < sv->n; i++) free(sv->v[i]);
    free(sv->v);
    memset(sv, 0, sizeof *sv);
}

void tokenizer_ids_free(TokenIds *ids) {
    free(ids->ids);
    memset(ids, 0, sizeof *ids);
}
