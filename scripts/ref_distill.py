#!/usr/bin/python3
"""Reference fixtures for `still distill`: one optimizer step's loss on fixed rollouts, in float64 PyTorch
with TRL's primitives (F.kl_div(..., log_target=True), torch.logsumexp), for tests/model/test_distill_parity.c.

Student tests/data/models/qwen3_tied, teacher tests/data/models/qwen3_untied (same vocabulary). One step =
GA micro-batches of B rows (prompt, teacher prompt, completion); completion tokens up to and including the first
EOS are trained on; the loss is normalised by those tokens over the whole step (DistillationTrainer, #6478):
  jsd               sum_tokens jsd(S, T) / N_gen, S = log_softmax(z_s / tau), T = log_softmax(z_t / tau),
                    TRL's _jsd_divergence (beta 0 forward KL, 1 reverse KL, else the probability-space mixture);
                    top_k > 0: the teacher's top-k logits gathered on both sides and renormalised (OPSD top_k_loss)
  sampled           sum_tokens -sg(log p_T(x) - log p_S(x)) log p_S(x) / N_gen (Thinking-Machines / OPSD tinker)
Also kl = mean over those tokens of KL(student || teacher) at temperature 1 (kl_student_teacher), and the
gradient norm of the step loss w.r.t. every student parameter. Each sequence runs unpadded through
ref_model.forward; still runs them left-padded on one static shape, so agreement also checks the layout.
Writes tests/data/distill/cases.json. Run: /usr/bin/python3 scripts/ref_distill.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import ref_model  # noqa: E402
from ref_sft import read_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
ROOT = os.path.join(os.path.dirname(__file__), "..")
STUDENT, TEACHER = "qwen3_tied", "qwen3_untied"
EOS = [2, 5]
B, GA, C, PAD = 2, 2, 12, 8

CASES = [  # name, loss, beta, tau, top_k, teacher prompts differ
    ("forward_kl", "jsd", 0.0, 1.0, 0, False),
    ("jsd_half", "jsd", 0.5, 1.0, 0, False),
    ("reverse_kl", "jsd", 1.0, 1.0, 0, False),
    ("jsd_tau", "jsd", 0.5, 1.5, 0, False),
    ("reverse_kl_tau", "jsd", 1.0, 0.7, 0, False),
    ("forward_kl_topk", "jsd", 0.0, 1.0, 5, False),
    ("jsd_topk_tau", "jsd", 0.3, 1.2, 7, False),
    ("sampled", "sampled", 1.0, 1.0, 0, False),
    ("sampled_tau", "sampled", 1.0, 1.3, 0, False),
    ("self_prompts", "jsd", 0.5, 1.1, 0, True),
]


def jsd_divergence(s, t, beta):
    """TRL's _jsd_divergence (trl/experimental/distillation) on log-probabilities s (student), t (teacher)."""
    if beta == 0:
        return F.kl_div(s, t, reduction="none", log_target=True)
    if beta == 1:
        return F.kl_div(t, s, reduction="none", log_target=True)
    b = torch.tensor(beta, dtype=s.dtype)
    m = torch.logsumexp(torch.stack([s + torch.log1p(-b), t + torch.log(b)]), dim=0)
    return b * F.kl_div(m, t, reduction="none", log_target=True) + (1 - b) * F.kl_div(m, s, reduction="none",
                                                                                       log_target=True)


def mask_len(comp):
    for i, x in enumerate(comp):
        if x in EOS:
            return i + 1
    return len(comp)


def make_rows():
    g = np.random.default_rng(11)
    rows = []
    for i in range(B * GA):
        p = [int(x) for x in g.integers(6, 384, size=int(g.integers(3, 9)))]
        tp = [int(x) for x in g.integers(6, 384, size=int(g.integers(5, 15)))]
        n = int(g.integers(4, C + 1))
        c = [int(x) for x in g.integers(6, 384, size=n)]
        if i % 2 == 0:  # an EOS inside, junk after it
            c[int(g.integers(1, n - 1))] = EOS[i // 2 % 2]
        rows.append(dict(prompt=p, teacher_prompt=tp, completion=c))
    rows[3]["completion"] = rows[3]["completion"][:C]  # one completion without EOS (truncated)
    return rows


def load(name, grad):
    d = os.path.join(ROOT, "tests", "data", "models", name)
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {n: t.to(torch.float64).requires_grad_(grad) for n, t in read_safetensors(os.path.join(d, "model.safetensors")).items()}
    return cfg, w


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "distill")
    os.makedirs(out, exist_ok=True)
    scfg, sw = load(STUDENT, True)
    tcfg, tw = load(TEACHER, False)
    rows = make_rows()
    n_gen = sum(mask_len(r["completion"]) for r in rows)
    cases = {}
    for name, kind, beta, tau, top_k, self_prompts in CASES:
        for t in sw.values():
            t.grad = None
        loss, kl, ntok = 0, 0.0, 0
        for r in rows:
            m = mask_len(r["completion"])
            comp = r["completion"][:m]
            p, tp = r["prompt"], (r["teacher_prompt"] if self_prompts else r["prompt"])
            zs = ref_model.forward(scfg, sw, p + comp)[len(p) - 1:len(p) - 1 + m]
            with torch.no_grad():
                zt = ref_model.forward(tcfg, tw, tp + comp)[len(tp) - 1:len(tp) - 1 + m]
            tgt = torch.tensor(comp)
            if kind == "jsd":
                if top_k > 0:
                    idx = torch.topk(zt, top_k, dim=-1).indices
                    s = F.log_softmax(zs.gather(-1, idx) / tau, dim=-1)
                    t = F.log_softmax(zt.gather(-1, idx) / tau, dim=-1)
                else:
                    s, t = F.log_softmax(zs / tau, dim=-1), F.log_softmax(zt / tau, dim=-1)
                loss = loss + jsd_divergence(s, t, beta).sum() / n_gen
            else:
                lps = (zs / tau - torch.logsumexp(zs / tau, -1, keepdim=True)).gather(-1, tgt[:, None])[:, 0]
                lpt = (zt / tau - torch.logsumexp(zt / tau, -1, keepdim=True)).gather(-1, tgt[:, None])[:, 0]
                adv = (lpt - lps).detach()
                loss = loss + (-adv * lps).sum() / n_gen
            with torch.no_grad():
                kl += F.kl_div(F.log_softmax(zt, -1), F.log_softmax(zs, -1), reduction="none",
                               log_target=True).sum().item()
            ntok += m
        loss.backward()
        gn = torch.sqrt(sum((t.grad ** 2).sum() for t in sw.values() if t.grad is not None)).item()
        # 12 significant digits: float64 sums differ in the last bits between machines (BLAS kernels), and the
        # fixture should regenerate byte for byte anywhere (the C test's tolerances are far looser)
        r12 = lambda x: float(f"{x:.12g}")
        cases[name] = dict(loss_kind=kind, beta=beta, tau=tau, top_k=top_k, self_prompts=self_prompts,
                           loss=r12(loss.item()), kl_student_teacher=r12(kl / ntok), grad_norm=r12(gn))
    doc = dict(student=STUDENT, teacher=TEACHER, eos=EOS, B=B, GA=GA, max_completion_length=C, pad_to_multiple_of=PAD,
               n_gen=n_gen, rows=rows, cases=cases)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
