#!/usr/bin/env bash
# sft_cli.sh: still sft end to end on tiny models: TRL formats through the tokenizer and chat
# template, the TorchNeuron command line, checkpoints, bit-identical resume, SIGKILL during a
# save, and the malformed-dataset corpus (tests/data/sft/malformed/manifest.tsv).
# asan: yes
set -u
source tests/e2e/lib.sh
M=tests/data/models/qwen3_tied
IDS=tests/data/sft/ids.jsonl
COMMON="--threads 2 --pad_to_multiple_of 16 --shuffle true --learning_rate 1e-3"

# a model with the tiny byte-level tokenizer and a {% generation %} chat template
$BIN init --model_config $M/config.json --output_dir "$tmp/m" --tokenizer tests/data/sft/tok 2>/dev/null
$BIN init --model_config $M/config.json --output_dir "$tmp/m_nogen" --tokenizer tests/data/sft/tok_nogen 2>/dev/null
cat >"$tmp/chat.jsonl" <<'J'
{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
{"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]}
{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}
J
cat >"$tmp/pc.jsonl" <<'J'
{"prompt": "The sky is", "completion": " blue."}
{"prompt": "Two and two make", "completion": " four."}
{"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": "b"}]}
J
head -2 "$tmp/pc.jsonl" >"$tmp/pc_std.jsonl"
sed -n 3p "$tmp/pc.jsonl" >"$tmp/pc_conv.jsonl"
printf '{"text": "hello world"}\n{"text": "the quick brown fox"}\n{"text": "abc<|im_end|>"}\n' >"$tmp/text.jsonl"

# 1. the TorchNeuron SFT command line as written (dataset names a local JSONL file)
out=$($BIN sft --model_name_or_path "$tmp/m" --dataset_name "$tmp/text.jsonl" --dataset_train_split train_sft \
  --output_dir "$tmp/tn" --dtype bfloat16 --max_length 2048 --packing true --packing_strategy wrapped \
  --learning_rate 2e-5 --warmup_steps 0.03 --num_train_epochs 1 --logging_steps 2 --per_device_train_batch_size 4 \
  --gradient_accumulation_steps 4 --save_only_model true --torch_compile true --threads 2 2>&1)
if [ $? -eq 0 ] && grep -q "plans replace compilation" <<<"$out" && [ -f "$tmp/tn/model.safetensors" ] \
   && grep -q '"bfloat16"' "$tmp/tn/config.json" && [ -f "$tmp/tn/tokenizer.json" ] \
   && [ -f "$tmp/tn/generation_config.json" ] && [ ! -f "$tmp/tn/checkpoint-1/optimizer.safetensors" ] \
   && [ -f "$tmp/tn/checkpoint-1/checkpoint_complete.json" ] && [ -s "$tmp/tn/loss.svg" ]; then
  ok torchneuron_command_line
else fail torchneuron_command_line "$(tail -5 <<<"$out"; ls "$tmp/tn" "$tmp/tn/checkpoint-1" 2>&1)"; fi
expect_keys metrics_names "$tmp/tn/metrics.jsonl" loss grad_norm learning_rate epoch num_tokens mean_token_accuracy \
  entropy tokens_per_second plans

# 2. every format trains through the tokenizer and template
for f in chat pc_std pc_conv text; do
  if $BIN sft --model "$tmp/m" --dataset "$tmp/$f.jsonl" --output_dir "$tmp/o_$f" --max_steps 2 $COMMON \
       --save_strategy no >/dev/null 2>"$tmp/err"; then ok "format_$f"; else fail "format_$f" "$(tail -3 "$tmp/err")"; fi
done
if $BIN sft --model "$tmp/m" --dataset "$tmp/chat.jsonl" --output_dir "$tmp/o_ao" --max_steps 1 --assistant_only_loss \
     --chat_template_kwargs '{"enable_thinking": false}' $COMMON --save_strategy no >/dev/null 2>"$tmp/err"; then
  ok assistant_only_loss
else fail assistant_only_loss "$(tail -3 "$tmp/err")"; fi
expect_err assistant_only_without_markers "{% generation %}" \
  $BIN sft --model "$tmp/m_nogen" --dataset "$tmp/chat.jsonl" --output_dir "$tmp/x" --assistant_only_loss
expect_err hub_dataset_id "load_dataset('trl-lib/Capybara'" \
  $BIN sft --model "$tmp/m" --dataset trl-lib/Capybara --output_dir "$tmp/x"
expect_err bad_chat_template_kwargs "--chat_template_kwargs must be a JSON object" \
  $BIN sft --model "$tmp/m" --dataset "$tmp/chat.jsonl" --output_dir "$tmp/x" --chat_template_kwargs '[1]'
expect_err max_plans "--max_plans is 1" \
  $BIN sft --model $M --dataset $IDS --output_dir "$tmp/x" --max_plans 1 --pad_to_multiple_of 1 --per_device_train_batch_size 2 --threads 2

# 3. malformed datasets: each fails with its message; --skip_bad_rows counts instead
while IFS=$'\t' read -r file want; do
  expect_err "malformed_${file%.*}" "$want" $BIN sft --model "$tmp/m" --dataset "tests/data/sft/malformed/$file" \
    --output_dir "$tmp/x" --threads 2
done <tests/data/sft/malformed/manifest.tsv
out=$($BIN sft --model "$tmp/m" --dataset tests/data/sft/malformed/text_not_string.jsonl --output_dir "$tmp/skip" \
  --skip_bad_rows --max_steps 1 $COMMON 2>&1)
if [ $? -eq 0 ] && grep -q "1 bad rows skipped" <<<"$out"; then ok skip_bad_rows; else fail skip_bad_rows "$(tail -3 <<<"$out")"; fi

# 3b. pre-tokenised rows as TRL reads them (the model has no tokenizer.json): the format from the
#     first row's keys (a "text" string value does not make the row text), completion_mask only with
#     completion-only loss (off by default without prompt/completion keys), a labels column as is
printf '{"input_ids": [5, 6, 7, 8], "source": "text", "completion_mask": [0, 0, 0, 0]}\n' >"$tmp/pt.jsonl"
if $BIN sft --model $M --dataset "$tmp/pt.jsonl" --output_dir "$tmp/pt" --max_steps 1 $COMMON --save_strategy no \
     >/dev/null 2>"$tmp/err"; then ok pretokenised_keys_and_default_mask; else fail pretokenised_keys_and_default_mask "$(tail -3 "$tmp/err")"; fi
expect_err completion_mask_when_asked "no usable example" $BIN sft --model $M --dataset "$tmp/pt.jsonl" \
  --output_dir "$tmp/x" --completion_only_loss true $COMMON
printf '{"input_ids": [5, 6, 7, 8], "labels": [-100, -100, -100, -100]}\n' >"$tmp/lab.jsonl"
expect_err labels_column_used "no usable example" $BIN sft --model $M --dataset "$tmp/lab.jsonl" --output_dir "$tmp/x" $COMMON

# 4. resume protocol: interrupted after checkpoint 4 and resumed = uninterrupted, bit for bit
R="--model $M --dataset $IDS --max_steps 10 --save_steps 4 --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --logging_steps 1 $COMMON"
$BIN sft $R --output_dir "$tmp/full" >/dev/null 2>&1
$BIN sft $R --output_dir "$tmp/part" --stop_after_steps 6 >/dev/null 2>&1
mkdir -p "$tmp/part/checkpoint-9"  # an incomplete checkpoint (no marker) is never "latest"
$BIN sft $R --output_dir "$tmp/part" --resume_from_checkpoint latest >/dev/null 2>"$tmp/err"
if cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors" && grep -q "checkpoint-4 at step 4" "$tmp/err" \
   && cmp -s "$tmp/full/checkpoint-8/optimizer.safetensors" "$tmp/part/checkpoint-8/optimizer.safetensors"; then
  ok resume_bit_identical
else fail resume_bit_identical "$(tail -3 "$tmp/err")"; fi
if [ "$(wc -l <"$tmp/part/metrics.jsonl")" = "$(wc -l <"$tmp/full/metrics.jsonl")" ]; then ok resume_metrics_continue
else fail resume_metrics_continue "$(wc -l <"$tmp/part/metrics.jsonl") vs $(wc -l <"$tmp/full/metrics.jsonl") lines"; fi
expect_err resume_refuses_incomplete "is incomplete" $BIN sft $R --output_dir "$tmp/part" --resume_from_checkpoint "$tmp/part/checkpoint-9"
expect_err resume_refuses_model_only "save_only_model" $BIN sft --model "$tmp/m" --dataset "$tmp/text.jsonl" \
  --output_dir "$tmp/tn" --resume_from_checkpoint "$tmp/tn/checkpoint-1" --threads 2

# 5. SIGKILL while saving (a checkpoint every step): whatever was killed, the newest complete
#    checkpoint resumes, and every incomplete one is refused
K="--model $M --dataset $IDS --max_steps 400 --save_steps 1 --save_total_limit 2 --per_device_train_batch_size 8 $COMMON"
bad=""
for delay in 0 0.01 0.02 0.04; do
  rm -rf "$tmp/k"
  $BIN sft $K --output_dir "$tmp/k" >/dev/null 2>&1 & pid=$!
  for i in $(seq 200); do [ -f "$tmp/k/checkpoint-2/checkpoint_complete.json" ] && break; sleep 0.05; done
  sleep $delay; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  latest=$(ls -d "$tmp"/k/checkpoint-* 2>/dev/null | sort -t- -k2 -n | while read d; do [ -f "$d/checkpoint_complete.json" ] && echo "$d"; done | tail -1)
  [ -n "$latest" ] || { bad="$bad no-complete-checkpoint@$delay"; continue; }
  $BIN sft $K --output_dir "$tmp/k" --resume_from_checkpoint "$latest" --stop_after_steps 1 >/dev/null 2>"$tmp/err" \
    || bad="$bad resume-failed@$delay:$(tail -1 "$tmp/err")"
done
if [ -z "$bad" ]; then ok sigkill_during_save_leaves_loadable_checkpoint; else fail sigkill_during_save_leaves_loadable_checkpoint "$bad"; fi
