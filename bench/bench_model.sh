# bench_model.sh: forward tokens/s and forward+backward step time of the ~103M bench model
# (hidden 512, 8 layers, 8/4 heads, head_dim 64, MLP 1536, vocab 151936 tied) at batch 4 x 512,
# still (CPU backend, OpenBLAS-openmp) beside PyTorch on the same machine in the same run.
set -euo pipefail
source bench/common.sh
B=${B:-4} T=${T:-512} THREADS=${THREADS:-2}
make -s "$BUILD/bench/model_bench" >&2
ours=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/model_bench" bench/configs/bench103m.json "$B" "$T" 3)
theirs=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_model_bench.py bench/configs/bench103m.json "$B" "$T" "$THREADS")
echo "still: $ours" >&2
echo "torch: $theirs" >&2
j() { echo "$1" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
sf=$(j "$ours" step_tok_s); tf=$(j "$theirs" step_tok_s)
ff=$(j "$ours" forward_tok_s); tff=$(j "$theirs" forward_tok_s)
ratio=$(awk -v a="$sf" -v b="$tf" 'BEGIN{printf "%.2f", a/b}')
fratio=$(awk -v a="$ff" -v b="$tff" 'BEGIN{printf "%.2f", a/b}')
sg=$(j "$ours" step_gflops); mlp=$(j "$ours" sgemm_mlp_gflops); head=$(j "$ours" sgemm_head_gflops)
eff=$(awk -v a="$sg" -v b="$mlp" 'BEGIN{printf "%.0f", 100*a/b}')
row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`make bench\` (B=$B T=$T) | $ff | $tff | $fratio | $sf | $tf | $ratio | $sg | $mlp / $head | $eff% | still: OpenBLAS-openmp; torch $(j "$theirs" torch): $(torch_blas) |"
header="| date | machine | command | still fwd tok/s | torch fwd tok/s | fwd ratio | still train tok/s | torch train tok/s | train ratio | still train GFLOP/s | sgemm GFLOP/s (mlp / head shape) | of sgemm | BLAS |
|---|---|---|---|---|---|---|---|---|---|---|---|---|"
append_row "model core: forward and forward+backward, 103M bench model" "$header" "$row"
echo "$row"
