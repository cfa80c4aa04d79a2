#!/usr/bin/env python3
"""fuzz_seeds.py OUT: seed corpora for the fuzz targets (fuzz/fuzz_*.c), made from the test
fixtures under tests/data into OUT/<target>/. Run by scripts/fuzz.sh; nothing here is committed."""
import glob
import gzip
import hashlib
import json
import os
import sys

out = sys.argv[1]
counts = {}


def seed(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)
    counts[target] = counts.get(target, 0) + 1


def read(path):
    with open(path, "rb") as f:
        return f.read()


# safetensors: every small fixture; checkpoints cut to their header plus the first 4 KiB of data.
for p in sorted(glob.glob("tests/data/**/*.safetensors", recursive=True)):
    b = read(p)
    if len(b) > 65536 and len(b) >= 8:
        n = int.from_bytes(b[:8], "little")
        b = b[: 8 + n + 4096]
    seed("safetensors", b)

# gguf: the numpy-written fixtures (models and every quantized type).
for p in sorted(glob.glob("tests/data/gguf/*.gguf")):
    seed("gguf", read(p))

# config.json: model fixtures, the malformed set, and the configs inside the RoPE references.
for p in sorted(glob.glob("tests/data/**/config.json", recursive=True)):
    seed("config", read(p))
for p in sorted(glob.glob("tests/data/rope/*.json")):
    seed("config", json.dumps(json.load(open(p))["config"], indent=1))

# tokenizer.json: each real tokenizer cut to a small vocabulary (the merges and added tokens that
# fit), with and without its tokenizer_config.json after a NUL byte.
for d in sorted(os.path.dirname(p) + "/" for p in glob.glob("tests/data/tokenizer/*/tokenizer.json.gz")):
    tok = json.loads(gzip.decompress(read(d + "tokenizer.json.gz")))
    cfg = read(d + "tokenizer_config.json")
    model = tok["model"]
    for keep in (64, 400):
        vocab = {k: v for k, v in model["vocab"].items() if v < keep}
        merges = []
        for m in model.get("merges", []):
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            if a in vocab and b in vocab and a + b in vocab:
                merges.append(m)
        small = dict(tok, model=dict(model, vocab=vocab, merges=merges))
        small["added_tokens"] = [t for t in tok.get("added_tokens", [])][:24]
        text = json.dumps(small, ensure_ascii=False).encode()
        seed("tokenizer_load", text)
        seed("tokenizer_load", text + b"\0" + cfg)

# The synthetic tokenizers (one per component variant), as they are.
for d in sorted(glob.glob("tests/data/tokenizer/synth/*/")):
    for name in ("tokenizer.json", "tokenizer.json.gz"):
        if os.path.exists(d + name):
            text = read(d + name)
            text = gzip.decompress(text) if name.endswith(".gz") else text
            seed("tokenizer_load", text)
            if os.path.exists(d + "tokenizer_config.json"):
                seed("tokenizer_load", text + b"\0" + read(d + "tokenizer_config.json"))
for d in ("tests/data/sft/tok/", "tests/data/sft/tok_nogen/"):
    seed("tokenizer_load", read(d + "tokenizer.json") + b"\0" + read(d + "tokenizer_config.json"))

# Text to encode: the reference strings of every tokenizer fixture, flags 0 and 3.
for p in sorted(glob.glob("tests/data/tokenizer/*/expected.jsonl")):
    for i, line in enumerate(open(p, encoding="utf-8")):
        t = json.loads(line)["text"].encode("utf-8", "surrogatepass")
        seed("tokenizer_encode", bytes([i & 3]) + t[:4096])

# Chat templates: the template files, the model ones, and the inline sources of the Jinja2 cases.
for p in sorted(glob.glob("tests/data/chat/templates/*.jinja")):
    seed("chat_template", read(p))
for p in sorted(glob.glob("tests/data/chat/models/*/tokenizer_config.json")):
    ct = json.load(open(p)).get("chat_template")
    if isinstance(ct, str):
        seed("chat_template", ct)
cases = json.load(open("tests/data/chat/jinja2.json"))["cases"]
for c in cases:
    if "source" in c:
        seed("chat_template", c["source"])

# Messages for the model templates: the CLI fixtures and the variables of the Jinja2 cases.
for p in sorted(glob.glob("tests/data/chat/cli/*.in.json")):
    llama = os.path.basename(p).startswith("llama3")
    seed("chat_messages", bytes([1 | (2 if llama else 0)]) + read(p))
    seed("chat_messages", bytes([2 if llama else 0]) + read(p) + b'\0{"enable_thinking": false}')
for c in cases:
    if c.get("template") in ("qwen3.jinja", "llama3.jinja") and "messages" in c.get("vars", {}):
        flag = 2 if c["template"] == "llama3.jinja" else 0
        v = {k: x for k, x in c["vars"].items() if not k.endswith("_token") and k != "additional_special_tokens"}
        seed("chat_messages", bytes([flag | 1]) + json.dumps(v, ensure_ascii=False).encode())

# Command lines: the chat-template CLI fixtures (one argument per line) and hand-made ones.
for p in sorted(glob.glob("tests/data/chat/cli/*.args")):
    seed("args", read(p))
for a in ["--model_name_or_path\n/m\n--learning-rate\n3e-4\n--max_new_tokens=7\n--packing\n--no_do_sample",
          "pos\n--reward\nlen\n--reward=fmt\n--seed\n-1\n--do_sample\nTrue\n--threads\n2\n--help",
          "--bf16\n--report_to\nnone\n--push_to_hub\nfalse\n--num_beams\n1\n--use_peft\n--lora_r\n8",
          "--dtype\nbfloat16\n--device=ref\n--log_level\ndebug\n--\n-x\n--torch_dtype=float32"]:
    seed("args", a)

# --config files, JSON and YAML.
for c in ['{"model": "/m", "learning_rate": 1e-4, "reward": ["a", "b"], "packing": true, "seed": 3}',
          '{"model_name_or_path": "m", "bf16": true, "push_to_hub": false, "max_new_tokens": 16.0}',
          "model: /m\nlearning_rate: 1.0e-4\npacking: yes\nreward:\n  - a\n  - b\nseed: ~\n",
          "# comment\ndataset_name: d.jsonl\ndo_sample: False\nreport_to: wandb\nmax_new_tokens: '8'\n",
          "---\nmodel: \"quoted\"\nreward: [x, y]\n...\n"]:
    seed("args_config", c)

# SFT datasets: the fixtures and one row of every TRL format, each under a few option bytes.
rows = [read(p) for p in sorted(glob.glob("tests/data/sft/**/*.json*", recursive=True)) if "cases" not in p]
rows += [r.encode() for r in [
    '{"text": "hello world"}\n{"text": "a b c"}\n',
    '{"prompt": "2+2=", "completion": "4"}\n',
    '{"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "yo"}]}\n',
    '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}\n',
    '{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}\n',
    '{"input_ids": [1, 2, 3, 4], "completion_mask": [0, 0, 1, 1]}\n{"input_ids": [5, 6], "assistant_masks": [0, 1]}\n',
    '[{"text": "x"}, {"text": "y"}]',
]]
for r in rows:
    for opts in (b"\x00\x00", b"\x13\x00", b"\x7f\x01", b"\xe0\x00", b"\x41\x02"):
        seed("dataset", opts + r)

# still serve request bodies (byte 0: 0 chat, 1 completions) and completion texts with tool calls.
tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
bodies = [
    (0, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0.7,
         "top_p": 0.9, "seed": 3, "stop": ["\n", "###"], "n": 2, "logprobs": True, "stream": True,
         "stream_options": {"include_usage": True}}),
    (0, {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"}]},
                      {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                      {"role": "tool", "tool_call_id": "c", "content": "sunny"}], "tools": [tool],
         "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": False}}),
    (1, {"prompt": "Once upon", "max_tokens": 16, "logprobs": 0, "echo": False, "top_k": 40, "min_p": 0.05,
         "ignore_eos": True, "min_tokens": 2, "response_format": {"type": "json_object"}}),
    (1, {"prompt": ["x"], "max_completion_tokens": 1, "presence_penalty": 0}),
]
for kind, b in bodies:
    seed("serve_request", bytes([kind]) + json.dumps(b).encode())
seed("serve_request", b"\x00<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call> tail")

# Preference pairs: the reward fixtures and one row of every format, each under a few option bytes.
rows = [read(p) for p in sorted(glob.glob("tests/data/reward/*.jsonl"))]
rows += [r.encode() for r in [
    '{"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5", "margin": 0.5}\n',
    '{"chosen": "good<|im_end|>", "rejected": "bad"}\n',
    '{"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "a"}], '
    '"rejected": [{"role": "assistant", "content": "b"}]}\n',
    '{"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], '
    '"rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]}\n',
    '{"chosen_input_ids": [1, 2], "rejected_input_ids": [3]}\n',
    '[{"chosen_ids": [1], "rejected_ids": [2, 3], "margin": -1}]',
]]
for r in rows:
    for opts in (b"\x00", b"\x07", b"\x08", b"\x13", b"\x1f"):
        seed("reward_data", opts + r)

for t in sorted(counts):
    print(f"  seeds {t}: {counts[t]}")
