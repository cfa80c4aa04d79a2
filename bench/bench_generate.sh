# bench_generate.sh: generation on the static KV cache for a Qwen3-0.6B-shaped model (random
# weights): prefill and decode tokens/s at batch 1 and 8, fp32 and bf16 weight storage, 2 threads,
# beside PyTorch running the same greedy loop with a KV cache, and batch-1 decode as GB/s of weight
# traffic against the read bandwidth measured in the same run.
set -euo pipefail
source bench/common.sh
P=${P:-128} NEW=${NEW:-32} THREADS=${THREADS:-2}
CFG=bench/configs/qwen3_0.6b.json
make -s "$BUILD/bench/gen_bench" >&2
ours=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/gen_bench" $CFG "$P" "$NEW" f32,bf16 1,8)
theirs=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_gen_bench.py $CFG "$P" "$NEW" "$THREADS" f32,bf16 1,8)
echo "still: $ours" >&2
echo "torch: $theirs" >&2
get() {  # json, dtype, batch, field
  /usr/bin/python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(next(r['$4'] for r in d['runs'] if r['dtype']=='$2' and r['batch']==$3))" "$1"
}
bw=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['read_gbs_best'])" "$ours")  # best of before / after
tv=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['torch'])" "$theirs")
header="| date | machine | command | dtype | B | still prefill tok/s | torch prefill tok/s | still decode tok/s | torch decode tok/s | B=1 weight GB/s (of read GB/s) | BLAS |
|---|---|---|---|---|---|---|---|---|---|---|"
for dt in f32 bf16; do
  for B in 1 8; do
    gbs="—"
    if [ "$B" = 1 ]; then
      g=$(get "$ours" $dt 1 weight_gbs)
      gbs="$g of $bw ($(awk -v a="$g" -v b="$bw" 'BEGIN{printf "%.0f", 100*a/b}')%)"
    fi
    row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_generate.sh\` (P=$P, $NEW new tokens) | $dt | $B | $(get "$ours" $dt $B prefill_tok_s) | $(printf %.1f "$(get "$theirs" $dt $B prefill_tok_s)") | $(get "$ours" $dt $B decode_tok_s) | $(printf %.2f "$(get "$theirs" $dt $B decode_tok_s)") | $gbs | still: OpenBLAS-openmp; torch $tv: $(torch_blas) |"
    append_row "generate: Qwen3-0.6B shape, static KV cache" "$header" "$row"
    echo "$row"
  done
done
