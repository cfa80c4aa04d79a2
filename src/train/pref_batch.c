// pref_batch.c: prompt + completion rows as one static-shape batch, scored by logprob_head.
#include "pref_batch.h"

#include "../core/alloc.h"
#include "../core/log.h"
#include "../model/qwen3.h"

#include <string.h>

void seq_rows_init(SeqRows *s, int R, int Tcap) {
    memset(s, 0, sizeof *s);
    s->R = R, s->Tcap = Tcap;
    size_t n = (size_t)R * Tcap;
    s->ids = xcalloc(n, sizeof(int32_t));
    s->pos = xcalloc(n, sizeof(int32_t));
    s->seg = xcalloc(n, sizeof(int32_t));
    s->targets = xcalloc(n, sizeof(int32_t));
    s->tokw = xcalloc(n, sizeof(float));
    s->len = xcalloc((size_t)R, sizeof(int));
    s->tlen = xcalloc((size_t)R, sizeof(int));
    s->full = xcalloc((size_t)R, sizeof(int));
}

void seq_rows_free(SeqRows *s) {
    free(s->ids), free(s->pos), free(s->seg), free(s->targets), free(s->tokw), free(s->len), free(s->tlen);
    free(s->full);
    memset(s, 0, sizeof *s);
}

int seq_row_tokens(int np, int nc, int max_length) { return max_length > 0 ? MIN(np + nc, max_length) : np + nc; }

void seq_rows_reset(SeqRows *s) {
    memset(s->full, 0, (size_t)s->R * sizeof(int));
    memset(s->len, 0, (size_t)s->R * sizeof(int));
    s->T = 0;
}

// Rows are staged at stride Tcap (ids and a completion flag in seg) until seq_rows_finish fixes T.
void seq_rows_set(SeqRows *s, int r, const int32_t *prompt, int np, const int32_t *comp, int nc, int max_length,
                  int keep_end) {
    int n = seq_row_tokens(np, nc, max_length), skip = keep_end ? np + nc - n : 0;
    CHECK_MSG(r >= 0 && r < s->R && n <= s->Tcap, "seq_rows_set: row %d of %d tokens (capacity %d x %d)", r, n, s->R,
              s->Tcap);
    int32_t *ids = s->ids + (size_t)r * s->Tcap, *flag = s->seg + (size_t)r * s->Tcap;
    int len = 0;
    for (int k = 0; k < n; k++) {
        int j = skip + k, is_comp = j >= np;
        ids[k] = is_comp ? comp[j - np] : prompt[j];
        flag[k] = is_comp;
        len += is_comp;
    }
    s->full[r] = n, s->len[r] = len;
}

void seq_rows_finish(SeqRows *s, int pad_to_multiple_of) {
    int longest = MAX(1, s->T_min);
    for (int r = 0; r < s->R; r++) longest = MAX(longest, s->full[r]);
    int m = MAX(1, pad_to_multiple_of), T = (longest + m - 1) / m * m;
    CHECK_MSG(T <= s->Tcap, "seq_rows_finish: T %d beyond the capacity %d", T, s->Tcap);
    s->T = T;
    s->n_tokens = 0;
    // re-lay from stride Tcap to stride T, last row first would overlap: go forward (T <= Tcap)
    for (int r = 0; r < s->R; r++) {
        int n = s->full[r];
        const int32_t *ids = s->ids + (size_t)r * s->Tcap, *flag = s->seg + (size_t)r * s->Tcap;
        int32_t *oid = s->ids + (size_t)r * T, *pos = s->pos + (size_t)r * T, *seg = s->seg + (size_t)r * T;
        int32_t *tg = s->targets + (size_t)r * T;
        float *w = s->tokw + (size_t)r * T;
        int tl = 0;
        for (int t = 0; t < T; t++) {  // the target of t needs flag[t + 1]: read it before seg[t] is written
            int real = t < n;
            int next_comp = t + 1 < n && flag[t + 1];
            int32_t next_id = t + 1 < n ? ids[t + 1] : 0, id = real ? ids[t] : 0;
            oid[t] = id;
            pos[t] = real ? t : 0;
            seg[t] = real;
            tg[t] = next_comp ? next_id : IGNORE_INDEX;
            w[t] = next_comp ? 1.0f : 0.0f;
            tl += next_comp;
        }
        s->tlen[r] = tl;
        s->n_tokens += n;
    }
}

void seq_scorer_init(SeqScorer *sc, Backend *be, int R, int Tcap) {
    memset(sc, 0, sizeof *sc);
    sc->be = be, sc->R = R, sc->Tcap = Tcap;
    size_t n = (size_t)R * Tcap;
    sc->d_logp = be->alloc(be, n * sizeof(float));
    sc->d_stats = be->alloc(be, n * LOGPROB_STATS * sizeof(float));
    sc->d_coef = be->alloc(be, n * sizeof(float));
    sc->logp = xcalloc(n, sizeof(float));
    sc->entropy = xcalloc(n, sizeof(float));
    sc->stats = xcalloc(n * LOGPROB_STATS, sizeof(float));
    sc->coef = xcalloc(n, sizeof(float));
}

void seq_scorer_free(SeqScorer *sc) {
    if (sc->be) {
        sc->be->free(sc->be, sc->d_logp);
        sc->be->free(sc->be, sc->d_stats);
        sc->be->free(sc->be, sc->d_coef);
    }
    free(sc->logp), free(sc->entropy), free(sc->stats), free(sc->coef);
    memset(sc, 0, sizeof *sc);
}

Status seq_score(SeqScorer *sc, Model *m, PlanMode mode, const SeqRows *s, int stats, Plan **plan, Err *e) {
    Backend *be = m->be;
    CHECK(s->R == sc->R && s->T <= sc->Tcap && be == sc->be);
    Plan *p;
    int before = m->plans.n;
    TRY(plan_get(m, mode, s->R, s->T, &p, e));
    if (m->plans.n > before)
        log_info("plan %d built: %s B=%d T=%d, %.1f MiB", m->plans.n, mode == PLAN_TRAIN ? "train" : "score", s->R, s->T,
                 p->bytes / 1048576.0);
    size_t N = (size_t)s->R * s->T;
    qwen3_set_inputs(m, p, s->ids, s->pos, s->seg, s->targets, NULL);
    qwen3_forward(m, p);
    qwen3_logprob_stats(m, p, 1.0f, NULL, sc->d_logp, stats ? sc->d_stats : NULL);
    be->download(be, sc->logp, sc->d_logp, N * sizeof(float));
    if (stats) {
        be->download(be, sc->entropy, p->row_entropy, N * sizeof(float));
        be->download(be, sc->stats, sc->d_stats, N * LOGPROB_STATS * sizeof(float));
    }
    if (plan) *plan = p;
    return ST_OK;
}

void seq_sums(const SeqScorer *sc, const SeqRows *s, double *out) {
    for (int r = 0; r < s->R; r++) {
        double acc = 0;
        const float *lp = sc->logp + (size_t)r * s->T, *w = s->tokw + (size_t)r * s->T;
        for (int t = 0; t < s->T; t++) acc += (double)w[t] * lp[t];
        out[r] = acc;
    }
}

void seq_backward(SeqScorer *sc, Model *m, Plan *p, const SeqRows *s) {
    Backend *be = m->be;
    size_t N = (size_t)s->R * s->T;
    be->upload(be, sc->d_coef, sc->coef, N * sizeof(float));
    qwen3_logprob(m, p, 1.0f, sc->d_coef, sc->d_logp);
}
