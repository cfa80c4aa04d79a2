#!/usr/bin/env bash
# bench_families.sh: decode and prefill tokens/s of the model families beside Qwen3 (random weights,
# the CPU backend, static KV cache): a Gemma-3-1B-shaped model (gemma3_text: 26 layers, C 1152,
# 4/1 heads of 256, GeGLU, sliding window 512 on five of every six layers, vocabulary 262144) and a
# Mistral-7B-shaped model cut to 4 layers (C 4096, 32/8 heads, MLP 14336, sliding window 4096,
# vocabulary 32000), in the same run as the Qwen3-0.6B shape.
#   bench/bench_families.sh                 # P=128 prompt tokens, NEW=32 decoded, bf16, THREADS=2
#   DTYPES=f32,bf16 bench/bench_families.sh
# Run on a quiet machine: timing under load means nothing.
set -euo pipefail
source bench/common.sh
P=${P:-128} NEW=${NEW:-32} THREADS=${THREADS:-2} DTYPES=${DTYPES:-bf16}
make -s BUILD="$BUILD" "$BUILD/bench/gen_bench" >&2
export OMP_NUM_THREADS=$THREADS

header="| date | model | weights | threads | prompt / new | prefill tok/s | decode B=1 tok/s | decode B=1 weight GB/s (of read GB/s) | machine |
|---|---|---|---|---|---|---|---|---|"
for m in qwen3_0.6b:Qwen3-0.6B gemma3_1b:Gemma-3-1B-shaped mistral_7b_4layer:Mistral-7B-shaped,4-layer; do
  cfg=bench/configs/${m%%:*}.json name=${m#*:}
  js=$("$BUILD/bench/gen_bench" "$cfg" "$P" "$NEW" "$DTYPES" 1)
  echo "$name: $js" >&2
  IFS=, read -ra dts <<<"$DTYPES"
  for dt in "${dts[@]}"; do
    row=$(/usr/bin/python3 - "$js" "$dt" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); r = next(x for x in d["runs"] if x["dtype"] == sys.argv[2] and x["batch"] == 1)
bw = d["read_gbs_best"]
print("%s|%s|%.2f of %.2f (%.0f%%)" % (r["prefill_tok_s"], r["decode_tok_s"], r["weight_gbs"], bw, 100 * r["weight_gbs"] / bw))
PY
)
    IFS='|' read -r pf dec gbs <<<"$row"
    line="| $(date -u +%F) | $name | $dt | $THREADS | $P / $NEW | $pf | $dec | $gbs | $(machine) |"
    echo "$line"
    append_row "generate: model families beside Qwen3 (bench_families.sh)" "$header" "$line"
  done
done
