#!/usr/bin/python3
"""Reference fixture for `still sft` evaluation: eval_loss, eval_mean_token_accuracy and
eval_entropy of the tiny qwen3_tied model on tests/data/sft/ids.jsonl, in float64 PyTorch, the way
transformers' Trainer.evaluation_loop and TRL's SFTTrainer compute them.

transformers (trainer.py, evaluation_loop): every eval batch's loss is the model's mean over that
batch's label tokens (prediction_step calls compute_loss without num_items_in_batch); it is
repeated eval_batch_size times (`losses.repeat(batch_size)`), gathered with gather_for_metrics,
which cuts the last batch to the dataset's remainder, and eval_loss = the mean of all of them: the
batch means weighted by the rows of each batch.
TRL (sft_trainer.py, compute_loss / log): per eval batch, entropy = sum of the per-token entropy over
label tokens / label tokens and mean_token_accuracy = correct argmax predictions / label tokens;
log() reports the plain mean of the per-batch values.
Datasets (TRL _prepare_dataset): no prompt/completion keys, so completion_only_loss is off and every
token is a label; with packing, eval is packed like training (eval_packing None) by best-fit
decreasing, else truncated to max_length. Packed documents are separate sequences (positions from 0)
and the first token of each is no target.
Writes tests/data/sft/eval.json. Run: /usr/bin/python3 scripts/ref_sft_eval.py [OUT_DIR]
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import ref_model  # noqa: E402
import ref_sft  # noqa: E402

torch.set_default_dtype(torch.float64)

CASES = {
    # eval batch size 3 over 8 rows: batches of 3, 3, 2 rows with different token counts
    "unpacked": dict(eval_batch=3, packing=None, eval_packing=None, max_length=64),
    # --packing: eval packed like training (bfd, 24 tokens a row), 2 rows a batch
    "packed": dict(eval_batch=2, packing="bfd", eval_packing=None, max_length=24),
    # --packing --eval_packing false: eval rows one example each, truncated to max_length
    "packing_eval_unpacked": dict(eval_batch=3, packing="bfd", eval_packing=False, max_length=12),
}


def eval_case(cfg, w, ex, c):
    docs = ref_sft.docs_of(ex, False)
    packed = c["packing"] is not None if c["eval_packing"] is None else c["eval_packing"]
    L = c["max_length"]
    rows = ref_sft.pack_bfd(docs, L) if packed else [[(i[:L], l[:L])] for i, l in docs]
    B = c["eval_batch"]
    losses, accs, ents = [], [], []
    for b0 in range(0, len(rows), B):
        batch = rows[b0:b0 + B]
        s = n = correct = ent = 0.0
        for row in batch:
            for ids, lab in row:
                if len(ids) < 2:
                    continue
                logits = ref_model.forward(cfg, w, ids)[:-1]
                tgt = torch.tensor(lab[1:])
                keep = tgt != -100
                lg, tg = logits[keep], tgt[keep]
                s += torch.nn.functional.cross_entropy(lg, tg, reduction="sum").item()
                n += int(keep.sum())
                correct += int((lg.argmax(-1) == tg).sum())
                logp = torch.log_softmax(lg, -1)
                ent += float(-(logp.exp() * logp).sum())
        # the batch mean, repeated eval_batch_size times; the last batch cut to the remainder
        losses += [s / n] * len(batch)
        accs.append(correct / n)
        ents.append(ent / n)
    return {"eval_loss": sum(losses) / len(losses), "eval_mean_token_accuracy": sum(accs) / len(accs),
            "eval_entropy": sum(ents) / len(ents), "eval_rows": len(rows)}


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "sft")
    mdir = os.path.join(root, "tests", "data", "models", ref_sft.MODEL)
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    w = ref_sft.read_safetensors(os.path.join(mdir, "model.safetensors"))
    w = {k: v.to(torch.float64) for k, v in w.items()}
    ex = [json.loads(line) for line in open(os.path.join(root, "tests", "data", "sft", "ids.jsonl"))]
    out = {"model": ref_sft.MODEL, "dataset": "tests/data/sft/ids.jsonl", "cases": {}}
    for name, c in CASES.items():
        r = eval_case(cfg, w, ex, c)
        out["cases"][name] = dict(c, **{k: (round(v, 12) if isinstance(v, float) else v) for k, v in r.items()})
        print(f"{name}: eval_loss {r['eval_loss']:.9f} accuracy {r['eval_mean_token_accuracy']:.6f} "
              f"entropy {r['eval_entropy']:.6f} rows {r['eval_rows']}")
    with open(os.path.join(out_dir, "eval.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
