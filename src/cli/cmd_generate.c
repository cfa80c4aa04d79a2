// cmd_generate.c: still generate and still chat — flags to a GenConfig, prompts to ids (tokenizer,
// chat template), gen_generate, and text / ids / generations.jsonl out. The engine is
// src/gen/generate.h; nothing here decides a token.
#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/json.h"
#include "../core/log.h"
#include "../gen/gen_text.h"
#include "../gen/generate.h"
#include "../core/interrupt.h"
#include "../core/progress.h"
#include "../model/gguf.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/tokenizer.h"
#include "../train/tp.h"
#include "cli_common.h"
#include "commands.h"
#include "line_input.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Flags shared by both commands: model, decoding, static shapes.
#define GEN_COMMON_FLAGS                                                                                               \
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},                             \
    CLI_ADAPTER_FLAG,                                                                                                  \
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},                                      \
    {"system", ARG_STR, NULL, "system message (chat template)"},                                                       \
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra template variables, e.g. {\"enable_thinking\": false}"}, \
    {"chat_template_name", ARG_STR, NULL, "which named template of tokenizer_config.json (default: \"default\")"},     \
    {"max_new_tokens", ARG_INT, "256", "tokens to generate at most per sequence (generation_config.json's max_new_tokens or max_length wins over the default; the flag over both)", "[1,inf)"}, \
    {"min_new_tokens", ARG_INT, "0", "EOS is banned until this many tokens exist (replaces min_length)", "[0,inf)"},             \
    {"min_length", ARG_INT, NULL, "EOS is banned while prompt + generated tokens are fewer (default: generation_config.json's, else 0)", "[0,inf)"}, \
    {"do_sample", ARG_BOOL, NULL, "sample (true) or greedy argmax (false); default from generation_config.json"},      \
    {"temperature", ARG_FLOAT, NULL, "softmax temperature when sampling (generation_config.json, else 1)", "[0,inf)"},            \
    {"top_k", ARG_INT, NULL, "keep the k most likely tokens, ties kept (0 = off; default 50 or generation_config.json)", "[0,inf)"}, \
    {"top_p", ARG_FLOAT, NULL, "nucleus: smallest set with this much probability (1 = off)", "(0,1]"},                          \
    {"min_p", ARG_FLOAT, NULL, "drop tokens below min_p times the top probability (0 = off)", "[0,1]"},                         \
    {"repetition_penalty", ARG_FLOAT, NULL, "CTRL repetition penalty on every seen id (1 = off)", "(0,inf)"},                     \
    {"no_repeat_ngram_size", ARG_INT, NULL, "never repeat an n-gram of this size (0 = off)", "[0,inf)"},                          \
    {"bad_words_ids", ARG_STR, NULL, "JSON list of id lists that must not be generated, e.g. [[12],[7,8]]"},           \
    {"eos_token_id", ARG_LIST, NULL, "EOS id (repeatable); replaces generation_config.json's list"},                  \
    {"ignore_eos", ARG_BOOL, "false", "keep generating after EOS until max_new_tokens"},                               \
    {"stop_strings", ARG_LIST, NULL, "stop a sequence once its text contains this string (repeatable)"},               \
    {"batch_size", ARG_INT, "8", "sequences decoded together (static batch; the last batch is filled)", "[1,inf)"},              \
    {"pad_to_multiple_of", ARG_INT, "0", "left-pad prompts to a multiple of this: one prefill shape (0 = the backend's prefill buckets, 1 = exact lengths)", "[0,inf)"}, \
    {"prefill_chunk_size", ARG_INT, "512", "prompt slots per prefill step, the largest bucket (a multiple of pad_to_multiple_of)", "[1,inf)"}, \
    {"max_cache_len", ARG_INT, NULL, "KV cache slots per sequence (default: padded prompt + max_new_tokens, rounded up to 128)", "[0,inf)"}, \
    {"max_plans", ARG_INT, "0", "fail when a run needs more than this many plans (0 = no limit)", "[0,inf)"},    \
    CLI_MOE_FLAG

static const ArgSpec generate_specs[] = {
    GEN_COMMON_FLAGS,
    {"prompt", ARG_STR, NULL, "prompt text"},
    {"prompts", ARG_STR, NULL, "JSONL file: one {\"prompt\": text or [messages]} per line -> generations.jsonl"},
    {"ids", ARG_STR, NULL, "prompt token ids, space-separated (no tokenizer needed)"},
    {"chat", ARG_BOOL, "false", "wrap text prompts in the chat template as a user message"},
    {"num_return_sequences", ARG_INT, "1", "sequences per prompt", "[1,inf)"},
    {"print_ids", ARG_BOOL, "false", "print the generated ids, space-separated, as the last stdout line"},
    {"output_dir", ARG_STR, NULL, "write generations.jsonl here (with --prompts; default: stdout)"},
    {"tp_size", ARG_INT, NULL, "tensor-parallel ranks: mpirun -np T, the model split over them (default $TP_SIZE or 1)",
     "[1,4096]"},
    {"ddp_timeout", ARG_FLOAT, "1800", "seconds any collective may take before the run fails (--tp_size)", "(0,inf)"},
    {NULL, 0, NULL, NULL},
};

static const ArgSpec chat_specs[] = {
    GEN_COMMON_FLAGS,
    {"hide_thinking", ARG_BOOL, "false", "do not print the <think>...</think> part of replies"},
    {"keep_cache", ARG_BOOL, "true", "keep the conversation's KV cache between turns (false: prefill it all every turn)"},
    {NULL, 0, NULL, NULL},
};

// Everything a generate / chat run holds.
typedef struct Session {
    Backend *be;
    Model *m;
    char *dir;
    Tokenizer *tok;        // NULL when the model has no tokenizer.json and none is needed
    ChatTemplate *tmpl;    // loaded on first use
    cJSON *tmpl_kwargs;    // --chat_template_kwargs
    GenConfig cfg;
    int32_t *bad_words;
    int *bad_off;
    char **stops;
    int n_stops;
} Session;

static void session_free(Session *s) {
    chat_template_free(s->tmpl);
    cJSON_Delete(s->tmpl_kwargs);
    tokenizer_free(s->tok);
    model_free(s->m);
    backend_destroy(s->be);
    free(s->dir);
    free(s->bad_words);
    free(s->bad_off);
}

static Status parse_bad_words(Session *s, const char *text, Err *e) {
    cJSON *j = NULL;
    TRY(json_parse_text(text, strlen(text), "--bad_words_ids", &j, e));
    Status st = ST_OK;
    int nw = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : -1, total = 0;
    if (nw < 0) st = err_set(e, ST_EINVAL, "--bad_words_ids: expected a JSON list of id lists, e.g. [[12],[7,8]]");
    const cJSON *w;
    if (st == ST_OK) cJSON_ArrayForEach(w, j) {
            if (!cJSON_IsArray(w) || cJSON_GetArraySize(w) == 0) {
                st = err_set(e, ST_EINVAL, "--bad_words_ids: every entry must be a non-empty list of ids");
                break;
            }
            total += cJSON_GetArraySize(w);
        }
    if (st == ST_OK) {
        s->bad_words = xmalloc((size_t)MAX(total, 1) * sizeof(int32_t));
        s->bad_off = xmalloc((size_t)(nw + 1) * sizeof(int));
        int k = 0, i = 0;
        s->bad_off[0] = 0;
        cJSON_ArrayForEach(w, j) {
            const cJSON *id;
            cJSON_ArrayForEach(id, w) {
                if (!cJSON_IsNumber(id)) {
                    st = err_set(e, ST_EINVAL, "--bad_words_ids: word %d holds a non-integer", i);
                    break;
                }
                s->bad_words[k++] = (int32_t)id->valuedouble;
            }
            s->bad_off[++i] = k;
        }
        s->cfg.bad_words = s->bad_words;
        s->cfg.bad_words_off = s->bad_off;
        s->cfg.n_bad_words = nw;
    }
    cJSON_Delete(j);
    return st;
}

// Defaults < generation_config.json < flags.
static Status build_config(Session *s, const Args *a, Err *e) {
    GenConfig *c = &s->cfg;
    gen_config_default(c);
    TRY(gen_config_load(c, s->dir, &s->m->cfg, e));
    if (s->tok) TRY(gen_config_add_eos(c, tokenizer_eos_id(s->tok), e));
    if (c->pad_token_id < 0 && s->tok) c->pad_token_id = tokenizer_pad_id(s->tok);
    if (args_is_set(a, "max_new_tokens")) c->max_new_tokens = (int)args_int(a, "max_new_tokens"), c->max_length = 0;
    if (args_is_set(a, "min_new_tokens")) c->min_new_tokens = (int)args_int(a, "min_new_tokens");
    if (args_is_set(a, "min_length")) c->min_length = (int)args_int(a, "min_length");
    if (args_is_set(a, "do_sample")) c->do_sample = args_bool(a, "do_sample");
    if (args_is_set(a, "temperature")) c->temperature = (float)args_float(a, "temperature");
    if (args_is_set(a, "top_k")) c->top_k = (int)args_int(a, "top_k");
    if (args_is_set(a, "top_p")) c->top_p = args_float(a, "top_p");
    if (args_is_set(a, "min_p")) c->min_p = (float)args_float(a, "min_p");
    if (args_is_set(a, "repetition_penalty")) c->repetition_penalty = (float)args_float(a, "repetition_penalty");
    if (args_is_set(a, "no_repeat_ngram_size")) c->no_repeat_ngram_size = (int)args_int(a, "no_repeat_ngram_size");
    if (args_is_set(a, "eos_token_id")) {
        char **v;
        int n = args_list(a, "eos_token_id", &v);
        c->n_eos = 0;
        for (int i = 0; i < n; i++) {
            int32_t *ids;
            int k;
            TRY(cli_parse_ids(v[i], "--eos_token_id", s->m->cfg.vocab_size, &ids, &k, e));
            for (int j = 0; j < k; j++) TRY(gen_config_add_eos(c, ids[j], e));
            free(ids);
        }
    }
    c->ignore_eos = args_bool(a, "ignore_eos");
    c->seed = (uint64_t)args_int(a, "seed");
    c->batch_size = (int)args_int(a, "batch_size");
    c->pad_to_multiple_of = (int)args_int(a, "pad_to_multiple_of");
    c->prefill_chunk_size = (int)args_int(a, "prefill_chunk_size");
    if (args_is_set(a, "max_cache_len")) c->max_cache_len = (int)args_int(a, "max_cache_len");
    if (args_is_set(a, "bad_words_ids")) TRY(parse_bad_words(s, args_str(a, "bad_words_ids"), e));
    s->n_stops = args_is_set(a, "stop_strings") ? args_list(a, "stop_strings", &s->stops) : 0;
    if (s->n_stops && !s->tok) return err_set(e, ST_EINVAL, "--stop_strings needs the model's tokenizer.json");
    s->m->plans.max_plans = (int)args_int(a, "max_plans");
    if (args_is_set(a, "chat_template_kwargs")) TRY(chat_kwargs_parse(args_str(a, "chat_template_kwargs"), &s->tmpl_kwargs, e));
    // a temperature the flags ask to sample with is a flag error; one from generation_config.json
    // is the file's (gen_config_check)
    if (args_is_set(a, "temperature") || args_is_set(a, "do_sample")) TRY(cli_check_sampling(c->do_sample, c->temperature, 1, e));
    return gen_config_check(c, s->m->cfg.vocab_size, e);
}

// part: this rank's part of the model only (tensor parallelism, tp_part), or NULL.
static Status session_open(Session *s, const Args *a, int need_tokenizer, const ModelPart *part, Err *e) {
    memset(s, 0, sizeof *s);
    TRY(cli_model_dir(a, "model", &s->dir, e));
    int dt;
    TRY(cli_dtype(a, &dt, e));
    TRY(cli_backend(a, &s->be, e));
    TRY(model_load_opts(s->dir, s->be, dt, &(ModelLoadOpts){.frozen = 1, .part = part}, &s->m, e));
    cli_apply_moe(a, s->m);
    TRY(cli_apply_adapter(a, s->m, e));
    if (gguf_is_file(s->dir)) {  // the tokenizer is in the metadata; needed only for text
        Status ts = tokenizer_load(s->dir, &s->tok, e);
        if (ts != ST_OK && need_tokenizer) return ts;
        err_clear(e);
        return build_config(s, a, e);
    }
    char *tj = path_join(s->dir, "tokenizer.json");
    int have_tok = file_exists(tj);
    free(tj);
    if (have_tok) TRY(tokenizer_load(s->dir, &s->tok, e));
    else if (need_tokenizer)
        return err_set(e, ST_EINVAL, "%s has no tokenizer.json: give token ids with --ids instead of text", s->dir);
    return build_config(s, a, e);
}

static Status session_template(Session *s, const Args *a, Err *e) {
    if (!s->tmpl) TRY(chat_template_load(s->dir, args_str(a, "chat_template_name"), &s->tmpl, e));
    return ST_OK;
}

// Messages through the chat template (add_generation_prompt), then encoded without special tokens.
static Status encode_messages(Session *s, const Args *a, const cJSON *messages, TokenIds *ids, Err *e) {
    TRY(session_template(s, a, e));
    char *text = NULL;
    TRY(chat_template_render(s->tmpl, messages, NULL, NULL, 1, s->tmpl_kwargs, &text, NULL, e));
    Status st = tokenizer_encode(s->tok, text, strlen(text), 0, ids, e);
    free(text);
    return st;
}

// [system?, user text] as messages.
static cJSON *user_messages(const char *system, const char *text) {
    cJSON *msgs = cJSON_CreateArray();
    if (system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", system);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
    return msgs;
}

// A prompt row: a string (chat template when --chat) or a message list (always the template).
static Status encode_prompt(Session *s, const Args *a, const cJSON *prompt, int chat, TokenIds *ids, Err *e) {
    if (cJSON_IsArray(prompt)) return encode_messages(s, a, prompt, ids, e);
    if (!cJSON_IsString(prompt)) return err_set(e, ST_EINVAL, "expected a string or a list of messages");
    if (!chat) return tokenizer_encode(s->tok, prompt->valuestring, strlen(prompt->valuestring), 1, ids, e);
    cJSON *msgs = user_messages(args_str(a, "system"), prompt->valuestring);
    Status st = encode_messages(s, a, msgs, ids, e);
    cJSON_Delete(msgs);
    return st;
}

static void report_stats(const char *command, const GenStats *st) {
    double pf = st->prefill_seconds > 0 ? st->prompt_tokens / st->prefill_seconds : 0;
    double dc = st->decode_seconds > 0 ? st->generated_tokens / st->decode_seconds : 0;
    fprintf(stderr,
            "still %s: prefill %ld tokens (%ld slots) in %.3f s = %.1f tok/s; decode %ld tokens in %.3f s = %.1f tok/s "
            "(%ld steps, batch %d); plans: %d built, %d held, %.1f MiB, %d decode graphs; max_cache_len %d\n",
            command, st->prompt_tokens, st->prefill_slots, st->prefill_seconds, pf, st->generated_tokens,
            st->decode_seconds, dc, st->decode_steps, st->batch_size, st->plans_built, st->plans_total,
            st->plan_bytes / 1048576.0, st->graphs, st->max_cache_len);
}

static void print_ids_line(const GenSeq *s) {
    for (int i = 0; i < s->n; i++) printf(i ? " %d" : "%d", s->ids[i]);
    putchar('\n');
}

static void stdout_sink(void *user, int prompt_index, int seq_index, const char *piece) {
    fputs(piece, stdout);
    fflush(stdout);
}

// ---------------------------------------------------------------- still generate
typedef struct Prompts {
    int32_t **ids;
    int *lens;
    cJSON **given;   // the prompt as given (for generations.jsonl), or NULL
    int n;
} Prompts;

static void prompts_free(Prompts *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->ids[i]);
        if (p->given) cJSON_Delete(p->given[i]);
    }
    free(p->ids);
    free(p->lens);
    free(p->given);
}

static void prompts_add(Prompts *p, TokenIds *t, cJSON *given) {
    p->ids = xrealloc(p->ids, (size_t)(p->n + 1) * sizeof(int32_t *));
    p->lens = xrealloc(p->lens, (size_t)(p->n + 1) * sizeof(int));
    p->given = xrealloc(p->given, (size_t)(p->n + 1) * sizeof(cJSON *));
    p->ids[p->n] = t->ids;
    p->lens[p->n] = (int)t->n;
    p->given[p->n] = given;
    p->n++;
    memset(t, 0, sizeof *t);
}

static Status read_prompts_file(Session *s, const Args *a, const char *path, Prompts *p, Err *e) {
    char *text;
    size_t len;
    TRY(file_read_all(path, &text, &len, e));
    Status st = ST_OK;
    int line = 0;
    for (char *cur = text, *nl; cur && *cur && st == ST_OK; cur = nl ? nl + 1 : NULL) {
        nl = strchr(cur, '\n');
        if (nl) *nl = 0;
        line++;
        char *q = cur;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (!*q) continue;
        cJSON *row = cJSON_Parse(cur);
        const cJSON *prompt = row ? cJSON_GetObjectItemCaseSensitive(row, "prompt") : NULL;
        if (!row) st = err_set(e, ST_EINVAL, "%s:%d: not valid JSON", path, line);
        else if (!prompt) st = err_set(e, ST_EINVAL, "%s:%d: no \"prompt\" field", path, line);
        TokenIds ids = {0};
        if (st == ST_OK) {
            st = encode_prompt(s, a, prompt, args_bool(a, "chat"), &ids, e);
            if (st != ST_OK) err_prefix(e, "%s:%d: prompt: ", path, line);
            else if (ids.n == 0) st = err_set(e, ST_EINVAL, "%s:%d: the prompt encodes to no tokens", path, line);
        }
        if (st == ST_OK) prompts_add(p, &ids, cJSON_Duplicate(prompt, 1));
        tokenizer_ids_free(&ids);
        cJSON_Delete(row);
    }
    free(text);
    if (st == ST_OK && p->n == 0) st = err_set(e, ST_EINVAL, "%s: no prompts", path);
    return st;
}

static cJSON *float_array(const float *x, int n) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%.7g", x[i]);
        cJSON_AddItemToArray(arr, isfinite(x[i]) ? cJSON_CreateRaw(buf) : cJSON_CreateNull());
    }
    return arr;
}

static Status write_generations(Session *s, const Prompts *p, const GenSeq *seqs, int nrows, const char *out_dir,
                                Err *e) {
    StrBuf sb = {0};
    for (int r = 0; r < nrows; r++) {
        const GenSeq *q = &seqs[r];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "prompt", cJSON_Duplicate(p->given[q->prompt_index], 1));
        cJSON_AddNumberToObject(o, "prompt_index", q->prompt_index);
        cJSON_AddNumberToObject(o, "sequence_index", q->seq_index);
        char *text = tokenizer_decode(s->tok, q->ids, (size_t)q->n, 1);
        cJSON_AddStringToObject(o, "text", text);
        free(text);
        char *reasoning, *content;
        if (gen_split_reasoning(s->tok, q->ids, q->n, &reasoning, &content)) {
            cJSON_AddStringToObject(o, "reasoning_content", reasoning);
            cJSON_AddStringToObject(o, "content", content);
            free(reasoning);
            free(content);
        }
        cJSON *ids = cJSON_CreateArray();
        for (int i = 0; i < q->n; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(q->ids[i]));
        cJSON_AddItemToObject(o, "token_ids", ids);
        if (q->logprobs) cJSON_AddItemToObject(o, "logprobs", float_array(q->logprobs, q->n));
        cJSON_AddStringToObject(o, "finish_reason", gen_finish_name(q->finish));
        char *line = cJSON_PrintUnformatted(o);
        sb_puts(&sb, line);
        sb_putc(&sb, '\n');
        free(line);
        cJSON_Delete(o);
    }
    Status st = ST_OK;
    if (out_dir) {
        st = dir_create(out_dir, e);
        char *path = path_join(out_dir, "generations.jsonl");
        if (st == ST_OK) st = file_write_atomic(path, sb.data, sb.len, e);
        if (st == ST_OK) log_info("wrote %d generations to %s", nrows, path);
        free(path);
    } else {
        fwrite(sb.data, 1, sb.len, stdout);
    }
    sb_free(&sb);
    return st;
}

// --tp_size T (or TP_SIZE): T ranks of an MPI job, each with its part of the model (tp.h); every
// rank runs the same generation, rank 0 prints and writes.
static Status tp_open(const Args *a, Dist *d, int *T, Err *e) {
    dist_single(d);
    *T = args_is_set(a, "tp_size") ? (int)args_int(a, "tp_size") : 1;
    const char *env = getenv("TP_SIZE");
    if (!args_is_set(a, "tp_size") && env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 1 || v > 4096) return err_set(e, ST_EUSAGE, "TP_SIZE=%s: expected a positive integer", env);
        *T = (int)v;
    }
    if (*T == 1) return ST_OK;
    TRY(dist_init(d, args_float(a, "ddp_timeout"), e));
    if (d->world != *T)
        return err_set(e, ST_EUSAGE, "--tp_size %d: still generate runs on exactly that many ranks (mpirun -np %d); "
                                     "this job has %d", *T, *T, d->world);
    return dist_mesh_init(d, *T, 1, e);
}

static Status run_generate_on(const Args *a, Dist *d, int T, Err *e);

static Status run_generate(const Args *a, Err *e) {
    Dist d;
    int T;
    Status st = tp_open(a, &d, &T, e);
    if (st == ST_OK) st = run_generate_on(a, &d, T, e);
    if (st != ST_OK && d.world > 1) cli_dist_finish("generate", &d, st, e);  // the others wait in a collective
    dist_finalize(&d);
    return st;
}

static Status run_generate_on(const Args *a, Dist *d, int T, Err *e) {
    int given = args_is_set(a, "prompt") + args_is_set(a, "prompts") + args_is_set(a, "ids");
    if (given != 1) return err_set(e, ST_EINVAL, "give exactly one of --prompt TEXT, --prompts FILE.jsonl, --ids \"1 2 3\"");
    Session s;
    ModelPart part;
    Status st = session_open(&s, a, !args_is_set(a, "ids"), T > 1 ? tp_part(&part, d) : NULL, e);
    Tp tp = {0};
    if (st == ST_OK && T > 1) st = dist_attach_backend(d, s.be, e);
    if (st == ST_OK && T > 1) st = tp_shard(&tp, &s.m, &d->mesh->tp_axis, e);
    int lead = d->rank == 0;
    Prompts p = {0};
    int jsonl = args_is_set(a, "prompts");
    s.cfg.num_return_sequences = (int)args_int(a, "num_return_sequences");
    if (jsonl) s.cfg.logprobs = GEN_LOGPROBS_RAW;
    if (st == ST_OK) st = cli_check_sampling(s.cfg.do_sample, 1.0, s.cfg.num_return_sequences, e);
    if (st == ST_OK && args_is_set(a, "ids")) {
        TokenIds t = {0};
        int n;
        st = cli_parse_ids(args_str(a, "ids"), "--ids", s.m->cfg.vocab_size, &t.ids, &n, e);
        t.n = (size_t)n;
        if (st == ST_OK) prompts_add(&p, &t, NULL);
    } else if (st == ST_OK && args_is_set(a, "prompt")) {
        cJSON *text = cJSON_CreateString(args_str(a, "prompt"));
        TokenIds t = {0};
        st = encode_prompt(&s, a, text, args_bool(a, "chat"), &t, e);
        if (st == ST_OK && t.n == 0) st = err_set(e, ST_EINVAL, "--prompt encodes to no tokens");
        if (st == ST_OK) prompts_add(&p, &t, NULL);
        tokenizer_ids_free(&t);
        cJSON_Delete(text);
    } else if (st == ST_OK) {
        st = read_prompts_file(&s, a, args_str(a, "prompts"), &p, e);
    }
    GenSeq *seqs = NULL;
    GenStats stats;
    int nrows = p.n * s.cfg.num_return_sequences;
    GenText gt;
    gen_text_init(&gt, s.tok, MAX(p.n, 1), s.cfg.num_return_sequences, s.stops, s.n_stops);
    int stream = lead && !jsonl && s.tok && nrows == 1 && isatty(STDOUT_FILENO);
    if (stream) gt.sink = stdout_sink;
    s.cfg.on_token = gen_text_on_token;
    s.cfg.user = &gt;
    Progress pr;  // unless the one completion streams to the terminal
    progress_begin(&pr, "generate", "rows", 0);
    if (!stream) s.cfg.on_progress = progress_gen_rows, s.cfg.progress_user = &pr;
    if (st == ST_OK) st = gen_generate(s.m, &s.cfg, (const int32_t *const *)p.ids, p.lens, p.n, &seqs, &stats, e);
    if (st == ST_OK && T > 1) st = tp_status(&tp, e);
    if (!stream) progress_end(&pr, nrows, nrows, NULL);
    s.cfg.on_progress = NULL;
    if (st == ST_OK && lead) {
        if (jsonl) {
            st = write_generations(&s, &p, seqs, nrows, args_str(a, "output_dir"), e);
        } else {
            if (s.tok) {
                for (int r = 0; r < nrows; r++) {
                    if (stream) {  // the streamed text is out; what the stream held back (an
                                   // incomplete character) is not text
                        putchar('\n');
                        continue;
                    }
                    char *text = tokenizer_decode(s.tok, seqs[r].ids, (size_t)seqs[r].n, 1);
                    fputs(text, stdout);
                    putchar('\n');
                    free(text);
                }
            }
            if (args_bool(a, "print_ids") || !s.tok)
                for (int r = 0; r < nrows; r++) print_ids_line(&seqs[r]);
        }
        fflush(stdout);
        report_stats("generate", &stats);
    }
    gen_text_free(&gt);
    gen_seqs_free(seqs, nrows);
    prompts_free(&p);
    tp_free(&tp, s.m);
    session_free(&s);
    return st;
}

int cmd_generate(int argc, char **argv) {
    return cli_run("generate", "Generate text on a static KV cache (greedy or sort-free sampling).", generate_specs, argc, argv, run_generate);
}

// ---------------------------------------------------------------- still chat
// Printing a reply, optionally without its <think>...</think> part.
typedef struct ChatPrinter {
    int hide;
    int tty;       // stdout is a terminal: control characters escaped
    int state;     // 0: deciding whether the reply opens with <think>, 1: inside it, 2: showing
    StrBuf held;   // text not yet shown while deciding / inside the thinking part
} ChatPrinter;

// Reply text for a terminal: control characters other than newline and tab shown as ^X, so a
// reply cannot move the cursor, clear the screen or change the terminal's modes.
static void put_text(const ChatPrinter *cp, const char *s) {
    if (!cp->tty) {
        fputs(s, stdout);
        return;
    }
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if ((*c < 0x20 && *c != '\n' && *c != '\t') || *c == 0x7f) {
            putchar('^');
            putchar(*c == 0x7f ? '?' : *c + 0x40);
        } else {
            putchar(*c);
        }
    }
}

static void chat_sink(void *user, int prompt_index, int seq_index, const char *piece) {
    ChatPrinter *cp = user;
    if (!cp->hide || cp->state == 2) {
        put_text(cp, piece);
        fflush(stdout);
        return;
    }
    sb_puts(&cp->held, piece);
    const char *h = cp->held.data, *open = "<think>";
    size_t n = cp->held.len, skip = 0;
    while (skip < n && (h[skip] == '\n' || h[skip] == ' ')) skip++;
    if (cp->state == 0) {
        size_t m = MIN(n - skip, strlen(open));
        if (strncmp(h + skip, open, m)) {  // no thinking part: show everything
            cp->state = 2;
            put_text(cp, h);
            fflush(stdout);
            cp->held.len = 0;
            return;
        }
        if (n - skip >= strlen(open)) cp->state = 1;
    }
    if (cp->state == 1) {
        const char *end = strstr(h, "</think>");
        if (!end) return;
        end += strlen("</think>");
        while (*end == '\n') end++;
        cp->state = 2;
        put_text(cp, end);
        fflush(stdout);
        cp->held.len = 0;
    }
}

static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    return m;
}

// What a chat keeps between turns: the conversation's cache, the last turn's numbers.
typedef struct ChatState {
    GenSession gs;
    GenStats last;
    int turns, have_last;
    const volatile sig_atomic_t *stop;  // Ctrl-C: stops the reply being generated
    GenText *gt;
} ChatState;

// on_token: the text as before, and a stop when Ctrl-C was pressed.
static int chat_on_token(void *user, int prompt_index, int seq_index, int32_t id, float logprob) {
    ChatState *cs = user;
    int stop = gen_text_on_token(cs->gt, prompt_index, seq_index, id, logprob);
    return stop || (cs->stop && *cs->stop);
}

static Status chat_turn(Session *s, const Args *a, cJSON *history, ChatPrinter *cp, ChatState *cs, Err *e) {
    TokenIds ids = {0};
    TRY(encode_messages(s, a, history, &ids, e));
    GenText gt;
    gen_text_init(&gt, s->tok, 1, 1, s->stops, s->n_stops);
    gt.sink = chat_sink;
    gt.sink_user = cp;
    cp->state = 0;
    cp->held.len = 0;
    if (cp->held.data) cp->held.data[0] = 0;
    cs->gt = &gt;
    s->cfg.on_token = chat_on_token;
    s->cfg.user = cs;
    s->cfg.num_return_sequences = 1;
    s->cfg.batch_size = 1;
    GenSeq *seqs = NULL;
    GenStats stats;
    if (!args_bool(a, "keep_cache")) cs->gs.n = 0, cs->gs.next = 0;  // nothing reused
    Status st = gen_session_generate(s->m, &s->cfg, &cs->gs, ids.ids, (int)ids.n, &seqs, &stats, e);
    if (st == ST_OK) {
        int stopped = cs->stop && *cs->stop;
        fputs(stopped ? " [stopped]\n" : "\n", stdout);
        fflush(stdout);
        if (stopped) interrupt_clear();
        char *text = tokenizer_decode(s->tok, seqs[0].ids, (size_t)seqs[0].n, 1);
        cJSON_AddItemToArray(history, message("assistant", text));  // a stopped reply as far as it got
        free(text);
        cs->last = stats, cs->have_last = 1, cs->turns++;
        log_debug("chat turn %d: %d tokens reused from the cache", cs->turns, cs->gs.reused);
    }
    gen_seqs_free(seqs, 1);
    gen_text_free(&gt);
    tokenizer_ids_free(&ids);
    return st;
}

static cJSON *new_history(const char *system) {
    cJSON *h = cJSON_CreateArray();
    if (system) cJSON_AddItemToArray(h, message("system", system));
    return h;
}

static void chat_help(void) {
    fprintf(stderr, "commands:\n"
                    "  /help          this list\n"
                    "  /stats         the last reply's numbers: tokens prefilled and reused, speeds, cache\n"
                    "  /reset         start a new conversation\n"
                    "  /exit, /quit   leave (so does Ctrl-D on an empty line)\n"
                    "keys: Ctrl-C stops a reply and returns here; arrows, Ctrl-A / Ctrl-E edit the line, up / down "
                    "recall earlier ones\n");
}

static void chat_stats(const ChatState *cs) {
    if (!cs->have_last) {
        fprintf(stderr, "no reply yet\n");
        return;
    }
    report_stats("chat", &cs->last);
    fprintf(stderr, "still chat: turn %d; %d tokens of the conversation reused from the cache, %d held\n", cs->turns,
            cs->gs.reused, cs->gs.n);
}

static Status run_chat(const Args *a, Err *e) {
    Session s;
    Status st = session_open(&s, a, 1, NULL, e);
    if (st == ST_OK) st = session_template(&s, a, e);
    // The conversation stays in the cache between turns (only the new turn is prefilled); the
    // cache length grows in steps of 1024 (a longer one is a new plan, prefilled once).
    int fixed_cache = args_is_set(a, "max_cache_len");
    const char *system = args_str(a, "system");
    cJSON *history = new_history(system);
    ChatPrinter cp = {.hide = args_bool(a, "hide_thinking"), .tty = isatty(STDOUT_FILENO)};
    ChatState cs = {0};
    interrupt_install(INTERRUPT_REPEAT);  // Ctrl-C stops the reply, not the chat
    cs.stop = interrupt_flag();
    LineInput in;
    line_input_open(&in, "> ");
    if (st == ST_OK && in.tty) fprintf(stderr, "still chat: /help lists the commands; Ctrl-D leaves\n");
    while (st == ST_OK) {
        char *line = NULL;
        LineStatus ls = line_input_read(&in, &line);
        if (ls == LINE_EOF) break;
        if (ls == LINE_INTERRUPTED || *interrupt_flag()) {  // Ctrl-C at the prompt: a new line
            interrupt_clear();
            fputc('\n', stderr);
            continue;
        }
        if (!line[0]) continue;
        line_input_add_history(&in, line);
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/help") || !strcmp(line, "/?")) {
            chat_help();
            continue;
        }
        if (!strcmp(line, "/stats")) {
            chat_stats(&cs);
            continue;
        }
        if (!strcmp(line, "/reset")) {
            cJSON_Delete(history);
            history = new_history(system);
            fprintf(stderr, "still chat: conversation reset\n");
            continue;
        }
        if (line[0] == '/' && line[1] != '/' && line[1] != ' ' && line[1]) {
            fprintf(stderr, "still chat: unknown command %s (/help lists them; start a message with // to send a /)\n",
                    line);
            continue;
        }
        cJSON_AddItemToArray(history, message("user", line[0] == '/' && line[1] == '/' ? line + 1 : line));
        if (!fixed_cache) {
            TokenIds ids = {0};
            st = encode_messages(&s, a, history, &ids, e);
            int len = (int)ids.n, cur = s.cfg.max_cache_len;
            s.cfg.max_cache_len = 0;
            int need = gen_cache_len(&s.cfg, s.be, &len, 1) + (cs.gs.n ? cs.gs.next - cs.gs.n : 0);
            s.cfg.max_cache_len = MAX(cur, (need + 1023) / 1024 * 1024);
            tokenizer_ids_free(&ids);
        }
        if (st == ST_OK) st = chat_turn(&s, a, history, &cp, &cs, e);
    }
    if (in.tty) fputc('\n', stderr);
    line_input_close(&in);
    gen_session_free(&cs.gs);
    sb_free(&cp.held);
    cJSON_Delete(history);
    session_free(&s);
    return st;
}

int cmd_chat(int argc, char **argv) {
    return cli_run("chat", "Chat through the model's chat template: one user message per line; /help lists the commands.", chat_specs, argc, argv, run_chat);
}
