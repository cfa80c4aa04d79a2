#!/usr/bin/env bash
# dist_grpo.sh: `mpirun -np 2 still grpo / rloo`: 2 ranks x B completions generate exactly the
# rollouts of 1 rank x 2B (completions.jsonl byte for byte: draws keyed by the global prompt
# index), gather rewards and advantages the same way, and end with the same weights (fp32
# reduction tolerance), with ZeRO-0 and ZeRO-1.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_grpo "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
$BIN init --model_config tests/data/models/qwen3_tied/config.json --output_dir "$tmp/m" --tokenizer tests/data/sft/tok 2>/dev/null
for i in 0 1 2 3 4 5 6 7; do echo "{\"prompt\": \"Q$i: what is $i + 1?\", \"answer\": $((i + 1))}"; done >"$tmp/p.jsonl"
RL="--model $tmp/m --dataset $tmp/p.jsonl --max_completion_length 6 --num_generations 4 --gradient_accumulation_steps 2
    --max_steps 1 --logging_steps 1 --threads 1 --pad_to_multiple_of 16 --save_strategy no --learning_rate 1e-3
    --log_completions --reward length:4 --reward regex:[0-9]"
# the same round on 1 and 2 ranks: rollouts identical, metrics equal, weights within fp32 error
# norm-wise per tensor (observed 6e-7; other rollouts or a wrong loss scale move them by ~1e-3
# each; st_diff --norm says why not max-abs)
same_on_two_ranks() {  # name, command + flags
  local name=$1; shift
  $BIN "$@" $RL --per_device_train_batch_size 8 --output_dir "$tmp/$name.1" >/dev/null 2>"$tmp/err1"
  local rc1=$?
  $MPI $BIN "$@" $RL --per_device_train_batch_size 4 --output_dir "$tmp/$name.2" >/dev/null 2>"$tmp/err2"
  local rc2=$?
  local d m
  d=$("$BUILD/tests/tools/st_diff" --norm "$tmp/$name.1/model.safetensors" "$tmp/$name.2/model.safetensors" 1e-4 2>&1)
  local drc=$?
  m=$(python3 - "$tmp/$name.1/metrics.jsonl" "$tmp/$name.2/metrics.jsonl" <<'PY' 2>&1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) > 0
for x, y in zip(a, b):
    for k in x:
        if "time" in k or "per_second" in k or k == "plans": continue
        assert abs(x[k] - y[k]) <= 1e-5 * max(1.0, abs(x[k])), (k, x[k], y[k])
PY
)
  local mrc=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -s "$tmp/$name.1/completions.jsonl" ] \
     && cmp -s "$tmp/$name.1/completions.jsonl" "$tmp/$name.2/completions.jsonl" && [ $drc -eq 0 ] && [ $mrc -eq 0 ]; then
    ok "$name ($d)"
  else
    fail "$name" "rc $rc1/$rc2, completions $(cmp "$tmp/$name.1/completions.jsonl" "$tmp/$name.2/completions.jsonl" 2>&1 | head -1), $d, metrics: $(tail -1 <<<"$m"); $(tail -2 "$tmp/err2")"
  fi
}
same_on_two_ranks grpo_two_ranks_same_rollouts grpo
same_on_two_ranks grpo_zero1_loss_grpo_beta grpo --zero_stage 1 --loss_type grpo --beta 0.1
same_on_two_ranks rloo_two_ranks_same_rollouts rloo --zero_stage 1
# each rank's share of a round must be whole prompts (B x GA a multiple of num_generations)
out=$($MPI $BIN grpo $RL --per_device_train_batch_size 1 --output_dir "$tmp/x" 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && grep -q "completions per rank) must be a multiple of --num_generations 4" <<<"$out"; then
  ok share_must_be_whole_prompts
else fail share_must_be_whole_prompts "rc=$rc $(tail -2 <<<"$out")"; fi
