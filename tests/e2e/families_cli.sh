#!/usr/bin/env bash
# families_cli.sh: every command on the families beyond Qwen and Llama (docs/models.md): `still
# init` from the tiny olmo2 / phi3 configs with the byte-level tokenizer, then info, generate,
# chat, sft (saving the exact HF tensor names), distill with a student and a teacher of different
# families, grpo, dpo, kto and serve; and the refusals users meet.
# asan: no
set -u
source tests/e2e/lib.sh
source tests/e2e/lib/serve.sh
TOK=tests/data/sft/tok
for f in olmo2 phi3; do
  $BIN init --model_config tests/data/models/$f/config.json --output_dir "$tmp/$f" --tokenizer $TOK --seed 5 2>"$tmp/err" \
    || fail init_$f "$(cat "$tmp/err")"
done
cat >"$tmp/p.jsonl" <<'J'
{"prompt": "The sky is", "completion": " blue"}
{"prompt": "Two and two", "completion": " four"}
{"prompt": "abc", "completion": "def"}
{"prompt": "1 2 3", "completion": " 4"}
J

out=$($BIN info --model "$tmp/olmo2" 2>&1)
if grep -q "family          olmo2 (Olmo2ForCausalLM): norms post-attention post-mlp" <<<"$out" \
   && grep -q "qk norm over the projection" <<<"$out" && grep -q "attention       layers 0-1: global" <<<"$out"; then
  ok info_olmo2_resolved
else fail info_olmo2_resolved "$out"; fi
out=$($BIN info --model "$tmp/phi3" 2>&1)
if grep -q "fused qkv_proj, fused gate_up_proj" <<<"$out" && grep -q "sliding window 262144, rope theta 10000 (longrope)" <<<"$out"; then
  ok info_phi3_resolved
else fail info_phi3_resolved "$out"; fi

for f in olmo2 phi3; do
  if $BIN generate --model "$tmp/$f" --threads 1 --prompt "The sky is" --max_new_tokens 8 --ignore_eos >"$tmp/g_$f" 2>"$tmp/err" \
     && [ -s "$tmp/g_$f" ]; then ok generate_$f; else fail generate_$f "$(tail -3 "$tmp/err")"; fi
  if printf 'hello\n' | $BIN chat --model "$tmp/$f" --threads 1 --max_new_tokens 6 --ignore_eos >"$tmp/c_$f" 2>"$tmp/err"; then
    ok chat_$f; else fail chat_$f "$(tail -3 "$tmp/err")"; fi
  if $BIN sft --model "$tmp/$f" --dataset "$tmp/p.jsonl" --output_dir "$tmp/s_$f" --max_steps 2 --threads 2 \
       --per_device_train_batch_size 2 --pad_to_multiple_of 16 --save_strategy no >/dev/null 2>"$tmp/err" \
     && $BIN info --model "$tmp/s_$f" >/dev/null 2>&1; then ok sft_$f; else fail sft_$f "$(tail -3 "$tmp/err")"; fi
done
# the saved checkpoint keeps the family's names: fused projections stay fused, post-norms stay
if grep -q '"model.layers.1.self_attn.qkv_proj.weight"' "$tmp/s_phi3/model.safetensors" \
   && grep -q '"model.layers.1.mlp.gate_up_proj.weight"' "$tmp/s_phi3/model.safetensors" \
   && ! grep -q 'q_proj' "$tmp/s_phi3/model.safetensors" \
   && grep -q '"model.layers.0.post_feedforward_layernorm.weight"' "$tmp/s_olmo2/model.safetensors"; then
  ok sft_saves_hf_names
else fail sft_saves_hf_names "tensor names in the saved checkpoints"; fi

if $BIN distill --model "$tmp/phi3" --teacher "$tmp/olmo2" --dataset "$tmp/p.jsonl" --output_dir "$tmp/d" --max_steps 2 \
     --threads 2 --per_device_train_batch_size 2 --max_completion_length 6 --pad_to_multiple_of 16 --save_strategy no \
     >/dev/null 2>"$tmp/err" && [ -f "$tmp/d/model.safetensors" ]; then ok distill_phi3_from_olmo2
else fail distill_phi3_from_olmo2 "$(tail -3 "$tmp/err")"; fi
if $BIN grpo --model "$tmp/olmo2" --dataset "$tmp/p.jsonl" --output_dir "$tmp/r" --max_steps 1 --threads 2 \
     --per_device_train_batch_size 4 --num_generations 4 --max_completion_length 6 --pad_to_multiple_of 16 \
     --reward length:4 --save_strategy no >/dev/null 2>"$tmp/err" && [ -f "$tmp/r/model.safetensors" ]; then
  ok grpo_olmo2
else fail grpo_olmo2 "$(tail -3 "$tmp/err")"; fi

printf '%s\n' '{"prompt": "2+2=", "chosen": "4", "rejected": "5"}' '{"prompt": "3+3=", "chosen": "6", "rejected": "7"}' >"$tmp/pairs.jsonl"
printf '%s\n' '{"prompt": "2+2=", "completion": "4", "label": true}' '{"prompt": "3+3=", "completion": "7", "label": false}' >"$tmp/kto.jsonl"
P="--threads 2 --pad_to_multiple_of 8 --per_device_train_batch_size 2 --save_strategy no"
if $BIN dpo --model "$tmp/phi3" --dataset "$tmp/pairs.jsonl" --output_dir "$tmp/dpo" --max_steps 2 $P >/dev/null 2>"$tmp/err" \
   && [ -f "$tmp/dpo/model.safetensors" ]; then ok dpo_phi3; else fail dpo_phi3 "$(tail -3 "$tmp/err")"; fi
if $BIN kto --model "$tmp/olmo2" --dataset "$tmp/kto.jsonl" --output_dir "$tmp/kto" --max_steps 1 $P >/dev/null 2>"$tmp/err" \
   && [ -f "$tmp/kto/model.safetensors" ]; then ok kto_olmo2; else fail kto_olmo2 "$(tail -3 "$tmp/err")"; fi

if command -v curl >/dev/null && serve_start "$tmp" --model "$tmp/phi3" --max_batch 2 --max_cache_len 256; then
  resp=$(curl -s "$SERVE_URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "The sky is", "max_tokens": 4}')
  serve_stop
  if grep -q '"text"' <<<"$resp"; then ok serve_phi3; else fail serve_phi3 "$resp"; fi
else skip serve_phi3 "no curl or the server did not start"; fi

# refusals, by name
expect_err lora_fused_refused "LoRA on phi3 (fused qkv_proj / gate_up_proj) is not supported" \
  $BIN sft --model "$tmp/phi3" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" --max_steps 1 --use_peft true --lora_r 4
sed 's/"sliding_window": 262144/"sliding_window": 8/' tests/data/models/phi3/config.json >"$tmp/phi3/config.json"
if $BIN generate --model "$tmp/phi3" --threads 1 --prompt "The sky is" --max_new_tokens 12 >"$tmp/w8.out" 2>&1; then
  ok window_binds_runs  # a sliding window shorter than the sequence: the windowed ops
else fail window_binds_runs "$(tail -3 "$tmp/w8.out")"; fi
sed 's/"attention_bias": false/"attention_bias": false, "clip_qkv": 8/' tests/data/models/olmo2/config.json >"$tmp/olmo2/config.json"
expect_err unknown_field_refused 'field "clip_qkv" is not known for model_type olmo2' \
  $BIN generate --model "$tmp/olmo2" --threads 1 --prompt "x" --max_new_tokens 2
