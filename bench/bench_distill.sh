#!/usr/bin/env bash
# bench_distill.sh: one on-policy distillation step on CPU — student rollouts (generation), teacher
# scoring, student forward + loss head (student and teacher LM heads, chunk by chunk) + backward, AdamW — for the ~103M bench model
# (bench/configs/bench103m.json) as student and a ~206M teacher (bench/configs/bench_teacher206m.json),
# both `still init` with the Qwen3 tokenizer, B prompts x max_completion_length tokens. Each phase
# is timed from the step's metrics (time/generation_s, time/teacher_s, time/student_s; the update
# is the rest of the step). The machine is shared: the load average is recorded with the row.
set -euo pipefail
source bench/common.sh
B=${B:-4} C=${C:-64} THREADS=${THREADS:-2} TEACHER_DTYPE=${TEACHER_DTYPE:-float32}
make -s still >&2
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
mkdir -p "$w/tok"
gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >"$w/tok/tokenizer.json"
cp tests/data/tokenizer/qwen3/tokenizer_config.json "$w/tok/"
./still init --model_config bench/configs/bench103m.json --output_dir "$w/stu" --tokenizer "$w/tok" --seed 1 2>/dev/null
./still init --model_config bench/configs/bench_teacher206m.json --output_dir "$w/tea" --tokenizer "$w/tok" --seed 2 2>/dev/null
for i in $(seq 1 "$B"); do
  echo "{\"prompt\": [{\"role\": \"user\", \"content\": \"Question $i: what is the sum of $i and $((i * 7)), and why?\"}]}"
done >"$w/p.jsonl"
load0=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
OMP_NUM_THREADS=$THREADS ./still distill --model "$w/stu" --teacher "$w/tea" --teacher_dtype "$TEACHER_DTYPE" \
  --dataset "$w/p.jsonl" --output_dir "$w/out" --max_steps 1 --per_device_train_batch_size "$B" \
  --max_completion_length "$C" --save_strategy no --logging_steps 1 --threads "$THREADS" --seed 1 \
  >"$w/res.json" 2>"$w/log"
t1=$(date +%s.%N)
load1=$(cut -d' ' -f1 /proc/loadavg)
get() { grep -o "\"$1\": *[0-9.e+-]*" "$2" | head -1 | cut -d: -f2 | tr -d ' '; }
m="$w/out/metrics.jsonl"
gen=$(get time/generation_s "$m") tea=$(get time/teacher_s "$m") stu=$(get time/student_s "$m")
step=$(get train_seconds "$w/res.json") len=$(get completions/mean_length "$m")
upd=$(awk -v s="$step" -v a="$gen" -v b="$tea" -v c="$stu" 'BEGIN{printf "%.2f", s-a-b-c}')
gtok=$(get generation_tokens_per_second "$m") ttok=$(get train_tokens_per_second "$m")
f2() { awk -v x="$1" 'BEGIN{printf "%.2f", x}'; }
grep -E "plan [0-9]+ built|teacher" "$w/log" >&2 || true
row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads, load $load0 -> $load1 | \`bench/bench_distill.sh\` (B=$B, completion $C, mean length $len, teacher $TEACHER_DTYPE) | $(f2 "$gen") | $(f2 "$tea") | $(f2 "$stu") | $upd | $(f2 "$step") | $(f2 "$gtok") | $(f2 "$ttok") | OpenBLAS-openmp |"
header="| date | machine | command | generation s | teacher scoring s | student fwd+bwd s | update s | step s | gen tok/s | train tok/s | BLAS |
|---|---|---|---|---|---|---|---|---|---|---|"
append_row "distill: one step (rollouts, teacher scoring, update), 103M student / 206M teacher" "$header" "$row"
echo "$row"
echo "wall $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s for the distill command" >&2
