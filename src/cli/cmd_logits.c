// cmd_logits.c: still logits / still loss — one sequence through the model.
#include "../core/alloc.h"
#include "../core/log.h"
#include "../model/qwen3.h"
#include "../model/safetensors.h"
#include "cli_common.h"
#include "commands.h"

#include <string.h>

static const ArgSpec logits_specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"ids", ARG_STR, NULL, ARG_REQUIRED "token ids, space-separated"},
    {"all", ARG_BOOL, "false", "print every position (default: the last)"},
    {"pad_to_multiple_of", ARG_INT, "128", "pad the sequence to a multiple of this (static shapes; 0 or 1 = off)", "[0,inf)"},
    CLI_ADAPTER_FLAG,
    CLI_MOE_FLAG,
    {NULL, 0, NULL, NULL},
};

static const ArgSpec loss_specs[] = {
    {"model", ARG_STR, NULL, ARG_REQUIRED "model directory or hub id in the local Hugging Face cache"},
    {"revision", ARG_STR, "main", "branch, tag or commit of a cached hub model"},
    {"ids", ARG_STR, NULL, ARG_REQUIRED "token ids, space-separated"},
    {"grads", ARG_STR, NULL, "write every parameter's gradient (fp32, HF names) to this .safetensors file"},
    {"pad_to_multiple_of", ARG_INT, "128", "pad the sequence to a multiple of this (static shapes; 0 or 1 = off)", "[0,inf)"},
    CLI_ADAPTER_FLAG,
    CLI_MOE_FLAG,
    {NULL, 0, NULL, NULL},
};

typedef struct Session {
    Backend *be;
    Model *m;
    Plan *p;
    int32_t *ids;
    int n, T;
} Session;

static void session_free(Session *s) {
    model_free(s->m);
    backend_destroy(s->be);
    free(s->ids);
}

// Load the model, parse --ids and run the forward pass over one padded row.
static Status session_forward(Session *s, const Args *a, PlanMode mode, Err *e) {
    memset(s, 0, sizeof *s);
    char *dir;
    TRY(cli_model_dir(a, "model", &dir, e));
    int dt;
    Status st = cli_dtype(a, &dt, e);
    if (st == ST_OK && mode == PLAN_TRAIN && !args_str(a, "adapter")) dt = DT_F32;  // gradients need fp32 weights
    if (st == ST_OK) st = cli_backend(a, &s->be, e);
    // gradients of every weight need fp32 ones; an adapter's base is frozen
    int full = mode == PLAN_TRAIN && !args_str(a, "adapter");
    if (st == ST_OK) st = (full ? model_load : model_load_frozen)(dir, s->be, dt, &s->m, e);
    if (st == ST_OK) cli_apply_moe(a, s->m);
    if (st == ST_OK) st = cli_apply_adapter(a, s->m, e);
    free(dir);
    if (st != ST_OK) return st;
    const char *ids = args_str(a, "ids");
    if (!ids) return err_set(e, ST_EINVAL, "--ids \"1 2 3\" is required");
    TRY(cli_parse_ids(ids, "--ids", s->m->cfg.vocab_size, &s->ids, &s->n, e));
    s->T = round_up(s->n, (int)args_int(a, "pad_to_multiple_of"));
    TRY(plan_get(s->m, mode, 1, s->T, &s->p, e));
    int T = s->T;
    int32_t *ids_p = xcalloc((size_t)T, sizeof(int32_t)), *pos = xcalloc((size_t)T, sizeof(int32_t)),
            *seg = xcalloc((size_t)T, sizeof(int32_t)), *tgt = xmalloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) {
        ids_p[t] = t < s->n ? s->ids[t] : 0;
        pos[t] = t < s->n ? t : 0;
        seg[t] = t < s->n ? 1 : 0;
        tgt[t] = t + 1 < s->n ? s->ids[t + 1] : IGNORE_INDEX;
    }
    qwen3_set_inputs(s->m, s->p, ids_p, pos, seg, tgt, NULL);
    free(ids_p);
    free(pos);
    free(seg);
    free(tgt);
    qwen3_forward(s->m, s->p);
    return ST_OK;
}

static Status run_logits(const Args *a, Err *e) {
    Session s;
    Status st = session_forward(&s, a, PLAN_SCORE, e);
    if (st == ST_OK) {
        int V = s.m->cfg.vocab_size, first = args_bool(a, "all") ? 0 : s.n - 1;
        float *dev = s.be->alloc(s.be, (size_t)V * sizeof(float)), *host = xmalloc((size_t)V * sizeof(float));
        for (int t = first; t < s.n; t++) {
            qwen3_logits(s.m, s.p, t, 1, dev);
            s.be->download(s.be, host, dev, (size_t)V * sizeof(float));
            for (int v = 0; v < V; v++) printf(v ? " %.9g" : "%.9g", host[v]);
            putchar('\n');
        }
        s.be->free(s.be, dev);
        free(host);
    }
    session_free(&s);
    return st;
}

// Every trainable tensor's gradient: the adapter's with --adapter (PEFT names), else the model's.
static Status write_grads(const Model *m, const char *path, Err *e) {
    Trainable tr = model_trainable(m);
    int n = tr.tt->n;
    StWriteTensor *wt = xcalloc((size_t)n, sizeof(StWriteTensor));
    float *host = xmalloc(tr.tt->n_params * sizeof(float));
    m->be->download(m->be, host, tr.grads, tr.tt->n_params * sizeof(float));
    for (int i = 0; i < n; i++) {
        const TensorInfo *t = &tr.tt->t[i];
        wt[i] = (StWriteTensor){.name = t->name, .dtype = DT_F32, .data = host + t->goffset};
        int64_t hs[3];
        tensors_hf_shape(t, &wt[i].ndim, hs);  // the checkpoint's layout (gpt_oss experts)
        for (int d = 0; d < wt[i].ndim; d++) wt[i].shape[d] = hs[d];
        if (t->hf_xpose) {
            float *own = xmalloc(t->numel * sizeof(float));
            memcpy(own, host + t->goffset, t->numel * sizeof(float));
            tensors_to_hf(t, host + t->goffset, own);
            free(own);
        }
    }
    Status st = st_write(path, wt, n, NULL, 0, e);
    free(host);
    free(wt);
    return st;
}

static Status run_loss(const Args *a, Err *e) {
    Session s;
    int want_grads = args_str(a, "grads") != NULL;
    Status st = session_forward(&s, a, want_grads ? PLAN_TRAIN : PLAN_SCORE, e);
    if (st == ST_OK && s.n < 2) st = err_set(e, ST_EINVAL, "--ids: need at least 2 tokens for a next-token loss");
    if (st == ST_OK) {
        int n_targets = s.n - 1;
        if (want_grads) model_alloc_grads(s.m);
        qwen3_ce_loss(s.m, s.p, 1.0f / (float)n_targets, want_grads);
        float *rows = xmalloc((size_t)s.T * sizeof(float));
        s.be->download(s.be, rows, s.p->row_loss, (size_t)s.T * sizeof(float));
        double sum = 0;
        for (int t = 0; t < n_targets; t++) sum += rows[t];
        free(rows);
        printf("%.9g\n", sum / n_targets);
        if (want_grads) st = write_grads(s.m, args_str(a, "grads"), e);
    }
    session_free(&s);
    return st;
}

int cmd_logits(int argc, char **argv) {
    return cli_run("logits", "Logits for token ids: one line per position, 9 significant digits.", logits_specs, argc, argv, run_logits);
}

int cmd_loss(int argc, char **argv) {
    return cli_run("loss", "Mean next-token cross-entropy of token ids, and optionally every gradient.", loss_specs, argc, argv, run_loss);
}
