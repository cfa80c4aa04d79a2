#!/usr/bin/env bash
# cli.sh: the CLI end to end on the emulated CUDA backend (make test-cuda-emu), against --device cpu
# of the same binary (build-emu/still): logits (bf16 GEMMs within 3e-2 of max |logit| as in
# scripts/gpu_check.sh; fp32 GEMMs within 1e-4), greedy generation (the same ids), sampled
# generation and SFT with fp32 GEMMs (the same ids; the same losses to 1e-5), Q8_0 weights (logits
# within 1e-4 with fp32 GEMMs, greedy ids equal), and
# bench/cuda_bench check (logits, training steps, graph replays of the training step).
set -u
STILL_BIN=${STILL_BIN:-build-emu/still} STILL_BUILD=${STILL_BUILD:-build-emu}
source tests/e2e/lib.sh
M=tests/data/models/qwen3_tied
ids="1 5 9 200 17 3 3 3 44 45 46 301 12"

# max |a - b| over max |a| of two files of numbers, or "shapes" when they differ in shape
max_rel() {
  paste -d'\n' "$1" "$2" | awk '
    NR % 2 == 1 { n = split($0, a, " "); next }
    { m = split($0, b, " "); if (m != n) bad = 1
      for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > e) e = d
        x = a[i] < 0 ? -a[i] : a[i]; if (x > mx) mx = x } }
    END { if (bad || NR == 0 || mx == 0) print "shapes"; else printf "%.3g\n", e / mx }'
}

for gemm in bf16 fp32; do
  tol=$([ $gemm = bf16 ] && echo 3e-2 || echo 1e-4)
  $BIN logits --device cpu --model $M --ids "$ids" --all >"$tmp/l_cpu" 2>"$tmp/err"
  STILL_CUDA_GEMM=$gemm $BIN logits --device cuda --model $M --ids "$ids" --all >"$tmp/l_cuda" 2>>"$tmp/err"
  r=$(max_rel "$tmp/l_cpu" "$tmp/l_cuda")
  if [ "$r" != shapes ] && awk -v r="$r" -v t="$tol" 'BEGIN { exit !(r <= t) }'; then ok "logits_$gemm"
  else fail "logits_$gemm" "relative error $r (tol $tol): $(tail -2 "$tmp/err")"; fi
done

# Q8_0 weights (tests/data/q8/qwen3, rows of whole blocks): 13 positions (converted GEMM operand)
# and 4 (the warp-per-row kernel) against cpu with fp32 GEMMs
Q=tests/data/q8/qwen3
for q in "$ids" "1 5 9 200"; do
  $BIN logits --device cpu --model $Q --dtype q8_0 --ids "$q" --all >"$tmp/q_cpu" 2>"$tmp/err"
  STILL_CUDA_GEMM=fp32 $BIN logits --device cuda --model $Q --dtype q8_0 --ids "$q" --all >"$tmp/q_cuda" 2>>"$tmp/err"
  r=$(max_rel "$tmp/q_cpu" "$tmp/q_cuda")
  n=$(wc -w <<<"$q")
  if [ "$r" != shapes ] && awk -v r="$r" 'BEGIN { exit !(r <= 1e-4) }'; then ok "logits_q8_0_T$n"
  else fail "logits_q8_0_T$n" "relative error $r (tol 1e-4): $(tail -2 "$tmp/err")"; fi
done

same_ids() {  # name, gemm, generate flags...
  local name=$1 gemm=$2; shift 2
  $BIN generate --device cpu --model $M --ids "$ids" "$@" >"$tmp/g_cpu" 2>"$tmp/err"
  STILL_CUDA_GEMM=$gemm $BIN generate --device cuda --model $M --ids "$ids" "$@" >"$tmp/g_cuda" 2>"$tmp/g_err"
  cat "$tmp/g_err" >>"$tmp/err"
  # the decode step ran as a recorded graph (replayed from the third step on)
  if [ -s "$tmp/g_cpu" ] && cmp -s "$tmp/g_cpu" "$tmp/g_cuda" && grep -q ', 1 decode graphs;' "$tmp/g_err"; then ok "$name"
  else fail "$name" "cpu: $(head -c 200 "$tmp/g_cpu") / cuda: $(head -c 200 "$tmp/g_cuda") $(tail -2 "$tmp/err")"; fi
}
same_ids generate_greedy bf16 --max_new_tokens 32 --do_sample false
M_f32=$M M=$Q
same_ids generate_greedy_q8_0 fp32 --max_new_tokens 24 --do_sample false --dtype q8_0
M=$M_f32
same_ids generate_sampled fp32 --max_new_tokens 40 --do_sample true --seed 7 --top_k 20 --top_p 0.9 \
  --temperature 0.8 --repetition_penalty 1.3 --num_return_sequences 3

loss() { grep -o '"loss":[-0-9.e+]*' "$1" | tail -1 | cut -d: -f2; }
sft=(sft --model $M --dataset tests/data/sft/ids.jsonl --max_steps 3 --pad_to_multiple_of 16 --learning_rate 1e-3
     --threads 2 --save_strategy no)
$BIN "${sft[@]}" --device cpu --output_dir "$tmp/s_cpu" >"$tmp/s_cpu.out" 2>"$tmp/err"
STILL_CUDA_GEMM=fp32 $BIN "${sft[@]}" --device cuda --output_dir "$tmp/s_cuda" >"$tmp/s_cuda.out" 2>>"$tmp/err"
a=$(loss "$tmp/s_cpu.out") b=$(loss "$tmp/s_cuda.out")
# cuda records the SFT micro-batch once (step 2) and replays it (step 3)
if [ -n "$a" ] && [ -n "$b" ] && grep -q '1 steps recorded as graphs' "$tmp/err" && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d * d <= 1e-10 * a * a) }'; then
  ok sft_losses
else fail sft_losses "cpu $a, cuda $b: $(tail -2 "$tmp/err")"; fi

"$BUILD/bench/cuda_bench" check $M/config.json 2>"$tmp/err" | sed 's/^\(ok\|FAIL\) /\1 cuda_bench: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || echo "FAIL cuda_bench: $(tail -2 "$tmp/err")"
