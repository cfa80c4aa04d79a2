#!/usr/bin/env bash
# reward_cli.sh: reward models end to end on a tiny model with the byte-level tokenizer: still init
# making a sequence classifier of a causal LM (and a random one), still score on every row format,
# still reward on text, conversational and pre-tokenised pairs with TRL's metric names, bit-identical
# resume, grpo / rloo with --reward model:DIR beside other rewards, and the errors users meet.
# asan: yes
set -u
BIN=${STILL_BIN:-./still}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
expect_err() {  # name, expected substring, command...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$out"; then ok "$name"; else fail "$name" "rc=$rc, stderr: $(tail -3 <<<"$out")"; fi
}
$BIN init --model_config tests/data/models/qwen3_tied/config.json --output_dir "$tmp/m" --tokenizer tests/data/sft/tok 2>/dev/null

# 1. a causal LM becomes a classifier: its weights, lm_head dropped, a score head, TRL's pad token
if $BIN init --model "$tmp/m" --num_labels 1 --output_dir "$tmp/rm" --seed 3 2>"$tmp/err" \
   && grep -q '"Qwen3ForSequenceClassification"' "$tmp/rm/config.json" && grep -q '"num_labels":[[:space:]]*1' "$tmp/rm/config.json" \
   && grep -q '"LABEL_0"' "$tmp/rm/config.json" && grep -q '"pad_token_id"' "$tmp/rm/config.json" \
   && head -c 4096 "$tmp/rm/model.safetensors" | grep -aq 'score.weight' && [ -f "$tmp/rm/tokenizer.json" ]; then
  ok init_classifier_from_causal
else fail init_classifier_from_causal "$(tail -3 "$tmp/err"; cat "$tmp/rm/config.json" 2>&1 | head -5)"; fi
if $BIN init --model_config tests/data/models/qwen3_tied/config.json --num_labels 3 --output_dir "$tmp/rm3" \
     --tokenizer tests/data/sft/tok 2>"$tmp/err" && grep -q '"LABEL_2"' "$tmp/rm3/config.json"; then
  ok init_random_classifier
else fail init_random_classifier "$(tail -3 "$tmp/err")"; fi
expect_err init_model_needs_num_labels "--num_labels" $BIN init --model "$tmp/m" --output_dir "$tmp/x"
expect_err init_one_source "give one of" $BIN init --output_dir "$tmp/x" --num_labels 1
expect_err classifier_not_for_generate "sequence classifier" $BIN generate --model "$tmp/rm" --prompt hi

# 2. still score: one line per row in every format; pairs give both rewards; several labels give logits
cat >"$tmp/rows.jsonl" <<'J'
{"text": "hello world"}
{"text": "the quick brown fox jumps"}
{"text": "abc"}
J
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n' >"$tmp/chat.jsonl"
printf '{"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5"}\n{"prompt": "1 + 1 =", "chosen": " 2", "rejected": " 3"}\n' >"$tmp/pairs.jsonl"
cat >"$tmp/cpairs.jsonl" <<'J'
{"prompt": [{"role": "user", "content": "2 + 2?"}], "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]}
{"chosen": [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"}], "rejected": [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "3"}]}
J
if $BIN score --model "$tmp/rm" --dataset "$tmp/rows.jsonl" --output "$tmp/s.jsonl" --batch_size 2 --threads 2 2>"$tmp/err" \
   && [ "$(grep -c '"reward"' "$tmp/s.jsonl")" = 3 ]; then ok score_text_rows; else fail score_text_rows "$(tail -3 "$tmp/err")"; fi
# the same rows one at a time: batching and padding change nothing
$BIN score --model "$tmp/rm" --dataset "$tmp/rows.jsonl" --output "$tmp/s1.jsonl" --batch_size 1 --pad_to_multiple_of 1 \
  --threads 2 2>/dev/null
if [ -s "$tmp/s1.jsonl" ] && awk 'NR==FNR {a[FNR]=$0; next} {gsub(/[^0-9.e+-]/, "", a[FNR]); x=$0; gsub(/[^0-9.e+-]/, "", x);
     d = a[FNR] - x; if (d < 0) d = -d; if (d > 1e-5) bad = 1} END {exit bad}' "$tmp/s.jsonl" "$tmp/s1.jsonl"; then
  ok score_batching_invariant
else fail score_batching_invariant "$(paste "$tmp/s.jsonl" "$tmp/s1.jsonl")"; fi
if out=$($BIN score --model "$tmp/rm" --dataset "$tmp/chat.jsonl" --threads 2 2>"$tmp/err") && grep -q '"reward"' <<<"$out"; then
  ok score_messages_stdout
else fail score_messages_stdout "$(tail -3 "$tmp/err")"; fi
if out=$($BIN score --model "$tmp/rm" --dataset "$tmp/cpairs.jsonl" --threads 2 2>"$tmp/err") \
   && [ "$(grep -c '"reward_chosen".*"reward_rejected"' <<<"$out")" = 2 ]; then ok score_pairs
else fail score_pairs "$(tail -3 "$tmp/err"; echo "$out")"; fi
if out=$($BIN score --model "$tmp/rm3" --dataset "$tmp/rows.jsonl" --threads 2 2>"$tmp/err") \
   && [ "$(grep -c '"logits":\[[^],]*,[^],]*,[^],]*\]' <<<"$out")" = 3 ]; then ok score_three_labels
else fail score_three_labels "$(tail -3 "$tmp/err"; echo "$out")"; fi
expect_err score_needs_classifier "not a sequence classifier" $BIN score --model "$tmp/m" --dataset "$tmp/rows.jsonl"
printf '{"text": 5}\n' >"$tmp/bad.jsonl"
expect_err score_bad_row "bad.jsonl:1" $BIN score --model "$tmp/rm" --dataset "$tmp/bad.jsonl"

# 3. still reward: text, conversational and pre-tokenised pairs; TRL's metric names; a causal start
R="--max_steps 2 --logging_steps 1 --threads 2 --per_device_train_batch_size 2 --pad_to_multiple_of 16 --save_strategy no"
for f in pairs cpairs; do
  if $BIN reward --model "$tmp/rm" --dataset "$tmp/$f.jsonl" --output_dir "$tmp/r_$f" $R >/dev/null 2>"$tmp/err" \
     && [ -f "$tmp/r_$f/model.safetensors" ]; then ok "reward_$f"; else fail "reward_$f" "$(tail -3 "$tmp/err")"; fi
done
missing=""
for k in loss grad_norm learning_rate accuracy margin min_reward mean_reward max_reward num_tokens; do
  grep -q "\"$k\"" "$tmp/r_pairs/metrics.jsonl" 2>/dev/null || missing="$missing $k"
done
if [ -z "$missing" ]; then ok reward_metric_names; else fail reward_metric_names "not in metrics.jsonl:$missing"; fi
if $BIN reward --model "$tmp/m" --dataset "$tmp/pairs.jsonl" --output_dir "$tmp/r_causal" $R >/dev/null 2>"$tmp/err" \
   && grep -q '"Qwen3ForSequenceClassification"' "$tmp/r_causal/config.json"; then ok reward_from_causal
else fail reward_from_causal "$(tail -3 "$tmp/err")"; fi
expect_err reward_needs_pairs "preference rows" $BIN reward --model "$tmp/rm" --dataset "$tmp/rows.jsonl" --output_dir "$tmp/x"
expect_err reward_needs_one_label "3 labels" $BIN reward --model "$tmp/rm3" --dataset "$tmp/pairs.jsonl" --output_dir "$tmp/x"
printf '{"chosen_ids": [1, 2], "rejected_ids": [1, 99999]}\n' >"$tmp/oov.jsonl"
expect_err reward_ids_vocab "outside the vocabulary" $BIN reward --model "$tmp/rm" --dataset "$tmp/oov.jsonl" --output_dir "$tmp/x"

# 4. resume: interrupted after checkpoint 2 and resumed = uninterrupted, bit for bit
for i in 0 1 2 3 4 5 6 7; do echo "{\"chosen_ids\": [$((i + 3)), 7, 9, $((i + 20))], \"rejected_ids\": [$((i + 5)), 8]}"; done >"$tmp/ids.jsonl"
K="--model $tmp/rm --dataset $tmp/ids.jsonl --max_steps 4 --save_steps 2 --logging_steps 1 --threads 2
   --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --learning_rate 1e-3 --pad_to_multiple_of 8"
$BIN reward $K --output_dir "$tmp/full" >/dev/null 2>&1
$BIN reward $K --output_dir "$tmp/part" --stop_after_steps 2 >/dev/null 2>&1
$BIN reward $K --output_dir "$tmp/part" --resume_from_checkpoint latest >/dev/null 2>"$tmp/err"
if [ -f "$tmp/full/model.safetensors" ] && cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors"; then
  ok reward_resume_bit_identical
else fail reward_resume_bit_identical "$(tail -3 "$tmp/err")"; fi

# 5. grpo / rloo with --reward model:DIR beside another reward: batched through the engine, named
#    after the directory as TRL names a model reward; its values are what still score gives the
#    same text (prompt + completion, no special tokens) pooled at the tokenizer's pad token
for i in 0 1 2 3; do echo "{\"prompt\": \"Q$i: what is $i + 1?\", \"answer\": $((i + 1))}"; done >"$tmp/p.jsonl"
echo '{"prompt": [{"role": "user", "content": "hi"}], "answer": 1}' >"$tmp/pc.jsonl"
echo '{"prompt": [{"role": "user", "content": "yo"}], "answer": 2}' >>"$tmp/pc.jsonl"
RL="--model $tmp/m --max_completion_length 5 --per_device_train_batch_size 4 --num_generations 2 --max_steps 1
    --logging_steps 1 --threads 2 --pad_to_multiple_of 8 --save_strategy no"
if $BIN grpo $RL --dataset "$tmp/p.jsonl" --output_dir "$tmp/g" --reward model:"$tmp/rm" --log_completions \
     >/dev/null 2>"$tmp/err" && grep -q '"rewards/rm/mean"' "$tmp/g/metrics.jsonl"; then
  ok grpo_model_reward
else fail grpo_model_reward "$(tail -3 "$tmp/err")"; fi
python3 - "$tmp/p.jsonl" "$tmp/g/completions.jsonl" "$tmp/texts.jsonl" <<'PY'
import json, sys
prompts = [json.loads(l)["prompt"] for l in open(sys.argv[1])]
with open(sys.argv[3], "w") as f:
    for l in open(sys.argv[2]):
        c = json.loads(l)
        f.write(json.dumps(prompts[c["prompt_index"]] + c["completion"]) + "\n")
PY
$BIN tokenize --model "$tmp/rm" --jsonl <"$tmp/texts.jsonl" 2>/dev/null | sed 's/^/{"input_ids": /; s/$/}/' >"$tmp/tids.jsonl"
$BIN score --model "$tmp/rm" --dataset "$tmp/tids.jsonl" --output "$tmp/ts.jsonl" --pad_to_multiple_of 1 --threads 2 2>/dev/null
m=$(python3 - "$tmp/g/completions.jsonl" "$tmp/ts.jsonl" <<'PY' 2>&1
import json, sys
a = [json.loads(l)["reward"] for l in open(sys.argv[1])]
b = [json.loads(l)["reward"] for l in open(sys.argv[2])]
bad = len(a) != len(b) or len(a) == 0 or any(abs(x - y) > 1e-4 * max(1, abs(y)) for x, y in zip(a, b))
print("mismatch %s vs %s" % (a, b) if bad else "ok")
PY
)
if [ "$m" = ok ]; then ok grpo_model_reward_equals_score; else fail grpo_model_reward_equals_score "$m"; fi
if $BIN rloo $RL --dataset "$tmp/pc.jsonl" --output_dir "$tmp/rl" --reward model:"$tmp/rm" --reward 'regex:[a-z]' \
     --reward_weights 1,0.5 >/dev/null 2>"$tmp/err" && grep -q '"rewards/rm/mean"' "$tmp/rl/metrics.jsonl" \
   && grep -q '"rewards/regex/mean"' "$tmp/rl/metrics.jsonl"; then
  ok rloo_model_reward_conversational_combined
else fail rloo_model_reward_conversational_combined "$(tail -3 "$tmp/err")"; fi
expect_err model_reward_causal "a causal LM, not a reward model" $BIN grpo $RL --dataset "$tmp/p.jsonl" \
  --output_dir "$tmp/x" --reward model:"$tmp/m"
expect_err model_reward_missing "$tmp/nope/config.json" $BIN grpo $RL --dataset "$tmp/p.jsonl" --output_dir "$tmp/x" \
  --reward model:"$tmp/nope"
if $BIN eval --model "$tmp/m" --dataset "$tmp/p.jsonl" --metric model:"$tmp/rm" --max_new_tokens 3 --threads 2 \
     --output_dir "$tmp/ev" >"$tmp/out" 2>"$tmp/err" && grep -q 'rm' "$tmp/out"; then ok eval_model_metric
else fail eval_model_metric "$(tail -3 "$tmp/err"; cat "$tmp/out")"; fi

# 6. what still writes is what transformers loads as Qwen3ForSequenceClassification: config fields
#    as PretrainedConfig reads them, exactly the class's tensors, and the rewards of a PyTorch
#    forward with transformers' pooling (scripts/ref_reward.py check; needs Debian's torch)
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  P=tests/data/reward/pairs.jsonl
  $BIN reward --model tests/data/reward/rm --dataset $P --output_dir "$tmp/rt" $R >/dev/null 2>&1
  for d in rt rm; do
    $BIN score --model "$tmp/$d" --dataset $P --output "$tmp/$d.scores" --threads 2 2>/dev/null
    out=$(/usr/bin/python3 scripts/ref_reward.py check "$tmp/$d" $P "$tmp/$d.scores" 2>&1)
    if [ $? -eq 0 ]; then ok "transformers_layout_$d"; else fail "transformers_layout_$d" "$(tail -3 <<<"$out")"; fi
  done
else
  echo "skip transformers_layout: Debian's python3-torch is not installed"
fi
