// gen_text.c: streaming detokenisation, stop strings and reasoning splits (see gen_text.h).
#include "gen_text.h"

#include <string.h>

void gen_text_init(GenText *g, const Tokenizer *tok, int n_prompts, int nrs, char *const *stops, int n_stops) {
    memset(g, 0, sizeof *g);
    g->tok = tok;
    g->nrs = nrs;
    g->n_rows = n_prompts * nrs;
    g->rows = xcalloc((size_t)g->n_rows, sizeof(GenTextRow));
    if (tok)
        for (int r = 0; r < g->n_rows; r++) tokenizer_stream_init(&g->rows[r].ts, tok, 1);
    g->n_stops = n_stops;
    g->stops = n_stops ? xcalloc((size_t)n_stops, sizeof(char *)) : NULL;
    for (int i = 0; i < n_stops; i++) {
        g->stops[i] = xstrdup(stops[i]);
        if (strlen(stops[i]) > g->max_stop) g->max_stop = strlen(stops[i]);
    }
}

void gen_text_free(GenText *g) {
    for (int r = 0; r < g->n_rows; r++) {
        if (g->tok) tokenizer_stream_free(&g->rows[r].ts);
        sb_free(&g->rows[r].text);
    }
    free(g->rows);
    for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
    free(g->stops);
    memset(g, 0, sizeof *g);
}

int gen_text_on_token(void *user, int prompt_index, int seq_index, int32_t id, float logprob) {
    GenText *g = user;
    if (!g->tok) return 0;
    GenTextRow *row = &g->rows[prompt_index * g->nrs + seq_index];
    char *piece = tokenizer_stream_step(&row->ts, id);
    size_t old = row->text.len, add = strlen(piece);
    if (add) {
        sb_append(&row->text, piece, add);
        if (g->sink) g->sink(g->sink_user, prompt_index, seq_index, piece);
    }
    free(piece);
    if (!add || !g->n_stops) return 0;
    // only a match that ends inside the new piece is new
    size_t from = old > g->max_stop ? old - g->max_stop + 1 : 0;
    const char *hay = row->text.data + from;
    size_t hay_len = row->text.len - from;
    for (int i = 0; i < g->n_stops; i++) {
        size_t sl = strlen(g->stops[i]);
        if (sl && memmem(hay, hay_len, g->stops[i], sl)) return 1;
    }
    return 0;
}

const char *gen_text_get(const GenText *g, int prompt_index, int seq_index) {
    const GenTextRow *row = &g->rows[prompt_index * g->nrs + seq_index];
    return row->text.data ? row->text.data : "";
}

// Strip leading and trailing newlines in place.
static char *strip_newlines(char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && s[a] == '\n') a++;
    while (n > a && s[n - 1] == '\n') n--;
    memmove(s, s + a, n - a);
    s[n - a] = 0;
    return s;
}

int gen_split_reasoning(const Tokenizer *tok, const int32_t *ids, int n, char **reasoning, char **content) {
    int32_t end = tokenizer_token_to_id(tok, "</think>"), start = tokenizer_token_to_id(tok, "<think>");
    if (end < 0) return 0;
    int cut = -1;
    for (int i = n - 1; i >= 0 && cut < 0; i--)
        if (ids[i] == end) cut = i;
    if (cut < 0) {
        *reasoning = xstrdup("");
        *content = strip_newlines(tokenizer_decode(tok, ids, (size_t)n, 1));
        return 1;
    }
    // the reasoning ids without the markers
    int32_t *r = xmalloc((size_t)(cut + 1) * sizeof(int32_t));
    int nr = 0;
    for (int i = 0; i < cut; i++)
        if (ids[i] != start && ids[i] != end) r[nr++] = ids[i];
    *reasoning = strip_newlines(tokenizer_decode(tok, r, (size_t)nr, 1));
    *content = strip_newlines(tokenizer_decode(tok, ids + cut + 1, (size_t)(n - cut - 1), 1));
    free(r);
    return 1;
}
