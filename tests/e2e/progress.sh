#!/usr/bin/env bash
# progress.sh: what a person waiting sees. On a terminal (tmux) the training bar moves inside a
# step (micro-batch k/n), shows the loss metrics.jsonl logs, and is cleared before log lines; off
# a terminal a plain line comes every 10 s at most (a long generation: "generate: ... rows").
set -u
source tests/e2e/lib.sh
sock="$tmp/tmux.sock"
on_exit 'tmux -S "$sock" kill-server 2>/dev/null'
python3 -c "
import json, sys
c = json.load(open('tests/data/models/qwen3_untied/config.json'))
c.update(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, head_dim=64)
json.dump(c, open(sys.argv[1], 'w'))" "$tmp/mid.json"
$BIN init --model_config "$tmp/mid.json" --output_dir "$tmp/mid" >/dev/null 2>&1

# 1. off a terminal: a generation of 10-30 s on the scalar backend prints a line every 10 s, no more
#    (the last line, with the totals, says how long it took)
$BIN generate --model "$tmp/mid" --ids "1 2 3" --max_new_tokens 800 --ignore_eos --device ref --threads 1 \
  --num_return_sequences 2 --do_sample true >/dev/null 2>"$tmp/err"
secs=$(grep "^generate: 0/2 rows" "$tmp/err" | grep -oE "[0-9]+m[0-9]+s elapsed" | sed 's/m/ /; s/s elapsed//' | awk '{ print $1 * 60 + $2 }')
total=$(grep "^generate: 2/2 rows" "$tmp/err" | grep -oE "[0-9]+m[0-9]+s elapsed" | sed 's/m/ /; s/s elapsed//' | awk '{ print $1 * 60 + $2 }')
n=$(wc -w <<<"$secs")
if [ -n "$total" ] && awk -v s="$secs" -v t="$total" 'BEGIN { n = split(s, a); p = 0
     for (i = 1; i <= n; i++) { if (a[i] - p < 10) exit 1; p = a[i] }
     exit !(n >= int(t / 10) - 1 && n <= int(t / 10)) }'; then ok "plain_progress_lines ($n in $total s)"
else fail plain_progress_lines "$n lines in ${total:-?} s: $(head -3 "$tmp/err")"; fi

# 2. on a terminal
if ! command -v tmux >/dev/null; then skip progress_terminal "tmux is not installed (scripts/deps.sh installs it)"; exit 0; fi
screen() { tmux -S "$sock" capture-pane -p -t run -S -100; }
tmux -S "$sock" new-session -d -s run -x 200 -y 50 \
  "$BIN sft --model $tmp/mid --dataset tests/data/sft/ids.jsonl --max_steps 2 --device ref --threads 1 \
   --per_device_train_batch_size 2 --gradient_accumulation_steps 3 --pad_to_multiple_of 16 --logging_steps 1 \
   --save_strategy no --output_dir $tmp/o; echo EXIT=\$?; sleep 30"
seen_mb=0 seen_loss=""
for i in $(seq 600); do
  s=$(screen)
  grep -qE "micro-batch [1-3]/3" <<<"$s" && seen_mb=1
  l=$(grep -oE "^train \[.*\] 1/2 steps.*loss [0-9.]+" <<<"$s" | grep -oE "loss [0-9.]+" | tail -1 | cut -d' ' -f2)
  [ -n "$l" ] && seen_loss=$l
  grep -q "^EXIT=" <<<"$s" && break
  sleep 0.05
done
s=$(screen)
want=$(python3 -c "import json; print('%.4f' % json.loads(open('$tmp/o/metrics.jsonl').readline())['loss'])" 2>/dev/null)
if [ $seen_mb = 1 ]; then ok bar_moves_inside_a_step; else fail bar_moves_inside_a_step "$(tail -3 <<<"$s")"; fi
if [ -n "$seen_loss" ] && [ "$seen_loss" = "$want" ]; then ok bar_loss_is_metrics_loss
else fail bar_loss_is_metrics_loss "bar '$seen_loss', metrics.jsonl '$want'"; fi
# log lines start at the left edge: nothing of the bar is left in front of them
if grep -q "^trained 2 steps" <<<"$s" && grep -q "^EXIT=0" <<<"$s" && ! grep -q "steps.*trained" <<<"$s"; then
  ok bar_cleared_before_log_lines
else fail bar_cleared_before_log_lines "$(tail -4 <<<"$s")"; fi
