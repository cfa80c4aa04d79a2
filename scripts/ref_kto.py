#!/usr/bin/python3
"""Reference fixtures for `still kto`: two optimizer steps of TRL's KTOTrainer, in float64 PyTorch.

Written from trl/trainer/kto_trainer.py (TRL 1.10.0.dev0, HEAD f2cd577): _prepare_dataset (paired rows
unpaired per block of 1000 as unpair_preference_dataset does: every chosen row, then every rejected
one; rows whose prompt alone has max_length tokens or more dropped; KL completions rotated by one
within each run of per_device_train_batch_size rows, add_kl_completion_ids), the unpaired collator
(prompt + completion cut to max_length), and _compute_loss: summed completion log-probs, the KL
estimate clamp(mean(policy KL logps - reference KL logps), 0) without gradient, the kto /
apo_zero_unpaired losses weighted by desirable / undesirable weights, nanmean over the rows, and
TRL's metrics (kl, rewards/*, logps/*, logits/*, entropy; the chosen / rejected ones only for
micro-batches that have such rows). Sequential sampling (TRL's default for KTO). Optimizer and
steps as scripts/ref_dpo.py. Writes tests/data/kto/{rows.jsonl, cases.json}.
Run: /usr/bin/python3 scripts/ref_kto.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from ref_dpo import LR, B1, B2, EPS, MAX_NORM, load, sample, seq_terms  # noqa: E402

torch.set_default_dtype(torch.float64)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
B, GA, STEPS, MAX_LEN, PAD = 3, 2, 2, 14, 8

CASES = {
    "kto": {},
    "kto_weights": dict(beta=0.3, desirable_weight=1.33, undesirable_weight=0.7),
    "apo_zero_unpaired": dict(loss_type="apo_zero_unpaired"),
    "kto_self_ref": dict(ref="policy", beta=0.5),
    "from_pairs": dict(dataset="pairs"),
}


def make_rows(cfg, w):
    g = np.random.default_rng(23)
    labels = [True, False, True, True, True, True, False, True, False, False, True, False, True]
    rows = []
    for lab in labels:
        p = [int(x) for x in g.integers(3, 384, size=int(g.integers(2, 7)))]
        rows.append(dict(prompt_ids=p, completion_ids=sample(cfg, w, p, int(g.integers(1, 10)), g), label=lab))
    rows.insert(5, dict(prompt_ids=[int(x) for x in g.integers(3, 384, size=MAX_LEN)], completion_ids=[9], label=True))
    return rows


def prepare(rows, kl):
    kept = [dict(r) for r in rows if len(r["prompt_ids"]) < MAX_LEN]
    if kl:
        for c0 in range(0, len(kept), B):
            chunk = kept[c0:c0 + B]
            comps = [r["completion_ids"] for r in chunk]
            for r, c in zip(chunk, [comps[-1]] + comps[:-1]):
                r["KL_completion_ids"] = c
    return kept


def unpair(pairs):
    out = []
    for b0 in range(0, len(pairs), 1000):
        blk = pairs[b0:b0 + 1000]
        out += [dict(prompt_ids=p["prompt_ids"], completion_ids=p["chosen_ids"], label=True) for p in blk]
        out += [dict(prompt_ids=p["prompt_ids"], completion_ids=p["rejected_ids"], label=False) for p in blk]
    return out


def seq_logp(cfg, w, prompt, comp):
    ids, mask = (prompt + comp)[:MAX_LEN], ([0] * len(prompt) + [1] * len(comp))[:MAX_LEN]
    lp, m, z = seq_terms(cfg, w, ids, mask)
    return (lp * m).sum(), m, z, len(ids)


def micro_batch(pcfg, pw, rcfg, rw, rows, c):
    beta = c.get("beta", 0.1)
    dw, uw = c.get("desirable_weight", 1.0), c.get("undesirable_weight", 1.0)
    apo = c.get("loss_type") == "apo_zero_unpaired"
    main = [seq_logp(pcfg, pw, r["prompt_ids"], r["completion_ids"]) for r in rows]
    with torch.no_grad():
        ref = torch.stack([seq_logp(rcfg, rw, r["prompt_ids"], r["completion_ids"])[0] for r in rows])
        if apo:
            kl = torch.tensor(0.0)
        else:
            klp = torch.stack([seq_logp(pcfg, pw, r["prompt_ids"], r["KL_completion_ids"])[0] for r in rows])
            rkl = torch.stack([seq_logp(rcfg, rw, r["prompt_ids"], r["KL_completion_ids"])[0] for r in rows])
            kl = (klp - rkl).mean().clamp(min=0)
    logps = torch.stack([x[0] for x in main])
    lab = torch.tensor([r["label"] for r in rows])
    u = logps - ref
    if apo:
        chosen, rejected = 1 - torch.sigmoid(beta * u[lab]), torch.sigmoid(beta * u[~lab])
    else:
        chosen, rejected = 1 - torch.sigmoid(beta * (u[lab] - kl)), 1 - torch.sigmoid(beta * (kl - u[~lab]))
    loss = torch.cat((dw * chosen, uw * rejected)).nanmean()
    met = {"kl": kl.item()}
    with torch.no_grad():
        ent = torch.cat([(-(F.softmax(z, -1) * F.log_softmax(z, -1)).sum(-1))[m.bool()] for _, m, z, _ in main])
        met["entropy"] = ent.mean().item()
        zc = [z.mean(-1)[m.bool()] for (_, m, z, _), l in zip(main, lab) if l]
        zr = [z.mean(-1)[m.bool()] for (_, m, z, _), l in zip(main, lab) if not l]
        if zc and torch.cat(zc).numel():
            met["logits/chosen"] = torch.cat(zc).mean().item()
        if zr and torch.cat(zr).numel():
            met["logits/rejected"] = torch.cat(zr).mean().item()
        if lab.sum() > 0:
            met["rewards/chosen"] = (beta * u[lab]).sum().item() / lab.sum().item()
            met["logps/chosen"] = logps[lab].sum().item() / lab.sum().item()
        if (~lab).sum() > 0:
            met["rewards/rejected"] = (beta * u[~lab]).sum().item() / (~lab).sum().item()
            met["logps/rejected"] = logps[~lab].sum().item() / (~lab).sum().item()
        if lab.sum() > 0 and (~lab).sum() > 0:
            met["rewards/margins"] = met["rewards/chosen"] - met["rewards/rejected"]
    return loss, met, sum(x[3] for x in main)


def run_case(pcfg, pw32, rcfg, rw, rows, c):
    pw = {k: v.detach().clone().requires_grad_(True) for k, v in pw32.items()}
    opt = torch.optim.AdamW(list(pw.values()), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=0.0)
    steps, num_tokens = [], 0
    for s in range(STEPS):
        opt.zero_grad()
        total, mets = 0.0, []
        for g in range(GA):
            k0 = (s * GA + g) * B
            loss, met, ntok = micro_batch(pcfg, pw, rcfg, rw, rows[k0:k0 + B], c)
            (loss / GA).backward()
            total += loss.item() / GA
            mets.append(met)
            num_tokens += ntok
        norm = torch.nn.utils.clip_grad_norm_(list(pw.values()), MAX_NORM).item()
        opt.step()
        row = {"loss": total, "grad_norm": norm, "num_tokens": float(num_tokens)}
        keys = [k for i, m in enumerate(mets) for k in m if all(k not in p for p in mets[:i])]
        for key in keys:  # TRL averages what each micro-batch appended
            vals = [m[key] for m in mets if key in m]
            row[key] = sum(vals) / len(vals)
        steps.append(row)
    return steps


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "kto")
    os.makedirs(out, exist_ok=True)
    pcfg, pw = load("qwen3_tied", False)
    rcfg, rw = load("qwen3_untied", False)
    rows = make_rows(pcfg, pw)
    with open(os.path.join(out, "rows.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    pairs = [json.loads(l) for l in open(os.path.join(ROOT, "tests", "data", "dpo", "pairs.jsonl"))]
    cases = {}
    for name, c in CASES.items():
        src = unpair(pairs) if c.get("dataset") == "pairs" else rows
        data = prepare(src, c.get("loss_type") != "apo_zero_unpaired")
        rc_, rw_ = (pcfg, pw) if c.get("ref") == "policy" else (rcfg, rw)
        cases[name] = dict(config=c, steps=run_case(pcfg, pw, rc_, rw_, data, c))
        s1, s2 = cases[name]["steps"]
        print(f"{name}: loss {s1['loss']:.6f} -> {s2['loss']:.6f}, kl {s1['kl']:.4f}, grad_norm {s1['grad_norm']:.4f}")
    doc = dict(B=B, GA=GA, steps=STEPS, max_length=MAX_LEN, pad_to_multiple_of=PAD, learning_rate=LR, adam_beta1=B1,
               adam_beta2=B2, adam_epsilon=EPS, max_grad_norm=MAX_NORM, cases=cases)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
