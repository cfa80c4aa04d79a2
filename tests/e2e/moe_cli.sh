#!/usr/bin/env bash
# moe_cli.sh: the mixture-of-experts families from the command line (docs/models.md): greedy
# generation on qwen3_moe, mixtral and gpt_oss, --moe_capacity_factor E / K giving the exact ids, a bad
# factor refused as a flag error, `still sft` logging aux_loss, LoRA on an MoE model refused by name,
# `still info` on gpt_oss printing what the family table resolved.
# asan: yes
set -u
source tests/e2e/lib.sh
ids="5 17 300 42 42 7 250"
for m in qwen3_moe mixtral gpt_oss; do
  M=tests/data/models/$m
  a=$($BIN generate --model $M --ids "$ids" --max_new_tokens 6 --ignore_eos --print_ids --threads 2 2>"$tmp/err" | tail -1)
  [ "$(wc -w <<<"$a")" -eq 6 ]; check "generate_$m" $? "ids '$a': $(tail -2 "$tmp/err")"
  # E / K <= 4 for these fixtures: every expert can hold every token, nothing is dropped
  b=$($BIN generate --model $M --ids "$ids" --max_new_tokens 6 --ignore_eos --print_ids --threads 2 \
      --moe_capacity_factor 4 2>>"$tmp/err" | tail -1)
  [ -n "$a" ] && [ "$a" = "$b" ]; check "capacity_exact_$m" $? "'$a' vs '$b'"
done
expect_rc capacity_negative 2 "--moe_capacity_factor" $BIN generate --model tests/data/models/mixtral --ids "1 2" \
  --moe_capacity_factor -1
$BIN sft --model tests/data/models/mixtral --dataset tests/data/sft/ids.jsonl --output_dir "$tmp/out" --max_steps 1 \
  --threads 2 --save_strategy no --logging_steps 1 >"$tmp/sft.out" 2>"$tmp/err"
grep -q '"aux_loss"' "$tmp/out/metrics.jsonl" 2>/dev/null; check sft_aux_loss_logged $? "$(tail -2 "$tmp/err")"
expect_err lora_refused "LoRA on a mixture-of-experts model" $BIN sft --model tests/data/models/mixtral \
  --dataset tests/data/sft/ids.jsonl --output_dir "$tmp/lora" --max_steps 1 --use_peft --threads 2
$BIN info --model tests/data/models/gpt_oss >"$tmp/info" 2>"$tmp/err"
grep -q "attention       layer 0: sliding window 4, .*a sink logit per head" "$tmp/info" &&
  grep -q "attention       layer 1: global" "$tmp/info" && grep -q "interleaved.*min(gate, 7)" "$tmp/info" &&
  grep -q "rope            yarn: factor 8, .*truncate no" "$tmp/info"
check info_gpt_oss $? "$(head -12 "$tmp/info") $(tail -2 "$tmp/err")"
# gpt_oss resumed from a checkpoint (its experts transposed between the files and memory, in the
# model and the optimizer file) = uninterrupted, bit for bit; --save_only_model checkpoints too
R="--model tests/data/models/gpt_oss --dataset tests/data/sft/ids.jsonl --max_steps 4 --save_steps 2
   --per_device_train_batch_size 2 --logging_steps 1 --threads 2"
$BIN sft $R --output_dir "$tmp/full" >/dev/null 2>"$tmp/err"
$BIN sft $R --output_dir "$tmp/part" --stop_after_steps 3 >/dev/null 2>>"$tmp/err"
$BIN sft $R --output_dir "$tmp/part" --resume_from_checkpoint latest >/dev/null 2>>"$tmp/err"
cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors" &&
  cmp -s "$tmp/full/checkpoint-4/optimizer.safetensors" "$tmp/part/checkpoint-4/optimizer.safetensors"
check resume_gpt_oss $? "$(tail -3 "$tmp/err")"
