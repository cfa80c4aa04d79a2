#!/usr/bin/python3
"""Reference fixtures for `still sft`: one optimizer step of TRL's SFT loss, in float64 PyTorch.

Writes tests/data/sft/ids.jsonl (8 pre-tokenised prompt-completion examples for the tiny
qwen3_tied model) and, per case of CASES, tests/data/sft/<case>.safetensors with
  loss       the step's loss: sum over micro-batches of F.cross_entropy(logits[:-1], labels[1:],
             ignore_index=-100, reduction="sum"), divided by num_items_in_batch = every label != -100
             of the whole step (transformers' gradient-accumulation normalisation)
  grad_norm  torch.nn.utils.clip_grad_norm_'s total norm (before clipping, max_norm 1)
  param.<n>  every parameter after one torch.optim.AdamW step (weight decay on matrices only,
             transformers' decay / no-decay parameter groups)
  exp_avg.<n>, exp_avg_sq.<n>  AdamW's moments after that step (its optimizer state): after one
             step (1 - beta1) g and (1 - beta2) g^2 of the clipped gradient g. Unlike the update,
             which is ill-conditioned where |g| is near adam_epsilon, they are as well-conditioned as
             the gradient, so the test compares them over every element.
Batches are built here independently of still: rows in file order (no shuffling), TRL's
best-fit-decreasing and wrapped packing; packed documents are separate sequences with positions
from 0 (TRL padding-free / position_ids semantics) and the first token of a document is no target.
Run: /usr/bin/python3 scripts/ref_sft.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import ref_model  # noqa: E402

torch.set_default_dtype(torch.float64)
MODEL = "qwen3_tied"
LR, WD, B1, B2, EPS, MAX_NORM = 1e-3, 0.1, 0.9, 0.999, 1e-8, 1.0

CASES = {
    # name: (flags for still sft, batch size, grad accumulation, packing, max_length, completion_only)
    "pad_ga": dict(B=4, GA=2, packing=None, max_length=64, completion_only=True, pad=8),
    "full_mask": dict(B=8, GA=1, packing=None, max_length=64, completion_only=False, pad=16),
    "bfd": dict(B=2, GA=2, packing="bfd", max_length=24, completion_only=True, pad=8),
    "wrapped": dict(B=2, GA=2, packing="wrapped", max_length=20, completion_only=True, pad=1),
}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).copy())
    return out


def make_examples():
    g = np.random.default_rng(7)
    ex = []
    for i in range(8):
        n = int(g.integers(5, 16))
        ids = [int(x) for x in g.integers(3, 384, size=n)]
        p = int(g.integers(2, 5))
        ex.append({"input_ids": ids, "completion_mask": [0] * p + [1] * (n - p)})
    return ex


def docs_of(ex, completion_only):
    """(ids, labels) per example; labels = id where the mask allows, else -100 (TRL build_labels)."""
    out = []
    for e in ex:
        m = e["completion_mask"] if completion_only else [1] * len(e["input_ids"])
        out.append((e["input_ids"], [t if k else -100 for t, k in zip(e["input_ids"], m)]))
    return out


def pack_bfd(docs, L):
    docs = [(i[:L], l[:L]) for i, l in docs]
    order = sorted(range(len(docs)), key=lambda k: (-len(docs[k][0]), k))
    bins, space = [], []
    for k in order:
        n = len(docs[k][0])
        fits = [b for b in range(len(bins)) if space[b] >= n]
        if fits:
            b = min(fits, key=lambda b: (space[b], b))
        else:
            bins.append([]), space.append(L)
            b = len(bins) - 1
        bins[b].append(docs[k])
        space[b] -= n
    return bins  # a row = list of documents


def pack_wrapped(docs, L):
    rows, cur, used = [], [], 0
    for ids, lab in docs:
        t = 0
        while t < len(ids):
            take = min(len(ids) - t, L - used)
            cur.append((ids[t:t + take], lab[t:t + take]))
            used += take
            t += take
            if used == L:
                rows.append(cur)
                cur, used = [], 0
    if cur:
        rows.append(cur)
    return rows


def one_case(cfg, w32, ex, c):
    docs = docs_of(ex, c["completion_only"])
    if c["packing"] == "bfd":
        rows = pack_bfd(docs, c["max_length"])
    elif c["packing"] == "wrapped":
        rows = pack_wrapped(docs, c["max_length"])
    else:
        rows = [[(i[:c["max_length"]], l[:c["max_length"]])] for i, l in docs]
    step_rows = rows[: c["B"] * c["GA"]]
    w = {n: t.to(torch.float64).requires_grad_(True) for n, t in w32.items()}
    num_items = sum(sum(1 for x in lab[1:] if x != -100) for row in step_rows for _, lab in row)
    total = 0.0
    for row in step_rows:
        for ids, lab in row:
            if len(ids) < 2:
                continue
            logits = ref_model.forward(cfg, w, ids)
            s = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(lab[1:]), ignore_index=-100,
                                                  reduction="sum")
            (s / num_items).backward()
            total += s.item()
    params = list(w.values())
    norm = torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
    decay = [t for n, t in w.items() if t.dim() == 2]
    no_decay = [t for n, t in w.items() if t.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(B1, B2), eps=EPS)
    opt.step()
    out = {"loss": np.array([total / num_items]), "grad_norm": np.array([norm.item()]),
           "num_items": np.array([float(num_items)])}
    for n, t in w.items():
        out["param." + n] = t.detach().numpy()
        out["exp_avg." + n] = opt.state[t]["exp_avg"].numpy()
        out["exp_avg_sq." + n] = opt.state[t]["exp_avg_sq"].numpy()
    return out


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tiny_tokenizer():
    """A byte-level BPE tokenizer.json with no merges (ids 0-255 = bytes) and three ChatML special
    tokens (256 <|endoftext|>, 257 <|im_start|>, 258 <|im_end|>), for models with vocab 384."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for i, s in enumerate(specials)],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                              "use_regex": True},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": []}}


def write_tokenizer_dir(d, chat_template):
    """tokenizer.json (tiny_tokenizer) and tokenizer_config.json (eos <|im_end|>, pad <|endoftext|>)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tiny_tokenizer(), f, ensure_ascii=False, indent=1)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
                   "chat_template": chat_template}, f, indent=1)


def write_tiny_tokenizer(d):
    """The tiny tokenizer with a {% generation %} chat template in d, without the markers in d_nogen,
    for end-to-end tests of text formats."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    tmpl = open(os.path.join(root, "tests", "data", "chat", "templates", "sft_generation.jinja")).read()
    write_tokenizer_dir(d, tmpl)
    write_tokenizer_dir(d + "_nogen", tmpl.replace("{%- generation %}", "").replace("{%- endgeneration %}", ""))


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "sft")
    os.makedirs(out_dir, exist_ok=True)
    mdir = os.path.join(root, "tests", "data", "models", MODEL)
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    w32 = read_safetensors(os.path.join(mdir, "model.safetensors"))
    write_tiny_tokenizer(os.path.join(out_dir, "tok"))
    ex = make_examples()
    with open(os.path.join(out_dir, "ids.jsonl"), "w") as f:
        for e in ex:
            f.write(json.dumps(e) + "\n")
    cases = {}
    for name, c in CASES.items():
        res = one_case(cfg, w32, ex, c)
        ref_model.write_safetensors(os.path.join(out_dir, name + ".safetensors"), res)
        cases[name] = c
        print(f"{name}: loss {res['loss'][0]:.6f} grad_norm {res['grad_norm'][0]:.4f} items {int(res['num_items'][0])}")
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump({"model": MODEL, "lr": LR, "weight_decay": WD, "adam_beta1": B1, "adam_beta2": B2,
                   "adam_epsilon": EPS, "max_grad_norm": MAX_NORM, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
