#!/usr/bin/env bash
# dist_tp_lora.sh: LoRA adapters under tensor parallelism (--use_peft --tp_size 2; src/train/tp.c,
# src/model/lora.c). lora_B of q, k, v, gate, up is split by rows with its base weight (lora_A
# whole, its gradient summed over the group), lora_A of o and down by columns (A x all-reduced,
# lora_B whole, its output added once); dropout masks are drawn by the element's index in the
# whole input. Five SFT steps of an all-linear r 4 adapter at TP=2 end with one process's losses
# and adapter (<= 1e-5 relative), with dropout and with gradient checkpointing too; the adapter
# TP writes is one process's file (PEFT's layout), loads in one process and generates its tokens,
# and `generate --tp_size 2 --adapter` gives one process's tokens; a TP run continues an adapter
# (--adapter) and resumes its checkpoints as one process does; DPO, KTO, GRPO and distillation steps
# with an adapter (the reference or fixed self-teacher: the base with the adapter off; a teacher
# with its own adapter) match one process, and so does an adapter on Qwen3-MoE's attention; what
# is not supported is refused by name. One process's LoRA is checked against PEFT (lora_cli.sh, scripts/ref_lora.py).
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_tp_lora "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
DIFF="$BUILD/tests/tools/st_diff --norm"
M=tests/data/models/qwen3_tied
IDS=tests/data/sft/ids.jsonl
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
L="--use_peft true --lora_r 4 --lora_alpha 8 --lora_target_modules all-linear"
C="--dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 5 --logging_steps 1 --threads 1 \
   --gradient_accumulation_steps 2 --max_grad_norm 1.0 --save_strategy no --per_device_train_batch_size 4"
# Adapters norm-wise per tensor (st_diff --norm): the same sums in another order differ by fp32
# rounding (observed 2.9e-6 after 5 steps); a lora_A gradient not summed over the group, or a
# dropout mask drawn by the rank's own offsets, moves tensors by more than 1e-2.
TOL=1e-5

same_curves() { curves_agree "$1" "$2" loss grad_norm; }  # per-step loss and grad_norm agree to a relative 1e-5
same_as_one() {  # name, flags of both runs..., --, flags of the TP run only...
  local name=$1; shift
  local both=() tp=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do both+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  tp=("$@")
  $BIN sft --model ${model:-$M} $C $L "${both[@]}" --output_dir "$tmp/$name.1" >/dev/null 2>"$tmp/err1" \
    || { fail "$name" "one process: $(tail -2 "$tmp/err1")"; return; }
  local out rc d drc cur crc
  out=$($MPI $BIN sft --model ${model:-$M} $C $L "${both[@]}" "${tp[@]}" --tp_size 2 --output_dir "$tmp/$name.2" 2>&1 >/dev/null); rc=$?
  d=$($DIFF "$tmp/$name.1/adapter_model.safetensors" "$tmp/$name.2/adapter_model.safetensors" $TOL 2>&1); drc=$?
  cur=$(same_curves "$tmp/$name.1/metrics.jsonl" "$tmp/$name.2/metrics.jsonl" 2>&1); crc=$?
  if ! grep -q "192 of 384 vocabulary rows" <<<"$out"; then rc="$rc, no tensor-parallel split in the log"; fi
  if [ "$rc" = 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ]; then ok "$name ($d)"
  else fail "$name" "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(grep -v '] step' <<<"$out" | tail -3)"; fi
}
same_as_one lora_tp2_matches_one_rank --lora_dropout 0
same_as_one lora_tp2_dropout_matches_one_rank --lora_dropout 0.1
same_as_one lora_tp2_dropout_ckpt_matches_one_rank --lora_dropout 0.1 -- --gradient_checkpointing true
# rslora, a smaller target set (q, v) and an untied model with attention biases off
L="--use_peft true --lora_r 4 --lora_alpha 8 --lora_target_modules q_proj v_proj o_proj" model=tests/data/models/qwen3_untied \
  same_as_one lora_tp2_qv_rslora_untied_matches_one_rank --lora_dropout 0.1 --use_rslora true
# the dropout is in play: its masks change the adapter (so the runs above compared masks)
d=$($DIFF "$tmp/lora_tp2_matches_one_rank.1/adapter_model.safetensors" \
  "$tmp/lora_tp2_dropout_matches_one_rank.1/adapter_model.safetensors" 1e-2 2>&1)
if [ $? -ne 0 ]; then ok "lora_dropout_changes_the_adapter ($d)"; else fail lora_dropout_changes_the_adapter "$d"; fi

# the file TP writes is one process's: the same config, the same tensor names and shapes, and one
# process loads it and generates what it generates with one process's adapter
one=$tmp/lora_tp2_dropout_matches_one_rank.1 two=$tmp/lora_tp2_dropout_matches_one_rank.2
names() { python3 -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
print(sorted((k, v["dtype"], v["shape"]) for k, v in h.items()))' "$1"; }
if cmp -s "$one/adapter_config.json" "$two/adapter_config.json" \
   && [ "$(names "$one/adapter_model.safetensors")" = "$(names "$two/adapter_model.safetensors")" ]; then
  ok lora_tp2_writes_the_one_process_layout
else fail lora_tp2_writes_the_one_process_layout "$(diff "$one/adapter_config.json" "$two/adapter_config.json" | head -3)"; fi
for mode in "greedy 1 --do_sample false" "sampled 4 --do_sample true --temperature 1.0 --top_k 0 --seed 3"; do
  set -- $mode
  name=$1 n=$2; shift 2
  G="--model $M --ids '5 9 17 33 2 8' --max_new_tokens 12 $* --num_return_sequences $n --batch_size 4 --print_ids"
  eval $BIN generate $G --adapter "$one" >"$tmp/g1" 2>/dev/null
  eval $BIN generate $G --adapter "$two" >"$tmp/g2" 2>"$tmp/g2.err"; rc2=$?
  eval $MPI $BIN generate $G --adapter "$one" --tp_size 2 >"$tmp/g3" 2>"$tmp/g3.err"; rc3=$?
  eval $BIN generate $G >"$tmp/g0" 2>/dev/null
  if [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ "$(wc -l <"$tmp/g1")" -eq $n ] && cmp -s "$tmp/g1" "$tmp/g2" \
     && cmp -s "$tmp/g1" "$tmp/g3"; then ok "lora_tp2_adapter_generates_one_process_tokens_$name"
  else fail "lora_tp2_adapter_generates_one_process_tokens_$name" "rc $rc2/$rc3; $(diff "$tmp/g1" "$tmp/g3" | head -3) \
$(tail -2 "$tmp/g3.err")"; fi
done
# (the adapter matters to those tokens: the base model alone generates others)
if ! cmp -s "$tmp/g0" "$tmp/g1"; then ok lora_adapter_changes_the_tokens
else fail lora_adapter_changes_the_tokens "the base model's sampled tokens equal the adapter's"; fi

# continuing an adapter (--adapter DIR with --use_peft): each rank takes its part of the file.
# The first AdamW steps of fresh moments carry the rounding of gradients near epsilon into the
# update (observed 2.7e-5 of up_proj's lora_B after one step with dropout): epsilon 1e-4 keeps
# the updates linear in the gradients, as dist_tp.sh does for its experts
R="--model $M --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 3 --logging_steps 1 --threads 1 \
   --per_device_train_batch_size 4 --save_strategy no --use_peft true --lora_dropout 0.1 --adapter $one \
   --adam_epsilon 1e-4"
$BIN sft $R --output_dir "$tmp/cont1" >/dev/null 2>"$tmp/err1"
out=$($MPI $BIN sft $R --tp_size 2 --output_dir "$tmp/cont2" 2>&1 >/dev/null); rc=$?
d=$($DIFF "$tmp/cont1/adapter_model.safetensors" "$tmp/cont2/adapter_model.safetensors" $TOL 2>&1); drc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ] && grep -q "LoRA: continuing" <<<"$out"; then ok "lora_tp2_continues_an_adapter ($d)"
else fail lora_tp2_continues_an_adapter "rc=$rc $d; $(tail -2 <<<"$out") $(tail -1 "$tmp/err1")"; fi

# checkpoints: an interrupted TP run resumes bit for bit (the adapter and its moments), one
# process resumes the TP checkpoint and TP resumes one process's, each ending where the other did
R="--model $M --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 8 --save_steps 4 --logging_steps 1 \
   --threads 1 --per_device_train_batch_size 4 $L --lora_dropout 0.1"
$MPI $BIN sft $R --tp_size 2 --output_dir "$tmp/full" >/dev/null 2>&1
$MPI $BIN sft $R --tp_size 2 --output_dir "$tmp/part" --stop_after_steps 5 >/dev/null 2>&1
out=$($MPI $BIN sft $R --tp_size 2 --output_dir "$tmp/part" --resume_from_checkpoint latest 2>&1 >/dev/null)
if grep -q "checkpoint-4 at step 4" <<<"$out" && [ -s "$tmp/full/adapter_model.safetensors" ] \
   && cmp -s "$tmp/full/adapter_model.safetensors" "$tmp/part/adapter_model.safetensors" \
   && cmp -s "$tmp/full/checkpoint-8/optimizer.safetensors" "$tmp/part/checkpoint-8/optimizer.safetensors"; then
  ok lora_resume_tp2_bit_identical
else fail lora_resume_tp2_bit_identical "$(grep -v '] step' <<<"$out" | tail -3)"; fi
$BIN sft $R --output_dir "$tmp/one" >/dev/null 2>&1
$BIN sft $R --output_dir "$tmp/re1" --resume_from_checkpoint "$tmp/full/checkpoint-4" >/dev/null 2>&1
$MPI $BIN sft $R --tp_size 2 --output_dir "$tmp/re2" --resume_from_checkpoint "$tmp/one/checkpoint-4" >/dev/null 2>&1
d1=$($DIFF "$tmp/full/adapter_model.safetensors" "$tmp/re1/adapter_model.safetensors" $TOL 2>&1); r1=$?
d2=$($DIFF "$tmp/one/adapter_model.safetensors" "$tmp/re2/adapter_model.safetensors" $TOL 2>&1); r2=$?
d3=$($DIFF "$tmp/one/checkpoint-8/optimizer.safetensors" "$tmp/full/checkpoint-8/optimizer.safetensors" 1e-4 2>&1); r3=$?
if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ]; then ok "lora_tp2_checkpoints_any_mesh ($d1; $d2; moments $d3)"
else fail lora_tp2_checkpoints_any_mesh "TP -> 1: $d1; 1 -> TP: $d2; moments: $d3"; fi

# DPO with an adapter at TP=2 (the reference: the split base with the adapter off, through the
# group's all-reduces). lora_B starts at zero, so the norm-wise difference of the adapter is that
# of the updates themselves, and DPO's gradient is the difference of the chosen and rejected
# log-probabilities' gradients, whose rounding AdamW carries into the elements with gradients
# near epsilon: observed 2.2e-5 after 2 steps (other dropout masks move tensors by 0.1 and more)
DP="--model $M --dataset tests/data/dpo/pairs.jsonl --threads 1 --max_steps 2 --logging_steps 1 --save_strategy no \
    --learning_rate 1e-3 --per_device_train_batch_size 4 $L --lora_dropout 0.1"
$BIN dpo $DP --output_dir "$tmp/dpo1" >/dev/null 2>"$tmp/err1"
out=$($MPI $BIN dpo $DP --tp_size 2 --output_dir "$tmp/dpo2" 2>&1 >/dev/null); rc=$?
d=$($DIFF "$tmp/dpo1/adapter_model.safetensors" "$tmp/dpo2/adapter_model.safetensors" 1e-4 2>&1); drc=$?
cur=$(same_curves "$tmp/dpo1/metrics.jsonl" "$tmp/dpo2/metrics.jsonl" 2>&1); crc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ]; then ok "lora_dpo_tp2_matches_one_rank ($d)"
else fail lora_dpo_tp2_matches_one_rank "rc=$rc $d; $cur; $(tail -2 <<<"$out")"; fi
# KTO the same way (observed 5.3e-6)
KT="--model $M --dataset tests/data/kto/rows.jsonl --threads 1 --max_steps 2 --logging_steps 1 --save_strategy no \
    --learning_rate 1e-3 --per_device_train_batch_size 4 $L --lora_dropout 0.1"
$BIN kto $KT --output_dir "$tmp/kto1" >/dev/null 2>"$tmp/err1"
out=$($MPI $BIN kto $KT --tp_size 2 --output_dir "$tmp/kto2" 2>&1 >/dev/null); rc=$?
d=$($DIFF "$tmp/kto1/adapter_model.safetensors" "$tmp/kto2/adapter_model.safetensors" 1e-4 2>&1); drc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ]; then ok "lora_kto_tp2_matches_one_rank ($d)"
else fail lora_kto_tp2_matches_one_rank "rc=$rc $d; $(tail -2 <<<"$out")"; fi

# GRPO with an adapter: the split policy with its adapter generates one process's rollouts, the
# reference is the base with the adapter off, and the step's adapter matches (epsilon 1e-4 as
# above: 5.2e-5 at the default one, 3.9e-6 here)
$BIN init --model_config $M/config.json --output_dir "$tmp/stu" --tokenizer tests/data/sft/tok 2>/dev/null
for i in 0 1 2 3 4 5 6 7; do echo "{\"prompt\": \"Q$i: what is $i + 1?\", \"answer\": $((i + 1))}"; done >"$tmp/rl.jsonl"
G="grpo --model $tmp/stu --dataset $tmp/rl.jsonl --max_completion_length 6 --num_generations 4 --max_steps 2 \
   --gradient_accumulation_steps 2 --threads 1 --pad_to_multiple_of 16 --save_strategy no --learning_rate 1e-3 \
   --log_completions --reward length:4 --reward regex:[0-9] --per_device_train_batch_size 8 --beta 0.1 $L \
   --adam_epsilon 1e-4"
mkdir -p "$tmp/grpo1" "$tmp/grpo2"
$BIN $G --output_dir "$tmp/grpo1" >/dev/null 2>"$tmp/err1"; rc1=$?
$MPI $BIN $G --tp_size 2 --output_dir "$tmp/grpo2" >/dev/null 2>"$tmp/err2"; rc2=$?
d=$($DIFF "$tmp/grpo1/adapter_model.safetensors" "$tmp/grpo2/adapter_model.safetensors" $TOL 2>&1); drc=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $drc -eq 0 ] && [ -s "$tmp/grpo1/completions.jsonl" ] \
   && cmp -s "$tmp/grpo1/completions.jsonl" "$tmp/grpo2/completions.jsonl"; then ok "lora_grpo_tp2_same_rollouts ($d)"
else fail lora_grpo_tp2_same_rollouts "rc $rc1/$rc2, $d; $(tail -2 "$tmp/err2")"; fi

# distillation: a student adapter with the fixed self-teacher (the split base with the adapter
# off), and a teacher with an adapter of its own (each rank takes its part of the file); the
# rollouts are one process's and so is the step
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Q$i: $i + 1?\"}, {\"role\": \"assistant\", \"content\": \"$((i + 1))\"}]}"
done >"$tmp/kd.jsonl"
for i in 0 1 2 3 4 5 6 7; do  # the self-teacher's privileged columns
  echo "{\"prompt\": \"Q$i: $i + 1?\", \"problem\": \"$i + 1?\", \"solution\": \"$((i + 1))\"}"
done >"$tmp/self.jsonl"
kd_same() {  # name, the trained file, flags...
  local name=$1 file=$2; shift 2
  local K="distill --model $tmp/stu --dataset ${kd_data:-$tmp/kd.jsonl} --threads 1 --pad_to_multiple_of 16 --max_completion_length 6 \
    --save_strategy no --learning_rate 1e-3 --max_steps 2 --per_device_train_batch_size 4 --adam_epsilon 1e-4"
  $BIN $K "$@" --log_rollouts "$tmp/$name.1.jsonl" --output_dir "$tmp/$name.1" >/dev/null 2>"$tmp/err1"; local rc1=$?
  $MPI $BIN $K "$@" --log_rollouts "$tmp/$name.2.jsonl" --tp_size 2 --output_dir "$tmp/$name.2" >/dev/null 2>"$tmp/err2"
  local rc2=$? d drc
  d=$($DIFF "$tmp/$name.1/$file" "$tmp/$name.2/$file" $TOL 2>&1); drc=$?
  rows() { python3 -c '
import json, sys
for l in open(sys.argv[1]):
    print(json.dumps({k: v for k, v in json.loads(l).items() if k != "kl_student_teacher"}, sort_keys=True))' "$1"; }
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -s "$tmp/$name.1.jsonl" ] && [ $drc -eq 0 ] \
     && cmp -s <(rows "$tmp/$name.1.jsonl") <(rows "$tmp/$name.2.jsonl"); then ok "$name ($d)"
  else fail "$name" "rc $rc1/$rc2, $d; $(tail -2 "$tmp/err1") $(tail -2 "$tmp/err2")"; fi
}
kd_data=$tmp/self.jsonl kd_same lora_distill_tp2_self_teacher adapter_model.safetensors --teacher self --teacher_mode fixed $L --lora_dropout 0.1
$BIN init --model_config $M/config.json --output_dir "$tmp/tea" --tokenizer tests/data/sft/tok --seed 7 2>/dev/null
kd_same lora_distill_tp2_teacher_adapter model.safetensors --teacher "$tmp/tea" --teacher_adapter "$one"

# Qwen3-MoE with adapters on its attention (the experts and the router split as dist_tp.sh has
# them, without adapters). Not on k_proj: its gradient is a small difference (a key shifts a
# query's scores almost alike), whose rounding leaves 1.2e-5 of its lora_B here
L="--use_peft true --lora_r 4 --lora_alpha 8 --lora_target_modules q_proj v_proj o_proj" \
  model=tests/data/models/qwen3_moe same_as_one lora_tp2_moe_attention_matches_one_rank --lora_dropout 0.1 \
  --adam_epsilon 1e-4

# what TP does not do with an adapter: refused by name (exit 3)
refused() {  # name, message, flags...
  local name=$1 msg=$2; shift 2
  local out rc
  out=$($MPI $BIN sft --dataset $IDS --threads 1 --max_steps 1 --per_device_train_batch_size 4 --use_peft true \
    --tp_size 2 "$@" --output_dir "$tmp/bad" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 3 ] && grep -qF -- "$msg" <<<"$out"; then ok "$name"
  else fail "$name" "rc=$rc $(grep -i error <<<"$out" | head -1)"; fi
}
refused lora_tp_refuses_experts "LoRA on the experts or the router of a mixture of experts" \
  --model tests/data/models/qwen3_moe --lora_target_modules all-linear
refused lora_tp_refuses_modules_to_save "LoRA with modules to save (--lora_modules_to_save lm_head)" \
  --model $M --lora_modules_to_save lm_head
refused lora_tp_refuses_zero3 "--tp_size with --fsdp_size / --zero_stage 3 and an adapter (--use_peft) is not" \
  --model $M --zero_stage 3
