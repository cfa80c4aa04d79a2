#!/usr/bin/python3
"""Safetensors cross-check with Debian's PyTorch (Debian 12 has no python3-safetensors).

  check_safetensors_load.py make OUT     write the reference sample (the tensors of SAMPLE) the way
                                          the safetensors crate lays out a file: header
                                          {"__metadata__":{"format":"pt"}, tensors...} with tensors
                                          ordered F32, BF16, F16 and by name within a dtype,
                                          contiguous data, header padded with spaces to 8 bytes.
  check_safetensors_load.py check FILE   load FILE with the crate's validation rules (header
                                          length, JSON object, known dtypes, offsets sorted,
                                          contiguous from 0 to the end of the file, size = numel *
                                          dtype size) into torch tensors; a file holding the SAMPLE
                                          names must also hold its values.

tests/unit/test_safetensors.c writes SAMPLE with st_write and compares the bytes with the committed
tests/data/st/reference.safetensors; scripts/refs_safetensors.sh regenerates and checks it.
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}
RANK = {"F32": 0, "BF16": 1, "F16": 2}

# name, dtype, shape. Value i of tensor k: ((37 * i + 11 * k) % 101 - 50) / 8, exact in every dtype.
SAMPLE = [
    ("model.embed_tokens.weight", "BF16", [4, 3]),
    ("model.norm.weight", "F32", [3]),
    ("lm_head.weight", "F16", [4, 3]),
    ("model.layers.0.self_attn.q_proj.bias", "F32", [5]),
    ("z.scalar", "F32", []),
    ("b.odd", "BF16", [3]),
    ("a.empty", "F16", [0, 2]),
]


def sample_values(k, shape):
    n = 1
    for d in shape:
        n *= d
    return torch.tensor([((37 * i + 11 * k) % 101 - 50) / 8 for i in range(n)], dtype=torch.float32).reshape(shape)


def write_reference(path):
    items = sorted(((RANK[dt], name, dt, shape, k) for k, (name, dt, shape) in enumerate(SAMPLE)))
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for _, name, dt, shape, k in items:
        data = sample_values(k, shape).to(DTYPES[dt][0]).contiguous()
        raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load(path):
    buf = open(path, "rb").read()
    assert len(buf) >= 8, f"{path}: shorter than 8 bytes"
    (n,) = struct.unpack("<Q", buf[:8])
    assert n <= 100_000_000 and 8 + n <= len(buf), f"{path}: bad header length {n}"
    hb = buf[8:8 + n]
    assert hb[:1] == b"{", f"{path}: header does not start with '{{'"
    header = json.loads(hb.decode("utf-8"))
    assert isinstance(header, dict), f"{path}: header is not an object"
    meta = header.pop("__metadata__", None)
    assert meta is None or all(isinstance(v, str) for v in meta.values()), f"{path}: bad __metadata__"
    data = buf[8 + n:]
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"])
    pos, out = 0, {}
    for name, info in entries:
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        assert dt in DTYPES, f"{path}: {name}: dtype {dt}"
        assert b == pos and e >= b, f"{path}: {name}: offsets {b},{e} not contiguous (expected start {pos})"
        numel = 1
        for d in shape:
            numel *= d
        assert e - b == numel * DTYPES[dt][1], f"{path}: {name}: size mismatch"
        t = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[dt][0]) if e > b else torch.empty(0, dtype=DTYPES[dt][0])
        out[name] = t.reshape(shape)
        pos = e
    assert pos == len(data), f"{path}: {len(data) - pos} bytes after the last tensor"
    return meta, out


def check(path):
    meta, tensors = load(path)
    sample = {name: (k, dt, shape) for k, (name, dt, shape) in enumerate(SAMPLE)}
    if set(tensors) == set(sample):
        for name, t in tensors.items():
            k, dt, shape = sample[name]
            assert t.dtype == DTYPES[dt][0] and list(t.shape) == shape, name
            assert torch.equal(t.float(), sample_values(k, shape)), f"{path}: {name}: values differ"
    print(f"{path}: ok, {len(tensors)} tensors, metadata {meta}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        write_reference(sys.argv[2])
        check(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "check":
        for p in sys.argv[2:]:
            check(p)
    else:
        sys.exit(__doc__)
