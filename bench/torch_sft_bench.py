#!/usr/bin/python3
"""PyTorch baseline for bench/sft_bench.c: one SFT step (forward, backward, clip_grad_norm_,
torch.optim.AdamW) of the model of bench/torch_model_bench.py at B x T, float32.
Run: /usr/bin/python3 bench/torch_sft_bench.py CONFIG.json B T [threads] [steps]
Prints one JSON object on stdout."""
import json
import os
import resource
import sys
import time

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if not hasattr(F, "scaled_dot_product_attention"):  # Debian's torch 1.13 predates it
    def _sdpa(q, k, v, is_causal=False):
        s = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
        if is_causal:
            n = s.shape[-1]
            s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
        return torch.softmax(s, -1) @ v
    F.scaled_dot_product_attention = _sdpa

src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_model_bench.py")).read()
exec(compile(src.split("\ndef timeit")[0], "torch_model_bench.py", "exec"))  # the model definition only
steps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
opt = torch.optim.AdamW(m.parameters(), lr=2e-5, weight_decay=0.0)  # noqa: F821 (from the exec)


def step():
    opt.zero_grad(set_to_none=True)
    m(ids, ids).backward()  # noqa: F821
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)  # noqa: F821
    opt.step()


step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
print(json.dumps({"torch": torch.__version__, "step_s": round(dt, 4), "tok_s": round(B * T / dt, 1),  # noqa: F821
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
