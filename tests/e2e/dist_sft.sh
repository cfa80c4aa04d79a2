#!/usr/bin/env bash
# dist_sft.sh: `mpirun -np 2 still sft` (data parallel). 2 ranks x B rows end with the weights of
# 1 rank x 2B rows (fp32 reduction tolerance) with ZeRO-0 and ZeRO-1, with the same per-step loss
# and grad_norm; ZeRO-1 halves each rank's optimizer state; an interrupted 2-rank run resumes bit
# for bit (and on 1 rank with the same global batch); a rank stopped with SIGSTOP makes the other
# fail with the --ddp_timeout error instead of hanging.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_sft "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
DIFF="$BUILD/tests/tools/st_diff --norm"
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
M=tests/data/models/qwen3_tied
IDS=tests/data/sft/ids.jsonl
C="--model $M --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 6 --logging_steps 1 --threads 1 \
   --gradient_accumulation_steps 2 --max_grad_norm 1.0 --save_strategy no"
# Weights compare norm-wise per tensor (st_diff --norm): equivalent batchings differ by fp32
# rounding, ~1e-6 (observed 1.0e-6), and AdamW lets a weight whose gradient is near adam_epsilon
# move by up to ~lr on rounding alone, which a max-abs bound would take for a bug; a wrong data
# order or a per-rank (not global) token normalisation moves every weight (~5e-3 each).
TOL=1e-4

# per-step loss and grad_norm of two metrics.jsonl files agree to a relative 1e-5
same_curves() { curves_agree "$1" "$2" loss grad_norm num_tokens mean_token_accuracy; }

$BIN sft $C --per_device_train_batch_size 4 --output_dir "$tmp/one" >/dev/null 2>"$tmp/err1" \
  || fail one_rank "$(tail -3 "$tmp/err1")"
for z in 0 1; do
  out=$($MPI $BIN sft $C --per_device_train_batch_size 2 --zero_stage $z --output_dir "$tmp/two$z" 2>&1 >/dev/null); rc=$?
  d=$($DIFF "$tmp/one/model.safetensors" "$tmp/two$z/model.safetensors" $TOL 2>&1); drc=$?
  cur=$(same_curves "$tmp/one/metrics.jsonl" "$tmp/two$z/metrics.jsonl" 2>&1); crc=$?
  if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ]; then ok "two_ranks_match_one_rank_zero$z ($d)"
  else fail "two_ranks_match_one_rank_zero$z" "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(tail -3 <<<"$out")"; fi
  grep -o "optimizer state (ZeRO-$z):.*" <<<"$out" >"$tmp/bytes$z"
done
b0=($(grep -o '[0-9]* bytes' "$tmp/bytes0" | cut -d' ' -f1)); b1=($(grep -o '[0-9]* bytes' "$tmp/bytes1" | cut -d' ' -f1))
if [ ${#b0[@]} -eq 2 ] && [ ${#b1[@]} -eq 2 ] && [ "${b0[0]}" -gt 0 ] && [ "${b0[0]}" -eq "${b0[1]}" ] \
   && [ $((2 * b1[0])) -eq "${b0[0]}" ] && [ $((2 * b1[1])) -eq "${b0[1]}" ]; then
  ok "zero1_halves_optimizer_state (${b0[*]} -> ${b1[*]} bytes)"
else fail zero1_halves_optimizer_state "ZeRO-0: $(cat "$tmp/bytes0"); ZeRO-1: $(cat "$tmp/bytes1")"; fi

# resume on 2 ranks (ZeRO-1): interrupted after checkpoint 4 and resumed = uninterrupted, bit for bit
R="--model $M --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 10 --save_steps 4 --logging_steps 1 \
   --threads 1 --zero_stage 1"
$MPI $BIN sft $R --per_device_train_batch_size 2 --output_dir "$tmp/full" >/dev/null 2>&1
$MPI $BIN sft $R --per_device_train_batch_size 2 --output_dir "$tmp/part" --stop_after_steps 6 >/dev/null 2>&1
mkdir -p "$tmp/part/checkpoint-9"  # no completion marker: never "latest"
out=$($MPI $BIN sft $R --per_device_train_batch_size 2 --output_dir "$tmp/part" --resume_from_checkpoint latest 2>&1 >/dev/null)
if grep -q "checkpoint-4 at step 4" <<<"$out" && cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors" \
   && cmp -s "$tmp/full/checkpoint-8/optimizer.safetensors" "$tmp/part/checkpoint-8/optimizer.safetensors" \
   && grep -q '"world_size":.*2' "$tmp/full/checkpoint-8/trainer_state.json" \
   && [ "$(wc -l <"$tmp/part/metrics.jsonl")" = 10 ]; then
  ok resume_two_ranks_bit_identical
else fail resume_two_ranks_bit_identical "$(tail -3 <<<"$out")"; fi
# the same checkpoint on 1 rank with the same global batch (2 x 2 = 1 x 4): re-sharded, same result
out=$($BIN sft $R --per_device_train_batch_size 4 --output_dir "$tmp/re" --resume_from_checkpoint "$tmp/full/checkpoint-4" 2>&1 >/dev/null)
d=$($DIFF "$tmp/full/model.safetensors" "$tmp/re/model.safetensors" $TOL 2>&1)
if [ $? -eq 0 ] && grep -q "re-sharded over 1" <<<"$out"; then ok "resume_on_one_rank_reshards ($d)"
else fail resume_on_one_rank_reshards "$d; $(tail -2 <<<"$out")"; fi
out=$($BIN sft $R --per_device_train_batch_size 2 --output_dir "$tmp/re2" --resume_from_checkpoint "$tmp/full/checkpoint-4" 2>&1 >/dev/null)
if [ $? -ne 0 ] && grep -q "(2 per rank x 2 ranks).*same data, global batch and seed" <<<"$out"; then ok resume_refuses_other_global_batch
else fail resume_refuses_other_global_batch "$(tail -2 <<<"$out")"; fi

# rank 1 stopped (SIGSTOP) mid-run: rank 0 fails with the timeout error within --ddp_timeout 2 s;
# the harness kill at 10x that is a failure (a hang)
rm -f "$tmp/stall.log"
timeout -s KILL 20 mpirun $MPI_FLAGS -np 2 $BIN sft --model $M --dataset $IDS --pad_to_multiple_of 16 --threads 1 \
  --per_device_train_batch_size 2 --max_steps 1000000 --logging_steps 1 --save_strategy no --ddp_timeout 2 \
  --output_dir "$tmp/stall" >/dev/null 2>"$tmp/stall.log" &
job=$!
r1=""
for i in $(seq 300); do
  if [ -z "$r1" ]; then
    for p in $(pgrep -P "$(pgrep -P $job -x mpirun || echo $job)" 2>/dev/null); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && r1=$p
    done
  fi
  [ -n "$r1" ] && [ -f "$tmp/stall/metrics.jsonl" ] && [ "$(wc -l <"$tmp/stall/metrics.jsonl")" -ge 3 ] && break
  sleep 0.05
done
t0=$(date +%s)
[ -n "$r1" ] && kill -STOP "$r1"
wait $job; rc=$?
t1=$(date +%s)
[ -n "$r1" ] && kill -KILL "$r1" 2>/dev/null
if [ -z "$r1" ]; then fail stopped_rank_times_out "rank 1 not found: $(tail -3 "$tmp/stall.log")"
elif [ $rc -eq 137 ]; then fail stopped_rank_times_out "hang: killed by the harness after 20 s"
elif [ $rc -ne 0 ] && grep -q "rank 0: .* did not complete within --ddp_timeout 2 s" "$tmp/stall.log"; then
  ok "stopped_rank_times_out (rc=$rc after $((t1 - t0)) s)"
else fail stopped_rank_times_out "rc=$rc: $(grep -v '^\[rank 0\] step' "$tmp/stall.log" | tail -4)"; fi

# evaluation over 2 ranks: eval_loss as transformers' evaluation_loop averages gathered rank batch
# means (each weighted by its rows), against scripts/ref_sft_eval.py's "two_ranks" case
$MPI $BIN sft --model $M --dataset $IDS --eval_dataset $IDS --output_dir "$tmp/ev" --shuffle false --save_strategy no \
  --threads 1 --max_steps 1 --learning_rate 0 --eval_strategy steps --eval_steps 1 --per_device_eval_batch_size 2 \
  --per_device_train_batch_size 2 >/dev/null 2>"$tmp/ev.log"
got=$(grep -o '"eval_loss":[0-9.e+-]*' "$tmp/ev/metrics.jsonl" 2>/dev/null | cut -d: -f2)
want=$(python3 -c 'import json; print(json.load(open("tests/data/sft/eval.json"))["cases"]["two_ranks"]["eval_loss"])')
if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN{d=a-b; if (d<0) d=-d; exit !(d <= 1e-5 * b)}'; then
  ok eval_loss_two_ranks
else fail eval_loss_two_ranks "eval_loss $got, torch $want; $(tail -2 "$tmp/ev.log")"; fi
