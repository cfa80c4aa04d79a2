// batch.c: packing and padding into static shapes.
#include "batch.h"

#include "../backend/backend.h"
#include "../core/alloc.h"
#include "../core/rng.h"

#include <string.h>

Status batch_parse_packing(const char *s, PackStrategy *out, Err *e) {
    if (!strcmp(s, "bfd")) *out = PACK_BFD;
    else if (!strcmp(s, "wrapped")) *out = PACK_WRAPPED;
    else return err_set(e, ST_EINVAL, "--packing_strategy %s: expected bfd or wrapped", s);
    return ST_OK;
}

typedef struct RowBuilder {
    Rows *r;
    size_t cap, total;
    int cur_len, cur_seg;
} RowBuilder;

static void rb_reserve(RowBuilder *b, size_t more) {
    if (b->total + more <= b->cap) return;
    while (b->total + more > b->cap) b->cap = b->cap ? b->cap * 2 : 4096;
    Rows *r = b->r;
    r->ids = xrealloc(r->ids, b->cap * sizeof(int32_t));
    r->targets = xrealloc(r->targets, b->cap * sizeof(int32_t));
    r->pos = xrealloc(r->pos, b->cap * sizeof(int32_t));
    r->seg = xrealloc(r->seg, b->cap * sizeof(int32_t));
}

static void rb_end_row(RowBuilder *b) {
    if (b->cur_len == 0) return;
    Rows *r = b->r;
    r->start = xrealloc(r->start, (size_t)(r->n + 2) * sizeof(int));
    r->n++;
    r->start[r->n] = (int)b->total;
    r->max_len = MAX(r->max_len, b->cur_len);
    b->cur_len = 0;
    b->cur_seg = 0;
}

// Append tokens [a, b) of an example as one document of the current row.
static void rb_add_doc(RowBuilder *b, const Example *x, int a, int e) {
    rb_reserve(b, (size_t)(e - a));
    Rows *r = b->r;
    int seg = ++b->cur_seg;
    for (int t = a; t < e; t++) {
        size_t k = b->total++;
        r->ids[k] = x->ids[t];
        r->pos[k] = t - a;
        r->seg[k] = seg;
        r->targets[k] = (t + 1 < e && x->mask[t + 1]) ? x->ids[t + 1] : IGNORE_INDEX;
    }
    b->cur_len += e - a;
}

static int cmp_len_desc(const void *pa, const void *pb, void *ctx) {
    const int *len = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (len[a] != len[b]) return len[b] - len[a];
    return a - b;  // stable
}

// Best-fit decreasing over examples [lo, hi): bins of capacity seq_len.
static void pack_bfd_block(RowBuilder *b, const Dataset *d, int lo, int hi, int seq_len) {
    int n = hi - lo;
    int *idx = xmalloc((size_t)n * sizeof(int)), *len = xmalloc((size_t)d->n * sizeof(int));
    for (int i = 0; i < n; i++) {
        idx[i] = lo + i;
        len[lo + i] = MIN(d->ex[lo + i].n, seq_len);
    }
    qsort_r(idx, (size_t)n, sizeof(int), cmp_len_desc, len);
    int *bin_of = xmalloc((size_t)n * sizeof(int)), *space = xmalloc((size_t)n * sizeof(int)), n_bins = 0;
    for (int i = 0; i < n; i++) {
        int L = len[idx[i]], best = -1;
        for (int k = 0; k < n_bins; k++)  // smallest remaining space that fits; earliest bin on ties
            if (space[k] >= L && (best < 0 || space[k] < space[best])) best = k;
        if (best < 0) space[best = n_bins++] = seq_len;
        space[best] -= L;
        bin_of[i] = best;
    }
    for (int k = 0; k < n_bins; k++) {
        for (int i = 0; i < n; i++)
            if (bin_of[i] == k) rb_add_doc(b, &d->ex[idx[i]], 0, len[idx[i]]);
        rb_end_row(b);
    }
    free(idx);
    free(len);
    free(bin_of);
    free(space);
}

void batch_make_rows(Rows *r, const Dataset *d, PackStrategy pack, int seq_len) {
    memset(r, 0, sizeof *r);
    r->start = xcalloc(1, sizeof(int));
    RowBuilder b = {.r = r};
    if (pack == PACK_NONE) {
        for (int i = 0; i < d->n; i++) {
            rb_add_doc(&b, &d->ex[i], 0, d->ex[i].n);
            rb_end_row(&b);
        }
    } else if (pack == PACK_BFD) {
        for (int lo = 0; lo < d->n; lo += 1000) pack_bfd_block(&b, d, lo, MIN(d->n, lo + 1000), seq_len);
    } else {  // wrapped: documents flow across rows; each piece is its own segment
        for (int i = 0; i < d->n; i++) {
            const Example *x = &d->ex[i];
            int t = 0;
            while (t < x->n) {
                int take = MIN(x->n - t, seq_len - b.cur_len);
                rb_add_doc(&b, x, t, t + take);
                t += take;
                if (b.cur_len == seq_len) rb_end_row(&b);
            }
        }
        rb_end_row(&b);
    }
}

void batch_rows_free(Rows *r) {
    free(r->start);
    free(r->ids);
    free(r->targets);
    free(r->pos);
    free(r->seg);
    memset(r, 0, sizeof *r);
}

void batcher_init(Batcher *bt, const Rows *rows, const BatchConfig *cfg) {
    memset(bt, 0, sizeof *bt);
    bt->cfg = *cfg;
    if (bt->cfg.world < 1) bt->cfg.world = 1, bt->cfg.rank = 0;
    bt->rows = rows;
    int G = cfg->B * bt->cfg.world;  // rows per global micro-batch
    bt->n_batches = cfg->drop_last ? rows->n / G : (rows->n + G - 1) / G;
    bt->Tmax = cfg->fixed_T > 0 ? cfg->fixed_T : round_up(rows->max_len, cfg->pad_to_multiple_of);
    bt->order = xmalloc((size_t)MAX(rows->n, 1) * sizeof(int));
    bt->order_epoch = -1;
}

void batcher_free(Batcher *bt) {
    free(bt->order);
    bt->order = NULL;
}

void batch_epoch_order(int *order, int n, int shuffle, uint64_t seed, int epoch) {
    for (int i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    Rng r;  // Fisher-Yates keyed by (seed, epoch)
    rng_init(&r, seed, 1000u + (uint64_t)epoch);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(&r, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void ensure_order(Batcher *bt, int epoch) {
    if (bt->order_epoch == epoch) return;
    batch_epoch_order(bt->order, bt->rows->n, bt->cfg.shuffle, bt->cfg.seed, epoch);
    bt->order_epoch = epoch;
}

// Position in the epoch's order of row b of this rank's part of micro-batch `index`.
static int order_pos(const Batcher *bt, int index, int b) {
    return (index * bt->cfg.world + bt->cfg.rank) * bt->cfg.B + b;
}

int batcher_T(Batcher *bt, int epoch, int index) {
    if (bt->cfg.fixed_T > 0) return bt->cfg.fixed_T;
    ensure_order(bt, epoch);
    int longest = 1, r0 = bt->cfg.same_T ? 0 : bt->cfg.rank, r1 = bt->cfg.same_T ? bt->cfg.world : r0 + 1;
    for (int b = 0; b < bt->cfg.B * (r1 - r0); b++) {  // this rank's rows, or every rank's
        int k = (index * bt->cfg.world + r0) * bt->cfg.B + b;
        if (k >= bt->rows->n) break;
        int row = bt->order[k];
        longest = MAX(longest, bt->rows->start[row + 1] - bt->rows->start[row]);
    }
    return round_up(longest, bt->cfg.pad_to_multiple_of);
}

void host_batch_init(HostBatch *hb, const Batcher *bt) {
    memset(hb, 0, sizeof *hb);
    size_t n = (size_t)bt->cfg.B * (size_t)bt->Tmax;
    hb->ids = xmalloc(n * sizeof(int32_t));
    hb->pos = xmalloc(n * sizeof(int32_t));
    hb->seg = xmalloc(n * sizeof(int32_t));
    hb->targets = xmalloc(n * sizeof(int32_t));
}

void host_batch_free(HostBatch *hb) {
    free(hb->ids);
    free(hb->pos);
    free(hb->seg);
    free(hb->targets);
    memset(hb, 0, sizeof *hb);
}

void batcher_fill(Batcher *bt, int epoch, int index, HostBatch *hb) {
    int T = batcher_T(bt, epoch, index), B = bt->cfg.B;
    const Rows *r = bt->rows;
    hb->B = B;
    hb->T = T;
    hb->n_targets = hb->n_tokens = hb->n_rows = 0;
    for (int b = 0; b < B; b++) {
        int k = order_pos(bt, index, b), a = 0, len = 0;
        if (k < r->n) {  // rows past the end (last partial batch) stay empty: all padding
            hb->n_rows++;
            a = r->start[bt->order[k]];
            len = MIN(r->start[bt->order[k] + 1] - a, T);
        }
        size_t o = (size_t)b * T;
        for (int t = 0; t < T; t++) {
            int real = t < len;
            hb->ids[o + t] = real ? r->ids[a + t] : 0;
            hb->pos[o + t] = real ? r->pos[a + t] : 0;
            hb->seg[o + t] = real ? r->seg[a + t] : 0;
            hb->targets[o + t] = real ? r->targets[a + t] : IGNORE_INDEX;
            hb->n_targets += real && r->targets[a + t] != IGNORE_INDEX;
        }
        hb->n_tokens += len;
    }
}
