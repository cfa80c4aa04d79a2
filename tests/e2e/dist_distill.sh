#!/usr/bin/env bash
# dist_distill.sh: `mpirun -np 2 still distill`: 2 ranks x B rows generate exactly the rollouts of
# 1 rank x 2B (--log_rollouts: rank 0's file plus FILE.rank1 hold the same (step, prompt,
# source, completion) rows; draws keyed by a row's place in the whole step), normalise by the
# step's global completion-token count, and end with the same weights (fp32 reduction
# tolerance): DistillationTrainer defaults, and GKD with its per-micro-batch coin and
# gradient accumulation (student and teacher rollouts in one step).
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_distill "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
M=tests/data/models
$BIN init --model_config $M/qwen3_tied/config.json --output_dir "$tmp/stu" --tokenizer tests/data/sft/tok 2>/dev/null
$BIN init --model_config $M/qwen3_untied/config.json --output_dir "$tmp/tea" --tokenizer tests/data/sft/tok --seed 7 2>/dev/null
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Q$i: $i + 1?\"}, {\"role\": \"assistant\", \"content\": \"$((i + 1))\"}]}"
done >"$tmp/p.jsonl"
C="--model $tmp/stu --teacher $tmp/tea --dataset $tmp/p.jsonl --threads 1 --pad_to_multiple_of 16 --max_completion_length 6
   --save_strategy no --logging_steps 1 --learning_rate 1e-3 --max_steps 2"
# the rollout rows of a run (every rank's file), without the per-row KL (scored in other batch shapes)
rows() { cat "$@" | python3 -c '
import json, sys
for l in sorted(json.dumps({k: v for k, v in json.loads(l).items() if k != "kl_student_teacher"}, sort_keys=True) for l in sys.stdin):
    print(l)'; }
same_on_two_ranks() {  # name, flags...
  local name=$1; shift
  $BIN distill $C "$@" --per_device_train_batch_size 4 --output_dir "$tmp/$name.1" --log_rollouts "$tmp/$name.1.jsonl" \
    >/dev/null 2>"$tmp/err1"
  local rc1=$?
  $MPI $BIN distill $C "$@" --per_device_train_batch_size 2 --output_dir "$tmp/$name.2" --log_rollouts "$tmp/$name.2.jsonl" \
    --zero_stage 1 >/dev/null 2>"$tmp/err2"
  local rc2=$?
  rows "$tmp/$name.1.jsonl" >"$tmp/$name.r1"; rows "$tmp/$name.2.jsonl" "$tmp/$name.2.jsonl.rank1" >"$tmp/$name.r2"
  local d
  d=$("$BUILD/tests/tools/st_diff" --norm "$tmp/$name.1/model.safetensors" "$tmp/$name.2/model.safetensors" 1e-4 2>&1)
  local drc=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -s "$tmp/$name.r1" ] && [ -s "$tmp/$name.2.jsonl.rank1" ] \
     && cmp -s "$tmp/$name.r1" "$tmp/$name.r2" && [ $drc -eq 0 ]; then
    ok "$name ($(wc -l <"$tmp/$name.r1") rollouts; $d)"
  else
    fail "$name" "rc $rc1/$rc2, rollouts $(cmp "$tmp/$name.r1" "$tmp/$name.r2" 2>&1 | head -1), $d; $(tail -2 "$tmp/err2")"
  fi
}
same_on_two_ranks distill_two_ranks_same_rollouts
same_on_two_ranks gkd_two_ranks_same_rollouts --gkd --lmbda 0.5 --seq_kd --gradient_accumulation_steps 2
