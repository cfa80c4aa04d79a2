// tok_bpe.c: the BPE model (tokenizers/src/models/bpe): vocabulary and merge-rank hash maps,
// merging by a min-heap over linked symbols, and a per-piece cache.
#include "tok_internal.h"

#include "unicode.h"

#include <stdio.h>
#include <string.h>

#define BPE_CACHE_SLOTS (1u << 17)  // filled to half at most; no eviction (like tokenizers)
#define BPE_CACHE_MAX_LEN 256       // pieces this long or longer are not cached

// ---- merge map -----------------------------------------------------------------------------
static size_t pair_slot(uint64_t key, size_t cap) { return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & (cap - 1); }

static void pairmap_put(PairMap *m, int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        PairSlot *ns = xcalloc(ncap, sizeof *ns);
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slots[i].key) continue;
            size_t j = pair_slot(m->slots[i].key, ncap);
            while (ns[j].key) j = (j + 1) & (ncap - 1);
            ns[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t j = pair_slot(key, m->cap);
    while (m->slots[j].key && m->slots[j].key != key) j = (j + 1) & (m->cap - 1);
    if (!m->slots[j].key) m->n++;
    m->slots[j] = (PairSlot){key, rank, new_id};  // a repeated pair keeps the last rank, as a HashMap insert does
}

static inline const PairSlot *pairmap_get(const PairMap *m, int32_t a, int32_t b) {
    if (!m->cap) return NULL;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t j = pair_slot(key, m->cap);
    while (m->slots[j].key) {
        if (m->slots[j].key == key) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

// ---- loading -------------------------------------------------------------------------------
static Status opt_string(const cJSON *j, const char *key, const char *what, char **out, Err *e) {
    const char *s;
    *out = NULL;
    Status st = json_get_string(j, key, what, 0, &s, e);
    if (st == ST_ENOTFOUND) {
        err_clear(e);
        return ST_OK;
    }
    TRY(st);
    if (*s) *out = xstrdup(s);
    return ST_OK;
}

static Status merge_parts(const cJSON *m, const char *what, size_t i, const char **a, size_t *al, const char **b,
                          size_t *bl, Err *e) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring;
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return err_set(e, ST_EINVAL, "%s: merges[%zu] \"%s\" must be two tokens separated by one space", what, i, s);
        *a = s, *al = (size_t)(sp - s), *b = sp + 1, *bl = strlen(sp + 1);
        return ST_OK;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
        cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        *a = cJSON_GetArrayItem(m, 0)->valuestring, *al = strlen(*a);
        *b = cJSON_GetArrayItem(m, 1)->valuestring, *bl = strlen(*b);
        return ST_OK;
    }
    return err_set(e, ST_EINVAL, "%s: merges[%zu] must be a string \"a b\" or an array [\"a\", \"b\"]", what, i);
}

Status bpe_parse(const cJSON *model, const char *what, Bpe *bpe, Err *e) {
    memset(bpe, 0, sizeof *bpe);
    bpe->unk_id = -1;
    for (int b = 0; b < 256; b++) bpe->byte_ids[b] = -1;
    pthread_mutex_init(&bpe->cache_mu, NULL);
    if (!cJSON_IsObject(model)) return err_set(e, ST_EINVAL, "%s: missing \"model\" object", what);
    const char *type = NULL;
    if (json_get_string(model, "type", what, 0, &type, e) == ST_EINVAL) return ST_EINVAL;
    err_clear(e);
    if (type && strcmp(type, "BPE"))
        return err_set(e, ST_EUNSUPPORTED, "%s: model type \"%s\" is not supported (only BPE)", what, type);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab)) return err_set(e, ST_EINVAL, "%s: model.vocab must be an object {token: id}", what);
    if (!cJSON_IsArray(merges)) return err_set(e, ST_EINVAL, "%s: model.merges must be an array", what);
    double dropout = 0;
    if (json_get_double(model, "dropout", what, 0, &dropout, e) == ST_EINVAL) return ST_EINVAL;
    err_clear(e);
    if (dropout > 0) return err_set(e, ST_EUNSUPPORTED, "%s: BPE dropout is not supported", what);

    int32_t max_id = -1;
    for (const cJSON *v = vocab->child; v; v = v->next) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 || v->valuedouble != (int32_t)v->valuedouble)
            return err_set(e, ST_EINVAL, "%s: model.vocab[\"%s\"] must be a non-negative integer id", what, v->string);
        int32_t id = (int32_t)v->valuedouble;
        strmap_put(&bpe->vocab, v->string, strlen(v->string), id);
        max_id = MAX(max_id, id);
    }
    bpe->n_tokens = max_id + 1;
    bpe->tokens = xcalloc((size_t)bpe->n_tokens + 1, sizeof *bpe->tokens);
    for (size_t i = 0; i < bpe->vocab.cap; i++) {
        StrMapSlot *s = &bpe->vocab.slots[i];
        if (s->key && !bpe->tokens[s->val]) bpe->tokens[s->val] = s->key;
    }

    TRY(opt_string(model, "continuing_subword_prefix", what, &bpe->prefix, e));
    TRY(opt_string(model, "end_of_word_suffix", what, &bpe->suffix, e));
    char *unk = NULL;
    TRY(opt_string(model, "unk_token", what, &unk, e));
    if (unk) {
        bpe->unk_id = strmap_get(&bpe->vocab, unk, strlen(unk));
        if (bpe->unk_id < 0) {
            err_set(e, ST_EINVAL, "%s: model.unk_token \"%s\" is not in the vocabulary", what, unk);
            free(unk);
            return ST_EINVAL;
        }
        free(unk);
    }
    const char *flags[] = {"fuse_unk", "byte_fallback", "ignore_merges"};
    int *dst[] = {&bpe->fuse_unk, &bpe->byte_fallback, &bpe->ignore_merges};
    for (int k = 0; k < 3; k++) {
        Status st = json_get_bool(model, flags[k], what, 0, dst[k], e);
        if (st == ST_EINVAL) return st;
        err_clear(e);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        bpe->byte_ids[b] = strmap_get(&bpe->vocab, name, 6);
    }

    size_t prefix_len = bpe->prefix ? strlen(bpe->prefix) : 0;
    StrBuf joined = {0};
    int i = 0;
    for (const cJSON *m = merges->child; m; m = m->next, i++) {
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        Status mst = merge_parts(m, what, (size_t)i, &a, &al, &b, &bl, e);
        if (mst != ST_OK) {
            sb_free(&joined);
            return mst;
        }
        int32_t ia = strmap_get(&bpe->vocab, a, al), ib = strmap_get(&bpe->vocab, b, bl);
        if (ia < 0 || ib < 0) {
            sb_free(&joined);
            return err_set(e, ST_EINVAL, "%s: merges[%d]: token \"%.*s\" is not in the vocabulary", what, i,
                           (int)(ia < 0 ? al : bl), ia < 0 ? a : b);
        }
        if (bl < prefix_len) {
            sb_free(&joined);
            return err_set(e, ST_EINVAL, "%s: merges[%d]: \"%.*s\" is shorter than continuing_subword_prefix", what, i,
                           (int)bl, b);
        }
        joined.len = 0;
        sb_append(&joined, a, al);
        sb_append(&joined, b + prefix_len, bl - prefix_len);
        int32_t inew = strmap_get(&bpe->vocab, joined.data, joined.len);
        if (inew < 0) {
            err_set(e, ST_EINVAL, "%s: merges[%d]: merged token \"%.*s\" is not in the vocabulary", what, i,
                    (int)joined.len, joined.data);
            sb_free(&joined);
            return ST_EINVAL;
        }
        pairmap_put(&bpe->merges, ia, ib, i, inew);
    }
    sb_free(&joined);
    bpe->cache_cap = BPE_CACHE_SLOTS;
    bpe->cache = xcalloc(bpe->cache_cap, sizeof *bpe->cache);
    return ST_OK;
}

void bpe_free(Bpe *bpe) {
    strmap_free(&bpe->vocab);
    free(bpe->tokens);
    free(bpe->merges.slots);
    free(bpe->prefix);
    free(bpe->suffix);
    if (bpe->cache) {
        for (size_t i = 0; i < bpe->cache_cap; i++) {
            free(bpe->cache[i].key);
            free(bpe->cache[i].ids);
        }
        free(bpe->cache);
        pthread_mutex_destroy(&bpe->cache_mu);
    }
    memset(bpe, 0, sizeof *bpe);
}

// ---- cache ----------------------------------------------------------------------------------
static int cache_get(const Bpe *bpe, const char *s, size_t len, TokenIds *out) {
    Bpe *mb = (Bpe *)bpe;  // the cache is the one mutable part, guarded by its mutex
    int hit = 0;
    size_t j = tok_hash(s, len) & (bpe->cache_cap - 1);
    pthread_mutex_lock(&mb->cache_mu);
    while (bpe->cache[j].key) {
        const BpeCacheSlot *c = &bpe->cache[j];
        if (c->len == len && !memcmp(c->key, s, len)) {
            if (out->n + c->n > out->cap) {
                out->cap = MAX(out->cap * 2, out->n + c->n + 16);
                out->ids = xrealloc(out->ids, out->cap * sizeof *out->ids);
            }
            memcpy(out->ids + out->n, c->ids, c->n * sizeof *c->ids);
            out->n += c->n;
            hit = 1;
            break;
        }
        j = (j + 1) & (bpe->cache_cap - 1);
    }
    pthread_mutex_unlock(&mb->cache_mu);
    return hit;
}

static void cache_put(const Bpe *bpe, const char *s, size_t len, const int32_t *ids, size_t n) {
    Bpe *mb = (Bpe *)bpe;
    size_t j = tok_hash(s, len) & (bpe->cache_cap - 1);
    pthread_mutex_lock(&mb->cache_mu);
    if ((mb->cache_n + 1) * 2 <= mb->cache_cap) {
        while (mb->cache[j].key && !(mb->cache[j].len == len && !memcmp(mb->cache[j].key, s, len)))
            j = (j + 1) & (mb->cache_cap - 1);
        if (!mb->cache[j].key) {
            BpeCacheSlot *c = &mb->cache[j];
            c->key = xstrndup(s, len);
            c->len = (uint32_t)len;
            c->n = (uint32_t)n;
            c->ids = xmalloc(n * sizeof *ids + 1);
            memcpy(c->ids, ids, n * sizeof *ids);
            mb->cache_n++;
        }
    }
    pthread_mutex_unlock(&mb->cache_mu);
}

// ---- merging --------------------------------------------------------------------------------
typedef struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;   // bytes covered; 0 once merged into its left neighbour
} Sym;

typedef struct HeapItem {
    int32_t rank, pos, new_id;
} HeapItem;

static inline int heap_less(HeapItem a, HeapItem b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static void heap_push(HeapItem *h, size_t *n, HeapItem x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static HeapItem heap_pop(HeapItem *h, size_t *n) {
    HeapItem top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        HeapItem best = x;
        if (l < *n && heap_less(h[l], best)) m = l, best = h[l];
        if (r < *n && heap_less(h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = x;
    return top;
}

typedef struct SymVec {
    Sym *v;
    size_t n, cap;
    Sym *stack;     // the caller's initial buffer, never freed here
} SymVec;

static void sym_push(SymVec *sv, int32_t id, uint32_t len) {
    if (sv->n == sv->cap) {
        Sym *old = sv->v;
        sv->cap *= 2;
        sv->v = xmalloc(sv->cap * sizeof *sv->v);
        memcpy(sv->v, old, sv->n * sizeof *sv->v);
        if (old != sv->stack) free(old);
    }
    sv->v[sv->n] = (Sym){id, (int32_t)sv->n - 1, (int32_t)sv->n + 1, len};
    sv->n++;
}

// Word::from the characters of s: vocabulary lookups with prefix/suffix, byte fallback, unk fusing.
static void initial_symbols(const Bpe *bpe, const char *s, size_t len, SymVec *sv) {
    StrBuf tmp = {0};
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    size_t pl = bpe->prefix ? strlen(bpe->prefix) : 0, sl = bpe->suffix ? strlen(bpe->suffix) : 0;
    size_t i = 0;
    while (i < len) {
        size_t cl = (size_t)utf8_seq_len((unsigned char)s[i]);
        if (i + cl > len) cl = len - i;
        const char *c = s + i;
        size_t n = cl;
        int first = i == 0, last = i + cl == len;
        if ((pl && !first) || (sl && last)) {
            tmp.len = 0;
            if (pl && !first) sb_append(&tmp, bpe->prefix, pl);
            sb_append(&tmp, s + i, cl);
            if (sl && last) sb_append(&tmp, bpe->suffix, sl);
            c = tmp.data, n = tmp.len;
        }
        int32_t id = strmap_get(&bpe->vocab, c, n);
        if (id >= 0) {
            if (unk_id >= 0) sym_push(sv, unk_id, unk_len), unk_id = -1;
            sym_push(sv, id, (uint32_t)cl);
        } else {
            int done = 0;
            if (bpe->byte_fallback) {
                size_t k = 0;
                while (k < n && bpe->byte_ids[(unsigned char)c[k]] >= 0) k++;
                if (k == n) {
                    // A pending unk stays pending: Rust adds it after these bytes.
                    for (k = 0; k < n; k++) sym_push(sv, bpe->byte_ids[(unsigned char)c[k]], 1);
                    done = 1;
                }
            }
            if (!done && bpe->unk_id >= 0) {
                if (unk_id >= 0 && bpe->fuse_unk) {
                    unk_len += (uint32_t)cl;
                } else {
                    if (unk_id >= 0) sym_push(sv, unk_id, unk_len);
                    unk_id = bpe->unk_id, unk_len = (uint32_t)cl;
                }
            }
        }
        i += cl;
    }
    if (unk_id >= 0) sym_push(sv, unk_id, unk_len);
    if (sv->n) sv->v[sv->n - 1].next = -1;
    sb_free(&tmp);
}

void bpe_encode_piece(const Bpe *bpe, const char *s, size_t len, TokenIds *out) {
    if (bpe->ignore_merges) {
        int32_t id = strmap_get(&bpe->vocab, s, len);
        if (id >= 0) {
            if (out->n == out->cap) {
                out->cap = out->cap ? out->cap * 2 : 64;
                out->ids = xrealloc(out->ids, out->cap * sizeof *out->ids);
            }
            out->ids[out->n++] = id;
            return;
        }
    }
    int cacheable = len < BPE_CACHE_MAX_LEN;
    if (cacheable && cache_get(bpe, s, len, out)) return;

    Sym stack_syms[128];
    HeapItem stack_heap[256];
    SymVec sv = {stack_syms, 0, 128, stack_syms};
    initial_symbols(bpe, s, len, &sv);
    HeapItem *heap = sv.n <= 128 ? stack_heap : xmalloc(sv.n * 2 * sizeof *heap);
    size_t hcap = sv.n <= 128 ? 256 : sv.n * 2, hn = 0;
    Sym *sy = sv.v;
    for (size_t i = 0; i + 1 < sv.n; i++) {
        const PairSlot *m = pairmap_get(&bpe->merges, sy[i].id, sy[i + 1].id);
        if (m) heap_push(heap, &hn, (HeapItem){m->rank, (int32_t)i, m->new_id});
    }
    while (hn) {
        HeapItem top = heap_pop(heap, &hn);
        Sym *cur = &sy[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        Sym *right = &sy[cur->next];
        const PairSlot *m = pairmap_get(&bpe->merges, cur->id, right->id);
        if (!m || m->new_id != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += right->len;
        cur->next = right->next;
        right->len = 0;
        if (cur->next >= 0) sy[cur->next].prev = top.pos;
        // Each merge adds at most two entries and removes one symbol, so 2n entries suffice.
        CHECK(hn + 2 <= hcap);
        if (cur->prev >= 0) {
            const PairSlot *pm = pairmap_get(&bpe->merges, sy[cur->prev].id, cur->id);
            if (pm) heap_push(heap, &hn, (HeapItem){pm->rank, cur->prev, pm->new_id});
        }
        if (cur->next >= 0) {
            const PairSlot *nm = pairmap_get(&bpe->merges, cur->id, sy[cur->next].id);
            if (nm) heap_push(heap, &hn, (HeapItem){nm->rank, top.pos, nm->new_id});
        }
    }
    size_t start = out->n;
    for (size_t i = 0; i < sv.n; i++) {
        if (!sy[i].len) continue;
        if (out->n == out->cap) {
            out->cap = out->cap ? out->cap * 2 : 64;
            out->ids = xrealloc(out->ids, out->cap * sizeof *out->ids);
        }
        out->ids[out->n++] = sy[i].id;
    }
    // A word that yields no ids (unknown characters without unk or byte fallback) is not cached:
    // out->ids may still be NULL then.
    if (cacheable && out->n > start) cache_put(bpe, s, len, out->ids + start, out->n - start);
    if (heap != stack_heap) free(heap);
    if (sv.v != stack_syms) free(sv.v);
}
