#!/usr/bin/env bash
# bench_tp.sh: tensor-parallel SFT on CPU ranks (docs/distributed.md): the same run on 1 rank x 2
# threads and on 2 ranks x 1 thread with --tp_size 2 (each rank half the heads, MLP columns and
# vocabulary), step time, tokens/s and each rank's peak RSS (/usr/bin/time; every rank reads the
# whole checkpoint before it keeps its part, so the peak holds the load too), on a 4-layer
# Qwen3-shaped model (bench/configs/tp_bench.json: C 1024, MLP 3072, 16/8 heads, vocabulary 32768)
# with fixed-length random rows. Run on a quiet machine.
set -euo pipefail
source bench/common.sh
source tests/mpi_env.sh
B=${B:-4} T=${T:-256} STEPS=${STEPS:-6}
BIN=${STILL_BIN:-./still}
make -s still >&2
mpi_available "$BIN" || { echo "bench_tp: this build has no MPI" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BIN" init --model_config bench/configs/tp_bench.json --output_dir "$tmp/m" --seed 1 2>/dev/null
/usr/bin/python3 - "$tmp/data.jsonl" "$B" "$T" "$STEPS" <<'PY'
import json, random, sys
path, B, T, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(1)
with open(path, "w") as f:
    for _ in range(B * steps):
        f.write(json.dumps({"input_ids": [r.randrange(32768) for _ in range(T)]}) + "\n")
PY
C="--model $tmp/m --dataset $tmp/data.jsonl --max_steps $STEPS --shuffle false --pad_to_multiple_of 1 --max_length $T \
   --logging_steps 1000 --save_strategy no --learning_rate 1e-4 --per_device_train_batch_size $B \
   --gradient_checkpointing false"
j() { echo "$1" | /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$2'])"; }
rss() { grep -o 'maxrss [0-9]*' "$1" | awk '{printf "%s%.0f", (NR > 1 ? " / " : ""), $2 / 1024}'; }
one=$(OMP_NUM_THREADS=2 /usr/bin/time -f "maxrss %M" "$BIN" sft $C --threads 2 --output_dir "$tmp/o1" 2>"$tmp/e1")
two=$(mpirun $MPI_FLAGS -np 2 /usr/bin/time -f "maxrss %M" "$BIN" sft $C --threads 1 --tp_size 2 --output_dir "$tmp/o2" \
      2>"$tmp/e2")
echo "1 rank: $one" >&2
echo "2 ranks TP=2: $two" >&2
t1=$(printf '%.1f' "$(j "$one" tokens_per_second)") t2=$(printf '%.1f' "$(j "$two" tokens_per_second)")
s1=$(awk -v t="$t1" -v n=$((B * T)) 'BEGIN{printf "%.3f", n / t}') s2=$(awk -v t="$t2" -v n=$((B * T)) 'BEGIN{printf "%.3f", n / t}')
header="| date | machine | command | 1 rank x 2 threads: s/step, tok/s, peak RSS MiB | 2 ranks x 1 thread, --tp_size 2: s/step, tok/s, peak RSS MiB per rank | BLAS |
|---|---|---|---|---|---|"
row="| $(date -u +%Y-%m-%d) | $(machine) | \`bench/bench_tp.sh\` (4-layer C 1024 model, B=$B, T=$T, $STEPS steps) | $s1, $t1, $(rss "$tmp/e1") | $s2, $t2, $(rss "$tmp/e2") | OpenBLAS-openmp |"
append_row "tp: tensor-parallel SFT on CPU ranks, TP=2 vs 1 (bench_tp.sh)" "$header" "$row"
echo "$row"
