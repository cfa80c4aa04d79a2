#!/usr/bin/env bash
# dpo_cli.sh: `still dpo` and `still kto` end to end (docs/dpo.md, docs/kto.md): text, implicit-prompt
# and conversational pairs through a tokenizer and chat template; an interrupted run resumes bit for
# bit; a LoRA run whose reference is the base with the adapter off; 2 ranks x B pairs equal 1 rank x
# 2B (per-step loss, grad_norm and the rewards); kto on text rows and on pairs; flag and data errors
# name what is wrong (flag errors exit 2, data errors 1, as every command).
# asan: yes
set -u
BIN=${STILL_BIN:-./still}
BUILD=${STILL_BUILD:-build}
source tests/mpi_env.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
expect_err() {  # name, expected rc, expected substring, command...
  local name=$1 want_rc=$2 want=$3; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq "$want_rc" ] && grep -qF -- "$want" <<<"$out"; then ok "$name"; else fail "$name" "rc=$rc, stderr: $(tail -3 <<<"$out")"; fi
}
M=tests/data/models/qwen3_tied
R=tests/data/models/qwen3_untied
P=tests/data/dpo/pairs.jsonl
# a model directory with the byte-level test tokenizer and its ChatML template
mkdir -p "$tmp/m" && cp $M/config.json $M/model.safetensors tests/data/sft/tok/* "$tmp/m/"
C="--threads 2 --pad_to_multiple_of 8 --per_device_train_batch_size 2 --learning_rate 1e-3 --logging_steps 1 --save_strategy no"

# 1. the text formats train (explicit prompt, implicit prompt, messages) and log TRL's metrics
cat >"$tmp/text.jsonl" <<'J'
{"prompt": "2+2=", "chosen": "4", "rejected": "5"}
{"prompt": "3+3=", "chosen": "6", "rejected": "7"}
{"prompt": "1+1=", "chosen": "2", "rejected": "11"}
J
cat >"$tmp/implicit.jsonl" <<'J'
{"chosen": "2+2= 4", "rejected": "2+2= 5"}
{"chosen": "3+3= 6", "rejected": "3+3= 7"}
J
cat >"$tmp/conv.jsonl" <<'J'
{"prompt": [{"role": "user", "content": "2+2?"}], "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]}
{"prompt": [{"role": "user", "content": "3+3?"}], "chosen": [{"role": "assistant", "content": "6"}], "rejected": [{"role": "assistant", "content": "7"}]}
J
for f in text implicit conv; do
  if $BIN dpo --model "$tmp/m" --dataset "$tmp/$f.jsonl" --output_dir "$tmp/o_$f" --max_steps 2 $C >/dev/null 2>"$tmp/err" \
     && grep -q '"rewards/accuracies"' "$tmp/o_$f/metrics.jsonl" && grep -q '"logits/chosen"' "$tmp/o_$f/metrics.jsonl" \
     && [ -f "$tmp/o_$f/model.safetensors" ]; then ok "dpo_trains_on_${f}_pairs"
  else fail "dpo_trains_on_${f}_pairs" "$(tail -3 "$tmp/err")"; fi
done

# 2. interrupted after checkpoint 2 and resumed = uninterrupted, bit for bit (loss type mix, WPO)
Z="--model $M --ref_model $R --dataset $P --max_length 14 --max_steps 4 --gradient_accumulation_steps 2 \
   --loss_type sigmoid,sft --loss_weights 1,0.3 --use_weighting --save_steps 2 $C"
Z=${Z/--save_strategy no/}
$BIN dpo $Z --output_dir "$tmp/full" >/dev/null 2>"$tmp/err1"
$BIN dpo $Z --output_dir "$tmp/part" --stop_after_steps 2 >/dev/null 2>&1
out=$($BIN dpo $Z --output_dir "$tmp/part" --resume_from_checkpoint latest 2>&1 >/dev/null)
if cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors" \
   && [ "$(tail -1 "$tmp/full/metrics.jsonl" | grep -o '"loss":[^,]*')" = "$(tail -1 "$tmp/part/metrics.jsonl" | grep -o '"loss":[^,]*')" ]; then
  ok resume_bit_identical
else fail resume_bit_identical "$(tail -2 <<<"$out"; tail -2 "$tmp/err1")"; fi

# 3. LoRA: the reference is the base with the adapter off; at step 1 the adapter is zero, so the
#    rewards are exactly 0 and the policy equals the reference
if $BIN dpo --model $M --dataset $P --max_length 14 --output_dir "$tmp/lora" --max_steps 2 --use_peft --lora_r 4 \
     --lora_alpha 8 $C >/dev/null 2>"$tmp/err" && [ -f "$tmp/lora/adapter_model.safetensors" ] \
   && head -1 "$tmp/lora/metrics.jsonl" | grep -q '"rewards/chosen":0,' \
   && grep -q "adapter off" "$tmp/err"; then ok lora_reference_is_base
else fail lora_reference_is_base "$(head -1 "$tmp/lora/metrics.jsonl" 2>/dev/null | cut -c1-200); $(tail -2 "$tmp/err")"; fi

# 3b. the frozen copy of the initial weights stored as bf16 (--dtype): the reference differs from the
#     fp32 policy only by bf16 rounding, so the first step's rewards are small but not 0
if $BIN dpo --model $M --dataset $P --max_length 14 --output_dir "$tmp/bf" --max_steps 1 --dtype bfloat16 $C \
     >/dev/null 2>"$tmp/err" && grep -q "frozen copy of $M (frozen, bfloat16 weights)" "$tmp/err" \
   && python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline())["rewards/chosen"]; sys.exit(not (0 < abs(r) < 0.05))' \
        "$tmp/bf/metrics.jsonl"; then ok bf16_reference_copy
else fail bf16_reference_copy "$(head -1 "$tmp/bf/metrics.jsonl" 2>/dev/null | cut -c1-200); $(tail -2 "$tmp/err")"; fi

# 4. 2 ranks x 1 pair = 1 rank x 2 pairs
if mpi_available "$BIN"; then
  D="--model $M --ref_model $R --dataset $P --max_length 14 --max_steps 3 --threads 1 --pad_to_multiple_of 8 \
     --learning_rate 1e-3 --logging_steps 1 --save_strategy no --gradient_accumulation_steps 2"
  $BIN dpo $D --per_device_train_batch_size 2 --output_dir "$tmp/one" >/dev/null 2>"$tmp/err1"
  out=$(timeout -s KILL 120 mpirun $MPI_FLAGS -np 2 $BIN dpo $D --per_device_train_batch_size 1 --output_dir "$tmp/two" 2>&1 >/dev/null)
  cur=$(python3 - "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl" <<'PY' 2>&1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"step"' in l]
assert len(a) == len(b) == 3, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "num_tokens", "rewards/chosen", "rewards/margins", "logps/rejected", "entropy"):
        assert abs(x[k] - y[k]) <= 1e-5 * max(1.0, abs(x[k])), (x["step"], k, x[k], y[k])
print("ok")
PY
)
  if [ "$cur" = ok ]; then ok two_ranks_match_one_rank; else fail two_ranks_match_one_rank "$cur; $(tail -2 <<<"$out")"; fi
else echo "skip two_ranks_match_one_rank: this build has no MPI"; fi

# 5. kto on text rows and on pairs (unpaired)
cat >"$tmp/kto.jsonl" <<'J'
{"prompt": "2+2=", "completion": "4", "label": true}
{"prompt": "3+3=", "completion": "7", "label": false}
{"prompt": "1+1=", "completion": "2", "label": true}
{"prompt": "5+5=", "completion": "9", "label": false}
J
if $BIN kto --model "$tmp/m" --dataset "$tmp/kto.jsonl" --output_dir "$tmp/k1" --max_steps 2 $C >/dev/null 2>"$tmp/err" \
   && grep -q '"kl"' "$tmp/k1/metrics.jsonl" && $BIN kto --model "$tmp/m" --dataset "$tmp/text.jsonl" --output_dir "$tmp/k2" \
     --max_steps 1 $C >/dev/null 2>"$tmp/err2" && grep -q "unpaired from chosen / rejected" "$tmp/err2"; then ok kto_trains
else fail kto_trains "$(tail -2 "$tmp/err") $(tail -2 "$tmp/err2" 2>/dev/null)"; fi

# 6. errors
expect_err bad_loss_type 2 "--loss_type kto_pair: expected one of" $BIN dpo --model $M --dataset $P --output_dir "$tmp/e1" --loss_type kto_pair
expect_err loss_weights_count 2 "--loss_weights has 1 values for 2 loss types" \
  $BIN dpo --model $M --dataset $P --output_dir "$tmp/e2" --loss_type sigmoid,ipo --loss_weights 1
expect_err exo_needs_smoothing 2 "exo_pair needs --label_smoothing" $BIN dpo --model $M --dataset $P --output_dir "$tmp/e3" --loss_type exo_pair
echo '{"prompt": "a", "completion": "b"}' >"$tmp/sft.jsonl"
expect_err not_preference_rows 1 "sft.jsonl:1: not a preference row" $BIN dpo --model "$tmp/m" --dataset "$tmp/sft.jsonl" --output_dir "$tmp/e4"
expect_err kto_batch_of_one 2 "must be > 1 for the kto loss" \
  $BIN kto --model "$tmp/m" --dataset "$tmp/kto.jsonl" --output_dir "$tmp/e5" --per_device_train_batch_size 1
expect_err missing_ref_model 1 "no such directory" $BIN dpo --model $M --dataset $P --output_dir "$tmp/e6" --ref_model "$tmp/nope"
expect_err unknown_flag 2 "--loss_typ" $BIN dpo --model $M --dataset $P --output_dir "$tmp/e7" --loss_typ sigmoid
