// bans.c: the ids the history-dependent logits processors ban this step (see bans.h).
#include "bans.h"

static void push(int32_t *out, int cap, int *n, int32_t id) {
    if (*n < cap) out[*n] = id;
    (*n)++;
}

static int same(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

void bans_no_repeat_ngram(int32_t *out, int cap, int *n_out, const int32_t *ids, int len, int n) {
    if (n <= 0 || len + 1 < n) return;
    const int32_t *prefix = ids + len - (n - 1);
    for (int s = 0; s + n <= len; s++)
        if (same(ids + s, prefix, n - 1)) push(out, cap, n_out, ids[s + n - 1]);
}

void bans_bad_words(int32_t *out, int cap, int *n_out, const int32_t *ids, int len, const int32_t *words,
                    const int *off, int nwords, const int32_t *eos, int neos) {
    for (int w = 0; w < nwords; w++) {
        const int32_t *word = words + off[w];
        int wl = off[w + 1] - off[w];
        if (wl <= 0) continue;
        if (wl == 1) {
            int is_eos = 0;
            for (int j = 0; j < neos; j++) is_eos |= word[0] == eos[j];
            if (!is_eos) push(out, cap, n_out, word[0]);
            continue;
        }
        if (wl <= len && same(ids + len - (wl - 1), word, wl - 1)) push(out, cap, n_out, word[wl - 1]);
    }
}

void bans_min_tokens(int32_t *out, int cap, int *n_out, int cur_len, int prompt_len, int min_length,
                     int min_new_tokens, const int32_t *eos, int neos) {
    int below = (min_length > 0 && cur_len < min_length) || (min_new_tokens > 0 && cur_len - prompt_len < min_new_tokens);
    if (!below) return;
    for (int j = 0; j < neos; j++) push(out, cap, n_out, eos[j]);
}

void bans_suppress(int32_t *out, int cap, int *n_out, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) push(out, cap, n_out, ids[i]);
}
