# bench_memory.sh: peak RSS (VmHWM, --report_memory) of still generate and still sft against what
# `still info` predicts for the same flags, at the Qwen3-0.6B shape (bf16 file) and the 103M bench
# shape (fp32 file), random weights: generate B=1 (prompt 128 slots + NEW tokens), sft B=1 T=128
# without and with a checkpoint every step (the newest kept: 8.3 GB of disk at 0.6B); then the load time of the 0.6B model stored as fp32
# (first forward included: every weight page read) against reading its file cold with cat, both
# after dropping the file from the page cache (posix_fadvise DONTNEED, no root needed).
# ONLY=load runs only the load-time row. CONFIGS="a.json b.json" replaces the two shapes (a check at tiny sizes); WORK keeps the models
# (at the default shapes 4 GB of models, and about 9.5 GB of memory for the 0.6B training run).
set -euo pipefail
source bench/common.sh
THREADS=${THREADS:-2} NEW=${NEW:-32} STEPS=${STEPS:-2}
CONFIGS=${CONFIGS:-"bench/configs/qwen3_0.6b.json bench/configs/bench103m.json"}
WORK=${WORK:-/tmp/still-bench-memory}
mkdir -p "$WORK"
make -s still >&2
STILL=./still
peak_mib() { sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' "$1" | tail -1; }
predict() {  # info line prefix, info flags...
  local what=$1; shift
  "$STILL" info "$@" --threads "$THREADS" | grep "^peak RSS  *$what" | sed 's/.*threads: \([0-9.]*\) MiB.*/\1/'
}
pct() { awk -v p="$1" -v m="$2" 'BEGIN { printf "%+.1f%%", 100 * (p - m) / m }'; }
drop_cache() {  # the file's pages out of the page cache
  /usr/bin/python3 -c "
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)" "$1"
}
header="| date | machine | command | shape | run | predicted MiB | measured MiB | error |
|---|---|---|---|---|---|---|---|"
ids=$(seq -s ' ' 5 124)  # 120 tokens: one prompt of 128 slots
row() {  # shape, run, predicted, measured
  local r="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_memory.sh\` | $1 | $2 | $3 | $4 | $(pct "$3" "$4") |"
  append_row "memory: still info's predicted peak RSS vs VmHWM" "$header" "$r"
  echo "$r"
}
[ "${ONLY:-}" = load ] || for cfg in $CONFIGS; do
  name=$(basename "$cfg" .json) m="$WORK/$name"
  [ -f "$m/model.safetensors" ] || "$STILL" init --model_config "$cfg" --output_dir "$m" >&2
  /usr/bin/python3 - "$cfg" "$WORK/$name.ids.jsonl" <<'PY'
import json, random, sys
V = json.load(open(sys.argv[1]))["vocab_size"]
random.seed(1)
with open(sys.argv[2], "w") as f:  # rows of exactly 128 tokens: one train plan of T = 128
    for _ in range(8): f.write(json.dumps({"input_ids": [random.randrange(3, V - 1) for _ in range(128)]}) + "\n")
PY
  "$STILL" generate --model "$m" --ids "$ids" --max_new_tokens "$NEW" --threads "$THREADS" --report_memory \
    >/dev/null 2>"$WORK/err"
  row "$name" "generate B=1, prompt 128 + $NEW" "$(predict generate --model "$m" --seq 128 --max_new_tokens "$NEW")" \
    "$(peak_mib "$WORK/err")"
  S="--dataset $WORK/$name.ids.jsonl --max_steps $STEPS --per_device_train_batch_size 1 --pad_to_multiple_of 128 --threads $THREADS"
  rm -rf "$WORK/out"
  "$STILL" sft --model "$m" $S --save_strategy no --output_dir "$WORK/out" --report_memory >/dev/null 2>"$WORK/err"
  nosave=$(peak_mib "$WORK/err")
  p=$(predict "sft B=1 T=128 with gradient" --model "$m" --seq 128)
  row "$name" "sft B=1 T=128, $STEPS steps" "$p" "$nosave"
  rm -rf "$WORK/out"
  "$STILL" sft --model "$m" $S --save_steps 1 --save_total_limit 1 --output_dir "$WORK/out" --report_memory >/dev/null 2>"$WORK/err"
  withsave=$(peak_mib "$WORK/err")
  row "$name" "sft B=1 T=128, a checkpoint every step ($(awk -v a="$withsave" -v b="$nosave" 'BEGIN { printf "%.3f", a / b }') x without)" \
    "$p" "$withsave"
  rm -rf "$WORK/out"
done

# load time: the first model of CONFIGS stored as fp32, used in place from the mapping
cfg=$(echo "$CONFIGS" | awk '{ print $1 }') name=$(basename "$cfg" .json)_f32
m="$WORK/$name"
[ -f "$m/model.safetensors" ] || "$STILL" init --model_config "$cfg" --output_dir "$m" --dtype float32 >&2
f="$m/model.safetensors"
drop_cache "$f"
t0=$(date +%s.%N); cat "$f" >/dev/null; t1=$(date +%s.%N)
drop_cache "$f"
t2=$(date +%s.%N)
"$STILL" logits --model "$m" --ids "1" --threads "$THREADS" >/dev/null 2>&1
t3=$(date +%s.%N)
cold=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
load=$(awk -v a="$t2" -v b="$t3" 'BEGIN { printf "%.2f", b - a }')
header2="| date | machine | command | model | file GB | cat cold s | still logits cold s (load + 1 token) | ratio |
|---|---|---|---|---|---|---|---|"
r="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_memory.sh\` | $name | $(awk -v s="$(stat -c %s "$f")" 'BEGIN { printf "%.2f", s / 1e9 }') | $cold | $load | $(awk -v a="$load" -v b="$cold" 'BEGIN { printf "%.2f", a / b }') |"
append_row "memory: load time of an fp32 model vs reading its file cold" "$header2" "$r"
echo "$r"
