// peft.c: attaching the adapter a trainer trains.
#include "peft.h"

#include "../core/log.h"
#include "tp.h"

Status peft_load_model(const char *dir, Backend *be, const PeftConfig *p, int dtype, Model **out, Err *e) {
    return peft_load_model_part(dir, be, p, dtype, NULL, out, e);
}

Status peft_load_model_part(const char *dir, Backend *be, const PeftConfig *p, int dtype, const ModelPart *part,
                            Model **out, Err *e) {
    ModelLoadOpts o = {.frozen = p->use_peft, .part = part};
    return model_load_opts(dir, be, p->use_peft ? dtype : DT_F32, &o, out, e);
}

Status peft_prepare(Model *m, const PeftConfig *p, int gradient_checkpointing, uint64_t seed, Err *e) {
    m->grad_ckpt = gradient_checkpointing != 0;
    if (!p->use_peft) {
        if (p->adapter)
            return err_set(e, ST_EINVAL, "--adapter %s: continuing an adapter needs --use_peft (or merge it first: "
                                         "still merge)", p->adapter);
        return ST_OK;
    }
    if (p->adapter) {
        TRY(tp_lora_load(m, p->adapter, e));  // a part of a model (tensor parallel): its part of the adapter
        m->lora->seed = seed;
        m->lora->cfg.dropout = p->lora.dropout;  // training settings of this run; the weights' r, alpha, targets
        log_info("LoRA: continuing %s: r %d, alpha %g%s, %zu trainable parameters", p->adapter, m->lora->cfg.r,
                 m->lora->cfg.alpha, m->lora->cfg.use_rslora ? " (rslora)" : "", lora_n_params(m->lora));
    } else {
        TRY(tp_lora_attach(m, &p->lora, seed, e));
        log_info("LoRA: r %d, alpha %g%s, dropout %g, %d tensors, %zu trainable parameters (%.3f%% of %zu)",
                 p->lora.r, p->lora.alpha, p->lora.use_rslora ? " (rslora)" : "", p->lora.dropout, m->lora->tt.n,
                 lora_n_params(m->lora), 100.0 * (double)lora_n_params(m->lora) / (double)m->tt.n_params,
                 m->tt.n_params);
    }
    if (m->grad_ckpt) log_info("gradient checkpointing: each layer's forward is recomputed in the backward pass");
    return ST_OK;
}

Model *peft_base_model(const Model *m) {
    if (!m->lora) return NULL;
    Model *s = model_share(m);
    s->share_of = m;  // a sharded base (ZeRO-3, fsdp.h): m's hooks gather its layers for s too
    if (m->hooks && m->hooks->reduce) s->hooks = m->hooks;  // a part of a model: its group's all-reduces
    return s;
}
