#!/usr/bin/env bash
# bench/run.sh: every benchmark; rows appended to bench/RESULTS.md. `make bench` runs it.
#   bench/run.sh [model|all]
# Each bench_*.sh beside this file is one benchmark section.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
for b in bench/bench_*.sh; do
  name=$(basename "$b" .sh); name=${name#bench_}
  if [ "$which" = all ] || [ "$which" = "$name" ]; then
    echo "== bench $name" >&2
    bash "$b"
  fi
done
