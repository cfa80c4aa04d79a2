#!/usr/bin/env bash
# refs_sampler.sh: regenerate tests/data/sampler/processors.json with Debian's PyTorch
# (scripts/ref_sampler.py) and say whether it changed. Needs /usr/bin/python3 with torch
# (scripts/deps.sh refs); the first python3 on PATH may lack it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
out=$root/tests/data/sampler/processors.json
if ! $py -c 'import torch' 2>/dev/null; then
  echo "refs_sampler: $py cannot import torch (scripts/deps.sh refs installs python3-torch)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
$py "$root/scripts/ref_sampler.py" >"$tmp"
if [ -f "$out" ] && cmp -s "$tmp" "$out"; then
  echo "refs_sampler: $out unchanged"
else
  chmod 644 "$tmp"
  mv "$tmp" "$out"
  echo "refs_sampler: $out regenerated (review with git diff)"
fi
