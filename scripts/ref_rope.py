#!/usr/bin/python3
"""RoPE inverse-frequency references for tests/unit/test_config.c.

Re-implements, with PyTorch in fp32, the formulas of transformers' modeling_rope_utils.py
(_compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
_compute_llama3_parameters, _compute_yarn_parameters; yarn as in transformers v5: an explicit
`factor` wins, original_max_position_embeddings defaults to max_position_embeddings, `truncate`
defaults to true). Writes one JSON fixture per case: the config.json, inv_freq (as float32 bit
patterns and as numbers) and the attention factor that scales cos/sin.

Run with Debian's python3 (it has torch): /usr/bin/python3 scripts/ref_rope.py OUTDIR
"""
import json
import math
import struct
import sys

import torch


def default_inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def llama3(base, dim, rs):
    inv_freq = default_inv_freq(base, dim)
    factor = rs["factor"]
    low_freq_factor = rs["low_freq_factor"]
    high_freq_factor = rs["high_freq_factor"]
    old_context_len = rs["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama), 1.0


def yarn(base, dim, rs, max_position_embeddings):
    omax = rs.get("original_max_position_embeddings") or max_position_embeddings
    factor = rs.get("factor")
    if factor is None:
        factor = max_position_embeddings / omax
    attention_factor = rs.get("attention_factor")
    mscale = rs.get("mscale")
    mscale_all_dim = rs.get("mscale_all_dim")

    def get_mscale(scale, m=1):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def corr_dim(n_rot):
        return (dim * math.log(omax / (n_rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extra = 1.0 / pos_freqs
    inter = 1.0 / (factor * pos_freqs)
    ef = 1 - ramp
    return inter * (1 - ef) + extra * ef, attention_factor


def base_config(model_type, head_dim, theta, max_pos, rope):
    cfg = {
        "model_type": model_type,
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "max_position_embeddings": max_pos,
        "rope_theta": theta,
    }
    if rope is not None:
        cfg["rope_scaling"] = rope
    return cfg


CASES = [
    ("default_qwen3", base_config("qwen3", 128, 1000000.0, 40960, None)),
    ("default_llama", base_config("llama", 64, 10000.0, 2048, None)),
    ("linear", base_config("llama", 64, 10000.0, 4096, {"type": "linear", "factor": 2.0})),
    ("llama3_8b", base_config("llama", 128, 500000.0, 131072,
                              {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    ("llama3_3b", base_config("llama", 64, 500000.0, 131072,
                              {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    ("yarn_qwen3", base_config("qwen3", 128, 1000000.0, 131072,
                               {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})),
    ("yarn_no_omax", base_config("qwen2", 64, 10000.0, 4096, {"type": "yarn", "factor": 2.0})),
    ("yarn_mscale_notrunc", base_config("qwen3", 64, 10000.0, 163840,
                                        {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707,
                                         "beta_fast": 16, "beta_slow": 2, "truncate": False,
                                         "original_max_position_embeddings": 4096})),
    ("yarn_gpt_oss", base_config("gpt_oss", 64, 150000.0, 131072,
                                 {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "truncate": False, "original_max_position_embeddings": 4096})),
    ("yarn_attention_factor", base_config("qwen3", 32, 1000000.0, 8192,
                                          {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.9,
                                           "original_max_position_embeddings": 2048})),
]


def compute(cfg):
    dim, base = cfg["head_dim"], cfg["rope_theta"]
    rs = cfg.get("rope_scaling")
    t = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if t == "default":
        return default_inv_freq(base, dim), 1.0
    if t == "linear":
        return default_inv_freq(base, dim) / rs["factor"], 1.0
    if t == "llama3":
        return llama3(base, dim, rs)
    if t == "yarn":
        return yarn(base, dim, rs, cfg["max_position_embeddings"])
    raise ValueError(t)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/rope"
    for name, cfg in CASES:
        inv, attn = compute(cfg)
        assert inv.dtype == torch.float32
        vals = inv.tolist()
        bits = [struct.unpack("<I", struct.pack("<f", v))[0] for v in vals]
        doc = {"torch": torch.__version__, "config": cfg, "attention_factor": attn,
               "inv_freq": [float("%.9g" % v) for v in vals], "inv_freq_bits": bits}
        with open(f"{out}/{name}.json", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
