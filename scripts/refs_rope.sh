#!/usr/bin/env bash
# Regenerate tests/data/rope/*.json with Debian's PyTorch and show any difference from the
# committed fixtures (exit status 1 when they differ).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$root/scripts/ref_rope.py" "$tmp"
diff -ru "$root/tests/data/rope" "$tmp" && echo "refs_rope: fixtures unchanged"
