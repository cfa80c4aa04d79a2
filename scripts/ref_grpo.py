#!/usr/bin/python3
"""Reference fixtures for GRPO and RLOO: two optimizer steps of TRL's GRPOTrainer / RLOOTrainer on
fixed completions (token ids given, not sampled), in float64 PyTorch, for tests/model/test_grpo_torch.c.

Writes tests/data/grpo/:
  model/        a tiny random Qwen3 checkpoint (config.json, model.safetensors) with the byte-level
                tokenizer of ref_sft.py (EOS <|im_end|> = 258, pad <|endoftext|> = 256)
  prompts.jsonl the prompts (plain strings: their ids are their bytes)
  cases.json    per case: the trainer's settings and its generation rounds (prompt index, completion
                ids as generated, per-function rewards with null = None)
  <case>.safetensors  per optimizer step s (1, 2): step<s>.loss (what backward sees, summed over the
                micro-batches), step<s>.grad_norm, step<s>.grad.<n> (the accumulated gradient, before
                clipping), step<s>.exp_avg.<n>, step<s>.exp_avg_sq.<n> and step<s>.param.<n> after the
                AdamW step; round<r>.advantages of each generation round

The step follows TRL's source (trl/trainer/grpo_trainer.py, rloo_trainer.py), semantics only:
  completions   cut after the first EOS (the tokenizer's eos_token_id) and masked up to it, included;
                mask_truncated_completions zeroes the mask of a completion whose last kept id is neither
                EOS nor pad
  log-probs     log_softmax(logits / temperature) of each completion token; each row runs unpadded
                (TRL's left-padded batch with an attention mask computes the same numbers)
  rewards       nansum_k w_k r_k, NaN when every function returned None (unscorable: excluded from
                baselines, advantage 0)
  GRPO          A = (r - nanmean(group)) / (nanstd + 1e-4), nanstd over the group (scale_rewards group)
                or the whole round (batch), no division for none. Per token: w = exp(logp - old_logp),
                l = -min(w A, clamp(w, 1 - eps, 1 + eps_high) A) + beta k3 with k3 = exp(ref - logp) -
                (ref - logp) - 1; per micro-batch: grpo mean over rows of the row's token mean / GA,
                bnpo token sum / mask sum / GA, dr_grpo token sum / (B * max_completion_length) / GA,
                dapo token sum / (the mask sum of the whole generation round). GRPOTrainer scales its
                loss itself (Trainer's GA division is off).
  RLOO          r -= beta * sum_t mask (old_logp - ref_logp) (k1 of the generation-time log-probs) after
                clamping r to reward_clip_range; A = r - (group sum - r) / (scorable - 1); with
                normalize_advantages A = (A - nanmean) / (nanstd + 1e-4) over the round. Per sequence:
                w = exp(sum mask logp - sum mask old_logp), l = -min(w A, clamp(w) A); loss = mean over
                the micro-batch, divided by GA by Trainer.training_step.
  rounds        one round = B * GA completions (steps_per_generation = GA), prompt-major with G rows per
                prompt, reused for num_iterations optimizer steps; old_logp are the log-probs at the
                weights the round was generated with; the reference is the initial checkpoint.
  optimizer     clip_grad_norm_(max_grad_norm), then torch.optim.AdamW (weight decay on matrices only,
                transformers' parameter groups) at a constant learning rate.
Micro-batches take the round's rows in order. TRL shuffles the round first; every loss here but bnpo
is a sum over rows with normalisers that do not depend on which rows share a micro-batch, and the bnpo
case has one micro-batch, so the order does not change the step.

Before step 2 the weights and the moments are rounded to float32, so that step 2 starts exactly from
the state the C test loads (it checks each step from the reference's state: the first AdamW update
is ill-conditioned where |g| is near eps, and step 2 must not inherit that).
Every case with a second iteration asserts that some, not all, of the tokens (sequences for RLOO)
were clipped there, and every step that no ratio lies within 1e-4 of a clip bound (where float32
rounding could flip a token between clipped and not).
Run: /usr/bin/python3 scripts/ref_grpo.py [OUT_DIR]
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

EOS, PAD = 258, 256
CFG = {"vocab_size": 384, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
       "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "max_position_embeddings": 512,
       "initializer_range": 0.02, "torch_dtype": "float32", "bos_token_id": 256, "eos_token_id": EOS,
       "hidden_act": "silu", "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-06,
       "rope_theta": 10000.0, "tie_word_embeddings": True, "attention_bias": False}
PROMPTS = ["Q0: 2+3=", "Q1: name a colour.", "Q2: hi", "Q3: count 1 2", "Q4: spell cat", "Q5: yes or no?"]
C = 6  # max_completion_length
TEMPERATURE = 0.7
WEIGHTS = [1.0, 0.5]  # two reward functions
LR, WD, B1, B2, EPS, MAX_NORM = 3e-4, 0.1, 0.9, 0.999, 1e-8, 1.0
MARGIN = 1e-4

BASE = dict(algo="grpo", loss_type="dapo", scale_rewards="group", beta=0.0, epsilon=0.2, epsilon_high=None,
            num_iterations=1, mask_truncated_completions=False, normalize_advantages=False, reward_clip_range=None,
            G=4, B=4, GA=2, seed=0, unscorable=False)
CASES = {
    "grpo_beta_iter2": dict(BASE, loss_type="grpo", beta=0.04, num_iterations=2, epsilon=0.1, seed=1),
    "bnpo_batch_iter2": dict(BASE, loss_type="bnpo", scale_rewards="batch", num_iterations=2, epsilon=0.08,
                             epsilon_high=0.12, B=8, GA=1, seed=2),
    "dr_grpo_none_beta": dict(BASE, loss_type="dr_grpo", scale_rewards="none", beta=0.1, seed=3),
    "dapo_masked_iter2": dict(BASE, loss_type="dapo", beta=0.04, num_iterations=2, epsilon=0.1, epsilon_high=0.15,
                              mask_truncated_completions=True, seed=4, unscorable=True),
    "rloo_beta": dict(BASE, algo="rloo", beta=0.05, seed=5),
    "rloo_normalize_clip_iter2": dict(BASE, algo="rloo", beta=0.05, num_iterations=2, epsilon=0.2,
                                      normalize_advantages=True, reward_clip_range=[-0.5, 1.0], G=2, seed=6,
                                      unscorable=True),
}


def make_round(c, k):
    """One generation round: prompt index, completion ids as generated (up to C, tokens after an EOS
    kept: the mask rule must drop them), rewards (n, 2) with None."""
    g = np.random.default_rng(100 * c["seed"] + k)
    n, G = c["B"] * c["GA"], c["G"]
    prompts = [int(x) for x in g.choice(len(PROMPTS), size=n // G, replace=False)]
    rows = []
    for i in range(n):
        kind = int(g.integers(0, 4))
        if kind == 0:    # truncated: C tokens, no EOS
            ids = [int(x) for x in g.integers(3, 256, size=C)]
        elif kind == 1:  # ends with EOS
            L = int(g.integers(1, C + 1))
            ids = [int(x) for x in g.integers(3, 256, size=L - 1)] + [EOS]
        elif kind == 2:  # EOS in the middle, tokens after it
            e = int(g.integers(0, C - 1))
            ids = [int(x) for x in g.integers(3, 256, size=e)] + [EOS] + [int(x) for x in g.integers(3, 256, size=C - e - 1)]
        else:            # short, ends with EOS
            ids = [int(x) for x in g.integers(3, 256, size=int(g.integers(0, 3)))] + [EOS]
        r = [float(np.round(g.normal(), 2)), float(np.round(g.uniform(), 2))]
        if g.uniform() < 0.2:
            r[1] = None
        rows.append({"prompt": prompts[i // G], "ids": ids, "rewards": r})
    if c["unscorable"]:
        rows[1]["rewards"] = [None, None]
    return rows


def kept(ids):
    """TRL: the completion up to and including the first EOS."""
    return ids[: ids.index(EOS) + 1] if EOS in ids else list(ids)


def row_logps(w, prompt_ids, comp):
    """log p(comp[t] | prompt, comp[:t]) at logits / temperature, one unpadded row."""
    ids = prompt_ids + comp
    logits = ref_model.forward(CFG, w, ids)[len(prompt_ids) - 1: len(ids) - 1] / TEMPERATURE
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(comp)[:, None])[:, 0]


def padded_logps(w, rows, prompt_ids):
    """(n, C) log-probs of the kept completion tokens, 0 elsewhere."""
    out = []
    for r in rows:
        comp = kept(r["ids"])
        lp = row_logps(w, prompt_ids[r["prompt"]], comp)
        out.append(torch.cat([lp, torch.zeros(C - len(comp))]))
    return torch.stack(out)


def nanstd(x):
    v = x[~torch.isnan(x)]
    return v.std() if v.numel() > 1 else torch.tensor(float("nan"))


def masks(c, rows):
    m = torch.zeros(len(rows), C)
    for i, r in enumerate(rows):
        comp = kept(r["ids"])
        truncated = comp[-1] not in (EOS, PAD)
        if not (c["mask_truncated_completions"] and truncated):
            m[i, : len(comp)] = 1
    return m


def total_rewards(rows):
    R = torch.tensor([[math.nan if v is None else v for v in r["rewards"]] for r in rows])
    tot = (R * torch.tensor(WEIGHTS)[None, :]).nansum(1)
    tot[torch.isnan(R).all(1)] = math.nan
    return tot


def grpo_advantages(c, tot):
    G = c["G"]
    grouped = tot.view(-1, G)
    mean = torch.stack([g[~torch.isnan(g)].mean() if (~torch.isnan(g)).any() else torch.tensor(math.nan)
                        for g in grouped]).repeat_interleave(G)
    if c["scale_rewards"] == "batch":
        std = nanstd(tot).expand_as(tot)
    else:
        std = torch.stack([nanstd(g) for g in grouped]).repeat_interleave(G)
    adv = tot - mean
    if c["scale_rewards"] != "none":
        adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0)


def rloo_advantages(c, tot, seq_kl):
    G = c["G"]
    r = tot.clone()
    if c["reward_clip_range"]:
        r = r.clamp(min=c["reward_clip_range"][0], max=c["reward_clip_range"][1])
    if c["beta"] != 0:
        r = r - c["beta"] * seq_kl
    grouped = r.view(-1, G)
    scorable = (~torch.isnan(grouped)).sum(1, keepdim=True)
    base = ((grouped.nansum(1, keepdim=True) - grouped) / (scorable - 1)).view(-1)
    adv = r - base
    if c["normalize_advantages"]:
        v = adv[~torch.isnan(adv)]
        adv = (adv - v.mean()) / (v.std() + 1e-4)
    return torch.nan_to_num(adv, nan=0.0)


def check_margin(what, ratio, adv, mask, lo, hi):
    """No ratio that the loss uses lies within MARGIN of a clip bound; returns how many are clipped."""
    live = (mask > 0) & (adv != 0)
    d = torch.minimum((ratio - lo).abs(), (ratio - hi).abs())[live]
    assert d.numel() == 0 or d.min().item() > MARGIN, f"{what}: a ratio within {d.min().item():.2g} of a clip bound"
    clipped = live & (((ratio < lo) & (adv < 0)) | ((ratio > hi) & (adv > 0)))
    return np.array([int(clipped.sum().item()), int(live.sum().item())])


def step_loss(c, w, rows, prompt_ids, adv, mask, old_lp, ref_lp, num_items):
    """Backward of one optimizer step's micro-batches; returns (loss, clipped count)."""
    B, GA = c["B"], c["GA"]
    lo, hi = 1 - c["epsilon"], 1 + (c["epsilon"] if c["epsilon_high"] is None else c["epsilon_high"])
    total, clipped = 0.0, np.zeros(2, dtype=int)
    for s in range(GA):
        sl = slice(s * B, (s + 1) * B)
        lp = padded_logps(w, rows[sl], prompt_ids)
        m, A = mask[sl], adv[sl]
        if c["algo"] == "grpo":
            old = lp.detach() if old_lp is None else old_lp[sl]
            ratio = torch.exp(lp - old)
            clipped += check_margin("grpo", ratio.detach(), A[:, None].expand_as(ratio), m, lo, hi)
            tok = -torch.min(ratio * A[:, None], torch.clamp(ratio, lo, hi) * A[:, None])
            if c["beta"] != 0:
                d = ref_lp[sl] - lp
                tok = tok + c["beta"] * (torch.exp(d) - d - 1)
            lt = c["loss_type"]
            if lt == "grpo":
                loss = ((tok * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean() / GA
            elif lt == "bnpo":
                loss = (tok * m).sum() / m.sum().clamp(min=1.0) / GA
            elif lt == "dr_grpo":
                loss = (tok * m).sum() / (tok.size(0) * C) / GA
            else:
                loss = (tok * m).sum() / max(num_items, 1.0)
        else:
            seq = (lp * m).sum(1)
            ratio = torch.exp(seq - old_lp[sl])
            clipped += check_margin("rloo", ratio.detach(), A, torch.ones_like(A), lo, hi)
            loss = (-torch.min(ratio * A, torch.clamp(ratio, lo, hi) * A)).mean() / GA
        loss.backward()
        total += loss.item()
    return total, clipped


def one_case(name, c, w32, prompt_ids):
    w = {n: t.to(torch.float64).requires_grad_(True) for n, t in w32.items()}
    ref = {n: t.to(torch.float64) for n, t in w32.items()}
    decay = [t for t in w.values() if t.dim() == 2]
    no_decay = [t for t in w.values() if t.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(B1, B2), eps=EPS)
    rounds = [make_round(c, 0)] if c["num_iterations"] == 2 else [make_round(c, 0), make_round(c, 1)]
    out, info = {}, []
    state = None
    for step in range(2):
        k = step // c["num_iterations"]
        rows = rounds[k]
        if step % c["num_iterations"] == 0:  # a new round at the current weights
            with torch.no_grad():
                mask = masks(c, rows)
                gen_lp = padded_logps(w, rows, prompt_ids)
                ref_lp = padded_logps(ref, rows, prompt_ids) if c["beta"] != 0 else None
            tot = total_rewards(rows)
            if c["algo"] == "grpo":
                adv = grpo_advantages(c, tot)
                old_lp = gen_lp if c["num_iterations"] > 1 else None
            else:
                seq_kl = ((gen_lp - ref_lp) * mask).sum(1) if c["beta"] != 0 else None
                adv = rloo_advantages(c, tot, seq_kl)
                old_lp = (gen_lp * mask).sum(1)
            num_items = mask.sum().item()
            out[f"round{k}.advantages"] = adv.numpy()
            state = (mask, ref_lp, adv, old_lp, num_items)
        mask, ref_lp, adv, old_lp, num_items = state
        for t in w.values():
            t.grad = None
        loss, clipped = step_loss(c, w, rows, prompt_ids, adv, mask, old_lp, ref_lp, num_items)
        grads = {n: t.grad.detach().clone() for n, t in w.items()}
        norm = torch.nn.utils.clip_grad_norm_(list(w.values()), MAX_NORM)
        opt.step()
        if step == 0:  # step 2 starts from the float32 state the C test loads
            with torch.no_grad():
                for t in w.values():
                    t.copy_(t.float().double())
                    for key in ("exp_avg", "exp_avg_sq"):
                        opt.state[t][key].copy_(opt.state[t][key].float().double())
        p = f"step{step + 1}."
        out[p + "loss"] = np.array([loss])
        out[p + "grad_norm"] = np.array([norm.item()])
        for n, t in w.items():  # copies: step 2 updates the parameters and the state in place
            out[p + "grad." + n] = grads[n].numpy()
            out[p + "param." + n] = t.detach().clone().numpy()
            out[p + "exp_avg." + n] = opt.state[t]["exp_avg"].clone().numpy()
            out[p + "exp_avg_sq." + n] = opt.state[t]["exp_avg_sq"].clone().numpy()
        info.append(f"step {step + 1}: loss {loss:.6g} grad_norm {norm.item():.4g} clipped {clipped[0]} of {clipped[1]}")
        if step == 1 and c["num_iterations"] == 2:
            assert 0 < clipped[0] < clipped[1], f"{name}: {clipped[0]} of {clipped[1]} clipped at iteration 2: the case would not test clipping"
    return out, rounds, info


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "grpo")
    mdir = os.path.join(out_dir, "model")
    os.makedirs(mdir, exist_ok=True)
    w32 = ref_model.make_weights(CFG, 4242)
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(CFG, f, indent=2)
        f.write("\n")
    ref_model.write_safetensors(os.path.join(mdir, "model.safetensors"), {n: t.numpy() for n, t in w32.items()})
    tmpl = open(os.path.join(root, "tests", "data", "chat", "templates", "sft_generation.jinja")).read()
    ref_sft.write_tokenizer_dir(mdir, tmpl)
    with open(os.path.join(out_dir, "prompts.jsonl"), "w") as f:
        for p in PROMPTS:
            f.write(json.dumps({"prompt": p}) + "\n")
    prompt_ids = [list(p.encode()) for p in PROMPTS]
    cases = {}
    for name, c in CASES.items():
        res, rounds, info = one_case(name, c, w32, prompt_ids)
        ref_model.write_safetensors(os.path.join(out_dir, name + ".safetensors"), res)
        cases[name] = {k: v for k, v in c.items() if k not in ("seed", "unscorable")}
        cases[name]["rounds"] = rounds
        print(f"{name}: " + "; ".join(info))
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump({"model": "model", "prompts": "prompts.jsonl", "prompt_ids": prompt_ids, "eos": EOS, "pad": PAD,
                   "max_completion_length": C, "temperature": TEMPERATURE, "reward_weights": WEIGHTS,
                   "lr": LR, "weight_decay": WD, "adam_beta1": B1, "adam_beta2": B2, "adam_epsilon": EPS,
                   "max_grad_norm": MAX_NORM, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
