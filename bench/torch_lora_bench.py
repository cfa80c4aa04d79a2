#!/usr/bin/python3
"""PyTorch baseline for bench/bench_lora.sh: one LoRA SFT step on the model of
bench/torch_model_bench.py (float32, frozen base), with LoRA applied to every linear layer as PEFT
does (base(x) + lora_B(lora_A(dropout(x))) * alpha / r; lora_A Kaiming-uniform, lora_B zeros),
torch.optim.AdamW over the adapters only, and optionally per-layer activation checkpointing
(torch.utils.checkpoint, as transformers' gradient_checkpointing_enable).
Run: /usr/bin/python3 bench/torch_lora_bench.py CONFIG.json B T threads steps r ckpt(0|1)
Prints one JSON object on stdout."""
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_model_bench.py")).read()
exec(compile(src.split("\ndef timeit")[0], "torch_model_bench.py", "exec"))  # the model definition only
steps, r, ckpt = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
alpha, p_drop = 2.0 * r, 0.05


class LoraLinear(torch.nn.Module):
    def __init__(self, base):
        super().__init__()
        self.base = base
        self.lora_A = torch.nn.Linear(base.in_features, r, bias=False)
        self.lora_B = torch.nn.Linear(r, base.out_features, bias=False)
        torch.nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        torch.nn.init.zeros_(self.lora_B.weight)
        self.drop = torch.nn.Dropout(p_drop)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(self.drop(x))) * (alpha / r)


for p in m.parameters():  # noqa: F821 (from the exec)
    p.requires_grad_(False)
for layer in m.layers:  # noqa: F821
    for name in ("q", "k", "v", "o", "g", "u", "d"):
        setattr(layer, name, LoraLinear(getattr(layer, name)))
    if ckpt:
        f = layer.forward
        layer.forward = lambda h, cos, sin, f=f: torch.utils.checkpoint.checkpoint(f, h, cos, sin)
m.emb.weight.requires_grad_(False)  # noqa: F821
trainable = [p for p in m.parameters() if p.requires_grad]  # noqa: F821


class EmbWithGrad(torch.nn.Module):  # reentrant checkpointing needs an input that requires grad
    def __init__(self, e):
        super().__init__()
        self.e = e
        self.weight = e.weight

    def forward(self, ids):
        return self.e(ids).requires_grad_(True)


m.emb = EmbWithGrad(m.emb)  # noqa: F821
opt = torch.optim.AdamW(trainable, lr=2e-4, weight_decay=0.0)


def step():
    opt.zero_grad(set_to_none=True)
    m(ids, ids).backward()  # noqa: F821
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()


step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
print(json.dumps({"torch": torch.__version__, "step_s": round(dt, 4), "tok_s": round(B * T / dt, 1),  # noqa: F821
                  "trainable": sum(p.numel() for p in trainable),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
