#!/usr/bin/env bash
# chat_tty.sh: `still chat` on a terminal (tmux): a line edited with the arrow keys, history
# recalled with up, /help, Ctrl-C stopping a long reply and returning to the prompt with the
# conversation kept, /stats, and Ctrl-D leaving cleanly (exit 0). Without tmux: skipped with the
# reason. Also, without a terminal: the conversation's cache kept between turns gives the same
# replies as prefilling everything every turn, and prefills only the new turn.
set -u
source tests/e2e/lib.sh
sock="$tmp/tmux.sock"
on_exit 'tmux -S "$sock" kill-server 2>/dev/null'
mkdir -p "$tmp/tok"
gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >"$tmp/tok/tokenizer.json"
cp tests/data/tokenizer/qwen3/tokenizer_config.json "$tmp/tok/"
cat >"$tmp/config.json" <<'J'
{"vocab_size": 151936, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 40960,
 "initializer_range": 0.5, "torch_dtype": "float32", "bos_token_id": 151643, "eos_token_id": 151645,
 "hidden_act": "silu", "model_type": "qwen3", "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
 "tie_word_embeddings": true, "attention_bias": false}
J
M=$tmp/m
$BIN init --model_config "$tmp/config.json" --tokenizer "$tmp/tok" --output_dir "$M" --seed 1 2>/dev/null

# 1. the cache kept between turns: the same greedy replies, fewer tokens prefilled
turns='hello there\nwhat is two plus two\n/stats\nand three?\n/stats\n'
for kc in true false; do
  printf "$turns" | $BIN chat --model "$M" --threads 1 --max_new_tokens 12 --ignore_eos --keep_cache $kc \
    >"$tmp/out_$kc" 2>"$tmp/err_$kc"
done
reused=$(grep -o '[0-9]* tokens of the conversation reused' "$tmp/err_true" | cut -d' ' -f1 | tr '\n' ' ')
none=$(grep -o '[0-9]* tokens of the conversation reused' "$tmp/err_false" | cut -d' ' -f1 | tr '\n' ' ')
p1=$(grep -o 'prefill [0-9]* tokens' "$tmp/err_true" | tail -1 | cut -d' ' -f2)
p0=$(grep -o 'prefill [0-9]* tokens' "$tmp/err_false" | tail -1 | cut -d' ' -f2)
if [ -s "$tmp/out_true" ] && cmp -s "$tmp/out_true" "$tmp/out_false" && [ "$none" = "0 0 " ] \
   && [ -n "$reused" ] && [ "${reused%% *}" -gt 10 ] && [ "$p1" -lt "$p0" ]; then
  ok "chat_keeps_cache_between_turns (reused: $reused; last turn prefilled $p1 tokens, $p0 without the cache)"
else fail chat_keeps_cache_between_turns "reused '$reused' / '$none', prefill $p1 vs $p0; $(diff "$tmp/out_true" "$tmp/out_false" | head -3)"; fi
printf '/bogus\n/help\n' | $BIN chat --model "$M" --threads 1 >"$tmp/out" 2>"$tmp/err"
if [ ! -s "$tmp/out" ] && grep -q "unknown command /bogus" "$tmp/err" && grep -q "/stats" "$tmp/err"; then ok chat_commands_not_sent
else fail chat_commands_not_sent "$(cat "$tmp/out" "$tmp/err" | head -5)"; fi

# 2. on a terminal
if ! command -v tmux >/dev/null; then skip chat_terminal "tmux is not installed (scripts/deps.sh installs it)"; exit 0; fi
if ! $BIN --version | grep -q libedit; then skip chat_terminal "this build has no libedit (libedit-dev)"; exit 0; fi
screen() { tmux -S "$sock" capture-pane -p -t chat -S -200; }
wait_for() {  # pattern, seconds: until the screen shows it
  for i in $(seq $(($2 * 20))); do screen | grep -qE -- "$1" && return 0; sleep 0.05; done; return 1
}
# decoding on the scalar backend: about 100 tokens a second, so a reply of 20000 is long enough to stop
tmux -S "$sock" new-session -d -s chat -x 150 -y 50 \
  "$BIN chat --model $M --threads 1 --device ref --max_new_tokens 20000 --max_cache_len 20480 --ignore_eos; echo EXIT=\$?; sleep 30"
wait_for "/help lists the commands" 20 || fail chat_terminal "no prompt: $(screen | tail -3)"
tmux -S "$sock" send-keys -t chat "/stts" Left Left "a" Enter   # edited into /stats
wait_for "no reply yet" 5 && ok chat_line_editing || fail chat_line_editing "$(screen | tail -3)"
tmux -S "$sock" send-keys -t chat Up Enter                        # history: /stats again
for i in $(seq 40); do [ "$(screen | grep -c 'no reply yet')" -ge 2 ] && break; sleep 0.05; done
[ "$(screen | grep -c 'no reply yet')" -ge 2 ] && ok chat_history || fail chat_history "$(screen | tail -3)"
tmux -S "$sock" send-keys -t chat "/help" Enter
wait_for "Ctrl-C stops a reply" 5 && ok chat_help || fail chat_help "$(screen | tail -3)"
# The reply of a random model may hold control bytes that clear or move the screen, so from here on the test
# reads everything the pane printed (pipe-pane) instead of the screen, and stops the reply once it is streaming
# (under load its prefill may take longer than any fixed sleep).
tmux -S "$sock" pipe-pane -t chat -o "cat >>'$tmp/pane.log'"
logged() {  # pattern, seconds: until the pane's output holds it
  for i in $(seq $(($2 * 20))); do grep -qaE -- "$1" "$tmp/pane.log" 2>/dev/null && return 0; sleep 0.05; done; return 1
}
tmux -S "$sock" send-keys -t chat "tell me a very long story" Enter
for i in $(seq 400); do [ "$(stat -c %s "$tmp/pane.log" 2>/dev/null || echo 0)" -gt 400 ] && break; sleep 0.05; done
tmux -S "$sock" send-keys -t chat C-c
if logged "\[stopped\]" 20; then
  tmux -S "$sock" send-keys -t chat "/stats" Enter
  if logged "turn 1;" 10; then ok chat_ctrl_c_stops_reply; else fail chat_ctrl_c_stops_reply "no /stats after: $(tail -c 300 "$tmp/pane.log" | tr -cd '[:print:]\n')"; fi
else fail chat_ctrl_c_stops_reply "$(tmux -S "$sock" list-sessions 2>&1 | head -1); output: $(stat -c %s "$tmp/pane.log" 2>/dev/null) bytes, last: $(tail -c 300 "$tmp/pane.log" | tr -cd '[:print:]\n')"; fi
tmux -S "$sock" send-keys -t chat C-d
if logged "EXIT=0" 10; then ok chat_ctrl_d_exits; else fail chat_ctrl_d_exits "$(tail -c 300 "$tmp/pane.log" | tr -cd '[:print:]\n')"; fi
