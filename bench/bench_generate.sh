# bench_generate.sh: generation on the static KV cache for a Qwen3-0.6B-shaped model (random
# weights), every row of the CPU inference table: decode tokens/s at batch 1 and 8 and prefill of
# 128 tokens with f32, bf16 and q8_0 weight storage, prefill of 16 tokens (pp16), and process
# start -> first token for a 5-token prompt (f32 checkpoint, warm page cache); beside PyTorch in
# the same run (f32 / bf16: it has no Q8_0), beside llama.cpp when LLAMA_CPP_DIR names a built
# llama.cpp (its llama-bench and llama-simple; nothing of it is fetched or built here) with GGUF
# files of the same shape in LLAMA_GGUF_F32 / LLAMA_GGUF_BF16 / LLAMA_GGUF_Q8_0, and batch-1
# decode as GB/s of weight traffic against the read bandwidth measured in the same run.
#   bench/bench_generate.sh                       # the full run: about 10 minutes on 2 cores
#   CFG=bench/configs/bench_small.json P=16 NEW=4 bench/bench_generate.sh   # a quick check
set -euo pipefail
source bench/common.sh
P=${P:-128} NEW=${NEW:-32} THREADS=${THREADS:-2} PP=${PP:-16}
CFG=${CFG:-bench/configs/qwen3_0.6b.json}
LLAMA_CPP_DIR=${LLAMA_CPP_DIR:-}
make -s BUILD="$BUILD" "$BUILD/bench/gen_bench" "$BUILD/still" >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$THREADS

ours=$("$BUILD/bench/gen_bench" "$CFG" "$P" "$NEW" f32,bf16,q8_0 1,8)
ours_pp=$("$BUILD/bench/gen_bench" "$CFG" "$PP" 2 f32 1)
theirs=$(/usr/bin/python3 bench/torch_gen_bench.py "$CFG" "$P" "$NEW" "$THREADS" f32,bf16 1,8)
theirs_pp=$(/usr/bin/python3 bench/torch_gen_bench.py "$CFG" "$PP" 2 "$THREADS" f32 1)
echo "still: $ours" >&2
echo "still pp$PP: $ours_pp" >&2
echo "torch: $theirs" >&2
echo "torch pp$PP: $theirs_pp" >&2

# process start -> first token: `still generate` on an f32 checkpoint (used in place from the
# mapping), one warm-up run for the page cache, then the best of 3.
GEN_BENCH_DIR="$tmp/m" GEN_BENCH_CKPT=f32 "$BUILD/bench/gen_bench" "$CFG" 8 1 f32 1 >/dev/null
best_wall() {  # command...: the best wall time of 3 runs after a warm-up, in seconds
  "$@" >/dev/null 2>&1
  local best=1e9
  for _ in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N)
    best=$(awk -v a="$best" -v b="$(awk -v x="$t0" -v y="$t1" 'BEGIN{print y-x}')" 'BEGIN{print (b<a)?b:a}')
  done
  printf '%.3f' "$best"
}
ttft=$(best_wall "$BUILD/still" generate --model "$tmp/m" --ids "1 2 3 4 5" --max_new_tokens 1 --ignore_eos --threads "$THREADS")

get() {  # json, dtype, batch, field
  /usr/bin/python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(next(r['$4'] for r in d['runs'] if r['dtype']=='$2' and r['batch']==$3))" "$1"
}
bw=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['read_gbs_best'])" "$ours")  # best of before / after
tv=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['torch'])" "$theirs")

# llama.cpp (optional): llama-bench's JSON (avg_ts of the pp / tg tests), llama-simple's wall time.
llama_bin() {  # name: the binary in LLAMA_CPP_DIR (build/bin, bin or the directory itself)
  local d
  for d in "$LLAMA_CPP_DIR/build/bin" "$LLAMA_CPP_DIR/bin" "$LLAMA_CPP_DIR"; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return; }
  done
}
declare -A LL
if [ -n "$LLAMA_CPP_DIR" ]; then
  lb=$(llama_bin llama-bench); ls_=$(llama_bin llama-simple)
  for dt in f32 bf16 q8_0; do
    var=LLAMA_GGUF_$(tr a-z A-Z <<<"$dt"); gguf=${!var:-}
    [ -n "$gguf" ] && [ -f "$gguf" ] && [ -n "$lb" ] || continue
    js=$("$lb" -m "$gguf" -t "$THREADS" -p "$P,$PP" -n 64 -o json 2>/dev/null || true)
    for k in "pp$P" "pp$PP" tg64; do
      LL[$dt.$k]=$(/usr/bin/python3 -c "
import json,sys
try: d=json.loads(sys.argv[1])
except Exception: d=[]
k=sys.argv[2]
v=[r['avg_ts'] for r in d if (k.startswith('pp') and r.get('n_prompt')==int(k[2:]) and r.get('n_gen')==0) or (k=='tg64' and r.get('n_gen')==64 and r.get('n_prompt')==0)]
print('%.2f'%v[0] if v else '—')" "$js" "$k")
    done
    if [ "$dt" = f32 ] && [ -n "$ls_" ]; then LL[ttft]=$(best_wall "$ls_" -m "$gguf" -n 1 "Hello world, this is"); fi
  done
  echo "llama.cpp: $(for k in "${!LL[@]}"; do printf '%s=%s ' "$k" "${LL[$k]}"; done)" >&2
fi
ll() { echo "${LL[$1]:-—}"; }
ratio() {  # ours, theirs (higher is better unless $3 = time)
  awk -v a="$1" -v b="$2" -v t="${3:-}" 'BEGIN{ if (a+0 > 0 && b+0 > 0) printf "%.2f", (t == "time") ? b/a : a/b; else printf "—" }'
}
f1() { [ "$1" = "—" ] && echo "—" || printf '%.1f' "$1"; }

header="| date | machine | command | row | still | torch | llama.cpp | still / llama.cpp | B=1 weight GB/s (of read GB/s) |
|---|---|---|---|---|---|---|---|---|"
cmd="\`bench/bench_generate.sh\` (P=$P, $NEW new tokens, $THREADS threads${LLAMA_CPP_DIR:+, LLAMA_CPP_DIR=$LLAMA_CPP_DIR})"
emit() {  # row, still, torch, llama, unit-kind, gbs
  local row="| $(date -u +%Y-%m-%d) | $(machine), torch $tv: $(torch_blas) | $cmd | $1 | $2 | $3 | $4 | $(ratio "$2" "$4" "$5") | $6 |"
  append_row "generate: CPU inference rows, Qwen3-0.6B shape" "$header" "$row"
  echo "$row"
}
for dt in f32 bf16 q8_0; do
  for B in 1 8; do
    tor="—"; [ "$dt" != q8_0 ] && tor=$(printf %.2f "$(get "$theirs" $dt $B decode_tok_s)")
    gbs="—"
    if [ "$B" = 1 ]; then
      g=$(get "$ours" $dt 1 weight_gbs)
      gbs="$g of $bw ($(awk -v a="$g" -v b="$bw" 'BEGIN{printf "%.0f", 100*a/b}')%)"
    fi
    llv="—"; [ "$B" = 1 ] && llv=$(ll "$dt.tg64")
    emit "decode $dt, batch $B (tok/s)" "$(get "$ours" $dt $B decode_tok_s)" "$tor" "$llv" "" "$gbs"
  done
done
for dt in f32 bf16 q8_0; do
  tor="—"; [ "$dt" != q8_0 ] && tor=$(f1 "$(get "$theirs" $dt 1 prefill_tok_s)")
  emit "prefill $P tokens, $dt (tok/s)" "$(get "$ours" $dt 1 prefill_tok_s)" "$tor" "$(ll "$dt.pp$P")" "" "—"
done
emit "prefill $PP tokens (pp$PP), f32 (tok/s)" "$(get "$ours_pp" f32 1 prefill_tok_s)" \
  "$(f1 "$(get "$theirs_pp" f32 1 prefill_tok_s)")" "$(ll "f32.pp$PP")" "" "—"
emit "process start -> first token, 5-token prompt, f32 (s)" "$ttft" "—" "$(ll ttft)" time "—"
