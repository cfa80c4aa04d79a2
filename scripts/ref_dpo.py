#!/usr/bin/python3
"""Reference fixtures for `still dpo`: two optimizer steps of TRL's DPOTrainer, in float64 PyTorch.

Written from trl/trainer/dpo_trainer.py (TRL 1.10.0.dev0, HEAD f2cd577): DataCollatorForPreference
(prompt + completion per row, truncated to max_length keeping the start or the end, completion_mask),
_prepare_dataset (rows whose prompt alone has max_length tokens or more are dropped), and
_compute_loss: per-token log-probs of the completion tokens (selective_log_softmax on logits[:-1]
against ids[1:]), summed per sequence (LD-DPO: tokens past the shorter completion weighted ld_alpha),
the f-divergence scores, every loss type of loss_type combined with loss_weights, WPO weights, and
the metrics TRL logs (rewards/*, logps/*, logits/*, entropy, mean_token_accuracy).

Policy tests/data/models/qwen3_tied, reference tests/data/models/qwen3_untied (another model, same
vocabulary). Data: tests/data/dpo/pairs.jsonl (pre-tokenised prompt_ids / chosen_ids / rejected_ids).
A step = GA micro-batches of B pairs in file order (shuffle off = TRL's sequential sampling); the
step's loss = sum of micro-batch losses / GA (HF Trainer); gradient clipped at max_grad_norm as
clip_grad_norm_; torch.optim.AdamW (constant learning rate, no weight decay). Logged per step (TRL's
log averages the per-micro-batch values): loss, grad_norm and every metric, at step 1 (the initial
weights) and step 2 (after one AdamW update, so the gradient of step 1 is checked through it).
Each sequence runs unpadded through ref_model.forward; still runs them padded in one static batch.
Writes tests/data/dpo/{pairs.jsonl, cases.json}. Run: /usr/bin/python3 scripts/ref_dpo.py [OUT_DIR]
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import ref_model  # noqa: E402
from ref_sft import read_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
POLICY, REF = "qwen3_tied", "qwen3_untied"
B, GA, STEPS, MAX_LEN, PAD = 2, 2, 2, 14, 8
# adam_epsilon 1e-4: Adam's first update lr * g / (|g| + eps) is then linear in the small gradient entries, so
# step 2 checks gradient magnitudes (with 1e-8 it would be nearly lr * sign(g))
LR, B1, B2, EPS, MAX_NORM = 2e-3, 0.9, 0.999, 1e-4, 1.0

# name -> DPOConfig fields that differ from the defaults
CASES = {
    "sigmoid": {},
    "hinge": dict(loss_type=["hinge"]),
    "ipo": dict(loss_type=["ipo"]),
    "exo_pair": dict(loss_type=["exo_pair"], label_smoothing=1e-3),
    "nca_pair": dict(loss_type=["nca_pair"]),
    "robust": dict(loss_type=["robust"], label_smoothing=0.1),
    "bco_pair": dict(loss_type=["bco_pair"]),
    "sppo_hard": dict(loss_type=["sppo_hard"]),
    "aot": dict(loss_type=["aot"], label_smoothing=0.05),
    "aot_unpaired": dict(loss_type=["aot_unpaired"]),
    "apo_zero": dict(loss_type=["apo_zero"]),
    "apo_down": dict(loss_type=["apo_down"]),
    "discopop": dict(loss_type=["discopop"]),
    "sft": dict(loss_type=["sft"]),
    "sigmoid_norm": dict(loss_type=["sigmoid_norm"]),
    "mpo": dict(loss_type=["sigmoid", "bco_pair", "sft"], loss_weights=[0.8, 0.2, 1.0]),
    # exp(-u) of the f-divergences needs log ratios of order 1: the policy is its own reference there
    "forward_kl": dict(f_divergence_type="forward_kl", ref="policy"),
    "js_divergence": dict(f_divergence_type="js_divergence", beta=0.5, ref="policy"),
    "alpha_divergence": dict(f_divergence_type="alpha_divergence", f_alpha_divergence_coef=0.3, ref="policy"),
    "ld_alpha": dict(ld_alpha=0.4),
    "wpo": dict(use_weighting=True, loss_type=["sigmoid", "sft"]),
    "keep_end": dict(truncation_mode="keep_end", beta=0.3),
}


def sample(cfg, w, prompt, n, g):
    """n tokens drawn from the policy at temperature 1 after prompt (realistic completions: the WPO
    weights and the log ratios stay well inside floating-point range)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            p = torch.softmax(ref_model.forward(cfg, w, ids)[-1], -1).numpy()
            ids.append(int(min(np.searchsorted(np.cumsum(p), g.random() * p.sum()), len(p) - 1)))
    return ids[len(prompt):]


def make_pairs(cfg, w):
    g = np.random.default_rng(19)
    rows = []
    for i in range(2 * B * GA):
        p = [int(x) for x in g.integers(3, 384, size=int(g.integers(2, 7)))]
        c = sample(cfg, w, p, int(g.integers(2, 10)), g)
        r = sample(cfg, w, p, int(g.integers(1, 9)), g)
        rows.append(dict(prompt_ids=p, chosen_ids=c, rejected_ids=r))
    rows[1]["chosen_ids"] = rows[1]["chosen_ids"] + [int(x) for x in g.integers(3, 384, size=8)]  # truncated
    # a prompt of max_length tokens: TRL drops the row (keep_start)
    rows.insert(3, dict(prompt_ids=[int(x) for x in g.integers(3, 384, size=MAX_LEN)], chosen_ids=[5, 6],
                        rejected_ids=[7]))
    return rows


def load(name, grad):
    d = os.path.join(ROOT, "tests", "data", "models", name)
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {n: t.to(torch.float64).requires_grad_(grad) for n, t in read_safetensors(os.path.join(d, "model.safetensors")).items()}
    return cfg, w


def row_of(prompt, comp, keep_end):
    ids, mask = prompt + comp, [0] * len(prompt) + [1] * len(comp)
    sl = slice(-MAX_LEN, None) if keep_end else slice(None, MAX_LEN)
    return ids[sl], mask[sl]


def seq_terms(cfg, w, ids, mask):
    """Per-token log-probs (T-1), shifted mask, and detached logits (T-1, V) of one sequence."""
    z = ref_model.forward(cfg, w, ids)[:-1]
    lp = (z - torch.logsumexp(z, -1, keepdim=True)).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    return lp, torch.tensor(mask[1:], dtype=torch.float64), z


def fscore(u, c):
    f = c.get("f_divergence_type", "reverse_kl")
    if f == "forward_kl":
        return -torch.exp(-u)
    if f == "js_divergence":
        return F.logsigmoid(u)
    if f == "alpha_divergence":
        a = c["f_alpha_divergence_coef"]
        if abs(a - 1.0) < 1e-6:
            return u
        return torch.exp(torch.clamp((a - 1.0) * u, max=80.0)) / (a - 1.0)
    return u


def micro_batch(pcfg, pw, rcfg, rw, pairs, c):
    keep_end = c.get("truncation_mode") == "keep_end"
    beta, ls = c.get("beta", 0.1), c.get("label_smoothing", 0.0)
    ld = c.get("ld_alpha")
    seqs = [row_of(x["prompt_ids"], x["chosen_ids"], keep_end) for x in pairs] + \
           [row_of(x["prompt_ids"], x["rejected_ids"], keep_end) for x in pairs]
    n = len(pairs)
    terms = [seq_terms(pcfg, pw, ids, m) for ids, m in seqs]
    with torch.no_grad():
        rterms = [seq_terms(rcfg, rw, ids, m) for ids, m in seqs]
    tl = [int(m.sum().item()) for _, m, _ in terms]

    def seqsum(lp, m, k):
        if ld is None:
            return (lp * m).sum()
        shared = min(tl[k % n], tl[k % n + n])
        pos = torch.cumsum(m, 0)
        return (lp * m * ((pos > 0) & (pos <= shared))).sum() + ld * (lp * m * (pos > shared)).sum()

    logps = torch.stack([seqsum(lp, m, k) for k, (lp, m, _) in enumerate(terms)])
    ref = torch.stack([seqsum(lp, m, k) for k, (lp, m, _) in enumerate(rterms)])
    lc, lr, rc, rr = logps[:n], logps[n:], ref[:n], ref[n:]
    uc, ur = lc - rc, lr - rr
    sc, sr = fscore(uc, c), fscore(ur, c)
    delta = sc - sr
    lens = torch.tensor([float(sum(m)) for _, m in seqs])  # unshifted completion_mask sums
    len_c, len_r = lens[:n].clamp(min=1.0), lens[n:].clamp(min=1.0)
    types = c.get("loss_type", ["sigmoid"])
    weights = c.get("loss_weights") or [1.0] * len(types)
    if c.get("use_weighting"):
        ws = []
        with torch.no_grad():
            for lp, m, z in terms:
                log_denom = torch.logsumexp(2 * z, -1) - 2 * torch.logsumexp(z, -1)
                ws.append(torch.exp(((lp - log_denom) * m).sum() / m.sum().clamp(min=1)))
        wpo = torch.stack(ws[:n]) * torch.stack(ws[n:])
    loss = 0
    for t, wt in zip(types, weights):
        x = beta * delta
        if t == "sigmoid":
            l = -F.logsigmoid(x)
        elif t == "hinge":
            l = torch.relu(1 - x)
        elif t == "ipo":
            l = (sc / len_c - sr / len_r - 1 / (2 * beta)) ** 2
        elif t == "exo_pair":
            eps = torch.tensor(ls)
            l = torch.sigmoid(x) * (F.logsigmoid(x) - torch.log1p(-eps)) + \
                torch.sigmoid(-x) * (F.logsigmoid(-x) - torch.log(eps))
        elif t == "nca_pair":
            l = -F.logsigmoid(beta * sc) - 0.5 * F.logsigmoid(-beta * sc) - 0.5 * F.logsigmoid(-beta * sr)
        elif t == "robust":
            l = (-(1 - ls) * F.logsigmoid(x) + ls * F.logsigmoid(-x)) / (1 - 2 * ls)
        elif t == "bco_pair":
            l = -F.logsigmoid(beta * sc) - F.logsigmoid(-beta * sr)
        elif t == "sppo_hard":
            l = (sc - 0.5 / beta) ** 2 + (sr + 0.5 / beta) ** 2
        elif t == "aot":
            d = torch.sort(lc - lr, dim=0)[0] - torch.sort(rc - rr, dim=0)[0]
            l = -F.logsigmoid(beta * d) * (1 - ls) - F.logsigmoid(-beta * d) * ls
        elif t == "aot_unpaired":
            d = torch.sort(uc, dim=0)[0] - torch.sort(ur, dim=0)[0]
            l = -F.logsigmoid(beta * d) * (1 - ls) - F.logsigmoid(-beta * d) * ls
        elif t == "apo_zero":
            l = 1 - torch.sigmoid(beta * uc) + torch.sigmoid(beta * ur)
        elif t == "apo_down":
            l = torch.sigmoid(beta * uc) + 1 - torch.sigmoid(x)
        elif t == "discopop":
            mod = torch.sigmoid(x / c.get("discopop_tau", 0.05))
            l = -F.logsigmoid(x) * (1 - mod) + torch.exp(-x) * mod
        elif t == "sft":
            lp_all = torch.cat([lp[m.bool()] for lp, m, _ in terms[:n]])
            l = (-lp_all.mean()).expand(n)
        elif t == "sigmoid_norm":
            l = -F.logsigmoid(beta * (sc / len_c - sr / len_r))
        else:
            raise ValueError(t)
        if c.get("use_weighting"):
            l = l * wpo
        loss = loss + l.mean() * wt
    with torch.no_grad():
        ent = torch.cat([(-(F.softmax(z, -1) * F.log_softmax(z, -1)).sum(-1))[m.bool()] for _, m, z in terms])
        zc = torch.cat([z.mean(-1)[m.bool()] for _, m, z in terms[:n]])
        zr = torch.cat([z.mean(-1)[m.bool()] for _, m, z in terms[n:]])
        acc = torch.cat([(z.argmax(-1) == torch.tensor(seqs[k][0][1:]))[m.bool()].double()
                         for k, (_, m, z) in enumerate(terms[:n])])
        rew_c, rew_r = beta * uc, beta * ur
        met = {"rewards/chosen": rew_c.mean().item(), "rewards/rejected": rew_r.mean().item(),
               "rewards/accuracies": (rew_c > rew_r).double().mean().item(),
               "rewards/margins": (rew_c - rew_r).mean().item(),
               "logps/chosen": lc.mean().item(), "logps/rejected": lr.mean().item(),
               "logits/chosen": zc.mean().item(), "logits/rejected": zr.mean().item(),
               "entropy": ent.mean().item(), "mean_token_accuracy": acc.mean().item()}
    ntok = sum(len(ids) for ids, _ in seqs)
    return loss, met, ntok


def run_case(pcfg, pw32, rcfg, rw, pairs, c):
    pw = {k: v.detach().clone().requires_grad_(True) for k, v in pw32.items()}
    opt = torch.optim.AdamW(list(pw.values()), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=0.0)
    steps, num_tokens = [], 0
    for s in range(STEPS):
        opt.zero_grad()
        total, mets = 0.0, []
        for g in range(GA):
            k0 = (s * GA + g) * B
            loss, met, ntok = micro_batch(pcfg, pw, rcfg, rw, pairs[k0:k0 + B], c)
            (loss / GA).backward()
            total += loss.item() / GA
            mets.append(met)
            num_tokens += ntok
        norm = torch.nn.utils.clip_grad_norm_(list(pw.values()), MAX_NORM).item()
        opt.step()
        row = {"loss": total, "grad_norm": norm, "num_tokens": float(num_tokens)}
        for key in mets[0]:
            row[key] = sum(m[key] for m in mets) / len(mets)
        steps.append(row)
    return steps


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "dpo")
    os.makedirs(out, exist_ok=True)
    pcfg, pw = load(POLICY, False)
    rcfg, rw = load(REF, False)
    rows = make_pairs(pcfg, pw)
    with open(os.path.join(out, "pairs.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    kept = [r for r in rows if len(r["prompt_ids"]) < MAX_LEN]  # _prepare_dataset's filter (keep_start)
    cases = {}
    for name, c in CASES.items():
        pairs = rows if c.get("truncation_mode") == "keep_end" else kept
        rc_, rw_ = (pcfg, pw) if c.get("ref") == "policy" else (rcfg, rw)
        cases[name] = dict(config=c, steps=run_case(pcfg, pw, rc_, rw_, pairs, c))
        s1, s2 = cases[name]["steps"]
        print(f"{name}: loss {s1['loss']:.6f} -> {s2['loss']:.6f}, grad_norm {s1['grad_norm']:.4f}")
    doc = dict(policy=POLICY, ref=REF, B=B, GA=GA, steps=STEPS, max_length=MAX_LEN, pad_to_multiple_of=PAD,
               learning_rate=LR, adam_beta1=B1, adam_beta2=B2, adam_epsilon=EPS, max_grad_norm=MAX_NORM,
               n_pairs=len(kept), cases=cases)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
