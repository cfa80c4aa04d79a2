// pref_setup.c: policy, reference and codec for the preference trainers.
#include "pref_setup.h"

#include "../core/log.h"
#include "../tokenizer/chat.h"

#include <string.h>

Status pref_load_policy(const PrefPolicySpec *s, Backend **be, Model **m, Err *e) {
    *be = NULL, *m = NULL;
    TRY(backend_create(s->backend, s->threads, be, e));
    (*be)->max_memory = s->max_memory;
    Status st = s->dist ? dist_attach_backend(s->dist, *be, e) : ST_OK;
    ModelPart part;  // --tp_size T: only this rank's part is read (tp.h)
    if (st == ST_OK)
        st = peft_load_model_part(s->model_dir, *be, s->peft, s->dtype, s->dist ? tp_part(&part, s->dist) : NULL, m, e);
    if (st == ST_OK) st = peft_prepare(*m, s->peft, s->gradient_checkpointing, s->seed, e);
    if (st == ST_OK && s->max_plans > 0) (*m)->plans.max_plans = s->max_plans;
    return st;
}

Status pref_policy_open(PrefPolicy *p, const PrefPolicySpec *s, Dist **dist, Err *e) {
    memset(p, 0, sizeof *p);
    p->world = *dist;
    Status st = pref_load_policy(s, &p->be, &p->m, e);
    if (st == ST_OK && dist_data_axis(*dist) != *dist) {
        st = tp_shard(&p->tp, &p->m, &(*dist)->mesh->tp_axis, e);
        *dist = dist_data_axis(*dist);
    }
    if (st == ST_OK) st = ep_open(&p->ep, &p->m, p->world, *dist, s->ep_size, s->zero_stage, e);
    return st;
}

void pref_policy_close(PrefPolicy *p, Dist **dist) {
    tp_free(&p->tp, p->m);
    ep_free(&p->ep, p->m);
    model_free(p->m);
    *dist = p->world;
    if (p->be) backend_destroy(p->be);
    memset(p, 0, sizeof *p);
}

DType pref_save_dtype(int save_dtype, int dtype, const Model *m) {
    return save_dtype >= 0 ? (DType)save_dtype : dtype >= 0 ? (DType)dtype : m->ckpt_dtype;
}

Status pref_batch_count(const char *dataset, const char *what, int n, int gb, int drop_last, int *out, Err *e) {
    *out = drop_last ? n / gb : (n + gb - 1) / gb;
    if (*out == 0) return err_set(e, ST_EINVAL, "%s has %d %s, fewer than one batch of %d (drop_last)", dataset, n, what, gb);
    return ST_OK;
}

Status pref_load_reference(const char *ref_dir, const char *model_dir, Model *m, int dtype, Model **out, Err *e) {
    *out = NULL;
    if (!ref_dir && m->lora) {
        *out = peft_base_model(m);
        log_info("reference model: the base weights with the adapter off (no copy)");
        return ST_OK;
    }
    const char *dir = ref_dir ? ref_dir : model_dir;
    TRY(model_load_frozen(dir, m->be, dtype, out, e));
    if ((*out)->cfg.vocab_size != m->cfg.vocab_size) {
        Status st = err_set(e, ST_EINVAL, "--ref_model %s has a vocabulary of %d, the policy %d", dir,
                            (*out)->cfg.vocab_size, m->cfg.vocab_size);
        model_free(*out);
        *out = NULL;
        return st;
    }
    log_info("reference model: %s%s (frozen, %s weights)", ref_dir ? "" : "a frozen copy of ", dir,
             dtype_torch_name((*out)->matrix_dtype));
    return ST_OK;
}

Status pref_codec_open(PrefCodec *pc, const char *model_dir, int needs_codec, const char *chat_template_kwargs, Err *e) {
    memset(pc, 0, sizeof *pc);
    TRY(chat_kwargs_parse(chat_template_kwargs, &pc->kwargs, e));
    if (!needs_codec) return ST_OK;
    Status st = model_codec_load(&pc->mc, model_dir, NULL, e);
    pc->have = st == ST_OK;
    if (st != ST_OK) cJSON_Delete(pc->kwargs), pc->kwargs = NULL;
    return st;
}

const TextCodec *pref_codec_get(const PrefCodec *pc) { return pc->have ? &pc->mc.codec : NULL; }

void pref_codec_free(PrefCodec *pc) {
    if (pc->have) model_codec_free(&pc->mc);
    cJSON_Delete(pc->kwargs);
    memset(pc, 0, sizeof *pc);
}
