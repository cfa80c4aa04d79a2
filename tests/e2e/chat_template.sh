#!/usr/bin/env bash
# chat_template.sh: `still chat-template` on model directories holding only tokenizer files
# (tests/data/chat/models/{qwen3,llama3}) reproduces the Jinja2 reference renders in
# tests/data/chat/cli/ (special tokens come from tokenizer_config.json), byte for byte; bad
# input and broken templates fail with a message naming the problem.
# asan: yes
set -u
source tests/e2e/lib.sh
D=tests/data/chat/cli
n=0
for args in "$D"/*.args; do
  name=$(basename "$args" .args)
  mapfile -t argv <"$args"
  if "$BIN" chat-template "${argv[@]}" <"$D/$name.in.json" >"$tmp/out" 2>"$tmp/err"; then
    if cmp -s "$tmp/out" "$D/$name.out.txt"; then ok cli_$name
    else fail cli_$name "output differs from $D/$name.out.txt"; diff "$D/$name.out.txt" "$tmp/out" | head -5; fi
  else
    fail cli_$name "$(head -c 300 "$tmp/err")"
  fi
  n=$((n + 1))
done
[ "$n" -gt 0 ] || fail cli_fixtures "none found in $D"

chat_template_stdin() { local input=$1; shift; printf '%s' "$input" | "$BIN" chat-template "$@"; }
expect_fail() {  # name, needle, stdin, args...: chat-template reading stdin fails naming needle
  local name=$1 needle=$2 input=$3; shift 3
  expect_err "$name" "$needle" chat_template_stdin "$input" "$@"
}
Q=tests/data/chat/models/qwen3
expect_fail bad_json "invalid JSON at line 1" '[{"role": "user", ' --model $Q
expect_fail not_messages "array of messages" '"hello"' --model $Q
expect_fail no_messages_key 'no "messages" key' '{"tools": []}' --model $Q
expect_fail bad_kwargs "chat_template_kwargs" '[]' --model $Q --chat_template_kwargs '{"enable_thinking": fals'
expect_fail no_model "--model" '[]'
expect_fail missing_dir "nope" '[]' --model "$tmp/nope"
mkdir -p "$tmp/m"
expect_fail no_template "no chat template" '[]' --model "$tmp/m"
printf '{%% for m in messages %%}\n{{ m.content }}\n{%% endfor %%}\n{%% if oops %%}' >"$tmp/m/chat_template.jinja"
expect_fail unclosed_block "line 4" '[{"role": "user", "content": "x"}]' --model "$tmp/m"
printf 'a\n{{ raise_exception("no system messages") }}' >"$tmp/m/chat_template.jinja"
expect_fail raise_exception "line 2: raise_exception: no system messages" '[]' --model "$tmp/m"

# chat_template.jinja wins over tokenizer_config.json; named templates in a list
printf '{"chat_template": [{"name": "default", "template": "D{{ eos_token }}"}, {"name": "tool_use", "template": "T{{ messages|length }}"}], "eos_token": {"content": "<e>", "lstrip": false}}' >"$tmp/m/tokenizer_config.json"
rm "$tmp/m/chat_template.jinja"
out=$(echo '[{"role": "user", "content": "x"}]' | "$BIN" chat-template --model "$tmp/m")
[ "$out" = "D<e>" ] && ok named_default || fail named_default "got '$out'"
out=$(echo '[{"role": "user", "content": "x"}]' | "$BIN" chat-template --model "$tmp/m" --chat_template_name tool_use)
[ "$out" = "T1" ] && ok named_pick || fail named_pick "got '$out'"
expect_fail named_missing "available: 'default', 'tool_use'" '[]' --model "$tmp/m" --chat_template_name nope
printf 'J{{ messages[0].content }}' >"$tmp/m/chat_template.jinja"
out=$(echo '{"messages": [{"role": "user", "content": "x"}], "extra": 1}' | "$BIN" chat-template --model "$tmp/m")
[ "$out" = "Jx" ] && ok jinja_file_wins || fail jinja_file_wins "got '$out'"
# generation spans on stderr
printf 'u{%% generation %%}{{ messages[0].content }}{%% endgeneration %%}' >"$tmp/m/chat_template.jinja"
echo '[{"role": "assistant", "content": "é!"}]' | "$BIN" chat-template --model "$tmp/m" --spans >"$tmp/out" 2>"$tmp/err"
grep -qF '{"start": 1, "end": 4, "char_start": 1, "char_end": 3}' "$tmp/err" && ok spans_flag || fail spans_flag "$(cat "$tmp/err")"
exit 0
