#!/usr/bin/python3
"""Reference fixtures for LoRA adapters, applied as PEFT applies them, in float64 PyTorch.

PEFT is not installed here: its semantics are written out from peft/tuners/lora/layer.py and
peft/utils/save_and_load.py:
  * a targeted nn.Linear computes  base(x) + lora_B(lora_A(dropout(x))) * scaling, with
    lora_A.weight (r, in), lora_B.weight (out, r), scaling = lora_alpha / r, or
    lora_alpha / sqrt(r) with use_rslora;
  * default init (init_lora_weights=True): lora_A kaiming_uniform_(a=sqrt(5)), which for a
    (r, in) weight is U(-1/sqrt(in), 1/sqrt(in)); lora_B zeros;
  * modules_to_save (ModulesToSaveWrapper): a trainable copy of every module whose name ends
    with one of the given names, used instead of the original while the adapter is active;
  * saved keys (get_peft_model_state_dict): the PeftModel's state-dict keys with the adapter
    name removed: base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight, ...;
    a saved module as base_model.model.{module}.weight.

Cases (tests/data/lora/<case>/): an adapter directory as PEFT writes it (adapter_config.json,
adapter_model.safetensors, with a nonzero lora_B so that it changes the model) and
expected.safetensors with, for a fixed id sequence (ref_model.IDS):
  logits       (T, V) of the adapted model (what merging must reproduce too)
  loss         mean next-token cross-entropy
  grad.<key>   the gradient of that loss w.r.t. every adapter tensor (base frozen)
and one SFT step (case sft_step): still sft --use_peft --adapter <rand_tied> on the pad_ga
batches of scripts/ref_sft.py, TRL's loss normalisation, clip_grad_norm_ and torch.optim.AdamW
over the adapter's tensors (weight decay on lora weights, as transformers' decay groups):
  loss, grad_norm, param.<key> after the step.
Run: /usr/bin/python3 scripts/ref_lora.py [OUT_DIR]
     /usr/bin/python3 scripts/ref_lora.py check MODEL_DIR ADAPTER_DIR "IDS" LOGITS.txt
The check form loads any adapter directory (one `still` saved, say) the way PEFT would -- its
adapter_config.json and PEFT key names -- applies it to an fp32 model and compares the logits of
every position with LOGITS.txt (`still logits --adapter ADAPTER_DIR --all` output): it prints
the norm-wise relative error and fails above 1e-5.
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import ref_model  # noqa: E402
import ref_sft  # noqa: E402

torch.set_default_dtype(torch.float64)

MODULES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]
ALL_LINEAR = [m.split(".")[-1] for m in MODULES]

CASES = {
    # all-linear, untied model, lm_head and every *norm trained in full (modules_to_save)
    "rand_untied": dict(model="qwen3_untied", r=4, alpha=8.0, rslora=False, targets=ALL_LINEAR,
                        save=["lm_head", "norm"], seed=11),
    # PEFT's default targets for qwen3 (q_proj, v_proj), rslora, tied embeddings
    "rand_tied": dict(model="qwen3_tied", r=8, alpha=16.0, rslora=True, targets=["q_proj", "v_proj"], save=[],
                      seed=12),
    # llama with llama3 RoPE, a subset of MLP modules
    "rand_llama": dict(model="llama", r=2, alpha=3.0, rslora=False, targets=["k_proj", "o_proj", "down_proj"],
                       save=[], seed=13),
}
SFT = dict(adapter="rand_tied", lr=1e-2, wd=0.1, b1=0.9, b2=0.999, eps=1.0, max_norm=1.0)


def base_key(name):
    return "base_model.model." + name


def make_adapter(cfg, w, c):
    """PEFT's init for lora_A; lora_B drawn nonzero (a trained adapter); saved modules perturbed copies."""
    g = torch.Generator().manual_seed(c["seed"])
    ad = {}
    for i in range(cfg["num_hidden_layers"]):
        for path in MODULES:
            if path.split(".")[-1] not in c["targets"]:
                continue
            W = w[f"model.layers.{i}.{path}.weight"]
            out, inn = W.shape
            bound = 1.0 / math.sqrt(inn)
            a = (torch.rand((c["r"], inn), generator=g, dtype=torch.float32) * 2 - 1) * bound
            b = 0.3 * torch.randn((out, c["r"]), generator=g, dtype=torch.float32)
            ad[base_key(f"model.layers.{i}.{path}.lora_A.weight")] = a
            ad[base_key(f"model.layers.{i}.{path}.lora_B.weight")] = b
    names = list(w) + (["lm_head.weight"] if cfg["tie_word_embeddings"] else [])
    for n in names:
        module = n.rsplit(".", 1)[0]
        if any(module.endswith(s) for s in c["save"]):  # PEFT's _set_trainable: key.endswith(target_key)
            src = w[n] if n in w else w["model.embed_tokens.weight"]
            ad[base_key(n)] = src + 0.05 * torch.randn(src.shape, generator=g, dtype=torch.float32)
    return ad


def scaling(c):
    return c["alpha"] / math.sqrt(c["r"]) if c["rslora"] else c["alpha"] / c["r"]


def adapted(cfg, w, ad, c):
    """(weights with saved modules swapped in, the adapter term for ref_model.forward)."""
    s = scaling(c)
    w2 = dict(w)
    for k, v in ad.items():
        if ".lora_" not in k:
            w2[k[len("base_model.model."):]] = v

    def term(x, module):
        a = ad.get(base_key(module + ".lora_A.weight"))
        if a is None:
            return 0
        b = ad[base_key(module + ".lora_B.weight")]
        return torch.nn.functional.linear(torch.nn.functional.linear(x, a), b) * s

    head_copy = ad.get(base_key("lm_head.weight"))
    if head_copy is not None and cfg["tie_word_embeddings"]:
        raise ValueError("the fixtures train lm_head only on untied models")
    return w2, term


def adapter_config(cfg, c, model_dir):
    return {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": model_dir, "bias": "none",
            "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
            "layers_to_transform": None, "loftq_config": {}, "lora_alpha": c["alpha"], "lora_dropout": 0.0,
            "megatron_config": None, "megatron_core": "megatron.core",
            "modules_to_save": c["save"] or None, "peft_type": "LORA", "r": c["r"], "rank_pattern": {},
            "revision": None, "target_modules": sorted(c["targets"]), "task_type": "CAUSAL_LM",
            "use_dora": False, "use_rslora": c["rslora"]}


def one_case(root, out_dir, name, c):
    mdir = os.path.join(root, "tests", "data", "models", c["model"])
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    w = {k: v.to(torch.float64) for k, v in ref_sft.read_safetensors(os.path.join(mdir, "model.safetensors")).items()}
    ad32 = make_adapter(cfg, ref_sft.read_safetensors(os.path.join(mdir, "model.safetensors")), c)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    ref_model.write_safetensors(os.path.join(d, "adapter_model.safetensors"), {k: v.numpy() for k, v in ad32.items()})
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(adapter_config(cfg, c, "tests/data/models/" + c["model"]), f, indent=2, sort_keys=True)
        f.write("\n")
    ad = {k: v.to(torch.float64).requires_grad_(True) for k, v in ad32.items()}
    w2, term = adapted(cfg, w, ad, c)
    ids = ref_model.IDS
    logits = ref_model.forward(cfg, w2, ids, term)
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]))
    loss.backward()
    out = {"ids": np.array(ids, dtype=np.float32), "logits": logits.detach().numpy(),
           "loss": np.array([loss.item()])}
    for k, v in ad.items():
        out["grad." + k] = v.grad.numpy()
    ref_model.write_safetensors(os.path.join(out_dir, name, "expected.safetensors"), out)
    print(f"{name}: {len(ad)} adapter tensors, loss {loss.item():.6f}")


def sft_step(root, out_dir):
    """One LoRA SFT step on the pad_ga batches of ref_sft.py (B=4, GA=2, completion only)."""
    c = CASES[SFT["adapter"]]
    mdir = os.path.join(root, "tests", "data", "models", c["model"])
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    w = {k: v.to(torch.float64) for k, v in ref_sft.read_safetensors(os.path.join(mdir, "model.safetensors")).items()}
    ad32 = ref_sft.read_safetensors(os.path.join(out_dir, SFT["adapter"], "adapter_model.safetensors"))
    ad = {k: v.to(torch.float64).requires_grad_(True) for k, v in ad32.items()}
    w2, term = adapted(cfg, w, ad, c)
    case = ref_sft.CASES["pad_ga"]
    docs = ref_sft.docs_of(ref_sft.make_examples(), case["completion_only"])
    rows = [[(i[:case["max_length"]], l[:case["max_length"]])] for i, l in docs][: case["B"] * case["GA"]]
    num_items = sum(sum(1 for x in lab[1:] if x != -100) for row in rows for _, lab in row)
    total = 0.0
    for row in rows:
        for ids, lab in row:
            logits = ref_model.forward(cfg, w2, ids, term)
            s = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(lab[1:]), ignore_index=-100,
                                                  reduction="sum")
            (s / num_items).backward()
            total += s.item()
    params = list(ad.values())
    norm = torch.nn.utils.clip_grad_norm_(params, SFT["max_norm"])
    # transformers' decay groups: every weight but biases and norm weights (lora_A / lora_B decay)
    decay = [t for k, t in ad.items() if ".lora_" in k]
    no_decay = [t for k, t in ad.items() if ".lora_" not in k]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": SFT["wd"]}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=SFT["lr"], betas=(SFT["b1"], SFT["b2"]), eps=SFT["eps"])
    opt.step()
    out = {"loss": np.array([total / num_items]), "grad_norm": np.array([norm.item()])}
    for k, t in ad.items():
        out["param." + k] = t.detach().numpy()
    d = os.path.join(out_dir, "sft_step")
    os.makedirs(d, exist_ok=True)
    ref_model.write_safetensors(os.path.join(d, "expected.safetensors"), out)
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(dict(SFT, **case), f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"sft_step: loss {total / num_items:.6f} grad_norm {norm.item():.6f}")


def check(model_dir, adapter_dir, ids_text, logits_path):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = {k: v.to(torch.float64) for k, v in ref_sft.read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    ac = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    assert ac["peft_type"] == "LORA" and ac.get("bias", "none") == "none" and not ac.get("use_dora", False), ac
    c = dict(r=ac["r"], alpha=float(ac["lora_alpha"]), rslora=bool(ac.get("use_rslora", False)))
    ad = {k: v.to(torch.float64)
          for k, v in ref_sft.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors")).items()}
    for k, v in ad.items():  # PEFT's shapes: lora_A (r, in), lora_B (out, r)
        if ".lora_A." in k:
            assert v.shape[0] == c["r"], (k, v.shape)
        elif ".lora_B." in k:
            assert v.shape[1] == c["r"], (k, v.shape)
        else:
            assert k[len("base_model.model."):] in w or k == "base_model.model.lm_head.weight", k
    w2, term = adapted(cfg, w, ad, c)
    ids = [int(x) for x in ids_text.split()]
    want = ref_model.forward(cfg, w2, ids, term)
    got = torch.tensor(np.loadtxt(logits_path, ndmin=2), dtype=torch.float64)
    err = ((got - want).norm() / want.norm()).item()
    print(f"{adapter_dir}: {len(ad)} tensors, logits rel err {err:.3g}")
    return 0 if got.shape == want.shape and err <= 1e-5 else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:6]))
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "lora")
    os.makedirs(out_dir, exist_ok=True)
    for name, c in CASES.items():
        one_case(root, out_dir, name, c)
    sft_step(root, out_dir)


if __name__ == "__main__":
    main()
