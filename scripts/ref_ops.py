#!/usr/bin/python3
"""PyTorch references for the reference backend's ops (tests/ops/test_ref_torch.c).

Random fp32 inputs (fixed seed); every op evaluated by PyTorch in float64 from those inputs,
forward and, through autograd, backward with a random output gradient. Cases: attention with
GQA, left padding (segment 0) and packed documents; RMSNorm; RoPE (half-split, fp32 angle as
in transformers, non-trivial inv_freq and mscale); SwiGLU; the cross-entropy head with per-row
weights, ignored rows and a gradient scale; attention with sinks and a sliding window (GPT-OSS).

File format (little endian): b"STILLOPS1", then records until the end:
  u8 kind (0 = f32, 1 = i32), u8 name length, name (ascii), u32 count, count values.

Run with Debian's python3 (it has torch): /usr/bin/python3 scripts/ref_ops.py OUT.bin
"""
import math
import struct
import sys

import torch

torch.manual_seed(20240611)
records = []


def put(name, t):
    t = t.detach().contiguous()
    if t.dtype in (torch.int32, torch.int64):
        records.append((1, name, t.to(torch.int32).flatten().tolist()))
    else:
        records.append((0, name, t.to(torch.float32).flatten().tolist()))


def randn(*shape, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float32) * scale)


def leaf(x):
    return x.to(torch.float64).requires_grad_(True)


# ---- attention: q (B,T,NH,HD), k v (B,T,NKV,HD), seg (B,T) -> out (B,T,NH,HD), lse (B,NH,T)
B, T, NH, NKV, HD = 2, 7, 4, 2, 8
seg = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [3, 3, 3, 5, 5, 9, 9]], dtype=torch.int32)
q, k, v, dout = randn(B, T, NH, HD), randn(B, T, NKV, HD), randn(B, T, NKV, HD), randn(B, T, NH, HD)
ql, kl, vl = leaf(q), leaf(k), leaf(v)
rep = NH // NKV
kh = kl.repeat_interleave(rep, dim=2).transpose(1, 2)  # (B,NH,T,HD)
vh = vl.repeat_interleave(rep, dim=2).transpose(1, 2)
scores = ql.transpose(1, 2) @ kh.transpose(-1, -2) / math.sqrt(HD)  # (B,NH,T,T)
tt = torch.arange(T)
allowed = (tt[None, :, None] >= tt[None, None, :]) & (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
allowed = allowed[:, None, :, :].expand(B, NH, T, T)
masked = scores.masked_fill(~allowed, float("-inf"))
pad = (seg == 0)[:, None, :, None].expand(B, NH, T, 1)
safe = torch.where(pad.expand(B, NH, T, T), torch.zeros_like(masked), masked)
lse = torch.where(pad[..., 0], torch.zeros(B, NH, T, dtype=torch.float64), torch.logsumexp(safe, dim=-1))
p = torch.where(pad.expand(B, NH, T, T), torch.zeros_like(safe), torch.softmax(safe, dim=-1))
out = (p @ vh).transpose(1, 2)  # (B,T,NH,HD)
out.backward(dout.to(torch.float64))
put("attn.dims", torch.tensor([B, T, NH, NKV, HD]))
put("attn.seg", seg)
for name, t in [("q", q), ("k", k), ("v", v), ("dout", dout), ("out", out), ("lse", lse),
                ("dq", ql.grad), ("dk", kl.grad), ("dv", vl.grad)]:
    put("attn." + name, t)

# ---- rmsnorm: inp (N,C), w (C) -> out (N,C), rstd (N)
N, C, eps = 5, 12, 1e-6
x, w, dout = randn(N, C, scale=2.0), randn(C), randn(N, C)
xl, wl = leaf(x), leaf(w)
rstd = torch.rsqrt((xl * xl).mean(-1) + eps)
out = xl * rstd[:, None] * wl
out.backward(dout.to(torch.float64))
put("rms.dims", torch.tensor([N, C]))
for name, t in [("inp", x), ("w", w), ("dout", dout), ("out", out), ("rstd", rstd), ("dinp", xl.grad),
                ("dw", wl.grad)]:
    put("rms." + name, t)

# ---- rope: x (N,NH,HD), pos (N), inv_freq (HD/2) fp32 as in transformers; angle fp32
N, NH, HD, mscale = 5, 2, 8, 1.2
pos = torch.tensor([0, 3, 17, 1000, 40000], dtype=torch.int32)
inv_freq = 1.0 / (1e6 ** (torch.arange(0, HD, 2, dtype=torch.int64).float() / HD))
angle = pos.float()[:, None] * inv_freq[None, :]  # fp32 product
cos = torch.cos(angle.double()) * mscale
sin = torch.sin(angle.double()) * mscale
x = randn(N, NH, HD)
xd = x.double()
a, b = xd[..., : HD // 2], xd[..., HD // 2:]
c, s = cos[:, None, :], sin[:, None, :]
out = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
dx_in = randn(N, NH, HD)
ga, gb = dx_in.double()[..., : HD // 2], dx_in.double()[..., HD // 2:]
dx = torch.cat([ga * c + gb * s, gb * c - ga * s], dim=-1)  # transpose rotation
put("rope.dims", torch.tensor([N, NH, HD]))
put("rope.mscale", torch.tensor([mscale]))
for name, t in [("pos", pos), ("inv_freq", inv_freq), ("x", x), ("out", out), ("dout", dx_in), ("dx", dx)]:
    put("rope." + name, t)

# ---- swiglu: gate, up (n) -> silu(gate) * up
n = 23
g, u, dout = randn(n, scale=3.0), randn(n), randn(n)
gl, ul = leaf(g), leaf(u)
out = torch.nn.functional.silu(gl) * ul
out.backward(dout.to(torch.float64))
put("swiglu.dims", torch.tensor([n]))
for name, t in [("gate", g), ("up", u), ("dout", dout), ("out", out), ("dgate", gl.grad), ("dup", ul.grad)]:
    put("swiglu." + name, t)

# ---- cross-entropy head: h (N,C), W (V,C), targets (N), weights (N), grad_scale
N, C, V, grad_scale = 6, 8, 37, 0.7
h, W = randn(N, C), randn(V, C, scale=0.7)
targets = torch.tensor([3, -100, 0, 36, 3, 11], dtype=torch.int64)
weights = torch.tensor([1.0, 2.0, 0.5, 1.5, 0.0, 1.0], dtype=torch.float32)
hl, Wl = leaf(h), leaf(W)
logits = hl @ Wl.T
row_loss = torch.nn.functional.cross_entropy(logits, targets, reduction="none", ignore_index=-100) * weights.double()
logp = torch.log_softmax(logits, dim=-1)
keep = targets != -100
entropy = torch.where(keep, -(logp.exp() * logp).sum(-1), torch.zeros(N, dtype=torch.float64))
correct = (keep & (logits.argmax(-1) == targets)).double()
(row_loss.sum() * grad_scale).backward()
put("ce.dims", torch.tensor([N, C, V]))
put("ce.grad_scale", torch.tensor([grad_scale]))
put("ce.targets", targets)
for name, t in [("h", h), ("W", W), ("weights", weights), ("loss", row_loss), ("entropy", entropy),
                ("correct", correct), ("dh", hl.grad), ("dW", Wl.grad)]:
    put("ce." + name, t)

# ---- attention sinks (GPT-OSS, transformers' eager_attention_forward of modeling_gpt_oss.py): the
# per-head sink logit is concatenated to each row of masked scores, softmax over scores + sink, the
# sink's column dropped; with a sliding window of 3 (kv_idx > q_idx - 3). Padding rows (seg 0) are
# 0 with lse 0, as still defines them.
B, T, NH, NKV, HD, W = 2, 7, 4, 2, 8, 3
seg = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [3, 3, 3, 5, 5, 5, 5]], dtype=torch.int32)
q, k, v, dout = randn(B, T, NH, HD), randn(B, T, NKV, HD), randn(B, T, NKV, HD), randn(B, T, NH, HD)
sinks = randn(NH, scale=1.5)
ql, kl, vl, sl = leaf(q), leaf(k), leaf(v), leaf(sinks)
rep = NH // NKV
kh = kl.repeat_interleave(rep, dim=2).transpose(1, 2)
vh = vl.repeat_interleave(rep, dim=2).transpose(1, 2)
scores = ql.transpose(1, 2) @ kh.transpose(-1, -2) / math.sqrt(HD)  # (B,NH,T,T)
tt = torch.arange(T)
allowed = ((tt[None, :, None] >= tt[None, None, :]) & (tt[None, None, :] > tt[None, :, None] - W)
           & (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0))
allowed = allowed[:, None, :, :].expand(B, NH, T, T)
masked = scores.masked_fill(~allowed, float("-inf"))
combined = torch.cat([masked, sl.reshape(1, -1, 1, 1).expand(B, NH, T, 1)], dim=-1)
combined = combined - combined.max(dim=-1, keepdim=True).values
probs = torch.softmax(combined, dim=-1)[..., :-1]
pad = (seg == 0)[:, None, :, None].expand(B, NH, T, 1)
probs = torch.where(pad.expand(B, NH, T, T), torch.zeros_like(probs), probs)
out = (probs @ vh).transpose(1, 2)
lse_full = torch.logsumexp(torch.cat([masked, sl.reshape(1, -1, 1, 1).expand(B, NH, T, 1)], dim=-1), dim=-1)
lse = torch.where(pad[..., 0], torch.zeros(B, NH, T, dtype=torch.float64), lse_full)
out.backward(dout.to(torch.float64))
put("sink.dims", torch.tensor([B, T, NH, NKV, HD, W]))
put("sink.seg", seg)
for name, t in [("q", q), ("k", k), ("v", v), ("sinks", sinks), ("dout", dout), ("out", out), ("lse", lse),
                ("dq", ql.grad), ("dk", kl.grad), ("dv", vl.grad), ("dsinks", sl.grad)]:
    put("sink." + name, t)

with open(sys.argv[1], "wb") as f:
    f.write(b"STILLOPS1")
    for kind, name, vals in records:
        nb = name.encode("ascii")
        f.write(struct.pack("<BB", kind, len(nb)) + nb + struct.pack("<I", len(vals)))
        f.write(struct.pack("<%d%s" % (len(vals), "f" if kind == 0 else "i"), *vals))
