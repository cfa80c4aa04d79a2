#!/usr/bin/env bash
# run.sh SUITE: run the test programs of a suite and print "N passed, N failed[, N skipped]" last.
#   all   every suite of `make test` (with CUEMU_BUILD=DIR also cuda-emu from that build)
#   asan  unit, op, parser, regression and small end-to-end tests (under the asan build)
#   full  the heavier checks of `make check-full`
#   cuda-emu  the CUDA backend under the CUDA emulator (make test-cuda-emu; STILL_BUILD=build-emu)
# Each test program prints "ok NAME", "FAIL NAME: ..." or "skip NAME: reason" lines. A program that
# exits non-zero without a FAIL line counts as one failure (a crash is never a pass).
set -u
suite=${1:-all}
BUILD=${STILL_BUILD:-build}
export STILL_BIN=${STILL_BIN:-./still}
export STILL_BUILD=$BUILD
# Test programs wait for OpenMP work sleeping, as ./still does by default (src/cli/main.c): spinning
# waiters slow everything several times on shared cores.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
passed=0 failed=0 skipped=0
failures=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run_one() {  # name, command...
  local name=$1; shift
  local out="$tmp/out"
  local t0=$(date +%s.%N)
  "$@" >"$out" 2>"$tmp/err"
  local rc=$?
  local t1=$(date +%s.%N)
  local p f s
  p=$(grep -c '^ok ' "$out")
  f=$(grep -c '^FAIL ' "$out")
  s=$(grep -c '^skip ' "$out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1
    echo "FAIL $name: exited with status $rc" >>"$out"
  fi
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
    f=1
    echo "FAIL $name: ran no test" >>"$out"
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  printf "%-44s %3d ok %3d failed %3d skipped  %5.1fs\n" "$name" "$p" "$f" "$s" "$(awk -v a="$t0" -v b="$t1" "BEGIN{print b-a}")"
  if [ "$f" -gt 0 ]; then
    grep -E '^(FAIL|skip) ' "$out" | head -20 | sed 's/^/    /'
    tail -15 "$tmp/err" | sed 's/^/    stderr: /'
    failures+=("$name")
  fi
  grep '^skip ' "$out" | sed 's/^/    /'
}

c_tests() {  # dirs...
  for d in "$@"; do
    for src in tests/$d/*.c; do
      [ -e "$src" ] || continue
      local bin="$BUILD/${src%.c}"
      run_one "$d/$(basename "${src%.c}")" "$bin"
    done
  done
}

sh_tests() {  # dir, filter (all | asan | full)
  local d=$1 filter=$2
  for t in tests/$d/*.sh; do
    [ -e "$t" ] || continue
    [ "$(basename "$t")" = lib.sh ] && continue  # the helpers the scripts source
    if [ "$filter" = asan ] && ! grep -q '^# asan: yes' "$t"; then continue; fi
    run_one "$d/$(basename "${t%.sh}")" bash "$t"
  done
}

cuda_emu_tests() {  # the build directory of `make CUDA_EMU=1`
  local dir=$1
  # the emulator runs kernels on one thread: idle OpenMP threads of the cpu backend must not spin
  local env=(env "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}" "STILL_BUILD=$dir" "STILL_BIN=$dir/still")
  for t in ops/test_backend_parity ops/test_heads_parity ops/test_kv cuemu/test_cuemu ops/test_moe_parity ops/test_family_parity \
      model/test_vocab_head; do
    run_one "cuda-emu/$(basename "$t")" "${env[@]}" "$dir/tests/$t"
  done
  run_one cuda-emu/cli "${env[@]}" bash tests/cuemu/cli.sh
}

case "$suite" in
  all)
    c_tests unit ops model; sh_tests e2e all
    if [ -n "${CUEMU_BUILD:-}" ]; then cuda_emu_tests "$CUEMU_BUILD"; fi ;;
  asan) c_tests unit ops model; sh_tests e2e asan ;;
  full) sh_tests full full ;;
  cuda-emu) cuda_emu_tests "$BUILD" ;;
  *) echo "run.sh: unknown suite $suite" >&2; exit 2 ;;
esac

if [ ${#failures[@]} -gt 0 ]; then echo "failed: ${failures[*]}"; fi
if [ "$skipped" -gt 0 ]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
