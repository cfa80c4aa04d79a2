#!/usr/bin/env bash
# dist_reward.sh: `mpirun -np 2 still reward` (data parallel). 2 ranks x B pairs end with the
# weights of 1 rank x 2B pairs (fp32 reduction tolerance), with the same per-step loss, grad_norm
# and metrics, including an epoch whose last micro-batch has a pair on one rank only; ZeRO-1 too.
set -u
BIN=${STILL_BIN:-./still}
BUILD=${STILL_BUILD:-build}
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then echo "skip dist_reward: this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
DIFF="$BUILD/tests/tools/st_diff"
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
C="--model tests/data/reward/rm --dataset tests/data/reward/pairs.jsonl --pad_to_multiple_of 8 --learning_rate 1e-3
   --max_steps 4 --logging_steps 1 --threads 1 --max_grad_norm 1.0 --save_strategy no --center_rewards_coefficient 0.1"
TOL=1e-4
same_curves() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "num_tokens", "accuracy", "margin", "min_reward", "mean_reward", "max_reward"):
        assert abs(x[k] - y[k]) <= 1e-5 * max(1.0, abs(x[k])), (x["step"], k, x[k], y[k])
PY
}
$BIN reward $C --per_device_train_batch_size 4 --output_dir "$tmp/one" >/dev/null 2>"$tmp/err1" \
  || fail one_rank "$(tail -3 "$tmp/err1")"
for z in 0 1; do
  out=$($MPI $BIN reward $C --per_device_train_batch_size 2 --zero_stage $z --output_dir "$tmp/two$z" 2>&1 >/dev/null); rc=$?
  d=$($DIFF "$tmp/one/model.safetensors" "$tmp/two$z/model.safetensors" $TOL 2>&1); drc=$?
  cur=$(same_curves "$tmp/one/metrics.jsonl" "$tmp/two$z/metrics.jsonl" 2>&1); crc=$?
  if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ]; then ok "two_ranks_match_one_rank_zero$z ($d)"
  else fail "two_ranks_match_one_rank_zero$z" "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(tail -3 <<<"$out")"; fi
done
