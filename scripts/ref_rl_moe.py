#!/usr/bin/python3
"""Reference fixtures for `still distill` and `still grpo` on the mixture-of-experts families: one step's
loss and every parameter's gradient, the load-balancing loss included, in float64 PyTorch, for
tests/model/test_rl_moe.c. The models are tests/data/models/{qwen3_moe,mixtral,gpt_oss} (output_router_logits
true, router_aux_loss_coef 0.05) through the ports of scripts/ref_moe.py and scripts/ref_gpt_oss.py.

distill (scripts/ref_distill.py's rows, its B, GA, max_completion_length and EOS ids; teacher
tests/data/models/qwen3_untied): the step loss is sum_tokens jsd(S, T) / N_gen (TRL's _jsd_divergence,
beta and tau per family) + router_aux_loss_coef * the mean over the GA micro-batches of each micro-batch's
load_balancing_loss_func, over the router logits of the student's forward of its rows (prompt and
completion up to and including the first EOS: the tokens after it are not part of the rollout).
TRL's distillation trainer has no load-balancing term; still adds it as still sft does (docs/models.md).

grpo (TRL's GRPOTrainer on fixed completions, scripts/ref_grpo.py's rounds, prompts, EOS and reward
weights; one optimizer step, num_iterations 1): the policy loss of each micro-batch as ref_grpo.py
computes it, plus router_aux_loss_coef * aux_loss / gradient_accumulation_steps, aux_loss the
micro-batch forward's load_balancing_loss_func under its attention_mask = cat(prompt_mask,
completion_mask): prompt tokens and the completion up to its first EOS, and with
mask_truncated_completions no completion token of a truncated row (TRL zeroes that row's
completion_mask before it builds the attention mask); trl/trainer/grpo_trainer.py, _compute_loss.
TRL takes the coefficient from GRPOConfig.router_aux_loss_coef; still reads config.json's, so the case
sets both to the model's 0.05.

Routing is piecewise constant: every forward checks that no token's K-th and (K+1)-th router logits
are within ref_moe.MIN_GAP (gpt_oss: no clamp input within ref_gpt_oss.MIN_CLAMP_GAP of its limit),
and every case that the load-balancing term moves the router gradients by more than 1e-3 of their
norm (a test that dropped it would fail). Writes tests/data/rl_moe/cases.json (settings, rows, rounds)
and <case>.safetensors: loss, aux_loss, grad_norm, grad.<HF name> (kl_student_teacher for distill,
advantages for grpo). Run: /usr/bin/python3 scripts/ref_rl_moe.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_distill  # noqa: E402
import ref_gpt_oss  # noqa: E402
import ref_grpo  # noqa: E402
import ref_model  # noqa: E402
import ref_moe  # noqa: E402
from ref_sft import read_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PORTS = {"qwen3_moe": ref_moe, "mixtral": ref_moe, "gpt_oss": ref_gpt_oss}
TEACHER = "qwen3_untied"
DISTILL = {  # family: beta, tau
    "qwen3_moe": (0.5, 1.0),
    "mixtral": (0.0, 1.2),
    "gpt_oss": (0.5, 0.9),
}
GRPO = {  # family: the trainer's settings (ref_grpo.BASE's otherwise)
    "qwen3_moe": dict(loss_type="grpo", seed=11),
    "mixtral": dict(loss_type="dapo", mask_truncated_completions=True, seed=14),
    "gpt_oss": dict(loss_type="bnpo", mask_truncated_completions=True, seed=18),
}
MIN_AUX_SHARE = 1e-3


class Student:
    """A family's tiny model in float64 with the routing checks of every forward."""

    def __init__(self, family):
        d = os.path.join(ROOT, "tests", "data", "models", family)
        self.cfg = json.load(open(os.path.join(d, "config.json")))
        self.w32 = read_safetensors(os.path.join(d, "model.safetensors"))
        self.port = PORTS[family]
        self.E, self.K = self.port.n_experts(self.cfg), self.cfg["num_experts_per_tok"]
        self.coef = self.cfg["router_aux_loss_coef"]
        self.gap, self.clamps = float("inf"), []

    def weights(self):
        return {n: t.to(torch.float64).requires_grad_(True) for n, t in self.w32.items()}

    def forward(self, w, ids):
        if self.port is ref_gpt_oss:
            logits, rl = self.port.forward(self.cfg, w, ids, self.clamps)
        else:
            logits, rl = self.port.forward(self.cfg, w, ids)
        self.gap = min(self.gap, ref_moe.min_gap(rl, self.K))
        return logits, rl

    def aux(self, router_logits_of_rows):
        """load_balancing_loss_func over the real tokens of a micro-batch's rows."""
        per_layer = [torch.cat(ls, 0) for ls in zip(*router_logits_of_rows)]
        return ref_moe.load_balancing_loss(per_layer, self.E, self.K)

    def check(self, what):
        assert self.gap > ref_moe.MIN_GAP, f"{what}: router logits within {self.gap:.2g} of a routing change"
        if self.clamps:
            cgap = ref_gpt_oss.clamp_gap(self.cfg, self.clamps)[0]
            assert cgap > ref_gpt_oss.MIN_CLAMP_GAP, f"{what}: a clamp input within {cgap:.2g} of its limit"


def router_names(w):
    return [n for n in w if n.endswith("mlp.gate.weight") or n.endswith("block_sparse_moe.gate.weight")
            or ".mlp.router." in n]


def finish(s, w, loss, aux_terms, what):
    """Backward of loss + coef * mean(aux_terms); checks the aux term's share of the router gradient."""
    aux = sum(aux_terms) / len(aux_terms)
    rn = router_names(w)
    g_aux = torch.autograd.grad(s.coef * aux, [w[n] for n in rn], retain_graph=True)
    (loss + s.coef * aux).backward()
    tot = torch.sqrt(sum((w[n].grad ** 2).sum() for n in rn))
    share = torch.sqrt(sum((g ** 2).sum() for g in g_aux)) / tot
    assert share > MIN_AUX_SHARE, f"{what}: the aux loss moves the router gradient by only {share:.2g}"
    s.check(what)
    gn = torch.sqrt(sum((t.grad ** 2).sum() for t in w.values() if t.grad is not None))
    out = {"loss": np.array([(loss + s.coef * aux).item()]), "aux_loss": np.array([aux.item()]),
           "grad_norm": np.array([gn.item()])}
    for n, t in w.items():
        out["grad." + n] = (t.grad if t.grad is not None else torch.zeros_like(t)).detach().numpy()
    return out, share.item()


def distill_case(family, rows):
    s = Student(family)
    beta, tau = DISTILL[family]
    w = s.weights()
    td = os.path.join(ROOT, "tests", "data", "models", TEACHER)
    tcfg = json.load(open(os.path.join(td, "config.json")))
    tw = {n: t.to(torch.float64) for n, t in read_safetensors(os.path.join(td, "model.safetensors")).items()}
    n_gen = sum(ref_distill.mask_len(r["completion"]) for r in rows)
    loss, kl, ntok, aux_terms = 0, 0.0, 0, []
    for g in range(ref_distill.GA):
        rls = []
        for r in rows[g * ref_distill.B:(g + 1) * ref_distill.B]:
            m = ref_distill.mask_len(r["completion"])
            p, comp = r["prompt"], r["completion"][:m]
            logits, rl = s.forward(w, p + comp)
            rls.append(rl)
            zs = logits[len(p) - 1:len(p) - 1 + m]
            with torch.no_grad():
                zt = ref_model.forward(tcfg, tw, p + comp)[len(p) - 1:len(p) - 1 + m]
            ls, lt = F.log_softmax(zs / tau, -1), F.log_softmax(zt / tau, -1)
            loss = loss + ref_distill.jsd_divergence(ls, lt, beta).sum() / n_gen
            with torch.no_grad():
                kl += F.kl_div(F.log_softmax(zt, -1), F.log_softmax(zs, -1), reduction="none",
                               log_target=True).sum().item()
            ntok += m
        aux_terms.append(s.aux(rls))
    out, share = finish(s, w, loss, aux_terms, f"distill {family}")
    out["kl_student_teacher"] = np.array([kl / ntok])
    print(f"distill {family}: loss {out['loss'][0]:.6f} aux {out['aux_loss'][0]:.6f} "
          f"grad_norm {out['grad_norm'][0]:.5f} aux share of the router gradient {share:.3g}")
    return out, dict(beta=beta, tau=tau, n_gen=n_gen)


def grpo_case(family, prompt_ids):
    s = Student(family)
    c = dict(ref_grpo.BASE, **GRPO[family])
    w = s.weights()
    rows = ref_grpo.make_round(c, 0)
    mask = ref_grpo.masks(c, rows)
    adv = ref_grpo.grpo_advantages(c, ref_grpo.total_rewards(rows))
    num_items = mask.sum().item()
    B, GA, Cm = c["B"], c["GA"], ref_grpo.C
    lo, hi = 1 - c["epsilon"], 1 + c["epsilon"]
    loss, aux_terms = 0, []
    for g in range(GA):
        lps, rls = [], []
        for i in range(g * B, (g + 1) * B):
            r = rows[i]
            p, comp = prompt_ids[r["prompt"]], ref_grpo.kept(r["ids"])
            if mask[i].sum() == 0:  # attention_mask: no completion token of a masked row
                comp = []
            logits, rl = s.forward(w, p + comp)
            rls.append(rl)
            z = logits[len(p) - 1:len(p) - 1 + len(comp)] / ref_grpo.TEMPERATURE
            lp = torch.log_softmax(z, -1).gather(1, torch.tensor(comp, dtype=torch.long)[:, None])[:, 0]
            lps.append(torch.cat([lp, torch.zeros(Cm - len(comp))]))
        lp, m, A = torch.stack(lps), mask[g * B:(g + 1) * B], adv[g * B:(g + 1) * B, None]
        ratio = torch.exp(lp - lp.detach())  # iteration 0: old log-probs = the current ones, detached
        tok = -torch.min(ratio * A, torch.clamp(ratio, lo, hi) * A)
        lt = c["loss_type"]
        if lt == "grpo":
            loss = loss + ((tok * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean() / GA
        elif lt == "bnpo":
            loss = loss + (tok * m).sum() / m.sum().clamp(min=1.0) / GA
        else:  # dapo
            loss = loss + (tok * m).sum() / max(num_items, 1.0)
        aux_terms.append(s.aux(rls))
    out, share = finish(s, w, loss, aux_terms, f"grpo {family}")
    out["advantages"] = adv.numpy()
    n_masked = int((mask.sum(1) == 0).sum())
    print(f"grpo {family}: loss {out['loss'][0]:.6f} aux {out['aux_loss'][0]:.6f} grad_norm {out['grad_norm'][0]:.5f} "
          f"rows without mask {n_masked}, aux share of the router gradient {share:.3g}")
    settings = {k: v for k, v in c.items() if k not in ("seed", "unscorable")}
    settings["rounds"] = [rows]
    return out, settings


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "rl_moe")
    os.makedirs(out_dir, exist_ok=True)
    rows = ref_distill.make_rows()
    prompt_ids = [list(p.encode()) for p in ref_grpo.PROMPTS]
    distill, grpo = {}, {}
    for family in PORTS:
        res, info = distill_case(family, rows)
        ref_model.write_safetensors(os.path.join(out_dir, f"distill_{family}.safetensors"), res)
        distill[family] = info
        res, info = grpo_case(family, prompt_ids)
        ref_model.write_safetensors(os.path.join(out_dir, f"grpo_{family}.safetensors"), res)
        grpo[family] = info
    doc = dict(distill=dict(teacher=TEACHER, eos=ref_distill.EOS, B=ref_distill.B, GA=ref_distill.GA,
                            max_completion_length=ref_distill.C, pad_to_multiple_of=ref_distill.PAD, rows=rows,
                            cases=distill),
               grpo=dict(prompts="tests/data/grpo/prompts.jsonl", tokenizer="tests/data/grpo/model",
                         prompt_ids=prompt_ids, eos=ref_grpo.EOS, max_completion_length=ref_grpo.C,
                         temperature=ref_grpo.TEMPERATURE, reward_weights=ref_grpo.WEIGHTS, cases=grpo))
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
