#!/usr/bin/env bash
# cli.sh: the CLI end to end on the emulated CUDA backend (make test-cuda-emu), against --device cpu
# of the same binary (build-emu/still): logits (bf16 GEMMs within 3e-2 of max |logit| as in
# scripts/gpu_check.sh; fp32 GEMMs within 1e-4), greedy generation with bf16 GEMMs (the same ids
# up to a near-tie), sampled generation (the same ids but where a draw sits on a boundary) and SFT
# with fp32 GEMMs (the same losses to 1e-5), Q8_0 weights (logits within 1e-4 with fp32 GEMMs,
# greedy ids as above), and
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

gen_both() {  # gemm, generate flags...: cpu ids in g_cpu, cuda ids in g_cuda (a line per sequence)
  local gemm=$1; shift
  $BIN generate --device cpu --model $M --ids "$ids" "$@" >"$tmp/g_cpu" 2>"$tmp/err"
  STILL_CUDA_GEMM=$gemm $BIN generate --device cuda --model $M --ids "$ids" "$@" >"$tmp/g_cuda" 2>"$tmp/g_err"
  cat "$tmp/g_err" >>"$tmp/err"
}
# the decode step ran as a recorded graph (replayed from the third step on)
graphs_ran() { grep -q ', 1 decode graphs;' "$tmp/g_err"; }
gen_detail() { echo "cpu: $(head -c 200 "$tmp/g_cpu") / cuda: $(head -c 200 "$tmp/g_cuda") $(tail -2 "$tmp/err")"; }

# Greedy with bf16 GEMMs: the same ids up to the first token where the two part, and there only
# on a near-tie: the cpu's logits of the two choices (after the shared prefix) within 2 x 3e-2 of
# max |logit|, what bf16 GEMMs may move each logit by (the logits tolerance above). After a
# near-tie the sequences may part; a wrong kernel parts them on a clear choice.
same_greedy() {  # name, gemm, generate flags...
  local name=$1 gemm=$2; shift 2
  gen_both "$gemm" "$@"
  local a b i=0
  read -ra a <"$tmp/g_cpu"; read -ra b <"$tmp/g_cuda"
  while [ $i -lt ${#a[@]} ] && [ "${a[$i]}" = "${b[$i]:-}" ]; do i=$((i + 1)); done
  if [ ${#a[@]} -eq 0 ] || [ ${#a[@]} -ne ${#b[@]} ] || ! graphs_ran; then fail "$name" "$(gen_detail)"; return; fi
  if [ $i -eq ${#a[@]} ]; then ok "$name"; return; fi
  $BIN logits --device cpu --model $M ${GEN_DTYPE:+--dtype $GEN_DTYPE} --ids "$ids ${a[*]:0:$i}" >"$tmp/l_tie" 2>>"$tmp/err"
  local verdict
  verdict=$(awk -v x="${a[$i]}" -v y="${b[$i]}" '{ m = 0; for (k = 1; k <= NF; k++) { v = $k < 0 ? -$k : $k; if (v > m) m = v }
    d = $(x + 1) - $(y + 1); if (d < 0) d = -d; printf "%s gap %.3g, bound %.3g", (d <= 2 * 3e-2 * m ? "tie" : "clear"), d, 2 * 3e-2 * m }' "$tmp/l_tie")
  case $verdict in
    tie*) ok "$name" "parts at token $i on a near-tie: $verdict" ;;
    *) fail "$name" "parts at token $i (${a[$i]} vs ${b[$i]}) on a clear choice: $verdict; $(gen_detail)" ;;
  esac
}
# Sampled with fp32 GEMMs: logits within ~1e-6, so a draw changes only where it falls within
# rounding of the boundary between two tokens' masses: at most one sequence of the three may part
# from the cpu's. A wrong seed, stream or filter changes every sequence.
same_sampled() {  # name, gemm, generate flags...
  local name=$1 gemm=$2; shift 2
  gen_both "$gemm" "$@"
  local n parted
  n=$(wc -l <"$tmp/g_cpu")
  parted=$(paste -d'|' "$tmp/g_cpu" "$tmp/g_cuda" | awk -F'|' '$1 != $2' | wc -l)
  if [ -s "$tmp/g_cpu" ] && [ "$n" = "$(wc -l <"$tmp/g_cuda")" ] && [ "$parted" -le 1 ] && graphs_ran; then
    ok "$name" "$parted of $n sequences part"
  else fail "$name" "$parted of $n sequences differ: $(gen_detail)"; fi
}
same_greedy generate_greedy bf16 --max_new_tokens 32 --do_sample false --ignore_eos
M_f32=$M M=$Q GEN_DTYPE=q8_0
same_greedy generate_greedy_q8_0 fp32 --max_new_tokens 24 --do_sample false --ignore_eos --dtype q8_0
M=$M_f32 GEN_DTYPE=
same_sampled generate_sampled fp32 --max_new_tokens 40 --do_sample true --seed 7 --top_k 20 --top_p 0.9 \
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

# Mixture of experts (docs/models.md): logits of qwen3_moe (a dense layer between sparse ones) and
# mixtral with fp32 GEMMs within 1e-4 of the cpu's, greedy decode (recorded as a graph: the
# dispatch stays on the device) and SFT losses with the load-balancing loss (run eagerly).
for mm in qwen3_moe mixtral; do
  MM=tests/data/models/$mm
  $BIN logits --device cpu --model $MM --ids "$ids" --all >"$tmp/m_cpu" 2>"$tmp/err"
  STILL_CUDA_GEMM=fp32 $BIN logits --device cuda --model $MM --ids "$ids" --all >"$tmp/m_cuda" 2>>"$tmp/err"
  r=$(max_rel "$tmp/m_cpu" "$tmp/m_cuda")
  if [ "$r" != shapes ] && awk -v r="$r" 'BEGIN { exit !(r <= 1e-4) }'; then ok "moe_logits_$mm"
  else fail "moe_logits_$mm" "relative error $r (tol 1e-4): $(tail -2 "$tmp/err")"; fi
done
M_dense=$M M=tests/data/models/qwen3_moe
same_greedy moe_generate_greedy fp32 --max_new_tokens 12 --do_sample false --ignore_eos
M=$M_dense
msft=(sft --model tests/data/models/mixtral --dataset tests/data/sft/ids.jsonl --max_steps 2 --pad_to_multiple_of 16
      --learning_rate 1e-3 --threads 2 --save_strategy no)
$BIN "${msft[@]}" --device cpu --output_dir "$tmp/ms_cpu" >"$tmp/ms_cpu.out" 2>"$tmp/err"
STILL_CUDA_GEMM=fp32 $BIN "${msft[@]}" --device cuda --output_dir "$tmp/ms_cuda" >"$tmp/ms_cuda.out" 2>>"$tmp/err"
a=$(loss "$tmp/ms_cpu.out") b=$(loss "$tmp/ms_cuda.out")
if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d * d <= 1e-10 * a * a) }'; then
  ok moe_sft_losses
else fail moe_sft_losses "cpu $a, cuda $b: $(tail -2 "$tmp/err")"; fi

"$BUILD/bench/cuda_bench" check $M/config.json 2>"$tmp/err" | sed 's/^\(ok\|FAIL\) /\1 cuda_bench: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || echo "FAIL cuda_bench: $(tail -2 "$tmp/err")"
