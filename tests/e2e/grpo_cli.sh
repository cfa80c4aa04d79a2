#!/usr/bin/env bash
# grpo_cli.sh: still grpo (every loss_type), still rloo and still eval end to end on a tiny model
# with the byte-level tokenizer: TRL metric names in metrics.jsonl, a cmd: reward, eval.json and
# generations.jsonl, and the errors users meet (missing or bad rewards, a reward program that
# answers garbage, batch sizes that do not divide).
# asan: yes
set -u
source tests/e2e/lib.sh
$BIN init --model_config tests/data/models/qwen3_tied/config.json --output_dir "$tmp/m" --tokenizer tests/data/sft/tok 2>/dev/null
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"prompt\": \"Q$i: what is $i + 1?\", \"answer\": $((i + 1)), \"x\": $i, \"completion\": \" $((i + 1))\"}"
done >"$tmp/p.jsonl"
echo '{"prompt": [{"role": "user", "content": "hi"}], "answer": 1, "x": 1}' >>"$tmp/p.jsonl"
RL="--model $tmp/m --dataset $tmp/p.jsonl --max_completion_length 6 --per_device_train_batch_size 4 --num_generations 4
    --gradient_accumulation_steps 2 --max_steps 2 --logging_steps 1 --threads 1 --pad_to_multiple_of 16
    --save_strategy no --learning_rate 1e-3"

# 1. grpo with every loss_type; TRL's metric names
for lt in grpo bnpo dr_grpo dapo; do
  if $BIN grpo $RL --output_dir "$tmp/g_$lt" --loss_type $lt --reward 'regex:[0-9]' --reward length:4 \
       --reward_weights 1,0.5 --beta 0.04 >"$tmp/out" 2>"$tmp/err" && [ -f "$tmp/g_$lt/model.safetensors" ] \
       && grep -q '"steps":2,' "$tmp/out"; then ok "grpo_$lt"; else fail "grpo_$lt" "$(tail -3 "$tmp/err")"; fi
done
expect_keys grpo_metric_names "$tmp/g_dapo/metrics.jsonl" loss grad_norm reward reward_std rewards/regex/mean \
  rewards/regex/std rewards/length/mean frac_reward_zero_std kl entropy clip_ratio/low_mean clip_ratio/high_mean \
  clip_ratio/region_mean completions/mean_length completions/clipped_ratio completions/mean_terminated_length \
  num_tokens time/generation time/training
# the reward curve and the KL to the reference beside loss.svg
if [ -s "$tmp/g_dapo/loss.svg" ] && grep -q "reward (2 points)" "$tmp/g_dapo/reward.svg" 2>/dev/null \
   && grep -q "KL to the reference" "$tmp/g_dapo/kl.svg" 2>/dev/null; then ok grpo_plots
else fail grpo_plots "$(ls "$tmp/g_dapo")"; fi

# 2. rloo (k1 KL in the reward), scale_rewards / num_iterations / mask_truncated_completions flags
if $BIN rloo $RL --output_dir "$tmp/r" --reward exact_match:answer --normalize_advantages --reward_clip_range=-1,1 \
     >/dev/null 2>"$tmp/err" && grep -q '"kl"' "$tmp/r/metrics.jsonl" && grep -q '"rewards/exact_match/mean"' "$tmp/r/metrics.jsonl"
then ok rloo; else fail rloo "$(tail -3 "$tmp/err")"; fi
if $BIN grpo $RL --output_dir "$tmp/g2" --reward format --scale_rewards batch --num_iterations 2 --epsilon_high 0.28 \
     --mask_truncated_completions --temperature 0.9 --top_k 50 --top_p 0.95 --max_steps 4 >/dev/null 2>"$tmp/err"
then ok grpo_iterations_flags; else fail grpo_iterations_flags "$(tail -3 "$tmp/err")"; fi

# 3. a cmd: reward program (columns reach it)
if $BIN grpo $RL --output_dir "$tmp/c" --reward "cmd:tests/data/rewards/echo_x.sh" >/dev/null 2>"$tmp/err" \
   && grep -q '"rewards/echo_x.sh/mean"' "$tmp/c/metrics.jsonl"; then ok cmd_reward; else fail cmd_reward "$(tail -3 "$tmp/err")"; fi
expect_err cmd_reward_garbage "reward program 'tests/data/rewards/garbage.sh' answered \"banana\"" \
  $BIN grpo $RL --output_dir "$tmp/x" --reward cmd:tests/data/rewards/garbage.sh
expect_err cmd_reward_crash "reward program 'tests/data/rewards/crash.sh' exited with status 3" \
  $BIN grpo $RL --output_dir "$tmp/x" --reward cmd:tests/data/rewards/crash.sh

# 4. errors
expect_err no_reward "--reward SPEC is required" $BIN grpo $RL --output_dir "$tmp/x"
expect_err bad_reward "unknown reward" $BIN grpo $RL --output_dir "$tmp/x" --reward bleu
expect_err missing_column 'needs a column "solution", which the dataset does not have (its columns: "prompt", "answer", "x", "completion")' \
  $BIN grpo $RL --output_dir "$tmp/x" --reward exact_match:solution
if $BIN grpo $RL --output_dir "$tmp/l3" --reward length:1 --reward length:2 --reward length:3 --max_steps 1 \
     >/dev/null 2>"$tmp/err" && grep -q '"rewards/length/mean"' "$tmp/l3/metrics.jsonl" \
     && grep -q '"rewards/length_2/mean"' "$tmp/l3/metrics.jsonl" && grep -q '"rewards/length_3/mean"' "$tmp/l3/metrics.jsonl"
then ok three_length_rewards; else fail three_length_rewards "$(tail -3 "$tmp/err")"; fi
expect_err bad_regex "bad regular expression" $BIN grpo $RL --output_dir "$tmp/x" --reward 'regex:(a'
expect_err one_generation "--num_generations 1 is out of range: expected an integer >= 2" $BIN grpo $RL --output_dir "$tmp/x" --reward format --num_generations 1
expect_err not_multiple "must be a multiple of --num_generations 3" \
  $BIN grpo $RL --output_dir "$tmp/x" --reward format --num_generations 3
expect_err weights_count "--reward_weights has 2 values for 1" \
  $BIN grpo $RL --output_dir "$tmp/x" --reward format --reward_weights 1,2
expect_err steps_per_generation "--steps_per_generation 4 is not supported yet" \
  $BIN grpo $RL --output_dir "$tmp/x" --reward format --steps_per_generation 4
expect_err bad_loss_type "--loss_type cispo" $BIN grpo $RL --output_dir "$tmp/x" --reward format --loss_type cispo
expect_err max_memory "but --max_memory 0.0 MiB leaves" $BIN rloo $RL --output_dir "$tmp/x" --reward format --max_memory 1KiB
expect_err bad_optim "--optim sgd is not supported yet" $BIN grpo $RL --output_dir "$tmp/x" --reward format --optim sgd

# 5. eval: metrics, loss / perplexity on rows with a completion, files
out=$($BIN eval --model "$tmp/m" --dataset "$tmp/p.jsonl" --metric exact_match:answer --metric 'regex:[0-9]' \
  --max_new_tokens 6 --threads 1 --pad_to_multiple_of 16 --output_dir "$tmp/ev" 2>"$tmp/err")
if [ $? -eq 0 ] && grep -q '"exact_match:answer"' <<<"$out" && grep -q '"perplexity"' <<<"$out" \
   && grep -q '"loss_rows":8,' <<<"$out" && grep -q '{"rows":9,' <<<"$out" && [ "$(wc -l <<<"$out")" = 1 ] && [ -f "$tmp/ev/eval.json" ] \
   && [ "$(wc -l <"$tmp/ev/generations.jsonl")" -eq 9 ] && grep -q '"finish_reason"' "$tmp/ev/generations.jsonl"
then ok eval; else fail eval "$out $(tail -3 "$tmp/err")"; fi
# greedy: the same generations twice
$BIN eval --model "$tmp/m" --dataset "$tmp/p.jsonl" --max_new_tokens 6 --threads 1 --pad_to_multiple_of 16 \
  --output_dir "$tmp/ev2" >/dev/null 2>&1
if cmp -s <(grep -o '"token_ids":[^]]*' "$tmp/ev/generations.jsonl") <(grep -o '"token_ids":[^]]*' "$tmp/ev2/generations.jsonl")
then ok eval_greedy_deterministic; else fail eval_greedy_deterministic "generations differ"; fi
expect_err eval_no_dataset "--dataset FILE.jsonl is required" $BIN eval --model "$tmp/m"
