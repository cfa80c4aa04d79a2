#!/usr/bin/python3
"""Reference fixtures for `still sft` on a mixture of experts: one optimizer step of TRL's SFT loss plus
transformers' load-balancing loss, in float64 PyTorch (scripts/ref_sft.py's data and optimizer,
scripts/ref_moe.py's mixtral port, scripts/ref_gpt_oss.py's gpt_oss port).

The models are tests/data/models/mixtral and gpt_oss (output_router_logits true, router_aux_loss_coef 0.05), the data
tests/data/sft/ids.jsonl's examples, padded rows (no packing), 4 rows per micro-batch, 2 micro-batches,
completion-only labels. Per micro-batch the loss is sum CE / num_items_in_batch (every label of the
step, as ref_sft.py) + router_aux_loss_coef * aux / 2: aux is load_balancing_loss_func over the
micro-batch's router logits with its attention mask (the padding left out), and the step's aux is the
mean over its micro-batches (docs/models.md). Weight decay as transformers' Trainer applies it: to every
parameter whose name says neither bias nor norm (gpt_oss's sinks and 3-D experts included). Writes
tests/data/sft_moe/pad_ga.safetensors (mixtral) and gpt_oss.safetensors with loss (ce + coef * mean aux),
aux_loss (the mean aux), grad_norm, param.<n>, exp_avg.<n>, exp_avg_sq.<n> (HF names and layouts).
Run: /usr/bin/python3 scripts/ref_sft_moe.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gpt_oss  # noqa: E402
import ref_model  # noqa: E402
import ref_moe  # noqa: E402
import ref_sft  # noqa: E402

torch.set_default_dtype(torch.float64)
MODELS = {"mixtral": (ref_moe, "pad_ga"), "gpt_oss": (ref_gpt_oss, "gpt_oss")}  # port, fixture name
CASE = dict(B=4, GA=2, max_length=64, completion_only=True, pad=8)


def decays(name):
    """transformers' Trainer.get_decay_parameter_names: not a bias, not a norm."""
    return "bias" not in name and "norm" not in name


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "sft_moe")
    os.makedirs(out_dir, exist_ok=True)
    for model, (port, out_name) in MODELS.items():
        step(root, out_dir, model, port, out_name)


def step(root, out_dir, MODEL, port, out_name):
    mdir = os.path.join(root, "tests", "data", "models", MODEL)
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    w32 = ref_sft.read_safetensors(os.path.join(mdir, "model.safetensors"))
    ex = ref_sft.make_examples()
    docs = ref_sft.docs_of(ex, CASE["completion_only"])
    rows = [(i[:CASE["max_length"]], l[:CASE["max_length"]]) for i, l in docs]
    B, GA = CASE["B"], CASE["GA"]
    step_rows = rows[: B * GA]
    w = {n: t.to(torch.float64).requires_grad_(True) for n, t in w32.items()}
    num_items = sum(sum(1 for x in lab[1:] if x != -100) for _, lab in step_rows)
    E, K, coef = port.n_experts(cfg), cfg["num_experts_per_tok"], cfg["router_aux_loss_coef"]
    clamps = []  # gpt_oss: the clamp inputs, kept away from the limits
    ce_total, aux_total, gap = 0.0, 0.0, float("inf")
    for g in range(GA):
        micro = step_rows[g * B:(g + 1) * B]
        loss = 0
        per_layer = None  # router logits of the micro-batch's real tokens, per sparse layer
        for ids, lab in micro:
            logits, rl = port.forward(cfg, w, ids, clamps) if port is ref_gpt_oss else port.forward(cfg, w, ids)
            gap = min(gap, ref_moe.min_gap(rl, K))
            per_layer = rl if per_layer is None else [torch.cat([a, b], 0) for a, b in zip(per_layer, rl)]
            s = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(lab[1:]), ignore_index=-100,
                                                  reduction="sum")
            loss = loss + s / num_items
            ce_total += s.item()
        aux = ref_moe.load_balancing_loss(per_layer, E, K)
        (loss + coef * aux / GA).backward()
        aux_total += aux.item() / GA
    assert gap > ref_moe.MIN_GAP, f"router logits within {gap:.2g} of a routing change"
    if clamps:
        cgap = ref_gpt_oss.clamp_gap(cfg, clamps)[0]
        assert cgap > ref_gpt_oss.MIN_CLAMP_GAP, f"a clamp input within {cgap:.2g} of its limit"
    params = list(w.values())
    norm = torch.nn.utils.clip_grad_norm_(params, ref_sft.MAX_NORM)
    decay = [t for n, t in w.items() if decays(n)]
    no_decay = [t for n, t in w.items() if not decays(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ref_sft.WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=ref_sft.LR, betas=(ref_sft.B1, ref_sft.B2), eps=ref_sft.EPS)
    opt.step()
    out = {"loss": np.array([ce_total / num_items + coef * aux_total]), "aux_loss": np.array([aux_total]),
           "grad_norm": np.array([norm.item()]), "num_items": np.array([float(num_items)])}
    for n, t in w.items():
        out["param." + n] = t.detach().numpy()
        out["exp_avg." + n] = opt.state[t]["exp_avg"].numpy()
        out["exp_avg_sq." + n] = opt.state[t]["exp_avg_sq"].numpy()
    ref_model.write_safetensors(os.path.join(out_dir, out_name + ".safetensors"), out)
    print(f"sft_moe {out_name}: loss {out['loss'][0]:.6f} aux {aux_total:.6f} grad_norm {norm.item():.4f} "
          f"items {num_items} min routing gap {gap:.3g}")


if __name__ == "__main__":
    main()
