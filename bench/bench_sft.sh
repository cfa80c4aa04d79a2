# bench_sft.sh: SFT training tokens/s and peak RSS on the ~103M bench model at batch 4 x 512 of
# packed rows (forward, backward, clipping, AdamW), still beside PyTorch doing the same step in the
# same run; then 50 steps of variable-length data (16..400 tokens, batch 4) on a small model
# (bench/configs/bench_small.json) padded to multiples of 128 vs 1: plans built and wall time.
set -euo pipefail
source bench/common.sh
B=${B:-4} T=${T:-512} THREADS=${THREADS:-2} STEPS=${STEPS:-2}
make -s "$BUILD/bench/sft_bench" >&2
ours=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/sft_bench" bench/configs/bench103m.json packed "$B" "$T" "$STEPS" 2>/dev/null)
theirs=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_sft_bench.py bench/configs/bench103m.json "$B" "$T" "$THREADS" "$STEPS")
echo "still: $ours" >&2
echo "torch: $theirs" >&2
j() { echo "$1" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
ratio=$(awk -v a="$(j "$ours" tok_s)" -v b="$(j "$theirs" tok_s)" 'BEGIN{printf "%.2f", a/b}')
row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_sft.sh\` (B=$B T=$T packed, $STEPS steps) | $(j "$ours" tok_s) | $(j "$theirs" tok_s) | $ratio | $(j "$ours" peak_rss_mib) | $(j "$theirs" peak_rss_mib) | still: OpenBLAS-openmp; torch $(j "$theirs" torch): $(torch_blas) |"
header="| date | machine | command | still SFT tok/s | torch SFT tok/s | ratio | still peak RSS MiB | torch peak RSS MiB | BLAS |
|---|---|---|---|---|---|---|---|---|"
append_row "sft: training step (forward, backward, AdamW), 103M bench model" "$header" "$row"
echo "$row"
a=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/sft_bench" bench/configs/bench_small.json varlen "$B" 128 50 2>/dev/null)
b=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/sft_bench" bench/configs/bench_small.json varlen "$B" 1 50 2>/dev/null)
echo "pad 128: $a" >&2
echo "pad 1: $b" >&2
row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_sft.sh\` (small model, B=$B, 50 steps, lengths 16..400) | $(j "$a" plans) | $(j "$a" wall_s) | $(j "$a" plan_mib) | $(j "$b" plans) | $(j "$b" wall_s) | $(j "$b" plan_mib) |"
header="| date | machine | command | plans (pad 128) | wall s (pad 128) | plan MiB (pad 128) | plans (pad 1) | wall s (pad 1) | plan MiB (pad 1) |
|---|---|---|---|---|---|---|---|---|"
append_row "sft: pad_to_multiple_of 128 vs 1 on variable-length data" "$header" "$row"
echo "$row"
