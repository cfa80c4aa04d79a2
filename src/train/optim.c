// optim.c: AdamW steps, schedules and clipping; the arithmetic is the backend's adamw op.
#include "optim.h"

#include <math.h>
#include <string.h>

static const char *sched_names[] = {"linear", "cosine", "constant", "constant_with_warmup"};

Status optim_parse_schedule(const char *s, SchedType *out, Err *e) {
    for (size_t i = 0; i < ARRAY_LEN(sched_names); i++)
        if (!strcmp(s, sched_names[i])) return *out = (SchedType)i, ST_OK;
    return err_set(e, ST_EINVAL, "--lr_scheduler_type %s: expected linear, cosine, constant or constant_with_warmup", s);
}

const char *optim_schedule_name(SchedType s) { return sched_names[s]; }

int optim_warmup_steps(double warmup_steps, double warmup_ratio, int total_steps) {
    if (warmup_steps >= 1) return (int)warmup_steps;
    if (warmup_steps > 0) return (int)ceil(warmup_steps * total_steps);
    if (warmup_ratio > 0) return (int)ceil(warmup_ratio * total_steps);
    return 0;
}

double optim_lr_at(const OptimConfig *c, int done) {
    int w = c->warmup_steps, total = c->total_steps;
    double f = 1.0;
    if (c->sched == SCHED_CONSTANT) return c->lr;
    if (done < w) return c->lr * (double)done / (double)MAX(1, w);
    switch (c->sched) {
    case SCHED_LINEAR: f = MAX(0.0, (double)(total - done) / (double)MAX(1, total - w)); break;
    case SCHED_COSINE: {
        double progress = (double)(done - w) / (double)MAX(1, total - w);
        f = MAX(0.0, 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress)));
        break;
    }
    default: break;
    }
    return c->lr * f;
}

void optim_init(Optim *o, Model *m, const OptimConfig *cfg) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->n = m->tt.n_params;
    o->m = m->be->alloc(m->be, o->n * sizeof(float));
    o->v = m->be->alloc(m->be, o->n * sizeof(float));
}

void optim_free(Optim *o, Backend *be) {
    if (o->m) be->free(be, o->m);
    if (o->v) be->free(be, o->v);
    o->m = o->v = NULL;
}

double optim_grad_norm(const Optim *o, const Model *m) { return sqrt(m->be->sumsq(m->be, m->grads, o->n)); }

void optim_step(Optim *o, Model *m, double *grad_norm, double *lr) {
    Backend *be = m->be;
    CHECK_MSG(m->matrix_dtype == DT_F32, "training needs fp32 master weights");
    double norm = optim_grad_norm(o, m);
    float clip = 1.0f;
    if (o->cfg.max_grad_norm > 0) {
        // torch.nn.utils.clip_grad_norm_: coef = max_norm / (total + 1e-6), clamped to 1 (fp32)
        float coef = (float)o->cfg.max_grad_norm / ((float)norm + 1e-6f);
        clip = coef < 1.0f ? coef : 1.0f;
    }
    double rate = optim_lr_at(&o->cfg, o->t);
    o->t++;
    for (int i = 0; i < m->tt.n; i++) {
        const TensorInfo *ti = &m->tt.t[i];
        float *p = (float *)((char *)m->params + ti->offset);
        be->adamw(be, p, o->m + ti->goffset, o->v + ti->goffset, m->grads + ti->goffset, ti->numel, rate, o->cfg.beta1,
                  o->cfg.beta2, o->cfg.eps, ti->decay ? o->cfg.weight_decay : 0.0, o->t, clip);
    }
    if (grad_norm) *grad_norm = norm;
    if (lr) *lr = rate;
}
