// sft.c: SFT = TRL's data rules (data.c) + packing/padding (batch.c) + the shared loop.
#include "sft.h"

#include "../core/fileio.h"
#include "../core/log.h"
#include "../tokenizer/chat.h"
#include "codec.h"
#include "preflight.h"
#include "ep.h"
#include "tp.h"

#include <string.h>

static Status load_set(const DataConfig *dc, const char *path, const TextCodec *codec, const char *what, Dataset *d,
                       Err *e) {
    TRY(data_load(path, dc, codec, d, e));
    log_info("%s %s: %d examples (%s%s%s)", what, path, d->n, data_format_name(d->format),
             d->conversational ? ", conversational" : "", d->completion_only_loss ? ", completion-only loss" : "");
    if (d->n_truncated) log_info("%s: %d examples truncated to max_length %d", path, d->n_truncated, dc->max_length);
    if (d->n_dropped) log_warn("%s: %d examples dropped: no label token left", path, d->n_dropped);
    if (d->n_bad) log_warn("%s: %d bad rows skipped (--skip_bad_rows); the first: %s", path, d->n_bad, d->first_bad);
    return ST_OK;
}

Status sft_run(SftConfig *c, TrainResult *res, Err *e) {
    if (!c->dist || c->dist->rank == 0) TRY(preflight_output_dir(c->train.output_dir, e));  // before any loading
    cJSON *kwargs = NULL;
    TRY(chat_kwargs_parse(c->chat_template_kwargs, &kwargs, e));
    if (kwargs) c->data.chat_template_kwargs = kwargs;
    ModelCodec mc = {0};
    int have_codec = 0;
    // the format, and so whether a tokenizer is needed, from the keys of the first row; the eval
    // set gets the completion-only loss the training set's first row decides (TRL's rule)
    DataFormat fmt;
    int completion_only;
    Status st = data_detect(c->dataset, &c->data, &fmt, &completion_only, e);
    if (st == ST_OK && fmt == FMT_IDS && c->eval_dataset) st = data_detect(c->eval_dataset, &c->data, &fmt, NULL, e);
    if (st == ST_OK && fmt != FMT_IDS) {
        st = model_codec_load(&mc, c->model_dir, c->eos_token, e);
        have_codec = st == ST_OK;
    }
    if (st == ST_OK) c->data.completion_only_loss = completion_only;
    c->data.truncate = !c->packing;
    {  // the model's vocabulary bounds pre-tokenised ids (checked per row, with file:line)
        ModelConfig mcfg;
        Err ce = {0};  // a bad config.json is model_load's error to report
        if (model_config_load(c->model_dir, &mcfg, &ce) == ST_OK) {
            c->data.vocab_size = mcfg.vocab_size;
            config_free(&mcfg);
        }
    }
    // the eval set is packed like the training set unless --eval_packing says otherwise (TRL's
    // eval_packing None), and truncated exactly when it is not packed
    int eval_packing = c->eval_packing >= 0 ? c->eval_packing : c->packing;
    DataConfig edata = c->data;
    edata.truncate = !eval_packing;
    Dataset train = {0}, eval = {0};
    if (st == ST_OK) st = load_set(&c->data, c->dataset, have_codec ? &mc.codec : NULL, "dataset", &train, e);
    if (st == ST_OK && c->eval_dataset)
        st = load_set(&edata, c->eval_dataset, have_codec ? &mc.codec : NULL, "eval dataset", &eval, e);
    Backend *be = NULL;
    Model *m = NULL;
    if (st == ST_OK) st = backend_create(c->backend, c->threads, &be, e);
    if (st == ST_OK) be->max_memory = c->max_memory;
    if (st == ST_OK && c->dist) st = dist_attach_backend(c->dist, be, e);
    // trained weights: fp32 masters (an adapter's base keeps its dtype)
    // --tp_size T: only this rank's part of the model is read (tp.h)
    ModelPart part;
    if (st == ST_OK)
        st = peft_load_model_part(c->model_dir, be, &c->train.peft, c->dtype, tp_part(&part, c->dist), &m, e);
    if (st == ST_OK) st = peft_prepare(m, &c->train.peft, c->train.gradient_checkpointing, c->train.seed, e);
    if (st == ST_OK) m->moe_capacity_factor = c->moe_capacity_factor;
    Tp tp = {0};  // --tp_size T: this rank's part of the model (tp.h)
    Dist *dd = dist_data_axis(c->dist);
    if (st == ST_OK && dd != c->dist) st = tp_shard(&tp, &m, &c->dist->mesh->tp_axis, e);
    Ep ep = {0};  // --ep_size P: this rank's experts (ep.h)
    if (st == ST_OK) st = ep_open(&ep, &m, c->dist, dd, c->ep_size, c->train.zero_stage, e);
    for (int i = 0; st == ST_OK && i < train.n; i++)
        for (int t = 0; t < train.ex[i].n; t++)
            if (train.ex[i].ids[t] < 0 || train.ex[i].ids[t] >= m->cfg.vocab_size) {
                st = err_set(e, ST_EINVAL, "%s: example %d has token id %d outside the model's vocabulary [0, %d)",
                             c->dataset, i, train.ex[i].ids[t], m->cfg.vocab_size);
                break;
            }
    Rows rows = {0}, erows = {0};
    Batcher bt = {0}, ebt = {0};
    if (st == ST_OK) {
        if (c->max_plans > 0) m->plans.max_plans = c->max_plans;
        int seq = c->data.max_length;
        if (dd) c->batch.rank = dd->rank, c->batch.world = dd->world;
        c->batch.same_T = c->ep_size > 1;  // the exchange sizes its buffers by every rank having one shape
        batch_make_rows(&rows, &train, c->packing ? c->packing_strategy : PACK_NONE, seq);
        if (c->padding_max_length) c->batch.fixed_T = seq > 0 ? MAX(seq, rows.max_len) : rows.max_len;
        batcher_init(&bt, &rows, &c->batch);
        log_info("%d rows%s, longest %d tokens; batches (B=%d, T%s%d)", rows.n,
                 c->packing ? (c->packing_strategy == PACK_BFD ? " packed (bfd)" : " packed (wrapped)") : "",
                 rows.max_len, c->batch.B, c->padding_max_length ? "=" : " a multiple of ",
                 c->padding_max_length ? c->batch.fixed_T : MAX(1, c->batch.pad_to_multiple_of));
        if (c->eval_dataset) {
            batch_make_rows(&erows, &eval, eval_packing ? c->packing_strategy : PACK_NONE, seq);
            log_info("eval: %d rows%s, batches of %d", erows.n, eval_packing ? " packed" : "", c->eval_batch_size);
            BatchConfig ec = c->batch;
            ec.B = c->eval_batch_size;
            ec.shuffle = 0;
            ec.drop_last = 0;
            if (c->padding_max_length) ec.fixed_T = MAX(c->batch.fixed_T, erows.max_len);
            batcher_init(&ebt, &erows, &ec);
        }
        c->train.src_model_dir = c->model_dir;
        c->train.save_dtype = c->save_dtype >= 0 ? (DType)c->save_dtype
                              : c->dtype >= 0 && c->dtype != DT_Q8_0 ? (DType)c->dtype
                                                  : m->ckpt_dtype;
        st = trainer_run(m, &bt, c->eval_dataset ? &ebt : NULL, dd, &c->train, res, e);
    }
    batcher_free(&bt);
    batcher_free(&ebt);
    batch_rows_free(&rows);
    batch_rows_free(&erows);
    data_free(&train);
    data_free(&eval);
    tp_free(&tp, m);
    ep_free(&ep, m);
    model_free(m);
    if (be) backend_destroy(be);
    if (have_codec) model_codec_free(&mc);
    cJSON_Delete(kwargs);
    return st;
}
