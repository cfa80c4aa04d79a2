// eval.c: prompts -> the generation engine -> metrics (reward functions); dataset completions ->
// scoring batches -> cross-entropy.
#include "eval.h"
#include "preflight.h"

#include "../model/lora.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../core/progress.h"
#include "../tokenizer/chat.h"
#include "../model/qwen3.h"
#include "../tokenizer/tokenizer.h"
#include "metrics.h"

#include <math.h>
#include <string.h>

void eval_gen_config_default(GenConfig *g) {
    gen_config_default(g);
    g->do_sample = 0;
}

void eval_result_free(EvalResult *r) {
    for (int k = 0; k < r->n_metrics; k++) free(r->names[k]);
    free(r->names), free(r->values), free(r->counts);
    memset(r, 0, sizeof *r);
}

cJSON *eval_result_json(const EvalResult *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rows", r->rows);
    cJSON *mo = cJSON_AddObjectToObject(o, "metrics");
    for (int k = 0; k < r->n_metrics; k++) {
        if (isnan(r->values[k])) cJSON_AddNullToObject(mo, r->names[k]);
        else cJSON_AddNumberToObject(mo, r->names[k], r->values[k]);
    }
    cJSON *co = cJSON_AddObjectToObject(o, "metric_rows");
    for (int k = 0; k < r->n_metrics; k++) cJSON_AddNumberToObject(co, r->names[k], r->counts[k]);
    if (r->loss_rows > 0) {
        cJSON_AddNumberToObject(o, "loss", r->loss);
        cJSON_AddNumberToObject(o, "perplexity", r->perplexity);
        cJSON_AddNumberToObject(o, "loss_rows", r->loss_rows);
        cJSON_AddNumberToObject(o, "loss_tokens", (double)r->loss_tokens);
    }
    cJSON_AddNumberToObject(o, "generated_tokens", (double)r->generated_tokens);
    cJSON_AddNumberToObject(o, "mean_length", r->mean_length);
    cJSON_AddNumberToObject(o, "generation_seconds", r->gen_seconds);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    return o;
}

// The dataset completion of row i: the messages row's last assistant reply, else a "completion"
// string encoded without special tokens plus EOS (as SFT's prompt-completion rows). NULL: none.
static Status dataset_completion(const PromptRow *pr, const TextCodec *codec, I32Vec *out, int *have, Err *e) {
    *have = 0;
    out->n = 0;
    if (pr->completion) {
        for (int t = 0; t < pr->n_completion; t++) i32vec_push(out, pr->completion[t]);
        *have = pr->n_completion > 0;
        return ST_OK;
    }
    const cJSON *c = pr->row ? cJSON_GetObjectItemCaseSensitive(pr->row, "completion") : NULL;
    if (!cJSON_IsString(c)) return ST_OK;
    TRY(codec->encode(codec->ctx, c->valuestring, strlen(c->valuestring), 0, out, e));
    if (codec->eos_id >= 0) i32vec_push(out, codec->eos_id);
    *have = out->n > 0;
    return ST_OK;
}

// Teacher-forced cross-entropy of the dataset completions, in static batches of B rows (a short
// last batch is filled with copies of its first row whose targets are dropped).
static Status completion_loss(Model *m, const PromptSet *ps, const TextCodec *codec, const GenConfig *gc, EvalResult *r,
                              Err *e) {
    int n = ps->n, nc = 0, C = 1;
    I32Vec *comp = xcalloc((size_t)n, sizeof(I32Vec));
    int *has = xcalloc((size_t)n, sizeof(int)), *rows = xcalloc((size_t)n, sizeof(int));
    Status st = ST_OK;
    for (int i = 0; i < n && st == ST_OK; i++) {
        st = dataset_completion(&ps->rows[i], codec, &comp[i], &has[i], e);
        if (st == ST_OK && has[i]) rows[nc++] = i, C = MAX(C, (int)comp[i].n);
    }
    int B = MAX(1, MIN(gc->batch_size > 0 ? gc->batch_size : 8, nc));
    double L = 0;
    long ntok = 0;
    float *loss = NULL;
    const int32_t **pp = xmalloc((size_t)B * sizeof *pp), **cc = xmalloc((size_t)B * sizeof *cc);  // (B) prompts, completions
    int *pl = xmalloc((size_t)B * sizeof *pl), *cl = xmalloc((size_t)B * sizeof *cl);            // (B) their lengths
    for (int s = 0; st == ST_OK && s < nc; s += B) {
        for (int b = 0; b < B; b++) {
            int i = rows[s + b < nc ? s + b : s];
            pp[b] = ps->rows[i].ids, pl[b] = ps->rows[i].n;
            cc[b] = comp[i].v, cl[b] = (int)comp[i].n;
        }
        ScoreBatch sb = {0};
        st = score_batch_build(&sb, pp, pl, cc, cl, B, C, 0, gc->pad_to_multiple_of, gc->eos, gc->n_eos, e);
        if (st != ST_OK) break;
        for (int b = nc - s; b < B; b++)  // filler rows
            for (int t = 0; t < sb.T; t++) sb.targets[(size_t)b * sb.T + t] = IGNORE_INDEX;
        Plan *p;
        st = plan_get(m, PLAN_SCORE, sb.B, sb.T, &p, e);
        if (st == ST_OK) {
            size_t N = (size_t)sb.B * sb.T;
            loss = xrealloc(loss, N * sizeof(float));
            qwen3_set_inputs(m, p, sb.ids, sb.pos, sb.seg, sb.targets, NULL);
            qwen3_forward(m, p);
            qwen3_ce_loss(m, p, 1.0f, 0);
            m->be->download(m->be, loss, p->row_loss, N * sizeof(float));
            for (size_t k = 0; k < N; k++)
                if (sb.targets[k] != IGNORE_INDEX) L += loss[k], ntok++;
        }
        score_batch_free(&sb);
    }
    free(loss);
    free(pp), free(cc), free(pl), free(cl);
    for (int i = 0; i < n; i++) i32vec_free(&comp[i]);
    free(comp), free(has), free(rows);
    TRY(st);
    r->loss_rows = nc;
    r->loss_tokens = ntok;
    r->loss = ntok ? L / ntok : NAN;
    r->perplexity = ntok ? exp(r->loss) : NAN;
    return ST_OK;
}

static Status write_outputs(const EvalConfig *c, const EvalResult *r, const PromptSet *ps, GenSeq *seqs, int nseq,
                            char **texts, const double *scores, Err *e) {
    TRY(dir_create(c->output_dir, e));
    StrBuf sb = {0};
    for (int i = 0; i < nseq; i++) {
        const PromptRow *pr = &ps->rows[seqs[i].prompt_index];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "prompt_index", seqs[i].prompt_index);
        cJSON_AddNumberToObject(o, "sequence_index", seqs[i].seq_index);
        cJSON_AddStringToObject(o, "prompt", pr->text ? pr->text : "");
        cJSON_AddStringToObject(o, "completion", texts[i]);
        cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
        for (int t = 0; t < seqs[i].n; t++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(seqs[i].ids[t]));
        cJSON_AddStringToObject(o, "finish_reason", gen_finish_name(seqs[i].finish));
        cJSON *mo = cJSON_AddObjectToObject(o, "metrics");
        for (int k = 0; k < r->n_metrics; k++) {
            double v = scores[(size_t)i * r->n_metrics + k];
            if (isnan(v)) cJSON_AddNullToObject(mo, r->names[k]);
            else cJSON_AddNumberToObject(mo, r->names[k], v);
        }
        char *s = cJSON_PrintUnformatted(o);
        sb_puts(&sb, s);
        sb_putc(&sb, '\n');
        free(s);
        cJSON_Delete(o);
    }
    char *gp = path_join(c->output_dir, "generations.jsonl"), *jp = path_join(c->output_dir, "eval.json");
    Status st = file_write_atomic(gp, sb.data ? sb.data : "", sb.len, e);
    if (st == ST_OK) {
        cJSON *o = eval_result_json(r);
        char *s = cJSON_Print(o);
        st = file_write_atomic(jp, s, strlen(s), e);
        free(s);
        cJSON_Delete(o);
    }
    free(gp), free(jp);
    sb_free(&sb);
    return st;
}

Status eval_model(Model *m, ModelCodec *codec, const char *model_dir, const EvalConfig *c, EvalResult *r, Err *e) {
    memset(r, 0, sizeof *r);
    double t0 = metrics_now();
    GenConfig gc = c->gen;
    if (model_dir) TRY(gen_config_load(&gc, model_dir, &m->cfg, e));
    // gen_config_load re-applies the model's decoding settings: keep the caller's
    gc.do_sample = c->gen.do_sample, gc.temperature = c->gen.temperature, gc.top_k = c->gen.top_k;
    gc.top_p = c->gen.top_p, gc.min_p = c->gen.min_p, gc.repetition_penalty = c->gen.repetition_penalty;
    gc.max_new_tokens = c->gen.max_new_tokens, gc.max_length = 0, gc.min_new_tokens = c->gen.min_new_tokens;
    gc.no_repeat_ngram_size = c->gen.no_repeat_ngram_size;
    for (int k = 0; k < c->gen.n_eos; k++) TRY(gen_config_add_eos(&gc, c->gen.eos[k], e));
    int32_t teos = tokenizer_eos_id(codec->tok);
    if (teos >= 0) TRY(gen_config_add_eos(&gc, teos, e));
    if (gc.pad_token_id < 0) gc.pad_token_id = tokenizer_pad_id(codec->tok);
    TRY(gen_config_check(&gc, m->cfg.vocab_size, e));
    cJSON *kwargs = NULL;
    TRY(chat_kwargs_parse(c->chat_template_kwargs, &kwargs, e));
    PromptConfig pc = {.chat_template_kwargs = kwargs, .max_prompt_length = c->max_prompt_length,
                       .skip_bad_rows = c->skip_bad_rows, .vocab_size = m->cfg.vocab_size};
    PromptSet ps = {0};
    RewardSet rs = {0};
    Status st = prompts_load(c->dataset, &pc, &codec->codec, &ps, e);
    if (st == ST_OK && ps.n == 0) st = err_set(e, ST_EINVAL, "%s: no prompts", c->dataset);
    if (st == ST_OK && c->n_metrics > 0)
        st = rewards_init(&rs, c->metrics, c->n_metrics, NULL, 0, c->reward_timeout, e);
    if (st == ST_OK && c->n_metrics > 0) st = prompts_check_rewards(&ps, &rs, c->dataset, e);
    if (st == ST_OK && c->n_metrics > 0) {  // model: metrics run on the evaluated model's backend
        rs.chat_template_kwargs = kwargs;
        rs.model_pad_to_multiple_of = gc.pad_to_multiple_of;
        st = rewards_load_models(&rs, m->be, -1, e);
    }
    GenSeq *seqs = NULL;
    int nseq = 0;
    char **texts = NULL;
    RewardInput *in = NULL;
    double *scores = NULL;
    if (st == ST_OK) {
        const int32_t **pp = xmalloc((size_t)ps.n * sizeof(int32_t *));
        int *pl = xmalloc((size_t)ps.n * sizeof(int));
        for (int i = 0; i < ps.n; i++) pp[i] = ps.rows[i].ids, pl[i] = ps.rows[i].n;
        GenStats gs;
        double tg = metrics_now();
        Progress pr;  // a bar (or a line every 10 s) while the rows generate
        progress_begin(&pr, "eval", "rows", 0);
        gc.on_progress = progress_gen_rows, gc.progress_user = &pr;
        st = gen_generate(m, &gc, pp, pl, ps.n, &seqs, &gs, e);
        progress_end(&pr, ps.n * MAX(1, gc.num_return_sequences), ps.n * MAX(1, gc.num_return_sequences), NULL);
        r->gen_seconds = metrics_now() - tg;
        nseq = ps.n * MAX(1, gc.num_return_sequences);
        free(pp), free(pl);
    }
    r->rows = ps.n;
    r->n_metrics = c->n_metrics;
    r->names = xcalloc((size_t)MAX(1, c->n_metrics), sizeof(char *));
    r->values = xcalloc((size_t)MAX(1, c->n_metrics), sizeof(double));
    r->counts = xcalloc((size_t)MAX(1, c->n_metrics), sizeof(int));
    for (int k = 0; k < c->n_metrics; k++) r->names[k] = xstrdup(c->metrics[k]), r->values[k] = NAN;
    if (st == ST_OK) {
        texts = xcalloc((size_t)nseq, sizeof(char *));
        in = xcalloc((size_t)nseq, sizeof(RewardInput));
        scores = xcalloc((size_t)nseq * MAX(1, c->n_metrics), sizeof(double));
        for (int i = 0; i < nseq; i++) {
            const PromptRow *pr = &ps.rows[seqs[i].prompt_index];
            texts[i] = tokenizer_decode(codec->tok, seqs[i].ids, (size_t)seqs[i].n, 1);
            in[i] = (RewardInput){.prompt = pr->text, .completion = texts[i], .ids = seqs[i].ids, .n_ids = seqs[i].n,
                                  .row = pr->row};
            r->generated_tokens += seqs[i].n;
        }
        r->mean_length = nseq ? (double)r->generated_tokens / nseq : 0;
        if (c->n_metrics > 0) st = rewards_score(&rs, in, nseq, scores, e);
    }
    for (int k = 0; st == ST_OK && k < c->n_metrics; k++) {
        double s = 0;
        int cnt = 0;
        for (int i = 0; i < nseq; i++) {
            double v = scores[(size_t)i * c->n_metrics + k];
            if (!isnan(v)) s += v, cnt++;
        }
        r->counts[k] = cnt;
        r->values[k] = cnt ? s / cnt : NAN;
    }
    r->loss = r->perplexity = NAN;
    if (st == ST_OK && c->loss) st = completion_loss(m, &ps, &codec->codec, &gc, r, e);
    r->seconds = metrics_now() - t0;
    if (st == ST_OK && c->output_dir) st = write_outputs(c, r, &ps, seqs, nseq, texts, scores, e);
    for (int i = 0; texts && i < nseq; i++) free(texts[i]);
    free(texts), free(in), free(scores);
    if (seqs) gen_seqs_free(seqs, nseq);
    if (rs.fns) rewards_free(&rs);
    prompts_free(&ps);
    cJSON_Delete(kwargs);
    return st;
}

Status eval_run(const char *model_dir, const char *backend, int threads, int dtype, const EvalConfig *c,
                EvalResult *r, Err *e) {
    memset(r, 0, sizeof *r);
    Backend *be = NULL;
    Model *m = NULL;
    ModelCodec mc = {0};
    Status st = model_codec_load(&mc, model_dir, NULL, e);
    int have_codec = st == ST_OK;
    // the output directory, the prompts and the metric specs, before the model loads
    if (st == ST_OK) st = preflight_output_dir(c->output_dir, e);
    cJSON *kwargs = NULL;
    if (st == ST_OK) st = chat_kwargs_parse(c->chat_template_kwargs, &kwargs, e);
    PromptConfig pc = {.chat_template_kwargs = kwargs, .max_prompt_length = c->max_prompt_length,
                       .skip_bad_rows = c->skip_bad_rows};
    if (st == ST_OK) st = preflight_prompts(c->dataset, &pc, model_dir, e);
    cJSON_Delete(kwargs);
    if (st == ST_OK) st = preflight_rewards(c->metrics, c->n_metrics, NULL, 0, c->reward_timeout, e);
    if (st == ST_OK) st = backend_create(backend, threads, &be, e);
    if (st == ST_OK) st = model_load_frozen(model_dir, be, dtype, &m, e);
    if (st == ST_OK && c->adapter) st = lora_load(m, c->adapter, e);
    if (st == ST_OK) st = eval_model(m, &mc, model_dir, c, r, e);
    model_free(m);
    if (be) backend_destroy(be);
    if (have_codec) model_codec_free(&mc);
    return st;
}
