#!/usr/bin/env bash
# moe_cli.sh: the mixture-of-experts families from the command line (docs/models.md): greedy
# generation on qwen3_moe, mixtral and gpt_oss, --moe_capacity_factor E / K giving the exact ids, a bad
# factor refused as a flag error, `still sft` logging aux_loss (LoRA on MoE: lora_moe_cli.sh),
# `still info` on gpt_oss printing what the family table resolved, gpt_oss resumed bit for bit, and the
# load-balancing loss in grpo, rloo and distill.
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
# the load-balancing loss outside sft: grpo, rloo and distill on gpt_oss add router_aux_loss_coef *
# aux_loss to the loss they log and train the router with it. The same run with the coefficient 0
# logs the same aux_loss (the same rollouts and forward), a loss smaller by exactly coef * aux_loss,
# and trains other weights; with output_router_logits false no aux_loss is logged.
for v in a z off; do
  mkdir -p "$tmp/$v"
  cp tests/data/models/gpt_oss/model.safetensors tests/data/sft/tok/* "$tmp/$v/"
done
cp tests/data/models/gpt_oss/config.json "$tmp/a/"
sed 's/"router_aux_loss_coef": 0.05/"router_aux_loss_coef": 0.0/' tests/data/models/gpt_oss/config.json >"$tmp/z/config.json"
sed 's/"output_router_logits": true/"output_router_logits": false/' tests/data/models/gpt_oss/config.json >"$tmp/off/config.json"
for i in 0 1 2 3; do echo "{\"prompt\": \"Q$i: $i + 1?\", \"answer\": $((i + 1))}"; done >"$tmp/rl.jsonl"
AUXC="--dataset $tmp/rl.jsonl --max_completion_length 6 --per_device_train_batch_size 2 --gradient_accumulation_steps 2
      --max_steps 1 --logging_steps 1 --threads 2 --save_strategy no --learning_rate 1e-3 --pad_to_multiple_of 8"
aux_case() {  # name, command, flags...
  local name=$1 cmd=$2; shift 2
  for v in a z off; do
    $BIN $cmd --model "$tmp/$v" $AUXC --output_dir "$tmp/${name}_$v" "$@" >/dev/null 2>"$tmp/${name}_$v.err"
  done
  /usr/bin/python3 - "$tmp/${name}_a/metrics.jsonl" "$tmp/${name}_z/metrics.jsonl" "$tmp/${name}_off/metrics.jsonl" <<'PY'
import json, sys
a, z, off = (next(json.loads(l) for l in open(p) if '"step": 1' in l or '"step":1' in l) for p in sys.argv[1:4])
assert a["aux_loss"] > 0 and abs(a["aux_loss"] - z["aux_loss"]) <= 1e-6 * a["aux_loss"], (a, z)
assert abs(a["loss"] - z["loss"] - 0.05 * a["aux_loss"]) <= 1e-5 * max(1, abs(a["loss"])), (a["loss"], z["loss"])
assert "aux_loss" not in off and abs(off["loss"] - z["loss"]) <= 1e-6 * max(1, abs(z["loss"])), (off, z)
PY
  local rc=$?
  if [ $rc -eq 0 ] && ! cmp -s "$tmp/${name}_a/model.safetensors" "$tmp/${name}_z/model.safetensors" &&
     cmp -s "$tmp/${name}_z/model.safetensors" "$tmp/${name}_off/model.safetensors"; then rc=0; else rc=1; fi
  check "aux_loss_$name" $rc "$(tail -2 "$tmp/${name}_a.err")"
}
aux_case grpo grpo --num_generations 2 --reward length:4
aux_case rloo rloo --num_generations 2 --reward length:4
aux_case distill distill --teacher "$tmp/z"
