#!/usr/bin/env bash
# make_refs.sh: regenerate every reference fixture (each scripts/refs_*.sh writes its fixtures
# into tests/data/), then diff them against the committed ones. Fails if any fixture changed,
# so a reference change is always a visible, reviewed commit.
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
for s in scripts/refs_*.sh; do
  echo "== $s" >&2
  if ! bash "$s"; then echo "make refs: $s failed" >&2; rc=1; fi
done
changed=$(git status --porcelain -- tests/data)
if [ -n "$changed" ]; then
  echo "make refs: regenerated fixtures differ from the committed ones:" >&2
  echo "$changed" >&2
  git --no-pager diff --stat -- tests/data >&2
  rc=1
else
  echo "make refs: every regenerated fixture equals the committed one" >&2
fi
exit $rc
