#!/usr/bin/env bash
# model_cli.sh: still init / info / logits / loss from the command line, and their errors.
# asan: yes
set -u
source tests/e2e/lib.sh

cfg=tests/data/models/qwen3_tied/config.json
if $BIN init --model_config $cfg --output_dir "$tmp/m" --seed 3 2>"$tmp/err" \
   && [ -f "$tmp/m/model.safetensors" ] && [ -f "$tmp/m/config.json" ] && [ -f "$tmp/m/generation_config.json" ]; then
  ok init_writes_hf_layout
else fail init_writes_hf_layout "$(cat "$tmp/err")"; fi

# config.json keeps every given field as given (compared on whitespace-free text; 1.0 == 1)
flat() { tr -d '[:space:]' <"$1" | sed -E 's/\.0([],}])/\1/g'; }
src=$(flat $cfg); dst=$(flat "$tmp/m/config.json")
missing=""
for kv in $(grep -oE '"[a-z_]+":("[^"]*"|\[[^]]*\]|[^,{}]+)' <<<"$src"); do
  grep -qF -- "$kv" <<<"$dst" || missing="$missing $kv"
done
if [ -z "$missing" ]; then ok init_keeps_config_fields; else fail init_keeps_config_fields "$missing"; fi
if grep -q '"do_sample":[[:space:]]*false' "$tmp/m/generation_config.json"; then ok init_generation_config_greedy
else fail init_generation_config_greedy "$(cat "$tmp/m/generation_config.json")"; fi

# one generation_config.json writer: a model trained from a directory without one gets what init writes
$BIN sft --model tests/data/models/qwen3_tied --dataset tests/data/sft/ids.jsonl --output_dir "$tmp/gc" --max_steps 1 \
  --save_strategy no --threads 2 --pad_to_multiple_of 16 >/dev/null 2>"$tmp/err"
$BIN init --model_config tests/data/models/qwen3_tied/config.json --output_dir "$tmp/gci" 2>/dev/null
if cmp -s "$tmp/gc/generation_config.json" "$tmp/gci/generation_config.json"; then ok one_generation_config_writer
else fail one_generation_config_writer "$(cat "$tmp/gc/generation_config.json" "$tmp/err")"; fi

# same seed, same bytes; another seed, other bytes
$BIN init --model_config $cfg --output_dir "$tmp/m2" --seed 3 2>/dev/null
$BIN init --model_config $cfg --output_dir "$tmp/m3" --seed 4 2>/dev/null
if cmp -s "$tmp/m/model.safetensors" "$tmp/m2/model.safetensors" && ! cmp -s "$tmp/m/model.safetensors" "$tmp/m3/model.safetensors"; then
  ok init_deterministic_by_seed
else fail init_deterministic_by_seed "bytes differ for one seed or agree across seeds"; fi

out=$($BIN info --model "$tmp/m" --batch 2 --seq 256 2>&1)
if grep -q "parameters" <<<"$out" && grep -q "training" <<<"$out" && grep -q "plan train B=2 T=256" <<<"$out"; then ok info_reports_plans
else fail info_reports_plans "$out"; fi
# OpenMP waiters sleep unless the caller chose a policy (still restarts itself with it)
w1=$(env -u OMP_WAIT_POLICY $BIN info --model "$tmp/m" 2>&1 | grep '^openmp')
w2=$(OMP_WAIT_POLICY=active $BIN info --model "$tmp/m" 2>&1 | grep '^openmp')
if grep -q "waiting passive" <<<"$w1" && grep -q "waiting active" <<<"$w2"; then ok omp_wait_policy_default
else fail omp_wait_policy_default "unset: '$w1', active: '$w2'"; fi

lines=$($BIN logits --model "$tmp/m" --ids "1 2 3 4" --all 2>/dev/null | wc -l)
cols=$($BIN logits --model "$tmp/m" --ids "1 2 3 4" 2>/dev/null | wc -w)
if [ "$lines" = 4 ] && [ "$cols" = 384 ]; then ok logits_shape; else fail logits_shape "lines=$lines cols=$cols"; fi
digits=$($BIN logits --model "$tmp/m" --ids "1 2 3 4" 2>/dev/null | tr ' ' '\n' | head -50 | sed 's/e.*//; s/[-.]//g; s/^0*//' | awk '{ if (length($0) > m) m = length($0) } END { print m }')
if [ "$digits" = 9 ]; then ok logits_9_significant_digits; else fail logits_9_significant_digits "max digits $digits"; fi

# bf16 storage gives close logits
a=$($BIN logits --model "$tmp/m" --ids "1 2 3 4" 2>/dev/null | awk '{print $7}')
b=$($BIN logits --model "$tmp/m" --ids "1 2 3 4" --dtype bfloat16 2>/dev/null | awk '{print $7}')
if [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(d < 0.05)}'; then ok logits_bf16_storage
else fail logits_bf16_storage "$a vs $b"; fi

loss=$($BIN loss --model "$tmp/m" --ids "1 2 3 4 5 6" --grads "$tmp/g.safetensors" 2>/dev/null)
if [[ "$loss" =~ ^[0-9]\.[0-9]+$ ]] && [ -s "$tmp/g.safetensors" ]; then ok loss_and_grads; else fail loss_and_grads "$loss"; fi

expect_err ids_outside_vocab "token id 99999 is outside the vocabulary" $BIN logits --model "$tmp/m" --ids "1 99999"
expect_err ids_not_numbers "\"x\" is not a token id" $BIN loss --model "$tmp/m" --ids "1 x 3"
# usage errors exit 2 (docs/errors.md), a file that cannot be read 1
expect_rc missing_model 1 "nonexistent" $BIN logits --model "$tmp/nonexistent" --ids "1"
expect_rc unknown_flag 2 "did you mean --ids" $BIN logits --model "$tmp/m" --idz "1"
expect_err unsupported_flag "not supported yet" $BIN loss --model "$tmp/m" --ids "1 2" --use_peft true
echo '{"model_type":"qwen3","vocab_size":10}' > "$tmp/bad.json"
expect_err config_missing_field "hidden_size" $BIN init --model_config "$tmp/bad.json" --output_dir "$tmp/bad"
# config.json sizes are bounded before anything is sized from them: heads x head_dim = 2^32 once
# wrapped an int, and `still init` wrote a 1-D o_proj and exited 0
sed -E 's/"num_attention_heads": 4/"num_attention_heads": 65536/; s/"num_key_value_heads": 2/"num_key_value_heads": 65536/;
        s/"head_dim": 16/"head_dim": 65536/' $cfg > "$tmp/heads65536.json"
expect_err init_refuses_heads_65536 'field "num_attention_heads" is 65536, more than the 1024 still supports' \
  $BIN init --model_config "$tmp/heads65536.json" --output_dir "$tmp/heads65536"
if [ ! -e "$tmp/heads65536/model.safetensors" ]; then ok init_writes_nothing_for_heads_65536
else fail init_writes_nothing_for_heads_65536 "model.safetensors written"; fi
sed -E 's/"head_dim": 16/"head_dim": 512/' $cfg > "$tmp/hd512.json"
expect_err init_refuses_head_dim_512 'field "head_dim" is 512, more than the 256 still supports (the attention kernels)' \
  $BIN init --model_config "$tmp/hd512.json" --output_dir "$tmp/hd512"
sed -E 's/"vocab_size": 384/"vocab_size": 1048577/' $cfg > "$tmp/v2p20.json"
expect_err init_refuses_vocab_over_2p20 'field "vocab_size" is 1048577, more than the 1048576 still supports' \
  $BIN init --model_config "$tmp/v2p20.json" --output_dir "$tmp/v2p20" --device ref
cp -r "$tmp/m" "$tmp/trunc"; head -c 1000 "$tmp/m/model.safetensors" > "$tmp/trunc/model.safetensors"
expect_err truncated_checkpoint "model.safetensors" $BIN logits --model "$tmp/trunc" --ids "1"
expect_rc unknown_command 2 "did you mean 'logits'" $BIN logit
# memory: a model or a plan that does not fit the budget is refused before allocation
expect_err memory_refuses_model "needs" $BIN logits --model "$tmp/m" --ids "1 2" --max_memory 1KiB
out=$($BIN logits --model "$tmp/m" --ids "1 2" --pad_to_multiple_of 200000 --max_memory 256MiB 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && grep -q "plan score B=1 T=200000 needs .* but --max_memory 256.0 MiB leaves" <<<"$out"; then ok memory_refuses_plan
else fail memory_refuses_plan "rc=$rc $out"; fi
expect_err memory_bad_size "expected a size" $BIN logits --model "$tmp/m" --ids "1 2" --max_memory lots
