# bench_moe.sh: batch-1 decode of a mixture of experts against a dense model of its active size
# (random weights, bf16 and q8_0 storage, the CPU backend). bench/configs/moe_8x.json is a
# qwen3_moe model (8 layers, C 1024, 64 experts of width 256, 4 per token) with about 8x more
# parameters in total (433M) than a token uses (55M); bench/configs/moe_dense_active.json is the
# same model with one dense MLP of width 4 x 256 = 1024 (55M). Decode reads only the experts a
# token routes to, so its tokens/s should follow the active size: the row records the MoE's
# decode tokens/s as a fraction of the dense model's (the target is >= 0.6).
#   bench/bench_moe.sh                      # P=32 prompt tokens, NEW=64 decoded, THREADS=2
# Run on a quiet machine: timing under load means nothing.
set -euo pipefail
source bench/common.sh
P=${P:-32} NEW=${NEW:-64} THREADS=${THREADS:-2} DTYPES=${DTYPES:-bf16,q8_0}
make -s BUILD="$BUILD" "$BUILD/bench/gen_bench" >&2
export OMP_NUM_THREADS=$THREADS

moe=$("$BUILD/bench/gen_bench" bench/configs/moe_8x.json "$P" "$NEW" "$DTYPES" 1)
dense=$("$BUILD/bench/gen_bench" bench/configs/moe_dense_active.json "$P" "$NEW" "$DTYPES" 1)
echo "moe:   $moe" >&2
echo "dense: $dense" >&2

get() {  # json, dtype, field
  /usr/bin/python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(next(r['$3'] for r in d['runs'] if r['dtype']=='$2' and r['batch']==1))" "$1"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else printf "—" }'; }
bw=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['read_gbs_best'])" "$moe")
IFS=, read -ra dts <<<"$DTYPES"
for dt in "${dts[@]}"; do
  m=$(get "$moe" "$dt" decode_tok_s) d=$(get "$dense" "$dt" decode_tok_s)
  row="| $(date +%F) | $dt | $THREADS | $P / $NEW | $m | $d | $(ratio "$m" "$d") | $bw | $(machine) |"
  echo "$row"
  append_row "MoE decode (bench_moe.sh)" \
    "| date | weights | threads | prompt / new | MoE 433M (55M active) decode tok/s | dense 55M decode tok/s | MoE / dense | read GB/s | machine |
|---|---|---|---|---|---|---|---|---|" "$row"
done
