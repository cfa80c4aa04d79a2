#!/usr/bin/env bash
# dist_reward.sh: `mpirun -np 2 still reward` (data parallel). 2 ranks x B pairs end with the
# weights of 1 rank x 2B pairs (fp32 reduction tolerance), with the same per-step loss, grad_norm
# and metrics, including an epoch whose last micro-batch has a pair on one rank only; ZeRO-1 too.
# The mesh: TP=2 (the score head whole on every rank, the embedding split by vocabulary), FSDP=2
# (the score head in the rest unit; a rank without pairs in the last micro-batch joins the
# gathers with an empty pass) and TP=2 x FSDP=2 end 5 steps with one process's weights (<= 1e-5
# relative per tensor), losses and metrics (same_curves), and the model they save scores the pairs
# in one process as one process's does.
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
   --max_steps 5 --logging_steps 1 --threads 1 --max_grad_norm 1.0 --save_strategy no --center_rewards_coefficient 0.1"
TOL=1e-4
same_curves() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
# rewards (and margins, their differences) move 1e-5 with weights that agree to 5e-8 (a build at
# -O1 sums in another order): 1e-4 for those, 1e-5 for the loss and the gradient norm
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "num_tokens", "accuracy", "margin", "min_reward", "mean_reward", "max_reward"):
        tol = 1e-4 if "reward" in k or k == "margin" else 1e-5
        assert abs(x[k] - y[k]) <= tol * max(1.0, abs(x[k])), (x["step"], k, x[k], y[k])
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

same_scores() {  # two `still score` outputs agree to a relative 1e-4 (rewards: same_curves says why)
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for i, (x, y) in enumerate(zip(a, b)):
    assert x.keys() == y.keys() and x.keys(), (i, x, y)
    for k in x:
        assert abs(x[k] - y[k]) <= 1e-4 * max(1.0, abs(x[k])), (i, k, x[k], y[k])
PY
}
$BIN score --model "$tmp/one" --dataset tests/data/reward/pairs.jsonl --output "$tmp/one.scores" --threads 1 \
  >/dev/null 2>"$tmp/errs" || fail one_rank_scores "$(tail -3 "$tmp/errs")"
for mesh in "2 tp2 --tp_size 2 --per_device_train_batch_size 4" "2 fsdp2 --fsdp_size 2 --per_device_train_batch_size 2" \
            "4 tp2_fsdp2 --tp_size 2 --fsdp_size 2 --per_device_train_batch_size 2"; do
  set -- $mesh; np=$1 name=$2; shift 2
  out=$(timeout -s KILL 120 mpirun $MPI_FLAGS -np $np $BIN reward $C "$@" --output_dir "$tmp/$name" 2>&1 >/dev/null); rc=$?
  d=$($DIFF --norm "$tmp/one/model.safetensors" "$tmp/$name/model.safetensors" 1e-5 2>&1); drc=$?
  cur=$(same_curves "$tmp/one/metrics.jsonl" "$tmp/$name/metrics.jsonl" 2>&1); crc=$?
  $BIN score --model "$tmp/$name" --dataset tests/data/reward/pairs.jsonl --output "$tmp/$name.scores" --threads 1 \
    >/dev/null 2>"$tmp/errs"; src=$?
  sc=$(same_scores "$tmp/one.scores" "$tmp/$name.scores" 2>&1); scc=$?
  case $name in tp2*) grep -q "192 of 384 vocabulary rows" <<<"$out" || rc="$rc, no vocabulary shard in the log";; esac
  case $name in *fsdp2) grep -q "ZeRO-3 over 2 ranks" <<<"$out" || rc="$rc, no ZeRO-3 shards in the log";; esac
  if [ "$rc" = 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ] && [ $src -eq 0 ] && [ $scc -eq 0 ]; then
    ok "reward_${name}_matches_one_rank ($d)"
  else fail "reward_${name}_matches_one_rank" "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); scores: rc=$src \
$(tail -1 <<<"$sc") $(tail -1 "$tmp/errs"); $(tail -3 <<<"$out")"; fi
done
