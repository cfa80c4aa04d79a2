#!/usr/bin/python3
"""ref_gguf.py: numpy reference for still's GGUF reader (an independent writer and dequantizer).

Writes into OUT_DIR:
  quant.gguf                 tensors of every type still reads (F32, F16, BF16, Q8_0, Q4_0, Q4_K,
                             Q6_K): random data quantized into ggml's block layouts, plus blocks of
                             random bytes (every bit pattern of the packed fields; finite scales)
  quant_expected.safetensors the float32 values numpy dequantizes each of those tensors to
  mixed.gguf                 a random qwen3 model with Q4_K, Q6_K, Q4_0 and Q8_0 matrices (a
                             Q4_K_M-like mix of types)
  MODEL.gguf                 each test model of tests/data/models as llama.cpp's converter lays
                             it out (tensor names, reversed dims, metadata keys, llama's Q/K row
                             permutation, llama3 rope_freqs), float32

Block layouts and dequantization follow ggml's docs and ggml-quants.c (dequantize_row_*),
with every float32 product and difference rounded on its own. The quantizers are the plain
forms of ggml's reference quantizers: Q8_0 and Q4_0 as quantize_row_*_ref; Q4_K and Q6_K
choose each sub-block's scale (and min) from its range, without the iterative search of
make_qkx2_quants / make_qx_quants, which changes which blocks are written but not the format.
"""
import json
import os
import struct
import sys

import numpy as np

F32 = np.float32
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_U64 = 4, 5, 6, 7, 8, 9, 10
T_F32, T_F16, T_Q4_0, T_Q8_0, T_Q4_K, T_Q6_K, T_BF16 = 0, 1, 2, 8, 12, 14, 30
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_BF16: (1, 2), T_Q8_0: (32, 34), T_Q4_0: (32, 18), T_Q4_K: (256, 144),
         T_Q6_K: (256, 210)}


# ---------------------------------------------------------------- writer (ggml docs/gguf.md)
def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gvalue(t, v):
    if t == GGUF_U32:
        return struct.pack("<I", v)
    if t == GGUF_I32:
        return struct.pack("<i", v)
    if t == GGUF_F32:
        return struct.pack("<f", v)
    if t == GGUF_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if t == GGUF_STRING:
        return gstr(v)
    if t == GGUF_U64:
        return struct.pack("<Q", v)
    raise ValueError(t)


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: [(key, type, value)] (arrays: (key, GGUF_ARRAY, (elem_type, [values]))).
    tensors: [(name, ne (innermost first), type, raw bytes)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, t, v in kvs:
        out += gstr(key) + struct.pack("<I", t)
        if t == GGUF_ARRAY:
            et, items = v
            out += struct.pack("<IQ", et, len(items))
            for it in items:
                out += gvalue(et, it)
        else:
            out += gvalue(t, v)
    offset = 0
    offsets = []
    for name, ne, t, raw in tensors:
        offsets.append(offset)
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", t, offset)
        offset += (len(raw) + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for (name, ne, t, raw), off in zip(tensors, offsets):
        out += raw + b"\0" * ((-len(raw)) % alignment)
    with open(path, "wb") as f:
        f.write(out)


def write_safetensors(path, named):
    header, blobs, off = {}, [], 0
    for name, arr in sorted(named.items()):
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        assert v["dtype"] == "F32", v["dtype"]
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype="<f4").reshape(v["shape"])
    return out


# ---------------------------------------------------------------- block formats
def f16_bits(x):
    return np.asarray(x, dtype=np.float16).view(np.uint16)


def f16_val(bits):
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(F32)


def bf16_bits(x):
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even (finite inputs)
    return u.astype(np.uint16)


def roundf(x):  # C roundf: half away from zero
    return np.sign(x) * np.floor(np.abs(x) + F32(0.5))


def quant_q8_0(x):
    x = x.reshape(-1, 32).astype(F32)
    amax = np.abs(x).max(axis=1)
    d = (amax / F32(127)).astype(F32)
    idn = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    q = roundf((x * idn[:, None]).astype(F32)).astype(np.int8)
    blocks = np.zeros((x.shape[0], 34), np.uint8)
    blocks[:, 0:2] = f16_bits(d).view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = q.view(np.uint8)
    return blocks.tobytes()


def quant_q4_0(x):
    x = x.reshape(-1, 32).astype(F32)
    idx = np.abs(x).argmax(axis=1)
    mx = x[np.arange(x.shape[0]), idx]
    d = (mx / F32(-8)).astype(F32)
    idn = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    q = np.minimum(15, np.trunc((x * idn[:, None]).astype(F32) + F32(8.5)).astype(np.int32)).astype(np.uint8)
    blocks = np.zeros((x.shape[0], 18), np.uint8)
    blocks[:, 0:2] = f16_bits(d).view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return blocks.tobytes()


def pack_scale_min_k4(sc, mn):
    """8 six-bit scales and mins -> the 12 bytes get_scale_min_k4 unpacks."""
    q = np.zeros(12, np.uint8)
    for j in range(8):
        if j < 4:
            q[j] |= sc[j] & 63
            q[j + 4] |= mn[j] & 63
        else:
            q[j + 4] |= (sc[j] & 0xF) | ((mn[j] & 0xF) << 4)
            q[j - 4] |= (sc[j] >> 4) << 6
            q[j] |= (mn[j] >> 4) << 6
    return q


def quant_q4_k(x):
    out = bytearray()
    for blk in x.reshape(-1, 256).astype(F32):
        sub = blk.reshape(8, 32)
        mins = np.minimum(sub.min(axis=1), F32(0))
        scales = ((sub.max(axis=1) - mins) / F32(15)).astype(F32)
        max_scale, max_min = scales.max(), (-mins).max()
        inv_scale = F32(63) / max_scale if max_scale > 0 else F32(0)
        inv_min = F32(63) / max_min if max_min > 0 else F32(0)
        ls = np.minimum(63, roundf(inv_scale * scales)).astype(np.uint8)
        lm = np.minimum(63, roundf(inv_min * -mins)).astype(np.uint8)
        d = f16_val(f16_bits(max_scale / F32(63)))
        dmin = f16_val(f16_bits(max_min / F32(63)))
        q = np.zeros((8, 32), np.uint8)
        for j in range(8):
            dj, mj = F32(d * F32(ls[j])), F32(dmin * F32(lm[j]))
            if dj != 0:
                q[j] = np.clip(roundf(((sub[j] + mj) / dj).astype(F32)), 0, 15).astype(np.uint8)
        qs = np.zeros(128, np.uint8)
        for j in range(4):
            qs[32 * j:32 * j + 32] = q[2 * j] | (q[2 * j + 1] << 4)
        out += f16_bits(d).tobytes() + f16_bits(dmin).tobytes() + pack_scale_min_k4(ls, lm).tobytes() + qs.tobytes()
    return bytes(out)


def quant_q6_k(x):
    out = bytearray()
    for blk in x.reshape(-1, 256).astype(F32):
        sub = blk.reshape(16, 16)
        idx = np.abs(sub).argmax(axis=1)
        mx = sub[np.arange(16), idx]
        scales = (mx / F32(-32)).astype(F32)
        amax = np.abs(scales).argmax()
        max_scale = scales[amax]
        iscale = F32(-128) / max_scale if max_scale != 0 else F32(0)
        ls = np.clip(roundf(iscale * scales), -128, 127).astype(np.int8)
        d = f16_val(f16_bits(F32(1) / iscale if iscale != 0 else F32(0)))
        L = np.zeros((16, 16), np.int32)
        for j in range(16):
            dj = F32(d * F32(ls[j]))
            if dj != 0:
                L[j] = np.clip(roundf((sub[j] / dj).astype(F32)), -32, 31).astype(np.int32)
        L = (L + 32).reshape(256).astype(np.uint8)
        ql = np.zeros(128, np.uint8)
        qh = np.zeros(64, np.uint8)
        for n in range(2):
            base = L[128 * n:128 * n + 128]
            for l in range(32):
                q1, q2, q3, q4 = base[l], base[l + 32], base[l + 64], base[l + 96]
                ql[64 * n + l] = (q1 & 0xF) | ((q3 & 0xF) << 4)
                ql[64 * n + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4)
                qh[32 * n + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
        out += ql.tobytes() + qh.tobytes() + ls.view(np.uint8).tobytes() + f16_bits(d).tobytes()
    return bytes(out)


def dequant(t, raw, n):
    b = np.frombuffer(raw, np.uint8)
    if t == T_F32:
        return np.frombuffer(raw, "<f4").astype(F32)
    if t == T_F16:
        return f16_val(np.frombuffer(raw, "<u2"))
    if t == T_BF16:
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(F32)
    if t == T_Q8_0:
        blk = b.reshape(-1, 34)
        d = f16_val(blk[:, 0:2].copy().view("<u2").reshape(-1))
        q = blk[:, 2:].view(np.int8).astype(F32)
        return (q * d[:, None]).astype(F32).reshape(-1)
    if t == T_Q4_0:
        blk = b.reshape(-1, 18)
        d = f16_val(blk[:, 0:2].copy().view("<u2").reshape(-1))
        qs = blk[:, 2:]
        lo = ((qs & 0xF).astype(np.int32) - 8).astype(F32)
        hi = ((qs >> 4).astype(np.int32) - 8).astype(F32)
        return np.concatenate([lo * d[:, None], hi * d[:, None]], axis=1).astype(F32).reshape(-1)
    if t == T_Q4_K:
        y = []
        for blk in b.reshape(-1, 144):
            d = f16_val(blk[0:2].copy().view("<u2"))[0]
            dmin = f16_val(blk[2:4].copy().view("<u2"))[0]
            sc, q = blk[4:16], blk[16:]
            for j in range(4):
                pair = []
                for s in (2 * j, 2 * j + 1):
                    if s < 4:
                        scale, mn = sc[s] & 63, sc[s + 4] & 63
                    else:
                        scale = (sc[s + 4] & 0xF) | ((sc[s - 4] >> 6) << 4)
                        mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4)
                    pair.append((F32(d * F32(scale)), F32(dmin * F32(mn))))
                qq = q[32 * j:32 * j + 32]
                (d1, m1), (d2, m2) = pair
                y.append(((d1 * (qq & 0xF).astype(F32)).astype(F32) - m1).astype(F32))
                y.append(((d2 * (qq >> 4).astype(F32)).astype(F32) - m2).astype(F32))
        return np.concatenate(y).astype(F32)
    if t == T_Q6_K:
        y = []
        for blk in b.reshape(-1, 210):
            ql, qh, sc = blk[0:128], blk[128:192], blk[192:208].view(np.int8)
            d = f16_val(blk[208:210].copy().view("<u2"))[0]
            for n in range(2):
                l_, h_, s_ = ql[64 * n:64 * n + 64].astype(np.int32), qh[32 * n:32 * n + 32].astype(np.int32), sc[8 * n:8 * n + 8]
                part = np.zeros(128, F32)
                for l in range(32):
                    i = l // 16
                    q1 = ((l_[l] & 0xF) | (((h_[l] >> 0) & 3) << 4)) - 32
                    q2 = ((l_[l + 32] & 0xF) | (((h_[l] >> 2) & 3) << 4)) - 32
                    q3 = ((l_[l] >> 4) | (((h_[l] >> 4) & 3) << 4)) - 32
                    q4 = ((l_[l + 32] >> 4) | (((h_[l] >> 6) & 3) << 4)) - 32
                    for k, (qv, si) in enumerate(((q1, i), (q2, i + 2), (q3, i + 4), (q4, i + 6))):
                        part[l + 32 * k] = F32(F32(d * F32(s_[si])) * F32(qv))
                y.append(part)
        return np.concatenate(y).astype(F32)
    raise ValueError(t)


def random_blocks(rng, t, nblocks):
    """Random bytes in t's layout, every f16 scale replaced by a finite random one."""
    be, bb = BLOCK[t]
    raw = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
    f16_at = {T_Q8_0: [0], T_Q4_0: [0], T_Q4_K: [0, 2], T_Q6_K: [208]}[t]
    for off in f16_at:
        raw[:, off:off + 2] = f16_bits(rng.uniform(-2, 2, nblocks).astype(F32)).view(np.uint8).reshape(-1, 2)
    return raw.tobytes()


def make_quant(out_dir):
    rng = np.random.default_rng(20261202)
    tensors, expected = [], {}
    rows, cols = 3, 512
    x = (rng.standard_normal((rows, cols)) * 0.05).astype(F32)
    x[1, :40] *= 20  # one block of outliers
    cases = [("f32", T_F32, x.astype("<f4").tobytes()), ("f16", T_F16, f16_bits(x).tobytes()),
             ("bf16", T_BF16, bf16_bits(x).tobytes()), ("q8_0", T_Q8_0, quant_q8_0(x)),
             ("q4_0", T_Q4_0, quant_q4_0(x)), ("q4_k", T_Q4_K, quant_q4_k(x)), ("q6_k", T_Q6_K, quant_q6_k(x))]
    for t in (T_Q8_0, T_Q4_0, T_Q4_K, T_Q6_K):
        name = {T_Q8_0: "q8_0", T_Q4_0: "q4_0", T_Q4_K: "q4_k", T_Q6_K: "q6_k"}[t]
        cases.append((name + "_random", t, random_blocks(rng, t, rows * cols // BLOCK[t][0])))
    for name, t, raw in cases:
        tensors.append((name, [cols, rows], t, raw))
        expected[name] = dequant(t, raw, rows * cols).reshape(rows, cols)
        if not name.endswith("_random") and t != T_F32:
            err = np.abs(expected[name] - x).max()
            assert err < 0.08 * np.abs(x).max(), (name, err)  # the quantizer round-trips
    write_gguf(os.path.join(out_dir, "quant.gguf"), [("general.architecture", GGUF_STRING, "none"),
                                                     ("general.alignment", GGUF_U32, 64)], tensors, alignment=64)
    write_safetensors(os.path.join(out_dir, "quant_expected.safetensors"), expected)


# ---------------------------------------------------------------- models
LAYER = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
         "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
         "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
         "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.bias": "attn_output.bias",
         "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight"}
GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
          "lm_head.weight": "output.weight"}


def gguf_name(hf):
    if hf in GLOBAL:
        return GLOBAL[hf]
    parts = hf.split(".")
    return "blk.%s.%s" % (parts[2], LAYER[".".join(parts[3:])])


def llama_permute(w, n_head):
    # convert_hf_to_gguf's LlamaModel.permute: per head, rows [2][hd/2] -> [hd/2][2].
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg, hd):
    rs = cfg["rope_scaling"]
    base = cfg.get("rope_theta", 10000.0)
    freqs = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs["original_max_position_embeddings"]
    lo_wl, hi_wl = old / lo, old / hi
    out = []
    for f in freqs:
        wl = 2 * np.pi / f
        if wl < hi_wl:
            out.append(1)
        elif wl > lo_wl:
            out.append(factor)
        else:
            smooth = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def make_model(model_dir, path):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    arch = cfg["model_type"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim", cfg["hidden_size"] // nh)
    kvs = [("general.architecture", GGUF_STRING, arch), ("general.name", GGUF_STRING, os.path.basename(model_dir)),
           (arch + ".block_count", GGUF_U32, cfg["num_hidden_layers"]),
           (arch + ".context_length", GGUF_U32, cfg["max_position_embeddings"]),
           (arch + ".embedding_length", GGUF_U32, cfg["hidden_size"]),
           (arch + ".feed_forward_length", GGUF_U32, cfg["intermediate_size"]),
           (arch + ".attention.head_count", GGUF_U32, nh), (arch + ".attention.head_count_kv", GGUF_U32, nkv),
           (arch + ".rope.freq_base", GGUF_F32, cfg.get("rope_theta", 10000.0)),
           (arch + ".attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"]),
           ("general.file_type", GGUF_U32, 0)]
    if "head_dim" in cfg:
        kvs += [(arch + ".attention.key_length", GGUF_U32, hd), (arch + ".attention.value_length", GGUF_U32, hd)]
    for key, field in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if isinstance(cfg.get(field), int):
            kvs.append(("tokenizer.ggml." + key, GGUF_U32, cfg[field]))
    tensors = []
    for hf in sorted(w, key=lambda n: (GLOBAL.get(n) is None, n)):
        if cfg.get("tie_word_embeddings") and hf == "lm_head.weight":
            continue
        a = np.asarray(w[hf], dtype=F32)
        if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
            a = llama_permute(a, nh if ".q_proj." in hf else nkv)
        tensors.append((gguf_name(hf), list(reversed(a.shape)), T_F32, a.astype("<f4").tobytes()))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        tensors.append(("rope_freqs.weight", [hd // 2], T_F32, llama3_rope_factors(cfg, hd).astype("<f4").tobytes()))
    write_gguf(path, kvs, tensors)


def make_mixed(out_dir):
    """A Q4_K_M-like file: a random qwen3 model whose matrices are Q4_K, Q6_K, Q4_0 and Q8_0
    (widths multiples of 256), norms F32."""
    rng = np.random.default_rng(7)
    C, FF, V, NH, NKV, HD = 256, 256, 256, 2, 1, 128
    arch = "qwen3"
    kvs = [("general.architecture", GGUF_STRING, arch), ("general.name", GGUF_STRING, "mixed"),
           (arch + ".block_count", GGUF_U32, 1), (arch + ".context_length", GGUF_U32, 512),
           (arch + ".embedding_length", GGUF_U32, C), (arch + ".feed_forward_length", GGUF_U32, FF),
           (arch + ".attention.head_count", GGUF_U32, NH), (arch + ".attention.head_count_kv", GGUF_U32, NKV),
           (arch + ".attention.key_length", GGUF_U32, HD), (arch + ".attention.value_length", GGUF_U32, HD),
           (arch + ".rope.freq_base", GGUF_F32, 1000000.0),
           (arch + ".attention.layer_norm_rms_epsilon", GGUF_F32, 1e-6), ("general.file_type", GGUF_U32, 15)]
    quant = {T_Q4_K: quant_q4_k, T_Q6_K: quant_q6_k, T_Q4_0: quant_q4_0, T_Q8_0: quant_q8_0}
    spec = [("token_embd.weight", (V, C), T_Q4_K), ("output.weight", (V, C), T_Q6_K),
            ("output_norm.weight", (C,), T_F32), ("blk.0.attn_norm.weight", (C,), T_F32),
            ("blk.0.attn_q.weight", (NH * HD, C), T_Q4_K), ("blk.0.attn_k.weight", (NKV * HD, C), T_Q4_K),
            ("blk.0.attn_v.weight", (NKV * HD, C), T_Q6_K), ("blk.0.attn_output.weight", (C, NH * HD), T_Q4_K),
            ("blk.0.attn_q_norm.weight", (HD,), T_F32), ("blk.0.attn_k_norm.weight", (HD,), T_F32),
            ("blk.0.ffn_norm.weight", (C,), T_F32), ("blk.0.ffn_gate.weight", (FF, C), T_Q4_0),
            ("blk.0.ffn_up.weight", (FF, C), T_Q8_0), ("blk.0.ffn_down.weight", (C, FF), T_Q6_K)]
    tensors = []
    for name, shape, t in spec:
        if t == T_F32:
            a = (1 + 0.1 * rng.standard_normal(shape)).astype(F32)
            raw = a.astype("<f4").tobytes()
        else:
            raw = quant[t]((rng.standard_normal(shape) * 0.05).astype(F32))
        tensors.append((name, list(reversed(shape)), t, raw))
    write_gguf(os.path.join(out_dir, "mixed.gguf"), kvs, tensors)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    make_quant(out_dir)
    make_mixed(out_dir)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    for name in ("qwen3_tied", "qwen3_untied", "qwen2", "llama"):
        make_model(os.path.join(root, "tests", "data", "models", name), os.path.join(out_dir, name + ".gguf"))


if __name__ == "__main__":
    main()
