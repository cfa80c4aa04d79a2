#!/usr/bin/env bash
# dist_tp_q8.sh: Q8_0 weights under tensor parallelism (--dtype q8_0 / --teacher_dtype q8_0 with
# --tp_size 2; src/model/model.c check_q8_0_part, src/train/tp.c). Each rank quantizes its rows of
# a split tensor as whole 32-element blocks of the whole tensor's rows (o_proj and down_proj keep
# K / T of each row), so the part's blocks are the one-process model's blocks: `generate --tp_size
# 2 --dtype q8_0` gives one process's q8_0 tokens (greedy and sampled; not the fp32 model's), a
# distillation step with a q8_0 teacher split over the group gives one process's weights, and a
# LoRA adapter trained on a q8_0 base at TP=2 is one process's; a split that would cut a block is a
# usage error naming the tensor.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_tp_q8 "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
DIFF="$BUILD/tests/tools/st_diff --norm"
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
# the same sums in another order: fp32 rounding (observed 4e-6 after 2 distillation steps and 2e-6
# after 3 LoRA steps); a block cut or misplaced moves every tensor by far more
TOL=1e-5

# rows of 64 and 128 elements (hidden 64, 4 heads of 16, MLP 128): whole blocks on each of 2 ranks
cat >"$tmp/cfg.json" <<'EOF'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 384,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
EOF
sed 's/"intermediate_size": 128/"intermediate_size": 96/' "$tmp/cfg.json" >"$tmp/cfg96.json"
$BIN init --model_config "$tmp/cfg.json" --output_dir "$tmp/m" --tokenizer tests/data/sft/tok >/dev/null 2>&1
$BIN init --model_config "$tmp/cfg.json" --output_dir "$tmp/stu" --tokenizer tests/data/sft/tok --seed 3 >/dev/null 2>&1
$BIN init --model_config "$tmp/cfg96.json" --output_dir "$tmp/m96" --tokenizer tests/data/sft/tok >/dev/null 2>&1

# generation: one process's q8_0 tokens, which are not the fp32 model's (the sampled case)
for mode in "greedy 1 --do_sample false" "sampled 4 --do_sample true --temperature 1.0 --top_k 0 --seed 3"; do
  set -- $mode
  kind=$1 name=generate_tp2_q8_0_same_tokens_$1 n=$2; shift 2
  G="--model $tmp/m --ids '5 9 17 33 2 8' --max_new_tokens 12 $* --num_return_sequences $n --batch_size 4 --print_ids"
  eval $BIN generate $G --dtype q8_0 >"$tmp/g1" 2>/dev/null
  eval $BIN generate $G --dtype float32 >"$tmp/gf" 2>/dev/null
  eval $MPI $BIN generate $G --dtype q8_0 --tp_size 2 >"$tmp/g2" 2>"$tmp/g2.err"; rc=$?
  if [ $rc -eq 0 ] && [ -s "$tmp/g1" ] && cmp -s "$tmp/g1" "$tmp/g2" &&
     { [ "$kind" = greedy ] || ! cmp -s "$tmp/g1" "$tmp/gf"; }; then ok "$name"
  else fail "$name" "rc=$rc $(diff "$tmp/g1" "$tmp/g2" | head -3) $(tail -2 "$tmp/g2.err")"; fi
done

# one distillation step pair with a q8_0 teacher, split over the group like the student
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Q$i: $i + 1?\"}, {\"role\": \"assistant\", \"content\": \"$((i + 1))\"}]}"
done >"$tmp/kd.jsonl"
D="distill --model $tmp/stu --teacher $tmp/m --dataset $tmp/kd.jsonl --threads 1 --pad_to_multiple_of 16 \
   --max_completion_length 6 --save_strategy no --learning_rate 1e-3 --max_steps 2 --per_device_train_batch_size 4"
$BIN $D --teacher_dtype q8_0 --output_dir "$tmp/d1" >/dev/null 2>"$tmp/d1.err"; rc1=$?
$BIN $D --teacher_dtype float32 --output_dir "$tmp/df" >/dev/null 2>&1
$MPI $BIN $D --teacher_dtype q8_0 --tp_size 2 --output_dir "$tmp/d2" >/dev/null 2>"$tmp/d2.err"; rc2=$?
d=$($DIFF "$tmp/d1/model.safetensors" "$tmp/d2/model.safetensors" $TOL 2>&1); drc=$?
# the q8_0 teacher is not the fp32 one: their students differ by more than the tolerance
$DIFF "$tmp/d1/model.safetensors" "$tmp/df/model.safetensors" $TOL >/dev/null 2>&1; frc=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $drc -eq 0 ] && [ $frc -ne 0 ]; then ok "distill_tp2_q8_0_teacher ($d)"
else fail distill_tp2_q8_0_teacher "rc $rc1/$rc2, $d, fp32 teacher's student differs: $([ $frc -ne 0 ] && echo yes || echo no); $(tail -2 "$tmp/d2.err")"; fi

# a LoRA adapter on a q8_0 base (attention projections), 3 steps
S="sft --model $tmp/m --dataset tests/data/sft/ids.jsonl --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 3 \
   --threads 1 --save_strategy no --per_device_train_batch_size 4 --use_peft true --lora_r 4 \
   --lora_target_modules q_proj,k_proj,v_proj,o_proj --dtype q8_0"
$BIN $S --output_dir "$tmp/l1" >/dev/null 2>&1; rc1=$?
$MPI $BIN $S --tp_size 2 --output_dir "$tmp/l2" >/dev/null 2>"$tmp/l2.err"; rc2=$?
d=$($DIFF "$tmp/l1/adapter_model.safetensors" "$tmp/l2/adapter_model.safetensors" $TOL 2>&1); drc=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $drc -eq 0 ]; then ok "lora_on_q8_0_base_tp2 ($d)"
else fail lora_on_q8_0_base_tp2 "rc $rc1/$rc2, $d; $(tail -2 "$tmp/l2.err")"; fi

# down_proj rows of 96 (3 blocks) would keep 48 elements a row on each rank: refused, exit 2
out=$($MPI $BIN generate --model "$tmp/m96" --ids "5 9" --max_new_tokens 2 --dtype q8_0 --tp_size 2 2>&1); rc=$?
one=$($BIN generate --model "$tmp/m96" --ids "5 9" --max_new_tokens 2 --dtype q8_0 2>&1); rc1=$?
if [ $rc -eq 2 ] && [ $rc1 -eq 0 ] && grep -q 'tensor "model.layers.0.mlp.down_proj.weight" would keep rows of 48 elements on each rank; q8_0 stores rows in blocks of 32' <<<"$out"
then ok tp2_q8_0_refuses_a_cut_block
else fail tp2_q8_0_refuses_a_cut_block "rc=$rc (one process rc=$rc1): $(head -2 <<<"$out")"; fi
