# bench_serve.sh: still serve under 1, 4 and 16 concurrent streaming chat clients (the `openai`
# npm package, bench/serve_bench.mjs) on random-weight models of the 103M bench shape and the
# Qwen3-0.6B shape with Qwen3's tokenizer: requests/s, aggregate generated tokens/s, time to first
# token, per-request decode tokens/s, and the aggregate at the most clients over one client's.
#   CONFIGS  model configs (bench/configs/bench103m.json bench/configs/qwen3_0.6b.json)
#   CLIENTS  concurrent clients (1 4 16)     RUN_SECONDS  per run (60)     THREADS  (2)
#   WORDS    prompt words (64)               NEW      tokens per answer (64)
#   MAX_BATCH  decode slots (16)
set -euo pipefail
source bench/common.sh
CONFIGS=${CONFIGS:-bench/configs/bench103m.json bench/configs/qwen3_0.6b.json}
# RUN_SECONDS, not SECONDS: bash sets SECONDS itself (the seconds since the shell started)
CLIENTS=${CLIENTS:-1 4 16} SECONDS_RUN=${RUN_SECONDS:-60} THREADS=${THREADS:-2} WORDS=${WORDS:-64} NEW=${NEW:-64}
MAX_BATCH=${MAX_BATCH:-16}
make -s still >&2
nm=$(scripts/npm_clients.sh --node-modules)
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tok"
gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >"$tmp/tok/tokenizer.json"
cp tests/data/tokenizer/qwen3/tokenizer_config.json "$tmp/tok/"
header="| date | machine | command | model | clients | requests/s | tokens/s | TTFT ms mean / p50 / p90 | decode tok/s per request | vs 1 client |
|---|---|---|---|---|---|---|---|---|---|"
for cfg in $CONFIGS; do
  name=$(basename "$cfg" .json)
  ./still init --model_config "$cfg" --tokenizer "$tmp/tok" --output_dir "$tmp/$name" --seed 1 2>/dev/null
  rm -f "$tmp/port"
  OMP_NUM_THREADS=$THREADS ./still serve --model "$tmp/$name" --served_model_name bench --threads "$THREADS" \
    --port 0 --port_file "$tmp/port" --max_batch "$MAX_BATCH" --max_cache_len 1024 --log_level warning &
  pid=$!
  for _ in $(seq 1 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  url="http://127.0.0.1:$(cat "$tmp/port")/v1"
  one=
  for c in $CLIENTS; do
    r=$(node bench/serve_bench.mjs "$nm" "$url" "$c" "$SECONDS_RUN" "$WORDS" "$NEW")
    echo "$name: $r" >&2
    f() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['$1'])" "$r"; }
    tps=$(f tokens_per_s)
    [ -z "$one" ] && one=$tps
    row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_serve.sh\` (max_batch $MAX_BATCH, $WORDS-word prompts, $NEW tokens, ${SECONDS_RUN} s) | $name (random weights) | $c | $(f requests_per_s) | $tps | $(f ttft_ms_mean) / $(f ttft_ms_p50) / $(f ttft_ms_p90) | $(f decode_tok_s_per_request) | $(awk -v a="$tps" -v b="$one" 'BEGIN{printf "%.2fx", (b > 0 ? a / b : 0)}') |"
    append_row "serve: streaming clients, continuous batching" "$header" "$row"
    echo "$row"
  done
  kill -TERM $pid; wait $pid || true; pid=
done
