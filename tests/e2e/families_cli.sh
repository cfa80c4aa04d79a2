#!/usr/bin/env bash
# families_cli.sh: every command and trainer on every family beyond Qwen and Llama (docs/models.md):
# mistral, gemma2, gemma3_text, olmo2 and phi3, each `still init`-ed from its tiny config with the
# byte-level tokenizer. Per family:
#   generate  greedy tokens on the KV cache equal the argmax of `still logits` (a full
#             recomputation without a cache) at every step where the top two logits are apart
#   chat      two scripted turns: the same replies with the conversation kept in the cache and
#             prefilled afresh, each turn decoding its tokens
#   serve     one completion request: HTTP 200 with completion tokens
#   sft       four steps on one batch: finite losses, the last below the first
#   distill   student of this family, teacher of the next one (same tokenizer): a finite,
#             positive divergence
#   grpo, rloo  finite losses and a nonzero, finite gradient norm
#   dpo       three steps on one batch: the first loss ln 2 (policy = reference), then lower
#   kto       finite losses
# and then `still info` as the table resolved two of them, the saved checkpoints' HF names, and
# the refusals users meet.
# asan: no
set -u
source tests/e2e/lib.sh
source tests/e2e/lib/serve.sh
TOK=tests/data/sft/tok
FAMS=(mistral gemma2 gemma3_text olmo2 phi3)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for f in "${FAMS[@]}"; do
  $BIN init --model_config tests/data/models/$f/config.json --output_dir "$tmp/$f" --tokenizer $TOK --seed 5 2>"$tmp/err" \
    || fail init_$f "$(cat "$tmp/err")"
done
cat >"$tmp/p.jsonl" <<'J'
{"prompt": "The sky is", "completion": " blue"}
{"prompt": "Two and two", "completion": " four"}
{"prompt": "abc", "completion": "def"}
{"prompt": "1 2 3", "completion": " 4"}
J
printf '%s\n' '{"prompt": "2+2=", "chosen": "4", "rejected": "5"}' '{"prompt": "3+3=", "chosen": "6", "rejected": "7"}' >"$tmp/pairs.jsonl"
printf '%s\n' '{"prompt": "2+2=", "completion": "4", "label": true}' '{"prompt": "3+3=", "completion": "7", "label": false}' >"$tmp/kto.jsonl"

# metric FILE KEY: KEY's value on every line of a metrics.jsonl, one per line
metric() { grep -o "\"$2\":[-0-9.eE+naif]*" "$1" | cut -d: -f2; }
finite() { awk '{ if ($1 != $1 + 0 || $1 == "nan" || $1 == "inf" || $1 == "-inf") bad = 1; n++ } END { exit !(n > 0 && !bad) }'; }
# the greedy token a full recomputation gives after ids $2 (no cache), or "tie" when the top two
# logits are within 1e-4 (fp32 rounding of different kernels may order them either way)
argmax_of() {
  $BIN logits --model "$1" --threads 1 --ids "$2" 2>/dev/null \
    | awk '{ for (i = 1; i <= NF; i++) { if (i == 1 || $i > b) { s = b; b = $i; k = i - 1 } else if (i == 2 || $i > s) s = $i }
             print (b - s < 1e-4 ? "tie" : k) }'
}

COMMON="--threads 2 --save_strategy no --logging_steps 1"
for k in "${!FAMS[@]}"; do
  f=${FAMS[$k]}
  t=${FAMS[$(((k + 1) % ${#FAMS[@]}))]}  # the distillation teacher: the next family
  M=$tmp/$f

  # generate: 6 greedy tokens against recomputation
  prompt="5 17 30 42 42 7 250 99"
  if gen=$($BIN generate --model "$M" --threads 1 --ids "$prompt" --max_new_tokens 6 --ignore_eos --print_ids 2>"$tmp/err"); then
    got=$(tail -1 <<<"$gen")
    seq_ids=$prompt bad=""
    for tok in $got; do
      want=$(argmax_of "$M" "$seq_ids")
      [ "$want" = tie ] || [ "$want" = "$tok" ] || bad="$bad after [$seq_ids]: $tok, recomputed $want;"
      seq_ids="$seq_ids $tok"
    done
    if [ "$(wc -w <<<"$got")" -eq 6 ] && [ -z "$bad" ]; then ok generate_$f; else fail generate_$f "tokens '$got':$bad"; fi
  else fail generate_$f "$(tail -3 "$tmp/err")"; fi

  # chat: the conversation kept in the cache or prefilled afresh
  for kc in true false; do
    printf 'hello there\n/stats\nand again\n/stats\n' | $BIN chat --model "$M" --threads 1 --max_new_tokens 5 --ignore_eos \
      --keep_cache $kc >"$tmp/chat_$kc" 2>"$tmp/chat_err_$kc"
    echo $? >"$tmp/chat_rc_$kc"
  done
  if [ "$(cat "$tmp/chat_rc_true")$(cat "$tmp/chat_rc_false")" = 00 ] && cmp -s "$tmp/chat_true" "$tmp/chat_false" \
     && [ "$(grep -c 'decode 5 tokens' "$tmp/chat_err_true")" -eq 2 ]; then
    ok chat_$f
  else fail chat_$f "$(tail -3 "$tmp/chat_err_true") / $(tail -2 "$tmp/chat_err_false")"; fi

  # serve: one request
  if ! command -v curl >/dev/null; then skip serve_$f "no curl"
  elif serve_start "$tmp" --model "$M" --max_batch 2 --max_cache_len 128; then
    resp=$(curl -s -w '\n%{http_code}' "$SERVE_URL/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "The sky is", "max_tokens": 4, "temperature": 0}')
    serve_stop
    if [ "$(tail -1 <<<"$resp")" = 200 ] && grep -q '"completion_tokens":4' <<<"$resp"; then ok serve_$f
    else fail serve_$f "$resp"; fi
  fi

  # sft: one batch, four steps
  if $BIN sft --model "$M" --dataset "$tmp/p.jsonl" --output_dir "$tmp/s_$f" --max_steps 4 --per_device_train_batch_size 4 \
       --pad_to_multiple_of 16 --learning_rate 1e-2 --shuffle false $COMMON >/dev/null 2>"$tmp/err"; then
    l=$(metric "$tmp/s_$f/metrics.jsonl" loss)
    if finite <<<"$l" && [ "$(wc -l <<<"$l")" -eq 4 ] && awk 'NR == 1 { a = $1 } END { exit !($1 < a) }' <<<"$l"; then
      ok sft_$f
    else fail sft_$f "losses $(tr '\n' ' ' <<<"$l")"; fi
  else fail sft_$f "$(tail -3 "$tmp/err")"; fi

  # distill: a teacher of another family
  if $BIN distill --model "$M" --teacher "$tmp/$t" --dataset "$tmp/p.jsonl" --output_dir "$tmp/d_$f" --max_steps 2 \
       --per_device_train_batch_size 2 --max_completion_length 6 --pad_to_multiple_of 16 $COMMON >/dev/null 2>"$tmp/err"; then
    l=$(metric "$tmp/d_$f/metrics.jsonl" loss)
    if finite <<<"$l" && awk '{ if (!($1 > 0)) bad = 1 } END { exit bad }' <<<"$l"; then ok distill_${f}_from_$t
    else fail distill_${f}_from_$t "losses $(tr '\n' ' ' <<<"$l")"; fi
  else fail distill_${f}_from_$t "$(tail -3 "$tmp/err")"; fi

  # grpo and rloo
  for rl in grpo rloo; do
    if $BIN $rl --model "$M" --dataset "$tmp/p.jsonl" --output_dir "$tmp/${rl}_$f" --max_steps 2 --per_device_train_batch_size 4 \
         --num_generations 4 --max_completion_length 6 --pad_to_multiple_of 16 --reward length:4 $COMMON \
         >/dev/null 2>"$tmp/err"; then
      l=$(metric "$tmp/${rl}_$f/metrics.jsonl" loss) g=$(metric "$tmp/${rl}_$f/metrics.jsonl" grad_norm)
      if finite <<<"$l" && finite <<<"$g" && awk '{ if (!($1 > 0)) bad = 1 } END { exit bad }' <<<"$g"; then ok ${rl}_$f
      else fail ${rl}_$f "losses $(tr '\n' ' ' <<<"$l"), grad norms $(tr '\n' ' ' <<<"$g")"; fi
    else fail ${rl}_$f "$(tail -3 "$tmp/err")"; fi
  done

  # dpo: one batch, three steps
  P="--pad_to_multiple_of 8 --per_device_train_batch_size 2 --learning_rate 1e-2"
  if $BIN dpo --model "$M" --dataset "$tmp/pairs.jsonl" --output_dir "$tmp/dpo_$f" --max_steps 3 --shuffle false $P $COMMON \
       >/dev/null 2>"$tmp/err"; then
    l=$(metric "$tmp/dpo_$f/metrics.jsonl" loss)
    if finite <<<"$l" && awk 'NR == 1 { a = $1 } END { exit !(NR == 3 && a > 0.6931 && a < 0.6932 && $1 < a) }' <<<"$l"; then
      ok dpo_$f
    else fail dpo_$f "losses $(tr '\n' ' ' <<<"$l")"; fi
  else fail dpo_$f "$(tail -3 "$tmp/err")"; fi

  # kto
  if $BIN kto --model "$M" --dataset "$tmp/kto.jsonl" --output_dir "$tmp/kto_$f" --max_steps 2 $P $COMMON \
       >/dev/null 2>"$tmp/err"; then
    l=$(metric "$tmp/kto_$f/metrics.jsonl" loss)
    if finite <<<"$l" && [ "$(wc -l <<<"$l")" -eq 2 ]; then ok kto_$f; else fail kto_$f "losses $(tr '\n' ' ' <<<"$l")"; fi
  else fail kto_$f "$(tail -3 "$tmp/err")"; fi
done

out=$($BIN info --model "$tmp/olmo2" 2>&1)
if grep -q "family          olmo2 (Olmo2ForCausalLM): norms post-attention post-mlp" <<<"$out" \
   && grep -q "qk norm over the projection" <<<"$out" && grep -q "attention       layers 0-1: global" <<<"$out"; then
  ok info_olmo2_resolved
else fail info_olmo2_resolved "$out"; fi
out=$($BIN info --model "$tmp/phi3" 2>&1)
if grep -q "fused qkv_proj, fused gate_up_proj" <<<"$out" && grep -q "sliding window 262144, rope theta 10000 (longrope)" <<<"$out"; then
  ok info_phi3_resolved
else fail info_phi3_resolved "$out"; fi

# the saved checkpoint keeps the family's names: fused projections stay fused, post-norms stay
$BIN sft --model "$tmp/phi3" --dataset "$tmp/p.jsonl" --output_dir "$tmp/save_phi3" --max_steps 1 $COMMON >/dev/null 2>&1
$BIN sft --model "$tmp/olmo2" --dataset "$tmp/p.jsonl" --output_dir "$tmp/save_olmo2" --max_steps 1 $COMMON >/dev/null 2>&1
if grep -q '"model.layers.1.self_attn.qkv_proj.weight"' "$tmp/save_phi3/model.safetensors" \
   && grep -q '"model.layers.1.mlp.gate_up_proj.weight"' "$tmp/save_phi3/model.safetensors" \
   && ! grep -q 'q_proj' "$tmp/save_phi3/model.safetensors" \
   && grep -q '"model.layers.0.post_feedforward_layernorm.weight"' "$tmp/save_olmo2/model.safetensors"; then
  ok sft_saves_hf_names
else fail sft_saves_hf_names "tensor names in the saved checkpoints"; fi

# refusals, by name
expect_err lora_fused_refused "LoRA on phi3 (fused qkv_proj / gate_up_proj) is not supported" \
  $BIN sft --model "$tmp/phi3" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" --max_steps 1 --use_peft true --lora_r 4
expect_err serve_longrope_refused "longer than this phi3 model's longrope original_max_position_embeddings 4096" \
  $BIN serve --model "$tmp/phi3" --port 0 --max_cache_len 8192 --threads 1
sed 's/"sliding_window": 262144/"sliding_window": 8/' tests/data/models/phi3/config.json >"$tmp/phi3/config.json"
if $BIN generate --model "$tmp/phi3" --threads 1 --prompt "The sky is" --max_new_tokens 12 >"$tmp/w8.out" 2>&1; then
  ok window_binds_runs  # a sliding window shorter than the sequence: the windowed ops
else fail window_binds_runs "$(tail -3 "$tmp/w8.out")"; fi
sed 's/"attention_bias": false/"attention_bias": false, "clip_qkv": 8/' tests/data/models/olmo2/config.json >"$tmp/olmo2/config.json"
expect_err unknown_field_refused 'field "clip_qkv" is not known for model_type olmo2' \
  $BIN generate --model "$tmp/olmo2" --threads 1 --prompt "x" --max_new_tokens 2
