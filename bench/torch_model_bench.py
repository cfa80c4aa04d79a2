#!/usr/bin/python3
"""PyTorch baseline for bench/model_bench.c: the same Qwen3-family model in float32 (HF-style
modules: full [B, T, V] logits, F.cross_entropy), forward and forward+backward at B x T.
Run with Debian's interpreter: /usr/bin/python3 bench/torch_model_bench.py CONFIG.json B T [threads]
Prints one JSON object on stdout."""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

cfg = json.load(open(sys.argv[1]))
B, T = int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
torch.manual_seed(0)
C, FF, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
HD = cfg.get("head_dim") or C // NH
eps = cfg["rms_norm_eps"]


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.q = torch.nn.Linear(C, NH * HD, bias=False)
        self.k = torch.nn.Linear(C, NKV * HD, bias=False)
        self.v = torch.nn.Linear(C, NKV * HD, bias=False)
        self.o = torch.nn.Linear(NH * HD, C, bias=False)
        self.qn, self.kn = RMSNorm(HD), RMSNorm(HD)
        self.g = torch.nn.Linear(C, FF, bias=False)
        self.u = torch.nn.Linear(C, FF, bias=False)
        self.d = torch.nn.Linear(FF, C, bias=False)

    def forward(self, h, cos, sin):
        x = self.ln1(h)
        q = self.qn(self.q(x).view(B, T, NH, HD)).transpose(1, 2)
        k = self.kn(self.k(x).view(B, T, NKV, HD)).transpose(1, 2)
        v = self.v(x).view(B, T, NKV, HD).transpose(1, 2)
        rot = lambda t: torch.cat([-t[..., HD // 2:], t[..., :HD // 2]], -1)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)
        v = v.repeat_interleave(NH // NKV, dim=1)
        # torch 1.13 has no scaled_dot_product_attention: HF's eager attention
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        a = torch.softmax(s, -1) @ v
        h = h + self.o(a.transpose(1, 2).reshape(B, T, NH * HD))
        x = self.ln2(h)
        return h + self.d(F.silu(self.g(x)) * self.u(x))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, C)
        self.layers = torch.nn.ModuleList([Layer() for _ in range(L)])
        self.norm = RMSNorm(C)

    def forward(self, ids, labels):
        inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, HD, 2).float() / HD))
        fr = torch.arange(T).float()[:, None] * inv[None]
        emb = torch.cat([fr, fr], -1)
        cos, sin = emb.cos(), emb.sin()
        h = self.emb(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits = self.norm(h) @ self.emb.weight.T  # tied LM head, full [B, T, V] logits as in HF
        return F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), labels[:, 1:].reshape(-1))


m = Model()
for p in m.parameters():
    if p.dim() == 2:
        torch.nn.init.normal_(p, std=0.02)
ids = torch.randint(0, V, (B, T))
reps = 3


def timeit(fn):
    fn()
    best = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def fwd():
    with torch.no_grad():
        m(ids, ids)


def step():
    m.zero_grad(set_to_none=True)
    m(ids, ids).backward()


tf, ts = timeit(fwd), timeit(step)
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "B": B, "T": T,
                  "forward_s": round(tf, 4), "forward_tok_s": round(B * T / tf, 1),
                  "step_s": round(ts, 4), "step_tok_s": round(B * T / ts, 1)}))
