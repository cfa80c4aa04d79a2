#!/usr/bin/env bash
# distill_cli.sh: still distill end to end on `still init` models with the tiny byte-level
# tokenizer: every loss mode, GKD (dataset / teacher completions), greedy determinism, a bf16
# teacher, self-distillation (fixed / ema / live, teacher templates, rollout logs), bit-identical
# resume with an EMA teacher, input errors, and a student distilled from a peaked teacher that
# halves its kl_student_teacher on held-out prompts.
# asan: yes
set -u
source tests/e2e/lib.sh
metric() {  # file, key, step -> value of key in the metrics line of that step
  grep "\"step\":$3}" "$1" | grep -o "\"$2\":[-0-9.e+]*" | head -1 | cut -d: -f2
}
TOK=tests/data/sft/tok
M=tests/data/models
$BIN init --model_config $M/qwen3_tied/config.json --output_dir "$tmp/stu" --tokenizer $TOK 2>/dev/null
$BIN init --model_config $M/qwen3_untied/config.json --output_dir "$tmp/tea" --tokenizer $TOK --seed 7 2>/dev/null
$BIN init --model_config $M/qwen3_untied/config.json --output_dir "$tmp/tea_other" \
  --tokenizer tests/data/tokenizer/synth/bytelevel_template 2>/dev/null
cat >"$tmp/p.jsonl" <<'J'
{"prompt": "The sky is", "problem": "2+2?", "solution": "4"}
{"prompt": [{"role": "user", "content": "hi"}], "problem": "3+3?", "solution": "6"}
{"prompt": "Two and two", "problem": "1+1?", "solution": "2"}
{"prompt": "abc", "problem": "5+5?", "solution": "10"}
J
cat >"$tmp/conv.jsonl" <<'J'
{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}
{"messages": [{"role": "user", "content": "abc"}, {"role": "assistant", "content": "def"}]}
J
C="--threads 2 --pad_to_multiple_of 16 --per_device_train_batch_size 2 --max_completion_length 8 --save_strategy no --logging_steps 1"
run() {  # name, flags...: a 2-step run must succeed
  local name=$1; shift
  if $BIN distill --model "$tmp/stu" --dataset "$tmp/p.jsonl" --output_dir "$tmp/$name" --max_steps 2 $C "$@" \
       >"$tmp/$name.out" 2>"$tmp/$name.err" && [ -f "$tmp/$name/model.safetensors" ]; then ok "$name"
  else fail "$name" "$(tail -3 "$tmp/$name.err")"; fi
}

# 1. the default (DistillationTrainer) and its logged metrics
run default --teacher "$tmp/tea"
expect_keys metric_names "$tmp/default/metrics.jsonl" loss grad_norm learning_rate kl_student_teacher \
  completions/mean_length completions/clipped_ratio generation_tokens_per_second train_tokens_per_second \
  tokens_per_second num_tokens plans
if grep -q "student-teacher KL" "$tmp/default/kl.svg" 2>/dev/null && [ ! -e "$tmp/default/reward.svg" ]; then ok kl_plot
else fail kl_plot "$(ls "$tmp/default")"; fi
grep -q "loss jsd (beta 1, top_k 0, temperature 1).*temperature 1, top_p 0.95, top_k 0, max_completion_length 8" \
  "$tmp/default.err" && grep -q "lr 1e-06" "$tmp/default.err" && ok default_settings \
  || fail default_settings "$(grep distillation "$tmp/default.err")"
# reverse KL: loss == kl_student_teacher when tau = 1 and the support is the full vocabulary
l=$(metric "$tmp/default/metrics.jsonl" loss 1); k=$(metric "$tmp/default/metrics.jsonl" kl_student_teacher 1)
awk -v a="$l" -v b="$k" 'BEGIN{exit !(a > 0 && (a-b)^2 < 1e-12*b*b)}' && ok reverse_kl_is_kl || fail reverse_kl_is_kl "$l vs $k"

# 2. every loss mode
run forward_kl --teacher "$tmp/tea" --loss jsd --beta 0
run jsd_half --teacher "$tmp/tea" --loss jsd --beta 0.5 --temperature 1.3
run top_k --teacher "$tmp/tea" --loss_top_k 5 --beta 0.5
run sampled --teacher "$tmp/tea" --loss reverse_kl_sampled
run bf16_teacher --teacher "$tmp/tea" --teacher_dtype bfloat16
grep -q "in bfloat16" "$tmp/bf16_teacher.err" && ok bf16_teacher_storage || fail bf16_teacher_storage "$(grep teacher: "$tmp/bf16_teacher.err")"
l0=$(metric "$tmp/forward_kl/metrics.jsonl" loss 1); l1=$(metric "$tmp/default/metrics.jsonl" loss 1)
[ -n "$l0" ] && [ "$l0" != "$l1" ] && ok modes_differ || fail modes_differ "forward $l0, reverse $l1"

# 3. GKD: dataset completions (lmbda 0), teacher completions (seq_kd), the GKD defaults
if $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/conv.jsonl" --output_dir "$tmp/gkd" --gkd \
     --lmbda 0 --max_steps 2 $C --log_rollouts "$tmp/gkd.jsonl" >/dev/null 2>"$tmp/gkd.err" \
   && grep -q "loss jsd (beta 0.5, top_k 0, temperature 1).*temperature 0.9, top_p 1, top_k 0" "$tmp/gkd.err" \
   && grep -q "lr 2e-05" "$tmp/gkd.err" && grep -q '"source":"dataset"' "$tmp/gkd.jsonl" \
   && ! grep -q '"source":"student"' "$tmp/gkd.jsonl"; then ok gkd_dataset_completions
else fail gkd_dataset_completions "$(tail -3 "$tmp/gkd.err")"; fi
# GKD dataset completions stay whole ("hello<|im_end|>\n": 7 tokens, more than --max_new_tokens 3, which
# limits generation only); only prompt + completion over --max_length is trimmed, prompt first
G="--threads 2 --pad_to_multiple_of 16 --per_device_train_batch_size 2 --save_strategy no --logging_steps 1 --gkd --lmbda 0"
if $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/conv.jsonl" --output_dir "$tmp/gkdw" $G \
     --max_new_tokens 3 --max_steps 1 --shuffle false --log_rollouts "$tmp/gkdw.jsonl" >/dev/null 2>"$tmp/gkdw.err" \
   && grep -q '"completion":"hello<|im_end|>\\n","completion_ids":\[104,101,108,108,111,258,10\]' "$tmp/gkdw.jsonl" \
   && grep -q '"completions/mean_length":5,' "$tmp/gkdw/metrics.jsonl"  # 7 and 3 tokens, "\n" after EOS included
then ok gkd_dataset_completion_whole; else fail gkd_dataset_completion_whole "$(tail -2 "$tmp/gkdw.err"; head -c 300 "$tmp/gkdw.jsonl")"; fi
if $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/conv.jsonl" --output_dir "$tmp/gkdt" $G \
     --max_length 20 --max_steps 1 >/dev/null 2>"$tmp/gkdt.err" && grep -q "prompts lost their oldest tokens to --max_length 20" "$tmp/gkdt.err"
then ok gkd_max_length_trims_prompt; else fail gkd_max_length_trims_prompt "$(tail -2 "$tmp/gkdt.err")"; fi
expect_err gkd_completion_fills_max_length "row 1: its completion (7 tokens) fills --max_length 7 alone" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/conv.jsonl" --output_dir "$tmp/x" $G --max_length 7
expect_err max_length_needs_gkd "--max_length is a GKD flag" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/conv.jsonl" --output_dir "$tmp/x" --max_length 7
if $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/conv.jsonl" --output_dir "$tmp/gkds" --gkd \
     --lmbda 0 --seq_kd --max_steps 2 $C --log_rollouts "$tmp/gkds.jsonl" >/dev/null 2>"$tmp/gkds.err" \
   && grep -q '"source":"teacher"' "$tmp/gkds.jsonl"; then ok gkd_seq_kd
else fail gkd_seq_kd "$(tail -3 "$tmp/gkds.err")"; fi
if $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/conv.jsonl" --output_dir "$tmp/gkdm" --gkd \
     --max_steps 4 $C --gradient_accumulation_steps 2 --log_rollouts "$tmp/gkdm.jsonl" >/dev/null 2>"$tmp/gkdm.err" \
   && grep -q '"source":"dataset"' "$tmp/gkdm.jsonl" && grep -q '"source":"student"' "$tmp/gkdm.jsonl"; then
  ok gkd_lmbda_mix
else fail gkd_lmbda_mix "$(tail -3 "$tmp/gkdm.err"; cut -c1-60 "$tmp/gkdm.jsonl")"; fi

# 4. greedy rollouts are deterministic; sampled rollouts follow the seed
for i in 1 2; do
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/g$i" --max_steps 2 $C \
    --rollout_do_sample false --log_rollouts "$tmp/g$i.jsonl" >/dev/null 2>&1
done
if [ -s "$tmp/g1.jsonl" ] && cmp -s "$tmp/g1.jsonl" "$tmp/g2.jsonl" && cmp -s "$tmp/g1/model.safetensors" "$tmp/g2/model.safetensors"
then ok greedy_deterministic; else fail greedy_deterministic "runs differ"; fi
$BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/s1" --max_steps 1 $C \
  --seed 1 --log_rollouts "$tmp/s1.jsonl" >/dev/null 2>&1
$BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/s2" --max_steps 1 $C \
  --seed 2 --log_rollouts "$tmp/s2.jsonl" >/dev/null 2>&1
[ -s "$tmp/s1.jsonl" ] && ! cmp -s "$tmp/s1.jsonl" "$tmp/s2.jsonl" && ok sampled_follows_seed || fail sampled_follows_seed "same rollouts"

# 5. self-distillation: the teacher sees the privileged columns, so its log-probs differ on the same tokens
for mode in fixed ema live; do
  run "self_$mode" --teacher self --teacher_mode $mode --log_rollouts "$tmp/self_$mode.jsonl" --eval_dataset "$tmp/p.jsonl" \
    --eval_strategy steps --eval_steps 2
done
grep -q '"eval_kl_student_teacher"' "$tmp/self_live/metrics.jsonl" && ok self_live_eval || fail self_live_eval "no eval line"
if grep -q '"teacher_prompt":"<|im_start|>user\\n3+3?\\n\\nHere is a reference solution to this problem:\\n6\\n' \
     "$tmp/self_fixed.jsonl" && grep -q 'within \\\\boxed{}.<|im_end|>' "$tmp/self_fixed.jsonl" \
   && grep -q '"teacher_prompt":"2+2?\\n\\nHere is a reference solution to this problem:\\n4' "$tmp/self_fixed.jsonl"; then
  ok self_teacher_prompt_opsd
else fail self_teacher_prompt_opsd "$(head -c 400 "$tmp/self_fixed.jsonl")"; fi
# at step 1 the fixed teacher has the student's weights: any KL comes from the teacher's prompt
k=$(metric "$tmp/self_fixed/metrics.jsonl" kl_student_teacher 1)
awk -v a="$k" 'BEGIN{exit !(a > 1e-6)}' && ok self_teacher_logprobs_differ || fail self_teacher_logprobs_differ "kl $k"
grep -v '"role"' "$tmp/p.jsonl" >"$tmp/p_str.jsonl"
$BIN distill --model "$tmp/stu" --dataset "$tmp/p_str.jsonl" --output_dir "$tmp/self_same_prompt" --max_steps 2 $C \
  --teacher self --teacher_prompt_template '{prompt}' >/dev/null 2>&1
k=$(metric "$tmp/self_same_prompt/metrics.jsonl" kl_student_teacher 1)
awk -v a="$k" 'BEGIN{exit !(a < 1e-9)}' && ok self_same_prompt_zero_kl || fail self_same_prompt_zero_kl "kl $k"
run self_template --teacher self --teacher_prompt_template 'Q: {problem} A: {solution}' --log_rollouts "$tmp/self_t.jsonl"
grep -q '"teacher_prompt":"<|im_start|>user\\nQ: 3+3? A: 6<|im_end|>' "$tmp/self_t.jsonl" && ok self_template_messages \
  || fail self_template_messages "$(head -c 300 "$tmp/self_t.jsonl")"
grep -q "frozen copy of the initial weights), 0.1 M parameters, weights" "$tmp/self_fixed.err" && ok self_fixed_memory \
  || fail self_fixed_memory "$(grep teacher "$tmp/self_fixed.err")"

# 6. resume with an EMA teacher continues bit for bit
R="--model $tmp/stu --teacher self --teacher_mode ema --teacher_ema_decay 0.5 --dataset $tmp/p.jsonl --max_steps 4 \
   --learning_rate 1e-3 --save_steps 2 --threads 2 --pad_to_multiple_of 16 --per_device_train_batch_size 2 \
   --max_completion_length 8 --logging_steps 1"
$BIN distill $R --output_dir "$tmp/full" >/dev/null 2>&1
$BIN distill $R --output_dir "$tmp/part" --stop_after_steps 2 >/dev/null 2>&1
$BIN distill $R --output_dir "$tmp/part" --resume_from_checkpoint latest >/dev/null 2>"$tmp/err"
if [ -f "$tmp/part/checkpoint-2/teacher_ema/model.safetensors" ] && grep -q "EMA teacher restored" "$tmp/err" \
   && cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors" \
   && [ "$(metric "$tmp/full/metrics.jsonl" loss 4)" = "$(metric "$tmp/part/metrics.jsonl" loss 4)" ] \
   && [ "$(grep -c '"step"' "$tmp/part/metrics.jsonl")" = 4 ]; then ok ema_resume_bit_identical
else fail ema_resume_bit_identical "$(tail -3 "$tmp/err")"; fi

# 7. errors
expect_err no_teacher "--teacher DIR (or --teacher self) is required" \
  $BIN distill --model "$tmp/stu" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x"
expect_err tokenizer_mismatch "distillation needs one shared tokenizer" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea_other" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x"
expect_err gkd_needs_completions "has no completion" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" --gkd
expect_err lmbda_without_gkd "add --gkd" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" --lmbda 0.3
expect_err template_column "the row has no column \"answer\"" \
  $BIN distill --model "$tmp/stu" --teacher self --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" \
  --teacher_prompt_template '{answer}'
expect_err bad_loss "expected jsd, reverse_kl_sampled" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" --loss kl
expect_err sampled_no_topk "do not apply" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" \
  --loss reverse_kl_sampled --loss_top_k 3
expect_err beta_range "--beta 2" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" --beta 2
expect_err max_memory "but --max_memory 0.0 MiB leaves" \
  $BIN distill --model "$tmp/stu" --teacher "$tmp/tea" --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" --max_memory 1KiB

# 8. a student distilled from a peaked teacher (SFT'd to answer " ok") halves its KL on held-out prompts
cat >"$tmp/cfg.json" <<'J'
{"vocab_size": 384, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 512, "initializer_range": 0.02,
 "torch_dtype": "float32", "bos_token_id": 256, "eos_token_id": 258, "hidden_act": "silu", "model_type": "qwen3",
 "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "attention_bias": false}
J
$BIN init --model_config "$tmp/cfg.json" --output_dir "$tmp/t0" --tokenizer $TOK --seed 1 2>/dev/null
$BIN init --model_config "$tmp/cfg.json" --output_dir "$tmp/s0" --tokenizer $TOK --seed 2 2>/dev/null
: >"$tmp/sft.jsonl"; : >"$tmp/train.jsonl"; : >"$tmp/held.jsonl"
for i in $(seq 1 24); do
  w=$(printf "q%02d" "$i"); echo "{\"prompt\": \"$w\", \"completion\": \" ok\"}" >>"$tmp/sft.jsonl"
  echo "{\"prompt\": \"$w\"}" >>"$tmp/train.jsonl"
done
for i in $(seq 50 57); do echo "{\"prompt\": \"q$i\"}" >>"$tmp/held.jsonl"; done
$BIN sft --model "$tmp/t0" --dataset "$tmp/sft.jsonl" --output_dir "$tmp/t1" --max_steps 40 --learning_rate 1e-2 \
  --per_device_train_batch_size 8 --pad_to_multiple_of 16 --save_strategy no --threads 2 >/dev/null 2>&1
L="--model $tmp/s0 --teacher $tmp/t1 --dataset $tmp/train.jsonl --eval_dataset $tmp/held.jsonl --threads 2 --seed 3
   --per_device_train_batch_size 8 --max_completion_length 8 --pad_to_multiple_of 16 --save_strategy no
   --lr_scheduler_type constant --logging_steps 10"
$BIN distill $L --output_dir "$tmp/l0" --max_steps 1 --learning_rate 0 --eval_strategy steps --eval_steps 1 >/dev/null 2>&1
# 100 steps: at 40 the held-out KL of some seeds (and of seed 3 with AVX-512 kernels) sits near 1.2 before it
# drops; at 100 every seed tried (3..7) ends at 0.65 or below, from a start near 2.2.
$BIN distill $L --output_dir "$tmp/l1" --max_steps 100 --learning_rate 1e-2 --eval_strategy steps --eval_steps 100 \
  >/dev/null 2>"$tmp/err"
k0=$(grep -o '"eval_kl_student_teacher":[0-9.e+-]*' "$tmp/l0/metrics.jsonl" | cut -d: -f2)
k1=$(grep -o '"eval_kl_student_teacher":[0-9.e+-]*' "$tmp/l1/metrics.jsonl" | cut -d: -f2)
if [ -n "$k0" ] && [ -n "$k1" ] && awk -v a="$k0" -v b="$k1" 'BEGIN{exit !(a > 0.5 && b < a / 2)}'; then
  ok kl_halves_on_held_out
else fail kl_halves_on_held_out "held-out KL $k0 -> $k1; $(tail -2 "$tmp/err")"; fi

# 9. still info: the memory of student training + teacher inference
out=$($BIN info --model "$tmp/stu" --teacher "$tmp/tea" --teacher_dtype bfloat16 --batch 2 --seq 64 2>&1)
grep -q "^distillation    student training .* + teacher weights .* (bfloat16) + plan score B=2 T=64" <<<"$out" \
  && ok info_teacher || fail info_teacher "$out"
