#!/usr/bin/python3
"""ref_sampler.py: Hugging Face's logits processors re-written literally in PyTorch from their
documented formulas (transformers generation/logits_process.py), applied in generate()'s order to
random batches, written as the fixture tests/data/sampler/processors.json.

Run with Debian's python3 (torch): scripts/refs_sampler.sh. Nothing here imports transformers.

One deliberate departure: torch.sort is unstable, so HF's order among equal scores in TopP is
unspecified. Here the ascending order puts equal scores in decreasing index (a stable descending
sort, reversed), so the lowest indices of a tied group survive: the rule of docs/sampling.md.
"""
import json
import math
import sys

import torch

NEG_INF = -math.inf


# ---- the processors, in generate() order ------------------------------------------------------

def repetition_penalty(input_ids, scores, penalty):
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, input_ids, score)


def no_repeat_ngram(input_ids, scores, n):
    batch, cur_len = input_ids.shape
    if cur_len + 1 < n:
        return scores
    scores = scores.clone()
    for b in range(batch):
        tokens = input_ids[b].tolist()
        generated = {}
        for ngram in zip(*[tokens[i:] for i in range(n)]):
            generated.setdefault(tuple(ngram[:-1]), []).append(ngram[-1])
        prefix = tuple(tokens[cur_len + 1 - n:cur_len])
        for t in generated.get(prefix, []):
            scores[b, t] = NEG_INF
    return scores


def no_bad_words(input_ids, scores, bad_words_ids, eos_token_id):
    words = [w for w in bad_words_ids if all(w != [e] for e in eos_token_id)]
    bias = torch.zeros_like(scores)
    for w in words:
        if len(w) == 1:
            bias[:, w[0]] += NEG_INF
            continue
        if len(w) > input_ids.shape[1]:
            continue
        prefix = torch.tensor(w[:-1], dtype=input_ids.dtype)
        matching = torch.eq(input_ids[:, -(len(w) - 1):], prefix).prod(dim=1)
        bias[:, w[-1]] += torch.where(matching.bool(), torch.tensor(NEG_INF), torch.tensor(0.0))
    return scores + bias


def eos_mask(scores, eos_token_id):
    return torch.isin(torch.arange(scores.shape[-1]), torch.tensor(eos_token_id))


def min_length(input_ids, scores, min_len, eos_token_id):
    if input_ids.shape[-1] < min_len:
        return torch.where(eos_mask(scores, eos_token_id), NEG_INF, scores)
    return scores


def min_new_tokens(input_ids, scores, prompt_len, min_new, eos_token_id):
    if input_ids.shape[-1] - prompt_len < min_new:
        return torch.where(eos_mask(scores, eos_token_id), NEG_INF, scores)
    return scores


def temperature(scores, t):
    return scores / t


def top_k(scores, k, min_keep=1):
    k = min(max(k, min_keep), scores.size(-1))
    remove = scores < torch.topk(scores, k)[0][..., -1, None]
    return scores.masked_fill(remove, NEG_INF)


def ascending_sort(scores):
    # torch.sort(scores, descending=False) with the documented tie order (see the module doc)
    values, indices = torch.sort(scores, descending=True, stable=True)
    return values.flip(-1), indices.flip(-1)


def top_p(scores, p, min_keep=1):
    sorted_logits, sorted_indices = ascending_sort(scores)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_remove = cumulative_probs <= (1 - p)
    sorted_remove[..., -min_keep:] = 0
    remove = sorted_remove.scatter(1, sorted_indices, sorted_remove)
    return scores.masked_fill(remove, NEG_INF)


def min_p(scores, mp, min_keep=1):
    probs = torch.softmax(scores, dim=-1)
    top_probs = probs.amax(dim=-1, keepdim=True)
    remove = probs < mp * top_probs
    sorted_indices = torch.argsort(scores, descending=True, dim=-1)
    sorted_remove = torch.gather(remove, dim=-1, index=sorted_indices)
    sorted_remove[..., :min_keep] = False
    remove = sorted_remove.scatter(1, sorted_indices, sorted_remove)
    return scores.masked_fill(remove, NEG_INF)


def process(cfg, input_ids, prompt_len, scores):
    eos = cfg["eos_token_id"]
    if cfg["repetition_penalty"] != 1.0:
        scores = repetition_penalty(input_ids, scores, cfg["repetition_penalty"])
    if cfg["no_repeat_ngram_size"] > 0:
        scores = no_repeat_ngram(input_ids, scores, cfg["no_repeat_ngram_size"])
    if cfg["bad_words_ids"]:
        scores = no_bad_words(input_ids, scores, cfg["bad_words_ids"], eos)
    if cfg["min_length"] > 0:
        scores = min_length(input_ids, scores, cfg["min_length"], eos)
    if cfg["min_new_tokens"] > 0:
        scores = min_new_tokens(input_ids, scores, prompt_len, cfg["min_new_tokens"], eos)
    if cfg["do_sample"]:
        if cfg["temperature"] != 1.0:
            scores = temperature(scores, cfg["temperature"])
        if cfg["top_k"]:
            scores = top_k(scores, cfg["top_k"])
        if cfg["top_p"] < 1.0:
            scores = top_p(scores, cfg["top_p"])
        if cfg["min_p"] > 0:
            scores = min_p(scores, cfg["min_p"])
    return scores


# ---- the cases ------------------------------------------------------------------------------

def config(**kw):
    cfg = dict(do_sample=False, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
               no_repeat_ngram_size=0, bad_words_ids=[], min_length=0, min_new_tokens=0, eos_token_id=[2, 3])
    cfg.update(kw)
    return cfg


def random_case(gen, name, cfg, B=3, V=64, L=12, prompt_len=8, levels=0, spread=3.0, vocab_ids=None):
    n_ids = vocab_ids or V
    input_ids = torch.randint(0, n_ids, (B, L), generator=gen)
    input_ids[0, :2] = 0  # left pads (pad id 0) count for the penalties like any id
    scores = torch.randn(B, V, generator=gen) * spread
    if levels:
        scores = torch.round(scores * levels) / levels  # forced ties
    scores = scores.float()
    out = process(cfg, input_ids, prompt_len, scores.clone())
    expected = [[None if v == NEG_INF else v for v in row] for row in out.tolist()]
    case = dict(name=name, V=V, prompt_len=prompt_len, config=cfg, input_ids=input_ids.tolist(),
                scores=scores.tolist(), expected=expected)
    if not cfg["do_sample"]:
        case["greedy_ids"] = torch.argmax(out, dim=-1).tolist()
    return case


def cases():
    gen = torch.Generator().manual_seed(20240611)
    out = []
    add = lambda *a, **kw: out.append(random_case(gen, *a, **kw))
    # history-dependent processors (greedy rows: temperature and filters ignored)
    add("repetition_penalty_1.3", config(repetition_penalty=1.3, temperature=0.5, top_k=3), V=16, L=20)
    add("repetition_penalty_0.7", config(repetition_penalty=0.7), V=16, L=20)
    add("no_repeat_ngram_1", config(no_repeat_ngram_size=1), V=12, L=5, prompt_len=3)
    add("no_repeat_ngram_2", config(no_repeat_ngram_size=2), V=6, L=24)
    add("no_repeat_ngram_3", config(no_repeat_ngram_size=3), V=6, L=24, vocab_ids=3)
    add("no_repeat_ngram_too_short", config(no_repeat_ngram_size=5), V=6, L=3, prompt_len=2)
    add("bad_words", config(bad_words_ids=[[5], [2], [1, 4], [3, 3, 7], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]]),
        V=10, L=12, vocab_ids=5)
    add("bad_words_longer_than_history", config(bad_words_ids=[[0, 0, 4], [0, 1]]), V=10, L=2, prompt_len=2,
        vocab_ids=2)
    add("min_length_active", config(min_length=13), V=8, L=12)
    add("min_length_reached", config(min_length=12), V=8, L=12)
    add("min_new_tokens_active", config(min_new_tokens=5), V=8, L=12, prompt_len=8)
    add("min_new_tokens_reached", config(min_new_tokens=4), V=8, L=12, prompt_len=8)
    add("greedy_ties", config(repetition_penalty=1.1), V=32, levels=1)
    # sampling warpers
    add("temperature_0.7", config(do_sample=True, temperature=0.7), V=32)
    add("top_k_ties", config(do_sample=True, top_k=5), V=40, levels=1)
    add("top_k_over_vocab", config(do_sample=True, top_k=100), V=40)
    add("top_p_0.9", config(do_sample=True, top_p=0.9), V=64)
    add("top_p_ties", config(do_sample=True, top_p=0.6), V=64, levels=1, spread=1.0)
    add("top_p_tiny", config(do_sample=True, top_p=0.01), V=64)
    add("min_p_0.1", config(do_sample=True, min_p=0.1), V=64)
    add("min_p_ties", config(do_sample=True, min_p=0.3), V=64, levels=2)
    add("qwen3_thinking", config(do_sample=True, temperature=0.6, top_k=20, top_p=0.95), V=256)
    add("qwen3_non_thinking", config(do_sample=True, temperature=0.7, top_k=20, top_p=0.8), V=256, levels=4)
    add("everything", config(do_sample=True, temperature=0.8, top_k=30, top_p=0.85, min_p=0.05,
                             repetition_penalty=1.2, no_repeat_ngram_size=2, bad_words_ids=[[7], [1, 9]],
                             min_new_tokens=6), V=48, L=14, prompt_len=9, levels=2, vocab_ids=12)
    add("everything_flat", config(do_sample=True, temperature=1.3, top_p=0.7, min_p=0.02, repetition_penalty=0.9,
                                  no_repeat_ngram_size=3, min_length=20), V=512, L=16, spread=1.0)
    return out


def main():
    doc = dict(
        about="HF logits processors (scripts/ref_sampler.py): scores in, processed scores out; null = -inf",
        cases=cases())
    json.dump(doc, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
