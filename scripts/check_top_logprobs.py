#!/usr/bin/env python3
"""check_top_logprobs.py STILL MODEL DIR: the log-probabilities `still serve` answered (DIR/chat.json,
DIR/chat.sse, DIR/compl.json, written by tests/e2e/serve_logprobs.sh) against an independent
computation: `still logits` of the whole context at each step (a fresh forward, no KV cache, no
server), log_softmax(logits / T) in float64 here, the likeliest ids decoded by `still tokenize`.
Prints ok / FAIL lines. Uses only the standard library."""
import json
import math
import subprocess
import sys

still, model, d = sys.argv[1:4]
failed = 0


def check(name, cond, detail=""):
    global failed
    if cond:
        print(f"ok {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def run(args, stdin=None):
    r = subprocess.run([still] + args, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL {args[0]}: {r.stderr.strip()[-300:]}")
    return r.stdout


def encode(text, special):
    out = run(["tokenize", "--model", model, "--add_special_tokens", "true" if special else "false"], text)
    return [int(x) for x in out.split()]


def decode_each(ids):
    out = run(["tokenize", "--model", model, "--decode", "--jsonl"], "".join(json.dumps([i]) + "\n" for i in ids))
    return [json.loads(line) for line in out.splitlines()]


def log_softmax_last(ids, temperature):
    out = run(["logits", "--model", model, "--threads", "1", "--ids", " ".join(map(str, ids))])
    z = [float(x) / temperature for x in out.split()]
    m = max(z)
    lse = m + math.log(sum(math.exp(v - m) for v in z))
    return [v - lse for v in z]


def expect(name, context, chosen_ids, got_tokens, got_lps, got_tops, temperature, k):
    """got_tops[t]: list of (text, logprob) the server gave for step t, likeliest first."""
    worst, bad = 0.0, []
    ctx = list(context)
    for t, cid in enumerate(chosen_ids):
        lp = log_softmax_last(ctx, temperature)
        order = sorted(range(len(lp)), key=lambda i: (-lp[i], i))[:k]
        texts = decode_each(order + [cid])
        if got_tokens[t] != texts[-1]:
            bad.append(f"step {t}: token {got_tokens[t]!r} vs {texts[-1]!r}")
        worst = max(worst, abs(got_lps[t] - lp[cid]))
        want = list(zip(texts[:k], [lp[i] for i in order]))
        if [w[0] for w in want] != [g[0] for g in got_tops[t]]:
            bad.append(f"step {t}: alternatives {[g[0] for g in got_tops[t]]} vs {[w[0] for w in want]}")
        else:
            worst = max([worst] + [abs(a[1] - b[1]) for a, b in zip(want, got_tops[t])])
        ctx.append(cid)
    check(name, not bad and worst < 1e-4, f"{bad[:2]} worst |diff| {worst:.3g}")


# chat, greedy (temperature 1 for the log-probs): the chosen ids are the argmax of each step
chat = json.load(open(f"{d}/chat.json"))
content = chat["choices"][0]["logprobs"]["content"]
prompt = encode(open(f"{d}/chat_prompt.txt").read(), False)
ctx, chosen = list(prompt), []
for _ in content:
    lp = log_softmax_last(ctx, 1.0)
    chosen.append(max(range(len(lp)), key=lambda i: (lp[i], -i)))
    ctx.append(chosen[-1])
check("chat_logprobs_shape", len(content) == 4 and all(
    len(c["top_logprobs"]) == 5 and bytes(c["bytes"]).decode("utf-8", "replace") == c["token"]
    and all(bytes(a["bytes"]).decode("utf-8", "replace") == a["token"] for a in c["top_logprobs"]) for c in content),
    json.dumps(content[:1])[:300])
expect("chat_top_logprobs_match_logits", prompt, chosen, [c["token"] for c in content], [c["logprob"] for c in content],
       [[(a["token"], a["logprob"]) for a in c["top_logprobs"]] for c in content], 1.0, 5)

# the same request streamed: the same entries, one chunk per token
streamed = []
for line in open(f"{d}/chat.sse"):
    if line.startswith("data: {"):
        ch = json.loads(line[6:])["choices"]
        if ch and ch[0].get("logprobs"):
            streamed += ch[0]["logprobs"]["content"]
# (the stream's prompt may come from the first request's cache: the same values to roundings)
def flat(entries):
    return [(e["token"], e["logprob"], [(a["token"], a["logprob"]) for a in e["top_logprobs"]]) for e in entries]


same = len(streamed) == len(content) and all(
    a[0] == b[0] and abs(a[1] - b[1]) < 1e-5 and [x[0] for x in a[2]] == [x[0] for x in b[2]]
    and all(abs(x[1] - y[1]) < 1e-5 for x, y in zip(a[2], b[2])) for a, b in zip(flat(streamed), flat(content)))
check("chat_stream_top_logprobs", same, f"{json.dumps(streamed)[:200]} vs {json.dumps(content)[:200]}")

# completions, sampled at temperature 0.7 with a seed: the chosen ids are `still generate`'s for that seed
compl = json.load(open(f"{d}/compl.json"))
lpc = compl["choices"][0]["logprobs"]
prompt = encode("Once upon a time", True)
gen = run(["generate", "--model", model, "--threads", "1", "--prompt", "Once upon a time", "--max_new_tokens", "3",
           "--do_sample", "true", "--temperature", "0.7", "--seed", "5", "--ignore_eos", "true", "--print_ids", "true"])
chosen = [int(x) for x in gen.strip().splitlines()[-1].split()]
tops = [sorted(o.items(), key=lambda kv: -kv[1]) for o in lpc["top_logprobs"]]
check("completion_logprobs_shape", len(lpc["tokens"]) == 3 and all(len(o) == 3 for o in lpc["top_logprobs"]),
      json.dumps(lpc)[:300])
expect("completion_top_logprobs_match_logits", prompt, chosen, lpc["tokens"], lpc["token_logprobs"], tops, 0.7, 3)
sys.exit(1 if failed else 0)
