#!/usr/bin/python3
"""Reference fixtures for reward models (`still score`, `still reward`), in float64 PyTorch.

Writes into tests/data/reward/:
  rm/{config.json, model.safetensors}  a tiny random Qwen3ForSequenceClassification: the
      qwen3_tied base of scripts/ref_model.py (its seeded weights) plus score.weight (1, hidden),
      config.json as transformers saves a classifier (architectures, num_labels, id2label,
      label2id, pad_token_id 0)
  pairs.jsonl         5 pre-tokenised pairs (chosen_ids / rejected_ids), with the pad id 0 inside
                      and at the end of sequences and one sequence made of pad ids only
  pairs_margin.jsonl  4 pairs with a "margin" column
  rm_olmo2/, rm_phi3/  the same for Olmo2ForSequenceClassification and Phi3ForSequenceClassification
      (the tiny olmo2 / phi3 bases of scripts/ref_family.py, through its port of their forward):
      {config.json, model.safetensors, expected.safetensors} with the rewards and the "ga" case
  expected.safetensors
      rewards            (10) the reward of every sequence of pairs.jsonl (chosen, rejected per row)
      <case>.<metric>.<step>  the metrics `still reward` logs at steps 1 and 2 of each case, and
                         the evaluation after step 1 (eval_loss, eval_accuracy, ...) of "partial"

Semantics, written from the libraries' source:
  pooling   transformers GenericForSequenceClassification.forward: logits = score(hidden) at every
            position, then logits[b, argmax(arange(T) * (input_ids != pad_token_id))] on the batch
            as TRL's DataCollatorForPreference pads it (right padding with pad_token_id, chosen rows
            then rejected rows, pad_to_multiple_of). Right padding leaves the real positions'
            hidden states as in the unpadded sequence (causal attention under the mask).
  loss      TRL RewardTrainer.compute_loss: -logsigmoid(r_c - r_r [- margin]).mean()
            [+ center_rewards_coefficient * mean((r_c + r_r)^2)]; Trainer divides each micro-batch
            loss by the micro-batches of its step (model_accepts_loss_kwargs = False).
  metrics   per micro-batch min / mean / max of every reward, accuracy = mean(r_c > r_r),
            margin = mean(r_c - r_r); the log averages them over the micro-batches of the window
            (here one step); num_tokens = attention_mask.sum() accumulated.
  step      clip_grad_norm_(max_norm) then torch.optim.AdamW, weight decay on matrices only, linear
            schedule (the first step at the full learning rate); batches in file order
            (--shuffle false).
Run: /usr/bin/python3 scripts/ref_reward.py [OUT_DIR]
     /usr/bin/python3 scripts/ref_reward.py check RM_DIR PAIRS.jsonl SCORES.jsonl  (a checkpoint still
     wrote, as transformers would load it: its class, labels, tensors, and `still score`'s rewards)
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import ref_model  # noqa: E402

torch.set_default_dtype(torch.float64)
PAD = 0
B1, B2, EPS, MAX_NORM = 0.9, 0.999, 1e-8, 1.0

CASES = {
    # pairs file, pairs per micro-batch, micro-batches per step, lr, weight decay, center coefficient
    "ga": dict(file="pairs_margin.jsonl", B=2, GA=2, lr=1e-3, wd=0.1, center=0.1, pad=8),
    "partial": dict(file="pairs.jsonl", B=2, GA=2, lr=1e-5, wd=0.0, center=None, pad=1,
                    eval=dict(file="pairs_margin.jsonl", B=3)),
}


def make_pairs(seed, n, margin):
    g = np.random.default_rng(seed)
    seq = lambda: [int(x) for x in g.integers(1, 384, size=int(g.integers(3, 15)))]
    rows = []
    for i in range(n):
        c, r = seq(), seq()
        if i == 1:
            c += [PAD, PAD]  # trailing pad ids: pooled before them
        if i == 2:
            r = [PAD, PAD, PAD]  # nothing but pad ids: pooled at 0
        if i == 3:
            c[1] = PAD
        row = {"chosen_ids": c, "rejected_ids": r}
        if margin:
            row["margin"] = round(float(g.uniform(-0.5, 1.0)), 3)
        rows.append(row)
    return rows


def hidden(cfg, w, ids):
    """Final hidden states (T, C) of one unpadded sequence: ref_model.forward with an identity head."""
    c2 = dict(cfg, tie_word_embeddings=False)
    w2 = dict(w)
    w2["lm_head.weight"] = torch.eye(cfg["hidden_size"])
    return ref_model.forward(c2, w2, ids)


def rewards_of(cfg, w, seqs, pad_to):
    """The classifier's pooled logits[:, 0] for a batch of sequences, as transformers computes them."""
    T = max(len(s) for s in seqs)
    T = (T + pad_to - 1) // pad_to * pad_to
    input_ids = torch.full((len(seqs), T), PAD, dtype=torch.long)
    for b, s in enumerate(seqs):
        input_ids[b, : len(s)] = torch.tensor(s)
    non_pad = (input_ids != PAD).to(torch.int32)
    last = (torch.arange(T, dtype=torch.int32) * non_pad).argmax(-1)
    out = []
    for b, s in enumerate(seqs):
        h = hidden(cfg, w, s)  # (len, C); positions >= len are padding, never pooled here
        h = torch.cat([h, torch.zeros(T - len(s), h.shape[1])], 0)
        logits = h @ w["score.weight"].T  # (T, 1)
        out.append(logits[last[b], 0])
    return torch.stack(out)


def micro_batch(cfg, w, pairs, c):
    seqs = [p["chosen_ids"] for p in pairs] + [p["rejected_ids"] for p in pairs]
    r = rewards_of(cfg, w, seqs, c["pad"])
    rc, rr = torch.chunk(r, 2)
    if "margin" in pairs[0]:
        m = torch.tensor([p["margin"] for p in pairs])
        loss = -torch.nn.functional.logsigmoid(rc - rr - m).mean()
    else:
        loss = -torch.nn.functional.logsigmoid(rc - rr).mean()
    if c["center"] is not None:
        loss = loss + c["center"] * torch.mean((rc + rr) ** 2)
    met = {"min_reward": r.min().item(), "mean_reward": r.mean().item(), "max_reward": r.max().item(),
           "accuracy": (rc > rr).double().mean().item(), "margin": (rc - rr).mean().item(),
           "tokens": float(sum(len(s) for s in seqs))}
    return loss, met


def evaluate(cfg, w, pairs, c):
    """Trainer.evaluation_loop: each batch's loss repeated once per row (2n rows), their mean; the
    metrics averaged over batches (RewardTrainer.log)."""
    B = c["eval"]["B"]
    losses, mets = [], []
    with torch.no_grad():
        for i in range(0, len(pairs), B):
            mb = pairs[i:i + B]
            loss, met = micro_batch(cfg, w, mb, c)
            losses += [loss.item()] * (2 * len(mb))
            mets.append(met)
    out = {"eval_loss": float(np.mean(losses))}
    for k in ("accuracy", "margin", "min_reward", "mean_reward", "max_reward"):
        out["eval_" + k] = float(np.mean([m[k] for m in mets]))
    return out


def run_case(cfg, w32, pairs, c, files):
    w = {n: t.to(torch.float64).requires_grad_(True) for n, t in w32.items()}
    B, GA = c["B"], c["GA"]
    mbs = [pairs[i:i + B] for i in range(0, len(pairs), B)]  # the last one may be short
    steps = [mbs[i:i + GA] for i in range(0, len(mbs), GA)]
    decay = [t for n, t in w.items() if t.dim() == 2]
    no_decay = [t for n, t in w.items() if t.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["wd"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(B1, B2), eps=EPS)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (2 - s) / 2))  # linear over 2 steps
    out, tokens = {}, 0.0
    for step in (1, 2):
        group = steps[(step - 1) % len(steps)]
        opt.zero_grad()
        total, mets = 0.0, []
        for mb in group:
            loss, met = micro_batch(cfg, w, mb, c)
            (loss / len(group)).backward()
            total += loss.item() / len(group)
            mets.append(met)
            tokens += met["tokens"]
        norm = torch.nn.utils.clip_grad_norm_(list(w.values()), MAX_NORM)
        opt.step()
        sched.step()
        vals = {"loss": total, "grad_norm": norm.item(), "num_tokens": tokens}
        for k in ("accuracy", "margin", "min_reward", "mean_reward", "max_reward"):
            vals[k] = float(np.mean([m[k] for m in mets]))
        if step == 1 and "eval" in c:  # --eval_strategy steps --eval_steps 1: after the first update
            vals.update(evaluate(cfg, w, files[c["eval"]["file"]], c))
        for k, v in vals.items():
            out[f"{k}.{step}"] = np.array([v])
    return out


FAMILY_CLASS = {"qwen3": "Qwen3ForSequenceClassification", "qwen2": "Qwen2ForSequenceClassification",
                "llama": "LlamaForSequenceClassification"}


def read_f32_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = {"F32": "<f4", "BF16": "<u2"}[info["dtype"]]
        x = np.frombuffer(data[a:b], dtype=dt).reshape(info["shape"])
        if info["dtype"] == "BF16":
            x = (x.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(x.astype(np.float32).copy())
    return out


def check(rm_dir, pairs_path, scores_path):
    """A checkpoint still wrote loads as transformers' *ForSequenceClassification: the config's
    class, labels and pad token as PretrainedConfig reads them, exactly the class's tensors (none
    missing, none unexpected, shapes as the config says), and its rewards of the pairs (computed
    here) equal `still score`'s."""
    cfg = json.load(open(os.path.join(rm_dir, "config.json")))
    want_class = FAMILY_CLASS[cfg["model_type"]]
    assert cfg.get("architectures", [None])[0] == want_class, cfg.get("architectures")
    id2label = cfg.get("id2label")
    num_labels = len(id2label) if id2label is not None else cfg.get("num_labels", 2)
    assert cfg.get("num_labels", num_labels) == num_labels, (cfg.get("num_labels"), num_labels)
    assert {int(k) for k in id2label} == set(range(num_labels)), id2label
    assert {v: int(k) for k, v in id2label.items()} == cfg["label2id"], cfg["label2id"]
    assert isinstance(cfg.get("pad_token_id"), int), cfg.get("pad_token_id")
    w = read_f32_safetensors(os.path.join(rm_dir, "model.safetensors"))
    base = dict(cfg, tie_word_embeddings=True)  # the base model: no lm_head
    expect = dict(ref_model.all_tensors(base))
    expect["score.weight"] = (num_labels, cfg["hidden_size"])
    missing, unexpected = set(expect) - set(w), set(w) - set(expect)
    assert not missing and not unexpected, ("missing", sorted(missing), "unexpected", sorted(unexpected))
    for n, shape in expect.items():
        assert tuple(w[n].shape) == tuple(shape), (n, tuple(w[n].shape), shape)
    global PAD
    PAD = cfg["pad_token_id"]
    pairs = [json.loads(l) for l in open(pairs_path)]
    seqs = [s for p in pairs for s in (p["chosen_ids"], p["rejected_ids"])]
    w64 = {n: t.to(torch.float64) for n, t in w.items()}
    with torch.no_grad():
        ref = rewards_of(cfg, w64, seqs, 1).tolist()
    got = [v for l in open(scores_path) for v in (json.loads(l)["reward_chosen"], json.loads(l)["reward_rejected"])]
    assert len(got) == len(ref), (len(got), len(ref))
    scale = max(1.0, max(abs(x) for x in ref))
    bad = [(i, g, r) for i, (g, r) in enumerate(zip(got, ref)) if abs(g - r) > 1e-5 * scale]
    assert not bad, bad
    print(f"ok: {want_class}, {num_labels} label(s), pad_token_id {PAD}, {len(w)} tensors, {len(ref)} rewards")


FAMILY_CLASS.update(olmo2="Olmo2ForSequenceClassification", phi3="Phi3ForSequenceClassification")


def family_rm(out_dir, root, fam, files):
    """rm_<fam>/: the tiny family checkpoint of scripts/ref_family.py as a one-label classifier
    (score.weight drawn here, no lm_head, pad_token_id 0), its rewards of pairs.jsonl and the
    "ga" case, through ref_family's port of the family's forward."""
    import ref_family  # noqa: E402
    d = os.path.join(out_dir, "rm_" + fam)
    os.makedirs(d, exist_ok=True)
    cfg = dict(ref_family.CONFIGS[fam])
    cfg.update(architectures=[FAMILY_CLASS[fam]], num_labels=1, id2label={"0": "LABEL_0"},
               label2id={"LABEL_0": 0}, pad_token_id=PAD, tie_word_embeddings=False)
    k = sorted(ref_family.CONFIGS).index(fam)
    w32 = {n: t.float() for n, t in ref_family.make_weights(cfg, 4321 + k).items() if n != "lm_head.weight"}
    g = torch.Generator().manual_seed(101 + k)
    w32["score.weight"] = 0.25 * torch.randn((1, cfg["hidden_size"]), generator=g, dtype=torch.float32)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    ref_model.write_safetensors(os.path.join(d, "model.safetensors"), {n: t.numpy() for n, t in w32.items()})
    saved = ref_model.forward
    ref_model.forward = lambda c, w, ids, adapter=None: ref_family.forward(c, w, ids)
    try:
        exp = {}
        w64 = {n: t.to(torch.float64) for n, t in w32.items()}
        seqs = [s for p in files["pairs.jsonl"] for s in (p["chosen_ids"], p["rejected_ids"])]
        with torch.no_grad():
            exp["rewards"] = rewards_of(cfg, w64, seqs, 8).numpy()
        res = run_case(cfg, w32, files[CASES["ga"]["file"]], CASES["ga"], files)
        for key, v in res.items():
            exp["ga." + key] = v
        print(fam, {key: round(float(v[0]), 6) for key, v in res.items()})
    finally:
        ref_model.forward = saved
    ref_model.write_safetensors(os.path.join(d, "expected.safetensors"), exp)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "check":
        check(*sys.argv[2:5])
        return
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "reward")
    rm = os.path.join(out_dir, "rm")
    os.makedirs(rm, exist_ok=True)
    mdir = os.path.join(root, "tests", "data", "models", "qwen3_tied")
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    cfg.update(architectures=["Qwen3ForSequenceClassification"], num_labels=1, id2label={"0": "LABEL_0"},
               label2id={"LABEL_0": 0}, pad_token_id=PAD)
    w32 = {n: t.float() for n, t in ref_model.make_weights(cfg, 1234 + sorted(ref_model.CONFIGS).index("qwen3_tied")).items()}
    g = torch.Generator().manual_seed(99)
    w32["score.weight"] = 0.25 * torch.randn((1, cfg["hidden_size"]), generator=g, dtype=torch.float32)
    with open(os.path.join(rm, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    ref_model.write_safetensors(os.path.join(rm, "model.safetensors"), {n: t.numpy() for n, t in w32.items()})
    files = {"pairs.jsonl": make_pairs(5, 5, False), "pairs_margin.jsonl": make_pairs(6, 4, True)}
    for name, rows in files.items():
        with open(os.path.join(out_dir, name), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    exp = {}
    w64 = {n: t.to(torch.float64) for n, t in w32.items()}
    seqs = [s for p in files["pairs.jsonl"] for s in (p["chosen_ids"], p["rejected_ids"])]
    with torch.no_grad():
        exp["rewards"] = rewards_of(cfg, w64, seqs, 8).numpy()
    for name, c in CASES.items():
        res = run_case(cfg, w32, files[c["file"]], c, files)
        for k, v in res.items():
            exp[f"{name}.{k}"] = v
        print(name, {k: round(float(v[0]), 6) for k, v in res.items()})
    ref_model.write_safetensors(os.path.join(out_dir, "expected.safetensors"), exp)
    for fam in ("olmo2", "phi3"):
        family_rm(out_dir, root, fam, files)
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump({"adam_beta1": B1, "adam_beta2": B2, "adam_epsilon": EPS, "max_grad_norm": MAX_NORM,
                   "cases": CASES}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
