#!/usr/bin/env bash
# run_policy.sh: what a long run reports and keeps, as Trainer does: the checkpoint policy
# (save_total_limit, save_only_model, save_strategy epoch, the final model written once),
# trainer_state.json's TrainerState fields, the result line and summary (steps of this process,
# train_loss = mean step loss, train and save time apart, tokens/s to 3 significant digits), the
# checks made before any model is loaded, and still --version / --help.
# asan: yes
set -u
source tests/e2e/lib.sh
M=tests/data/models/qwen3_untied
S="--model $M --dataset tests/data/sft/ids.jsonl --per_device_train_batch_size 4 --threads 1 --pad_to_multiple_of 16
   --learning_rate 1e-3 --logging_steps 1"

# 1. save_strategy epoch (2 steps an epoch), save_total_limit 2, the final model linked, not copied
$BIN sft $S --num_train_epochs 3 --save_strategy epoch --save_total_limit 2 --output_dir "$tmp/e" >"$tmp/out" 2>"$tmp/err"
cks=$(cd "$tmp/e" && ls -d checkpoint-* 2>/dev/null | sort -t- -k2 -n | tr '\n' ' ')
if [ $? = 0 ] && [ "$cks" = "checkpoint-4 checkpoint-6 " ] && grep -q "removed .*checkpoint-2 (save_total_limit 2)" "$tmp/err"; then
  ok save_strategy_epoch_and_total_limit
else fail save_strategy_epoch_and_total_limit "checkpoints: $cks; $(tail -2 "$tmp/err")"; fi
if [ "$(stat -c %i "$tmp/e/model.safetensors")" = "$(stat -c %i "$tmp/e/checkpoint-6/model.safetensors")" ]; then
  ok final_model_is_the_last_checkpoint
else fail final_model_is_the_last_checkpoint "output_dir/model.safetensors is a second copy"; fi

# 2. trainer_state.json: TrainerState's fields; the seed a number; log_history = metrics so far
python3 - "$tmp/e/checkpoint-6/trainer_state.json" "$tmp/e/metrics.jsonl" >"$tmp/py" 2>&1 <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for k in ("global_step", "epoch", "max_steps", "log_history", "best_metric", "best_model_checkpoint", "logging_steps",
          "eval_steps", "save_steps", "num_train_epochs", "num_input_tokens_seen", "train_batch_size", "total_flos",
          "is_world_process_zero", "stateful_callbacks", "trial_name"):
    assert k in s, k
assert s["global_step"] == 6 and s["max_steps"] == 6 and s["epoch"] == 3 and s["num_train_epochs"] == 3, s
assert s["save_steps"] == 2 and s["logging_steps"] == 1 and s["best_metric"] is None
assert isinstance(s["seed"], int) and s["seed"] == 42, s["seed"]
m = [json.loads(l) for l in open(sys.argv[2])]
assert [h["step"] for h in s["log_history"]] == [x["step"] for x in m] == [1, 2, 3, 4, 5, 6]
assert all(abs(h["loss"] - x["loss"]) < 1e-12 for h, x in zip(s["log_history"], m))
PY
if [ $? = 0 ]; then ok trainer_state_fields; else fail trainer_state_fields "$(tail -2 "$tmp/py")"; fi

# 3. the result line: one compact JSON line, floats at most 9 significant digits; train_loss is the
#    mean step loss (logging_steps 1: the mean of metrics.jsonl's losses); the summary's tokens/s
python3 - "$tmp/out" "$tmp/e/metrics.jsonl" >"$tmp/py" 2>&1 <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
assert text.count("\n") == 1 and ": " not in text and ", " not in text, text
r = json.loads(text)
for k in ("steps", "steps_run", "loss", "train_loss", "train_seconds", "save_seconds", "tokens_per_second"):
    assert k in r, k
for v in re.findall(r"[-0-9.e+]+", text):
    assert len(re.sub(r"e.*|[-.]|^0+", "", v).lstrip("0")) <= 9, v
losses = [json.loads(l)["loss"] for l in open(sys.argv[2])]
mean = sum(losses) / len(losses)
assert abs(r["train_loss"] - mean) <= 1e-7 * abs(mean), (r["train_loss"], mean)
assert r["steps"] == 6 and r["steps_run"] == 6 and r["save_seconds"] > 0 and r["train_seconds"] > 0
PY
if [ $? = 0 ]; then ok result_line_compact_and_train_loss; else fail result_line_compact_and_train_loss "$(tail -2 "$tmp/py")"; fi
line=$(grep "^trained " "$tmp/err")
if grep -qE "^trained 6 steps \(1 to 6\) in [0-9.]+ s: [0-9.]+ s training, [0-9.]+ s saving; ([0-9]{1,3}|[0-9][.][0-9]{2}|[0-9]{2}[.][0-9]|[0-9]{3}0*) tokens/s; train_loss " <<<"$line"; then
  ok summary_line
else fail summary_line "$line"; fi

# 4. a resumed run counts its own steps and time
$BIN sft $S --max_steps 8 --save_steps 3 --output_dir "$tmp/r" --stop_after_steps 4 >/dev/null 2>&1
$BIN sft $S --max_steps 8 --save_steps 3 --output_dir "$tmp/r" --resume_from_checkpoint latest >"$tmp/out" 2>"$tmp/err"
if grep -q '"steps":8,"steps_run":5,' "$tmp/out" && grep -q "^trained 5 steps (4 to 8)" "$tmp/err"; then ok resume_counts_its_own_steps
else fail resume_counts_its_own_steps "$(cat "$tmp/out") $(grep trained "$tmp/err")"; fi

# 5. save_only_model: checkpoints without optimizer state
$BIN sft $S --max_steps 2 --save_steps 1 --save_only_model --output_dir "$tmp/so" >/dev/null 2>&1
if [ -f "$tmp/so/checkpoint-1/model.safetensors" ] && [ ! -e "$tmp/so/checkpoint-1/optimizer.safetensors" ] \
   && grep -q '"has_optimizer_state":	false' "$tmp/so/checkpoint-1/trainer_state.json"; then ok save_only_model
else fail save_only_model "$(ls "$tmp/so/checkpoint-1")"; fi

# 6. checked before any model loads: a model whose weights file is broken is never reached
$BIN init --model_config tests/data/models/qwen3_tied/config.json --output_dir "$tmp/bm" --tokenizer tests/data/sft/tok 2>/dev/null
head -c 100 "$tmp/bm/model.safetensors" >"$tmp/bm/x" && mv "$tmp/bm/x" "$tmp/bm/model.safetensors"
printf '{"prompt": "a", "answer": 1}\n{"prompt": 3}\n' >"$tmp/bad.jsonl"
printf '{"prompt": "a", "answer": 1}\n{"prompt": "b", "answer": 2}\n' >"$tmp/good.jsonl"
early() {  # name, expected substring, command...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$out" && ! grep -q "model.safetensors" <<<"$out"; then ok "$name"
  else fail "$name" "rc=$rc: $(tail -2 <<<"$out")"; fi
}
mkdir -p "$tmp/ro" && touch "$tmp/ro/file"
early early_output_dir "--output_dir: $tmp/ro/file" $BIN sft --model "$tmp/bm" --dataset tests/data/sft/ids.jsonl --output_dir "$tmp/ro/file/x"
early early_grpo_dataset "$tmp/bad.jsonl:2" $BIN grpo --model "$tmp/bm" --dataset "$tmp/bad.jsonl" --reward exact_match:answer --output_dir "$tmp/x"
early early_grpo_reward "no_such_reward" $BIN grpo --model "$tmp/bm" --dataset "$tmp/good.jsonl" --reward no_such_reward --output_dir "$tmp/x"
early early_distill_dataset "$tmp/bad.jsonl:2" $BIN distill --model "$tmp/bm" --teacher "$tmp/bm" --dataset "$tmp/bad.jsonl" --output_dir "$tmp/x"
early early_eval_metric "no_such_metric" $BIN eval --model "$tmp/bm" --dataset "$tmp/good.jsonl" --metric no_such_metric

# 7. --version and --help
v=$($BIN --version)
c=$(sed -n 's/^still [0-9.]* (commit \([0-9a-f]*\)\(-dirty\)\?)$/\1/p' <<<"$v")
# the commit built from is this tree's HEAD or an ancestor of it (a build before the last commit)
if [ -n "$c" ] && { ! git rev-parse HEAD >/dev/null 2>&1 || git merge-base --is-ancestor "$c" HEAD; } \
   && grep -q "^build: .*openmp" <<<"$v"; then ok version
else fail version "$v (HEAD $(git rev-parse --short=12 HEAD 2>/dev/null))"; fi
# OpenBLAS kernels: where the CPU has AVX2 and FMA, never the library's pre-AVX2 fallback (an
# unrecognised newer CPU; src/backend/cpu/blas_core.c), unless the caller chose OPENBLAS_CORETYPE
core=$(env -u OPENBLAS_CORETYPE $BIN --version | sed -n 's/^build: openblas-openmp (\([A-Za-z0-9_]*\) kernels).*/\1/p')
if ! grep -q '^build: openblas' <<<"$v"; then skip blas_kernels "this build has no OpenBLAS"
elif ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then skip blas_kernels "this CPU has no AVX2/FMA"
elif [ -n "$core" ] && ! grep -qixE 'prescott|core2|penryn|dunnington|nehalem|atom|sandybridge|barcelona|bobcat|opteron(_sse3)?|bulldozer|piledriver|steamroller|excavator' <<<"$core"; then ok blas_kernels_use_avx2
else fail blas_kernels_use_avx2 "OpenBLAS runs '${core:-?}' kernels on a CPU with AVX2: $(env -u OPENBLAS_CORETYPE $BIN --version | sed -n 2p)"; fi
h=$($BIN sft --help)
if grep -q -- "--model TEXT  (required)" <<<"$h" && grep -q -- "--dataset TEXT  (required)" <<<"$h" \
   && grep -q -- "--output_dir TEXT  (required)" <<<"$h" && ! grep -q -- "--eval_dataset TEXT  (required)" <<<"$h" \
   && grep -qE -- "--model_name_or_path +=  ?--model" <<<"$h" && grep -qE -- "--dataset_name +=  ?--dataset" <<<"$h"; then
  ok help_marks_required_and_aliases
else fail help_marks_required_and_aliases "$(head -8 <<<"$h")"; fi
