#!/usr/bin/python3
"""Reference fixtures for LoRA on mixture-of-experts models, applied as PEFT applies them, in float64.

The base models are the tiny qwen3_moe and mixtral checkpoints of scripts/ref_moe.py (a port of
transformers' modeling_qwen3_moe.py / modeling_mixtral.py, whose experts are an nn.ModuleList of
MLPs with gate_proj / up_proj / down_proj, Mixtral's w1 / w3 / w2, and whose router is the
nn.Linear `gate` of the sparse block). PEFT (peft/tuners/lora/model.py, _check_target_module_exists)
wraps every nn.Linear whose module name equals a target or ends with "." + target, so "gate_proj"
adapts the dense MLP of a layer in mlp_only_layers and the gate_proj of every expert; "gate" adapts
the router; "all-linear" (peft/tuners/tuners_utils.py, _maybe_include_all_linear_layers) is every
nn.Linear but the output layer, the router included. Each adapted layer computes
base(x) + lora_B(lora_A(x)) * scaling, which for a linear layer is x (W + scaling B A)^T: the
reference applies the adapter through those effective weights, so every expert sees only the
tokens routed to it and the router's adapter moves the routing itself.

Per case, tests/data/lora/<case>/: adapter_config.json and adapter_model.safetensors as PEFT writes
them (lora_B nonzero), expected.safetensors with ids, logits (T, V), loss (mean next-token
cross-entropy) and grad.<key> of ce + router_aux_loss_coef * load-balancing loss (the loss of
transformers' ForCausalLM with output_router_logits) for every adapter tensor. The script checks
that the adapted router keeps every token's K-th and (K+1)-th logits apart (ref_moe.MIN_GAP).
Run: /usr/bin/python3 scripts/ref_lora_moe.py [OUT_DIR]
     /usr/bin/python3 scripts/ref_lora_moe.py check MODEL_DIR ADAPTER_DIR "IDS" LOGITS.txt
The check form applies any adapter directory (one `still` trained, say) as PEFT would -- its
adapter_config.json and key names -- to the fp32 MoE model and compares the logits of every
position with LOGITS.txt (`still logits --adapter ADAPTER_DIR --all`): it prints the norm-wise
relative error and fails above 1e-5.
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_lora  # noqa: E402
import ref_model  # noqa: E402
import ref_moe  # noqa: E402
import ref_sft  # noqa: E402

torch.set_default_dtype(torch.float64)

CASES = {
    # all-linear: attention, the dense MLP of layer 1, every expert's three projections, the router
    "moe_qwen3": dict(model="qwen3_moe", r=4, alpha=8.0, rslora=False, targets=["all-linear"], seed=21),
    # Mixtral's expert names and the router, one attention projection, rslora
    "moe_mixtral": dict(model="mixtral", r=2, alpha=3.0, rslora=True, targets=["q_proj", "w1", "w2", "w3", "gate"],
                        seed=22),
}


def linear_modules(cfg):
    """Module names of every nn.Linear of the model but the output layer (PEFT's candidates)."""
    return [n[: -len(".weight")] for n, shape in ref_moe.all_tensors(cfg)
            if len(shape) == 2 and n not in ("model.embed_tokens.weight", "lm_head.weight")]


def is_target(module, targets):
    leaf = module.split(".")[-1]
    return "all-linear" in targets or any(module == t or module.endswith("." + t) or leaf == t for t in targets)


def make_adapter(cfg, w, c):
    g = torch.Generator().manual_seed(c["seed"])
    ad = {}
    for module in linear_modules(cfg):
        if not is_target(module, c["targets"]):
            continue
        out, inn = w[module + ".weight"].shape
        bound = 1.0 / math.sqrt(inn)
        ad[f"base_model.model.{module}.lora_A.weight"] = (torch.rand((c["r"], inn), generator=g,
                                                                     dtype=torch.float32) * 2 - 1) * bound
        ad[f"base_model.model.{module}.lora_B.weight"] = 0.3 * torch.randn((out, c["r"]), generator=g,
                                                                           dtype=torch.float32)
    return ad


def effective(w, ad, s):
    """The weights the adapted linear layers compute with: W + scaling B A."""
    w2 = dict(w)
    for k, a in ad.items():
        if ".lora_A." not in k:
            continue
        module = k[len("base_model.model."): -len(".lora_A.weight")]
        b = ad[k.replace(".lora_A.", ".lora_B.")]
        w2[module + ".weight"] = w[module + ".weight"] + s * (b @ a)
    return w2


def targets_written(cfg, c):
    """target_modules as PEFT records them: the names given (all-linear resolved to leaf names)."""
    if "all-linear" not in c["targets"]:
        return sorted(c["targets"])
    return sorted({m.split(".")[-1] for m in linear_modules(cfg)})


def one_case(root, out_dir, name, c):
    mdir = os.path.join(root, "tests", "data", "models", c["model"])
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    w32 = ref_sft.read_safetensors(os.path.join(mdir, "model.safetensors"))
    w = {k: v.to(torch.float64) for k, v in w32.items()}
    ad32 = make_adapter(cfg, w32, c)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    ref_model.write_safetensors(os.path.join(d, "adapter_model.safetensors"), {k: v.numpy() for k, v in ad32.items()})
    conf = ref_lora.adapter_config(cfg, dict(c, save=[]), "tests/data/models/" + c["model"])
    conf["target_modules"] = targets_written(cfg, c)
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
        f.write("\n")
    ad = {k: v.to(torch.float64).requires_grad_(True) for k, v in ad32.items()}
    s = ref_lora.scaling(c)
    ids = ref_moe.IDS
    logits, router_logits = ref_moe.forward(cfg, effective(w, ad, s), ids)
    gap = ref_moe.min_gap(router_logits, cfg["num_experts_per_tok"])
    assert gap > ref_moe.MIN_GAP, f"{name}: adapted router logits within {gap:.2g} of a routing change"
    ce = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]))
    aux = ref_moe.load_balancing_loss(router_logits, ref_moe.n_experts(cfg), cfg["num_experts_per_tok"])
    (ce + cfg["router_aux_loss_coef"] * aux).backward()
    out = {"ids": np.array(ids, dtype=np.float32), "logits": logits.detach().numpy(), "loss": np.array([ce.item()])}
    for k, v in ad.items():
        out["grad." + k] = (v.grad if v.grad is not None else torch.zeros_like(v)).numpy()  # unrouted experts: 0
    ref_model.write_safetensors(os.path.join(d, "expected.safetensors"), out)
    print(f"{name}: {len(ad)} adapter tensors, ce {ce.item():.6f}, aux {aux.item():.6f}, min routing gap {gap:.3g}")


def check(model_dir, adapter_dir, ids_text, logits_path):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = {k: v.to(torch.float64) for k, v in ref_sft.read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    ac = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    assert ac["peft_type"] == "LORA" and ac.get("bias", "none") == "none" and not ac.get("use_dora", False), ac
    c = dict(r=ac["r"], alpha=float(ac["lora_alpha"]), rslora=bool(ac.get("use_rslora", False)))
    ad = {k: v.to(torch.float64)
          for k, v in ref_sft.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors")).items()}
    for k in ad:  # every pair belongs to a module PEFT's target_modules selects
        module = k[len("base_model.model."):].rsplit(".lora_", 1)[0]
        assert ".lora_" in k and module + ".weight" in w and is_target(module, ac["target_modules"]), k
    ids = [int(x) for x in ids_text.split()]
    want, _ = ref_moe.forward(cfg, effective(w, ad, ref_lora.scaling(c)), ids)
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


if __name__ == "__main__":
    main()
