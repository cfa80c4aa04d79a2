#!/usr/bin/python3
"""Reference fixture for Q8_0 weights (--dtype q8_0), computed with Debian's PyTorch.

Writes tests/data/q8/qwen3/{config.json, model.safetensors} (a tiny tied Qwen3 whose every matrix
row is a multiple of 32 elements, fp32 weights) and expected.safetensors holding:
  q8.<name>.d, q8.<name>.q  the Q8_0 blocks of every 2-D weight, quantized as ggml's reference
                            quantize_row_q8_0 does it (per block of 32: amax = max |x|,
                            d = amax / 127 in fp32, id = 1/d (0 when d = 0), q = round(x * id) with
                            halves away from zero, d stored as fp16, nearest even);
  logits                    (T, V) of the model run in float64 on the dequantized weights
                            fp16(d) * q (norm weights stay fp32);
  logits_f32                (T, V) of the same model on the original fp32 weights, so a test can
                            check that quantization changed something;
  ids                       the token ids.
The forward pass is scripts/ref_model.py's (the Hugging Face modeling semantics).
Run: /usr/bin/python3 scripts/ref_q8.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model  # noqa: E402

QK = 32
CFG = dict(ref_model.BASE, model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_size=64,
           intermediate_size=128, head_dim=16, rms_norm_eps=1e-6, rope_theta=1000000.0,
           tie_word_embeddings=True, attention_bias=False)


def quantize_q8_0(w):
    """w float32 (R, C), C % 32 == 0 -> d (R, C/32) as float16, q (R, C/32, 32) int8, in fp32 arithmetic."""
    b = np.ascontiguousarray(w, dtype=np.float32).reshape(w.shape[0], -1, QK)
    amax = np.abs(b).max(-1)
    d = (amax / np.float32(127.0)).astype(np.float32)
    safe = np.where(d != 0, d, np.float32(1.0)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1.0) / safe, np.float32(0.0)).astype(np.float32)
    x = (b * inv[..., None]).astype(np.float32).astype(np.float64)  # one fp32 product, then exact
    q = np.sign(x) * np.floor(np.abs(x) + 0.5)                      # roundf: halves away from zero
    return d.astype(np.float16), q.astype(np.int8)


def dequantize(d, q):
    return (d.astype(np.float32)[..., None] * q.astype(np.float32)).reshape(q.shape[0], -1)


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "q8")
    d_out = os.path.join(out_root, "qwen3")
    os.makedirs(d_out, exist_ok=True)
    w32 = ref_model.make_weights(CFG, 4321)
    with open(os.path.join(d_out, "config.json"), "w") as f:
        json.dump(CFG, f, indent=2)
        f.write("\n")
    ref_model.write_safetensors(os.path.join(d_out, "model.safetensors"), {n: t.numpy() for n, t in w32.items()})
    exp, wq = {}, {}
    for n, t in w32.items():
        if t.dim() == 2:
            d, q = quantize_q8_0(t.numpy())
            exp["q8." + n + ".d"] = d.astype(np.float32)
            exp["q8." + n + ".q"] = q.astype(np.float32)
            wq[n] = torch.from_numpy(dequantize(d, q)).to(torch.float64)
        else:
            wq[n] = t.to(torch.float64)
    ids = ref_model.IDS
    with torch.no_grad():
        logits = ref_model.forward(CFG, wq, ids)
        logits_f32 = ref_model.forward(CFG, {n: t.to(torch.float64) for n, t in w32.items()}, ids)
    exp["logits"] = logits.numpy()
    exp["logits_f32"] = logits_f32.numpy()
    exp["ids"] = np.array(ids, dtype=np.float64)
    ref_model.write_safetensors(os.path.join(d_out, "expected.safetensors"), exp)
    rel = (logits - logits_f32).norm() / logits_f32.norm()
    print(f"q8/qwen3: logits on Q8_0 weights vs fp32 weights: rel err {rel.item():.3g}")


if __name__ == "__main__":
    main()
