#!/usr/bin/env bash
# Regenerate tests/data/ops/ops_ref.bin (PyTorch references for the reference backend's ops)
# with Debian's PyTorch and show any difference from the committed fixture (exit 1 if any).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$root/scripts/ref_ops.py" "$tmp/ops_ref.bin"
cmp "$root/tests/data/ops/ops_ref.bin" "$tmp/ops_ref.bin" && echo "refs_ops: fixture unchanged"
