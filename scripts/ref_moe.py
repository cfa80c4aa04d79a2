#!/usr/bin/python3
"""Reference fixtures for the mixture-of-experts families, computed with Debian's PyTorch in float64.

A port of transformers' modeling_qwen3_moe.py and modeling_mixtral.py (read for their semantics;
transformers is not imported): Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock route each token
with softmax(router logits) -> top-k (-> renormalise when norm_topk_prob, always for Mixtral), run
the SwiGLU experts on the tokens routed to them and add their outputs times the routing weights;
layer l is sparse when l is not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0
(qwen3_moe; every Mixtral layer is). load_balancing_loss_func: over the router logits of the
sparse layers concatenated, E * sum_e (share of top-k choices of e) * (mean probability of e),
both means over the tokens the attention mask keeps; the loss of ForCausalLM adds
router_aux_loss_coef * aux when output_router_logits.

For each tiny config this writes tests/data/models/<name>/{config.json, model.safetensors} with
seeded random weights and expected.safetensors: logits (T, V) of a fixed id sequence, ce_loss
(mean next-token cross-entropy), aux_loss, loss = ce_loss + coef * aux_loss, and the gradient of
loss for every parameter ("grad.<HF name>"). Routing is piecewise constant, so the script checks
that every token's K-th and (K+1)-th router logits are well apart (an fp32 engine must pick the
same experts). Run: /usr/bin/python3 scripts/ref_moe.py [OUT_DIR]
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_model import head_dim, inv_freq_of, rmsnorm, rope, write_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

IDS = [5, 17, 300, 42, 42, 7, 250, 99, 1, 383, 64, 128, 12, 77, 200, 3, 150, 260, 31, 8]
MIN_GAP = 1e-3  # smallest allowed gap between the K-th and (K+1)-th router logit of a token

BASE = {
    "vocab_size": 384,
    "hidden_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "initializer_range": 0.02,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "output_router_logits": True,
    "router_aux_loss_coef": 0.05,
}

CONFIGS = {
    # layer 1 dense (mlp_only_layers), softmax probabilities of the top-k as weights
    "qwen3_moe": dict(BASE, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], head_dim=16,
                      num_hidden_layers=3, intermediate_size=64, moe_intermediate_size=24, num_experts=8,
                      num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
                      rms_norm_eps=1e-6, rope_theta=1000000.0, attention_bias=False),
    # decoder_sparse_step 2: only layer 1 is sparse; renormalised top-3 of 6
    "qwen3_moe_step2": dict(BASE, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], head_dim=16,
                            num_hidden_layers=2, intermediate_size=64, moe_intermediate_size=24, num_experts=6,
                            num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=2, mlp_only_layers=[],
                            rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False),
    "mixtral": dict(BASE, model_type="mixtral", architectures=["MixtralForCausalLM"], num_hidden_layers=2,
                    intermediate_size=32, num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5,
                    rope_theta=1000000.0, sliding_window=None, router_jitter_noise=0.0),
}


def n_experts(cfg):
    return cfg["num_experts"] if cfg["model_type"] == "qwen3_moe" else cfg["num_local_experts"]


def is_sparse(cfg, i):
    if cfg["model_type"] == "mixtral":
        return True
    return i not in cfg["mlp_only_layers"] and cfg["num_experts"] > 0 and (i + 1) % cfg["decoder_sparse_step"] == 0


def expert_names(cfg, i, e):
    """(gate, up, down) HF names of expert e of layer i."""
    if cfg["model_type"] == "mixtral":
        p = f"model.layers.{i}.block_sparse_moe.experts.{e}."
        return p + "w1.weight", p + "w3.weight", p + "w2.weight"
    p = f"model.layers.{i}.mlp.experts.{e}."
    return p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"


def router_name(cfg, i):
    blk = "block_sparse_moe" if cfg["model_type"] == "mixtral" else "mlp"
    return f"model.layers.{i}.{blk}.gate.weight"


def all_tensors(cfg):
    c, hd = cfg["hidden_size"], head_dim(cfg)
    qd, kd = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], c))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (c,)), (p + "self_attn.q_proj.weight", (qd, c)),
                (p + "self_attn.k_proj.weight", (kd, c)), (p + "self_attn.v_proj.weight", (kd, c)),
                (p + "self_attn.o_proj.weight", (c, qd))]
        if cfg["model_type"] == "qwen3_moe":
            out += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        out += [(p + "post_attention_layernorm.weight", (c,))]
        if is_sparse(cfg, i):
            ff = cfg["moe_intermediate_size"] if cfg["model_type"] == "qwen3_moe" else cfg["intermediate_size"]
            out += [(router_name(cfg, i), (n_experts(cfg), c))]
            for e in range(n_experts(cfg)):
                g, u, d = expert_names(cfg, i, e)
                out += [(g, (ff, c)), (u, (ff, c)), (d, (c, ff))]
        else:
            ff = cfg["intermediate_size"]
            out += [(p + "mlp.gate_proj.weight", (ff, c)), (p + "mlp.up_proj.weight", (ff, c)),
                    (p + "mlp.down_proj.weight", (c, ff))]
    out += [("model.norm.weight", (c,))]
    if not cfg["tie_word_embeddings"]:
        out += [("lm_head.weight", (cfg["vocab_size"], c))]
    return out


def make_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in all_tensors(cfg):
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            t = 1 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float32)
        else:
            std = 0.6 if name in ("model.embed_tokens.weight", "lm_head.weight") else 0.25
            std = 0.15 if name.endswith(".gate.weight") else std
            t = std * torch.randn(shape, generator=g, dtype=torch.float32)
        w[name] = t
    return w


def sparse_block(cfg, w, i, x, router_logits):
    """The sparse MoE block of layer i on x (T, C); appends its router logits (T, E)."""
    E, K = n_experts(cfg), cfg["num_experts_per_tok"]
    logits = x @ w[router_name(cfg, i)].T
    router_logits.append(logits)
    probs = torch.softmax(logits, -1)
    topw, sel = torch.topk(probs, K, dim=-1)
    if cfg["model_type"] == "mixtral" or cfg["norm_topk_prob"]:
        topw = topw / topw.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = torch.where(sel == e)
        if len(tok) == 0:
            continue
        g, u, d = (w[n] for n in expert_names(cfg, i, e))
        xe = x[tok]
        ye = (torch.nn.functional.silu(xe @ g.T) * (xe @ u.T)) @ d.T
        out = out.index_add(0, tok, ye * topw[tok, slot, None])
    return out


def forward(cfg, w, ids):
    """Logits (T, V) of one unpadded sequence and the router logits of the sparse layers."""
    T = len(ids)
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    inv = inv_freq_of(cfg)
    pos = torch.arange(T)
    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    router_logits = []
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rmsnorm(h, w[p + "input_layernorm.weight"], eps)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(T, nh, hd)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(T, nkv, hd)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(T, nkv, hd)
        if cfg["model_type"] == "qwen3_moe":
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        rep = nh // nkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
        s = s.masked_fill(~mask, float("-inf"))
        a = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, nh * hd)
        h = h + a @ w[p + "self_attn.o_proj.weight"].T
        x = rmsnorm(h, w[p + "post_attention_layernorm.weight"], eps)
        if is_sparse(cfg, i):
            h = h + sparse_block(cfg, w, i, x, router_logits)
        else:
            m = torch.nn.functional.silu(x @ w[p + "mlp.gate_proj.weight"].T) * (x @ w[p + "mlp.up_proj.weight"].T)
            h = h + m @ w[p + "mlp.down_proj.weight"].T
    h = rmsnorm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T, router_logits


def load_balancing_loss(router_logits, E, K, attention_mask=None):
    """load_balancing_loss_func of transformers: router_logits a list of (B*T, E) per sparse layer,
    attention_mask (B, T) or None."""
    cat = torch.cat(router_logits, 0)
    probs = torch.softmax(cat, -1)
    _, sel = torch.topk(probs, K, dim=-1)
    onehot = torch.nn.functional.one_hot(sel, E).to(probs.dtype)  # (L*N, K, E)
    if attention_mask is None:
        tokens_per_expert = onehot.mean(0)
        prob_per_expert = probs.mean(0)
    else:
        m = attention_mask.reshape(-1).to(probs.dtype).repeat(len(router_logits))  # (L*N)
        tokens_per_expert = (onehot * m[:, None, None]).sum(0) / m.sum()
        prob_per_expert = (probs * m[:, None]).sum(0) / m.sum()
    return (tokens_per_expert * prob_per_expert[None, :]).sum() * E


def min_gap(router_logits, K):
    """Smallest gap between the K-th and (K+1)-th logit of any token of any sparse layer."""
    g = math.inf
    for lg in router_logits:
        s = torch.sort(lg, -1, descending=True).values
        if s.shape[-1] > K:
            g = min(g, (s[:, K - 1] - s[:, K]).min().item())
    return g


def write_case(d, cfg, w32, w, logits, router_logits):
    """The fixture of a forward over IDS (logits, router logits of the float64 leaves w): ce, aux and
    loss = ce + coef * aux, its gradient; config.json, model.safetensors (w32) and expected.safetensors
    in d. Returns (ce, aux, min routing gap)."""
    os.makedirs(d, exist_ok=True)
    gap = min_gap(router_logits, cfg["num_experts_per_tok"])
    assert gap > MIN_GAP, f"{d}: router logits within {gap:.2g} of a routing change; pick another seed"
    ce = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(IDS[1:]))
    aux = load_balancing_loss(router_logits, len(router_logits[0][0]), cfg["num_experts_per_tok"])
    loss = ce + cfg["router_aux_loss_coef"] * aux
    loss.backward()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(d, "model.safetensors"), {n: t.numpy() for n, t in w32.items()})
    exp = {"logits": logits.detach().numpy(), "loss": np.array([loss.item()]), "ce_loss": np.array([ce.item()]),
           "aux_loss": np.array([aux.item()]), "ids": np.array(IDS, dtype=np.float64)}
    for n, t in w.items():
        exp["grad." + n] = (t.grad if t.grad is not None else torch.zeros_like(t)).numpy()  # unrouted experts: 0
    write_safetensors(os.path.join(d, "expected.safetensors"), exp)
    return ce.item(), aux.item(), gap


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
    for k, (name, cfg) in enumerate(sorted(CONFIGS.items())):
        w32 = make_weights(cfg, 2100 + k)
        w = {n: t.to(torch.float64).requires_grad_(True) for n, t in w32.items()}
        logits, router_logits = forward(cfg, w, IDS)
        ce, aux, gap = write_case(os.path.join(out_root, name), cfg, w32, w, logits, router_logits)
        print(f"{name}: ce {ce:.6f}, aux {aux:.6f}, min routing gap {gap:.3g}")


if __name__ == "__main__":
    main()
