// test_sampler_hf.c: every logits processor against HF's, re-written literally in PyTorch
// (scripts/ref_sampler.py -> tests/data/sampler/processors.json). The host-side ban lists
// (gen/bans.h) and the device ops (ref and cpu) together must give HF's processed scores bit for
// bit, and HF's argmax for greedy rows.
#include "backend/backend.h"
#include "core/json.h"
#include "gen/bans.h"
#include "test.h"

#include <stdint.h>

#define FIXTURE "tests/data/sampler/processors.json"
#define KMAX 256

static Backend be_ref, be_cpu;
static cJSON *doc;

static double num(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key)->valuedouble; }

static int int_list(const cJSON *arr, int32_t *out, int cap) {
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (n < cap) out[n] = (int32_t)it->valuedouble;
        n++;
    }
    return n;
}

// Runs one fixture case on a backend; returns the number of mismatching scores (+ ids).
static int run_case(Backend *be, const cJSON *c, char *why, size_t why_len) {
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(c, "config");
    const cJSON *ids_j = cJSON_GetObjectItemCaseSensitive(c, "input_ids");
    const cJSON *sc_j = cJSON_GetObjectItemCaseSensitive(c, "scores");
    const cJSON *ex_j = cJSON_GetObjectItemCaseSensitive(c, "expected");
    const cJSON *greedy_j = cJSON_GetObjectItemCaseSensitive(c, "greedy_ids");
    int V = (int)num(c, "V"), prompt_len = (int)num(c, "prompt_len");
    int B = cJSON_GetArraySize(ids_j), L = cJSON_GetArraySize(cJSON_GetArrayItem(ids_j, 0));

    int32_t eos[16], words[256];
    int off[33] = {0}, nwords = 0;
    int neos = int_list(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id"), eos, 16);
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(cfg, "bad_words_ids")) {
        off[nwords + 1] = off[nwords] + int_list(w, words + off[nwords], 256 - off[nwords]);
        nwords++;
    }
    int ngram = (int)num(cfg, "no_repeat_ngram_size"), min_len = (int)num(cfg, "min_length");
    int min_new = (int)num(cfg, "min_new_tokens");

    SampleParams *params = calloc(B, sizeof *params);
    int32_t *hist = malloc((size_t)B * L * 4), *banned = malloc((size_t)B * KMAX * 4), *ids = malloc(B * 4);
    float *logits = malloc((size_t)B * V * 4), *scores = malloc((size_t)B * V * 4);
    uint8_t *seen = calloc((size_t)B * V, 1);
    double *u = malloc(B * 8);
    int bad = 0;
    for (int b = 0; b < B; b++) {
        params[b] = (SampleParams){
            .temperature = (float)num(cfg, "temperature"),
            .repetition_penalty = (float)num(cfg, "repetition_penalty"),
            .min_p = (float)num(cfg, "min_p"),
            .top_k = (int32_t)num(cfg, "top_k"),
            .top_p = num(cfg, "top_p"),
            .do_sample = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "do_sample")),
        };
        u[b] = 0.5;
        int_list(cJSON_GetArrayItem(ids_j, b), hist + (size_t)b * L, L);
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetArrayItem(sc_j, b)) logits[(size_t)b * V + i++] = (float)v->valuedouble;
        // the host's share: ban lists from the history
        int32_t *ban = banned + (size_t)b * KMAX;
        const int32_t *h = hist + (size_t)b * L;
        int n = 0;
        bans_no_repeat_ngram(ban, KMAX, &n, h, L, ngram);
        bans_bad_words(ban, KMAX, &n, h, L, words, off, nwords, eos, neos);
        bans_min_tokens(ban, KMAX, &n, L, prompt_len, min_len, min_new, eos, neos);
        CHECK(n <= KMAX);
        for (; n < KMAX; n++) ban[n] = -1;
    }
    be->sample_seen_update(be, seen, hist, B, L, V);
    be->sample_logits(be, ids, NULL, NULL, scores, logits, params, u, seen, banned, KMAX, B, V);

    for (int b = 0; b < B; b++) {
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetArrayItem(ex_j, b)) {
            float want = cJSON_IsNull(v) ? -INFINITY : (float)v->valuedouble, got = scores[(size_t)b * V + i];
            if (memcmp(&want, &got, 4) != 0) {
                if (!bad) snprintf(why, why_len, "row %d token %d: %.9g, HF %.9g", b, i, got, want);
                bad++;
            }
            i++;
        }
        if (greedy_j && ids[b] != (int32_t)cJSON_GetArrayItem(greedy_j, b)->valuedouble) {
            if (!bad) snprintf(why, why_len, "row %d: greedy id %d, HF %d", b, ids[b], cJSON_GetArrayItem(greedy_j, b)->valueint);
            bad++;
        }
        if (!greedy_j && scores[(size_t)b * V + ids[b]] == -INFINITY) {
            if (!bad) snprintf(why, why_len, "row %d: drew removed token %d", b, ids[b]);
            bad++;
        }
    }
    free(params), free(hist), free(banned), free(ids), free(logits), free(scores), free(seen), free(u);
    return bad;
}

static void check_backend(Backend *be) {
    const cJSON *c;
    int ncases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(doc, "cases")) {
        char why[256] = "";
        int bad = run_case(be, c, why, sizeof why);
        EXPECT_MSG(bad == 0, "%s case %s: %d mismatches; first: %s", be->name,
                   cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring, bad, why);
        ncases++;
    }
    EXPECT_MSG(ncases >= 20, "fixture has %d cases", ncases);
}

static void test_hf_processors_ref(void) { check_backend(&be_ref); }
static void test_hf_processors_cpu(void) { check_backend(&be_cpu); }

// The host helpers on hand-made histories (the fixture covers them through the ops too).
static void test_bans_by_hand(void) {
    int32_t out[8];
    int n = 0;
    const int32_t h[7] = {1, 2, 3, 1, 2, 4, 1};
    bans_no_repeat_ngram(out, 8, &n, h, 7, 2);  // prefix (1): 1->2 twice
    EXPECT(n == 2 && out[0] == 2 && out[1] == 2);
    n = 0;
    bans_no_repeat_ngram(out, 1, &n, h, 7, 1);  // every id, counted past cap
    EXPECT(n == 7 && out[0] == 1);
    n = 0;
    const int32_t words[6] = {9, 7, 2, 4, 1, 5};  // [9] [7]=eos [2,4,1,5]
    const int off[4] = {0, 1, 2, 6};
    const int32_t eos[1] = {7};
    bans_bad_words(out, 8, &n, h + 2, 5, words, off, 3, eos, 1);  // tail ... 2 4 1 completes [2,4,1,5]
    EXPECT(n == 2 && out[0] == 9 && out[1] == 5);
    n = 0;
    bans_min_tokens(out, 8, &n, 10, 8, 0, 3, eos, 1);
    EXPECT(n == 1 && out[0] == 7);
    n = 0;
    bans_min_tokens(out, 8, &n, 11, 8, 11, 3, eos, 1);
    EXPECT(n == 0);
}

int main(void) {
    be_ref.name = "ref", be_cpu.name = "cpu";
    backend_ref_install_sampling(&be_ref);
    backend_cpu_install_sampling(&be_cpu);
    RUN(test_bans_by_hand);
    Err e = {0};
    if (json_parse_file(FIXTURE, &doc, &e) != ST_OK) {
        printf("FAIL fixture: %s\n", e.msg);
        return 1;
    }
    RUN(test_hf_processors_ref);
    RUN(test_hf_processors_cpu);
    cJSON_Delete(doc);
    TEST_MAIN_END();
}
