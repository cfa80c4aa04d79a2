#!/usr/bin/python3
"""PyTorch baseline for bench/gen_bench.c: the same Qwen3-family model (random weights) running
the same greedy loop with a KV cache: prefill B prompts of P tokens (logits of the last position
only), then NEW decode steps of one token per row (preallocated cache, attention over the filled
slots, argmax). float32 and bfloat16 parameters.
Run with Debian's interpreter: /usr/bin/python3 bench/torch_gen_bench.py CONFIG.json P NEW threads [f32,bf16] [1,8]
Prints one JSON object on stdout."""
import json
import sys
import time

import torch
import torch.nn.functional as F

cfg = json.load(open(sys.argv[1]))
P, NEW, threads = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dtypes = (sys.argv[5] if len(sys.argv) > 5 else "f32,bf16").split(",")
batches = [int(b) for b in (sys.argv[6] if len(sys.argv) > 6 else "1,8").split(",")]
torch.set_num_threads(threads)
torch.manual_seed(0)
C, FF, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
HD = cfg.get("head_dim") or C // NH
eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 1e6)


def rms(x, w):
    xf = x.float()
    return (w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        lin = lambda o, i: torch.nn.Parameter(torch.randn(o, i) * 0.02)
        self.emb = lin(V, C)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.q, m.k, m.v, m.o = lin(NH * HD, C), lin(NKV * HD, C), lin(NKV * HD, C), lin(C, NH * HD)
            m.g, m.u, m.d = lin(FF, C), lin(FF, C), lin(C, FF)
            m.ln1, m.ln2 = torch.nn.Parameter(torch.ones(C)), torch.nn.Parameter(torch.ones(C))
            m.qn, m.kn = torch.nn.Parameter(torch.ones(HD)), torch.nn.Parameter(torch.ones(HD))
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(C))

    @torch.no_grad()
    def forward(self, ids, pos, kc, vc, start):
        B, T = ids.shape
        h = F.embedding(ids, self.emb)
        inv = 1.0 / theta ** (torch.arange(0, HD, 2).float() / HD)
        ang = pos[..., None].float() * inv
        cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None].to(h.dtype)
        sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None].to(h.dtype)
        rot = lambda t: torch.cat([-t[..., HD // 2:], t[..., :HD // 2]], -1)
        for l, m in enumerate(self.layers):
            x = rms(h, m.ln1)
            q = rms(F.linear(x, m.q).view(B, T, NH, HD), m.qn).transpose(1, 2)
            k = rms(F.linear(x, m.k).view(B, T, NKV, HD), m.kn).transpose(1, 2)
            v = F.linear(x, m.v).view(B, T, NKV, HD).transpose(1, 2)
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            kc[l][:, :, start:start + T] = k
            vc[l][:, :, start:start + T] = v
            K = kc[l][:, :, :start + T].repeat_interleave(NH // NKV, dim=1)
            Vv = vc[l][:, :, :start + T].repeat_interleave(NH // NKV, dim=1)
            sc = (q @ K.transpose(-1, -2)) * HD ** -0.5
            if T > 1:  # query t sits at slot start + t
                allowed = torch.arange(start + T)[None, :] <= (start + torch.arange(T))[:, None]
                sc = sc.masked_fill(~allowed, float("-inf"))
            a = torch.softmax(sc.float(), -1).to(q.dtype) @ Vv
            h = h + F.linear(a.transpose(1, 2).reshape(B, T, NH * HD), m.o)
            x = rms(h, m.ln2)
            h = h + F.linear(F.silu(F.linear(x, m.g)) * F.linear(x, m.u), m.d)
        return F.linear(rms(h[:, -1], self.norm), self.emb)  # last position only


model = Model()
runs = []
for dt in dtypes:
    tdt = torch.bfloat16 if dt == "bf16" else torch.float32
    model = model.to(tdt)
    for B in batches:
        g = torch.Generator().manual_seed(B)
        ids = torch.randint(0, min(151643, V), (B, P), generator=g)
        S = P + NEW
        kc = [torch.zeros(B, NKV, S, HD, dtype=tdt) for _ in range(L)]
        vc = [torch.zeros(B, NKV, S, HD, dtype=tdt) for _ in range(L)]
        t0 = time.perf_counter()
        logits = model(ids, torch.arange(P).expand(B, P), kc, vc, 0)
        t1 = time.perf_counter()
        nxt = logits.float().argmax(-1)
        for s in range(NEW - 1):
            logits = model(nxt[:, None], torch.full((B, 1), P + s), kc, vc, P + s)
            nxt = logits.float().argmax(-1)
        t2 = time.perf_counter()
        runs.append({"dtype": dt, "batch": B, "prefill_tok_s": B * P / (t1 - t0), "decode_tok_s": B * NEW / (t2 - t1)})
        print(json.dumps(runs[-1]), file=sys.stderr)
print(json.dumps({"torch": torch.__version__, "threads": threads, "runs": runs}))
