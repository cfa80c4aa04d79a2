#!/usr/bin/env bash
# lora_cli.sh: LoRA end to end (docs/lora.md): `still sft --use_peft` from a fresh adapter writes
# PEFT's files with PEFT's key names and shapes; the adapter changes the logits and merging keeps
# them; resume is bit-identical; gradient checkpointing gives the plain backward's weights bit for
# bit (LoRA with dropout, and full fine-tuning); distill (fixed self-teacher = the base with the
# adapter off), grpo and rloo (KL reference = the base) train adapters; 2 ranks equal 1 rank; an
# adapter on a Q8_0 base trains; flag errors.
# asan: yes
set -u
source tests/e2e/lib.sh
# the header of a safetensors file as JSON
header() { python3 -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; print(json.dumps(json.loads(f.read(n))))' "$1"; }
# max |a - b| / max(1, |b|) over two logits outputs (lines of numbers)
maxdiff() { paste -d' ' <(tr ' ' '\n' <"$1") <(tr ' ' '\n' <"$2") | awk '{d=$1-$2; if(d<0)d=-d; s=$2<0?-$2:$2; if(s<1)s=1; if(d/s>m)m=d/s} END{printf "%.3g", m}'; }
M=tests/data/models/qwen3_tied
IDS=tests/data/sft/ids.jsonl
L="--use_peft --lora_r 4 --lora_alpha 8 --lora_target_modules all-linear --threads 2 --pad_to_multiple_of 16 \
   --learning_rate 1e-2 --per_device_train_batch_size 2 --logging_steps 1"

# 1. a fresh adapter: PEFT's files, names and shapes; nothing else of the model is written
if $BIN sft --model $M --dataset $IDS --output_dir "$tmp/a" --max_steps 4 --save_strategy no $L >/dev/null 2>"$tmp/err" \
   && [ -f "$tmp/a/adapter_config.json" ] && [ -f "$tmp/a/adapter_model.safetensors" ] && [ ! -f "$tmp/a/model.safetensors" ]; then
  h=$(header "$tmp/a/adapter_model.safetensors")
  chk=$(python3 - "$tmp/a/adapter_config.json" <<PY
import json, sys
h = json.loads('''$h''')
c = json.load(open(sys.argv[1]))
assert c["peft_type"] == "LORA" and c["task_type"] == "CAUSAL_LM" and c["r"] == 4 and c["lora_alpha"] == 8, c
assert sorted(c["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
a = h["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]["shape"]
b = h["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]["shape"]
d = h["base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"]["shape"]
assert a == [4, 48] and b == [64, 4] and d == [4, 96], (a, b, d)
assert len([k for k in h if k != "__metadata__"]) == 2 * 7 * 2, len(h)
print("ok")
PY
)
  if [ "$chk" = ok ]; then ok fresh_adapter_peft_files; else fail fresh_adapter_peft_files "$chk"; fi
else fail fresh_adapter_peft_files "$(tail -3 "$tmp/err")"; fi

# 2. the adapter changes the logits; the merged model has the adapter's logits
Q="5 17 300 42 7 250"
$BIN logits --model $M --ids "$Q" --all 2>/dev/null >"$tmp/base.txt"
$BIN logits --model $M --adapter "$tmp/a" --ids "$Q" --all 2>/dev/null >"$tmp/ad.txt"
$BIN merge --model $M --adapter "$tmp/a" --output_dir "$tmp/merged" 2>"$tmp/err" >/dev/null
$BIN logits --model "$tmp/merged" --ids "$Q" --all 2>/dev/null >"$tmp/mg.txt"
d1=$(maxdiff "$tmp/ad.txt" "$tmp/base.txt"); d2=$(maxdiff "$tmp/mg.txt" "$tmp/ad.txt")
if [ -s "$tmp/ad.txt" ] && awk -v a="$d1" -v b="$d2" 'BEGIN{exit !(a > 1e-3 && b < 5e-5)}'; then ok "merge_keeps_adapter_logits (adapter moved logits by $d1, merged differs by $d2)"
else fail merge_keeps_adapter_logits "adapter vs base $d1, merged vs adapter $d2; $(tail -2 "$tmp/err")"; fi
# the adapter as PEFT would load it (scripts/ref_lora.py check: adapter_config.json, PEFT's key names,
# the PyTorch application of LoRA and of modules_to_save), against still's logits
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  $BIN sft --model $M --dataset $IDS --output_dir "$tmp/s" --max_steps 3 --save_strategy no $L \
    --lora_modules_to_save norm --use_rslora >/dev/null 2>&1
  $BIN logits --model $M --adapter "$tmp/s" --ids "$Q" --all --pad_to_multiple_of 1 2>/dev/null >"$tmp/s.txt"
  for d in a s; do
    $BIN logits --model $M --adapter "$tmp/$d" --ids "$Q" --all --pad_to_multiple_of 1 2>/dev/null >"$tmp/$d.txt"
    out=$(/usr/bin/python3 scripts/ref_lora.py check $M "$tmp/$d" "$Q" "$tmp/$d.txt" 2>&1)
    if [ $? -eq 0 ]; then ok "saved_adapter_loads_as_peft_$d ($(sed 's/.*: //' <<<"$out"))"
    else fail "saved_adapter_loads_as_peft_$d" "$(tail -2 <<<"$out")"; fi
  done
else
  skip saved_adapter_loads_as_peft "/usr/bin/python3 has no torch (python3-torch)"
fi
if $BIN generate --model $M --adapter "$tmp/a" --ids "5 17" --max_new_tokens 4 >/dev/null 2>"$tmp/err"; then ok generate_with_adapter
else fail generate_with_adapter "$(tail -2 "$tmp/err")"; fi

# 3. resume: interrupted after checkpoint 2 and resumed = uninterrupted, bit for bit (dropout on)
R="--model $M --dataset $IDS --max_steps 6 --save_steps 2 --lora_dropout 0.1 $L"
$BIN sft $R --output_dir "$tmp/full" >/dev/null 2>&1
$BIN sft $R --output_dir "$tmp/part" --stop_after_steps 3 >/dev/null 2>&1
$BIN sft $R --output_dir "$tmp/part" --resume_from_checkpoint latest >/dev/null 2>"$tmp/err"
if cmp -s "$tmp/full/adapter_model.safetensors" "$tmp/part/adapter_model.safetensors" \
   && cmp -s "$tmp/full/checkpoint-4/optimizer.safetensors" "$tmp/part/checkpoint-4/optimizer.safetensors" \
   && grep -q "checkpoint-2 at step 2" "$tmp/err"; then ok resume_bit_identical
else fail resume_bit_identical "$(tail -3 "$tmp/err")"; fi

# 4. gradient checkpointing = plain backward, bit for bit
G="--model $M --dataset $IDS --max_steps 3 --save_strategy no --lora_dropout 0.1 $L"
$BIN sft $G --output_dir "$tmp/ck1" --gradient_checkpointing true >/dev/null 2>&1
$BIN sft $G --output_dir "$tmp/ck0" --gradient_checkpointing false >/dev/null 2>&1
if [ -f "$tmp/ck1/adapter_model.safetensors" ] && cmp -s "$tmp/ck1/adapter_model.safetensors" "$tmp/ck0/adapter_model.safetensors"
then ok grad_ckpt_lora_bit_identical; else fail grad_ckpt_lora_bit_identical "adapters differ"; fi
F="--model $M --dataset $IDS --max_steps 3 --save_strategy no --threads 2 --pad_to_multiple_of 16 --per_device_train_batch_size 2"
$BIN sft $F --output_dir "$tmp/f1" --gradient_checkpointing true >/dev/null 2>&1
$BIN sft $F --output_dir "$tmp/f0" --gradient_checkpointing false >/dev/null 2>&1
if [ -f "$tmp/f1/model.safetensors" ] && cmp -s "$tmp/f1/model.safetensors" "$tmp/f0/model.safetensors"
then ok grad_ckpt_full_bit_identical; else fail grad_ckpt_full_bit_identical "models differ"; fi

# 5. every trainer trains an adapter: distill (fixed self-teacher = base, adapter off), grpo, rloo
$BIN init --model_config $M/config.json --output_dir "$tmp/m" --tokenizer tests/data/sft/tok 2>/dev/null
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"prompt\": \"Q$i: $i + 1?\", \"answer\": $((i + 1)), \"problem\": \"$i + 1?\", \"solution\": \"$((i + 1))\"}"
done >"$tmp/p.jsonl"
P="--model $tmp/m --dataset $tmp/p.jsonl --max_completion_length 6 --per_device_train_batch_size 4 --max_steps 2 \
   --threads 2 --pad_to_multiple_of 16 --save_strategy no --logging_steps 1 --use_peft --lora_r 2"
if $BIN distill $P --teacher self --teacher_mode fixed --output_dir "$tmp/d" >/dev/null 2>"$tmp/err" \
   && [ -f "$tmp/d/adapter_model.safetensors" ] && [ ! -f "$tmp/d/model.safetensors" ] && grep -q "LoRA: r 2" "$tmp/err"
then ok distill_self_lora; else fail distill_self_lora "$(tail -3 "$tmp/err")"; fi
for algo in grpo rloo; do
  if $BIN $algo $P --num_generations 4 --reward 'regex:[0-9]' --beta 0.04 --output_dir "$tmp/$algo" >/dev/null 2>"$tmp/err" \
     && [ -f "$tmp/$algo/adapter_model.safetensors" ] && grep -q "adapter off" "$tmp/err"
  then ok "${algo}_lora_reference_is_base"; else fail "${algo}_lora_reference_is_base" "$(tail -3 "$tmp/err")"; fi
done

# 6. two ranks equal one rank (the adapter's gradient is what is all-reduced)
source tests/mpi_env.sh
if mpi_available "$BIN"; then
  D="--model $M --dataset $IDS --max_steps 3 --save_strategy no --lora_dropout 0 --use_peft --lora_r 4 \
     --lora_target_modules all-linear --threads 1 --pad_to_multiple_of 16 --learning_rate 1e-2 --logging_steps 1"
  $BIN sft $D --per_device_train_batch_size 4 --output_dir "$tmp/r1" >/dev/null 2>&1
  for z in 0 1; do
    out=$(timeout -s KILL 120 mpirun $MPI_FLAGS -np 2 $BIN sft $D --per_device_train_batch_size 2 --zero_stage $z \
      --output_dir "$tmp/r2z$z" 2>&1)
    d=$("$BUILD/tests/tools/st_diff" --norm "$tmp/r1/adapter_model.safetensors" "$tmp/r2z$z/adapter_model.safetensors" 1e-4 2>&1)
    if [ $? -eq 0 ]; then ok "two_ranks_match_one_rank_zero$z ($d)"
    else fail "two_ranks_match_one_rank_zero$z" "$d; $(tail -3 <<<"$out")"; fi
  done
else
  skip two_ranks_match_one_rank "this build has no MPI"
fi

# 7. errors
expect_err adapter_needs_use_peft "needs --use_peft" $BIN sft --model $M --dataset $IDS --output_dir "$tmp/e1" --adapter "$tmp/a"
# a Q8_0 base (tests/data/q8/qwen3: rows of whole blocks): the adapter trains, the loss falls, and
# the adapter applies to the q8_0 base at inference
Q=tests/data/q8/qwen3
$BIN sft --model $Q --dataset $IDS --output_dir "$tmp/q8" $L --dtype q8_0 --max_steps 6 --save_strategy no \
  >"$tmp/q8.out" 2>"$tmp/q8.err"
rc=$?
first=$(head -1 "$tmp/q8/metrics.jsonl" 2>/dev/null | grep -o '"loss":[-0-9.e+]*' | cut -d: -f2)
last=$(tail -1 "$tmp/q8/metrics.jsonl" 2>/dev/null | grep -o '"loss":[-0-9.e+]*' | cut -d: -f2)
q8l=$($BIN logits --model $Q --dtype q8_0 --ids "5 17 300" --adapter "$tmp/q8" 2>/dev/null | wc -w)
if [ $rc = 0 ] && [ -f "$tmp/q8/adapter_model.safetensors" ] && [ -n "$first" ] && [ -n "$last" ] \
   && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' && [ "$q8l" = 384 ]; then ok q8_0_base
else fail q8_0_base "rc=$rc first $first last $last logits $q8l: $(tail -2 "$tmp/q8.err")"; fi

expect_err bad_target "no linear layer" $BIN sft --model $M --dataset $IDS --output_dir "$tmp/e2" --use_peft --lora_target_modules qq_proj
expect_err bad_save "names no module" $BIN sft --model $M --dataset $IDS --output_dir "$tmp/e3" --use_peft --lora_modules_to_save nothing_here
expect_err use_peft_outside_training "not supported" $BIN generate --model $M --ids "1 2" --use_peft true
expect_err missing_adapter "adapter_config.json" $BIN logits --model $M --ids "1 2" --adapter "$tmp/none"
exit 0
