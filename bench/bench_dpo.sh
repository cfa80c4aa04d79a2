#!/usr/bin/env bash
# bench_dpo.sh: DPO steps on the 103M bench model (bench/configs/bench103m.json, random fp32 weights
# from `still init`) at PAIRS pairs per step, each row PROMPT + COMPLETION tokens (default 4 x
# (512 chosen + 512 rejected): prompt 128 + completion 384 per row), sigmoid loss, the reference a
# frozen fp32 copy; beside a PyTorch DPO step as TRL takes it (bench/torch_dpo_bench.py: full logits,
# a deep-copied reference) in the same run. tokens/s counts both rows of every pair (TRL's
# num_tokens); peak RSS of each process. Appends a row to bench/RESULTS.md.
# Tiny check: CFG=bench/configs/bench_small.json PAIRS=2 PROMPT=8 COMPLETION=8 STEPS=1 bench/bench_dpo.sh
set -euo pipefail
source bench/common.sh
THREADS=${THREADS:-2} STEPS=${STEPS:-2} PAIRS=${PAIRS:-4} PROMPT=${PROMPT:-128} COMPLETION=${COMPLETION:-384}
CFG=${CFG:-bench/configs/bench103m.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s still >&2
./still init --model_config $CFG --output_dir "$tmp/m" 2>/dev/null
/usr/bin/python3 - "$tmp/pairs.jsonl" $(( (STEPS + 1) * PAIRS )) $PROMPT $COMPLETION $CFG <<'PY'
import json, random, sys
random.seed(0)
n, P, C = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
V = json.load(open(sys.argv[5]))["vocab_size"]
with open(sys.argv[1], "w") as f:
    for _ in range(n):
        t = lambda k: [random.randrange(3, V) for _ in range(k)]
        f.write(json.dumps({"prompt_ids": t(P), "chosen_ids": t(C), "rejected_ids": t(C)}) + "\n")
PY
T=$((PROMPT + COMPLETION))
# STEPS + 1 steps: the first builds the plans; tokens/s is the run's (train_seconds - saving)
OMP_NUM_THREADS=$THREADS /usr/bin/time -v ./still dpo --model "$tmp/m" --dataset "$tmp/pairs.jsonl" --shuffle false \
  --per_device_train_batch_size $PAIRS --max_length $T --pad_to_multiple_of 128 --max_steps $((STEPS + 1)) \
  --save_strategy no --logging_steps 1 --threads "$THREADS" --output_dir "$tmp/out" >"$tmp/still.out" 2>"$tmp/still.err" \
  || { tail -5 "$tmp/still.err" >&2; exit 1; }
tok=$(grep -o '"tokens_per_second": *[0-9.e+]*' "$tmp/still.out" | sed 's/.*: *//')
rss=$(awk '/Maximum resident set size/ {printf "%.0f", $6 / 1024}' "$tmp/still.err")
torch=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_dpo_bench.py $CFG $PAIRS $PROMPT $COMPLETION $THREADS $STEPS)
j() { echo "$1" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_dpo.sh\` ($(basename $CFG), $PAIRS x ($T + $T)) | $tok | $(j "$torch" tok_s) | $(awk -v a="$tok" -v b="$(j "$torch" tok_s)" 'BEGIN{printf "%.2f", a/b}') | $rss / $(j "$torch" peak_rss_mib) | still: OpenBLAS-openmp; torch $(j "$torch" torch): $(torch_blas) |"
header="| date | machine | command | still tok/s | torch tok/s | still / torch | peak RSS MiB still / torch | BLAS |
|---|---|---|---|---|---|---|---|"
append_row "dpo: one step (policy + frozen reference, sigmoid loss), 103M bench model" "$header" "$row"
echo "$row"
