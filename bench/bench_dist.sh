# bench_dist.sh: data-parallel SFT on this machine: 1 rank x 1 thread (B rows per micro-batch) vs
# 2 ranks x 1 thread (B/2 rows each: the same global batch and data), tokens/s and the parallel
# efficiency (2-rank tokens/s over twice the 1-rank tokens/s), ZeRO-0 and ZeRO-1, on the small
# bench model (bench/configs/bench_small.json) with fixed-length random rows.
set -euo pipefail
source bench/common.sh
source tests/mpi_env.sh
B=${B:-8} T=${T:-256} STEPS=${STEPS:-20}
BIN=${STILL_BIN:-./still}
make -s still >&2
mpi_available "$BIN" || { echo "bench_dist: this build has no MPI" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BIN" init --model_config bench/configs/bench_small.json --output_dir "$tmp/m" --seed 1 2>/dev/null
/usr/bin/python3 - "$tmp/data.jsonl" "$B" "$T" "$STEPS" <<'PY'
import json, random, sys
path, B, T, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(1)
with open(path, "w") as f:
    for _ in range(B * steps):
        f.write(json.dumps({"input_ids": [r.randrange(8192) for _ in range(T)]}) + "\n")
PY
C="--model $tmp/m --dataset $tmp/data.jsonl --max_steps $STEPS --shuffle false --threads 1 \
   --pad_to_multiple_of 1 --max_length $T --logging_steps 1000 --save_strategy no --learning_rate 1e-4"
j() { echo "$1" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
one=$("$BIN" sft $C --per_device_train_batch_size "$B" --output_dir "$tmp/o1" 2>/dev/null)
echo "1 rank: $one" >&2
header="| date | machine | command | 1 rank x 1 thread tok/s | 2 ranks x 1 thread tok/s | efficiency | ZeRO | BLAS |
|---|---|---|---|---|---|---|---|"
for z in 0 1; do
  two=$(mpirun $MPI_FLAGS -np 2 "$BIN" sft $C --per_device_train_batch_size $((B / 2)) --zero_stage $z \
        --output_dir "$tmp/o2_$z" 2>/dev/null)
  echo "2 ranks (ZeRO-$z): $two" >&2
  t1=$(j "$one" tokens_per_second) t2=$(j "$two" tokens_per_second) load=$(cut -d' ' -f1 /proc/loadavg)
  eff=$(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.2f", b / (2 * a)}')
  row="| $(date -u +%Y-%m-%d) | $(machine), $(getconf _NPROCESSORS_ONLN) cores shared | \`bench/bench_dist.sh\` (small model, global B=$B, T=$T, $STEPS steps) | $t1 | $t2 | $eff | $z | OpenBLAS-openmp, OMP_NUM_THREADS=1 per rank |"
  append_row "dist: data-parallel SFT, 1 rank vs 2 ranks (1 thread each)" "$header" "$row"
  echo "$row"
done
