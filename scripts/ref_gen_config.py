#!/usr/bin/python3
"""Reference fixture for generation_config.json's length and ban fields: greedy generation of the
tiny qwen3_tied model in float64 PyTorch with transformers' logits processors and stopping
criteria re-written from transformers (generation/utils.py _prepare_generated_length,
_get_logits_processor; generation/logits_process.py; generation/stopping_criteria.py). Nothing here
imports transformers.

  min_length            MinLengthLogitsProcessor: EOS ids -inf while input_ids.shape[-1] < min_length
  min_new_tokens        MinNewTokensLengthLogitsProcessor: EOS ids -inf while new tokens < min_new_tokens;
                        when set, generate() also replaces min_length by min_new_tokens + input length
  bad_words_ids         NoBadWordsLogitsProcessor: one-id words always -inf (a word equal to [eos] is
                        dropped), a longer word bans its last id when the rest ends the input
  suppress_tokens       SuppressTokensLogitsProcessor: -inf at every step
  begin_suppress_tokens SuppressTokensAtBeginLogitsProcessor: -inf when input_ids.shape[-1] ==
                        begin_index = the input length (the first generated token)
  max_length            MaxLengthCriteria: stop once input_ids.shape[-1] >= max_length; max_new_tokens
                        wins when set (max_length = max_new_tokens + input length); a max_length equal
                        to GenerationConfig's default 20 means 20 new tokens
  eos_token_id          EosTokenCriteria: stop after an EOS id
Each case is one prompt (no padding). The script fails unless every greedy choice wins by a margin
(1e-3 in logits), so float32 engines reproduce the sequence on any machine.
Writes tests/data/sampler/gen_config.json. Run: /usr/bin/python3 scripts/ref_gen_config.py [OUT_DIR]
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import ref_model  # noqa: E402
import ref_sft  # noqa: E402

torch.set_default_dtype(torch.float64)
PROMPT = [5, 17, 300, 42, 7, 250]
CAP = 256         # still's default max_new_tokens: its bound when the config has no max_new_tokens
MARGIN = 1e-3


def processors(gc, prompt_len):
    """The processors _get_logits_processor builds for gc (decoder-only, greedy), in its order."""
    eos = gc.get("eos_token_id")
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    min_length = gc.get("min_length", 0)
    if gc.get("min_new_tokens") is not None:  # _prepare_generated_length
        min_length = gc["min_new_tokens"] + prompt_len
    procs = []
    if gc.get("bad_words_ids") is not None:
        words = [w for w in gc["bad_words_ids"] if all(w != [i] for i in eos)]

        def bad_words(ids, s, words=words):
            s = s.clone()
            for w in words:
                if len(w) == 1 or (len(w) - 1 <= len(ids) and ids[len(ids) - (len(w) - 1):] == w[:-1]):
                    s[w[-1]] = -math.inf
            return s
        procs.append(bad_words)
    if min_length > 0 and eos:
        def min_len(ids, s):
            return s.masked_fill(torch.isin(torch.arange(len(s)), torch.tensor(eos)), -math.inf) \
                if len(ids) < min_length else s
        procs.append(min_len)
    if (gc.get("min_new_tokens") or 0) > 0 and eos:
        def min_new(ids, s):
            return s.masked_fill(torch.isin(torch.arange(len(s)), torch.tensor(eos)), -math.inf) \
                if len(ids) - prompt_len < gc["min_new_tokens"] else s
        procs.append(min_new)
    if gc.get("suppress_tokens") is not None:
        def suppress(ids, s):
            return s.masked_fill(torch.isin(torch.arange(len(s)), torch.tensor(gc["suppress_tokens"])), -math.inf)
        procs.append(suppress)
    if gc.get("begin_suppress_tokens") is not None:
        def begin_suppress(ids, s):
            return s.masked_fill(torch.isin(torch.arange(len(s)), torch.tensor(gc["begin_suppress_tokens"])),
                                 -math.inf) if len(ids) == prompt_len else s
        procs.append(begin_suppress)
    return procs, eos


def max_length_of(gc, prompt_len, cap):
    if gc.get("max_new_tokens") is not None:
        return gc["max_new_tokens"] + prompt_len
    if gc.get("max_length") is not None:
        return gc["max_length"] + prompt_len if gc["max_length"] == 20 else gc["max_length"]
    return cap + prompt_len  # the engine's bound


def generate(cfg, w, gc, cap=CAP):
    procs, eos = processors(gc, len(PROMPT))
    limit = min(max_length_of(gc, len(PROMPT), cap), len(PROMPT) + cap)
    ids = list(PROMPT)
    while True:
        s = ref_model.forward(cfg, w, ids)[-1]
        for p in procs:
            s = p(ids, s)
        top = torch.topk(s, 2)
        if not (top.values[0] - top.values[1] > MARGIN):
            raise SystemExit(f"ref_gen_config: a near tie at step {len(ids) - len(PROMPT)} of {gc}")
        ids.append(int(top.indices[0]))
        if ids[-1] in eos or len(ids) >= limit:
            return ids[len(PROMPT):]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "sampler")
    mdir = os.path.join(root, "tests", "data", "models", "qwen3_tied")
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    w = {k: v.to(torch.float64) for k, v in ref_sft.read_safetensors(os.path.join(mdir, "model.safetensors")).items()}
    free = generate(cfg, w, {"eos_token_id": 2}, cap=12)
    print(f"unconstrained: {free}")
    # EOS = the third free token: unconstrained generation stops after three tokens
    eos = free[2]
    assert eos not in free[:2]
    cases = {
        "eos_stops": {"eos_token_id": eos},
        "min_length": {"eos_token_id": [eos, 16], "min_length": len(PROMPT) + 6},
        "min_new_tokens": {"eos_token_id": eos, "min_new_tokens": 5, "min_length": len(PROMPT) + 9},
        # the second free token banned at every step (a begin-only ban would keep it)
        "suppress": {"eos_token_id": [2, 314, free[2]], "suppress_tokens": [free[1], 7]},
        # the first free token banned at the first step only, and the second not at all past it
        "begin_suppress": {"eos_token_id": [2, 314], "begin_suppress_tokens": [free[0], 7]},
        "begin_suppress_first_only": {"eos_token_id": [2, 314], "begin_suppress_tokens": [free[1]],
                                      "max_new_tokens": 4},
        "bad_words": {"eos_token_id": [2, eos], "bad_words_ids": [[free[1]], [free[2], free[3]], [eos], [free[0], 9]]},
        "max_length": {"eos_token_id": 2, "max_length": len(PROMPT) + 4},
        "max_length_20": {"eos_token_id": 2, "max_length": 20},
        "max_new_tokens_wins": {"eos_token_id": 2, "max_length": len(PROMPT) + 2, "max_new_tokens": 5},
    }
    out = {"model": "qwen3_tied", "prompt": PROMPT, "max_new_tokens_cap": CAP, "cases": {}}
    for name, gc in cases.items():
        ids = generate(cfg, w, gc)
        out["cases"][name] = {"generation_config": gc, "ids": ids}
        print(f"{name}: {ids}")
    with open(os.path.join(out_dir, "gen_config.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
