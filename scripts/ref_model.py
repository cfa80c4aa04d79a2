#!/usr/bin/python3
"""Reference fixtures for the model core, computed with Debian's PyTorch in float64.

For each tiny config (qwen3 tied, qwen3 untied, qwen2 with q/k/v biases, llama with llama3 RoPE
scaling) this writes tests/data/models/<name>/{config.json, model.safetensors} with seeded random
weights (matrices N(0, std) with std chosen for peaked next-token distributions, norm weights
1 + N(0, 0.1^2), biases N(0, 0.1^2)), and expected.safetensors holding, for a fixed id sequence:
logits (T, V) at every position, the mean next-token cross-entropy, and the gradient of that loss
for every parameter (named "grad.<HF name>").

The forward pass is written here from the Hugging Face modeling code's semantics
(SEMANTICS_MODEL.md §1.2): RMSNorm, q/k norm before half-split RoPE, GQA causal attention, SwiGLU,
tied or untied LM head. Run: /usr/bin/python3 scripts/ref_model.py [OUT_DIR]
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

VOCAB = 384
IDS = [5, 17, 300, 42, 42, 7, 250, 99, 1, 383, 64, 128, 12, 77, 200, 3, 150, 260, 31, 8]

BASE = {
    "vocab_size": VOCAB,
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "initializer_range": 0.02,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
}

CONFIGS = {
    "qwen3_tied": dict(BASE, model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=16,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False),
    "qwen3_untied": dict(BASE, model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=16,
                         rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False),
    "qwen2": dict(BASE, model_type="qwen2", architectures=["Qwen2ForCausalLM"], rms_norm_eps=1e-6,
                  rope_theta=10000.0, tie_word_embeddings=False),
    "llama": dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"], rms_norm_eps=1e-5,
                  rope_theta=500000.0, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
}


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def inv_freq_of(cfg):
    """transformers' rope init in fp32 (default and llama3 types)."""
    d = head_dim(cfg)
    base = cfg["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(torch.float32) / d))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lff, hff = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        omax = rs["original_max_position_embeddings"]
        low_wl, high_wl = omax / lff, omax / hff
        wavelen = 2 * math.pi / inv
        inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (omax / wavelen - lff) / (hff - lff)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        inv = torch.where(medium, smoothed, inv_l)
    return inv.to(torch.float32)


def layer_tensors(cfg, i):
    c, ff = cfg["hidden_size"], cfg["intermediate_size"]
    qd, kd = cfg["num_attention_heads"] * head_dim(cfg), cfg["num_key_value_heads"] * head_dim(cfg)
    p = f"model.layers.{i}."
    mt = cfg["model_type"]
    out = [(p + "input_layernorm.weight", (c,)),
           (p + "self_attn.q_proj.weight", (qd, c)), (p + "self_attn.k_proj.weight", (kd, c)),
           (p + "self_attn.v_proj.weight", (kd, c)), (p + "self_attn.o_proj.weight", (c, qd))]
    if mt == "qwen2" or cfg.get("attention_bias"):
        out += [(p + "self_attn.q_proj.bias", (qd,)), (p + "self_attn.k_proj.bias", (kd,)),
                (p + "self_attn.v_proj.bias", (kd,))]
    if mt != "qwen2" and cfg.get("attention_bias"):
        out += [(p + "self_attn.o_proj.bias", (c,))]
    if mt == "qwen3":
        out += [(p + "self_attn.q_norm.weight", (head_dim(cfg),)), (p + "self_attn.k_norm.weight", (head_dim(cfg),))]
    out += [(p + "post_attention_layernorm.weight", (c,)),
            (p + "mlp.gate_proj.weight", (ff, c)), (p + "mlp.up_proj.weight", (ff, c)),
            (p + "mlp.down_proj.weight", (c, ff))]
    return out


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
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=g, dtype=torch.float32)
        else:
            std = 0.6 if name in ("model.embed_tokens.weight", "lm_head.weight") else 0.25
            t = std * torch.randn(shape, generator=g, dtype=torch.float32)
        w[name] = t
    return w


def write_safetensors(path, tensors):
    """tensors: dict name -> float32 numpy array. Header padded to 8 bytes like the Rust crate."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def rmsnorm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, inv_freq):
    d = x.shape[-1]
    freqs = pos[:, None].to(torch.float64) * inv_freq.to(torch.float64)[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def forward(cfg, w, ids, adapter=None):
    """Logits (T, V) for one unpadded sequence. adapter(x, module) -> a term added to the output of
    linear layer `module` (e.g. "model.layers.0.self_attn.q_proj"), or None (scripts/ref_lora.py)."""
    T = len(ids)
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    inv = inv_freq_of(cfg)
    pos = torch.arange(T)
    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        g = lambda n: w.get(p + n)
        x = rmsnorm(h, g("input_layernorm.weight"), eps)
        lin = lambda x, n: torch.nn.functional.linear(x, g(n + ".weight"), g(n + ".bias")) + \
            (adapter(x, p + n) if adapter else 0)
        q = lin(x, "self_attn.q_proj").view(T, nh, hd)
        k = lin(x, "self_attn.k_proj").view(T, nkv, hd)
        v = lin(x, "self_attn.v_proj").view(T, nkv, hd)
        if cfg["model_type"] == "qwen3":
            q = rmsnorm(q, g("self_attn.q_norm.weight"), eps)
            k = rmsnorm(k, g("self_attn.k_norm.weight"), eps)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
        s = s.masked_fill(~mask, float("-inf"))
        a = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, nh * hd)
        h = h + lin(a, "self_attn.o_proj")
        x = rmsnorm(h, g("post_attention_layernorm.weight"), eps)
        m = torch.nn.functional.silu(lin(x, "mlp.gate_proj")) * lin(x, "mlp.up_proj")
        h = h + lin(m, "mlp.down_proj")
    h = rmsnorm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
    for k, (name, cfg) in enumerate(sorted(CONFIGS.items())):
        d = os.path.join(out_root, name)
        os.makedirs(d, exist_ok=True)
        w32 = make_weights(cfg, 1234 + k)
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
        write_safetensors(os.path.join(d, "expected.safetensors"), exp)
        p = torch.softmax(logits, -1).max(-1).values
        print(f"{name}: loss {loss.item():.6f}, mean max-prob {p.mean().item():.3f}")


if __name__ == "__main__":
    main()
