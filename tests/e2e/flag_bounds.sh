#!/usr/bin/env bash
# flag_bounds.sh: every numeric flag of every command carries its interval (shown by --help), and a
# value outside it is a flag error (exit 2) that names the flag, the value and the interval; the
# checks torch / TRL / transformers make between flags are flag errors too (docs/errors.md).
# asan: yes
set -u
source tests/e2e/lib.sh
expect_usage() { local name=$1; shift; expect_rc "$name" 2 "$@"; }  # name, message, command...: exit 2 and the message

# 1. the whole table: for every command, every numeric flag gets a value just outside its interval
cmds=$($BIN --help | awk '/^commands:/ { f = 1; next } f && /^  [a-z]/ { print $1 }')
[ "$(wc -w <<<"$cmds")" -ge 15 ] || fail commands_listed "$cmds"
checked=0 bad=""
for c in $cmds; do
  if ! $BIN "$c" --help >"$tmp/h" 2>"$tmp/herr"; then bad="$bad [$c --help: $(head -c 300 "$tmp/herr")]"; continue; fi
  unbounded=$(grep -E '^  --[a-z0-9_]+ (N|X)( |$)' "$tmp/h" | grep -v ' in [[(]')
  [ -z "$unbounded" ] || bad="$bad [$c: no interval: $unbounded]"
  while read -r name lo hi; do
    # below the lower end (just below when closed, the end itself when open), else above the upper one
    v=$(awk -v lo="$lo" -v hi="$hi" 'BEGIN {
      l = substr(lo, 2); h = substr(hi, 1, length(hi) - 1)
      if (l != "-inf") print (substr(lo, 1, 1) == "[" ? l - 1 : l)
      else if (h != "inf") print (substr(hi, length(hi)) == "]" ? h + 1 : h) }')
    [ -n "$v" ] || { bad="$bad [$c --$name: no bound at all]"; continue; }
    out=$($BIN "$c" "--$name" "$v" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "--$name $v is out of range: expected" <<<"$out"; then checked=$((checked + 1))
    else bad="$bad [$c --$name $v: rc=$rc $(head -c 200 <<<"$out")]"; fi
  done < <(sed -nE 's/^  --([a-z0-9_]+) (N|X) in ([[(][^,]+),([^])]+[])]).*/\1 \3 \4/p' "$tmp/h")
done
if [ -z "$bad" ] && [ $checked -ge 150 ]; then ok "every_numeric_flag_bounded ($checked flags)"
else fail every_numeric_flag_bounded "$checked checked;$bad"; fi

# 2. the values the issue names, one by one
expect_usage sft_max_length_0 "--max_length 0 is out of range: expected an integer >= 1" $BIN sft --max_length 0
expect_usage sft_max_length_negative "--max_length -5 is out of range" $BIN sft --max_length -5
expect_usage sft_learning_rate_negative "--learning_rate -0.001 is out of range: expected a number >= 0" \
  $BIN sft --learning_rate -0.001
expect_usage sft_batch_0 "--per_device_train_batch_size 0 is out of range: expected an integer >= 1" \
  $BIN sft --per_device_train_batch_size 0
expect_usage grpo_batch_negative "--per_device_train_batch_size -1 is out of range" $BIN grpo --per_device_train_batch_size -1
expect_usage generate_batch_0 "--batch_size 0 is out of range: expected an integer >= 1" $BIN generate --batch_size 0
expect_usage generate_top_k_negative "--top_k -1 is out of range: expected an integer >= 0" $BIN generate --top_k -1
expect_usage generate_top_p_0 "--top_p 0 is out of range: expected a number in (0, 1]" $BIN generate --top_p 0
expect_usage eval_top_p_over_1 "--top_p 1.5 is out of range: expected a number in (0, 1]" $BIN eval --top_p 1.5
expect_usage grpo_one_generation "--num_generations 1 is out of range: expected an integer >= 2" $BIN grpo --num_generations 1
expect_usage rloo_one_generation "--num_generations 1 is out of range" $BIN rloo --num_generations 1
expect_usage grpo_temperature_0 "--temperature 0 is out of range: expected a number > 0" $BIN grpo --temperature 0
expect_usage adam_beta2_1 "--adam_beta2 1 is out of range: expected a number in [0, 1)" $BIN sft --adam_beta2 1
expect_usage warmup_ratio_over_1 "--warmup_ratio 1.5 is out of range: expected a number in [0, 1]" $BIN sft --warmup_ratio 1.5
expect_usage int_beyond_int32 "--max_new_tokens 4294967297 is out of range: expected an integer in [1, 2147483647]" \
  $BIN generate --max_new_tokens 4294967297
printf 'top_k: -1\n' >"$tmp/c.yaml"
expect_usage config_file_value "c.yaml:1: --top_k -1 is out of range" $BIN generate --config "$tmp/c.yaml"

# 3. values wrong only together: transformers refuses temperature <= 0 when sampling and several
#    sequences per prompt without sampling; TRL a generation batch that is not whole groups
$BIN init --model_config tests/data/models/qwen3_tied/config.json --output_dir "$tmp/m" 2>/dev/null
G="$BIN generate --model $tmp/m --ids 1,2,3 --max_new_tokens 2 --threads 1"
expect_usage temperature_0_sampling "--temperature 0: must be > 0 when sampling" $G --do_sample true --temperature 0
if $G --temperature 0 --do_sample false >/dev/null 2>"$tmp/err"; then ok temperature_0_greedy_runs
else fail temperature_0_greedy_runs "$(cat "$tmp/err")"; fi
expect_usage greedy_several_sequences "--num_return_sequences 2 needs sampling" $G --num_return_sequences 2
printf '{"prompt": "a"}\n{"prompt": "b"}\n' >"$tmp/p.jsonl"
expect_usage grpo_partial_groups "must be a multiple of --num_generations 2" \
  $BIN grpo --model "$tmp/m" --dataset "$tmp/p.jsonl" --reward length:4 --output_dir "$tmp/o" \
  --per_device_train_batch_size 3 --num_generations 2 --threads 1
