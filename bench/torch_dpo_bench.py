#!/usr/bin/python3
"""PyTorch baseline for bench/bench_dpo.sh: one DPO step as TRL's DPOTrainer takes it (float32): the
model of bench/torch_model_bench.py (full [2B, T, V] logits, as HF) on the concatenated batch
[prompt + chosen ; prompt + rejected], a frozen reference copy under no_grad, TRL's
selective_log_softmax (gather - logsumexp, row by row) over the completion tokens, the sigmoid loss,
backward, clip_grad_norm_ and torch.optim.AdamW.
Run: /usr/bin/python3 bench/torch_dpo_bench.py CONFIG.json PAIRS PROMPT COMPLETION [threads] [steps]
Prints one JSON object on stdout: tokens/s counts every token of both rows (TRL's num_tokens)."""
import copy
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

pairs, P, Cn = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
threads = sys.argv[5] if len(sys.argv) > 5 else "2"
steps = int(sys.argv[6]) if len(sys.argv) > 6 else 2
# the model definition of torch_model_bench.py, built for B = 2 * pairs rows of T = P + Cn tokens
sys.argv = [sys.argv[0], sys.argv[1], str(2 * pairs), str(P + Cn), threads]
src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_model_bench.py")).read()
exec(compile(src.split("\ndef timeit")[0], "torch_model_bench.py", "exec"))  # m, ids, B, T, V, ...
ref = copy.deepcopy(m).eval()  # noqa: F821
for p in ref.parameters():
    p.requires_grad_(False)
mask = torch.zeros(B, T)  # noqa: F821
mask[:, P:] = 1
opt = torch.optim.AdamW(m.parameters(), lr=1e-6, weight_decay=0.0)  # noqa: F821
beta = 0.1


def logits_of(model, ids):
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, HD, 2).float() / HD))  # noqa: F821
    fr = torch.arange(T).float()[:, None] * inv[None]  # noqa: F821
    emb = torch.cat([fr, fr], -1)
    cos, sin = emb.cos(), emb.sin()
    h = model.emb(ids)
    for layer in model.layers:
        h = layer(h, cos, sin)
    return model.norm(h) @ model.emb.weight.T


def seq_logps(logits, ids):
    z, y, mk = logits[:, :-1], ids[:, 1:], mask[:, 1:]
    lse = torch.stack([torch.logsumexp(row, dim=-1) for row in z])  # TRL's selective_log_softmax (fp32)
    lp = torch.gather(z, -1, y.unsqueeze(-1)).squeeze(-1) - lse
    return (lp * mk).sum(-1)


def step():
    opt.zero_grad(set_to_none=True)
    lp = seq_logps(logits_of(m, ids), ids)  # noqa: F821
    with torch.no_grad():
        rp = seq_logps(logits_of(ref, ids), ids)  # noqa: F821
    c, r = lp.chunk(2)
    rc, rr = rp.chunk(2)
    loss = -F.logsigmoid(beta * ((c - rc) - (r - rr))).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)  # noqa: F821
    opt.step()


step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
print(json.dumps({"torch": torch.__version__, "step_s": round(dt, 4), "tok_s": round(B * T / dt, 1),  # noqa: F821
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
