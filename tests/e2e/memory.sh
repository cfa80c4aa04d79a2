#!/usr/bin/env bash
# memory.sh: `still info` predicts the peak RSS (VmHWM, printed by --report_memory) of still
# generate and still sft within 10%, on a 23M-parameter model (fp32 and bf16 files, 1 and 2
# threads); weights converted at load are not resident twice; saving checkpoints and resuming
# add at most 10% to the peak. The prediction for another shape is not within 10% (the check can fail).
set -u
BIN=${STILL_BIN:-./still}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
python3 - "$tmp" <<'PY'
import json, random, sys
d = sys.argv[1]
c = json.load(open("tests/data/models/qwen3_untied/config.json"))
c.update(vocab_size=8192, hidden_size=512, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=8,
         num_key_value_heads=4, head_dim=64, tie_word_embeddings=True)
json.dump(c, open(d + "/f32.json", "w"))
c["torch_dtype"] = "bfloat16"
json.dump(c, open(d + "/bf16.json", "w"))
random.seed(1)
with open(d + "/ids.jsonl", "w") as f:  # rows of exactly 128 tokens: one train plan of T = 128
    for _ in range(4): f.write(json.dumps({"input_ids": [random.randrange(3, 8000) for _ in range(128)]}) + "\n")
PY
$BIN init --model_config "$tmp/f32.json" --output_dir "$tmp/f32" >/dev/null 2>&1
$BIN init --model_config "$tmp/bf16.json" --output_dir "$tmp/bf16" --seed 1 >/dev/null 2>&1
ids=$(seq -s ' ' 5 124)  # 120 tokens: prompts padded to 128 slots

peak() { sed -n 's/.*peak RSS .*(VmHWM \([0-9]*\) bytes).*/\1/p' "$1" | tail -1; }
# predicted MiB of the info line matching $2 (info flags in the rest)
predict() {
  local what=$1; shift
  "$BIN" info "$@" | grep "^peak RSS  *$what" | sed 's/.*threads: \([0-9.]*\) MiB.*/\1/'
}
# within NAME MEASURED_BYTES PREDICTED_MIB
within() {
  if [ -n "$2" ] && [ -n "$3" ] && awk -v m="$2" -v p="$3" 'BEGIN { m /= 1048576; exit !(p >= 0.9 * m && p <= 1.1 * m) }'; then
    ok "$1 (measured $(awk -v m="$2" 'BEGIN { printf "%.1f", m / 1048576 }') MiB, predicted $3 MiB)"
  else fail "$1" "measured ${2:-?} bytes, predicted ${3:-?} MiB"; fi
}

# generate: fp32 weights in place, bf16 in place, bf16 file held as fp32 (converted at load)
for v in "f32 float32" "bf16 bfloat16" "bf16 float32"; do
  set -- $v
  $BIN generate --model "$tmp/$1" --ids "$ids" --max_new_tokens 32 --threads 2 --dtype "$2" --report_memory \
    >/dev/null 2>"$tmp/err"
  within "generate_${1}_file_as_$2" "$(peak "$tmp/err")" \
    "$(predict generate --model "$tmp/$1" --seq 128 --max_new_tokens 32 --threads 2 --dtype "$2")"
done

# sft: fp32 masters, gradients, AdamW, the train plan (gradient checkpointing, SFT's default)
S0="--dataset $tmp/ids.jsonl --per_device_train_batch_size 1 --pad_to_multiple_of 128 --learning_rate 1e-4"
S="$S0 --max_steps 2"
for v in "f32 1" "f32 2" "bf16 2"; do
  set -- $v
  $BIN sft --model "$tmp/$1" $S --threads "$2" --save_strategy no --output_dir "$tmp/o_$1_$2" --report_memory \
    >/dev/null 2>"$tmp/err"
  m=$(peak "$tmp/err")
  within "sft_${1}_threads_$2" "$m" "$(predict "sft B=1 T=128 with gradient" --model "$tmp/$1" --seq 128 --threads "$2")"
  [ "$1" = bf16 ] && nosave=$m
done

# saving a checkpoint every step (model, optimizer state, fp32 masters) adds at most 10%
$BIN sft --model "$tmp/bf16" $S --threads 2 --save_steps 1 --output_dir "$tmp/o_save" --report_memory >/dev/null 2>"$tmp/err"
m=$(peak "$tmp/err")
if [ -f "$tmp/o_save/checkpoint-1/optimizer.safetensors" ] && [ -n "$m" ] && [ -n "${nosave:-}" ] \
   && awk -v a="$m" -v b="$nosave" 'BEGIN { exit !(a <= 1.1 * b) }'; then
  ok "saving_adds_at_most_10_percent ($((m / 1048576)) MiB vs $((nosave / 1048576)) MiB without saving)"
else fail saving_adds_at_most_10_percent "with saves ${m:-?} bytes, without ${nosave:-?}"; fi

# resuming reads the optimizer state into the optimizer's own buffers: no more than a fresh run
$BIN sft --model "$tmp/bf16" $S0 --max_steps 3 --threads 2 --save_steps 1 --stop_after_steps 1 --output_dir "$tmp/o_res" \
  >/dev/null 2>&1
$BIN sft --model "$tmp/bf16" $S0 --max_steps 3 --threads 2 --save_steps 1 --output_dir "$tmp/o_res" \
  --resume_from_checkpoint latest --report_memory >/dev/null 2>"$tmp/err2"
m=$(peak "$tmp/err2")
if grep -q "resuming from .*checkpoint-1" "$tmp/err2" && [ -n "$m" ] && [ -n "${nosave:-}" ] \
   && awk -v a="$m" -v b="$nosave" 'BEGIN { exit !(a <= 1.1 * b) }'; then
  ok "resume_adds_at_most_10_percent ($((m / 1048576)) MiB)"
else fail resume_adds_at_most_10_percent "resumed ${m:-?} bytes, a fresh run ${nosave:-?}: $(tail -2 "$tmp/err2")"; fi

# the comparison tells shapes apart: B=8's prediction is not within 10% of B=1's run
m=$(peak "$tmp/err")
p=$(predict "sft B=8 T=128 with gradient" --model "$tmp/bf16" --batch 8 --seq 128 --threads 2)
if [ -n "$p" ] && ! awk -v m="$m" -v p="$p" 'BEGIN { m /= 1048576; exit !(p >= 0.9 * m && p <= 1.1 * m) }'; then
  ok "another_shape_is_told_apart (B=8 predicted $p MiB)"
else fail another_shape_is_told_apart "B=8 predicted ${p:-?} MiB, within 10% of the B=1 run's ${m:-?} bytes"; fi
