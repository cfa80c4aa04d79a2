#!/usr/bin/env bash
# dist_fail.sh: a rank that dies or fails mid-run never leaves the others hanging. Under
# --tp_size 2 (every step all-reduces inside the group) rank 1 is killed (SIGKILL) after training
# has started: the job must end with an error long before --ddp_timeout (600 s here); and a rank
# that fails mid-run (2 data-parallel GRPO ranks, rank 1's reward program exits after two rounds)
# must stop with the error naming the program while rank 0 is inside the step's collectives, the
# job aborted (nonzero) within the same bound.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_fail "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
mpid=0
on_exit 'kill -9 $mpid 2>/dev/null'
BOUND=60  # seconds: the job's end after the failure, against a 600 s --ddp_timeout

# the processes under pid $1 (mpirun's children and theirs)
descendants() {
  local p
  for p in $(ps -o pid= --ppid "$1"); do echo "$p"; descendants "$p"; done
}
# the pid of the still process of world rank $2 under mpirun pid $1
rank_pid() {
  local p
  for p in $(descendants "$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" \
       && [ "$(readlink "/proc/$p/exe")" = "$(readlink -f "$BIN")" ]; then echo "$p"; return; fi
  done
}

M=tests/data/models/qwen3_tied
timeout -s KILL 300 mpirun $MPI_FLAGS -np 2 $BIN sft --model $M --dataset tests/data/sft/ids.jsonl --tp_size 2 \
  --max_steps 1000000 --logging_steps 1 --save_strategy no --threads 1 --per_device_train_batch_size 4 \
  --pad_to_multiple_of 16 --ddp_timeout 600 --output_dir "$tmp/kill" >/dev/null 2>"$tmp/kill.err" & mpid=$!
for i in $(seq 600); do [ -s "$tmp/kill/metrics.jsonl" ] && break; sleep 0.05; done
victim=$(rank_pid $mpid 1)
if [ -z "$victim" ] || [ ! -s "$tmp/kill/metrics.jsonl" ]; then
  fail tp_rank_killed_job_ends "no training rank 1 to kill: $(tail -2 "$tmp/kill.err")"
else
  t0=$(date +%s)
  kill -9 "$victim"
  wait $mpid; rc=$?; t1=$(date +%s)
  if [ $rc -ne 0 ] && [ $((t1 - t0)) -le $BOUND ]; then
    ok "tp_rank_killed_job_ends (rc $rc after $((t1 - t0)) s)"
  else fail tp_rank_killed_job_ends "rc=$rc after $((t1 - t0)) s: $(tail -2 "$tmp/kill.err")"; fi
fi

# one rank's error mid-run: rank 1's reward program exits after its first rounds (GRPO, 2 data-
# parallel ranks: each rank scores its own completions)
$BIN init --model_config $M/config.json --output_dir "$tmp/stu" --tokenizer tests/data/sft/tok 2>/dev/null
for i in 0 1 2 3 4 5 6 7; do echo "{\"prompt\": \"Q$i: what is $i + 1?\", \"answer\": $((i + 1))}"; done >"$tmp/rl.jsonl"
cat >"$tmp/reward.sh" <<'SH'
n=0
while read -r line; do
  n=$((n + 1))
  if [ "$OMPI_COMM_WORLD_RANK" = 1 ] && [ $n -gt 8 ]; then exit 3; fi
  echo 1
done
SH
t0=$(date +%s)
out=$(timeout -s KILL 300 mpirun $MPI_FLAGS -np 2 $BIN grpo --model "$tmp/stu" --dataset "$tmp/rl.jsonl" \
  --max_completion_length 4 --num_generations 4 --max_steps 1000 --threads 1 --save_strategy no --learning_rate 1e-3 \
  --per_device_train_batch_size 4 --logging_steps 1 --ddp_timeout 600 --reward "cmd:sh $tmp/reward.sh" --output_dir "$tmp/err" 2>&1); rc=$?
t1=$(date +%s)
steps=$(grep -c '"step"' "$tmp/err/metrics.jsonl" 2>/dev/null)
if [ $rc -ne 0 ] && [ $((t1 - t0)) -le $BOUND ] && [ "${steps:-0}" -ge 1 ] && grep -q "reward.sh" <<<"$out"; then
  ok "rank_error_mid_run_aborts_job (rc $rc after $((t1 - t0)) s, $steps steps done)"
else fail rank_error_mid_run_aborts_job "rc=$rc after $((t1 - t0)) s, ${steps:-0} steps: $(grep -v '] step' <<<"$out" | tail -3)"; fi
