#!/usr/bin/env bash
# kill_random.sh: SIGKILL a training run at random moments (seeded), many times, saving every
# step. After every kill the newest complete checkpoint must load and the run must resume from
# it; at least one kill must have landed in the middle of a save (a temp file or a checkpoint
# without its completion marker left behind), so the test really exercises crash-safe saving.
set -u
source tests/e2e/lib.sh
pid=0
on_exit 'kill -9 $pid 2>/dev/null'
M=tests/data/models/qwen3_untied
K="--model $M --dataset tests/data/sft/ids.jsonl --max_steps 100000 --save_steps 1 --save_total_limit 3
   --per_device_train_batch_size 4 --threads 1 --pad_to_multiple_of 16 --learning_rate 1e-3 --output_dir $tmp/k"
RANDOM=7
kills=0 mid_save=0 bad=""
$BIN sft $K >/dev/null 2>"$tmp/err0" & pid=$!
while [ $kills -lt 16 ]; do
  # wait for a first complete checkpoint, then kill at a random moment 0-250 ms later
  for i in $(seq 400); do ls "$tmp"/k/checkpoint-*/checkpoint_complete.json >/dev/null 2>&1 && break; sleep 0.025; done
  sleep "0.$(printf '%03d' $((RANDOM % 250)))"
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  kills=$((kills + 1))
  if ls "$tmp"/k/*.tmp.* "$tmp"/k/checkpoint-*/*.tmp.* >/dev/null 2>&1; then mid_save=$((mid_save + 1));
  else
    for d in "$tmp"/k/checkpoint-*; do [ -f "$d/checkpoint_complete.json" ] || { mid_save=$((mid_save + 1)); break; }; done
  fi
  # resume from the newest complete checkpoint: it must load (the run then keeps training)
  $BIN sft $K --resume_from_checkpoint latest >/dev/null 2>"$tmp/err" & pid=$!
  sleep 0.3
  if ! kill -0 $pid 2>/dev/null; then
    wait $pid; bad="$bad kill$kills: $(tail -1 "$tmp/err")"; break
  fi
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
latest=$(for d in "$tmp"/k/checkpoint-*; do [ -f "$d/checkpoint_complete.json" ] && echo "${d##*-} $d"; done | sort -n | tail -1 | cut -d' ' -f2)
if [ -z "$bad" ] && [ -n "$latest" ] && $BIN loss --model "$latest" --ids "1 2 3 4" >/dev/null 2>&1; then
  ok=1; else ok=0; fi
if [ $ok = 1 ]; then ok "random_kills_always_resume ($kills kills)"; else fail random_kills_always_resume "$bad (latest: $latest)"; fi
if [ $mid_save -ge 1 ]; then ok "some_kills_landed_mid_save ($mid_save of $kills)"
else fail some_kills_landed_mid_save "none of $kills kills interrupted a save"; fi
