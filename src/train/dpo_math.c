// dpo_math.c: TRL's DPO losses (dpo_trainer.py::_compute_loss) and their exact derivatives.
#include "dpo_math.h"

#include <math.h>
#include <string.h>

static const char *const names[DPO_N_LOSS_TYPES] = {
    "sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard",
    "aot", "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"};

const char *dpo_loss_name(DpoLossType t) { return t >= 0 && t < DPO_N_LOSS_TYPES ? names[t] : "?"; }

Status dpo_parse_loss_type(const char *s, DpoLossType *out, Err *e) {
    for (int k = 0; k < DPO_N_LOSS_TYPES; k++)
        if (!strcmp(s, names[k])) {
            *out = (DpoLossType)k;
            return ST_OK;
        }
    return err_set(e, ST_EINVAL, "--loss_type %s: expected one of sigmoid, hinge, ipo, exo_pair, nca_pair, robust, "
                                 "bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, sft, "
                                 "sigmoid_norm", s);
}

Status dpo_parse_fdiv(const char *s, DpoFDiv *out, Err *e) {
    static const char *f[] = {"reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"};
    for (int k = 0; k < 4; k++)
        if (!strcmp(s, f[k])) {
            *out = (DpoFDiv)k;
            return ST_OK;
        }
    return err_set(e, ST_EINVAL, "--f_divergence_type %s: expected reverse_kl, forward_kl, js_divergence or "
                                 "alpha_divergence", s);
}

Status dpo_check_config(const DpoLossConfig *c, Err *e) {
    if (c->n_types < 1 || c->n_types > DPO_MAX_LOSSES)
        return err_set(e, ST_EINVAL, "--loss_type: 1 to %d loss types", DPO_MAX_LOSSES);
    if (!(c->beta > 0)) return err_set(e, ST_EINVAL, "--beta must be positive (got %g)", c->beta);
    for (int k = 0; k < c->n_types; k++) {
        DpoLossType t = c->type[k];
        if (c->use_weighting && (t == DPO_AOT || t == DPO_AOT_UNPAIRED))
            return err_set(e, ST_EUNSUPPORTED, "--use_weighting with --loss_type %s: TRL does not implement WPO "
                                               "weighting for the aot losses (they sort the pairs)", names[t]);
        if (t == DPO_EXO_PAIR && !(c->label_smoothing > 0))
            return err_set(e, ST_EINVAL, "--loss_type exo_pair needs --label_smoothing > 0 (the EXO paper uses 1e-3)");
        if (t == DPO_ROBUST && c->label_smoothing == 0.5)
            return err_set(e, ST_EINVAL, "--loss_type robust divides by 1 - 2 label_smoothing: 0.5 is not allowed");
    }
    return ST_OK;
}

// ---- scalar helpers (stable for large |x|) -------------------------------------------------------
static double sigm(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }
static double logsig(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }

// score s = f(u) and ds/du
static double score(const DpoLossConfig *c, double u, double *ds) {
    switch (c->fdiv) {
    case DPO_F_FORWARD_KL: *ds = exp(-u); return -exp(-u);
    case DPO_F_JS: *ds = sigm(-u); return logsig(u);
    case DPO_F_ALPHA: {
        double a = c->f_alpha;
        if (fabs(a - 1.0) < 1e-6) break;
        double t = (a - 1.0) * u, tc = fmin(t, 80.0), v = exp(tc);  // TRL clamps at 80 (fp32)
        *ds = t <= 80.0 ? v : 0.0;
        return v / (a - 1.0);
    }
    default: break;
    }
    *ds = 1;
    return u;
}

// the smoothed logistic loss of aot / aot_unpaired on one sorted difference, and its derivative
static double aot_term(double beta, double eps, double d, double *g) {
    double x = beta * d;
    *g = beta * (-(1 - eps) * sigm(-x) + eps * sigm(x));
    return -logsig(x) * (1 - eps) - logsig(-x) * eps;
}

// ascending order of v (n) into idx, ties by index (a stable insertion sort: n is a batch)
static void sort_idx(int *idx, const double *v, int n) {
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = 1; i < n; i++) {
        int k = idx[i], j = i - 1;
        while (j >= 0 && v[idx[j]] > v[k]) idx[j + 1] = idx[j], j--;
        idx[j + 1] = k;
    }
}

double dpo_loss(const DpoLossConfig *c, const DpoPairs *p, double *d_logp_c, double *d_logp_r, double *d_sft,
                double *scratch) {
    int n = p->n;
    double beta = c->beta, eps = c->label_smoothing, loss = 0, dsft = 0;
    if (d_logp_c) memset(d_logp_c, 0, (size_t)n * sizeof(double));
    if (d_logp_r) memset(d_logp_r, 0, (size_t)n * sizeof(double));
    if (n <= 0) {
        if (d_sft) *d_sft = 0;
        return 0;
    }
    for (int k = 0; k < c->n_types; k++) {
        DpoLossType t = c->type[k];
        double wk = c->weight[k] / n;
        if (t == DPO_SFT) {  // the batch's token-mean NLL, expanded to every pair
            double wsum = 0;
            for (int i = 0; i < n; i++) wsum += p->wpo ? p->wpo[i] : 1.0;
            loss += wk * wsum * p->sft_nll;
            dsft += wk * wsum;
            continue;
        }
        if (t == DPO_AOT || t == DPO_AOT_UNPAIRED) {  // sorted over the batch
            double *xa = scratch, *xb = scratch + n;   // (n) each
            int *ia = (int *)(scratch + 2 * n), *ib = ia + n;  // (n) each, inside the third n doubles
            for (int i = 0; i < n; i++) {
                if (t == DPO_AOT) xa[i] = p->logp_c[i] - p->logp_r[i], xb[i] = p->ref_c[i] - p->ref_r[i];
                else xa[i] = p->logp_c[i] - p->ref_c[i], xb[i] = p->logp_r[i] - p->ref_r[i];
            }
            sort_idx(ia, xa, n);
            sort_idx(ib, xb, n);
            for (int j = 0; j < n; j++) {
                double g, l = aot_term(beta, eps, xa[ia[j]] - xb[ib[j]], &g);
                loss += wk * l;
                if (t == DPO_AOT) {  // d/d logratio[ia[j]]; the reference side has no gradient
                    if (d_logp_c) d_logp_c[ia[j]] += wk * g;
                    if (d_logp_r) d_logp_r[ia[j]] -= wk * g;
                } else {
                    if (d_logp_c) d_logp_c[ia[j]] += wk * g;
                    if (d_logp_r) d_logp_r[ib[j]] -= wk * g;
                }
            }
            continue;
        }
        for (int i = 0; i < n; i++) {
            double uc = p->logp_c[i] - p->ref_c[i], ur = p->logp_r[i] - p->ref_r[i];
            double dsc, dsr, sc = score(c, uc, &dsc), sr = score(c, ur, &dsr), delta = sc - sr;
            double l = 0, gsc = 0, gsr = 0, guc = 0, gur = 0;  // d l / d s_c, s_r and d l / d u_c, u_r directly
            switch (t) {
            case DPO_SIGMOID: {
                double x = beta * delta;
                l = -logsig(x);
                gsc = -beta * sigm(-x), gsr = -gsc;
                break;
            }
            case DPO_HINGE: {
                double h = 1 - beta * delta;
                l = h > 0 ? h : 0;
                gsc = h > 0 ? -beta : 0, gsr = -gsc;
                break;
            }
            case DPO_IPO:
            case DPO_SIGMOID_NORM: {
                double lc = fmax(p->len_c[i], 1.0), lr = fmax(p->len_r[i], 1.0), d = sc / lc - sr / lr;
                if (t == DPO_IPO) {
                    double r = d - 1 / (2 * beta);
                    l = r * r;
                    gsc = 2 * r / lc, gsr = -2 * r / lr;
                } else {
                    double x = beta * d;
                    l = -logsig(x);
                    gsc = -beta * sigm(-x) / lc, gsr = beta * sigm(-x) / lr;
                }
                break;
            }
            case DPO_EXO_PAIR: {
                double x = beta * delta, qw = sigm(x), ql = sigm(-x);
                l = qw * (logsig(x) - log1p(-eps)) + ql * (logsig(-x) - log(eps));
                double g = qw * ql * (x + log(eps) - log1p(-eps));  // d l / d x
                gsc = beta * g, gsr = -beta * g;
                break;
            }
            case DPO_NCA_PAIR: {
                double rc = beta * sc, rr = beta * sr;
                l = -logsig(rc) - 0.5 * logsig(-rc) - 0.5 * logsig(-rr);
                gsc = beta * (-sigm(-rc) + 0.5 * sigm(rc)), gsr = beta * 0.5 * sigm(rr);
                break;
            }
            case DPO_ROBUST: {
                double x = beta * delta;
                l = (-(1 - eps) * logsig(x) + eps * logsig(-x)) / (1 - 2 * eps);
                double g = (-(1 - eps) * sigm(-x) - eps * sigm(x)) / (1 - 2 * eps);
                gsc = beta * g, gsr = -beta * g;
                break;
            }
            case DPO_BCO_PAIR: {
                double rc = beta * sc, rr = beta * sr;
                l = -logsig(rc) - logsig(-rr);
                gsc = -beta * sigm(-rc), gsr = beta * sigm(rr);
                break;
            }
            case DPO_SPPO_HARD: {
                double a = sc - 0.5 / beta, b = sr + 0.5 / beta;
                l = a * a + b * b;
                gsc = 2 * a, gsr = 2 * b;
                break;
            }
            case DPO_APO_ZERO: {  // on the log ratios themselves, not the f scores
                double xc = beta * uc, xr = beta * ur;
                l = 1 - sigm(xc) + sigm(xr);
                guc = -beta * sigm(xc) * sigm(-xc), gur = beta * sigm(xr) * sigm(-xr);
                break;
            }
            case DPO_APO_DOWN: {
                double xc = beta * uc, x = beta * delta;
                l = sigm(xc) + 1 - sigm(x);
                guc = beta * sigm(xc) * sigm(-xc);
                gsc = -beta * sigm(x) * sigm(-x), gsr = -gsc;
                break;
            }
            case DPO_DISCOPOP: {
                double x = beta * delta, tau = c->discopop_tau, m = sigm(x / tau), dm = m * sigm(-x / tau) / tau;
                double lg = -logsig(x), ex = exp(-x);
                l = lg * (1 - m) + ex * m;
                double g = -sigm(-x) * (1 - m) - lg * dm - ex * m + ex * dm;  // d l / d x
                gsc = beta * g, gsr = -beta * g;
                break;
            }
            default: break;
            }
            double wi = p->wpo ? p->wpo[i] : 1.0;
            loss += wk * wi * l;
            if (d_logp_c) d_logp_c[i] += wk * wi * (gsc * dsc + guc);
            if (d_logp_r) d_logp_r[i] += wk * wi * (gsr * dsr + gur);
        }
    }
    if (d_sft) *d_sft = dsft;
    return loss;
}

// ---- KTO -----------------------------------------------------------------------------------------

Status kto_parse_loss_type(const char *s, KtoLossType *out, Err *e) {
    if (!strcmp(s, "kto")) *out = KTO_LOSS_KTO;
    else if (!strcmp(s, "apo_zero_unpaired")) *out = KTO_LOSS_APO_ZERO_UNPAIRED;
    else return err_set(e, ST_EINVAL, "--loss_type %s: expected kto or apo_zero_unpaired", s);
    return ST_OK;
}

double kto_loss(const KtoLossConfig *c, int n, const double *logp, const double *ref, const int *label, double kl,
                double *d_logp) {
    double beta = c->beta, loss = 0;
    for (int i = 0; i < n; i++) {
        double u = logp[i] - ref[i], w = label[i] ? c->desirable_weight : c->undesirable_weight, l, g;
        if (c->type == KTO_LOSS_KTO) {
            double x = label[i] ? beta * (u - kl) : beta * (kl - u), s = sigm(x);
            l = 1 - s;
            g = (label[i] ? -beta : beta) * s * (1 - s);
        } else {
            double s = sigm(beta * u);
            l = label[i] ? 1 - s : s;
            g = (label[i] ? -beta : beta) * s * (1 - s);
        }
        loss += w * l / n;
        if (d_logp) d_logp[i] = w * g / n;
    }
    return loss;
}
