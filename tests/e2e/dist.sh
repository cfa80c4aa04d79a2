#!/usr/bin/env bash
# dist.sh: collectives on 2 MPI ranks (blocking and left in flight), and a stalled rank turning
# into a timeout error (in a blocking collective and in one waited for later). A build
# without MPI (the asan one) launched by mpirun fails with a clear error instead.
# asan: yes
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BUILD/tests/unit/test_dist"; then
  if command -v mpirun >/dev/null && ! mpi_available "$BIN"; then
    out=$(timeout 60 mpirun $MPI_FLAGS -np 2 "$BIN" sft --model tests/data/models/qwen3_tied \
      --dataset tests/data/sft/ids.jsonl --output_dir /tmp/still-nompi-$$ 2>&1); rc=$?
    rm -rf /tmp/still-nompi-$$
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "launched by an MPI launcher, but this build has no MPI" <<<"$out"; then
      ok mpirun_without_mpi_build_is_an_error
    else fail mpirun_without_mpi_build_is_an_error "rc=$rc $(tail -3 <<<"$out")"; fi
  fi
  skip dist "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0
fi
out=$(timeout 120 mpirun $MPI_FLAGS -np 2 "$BUILD/tests/unit/test_dist" 2>&1); rc=$?
n=$(grep -c '^ok ' <<<"$out")
if [ $rc -eq 0 ] && [ "$n" -eq 10 ]; then ok collectives_2_ranks; else fail collectives_2_ranks "rc=$rc $out"; fi
# rank 1 stalls; rank 0 must fail with the timeout error (1 s) long before the 10x kill
t0=$(date +%s)
out=$(STILL_TEST_STALL=1 timeout 10 mpirun $MPI_FLAGS -x STILL_TEST_STALL -np 2 "$BUILD/tests/unit/test_dist" 2>&1); rc=$?
t1=$(date +%s)
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^ok timeout: rank 0: gradient all-reduce of 1 elements did not complete within --ddp_timeout 1 s" <<<"$out" \
   && grep -q "^ok timeout in flight: rank 0: parameter all-gather of 2 elements did not complete within --ddp_timeout 1 s" <<<"$out"; then
  ok "stalled_rank_times_out ($((t1 - t0)) s)"
else
  fail stalled_rank_times_out "rc=$rc after $((t1 - t0)) s: $out"
fi
