#!/usr/bin/env bash
# bench_grpo.sh: one GRPO optimizer step on the ~103M bench model (bench/configs/bench103m.json,
# random weights, the Qwen3 tokenizer): 8 prompts x 8 generations x 128 completion tokens
# (--min_new_tokens is not a GRPO flag: a random model almost never samples EOS, so every
# completion runs the full 128 tokens), trained as 8 micro-batches of 8 completions. Reports the
# generation and the training time of the step (metrics.jsonl: time/generation, time/training).
set -euo pipefail
source bench/common.sh
THREADS=${THREADS:-2} C=${C:-128} NP=${NP:-8} G=${G:-8} B=${B:-8}
make -s still >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tok"
gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >"$tmp/tok/tokenizer.json"
cp tests/data/tokenizer/qwen3/tokenizer_config.json "$tmp/tok/"
./still init --model_config bench/configs/bench103m.json --tokenizer "$tmp/tok" --output_dir "$tmp/m" --seed 1 2>/dev/null
for i in $(seq 1 "$NP"); do
  echo "{\"prompt\": \"Question $i: what is $i times $((i + 3))? Think step by step, then give the answer.\", \"answer\": $((i * (i + 3)))}"
done >"$tmp/p.jsonl"
GA=$((NP * G / B))
t0=$(date +%s.%N)
OMP_NUM_THREADS=$THREADS ./still grpo --model "$tmp/m" --dataset "$tmp/p.jsonl" --output_dir "$tmp/o" \
  --reward exact_match:answer --num_generations "$G" --max_completion_length "$C" --per_device_train_batch_size "$B" \
  --gradient_accumulation_steps "$GA" --max_steps 1 --logging_steps 1 --save_strategy no --threads "$THREADS" >&2
t1=$(date +%s.%N)
m=$(tail -1 "$tmp/o/metrics.jsonl")
j() { echo "$m" | /usr/bin/python3 -c "import json,sys; print('%.1f' % json.load(sys.stdin)['$1'])"; }
gen=$(j time/generation) train=$(j time/training) len=$(j completions/mean_length)
toks=$((NP * G * C))
row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_grpo.sh\` ($NP prompts x $G generations x $C tokens, $GA x $B micro-batches) | $gen | $train | $(awk -v t="$toks" -v g="$gen" 'BEGIN{printf "%.0f", t/g}') | $(awk -v t="$toks" -v g="$train" 'BEGIN{printf "%.0f", t/g}') | $len | $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b-a}') |"
header="| date | machine | command | generation s | training s | generated tok/s | trained completion tok/s | mean completion length | wall s |
|---|---|---|---|---|---|---|---|---|"
append_row "grpo: one step, 103M bench model" "$header" "$row"
echo "$row"
