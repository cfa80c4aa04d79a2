#!/usr/bin/python3
"""PyTorch ports of the sliding-window families (mistral, gemma2, gemma3_text) and their fixtures.

Each port is written from transformers' modeling files (modeling_mistral.py, modeling_gemma2.py,
modeling_gemma3.py) and masking_utils.py, read for their semantics; transformers is not imported.
What each family does, as transformers computes it:

  mistral      Llama's decoder (pre-norms, SiLU gated MLP, no biases) with `sliding_window` W on
               every layer (None = global): query i sees key j iff j <= i and j > i - W
               (masking_utils.sliding_window_overlay), i.e. itself and the W - 1 keys before it.
  gemma2       embeddings times sqrt(hidden_size) (the normalizer cast to the hidden dtype);
               RMSNorm scales by (1 + w), in fp32; four norms per layer: input_layernorm ->
               attention -> post_attention_layernorm -> residual add, pre_feedforward_layernorm
               -> MLP -> post_feedforward_layernorm -> residual add; gelu_pytorch_tanh gated MLP;
               scores scaled by query_pre_attn_scalar ** -0.5 and soft-capped,
               cap * tanh(s / cap) with attn_logit_softcapping, before the mask; layer i slides
               when i is even (layer_types "sliding_attention" for (i + 1) % 2 != 0); the LM
               head's logits soft-capped by final_logit_softcapping; tied embeddings.
  gemma3_text  gemma2's layer plus q_norm / k_norm ((1 + w) RMSNorm over each head) before RoPE;
               layer i slides when (i + 1) % sliding_window_pattern != 0 (or as layer_types
               says); sliding layers use RoPE base rope_local_base_freq without scaling, global
               layers rope_theta with rope_scaling (linear: inv_freq / factor); both caps
               optional (None by default).

For each tiny config this writes tests/data/models/<name>/{config.json, model.safetensors}
(seeded random fp32 weights; Gemma's norm weights are N(0, 0.1^2) because (1 + w) is applied at
run time, the others 1 + N(0, 0.1^2)) and expected.safetensors in scripts/ref_model.py's layout:
logits (T, V) at every position of IDS (T = 20 > every window), the mean next-token
cross-entropy, "grad.<HF name>" of that loss for every parameter, all in float64, and "greedy":
GREEDY_NEW tokens chosen by argmax after the prompt IDS[:GREEDY_PROMPT] (longer than the windows)
by full recomputation of the whole sequence at every step, with "greedy_gap" the top-2 logit gap
of each step (a test compares tokens only up to the first near-tie). sft_<case>.safetensors:
one `still sft` step of scripts/ref_sft.py's case (bfd for mistral and gemma3_text: packed rows of
24 tokens, longer than their windows; pad_ga for gemma2) through the family's forward, for
tests/model/test_sft_parity.c.
Run: /usr/bin/python3 scripts/ref_sliding.py [OUT_DIR]
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
from ref_model import write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

VOCAB = 384
IDS = [5, 17, 300, 42, 42, 7, 250, 99, 1, 383, 64, 128, 12, 77, 200, 3, 150, 260, 31, 8]
GREEDY_PROMPT, GREEDY_NEW = 11, 12

BASE = {
    "vocab_size": VOCAB,
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "initializer_range": 0.02,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

CONFIGS = {
    "mistral": dict(BASE, model_type="mistral", architectures=["MistralForCausalLM"], num_hidden_layers=2,
                    hidden_act="silu", rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=5,
                    tie_word_embeddings=False, attention_dropout=0.0),
    "gemma2": dict(BASE, model_type="gemma2", architectures=["Gemma2ForCausalLM"], num_hidden_layers=2,
                   hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                   rope_theta=10000.0, sliding_window=6, query_pre_attn_scalar=24, attn_logit_softcapping=3.0,
                   final_logit_softcapping=15.0, tie_word_embeddings=True, attention_bias=False,
                   attention_dropout=0.0, pad_token_id=0, cache_implementation="hybrid"),
    "gemma3_text": dict(BASE, model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], num_hidden_layers=3,
                        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, rope_theta=1000000.0,
                        rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0},
                        sliding_window=4, sliding_window_pattern=2, query_pre_attn_scalar=16,
                        attn_logit_softcapping=None, final_logit_softcapping=None, tie_word_embeddings=False,
                        attention_bias=False, attention_dropout=0.0, pad_token_id=0,
                        cache_implementation="hybrid"),
}


def is_gemma(cfg):
    return cfg["model_type"] in ("gemma2", "gemma3_text")


def layer_sliding(cfg, i):
    """Whether layer i attends within cfg["sliding_window"] (None: every layer global)."""
    if cfg.get("sliding_window") is None:
        return False
    if "layer_types" in cfg:
        return cfg["layer_types"][i] == "sliding_attention"
    mt = cfg["model_type"]
    if mt == "mistral":
        return True
    if mt == "gemma2":
        return (i + 1) % 2 != 0
    return (i + 1) % cfg["sliding_window_pattern"] != 0


def inv_freq(cfg, local):
    """transformers' rope init in fp32: default, or linear (global layers of gemma3 only)."""
    d = cfg["head_dim"]
    base = cfg["rope_local_base_freq"] if local else cfg["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(torch.float32) / d))
    rs = cfg.get("rope_scaling")
    if rs and not local and rs.get("rope_type", rs.get("type")) == "linear":
        inv = inv / rs["factor"]
    return inv.to(torch.float32)


def layer_tensors(cfg, i):
    c, ff, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    qd, kd = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    p = f"model.layers.{i}."
    out = [(p + "input_layernorm.weight", (c,)),
           (p + "self_attn.q_proj.weight", (qd, c)), (p + "self_attn.k_proj.weight", (kd, c)),
           (p + "self_attn.v_proj.weight", (kd, c)), (p + "self_attn.o_proj.weight", (c, qd))]
    if cfg["model_type"] == "gemma3_text":
        out += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
    out += [(p + "post_attention_layernorm.weight", (c,))]
    if is_gemma(cfg):
        out += [(p + "pre_feedforward_layernorm.weight", (c,)), (p + "post_feedforward_layernorm.weight", (c,))]
    out += [(p + "mlp.gate_proj.weight", (ff, c)), (p + "mlp.up_proj.weight", (ff, c)),
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
            t = 0.1 * torch.randn(shape, generator=g, dtype=torch.float32)
            if not is_gemma(cfg):
                t = 1 + t
        else:
            std = 0.6 if name in ("model.embed_tokens.weight", "lm_head.weight") else 0.25
            if is_gemma(cfg) and name == "model.embed_tokens.weight":
                std = 0.3  # scaled by sqrt(hidden_size) on the way in; tied: the head too
            t = std * torch.randn(shape, generator=g, dtype=torch.float32)
        w[name] = t
    return w


def rmsnorm(cfg, x, w, eps):
    n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return n * (1.0 + w) if is_gemma(cfg) else w * n


def rope(x, pos, inv):
    d = x.shape[-1]
    freqs = pos[:, None].to(torch.float64) * inv.to(torch.float64)[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward(cfg, w, ids):
    """Logits (T, V) for one unpadded sequence."""
    T = len(ids)
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    gemma = is_gemma(cfg)
    pos = torch.arange(T)
    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    if gemma:  # the normalizer in the hidden dtype (fp32 here)
        h = h * torch.tensor(cfg["hidden_size"] ** 0.5, dtype=torch.float32).to(torch.float64)
    i_idx, j_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    causal = j_idx <= i_idx
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if gemma else 1.0 / math.sqrt(hd)
    cap = cfg.get("attn_logit_softcapping") if gemma else None
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        g = lambda n: w[p + n]
        sliding = layer_sliding(cfg, i)
        mask = causal & (j_idx > i_idx - cfg["sliding_window"]) if sliding else causal
        local = sliding and cfg["model_type"] == "gemma3_text"
        inv = inv_freq(cfg, local)
        x = rmsnorm(cfg, h, g("input_layernorm.weight"), eps)
        q = (x @ g("self_attn.q_proj.weight").T).view(T, nh, hd)
        k = (x @ g("self_attn.k_proj.weight").T).view(T, nkv, hd)
        v = (x @ g("self_attn.v_proj.weight").T).view(T, nkv, hd)
        if cfg["model_type"] == "gemma3_text":
            q = rmsnorm(cfg, q, g("self_attn.q_norm.weight"), eps)
            k = rmsnorm(cfg, k, g("self_attn.k_norm.weight"), eps)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) * scale
        if cap is not None:
            s = cap * torch.tanh(s / cap)
        s = s.masked_fill(~mask, float("-inf"))
        a = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, nh * hd)
        o = a @ g("self_attn.o_proj.weight").T
        if gemma:
            h = h + rmsnorm(cfg, o, g("post_attention_layernorm.weight"), eps)
            x = rmsnorm(cfg, h, g("pre_feedforward_layernorm.weight"), eps)
            m = gelu_tanh(x @ g("mlp.gate_proj.weight").T) * (x @ g("mlp.up_proj.weight").T)
            h = h + rmsnorm(cfg, m @ g("mlp.down_proj.weight").T, g("post_feedforward_layernorm.weight"), eps)
        else:
            h = h + o
            x = rmsnorm(cfg, h, g("post_attention_layernorm.weight"), eps)
            m = torch.nn.functional.silu(x @ g("mlp.gate_proj.weight").T) * (x @ g("mlp.up_proj.weight").T)
            h = h + m @ g("mlp.down_proj.weight").T
    h = rmsnorm(cfg, h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    logits = h @ head.T
    fcap = cfg.get("final_logit_softcapping") if gemma else None
    if fcap is not None:
        logits = fcap * torch.tanh(logits / fcap)
    return logits


def greedy(cfg, w, prompt, n):
    """n argmax tokens after prompt, each by a forward over the whole sequence so far."""
    seq, gaps = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            z = forward(cfg, w, seq)[-1]
            top = torch.topk(z, 2).values
            gaps.append((top[0] - top[1]).item())
            seq.append(int(torch.argmax(z)))
    return seq[len(prompt):], gaps


def sft_step(cfg, w32, case):
    """One `still sft` step as scripts/ref_sft.py computes it (its case `case` on
    tests/data/sft/ids.jsonl) through this family's forward."""
    saved = ref_model.forward
    ref_model.forward = lambda c, w, ids, adapter=None: forward(c, w, ids)
    try:
        return ref_sft.one_case(cfg, w32, ref_sft.make_examples(), ref_sft.CASES[case])
    finally:
        ref_model.forward = saved


SFT_CASES = {"mistral": "bfd", "gemma2": "pad_ga", "gemma3_text": "bfd"}


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
    for k, (name, cfg) in enumerate(sorted(CONFIGS.items())):
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
        toks, gaps = greedy(cfg, {n: t.detach() for n, t in w.items()}, IDS[:GREEDY_PROMPT], GREEDY_NEW)
        exp = {"logits": logits.detach().numpy(), "loss": np.array([loss.item()]),
               "ids": np.array(IDS, dtype=np.float64), "greedy_prompt": np.array(IDS[:GREEDY_PROMPT], dtype=np.float64),
               "greedy": np.array(toks, dtype=np.float64), "greedy_gap": np.array(gaps)}
        for n, t in w.items():
            exp["grad." + n] = t.grad.numpy()
        write_safetensors(os.path.join(d, "expected.safetensors"), exp)
        case = SFT_CASES[name]
        write_safetensors(os.path.join(d, f"sft_{case}.safetensors"), sft_step(cfg, w32, case))
        p = torch.softmax(logits, -1).max(-1).values
        print(f"{name}: loss {loss.item():.6f}, mean max-prob {p.mean().item():.3f}, "
              f"greedy {toks} min gap {min(gaps):.3g}")


if __name__ == "__main__":
    main()
