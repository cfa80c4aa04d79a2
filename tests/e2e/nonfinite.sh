#!/usr/bin/env bash
# nonfinite.sh: a NaN/Inf loss or gradient stops training naming the step, or with
# --skip_nonfinite skips that step's update and says so in the log; every trainer takes the flag.
# asan: yes
set -u
source tests/e2e/lib.sh
# a learning rate of 1e38 overflows the weights in the first update, so step 2 is not finite
A="--model tests/data/models/qwen3_tied --dataset tests/data/sft/ids.jsonl --max_steps 4 --learning_rate 1e38
   --warmup_steps 0 --lr_scheduler_type constant --per_device_train_batch_size 4 --threads 2 --pad_to_multiple_of 16"
out=$($BIN sft $A --output_dir "$tmp/a" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qE "step 2: the (loss|gradient norm) is (-?nan|-?inf)" <<<"$out"; then ok nonfinite_stops_naming_the_step
else fail nonfinite_stops_naming_the_step "rc=$rc $(tail -2 <<<"$out")"; fi
out=$($BIN sft $A --output_dir "$tmp/b" --skip_nonfinite 2>&1); rc=$?
n=$(grep -c "skipping this step's update (--skip_nonfinite)" <<<"$out")
if [ $rc -eq 0 ] && [ "$n" -eq 3 ]; then ok skip_nonfinite_skips_and_logs
else fail skip_nonfinite_skips_and_logs "rc=$rc, $n skipped: $(tail -2 <<<"$out")"; fi

# the on-policy trainers: rollouts from the overflowed weights, the same three skipped updates
$BIN init --model_config tests/data/models/qwen3_tied/config.json --output_dir "$tmp/m" --tokenizer tests/data/sft/tok \
  2>/dev/null
for i in 0 1 2 3; do echo "{\"prompt\": \"Q$i: what is $i + 1?\"}"; done >"$tmp/p.jsonl"
P="--model $tmp/m --dataset $tmp/p.jsonl --max_steps 4 --learning_rate 1e38 --warmup_steps 0 --lr_scheduler_type constant
   --per_device_train_batch_size 2 --threads 2 --pad_to_multiple_of 16 --max_completion_length 4 --save_strategy no"
for cmd in distill grpo rloo; do
  case $cmd in
    distill) extra="--teacher $tmp/m" ;;
    *) extra="--num_generations 2 --reward length:4" ;;
  esac
  out=$($BIN $cmd $P $extra --output_dir "$tmp/$cmd" --skip_nonfinite 2>&1); rc=$?
  n=$(grep -c "skipping this step's update (--skip_nonfinite)" <<<"$out")
  if [ $rc -eq 0 ] && [ "$n" -eq 3 ]; then ok skip_nonfinite_$cmd
  else fail skip_nonfinite_$cmd "rc=$rc, $n skipped: $(tail -2 <<<"$out")"; fi
done
