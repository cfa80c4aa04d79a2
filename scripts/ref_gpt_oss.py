#!/usr/bin/python3
"""Reference fixture for the gpt_oss family, computed with Debian's PyTorch in float64.

A port of transformers' modeling_gpt_oss.py (read for its semantics; transformers is not imported):
  - GptOssAttention: q/k/v/o projections with biases (attention_bias), RoPE from YaRN
    (modeling_rope_utils' _compute_yarn_parameters: inv_freq and the attention factor that scales
    cos and sin; scripts/ref_rope.py's port), half-split rotation (_apply_rotary_emb), scaling
    head_dim^-0.5, eager_attention_forward with sinks: the per-head sink logit joins each row of the
    masked scores, softmax over scores + sink, the sink's column dropped; layer_types pick the
    causal or the sliding-window mask (kv_idx > q_idx - sliding_window).
  - GptOssMLP: GptOssTopKRouter (linear with bias, top-k of the logits, softmax over those k),
    GptOssExperts (gate_up_proj (E, C, 2 FF) + bias, gate = [..., ::2], up = [..., 1::2],
    gate.clamp(max=limit), up.clamp(-limit, limit), (up + 1) * gate * sigmoid(alpha gate),
    down_proj (E, FF, C) + bias, weighted by the routing weight and added per token).
  - GptOssForCausalLM (MixtralForCausalLM's loss): load_balancing_loss_func over the router logits
    (with the bias) of every layer, times router_aux_loss_coef (scripts/ref_moe.py's port).

Writes tests/data/models/gpt_oss/{config.json, model.safetensors} with seeded random weights in HF's
layout and expected.safetensors: logits (T, V) of a fixed id sequence, ce_loss, aux_loss, loss and
"grad.<HF name>" for every parameter, in HF's shapes. The window (4) is shorter than the sequence,
the clamps hold some values, and the script checks that no routing choice (K-th vs (K+1)-th logit)
and no clamp input is near a switch, so an fp32 engine takes the same branches.
Run: /usr/bin/python3 scripts/ref_gpt_oss.py [OUT_DIR]
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_model import rmsnorm, write_safetensors  # noqa: E402
from ref_moe import IDS, write_case  # noqa: E402
from ref_rope import yarn  # noqa: E402

torch.set_default_dtype(torch.float64)
MIN_CLAMP_GAP = 1e-4  # smallest allowed distance of a clamp input from its limit

CONFIG = {
    "model_type": "gpt_oss",
    "architectures": ["GptOssForCausalLM"],
    "vocab_size": 384,
    "hidden_size": 48,
    "intermediate_size": 24,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 6,
    "num_experts_per_tok": 2,
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "max_position_embeddings": 4096,
    "rope_theta": 150000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                     "original_max_position_embeddings": 512},
    "rms_norm_eps": 1e-5,
    "attention_bias": True,
    "attention_dropout": 0.0,
    "swiglu_limit": 7.0,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "output_router_logits": True,
    "router_aux_loss_coef": 0.05,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
ALPHA = 1.702


def n_experts(cfg):
    return cfg["num_local_experts"]


def all_tensors(cfg):
    c, hd, E, ff = cfg["hidden_size"], cfg["head_dim"], cfg["num_local_experts"], cfg["intermediate_size"]
    qd, kd = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], c))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (c,)),
                (p + "self_attn.q_proj.weight", (qd, c)), (p + "self_attn.q_proj.bias", (qd,)),
                (p + "self_attn.k_proj.weight", (kd, c)), (p + "self_attn.k_proj.bias", (kd,)),
                (p + "self_attn.v_proj.weight", (kd, c)), (p + "self_attn.v_proj.bias", (kd,)),
                (p + "self_attn.o_proj.weight", (c, qd)), (p + "self_attn.o_proj.bias", (c,)),
                (p + "self_attn.sinks", (cfg["num_attention_heads"],)),
                (p + "post_attention_layernorm.weight", (c,)),
                (p + "mlp.router.weight", (E, c)), (p + "mlp.router.bias", (E,)),
                (p + "mlp.experts.gate_up_proj", (E, c, 2 * ff)), (p + "mlp.experts.gate_up_proj_bias", (E, 2 * ff)),
                (p + "mlp.experts.down_proj", (E, ff, c)), (p + "mlp.experts.down_proj_bias", (E, c))]
    out += [("model.norm.weight", (c,)), ("lm_head.weight", (cfg["vocab_size"], c))]
    return out


STD = {"model.embed_tokens.weight": 0.6, "lm_head.weight": 0.6, "mlp.router.weight": 0.25, "mlp.router.bias": 0.2,
       "self_attn.sinks": 1.0, "mlp.experts.gate_up_proj": 0.6, "mlp.experts.gate_up_proj_bias": 0.5,
       "mlp.experts.down_proj": 0.05, "mlp.experts.down_proj_bias": 0.1}


def make_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in all_tensors(cfg):
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            t = 1 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float32)
        else:
            key = next((k for k in STD if name.endswith(k)), None)
            std = STD[key] if key else (0.1 if name.endswith(".bias") else 0.25)
            t = std * torch.randn(shape, generator=g, dtype=torch.float32)
        w[name] = t
    return w


def rope_tables(cfg):
    """inv_freq (HD/2) in fp32 and the attention factor of YaRN, as GptOssRotaryEmbedding has them."""
    inv, attn = yarn(cfg["rope_theta"], cfg["head_dim"], cfg["rope_scaling"], cfg["max_position_embeddings"])
    return inv.to(torch.float32), attn


def apply_rope(x, pos, inv, attn):
    """_apply_rotary_emb: x (T, H, D), cos and sin times the attention factor."""
    freqs = pos[:, None].to(torch.float64) * inv.to(torch.float64)[None, :]
    cos, sin = (freqs.cos() * attn)[:, None, :], (freqs.sin() * attn)[:, None, :]
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attention(cfg, w, p, x, pos, sliding):
    """GptOssAttention on x (T, C) of one unpadded sequence."""
    T = x.shape[0]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    q = (x @ w[p + "q_proj.weight"].T + w[p + "q_proj.bias"]).view(T, nh, hd)
    k = (x @ w[p + "k_proj.weight"].T + w[p + "k_proj.bias"]).view(T, nkv, hd)
    v = (x @ w[p + "v_proj.weight"].T + w[p + "v_proj.bias"]).view(T, nkv, hd)
    inv, attn = rope_tables(cfg)
    q, k = apply_rope(q, pos, inv, attn), apply_rope(k, pos, inv, attn)
    rep = nh // nkv
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * hd ** -0.5
    t = torch.arange(T)
    allowed = t[:, None] >= t[None, :]
    if sliding:
        allowed = allowed & (t[None, :] > t[:, None] - cfg["sliding_window"])
    s = s.masked_fill(~allowed[None], float("-inf"))
    sinks = w[p + "sinks"].reshape(-1, 1, 1).expand(nh, T, 1)
    comb = torch.cat([s, sinks], -1)
    comb = comb - comb.max(-1, keepdim=True).values
    probs = torch.softmax(comb, -1)[..., :-1]
    a = torch.einsum("hts,shd->thd", probs, v).reshape(T, nh * hd)
    return a @ w[p + "o_proj.weight"].T + w[p + "o_proj.bias"]


def mlp(cfg, w, p, x, router_logits, clamp_inputs):
    """GptOssMLP on x (T, C); appends the router logits (T, E) and the clamp inputs it computed."""
    E, K, limit = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg.get("swiglu_limit", 7.0)
    alpha = cfg.get("swiglu_alpha", ALPHA)
    logits = x @ w[p + "router.weight"].T + w[p + "router.bias"]
    router_logits.append(logits)
    top, sel = torch.topk(logits, K, dim=-1)
    scores = torch.softmax(top, dim=1)
    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = torch.where(sel == e)
        if len(tok) == 0:
            continue
        gu = x[tok] @ w[p + "experts.gate_up_proj"][e] + w[p + "experts.gate_up_proj_bias"][e]
        gate, up = gu[..., ::2], gu[..., 1::2]
        clamp_inputs.append((gate.detach(), up.detach()))
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        glu = gate * torch.sigmoid(gate * alpha)
        y = ((up + 1) * glu) @ w[p + "experts.down_proj"][e] + w[p + "experts.down_proj_bias"][e]
        out = out.index_add(0, tok, y * scores[tok, slot, None])
    return out


def forward(cfg, w, ids, clamp_inputs=None):
    """Logits (T, V) of one unpadded sequence and the router logits of every layer."""
    T = len(ids)
    eps = cfg["rms_norm_eps"]
    pos = torch.arange(T)
    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    router_logits = []
    clamp_inputs = [] if clamp_inputs is None else clamp_inputs
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sliding = cfg["layer_types"][i] == "sliding_attention"
        h = h + attention(cfg, w, p + "self_attn.", rmsnorm(h, w[p + "input_layernorm.weight"], eps), pos, sliding)
        h = h + mlp(cfg, w, p + "mlp.", rmsnorm(h, w[p + "post_attention_layernorm.weight"], eps), router_logits,
                    clamp_inputs)
    h = rmsnorm(h, w["model.norm.weight"], eps)
    return h @ w["lm_head.weight"].T, router_logits


def clamp_gap(cfg, clamp_inputs):
    """(smallest distance of a clamp input from its limit, gates above it, ups outside it)."""
    limit = cfg.get("swiglu_limit", 7.0)
    gap, above, outside = math.inf, 0, 0
    for gate, up in clamp_inputs:
        gap = min(gap, (gate - limit).abs().min().item(), (up.abs() - limit).abs().min().item())
        above += int((gate > limit).sum())
        outside += int((up.abs() > limit).sum())
    return gap, above, outside


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
    cfg = CONFIG
    w32 = make_weights(cfg, 2200)
    w = {n: t.to(torch.float64).requires_grad_(True) for n, t in w32.items()}
    clamps = []
    logits, router_logits = forward(cfg, w, IDS, clamps)
    cgap, above, outside = clamp_gap(cfg, clamps)
    assert cgap > MIN_CLAMP_GAP and above > 0 and outside > 0, f"clamps: gap {cgap:.2g}, {above} gates, {outside} ups"
    ce, aux, gap = write_case(os.path.join(out_root, "gpt_oss"), cfg, w32, w, logits, router_logits)
    print(f"gpt_oss: ce {ce:.6f}, aux {aux:.6f}, min routing gap {gap:.3g}, clamp gap {cgap:.3g} "
          f"({above} gates, {outside} ups clamped)")


if __name__ == "__main__":
    main()
