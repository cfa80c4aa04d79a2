#!/usr/bin/python3
"""Reference fixtures for the model families beyond Qwen and Llama, computed with Debian's PyTorch
in float64: a port of each family's transformers modeling file (modeling_olmo2.py,
modeling_phi3.py, and modeling_rope_utils.py for their RoPE), written from their semantics.

For each tiny config this writes tests/data/models/<name>/{config.json, model.safetensors} with
seeded random weights in the family's exact HF tensor names, and expected.safetensors with the
logits (T, V) of a fixed id sequence, the mean next-token cross-entropy and the gradient of that
loss for every parameter ("grad.<HF name>"), as scripts/ref_model.py does for Qwen3 / Llama, and
sft_pad_ga.safetensors: one `still sft` step (scripts/ref_sft.py's pad_ga case on
tests/data/sft/ids.jsonl) through the family's forward, for tests/model/test_families.c.

Families:
  olmo2  Olmo2ForCausalLM: no pre-norms; post_attention_layernorm on the attention output and
         post_feedforward_layernorm on the MLP output, each before its residual add; q_norm and
         k_norm are RMSNorms over the whole q / k projection (NH*HD and NKV*HD wide), before the
         split into heads and RoPE.
  phi3   Phi3ForCausalLM: self_attn.qkv_proj (rows q, k, v) and mlp.gate_up_proj (rows gate, up;
         up * silu(gate)) fused; longrope RoPE (modeling_rope_utils.py _compute_longrope_parameters
         and dynamic_rope_update's longrope_frequency_update): inv_freq = 1 / (ext * base^(2i/d)),
         ext the short_factor when the call's max position id + 1 is at most
         original_max_position_embeddings, else the long_factor; cos and sin times
         sqrt(1 + ln(factor) / ln(original_max)), factor = max_position_embeddings /
         original_max_position_embeddings. partial_rotary_factor f: d = int(head_dim * f), only the
         first d dims of q and k rotate (apply_rotary_pos_emb's q_rot / q_pass).
  phi3_long  the same with original_max_position_embeddings 8 and partial_rotary_factor 0.75: the
         20-token fixture runs on the long factors; its first 8 tokens ("prefix_logits") on the
         short ones; and greedy tokens from a 5-token prompt across the switch, each step a full
         recomputation with the factors of its length, which is what transformers' generate()
         computes (Phi3ForCausalLM.prepare_inputs_for_generation drops the cache when the
         sequence first exceeds original_max_position_embeddings and runs it all again).

Run: /usr/bin/python3 scripts/ref_family.py [OUT_DIR] [--family NAME]
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model  # noqa: E402
import ref_sft  # noqa: E402
from ref_model import IDS, VOCAB, rmsnorm, rope, write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

BASE = dict(ref_model.BASE)

# Phi-3-mini-128k-shaped RoPE: factor 32 from the two context lengths, distinct short and long
# factors (the short ones are used at these positions).
# head_dim 48 / 4 = 12: 6 frequencies
PHI3_SHORT = [1.0, 1.05, 1.3, 1.9, 2.6, 3.4]
PHI3_LONG = [1.0, 1.5, 3.0, 8.0, 16.0, 32.0]

CONFIGS = {
    "olmo2": dict(BASE, model_type="olmo2", architectures=["Olmo2ForCausalLM"], rms_norm_eps=1e-6,
                  rope_theta=500000.0, tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0,
                  pad_token_id=1),
    "phi3": dict(BASE, model_type="phi3", architectures=["Phi3ForCausalLM"],
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, attention_dropout=0.0,
                 resid_pdrop=0.0, embd_pdrop=0.0, max_position_embeddings=131072,
                 original_max_position_embeddings=4096, sliding_window=262144, pad_token_id=0,
                 rope_scaling={"type": "longrope", "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG}),
    # head_dim 48 / 2 = 24, * 0.75 = 18 rotary dims: 9 frequencies
    "phi3_long": dict(BASE, model_type="phi3", num_attention_heads=2, num_key_value_heads=1, architectures=["Phi3ForCausalLM"],
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, attention_dropout=0.0,
                      resid_pdrop=0.0, embd_pdrop=0.0, max_position_embeddings=64,
                      original_max_position_embeddings=8, partial_rotary_factor=0.75, sliding_window=262144,
                      pad_token_id=0,
                      rope_scaling={"type": "longrope",
                                    "short_factor": [1.0 + 0.05 * i for i in range(9)],
                                    "long_factor": [1.0 + 0.9 * i for i in range(9)]}),
}
PHI3_LONG_OMAX = 8
GREEDY_PROMPT = IDS[:5]
GREEDY_STEPS = 10


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def dims(cfg):
    hd = head_dim(cfg)
    return cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"] * hd, \
        cfg["num_key_value_heads"] * hd


def layer_tensors(cfg, i):
    c, ff, qd, kd = dims(cfg)
    p = f"model.layers.{i}."
    mt = cfg["model_type"]
    if mt == "olmo2":
        return [(p + "self_attn.q_proj.weight", (qd, c)), (p + "self_attn.k_proj.weight", (kd, c)),
                (p + "self_attn.v_proj.weight", (kd, c)), (p + "self_attn.o_proj.weight", (c, qd)),
                (p + "self_attn.q_norm.weight", (qd,)), (p + "self_attn.k_norm.weight", (kd,)),
                (p + "post_attention_layernorm.weight", (c,)),
                (p + "mlp.gate_proj.weight", (ff, c)), (p + "mlp.up_proj.weight", (ff, c)),
                (p + "mlp.down_proj.weight", (c, ff)), (p + "post_feedforward_layernorm.weight", (c,))]
    if mt == "phi3":
        return [(p + "input_layernorm.weight", (c,)), (p + "self_attn.qkv_proj.weight", (qd + 2 * kd, c)),
                (p + "self_attn.o_proj.weight", (c, qd)), (p + "post_attention_layernorm.weight", (c,)),
                (p + "mlp.gate_up_proj.weight", (2 * ff, c)), (p + "mlp.down_proj.weight", (c, ff))]
    raise ValueError(mt)


def all_tensors(cfg):
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], cfg["hidden_size"]))]
    for i in range(cfg["num_hidden_layers"]):
        out += layer_tensors(cfg, i)
    out += [("model.norm.weight", (cfg["hidden_size"],))]
    if not cfg["tie_word_embeddings"]:
        out += [("lm_head.weight", (cfg["vocab_size"], cfg["hidden_size"]))]
    return out


def make_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in all_tensors(cfg):
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            t = 1 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float32)
        else:
            std = 0.6 if name in ("model.embed_tokens.weight", "lm_head.weight") else 0.25
            t = std * torch.randn(shape, generator=g, dtype=torch.float32)
        w[name] = t
    return w


def rotary_dim(cfg):
    return int(head_dim(cfg) * cfg.get("partial_rotary_factor", 1.0))


def rope_of(cfg, seq_len):
    """(inv_freq fp32 (d/2), attention scaling) as modeling_rope_utils computes them for a forward
    call whose max position id + 1 is seq_len (default and longrope types)."""
    d = rotary_dim(cfg)
    base = cfg["rope_theta"]
    shape = torch.arange(0, d, 2, dtype=torch.int64).to(torch.float32) / d
    rs = cfg.get("rope_scaling")
    if not rs:
        return (1.0 / (base ** shape)).to(torch.float32), 1.0
    assert rs.get("rope_type", rs.get("type")) in ("longrope", "su")
    omax = cfg.get("original_max_position_embeddings", 4096)  # Phi3Config's attribute
    factor = rs.get("factor") or cfg["max_position_embeddings"] / omax
    att = rs.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(omax))
    ext = torch.tensor(rs["long_factor"] if seq_len > omax else rs["short_factor"], dtype=torch.float32)
    inv = 1.0 / (ext * base ** shape)
    return inv.to(torch.float32), att


def attention(q, k, v, nh, nkv, hd):
    T = q.shape[0]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    rep = nh // nkv
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * hd ** -0.5
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, nh * hd)


def forward(cfg, w, ids):
    """Logits (T, V) for one unpadded sequence at positions 0..T-1."""
    T = len(ids)
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    c, ff, qd, kd = dims(cfg)
    eps = cfg["rms_norm_eps"]
    inv, att_scale = rope_of(cfg, T)
    rd = rotary_dim(cfg)
    pos = torch.arange(T)
    lin = torch.nn.functional.linear
    silu = torch.nn.functional.silu
    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    mt = cfg["model_type"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        g = lambda n: w[p + n]  # noqa: E731
        if mt == "olmo2":
            q = rmsnorm(lin(h, g("self_attn.q_proj.weight")), g("self_attn.q_norm.weight"), eps)
            k = rmsnorm(lin(h, g("self_attn.k_proj.weight")), g("self_attn.k_norm.weight"), eps)
            v = lin(h, g("self_attn.v_proj.weight"))
            q, k, v = q.view(T, nh, hd), k.view(T, nkv, hd), v.view(T, nkv, hd)
            q, k = rope(q, pos, inv), rope(k, pos, inv)
            a = lin(attention(q, k, v, nh, nkv, hd), g("self_attn.o_proj.weight"))
            h = h + rmsnorm(a, g("post_attention_layernorm.weight"), eps)
            m = lin(silu(lin(h, g("mlp.gate_proj.weight"))) * lin(h, g("mlp.up_proj.weight")),
                    g("mlp.down_proj.weight"))
            h = h + rmsnorm(m, g("post_feedforward_layernorm.weight"), eps)
        else:  # phi3
            x = rmsnorm(h, g("input_layernorm.weight"), eps)
            qkv = lin(x, g("self_attn.qkv_proj.weight"))
            q = qkv[:, :qd].reshape(T, nh, hd)
            k = qkv[:, qd:qd + kd].reshape(T, nkv, hd)
            v = qkv[:, qd + kd:].reshape(T, nkv, hd)
            # attention scaling multiplies cos and sin: the rotated dims only
            q = torch.cat([rope(q[..., :rd], pos, inv) * att_scale, q[..., rd:]], -1)
            k = torch.cat([rope(k[..., :rd], pos, inv) * att_scale, k[..., rd:]], -1)
            h = h + lin(attention(q, k, v, nh, nkv, hd), g("self_attn.o_proj.weight"))
            x = rmsnorm(h, g("post_attention_layernorm.weight"), eps)
            gate, up = lin(x, g("mlp.gate_up_proj.weight")).chunk(2, dim=-1)
            h = h + lin(up * silu(gate), g("mlp.down_proj.weight"))
    h = rmsnorm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T


def sft_step(cfg, w32):
    """One SFT optimizer step as scripts/ref_sft.py computes it (its pad_ga case: padding and
    gradient accumulation, completion-only loss) through this family's forward."""
    saved = ref_model.forward
    ref_model.forward = lambda c, w, ids, adapter=None: forward(c, w, ids)
    try:
        return ref_sft.one_case(cfg, w32, ref_sft.make_examples(), ref_sft.CASES["pad_ga"])
    finally:
        ref_model.forward = saved


def main():
    args = [a for a in sys.argv[1:]]
    only = None
    if "--family" in args:
        k = args.index("--family")
        only = args[k + 1]
        del args[k:k + 2]
    out_root = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
    for k, (name, cfg) in enumerate(sorted(CONFIGS.items())):
        if only and cfg["model_type"] != only:
            continue
        d = os.path.join(out_root, name)
        os.makedirs(d, exist_ok=True)
        w32 = make_weights(cfg, 4321 + k)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        write_safetensors(os.path.join(d, "model.safetensors"), {n: t.numpy() for n, t in w32.items()})
        w = {n: t.to(torch.float64).requires_grad_(True) for n, t in w32.items()}
        logits = forward(cfg, w, IDS)
        loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(IDS[1:]))
        loss.backward()
        exp = {"logits": logits.detach().numpy(), "loss": np.array([loss.item()]),
               "ids": np.array(IDS, dtype=np.float64)}
        for n, t in w.items():
            exp["grad." + n] = t.grad.numpy()
        if name == "phi3_long":
            with torch.no_grad():
                exp["prefix_logits"] = forward(cfg, w, IDS[:PHI3_LONG_OMAX]).numpy()
                seq, toks, gaps = list(GREEDY_PROMPT), [], []
                for _ in range(GREEDY_STEPS):
                    last = forward(cfg, w, seq)[-1]
                    top = torch.topk(last, 2).values
                    toks.append(int(last.argmax()))
                    gaps.append((top[0] - top[1]).item())
                    seq.append(toks[-1])
            exp["greedy_prompt"] = np.array(GREEDY_PROMPT, dtype=np.float64)
            exp["greedy"] = np.array(toks, dtype=np.float64)
            exp["greedy_gap"] = np.array(gaps, dtype=np.float64)
        write_safetensors(os.path.join(d, "expected.safetensors"), exp)
        if name == "phi3_long":  # SFT parity is phi3's; this fixture is for the RoPE
            continue
        sft = sft_step(cfg, w32)
        write_safetensors(os.path.join(d, "sft_pad_ga.safetensors"), sft)
        p = torch.softmax(logits, -1).max(-1).values
        print(f"{name}: loss {loss.item():.6f}, mean max-prob {p.mean().item():.3f}")


if __name__ == "__main__":
    assert VOCAB == BASE["vocab_size"]
    main()
