#!/usr/bin/env bash
# interrupt.sh: SIGINT / SIGTERM at random moments (seeded) of a training run that saves often.
# The first signal finishes the step, writes a complete checkpoint of that step, metrics and
# loss.svg, prints "interrupted at step N; resume with --resume_from_checkpoint latest" and exits
# 130 (SIGTERM too, as for Ctrl-C); no temp file is left and the run resumes from the newest checkpoint. A second
# signal ends the process at once; what it leaves is swept when the next run starts.
set -u
source tests/e2e/lib.sh
pid=0
on_exit 'kill -9 $pid 2>/dev/null'
M=tests/data/models/qwen3_untied
K="--model $M --dataset tests/data/sft/ids.jsonl --max_steps 100000 --save_steps 7 --save_total_limit 2
   --per_device_train_batch_size 4 --threads 1 --pad_to_multiple_of 16 --learning_rate 1e-3 --logging_steps 5"
RANDOM=11
bad="" runs=0 term=0
for i in $(seq 8); do
  o="$tmp/r$i"
  sig=INT want=130
  if [ $((i % 3)) = 0 ]; then sig=TERM want=130; term=$((term + 1)); fi
  $BIN sft $K --output_dir "$o" >/dev/null 2>"$tmp/err" & pid=$!
  # once training runs, wait 0-400 ms more
  for t in $(seq 400); do [ -s "$o/metrics.jsonl" ] && break; sleep 0.02; done
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  kill -$sig $pid; wait $pid; rc=$?; runs=$((runs + 1))
  n=$(grep -o 'interrupted at step [0-9]*; resume with --resume_from_checkpoint latest' "$tmp/err" | grep -o '[0-9]*' | head -1)
  tmpf=$(find "$o" -name '*.tmp.*' | head -3)
  if [ $rc -ne $want ] || [ -z "$n" ]; then bad="$bad run$i(SIG$sig): rc=$rc $(tail -1 "$tmp/err");"; continue; fi
  [ -z "$tmpf" ] || bad="$bad run$i: temp files left: $tmpf;"
  [ -f "$o/checkpoint-$n/checkpoint_complete.json" ] || bad="$bad run$i: no complete checkpoint-$n;"
  [ -s "$o/loss.svg" ] || bad="$bad run$i: no loss.svg;"
  last=$(tail -1 "$o/metrics.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
  [ "$last" = "$n" ] || bad="$bad run$i: metrics.jsonl ends at step $last, not $n;"
  # the newest checkpoint is that step's, and the run resumes from it
  if ! $BIN sft $K --output_dir "$o" --resume_from_checkpoint latest --stop_after_steps 2 >/dev/null 2>"$tmp/err2" \
     || ! grep -q "checkpoint-$n at step $n" "$tmp/err2"; then bad="$bad run$i: resume: $(tail -1 "$tmp/err2");"; fi
done
if [ -z "$bad" ]; then ok "first_signal_saves_and_resumes ($runs runs, $term with SIGTERM)"
else fail first_signal_saves_and_resumes "$bad"; fi

# a second signal stops at once, without waiting for the step (here 1-2 s on the scalar backend)
python3 -c "
import json, sys
c = json.load(open('$M/config.json'))
c.update(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, head_dim=64)
json.dump(c, open(sys.argv[1], 'w'))" "$tmp/mid.json"
$BIN init --model_config "$tmp/mid.json" --output_dir "$tmp/mid" >/dev/null 2>&1
o="$tmp/twice"
$BIN sft --model "$tmp/mid" --dataset tests/data/sft/ids.jsonl --max_steps 100 --device ref --threads 1 \
  --per_device_train_batch_size 4 --pad_to_multiple_of 16 --output_dir "$o" >/dev/null 2>"$tmp/err" & pid=$!
for t in $(seq 400); do grep -q "plan 1 built" "$tmp/err" && break; sleep 0.02; done
sleep 0.2; kill -INT $pid; sleep 0.2; t0=$(date +%s.%N); kill -INT $pid; wait $pid; rc=$?
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
if [ $rc = 130 ] && ! grep -q "resume with" "$tmp/err" && awk -v d="$dt" 'BEGIN { exit !(d < 0.5) }'; then
  ok "second_signal_stops_at_once (${dt} s)"
else fail second_signal_stops_at_once "rc=$rc after ${dt} s: $(tail -2 "$tmp/err")"; fi

# temp files of a process that is gone (what a SIGKILL or a second signal leaves) are swept
o="$tmp/r1"
sleep 60 & dead=$!; kill -9 $dead; wait $dead 2>/dev/null
latest=$(ls -d "$o"/checkpoint-* | sort -t- -k2 -n | tail -1)
echo x >"$latest/optimizer.safetensors.tmp.$dead"; echo x >"$o/metrics.jsonl.tmp.$dead"
echo x >"$o/keep.tmp.$$"  # this shell is alive: not swept
$BIN sft $K --output_dir "$o" --resume_from_checkpoint latest --stop_after_steps 1 >/dev/null 2>"$tmp/err"
if [ $? = 0 ] && [ -z "$(find "$o" -name "*.tmp.$dead")" ] && [ -f "$o/keep.tmp.$$" ] \
   && grep -q "removed 2 temporary files" "$tmp/err"; then ok resume_sweeps_temp_files
else fail resume_sweeps_temp_files "$(find "$o" -name '*.tmp.*') $(tail -2 "$tmp/err")"; fi
