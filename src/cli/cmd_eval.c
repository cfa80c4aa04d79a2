// cmd_eval.c: still eval — flags -> EvalConfig -> eval_run; the JSON summary on stdout.
#include "../core/log.h"
#include "../train/eval.h"
#include "cli_common.h"
#include "commands.h"

#include <string.h>

static const ArgSpec specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},
    CLI_ADAPTER_FLAG,
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"dataset", ARG_STR, NULL, ARG_REQUIRED "a local JSONL or JSON file with a \"prompt\" column (text or messages) or \"messages\""},
    {"metric", ARG_LIST, NULL, "metric (repeatable): exact_match:COLUMN | regex:PATTERN | length:TARGET | format | "
                               "cmd:PROGRAM"},
    {"output_dir", ARG_STR, NULL, "write eval.json and generations.jsonl here"},
    {"loss", ARG_BOOL, "true", "loss / perplexity of the dataset's completions (rows that have one)"},
    {"reward_timeout", ARG_FLOAT, "60", "seconds a cmd: metric program may take to answer one completion", "(0,inf)"},
    {"chat_template_kwargs", ARG_STR, NULL, "JSON object of extra chat template variables"},
    {"max_prompt_length", ARG_INT, "0", "keep the last N tokens of longer prompts (0 = no truncation)", "[0,inf)"},
    {"skip_bad_rows", ARG_BOOL, "false", "skip malformed rows (counted) instead of failing"},
    {"max_new_tokens", ARG_INT, "256", "tokens to generate at most per row", "[1,inf)"},
    {"do_sample", ARG_BOOL, "false", "sample instead of greedy decoding"},
    {"temperature", ARG_FLOAT, "1.0", "sampling temperature", "[0,inf)"},
    {"top_k", ARG_INT, "0", "top-k sampling (0 = off)", "[0,inf)"},
    {"top_p", ARG_FLOAT, "1.0", "nucleus sampling (1 = off)", "(0,1]"},
    {"min_p", ARG_FLOAT, "0", "min-p sampling (0 = off)", "[0,1]"},
    {"num_return_sequences", ARG_INT, "1", "completions per prompt (metrics average over all)", "[1,inf)"},
    {"batch_size", ARG_INT, "8", "rows decoded / scored together (static batch)", "[1,inf)"},
    {"pad_to_multiple_of", ARG_INT, "128", "pad prompts to a multiple of this (static shapes)", "[0,inf)"},
    {NULL, 0, NULL, NULL},
};

int cmd_eval(int argc, char **argv) {
    Args a;
    int done;
    int rc = cli_parse(&a, "eval", "Generate for every row of a dataset and report metrics, loss and perplexity.", specs,
                       argc, argv, &done);
    if (rc || done) return rc;
    Err e = {0};
    EvalConfig c;
    memset(&c, 0, sizeof c);
    char *dir = NULL;
    int dtype = -1;
    Status st = cli_model_dir(&a, "model", &dir, &e);
    c.dataset = args_str(&a, "dataset");
    c.adapter = args_str(&a, "adapter");
    if (st == ST_OK && !c.dataset) st = err_set(&e, ST_EINVAL, "--dataset FILE.jsonl is required");
    if (st == ST_OK) st = cli_dtype(&a, &dtype, &e);
    char **metrics = NULL;
    c.n_metrics = args_list(&a, "metric", &metrics);
    c.metrics = (const char *const *)metrics;
    c.output_dir = args_str(&a, "output_dir");
    c.loss = args_bool(&a, "loss");
    c.reward_timeout = args_float(&a, "reward_timeout");
    c.chat_template_kwargs = args_str(&a, "chat_template_kwargs");
    c.max_prompt_length = (int)args_int(&a, "max_prompt_length");
    c.skip_bad_rows = args_bool(&a, "skip_bad_rows");
    GenConfig *g = &c.gen;
    eval_gen_config_default(g);
    g->max_new_tokens = (int)args_int(&a, "max_new_tokens");
    g->do_sample = args_bool(&a, "do_sample");
    g->temperature = (float)args_float(&a, "temperature");
    g->top_k = (int)args_int(&a, "top_k");
    g->top_p = args_float(&a, "top_p");
    g->min_p = (float)args_float(&a, "min_p");
    g->num_return_sequences = (int)args_int(&a, "num_return_sequences");
    g->batch_size = (int)args_int(&a, "batch_size");
    g->pad_to_multiple_of = (int)args_int(&a, "pad_to_multiple_of");
    g->seed = (uint64_t)args_int(&a, "seed");
    if (st == ST_OK) st = cli_check_sampling(g->do_sample, g->temperature, g->num_return_sequences, &e);
    EvalResult r = {0};
    if (st == ST_OK) st = eval_run(dir, args_str(&a, "device"), (int)args_int(&a, "threads"), dtype, &c, &r, &e);
    if (st == ST_OK) {
        cJSON *o = eval_result_json(&r);
        cli_print_json(o);
        cJSON_Delete(o);
        log_info("eval: %d rows, %ld tokens generated in %.1f s%s%s", r.rows, r.generated_tokens, r.gen_seconds,
                 c.output_dir ? "; wrote " : "", c.output_dir ? c.output_dir : "");
    }
    eval_result_free(&r);
    free(dir);
    args_free(&a);
    return st == ST_OK ? 0 : cli_fail("eval", &e);
}
