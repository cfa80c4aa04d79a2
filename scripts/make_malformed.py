#!/usr/bin/env python3
"""Generate tests/data/malformed/: broken safetensors files, sharded checkpoints and config.json
files, plus manifest.json listing, for each case, the path to open, the status still must return
and substrings its message must contain (file name and tensor/field name).

Standard library only. Usage: scripts/make_malformed.py [OUTDIR]   (default tests/data/malformed)
Deterministic: running it twice gives the same bytes.
"""
import json
import os
import shutil
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data/malformed"
cases = []

# Start from an empty tree (only one this script made: it holds a manifest.json).
if os.path.isdir(OUT):
    if not os.path.exists(os.path.join(OUT, "manifest.json")):
        sys.exit(f"{OUT} exists and has no manifest.json; refusing to replace it")
    shutil.rmtree(OUT)
os.makedirs(OUT)


def st_bytes(header, data=b"", pad=True, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write(rel, content):
    path = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())
    return path


def case(name, kind, rel, status, *expect):
    # Paths in the manifest are relative to the repository root, wherever OUT is.
    cases.append({"name": name, "kind": kind, "path": "tests/data/malformed/" + rel, "status": status,
                  "expect": list(expect)})


def st_case(name, content, status, *expect):
    rel = f"st/{name}.safetensors"
    write(rel, content)
    case(name, "safetensors", rel, status, f"{name}.safetensors", *expect)


def w(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


F32x4 = struct.pack("<4f", 1, 2, 3, 4)

# --- single files
st_case("empty", b"", "EINVAL", "0 bytes, too short")
st_case("truncated", b"\x10\x00\x00\x00\x00", "EINVAL", "5 bytes, too short")
st_case("header_past_eof", struct.pack("<Q", 1000) + b'{"a":1}', "EINVAL", "header length 1000 runs past the end")
st_case("header_huge", struct.pack("<Q", 1 << 62) + b"{}      ", "EINVAL", "100 MB limit")
st_case("bad_json", st_bytes(None, raw_header=b'{"w":{"dtype":"F32",'), "EINVAL", "not valid JSON")
st_case("header_not_object", st_bytes([1, 2, 3]), "EINVAL", "header is not a JSON object")
st_case("trailing_bytes", st_bytes(None, F32x4, raw_header=b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}x'),
        "EINVAL", "trailing bytes")
st_case("missing_dtype", st_bytes({"w": {"shape": [4], "data_offsets": [0, 16]}}, F32x4), "EINVAL",
        'tensor "w"', 'missing field "dtype"')
st_case("missing_shape", st_bytes({"w": {"dtype": "F32", "data_offsets": [0, 16]}}, F32x4), "EINVAL",
        'tensor "w"', 'missing field "shape"')
st_case("missing_offsets", st_bytes({"w": {"dtype": "F32", "shape": [4]}}, F32x4), "EINVAL",
        'tensor "w"', 'missing field "data_offsets"')
st_case("unknown_dtype", st_bytes({"w": w("Q7", [4], 0, 16)}, F32x4), "EINVAL", 'tensor "w"', 'unknown dtype "Q7"')
st_case("unsupported_dtype", st_bytes({"ids": w("I64", [2], 0, 16)}, F32x4), "EUNSUPPORTED",
        'tensor "ids"', "dtype I64")
st_case("negative_shape", st_bytes({"w": w("F32", [-4], 0, 16)}, F32x4), "EINVAL", 'tensor "w"', "non-negative")
st_case("offsets_out_of_range", st_bytes({"w": w("F32", [100], 0, 400)}, F32x4), "EINVAL", 'tensor "w"',
        "out of range")
st_case("offsets_reversed", st_bytes({"w": w("F32", [2], 8, 0)}, F32x4), "EINVAL", 'tensor "w"',
        "begin after they end")
st_case("overlap", st_bytes({"a": w("F32", [2], 0, 8), "b": w("F32", [2], 4, 12)}, F32x4), "EINVAL",
        '"a"', '"b"', "overlap")
st_case("size_mismatch", st_bytes({"w": w("F32", [3], 0, 8)}, F32x4), "EINVAL", 'tensor "w"',
        "hold 8 bytes, but shape and dtype F32 need 12")
st_case("duplicate_name", st_bytes(None, F32x4, raw_header=(
    b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}')),
        "EINVAL", 'tensor "w" appears twice')
st_case("metadata_not_strings", st_bytes({"__metadata__": {"format": 1}, "w": w("F32", [4], 0, 16)}, F32x4),
        "EINVAL", '"__metadata__"')
st_case("too_many_dims", st_bytes({"w": w("F32", [1] * 9 + [4], 0, 16)}, F32x4), "EUNSUPPORTED",
        'tensor "w"', "dimensions")


# --- sharded checkpoints
def good_shard(names):
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for n in names:
        hdr[n] = w("F32", [4], off, off + 16)
        off += 16
    return st_bytes(hdr, F32x4 * len(names))


def sharded(name, shards, weight_map, status, *expect, index=None):
    d = f"sharded/{name}"
    for fname, names in shards.items():
        write(f"{d}/{fname}", good_shard(names))
    text = index if index is not None else json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1)
    write(f"{d}/model.safetensors.index.json", text)
    case(name, "safetensors", d, status, *expect)


S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
sharded("shard_missing", {S1: ["a"]}, {"a": S1, "b": S2}, "ENOTFOUND",
        "model.safetensors.index.json", f'shard "{S2}"', 'tensor "b"')
sharded("shard_tensor_absent", {S1: ["a"], S2: ["b"]}, {"a": S1, "b": S2, "c": S2}, "EINVAL",
        "model.safetensors.index.json", 'tensor "c"', S2, "not in it")
sharded("shard_wrong_file", {S1: ["a"], S2: ["b"]}, {"b": S1, "a": S2}, "EINVAL",
        "model.safetensors.index.json", 'tensor "b"', f'mapped to shard "{S1}" but is in "{S2}"')
sharded("shard_duplicate", {S1: ["a", "b"], S2: ["b"]}, {"a": S1, "b": S2}, "EINVAL",
        'tensor "b" appears in two shards', S1, S2)
sharded("shard_path_escape", {S1: ["a"]}, {"a": "../evil.safetensors"}, "EINVAL",
        "model.safetensors.index.json", 'weight_map["a"]')
sharded("index_bad_json", {S1: ["a"]}, None, "EINVAL", "model.safetensors.index.json", "invalid JSON",
        index='{"weight_map": {"a": ')
sharded("index_no_weight_map", {S1: ["a"]}, None, "EINVAL", "model.safetensors.index.json",
        'missing field "weight_map"', index='{"metadata": {}}')
sharded("shard_corrupt", {S1: ["a"]}, {"a": S1, "b": S2}, "EINVAL", S2, "too short")
write(f"sharded/shard_corrupt/{S2}", b"\x01\x02")

# --- config.json
BASE = {"model_type": "qwen3", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}


def cfg_case(name, status, *expect, patch=None, drop=(), text=None):
    c = dict(BASE)
    for k in drop:
        del c[k]
    c.update(patch or {})
    rel = f"config/{name}/config.json"
    write(rel, text if text is not None else json.dumps(c, indent=2) + "\n")
    case(name, "config", rel, status, f"{name}/config.json", *expect)


cfg_case("cfg_bad_json", "EINVAL", "invalid JSON", text='{"model_type": "qwen3",\n  "vocab_size": }\n')
cfg_case("cfg_not_object", "EINVAL", "expected a JSON object", text="[1, 2]\n")
cfg_case("cfg_missing_model_type", "EINVAL", 'missing field "model_type"', drop=["model_type"])
cfg_case("cfg_missing_field", "EINVAL", 'missing field "hidden_size"', drop=["hidden_size"])
cfg_case("cfg_wrong_type_int", "EINVAL", 'field "num_hidden_layers" must be an integer',
         patch={"num_hidden_layers": "2"})
cfg_case("cfg_wrong_type_bool", "EINVAL", 'field "tie_word_embeddings" must be true or false',
         patch={"tie_word_embeddings": "yes"})
cfg_case("cfg_wrong_type_float", "EINVAL", 'field "rms_norm_eps" must be a number', patch={"rms_norm_eps": [1e-6]})
cfg_case("cfg_wrong_type_eos", "EINVAL", 'field "eos_token_id" must be an integer or a list',
         patch={"eos_token_id": "</s>"})
cfg_case("cfg_non_positive", "EINVAL", 'field "num_attention_heads" is 0, expected a positive integer',
         patch={"num_attention_heads": 0})
cfg_case("cfg_negative_eps", "EINVAL", 'field "rms_norm_eps" is -1, expected a positive number',
         patch={"rms_norm_eps": -1})
cfg_case("cfg_heads_not_dividing", "EINVAL", "num_attention_heads (4) must be a multiple of num_key_value_heads (3)",
         patch={"num_key_value_heads": 3})
cfg_case("cfg_hidden_not_dividing", "EINVAL", "hidden_size (30) is not a multiple of num_attention_heads (4)",
         patch={"model_type": "llama", "hidden_size": 30}, drop=["head_dim"])
cfg_case("cfg_odd_head_dim", "EINVAL", "head_dim is 7", patch={"head_dim": 7})
cfg_case("cfg_model_type_moe", "EUNSUPPORTED",
         'model_type "deepseek_v3" is not supported (supported: qwen3, qwen2, llama', patch={"model_type": "deepseek_v3"})
cfg_case("cfg_moe_top_k", "EINVAL", "num_experts_per_tok is 6, expected at most num_experts = 4",
         patch={"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 6})
cfg_case("cfg_model_type_other", "EUNSUPPORTED", 'model_type "falcon" is not supported',
         patch={"model_type": "falcon"})
cfg_case("cfg_sliding_window", "EUNSUPPORTED", "use_sliding_window", "sliding-window",
         patch={"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1})
cfg_case("cfg_layer_types_sliding", "EUNSUPPORTED", 'layer_types[1] is "sliding_attention"',
         patch={"layer_types": ["full_attention", "sliding_attention"]})
cfg_case("cfg_layer_types_count", "EINVAL", 'field "layer_types" has 3 entries',
         patch={"layer_types": ["full_attention"] * 3})
cfg_case("cfg_rope_dynamic", "EUNSUPPORTED", "rope_scaling", 'rope type "dynamic" is not supported',
         patch={"rope_scaling": {"type": "dynamic", "factor": 2.0}})
cfg_case("cfg_rope_longrope", "EINVAL", "rope_parameters", 'field "short_factor" has 1 entries, expected 4 (rotary dims / 2)',
         patch={"rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0],
                                    "long_factor": [2.0]}})
cfg_case("cfg_rope_llama3_missing", "EINVAL", "rope_scaling", 'missing field "low_freq_factor"',
         patch={"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192}})
cfg_case("cfg_rope_factor_type", "EINVAL", "rope_scaling", 'field "factor" must be a number',
         patch={"rope_scaling": {"rope_type": "linear", "factor": "2"}})
cfg_case("cfg_rope_not_object", "EINVAL", 'field "rope_scaling" must be an object or null',
         patch={"rope_scaling": 2.0})
cfg_case("cfg_bad_dtype", "EUNSUPPORTED", 'field "torch_dtype" is "float64"', patch={"torch_dtype": "float64"})
cfg_case("cfg_bad_dtype_v5", "EUNSUPPORTED", 'field "dtype" is "int8"', patch={"dtype": "int8"})
cfg_case("cfg_hidden_act", "EUNSUPPORTED", 'hidden_act "gelu" is not supported', patch={"hidden_act": "gelu"})
cfg_case("cfg_quantized", "EUNSUPPORTED", "quantization_config",
         patch={"quantization_config": {"quant_method": "fp8"}})
cfg_case("cfg_huge_int", "EINVAL", 'field "vocab_size" is 4294967296', patch={"vocab_size": 4294967296})
# sizes beyond what every backend holds are refused before anything is sized from them
cfg_case("cfg_vocab_over_2p20", "EINVAL", 'field "vocab_size" is 1048577, more than the 1048576 still supports',
         patch={"vocab_size": 1048577})
cfg_case("cfg_heads_65536", "EINVAL", 'field "num_attention_heads" is 65536, more than the 1024 still supports',
         patch={"num_attention_heads": 65536, "num_key_value_heads": 65536, "head_dim": 65536})
cfg_case("cfg_head_dim_512", "EINVAL", 'field "head_dim" is 512, more than the 256 still supports',
         patch={"head_dim": 512})
cfg_case("cfg_layers_over_limit", "EINVAL", 'field "num_hidden_layers" is 4096, more than the 1024 still supports',
         patch={"num_hidden_layers": 4096})


with open(os.path.join(OUT, "manifest.json"), "w") as f:
    json.dump({"cases": cases}, f, indent=1)
    f.write("\n")
