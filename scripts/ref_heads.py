#!/usr/bin/python3
"""PyTorch references for the distillation and RL heads (tests/ops/test_heads_torch.c).

Random fp32 inputs (fixed seed); everything evaluated in float64 from those inputs, with the
primitives TRL uses:
  - logprob_head: log_softmax(logits / temperature).gather (selective_log_softmax), entropy,
    backward of sum(coef * logp) by autograd;
  - distill_head: F.log_softmax of logits / temperature, then TRL's _jsd_divergence
    (F.kl_div(..., log_target=True), torch.logsumexp for the mixture with log1p(-beta) / log(beta)),
    for beta 0, 0.5, 1 and 0.3, temperatures 1, 0.8, 1.5, top-k supports (torch.topk of the
    teacher logits, both sides renormalised by log_softmax over the gathered k entries), per-row
    weights; the kl_student_teacher metric F.kl_div(t, s, log_target=True) at temperature 1;
    d(hidden) and d(W) by autograd;
  - GRPO advantages (sum_then_normalize with TRL's nanstd: Bessel, NaN below two values;
    unscorable rows NaN then nan_to_num) for scale_rewards group / batch / none;
  - RLOO advantages (leave-one-out over scorable siblings, reward clip, k1 KL in the reward,
    normalize_advantages);
  - GRPO's per-token loss and its aggregation for loss_type grpo / bnpo / dr_grpo / dapo, with
    clipping (epsilon, epsilon_high), k3 KL to a reference (beta), use_bias_correction_kl and an
    importance-sampling ratio; d loss / d logp by autograd;
  - RLOO's sequence-level ratio loss; the sampled-token distillation loss.

File format (little endian), as scripts/ref_ops.py: b"STILLOPS1", then records until the end:
  u8 kind (0 = f32, 1 = i32), u8 name length, name (ascii), u32 count, count values.

Run with Debian's python3 (it has torch): /usr/bin/python3 scripts/ref_heads.py OUT.bin
"""
import struct
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(20260501)
records = []
D = torch.float64


def put(name, t):
    t = torch.as_tensor(t).detach().contiguous()
    if t.dtype in (torch.int32, torch.int64):
        records.append((1, name, t.to(torch.int32).flatten().tolist()))
    else:
        records.append((0, name, t.to(torch.float32).flatten().tolist()))


def randn(*shape, scale=1.0):
    return torch.randn(*shape, dtype=torch.float32) * scale


def leaf(x):
    return x.to(D).requires_grad_(True)


# ---- logprob_head: h (N,C), W (V,C), targets (N), coef (N), tau
N, C, V, tau = 6, 8, 37, 0.7
h, W = randn(N, C), randn(V, C, scale=0.6)
targets = torch.randint(0, V, (N,), dtype=torch.int64)
targets[2] = -100
coef = randn(N)
hl, Wl = leaf(h), leaf(W)
logits = (hl @ Wl.T) / tau
keep = targets != -100
safe = torch.where(keep, targets, torch.zeros_like(targets))
lsm = torch.log_softmax(logits, dim=-1)
logp = torch.where(keep, lsm.gather(-1, safe[:, None])[:, 0], torch.zeros(N, dtype=D))
entropy = torch.where(keep, -(lsm.exp() * lsm).sum(-1), torch.zeros(N, dtype=D))
(coef.to(D) * logp).sum().backward()
put("lp.dims", torch.tensor([N, C, V]))
put("lp.tau", torch.tensor([tau]))
put("lp.targets", targets)
for name, t in [("h", h), ("W", W), ("coef", coef), ("logp", logp), ("entropy", entropy), ("dh", hl.grad),
                ("dW", Wl.grad)]:
    put("lp." + name, t)


# ---- distill_head
def jsd_divergence(s, t, beta):
    """TRL's _jsd_divergence without a support mask (full or already-gathered support)."""
    if beta == 0:
        return F.kl_div(s, t, reduction="none", log_target=True)
    if beta == 1:
        return F.kl_div(t, s, reduction="none", log_target=True)
    b = torch.tensor(beta, dtype=s.dtype)
    m = torch.logsumexp(torch.stack([s + torch.log1p(-b), t + torch.log(b)]), dim=0)
    return b * F.kl_div(m, t, reduction="none", log_target=True) + (1 - b) * F.kl_div(m, s, reduction="none",
                                                                                       log_target=True)


DCASES = [  # name, tau, beta, top_k
    ("d0", 1.0, 0.0, 0), ("d1", 1.0, 0.5, 0), ("d2", 1.0, 1.0, 0), ("d3", 1.5, 0.5, 0),
    ("d4", 0.8, 0.0, 5), ("d5", 1.0, 1.0, 5), ("d6", 1.2, 0.3, 7),
]
N, Cs, Ct, V, grad_scale = 5, 6, 9, 29, 0.7
for name, tau, beta, top_k in DCASES:
    hs, Ws, ht, Wt = randn(N, Cs), randn(V, Cs, scale=0.7), randn(N, Ct), randn(V, Ct, scale=0.7)
    targets = torch.randint(0, V, (N,), dtype=torch.int64)
    targets[1] = -100
    weights = torch.rand(N, dtype=torch.float32) + 0.25
    hsl, Wsl = leaf(hs), leaf(Ws)
    zs, zt = hsl @ Wsl.T, ht.to(D) @ Wt.to(D).T
    if top_k > 0:
        idx = torch.topk(zt, top_k, dim=-1).indices
        s = F.log_softmax(zs.gather(-1, idx) / tau, dim=-1)
        t = F.log_softmax(zt.gather(-1, idx) / tau, dim=-1)
    else:
        s, t = F.log_softmax(zs / tau, dim=-1), F.log_softmax(zt / tau, dim=-1)
    keep = (targets != -100).to(D)
    jsd = jsd_divergence(s, t, beta).sum(-1) * keep * weights.to(D)
    kl = F.kl_div(F.log_softmax(zt, -1), F.log_softmax(zs, -1), reduction="none", log_target=True).sum(-1) * keep
    (jsd.sum() * grad_scale).backward()
    p = "ds." + name + "."
    put(p + "dims", torch.tensor([N, Cs, Ct, V, top_k]))
    put(p + "params", torch.tensor([tau, beta, grad_scale]))
    put(p + "targets", targets)
    for nm, tt in [("hs", hs), ("Ws", Ws), ("ht", ht), ("Wt", Wt), ("weights", weights), ("loss", jsd), ("kl", kl),
                   ("dhs", hsl.grad), ("dWs", Wsl.grad)]:
        put(p + nm, tt)


# ---- GRPO advantages
def nanstd(x, dim=None):
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(x), dim=dim, keepdim=True)
    corr = torch.where(count > 1, count / (count - 1), torch.full_like(var, float("nan")))
    out = torch.sqrt(var * corr)
    return out.squeeze(dim) if dim is not None else out.squeeze()


G, ngroups, K = 4, 3, 2
n = G * ngroups
R = torch.rand(n, K, dtype=torch.float32) * 3 - 1
R[1, 0] = float("nan")
R[5, :] = float("nan")  # unscorable
R[9:12, 1] = float("nan")
R[9:11, 0] = float("nan")  # group 2: one scorable completion
rw = torch.tensor([1.0, 0.5], dtype=torch.float32)
put("adv.dims", torch.tensor([n, G, K]))
put("adv.rewards", R)
put("adv.weights", rw)
Rd = R.to(D)
unscorable = torch.isnan(Rd).all(dim=1)
rewards = (Rd * rw.to(D)[None]).nansum(dim=1)
rewards[unscorable] = float("nan")
put("adv.total", rewards)
mean_g = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G)
std_g = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G)
std_b = nanstd(rewards).expand_as(rewards)
put("adv.group", torch.nan_to_num((rewards - mean_g) / (std_g + 1e-4), nan=0.0))
put("adv.batch", torch.nan_to_num((rewards - mean_g) / (std_b + 1e-4), nan=0.0))
put("adv.none", torch.nan_to_num(rewards - mean_g, nan=0.0))

# ---- RLOO advantages: clip [-0.5, 1.5], beta 0.05 with k1 KL summed over the mask, normalize
T = 5
old_lp, ref_lp = -3 * torch.rand(n, T, dtype=torch.float32), -3 * torch.rand(n, T, dtype=torch.float32)
mask = (torch.arange(T)[None, :] < torch.randint(1, T + 1, (n, 1))).to(torch.float32)
put("rloo.old", old_lp)
put("rloo.ref", ref_lp)
put("rloo.mask", mask)
seq_kl = ((old_lp.to(D) - ref_lp.to(D)) * mask.to(D)).sum(-1)
put("rloo.seq_kl", seq_kl)
for tag, clip, beta, norm in [("a", None, 0.0, False), ("b", (-0.5, 1.5), 0.05, False), ("c", (-0.5, 1.5), 0.05, True)]:
    r = rewards.clone()
    if clip:
        r = r.clamp(min=clip[0], max=clip[1])
    if beta != 0:
        r = r - beta * seq_kl
    grouped = r.view(-1, G)
    cnt = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    gsum = torch.nansum(grouped, dim=1, keepdim=True)
    adv = (r - ((gsum - grouped) / (cnt - 1)).view(-1))
    if norm:
        adv = (adv - torch.nanmean(adv)) / (nanstd(adv) + 1e-4)
    put("rloo.adv." + tag, torch.nan_to_num(adv, nan=0.0))

# ---- GRPO per-token loss, B completions of T tokens
B, T = 4, 6
logp = -3 * torch.rand(B, T, dtype=torch.float32)
old = logp + 0.4 * torch.randn(B, T, dtype=torch.float32)
ref = logp + 0.6 * torch.randn(B, T, dtype=torch.float32)
isr = 0.5 + torch.rand(B, T, dtype=torch.float32)
lens = torch.tensor([2, 6, 4, 1])
mask = (torch.arange(T)[None, :] < lens[:, None]).to(torch.float32)
adv = torch.randn(B, dtype=torch.float32)
eps_lo, eps_hi, beta, ga, mcl, num_items, P = 0.2, 0.28, 0.04, 3, 9, 30.0, 2
for nm, tt in [("logp", logp), ("old", old), ("ref", ref), ("isr", isr), ("mask", mask), ("adv", adv)]:
    put("pg." + nm, tt)
put("pg.dims", torch.tensor([B, T, ga, mcl, P]))
put("pg.params", torch.tensor([eps_lo, eps_hi, beta, num_items]))
LTYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]
for li, lt in enumerate(LTYPES):
    for variant in range(3):  # 0: beta 0 ; 1: beta ; 2: beta, bias-corrected KL, IS ratio
        lpl = leaf(logp)
        m, A = mask.to(D), adv.to(D)[:, None]
        coef_1 = torch.exp(lpl - old.to(D))
        coef_2 = torch.clamp(coef_1, 1 - eps_lo, 1 + eps_hi)
        ptl = -torch.min(coef_1 * A, coef_2 * A)
        if variant == 2:
            ptl = ptl * isr.to(D)
        if variant >= 1:
            x = ref.to(D) - lpl
            kl = torch.exp(x) - x - 1
            if variant == 2:
                kl = kl * coef_1
            ptl = ptl + beta * kl
        if lt == "grpo":
            loss = ((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean() / ga
        elif lt == "bnpo":
            loss = (ptl * m).sum() / m.sum().clamp(min=1.0) / ga
        elif lt == "dr_grpo":
            loss = (ptl * m).sum() / (ptl.size(0) * mcl) / ga
        else:
            loss = (ptl * m).sum() / (max(num_items, 1.0) / P)
        loss.backward()
        p = "pg.%s.%d." % (lt, variant)
        put(p + "loss", torch.tensor([loss.item()], dtype=D))
        put(p + "tok", ptl)
        put(p + "coef", lpl.grad)
lo_c = ((torch.exp(logp.to(D) - old.to(D)) < 1 - eps_lo) & (adv.to(D)[:, None] < 0)).to(D)
hi_c = ((torch.exp(logp.to(D) - old.to(D)) > 1 + eps_hi) & (adv.to(D)[:, None] > 0)).to(D)
msum = mask.to(D).sum()
put("pg.clip", torch.stack([(lo_c * mask).sum() / msum, (hi_c * mask).sum() / msum,
                            (((lo_c + hi_c) > 0).to(D) * mask).sum() / msum]))

# ---- RLOO sequence loss (GA 3)
lpl = leaf(logp)
old_seq = (old.to(D) * mask.to(D)).sum(1)
w = torch.exp((lpl * mask.to(D)).sum(1) - old_seq)
A = adv.to(D)
loss = (-torch.min(w * A, torch.clamp(w, 1 - eps_lo, 1 + eps_hi) * A)).mean() / ga
loss.backward()
put("rl.loss", torch.tensor([loss.item()], dtype=D))
put("rl.old_seq", old_seq)
put("rl.coef", lpl.grad)

# ---- sampled-token distillation: loss = -sum(mask * sg(lt - ls) * ls) / norm
lsl = leaf(logp)
lt_ = ref.to(D)
norm = 7.0
loss = -(mask.to(D) * (lt_ - lsl).detach() * lsl).sum() / norm
loss.backward()
put("st.loss", torch.tensor([loss.item()], dtype=D))
put("st.coef", lsl.grad)

with open(sys.argv[1], "wb") as f:
    f.write(b"STILLOPS1")
    for kind, name, vals in records:
        nb = name.encode("ascii")
        f.write(struct.pack("<BB", kind, len(nb)) + nb + struct.pack("<I", len(vals)))
        f.write(struct.pack("<%d%s" % (len(vals), "f" if kind == 0 else "i"), *vals))
