#!/usr/bin/env bash
# make_refs.sh: regenerate every reference fixture (each scripts/refs_*.sh writes its fixtures
# into tests/data/), then diff them against the committed ones. Fails if any fixture changed beyond
# the last float bits (scripts/fixture_close.py), so a reference change is always a visible,
# reviewed commit.
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
for s in scripts/refs_*.sh; do
  echo "== $s" >&2
  if ! bash "$s"; then echo "make refs: $s failed" >&2; rc=1; fi
done
# A fixture whose bytes changed but whose numbers agree to the last bits another CPU's float kernels
# move (scripts/fixture_close.py) is put back as committed: the references are float64 and torch's
# reductions differ by instruction set in the 16th digit.
tmpf=$(mktemp); trap 'rm -f "$tmpf"' EXIT
near=0
for f in $(git diff --name-only -- tests/data); do
  git show "HEAD:$f" >"$tmpf" 2>/dev/null || continue
  if /usr/bin/python3 scripts/fixture_close.py "$tmpf" "$f"; then git checkout -q -- "$f"; near=$((near + 1)); fi
done
[ "$near" -gt 0 ] && echo "make refs: $near regenerated fixtures equal the committed ones up to the last float bits" >&2
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
