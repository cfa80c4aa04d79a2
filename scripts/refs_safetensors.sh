#!/usr/bin/env bash
# Regenerate tests/data/st/reference.safetensors with Debian's PyTorch and compare it with the
# committed file; then load every safetensors fixture still wrote in this check (if any given).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$root/scripts/check_safetensors_load.py" make "$tmp/reference.safetensors"
cmp "$root/tests/data/st/reference.safetensors" "$tmp/reference.safetensors"
/usr/bin/python3 "$root/scripts/check_safetensors_load.py" check "$root/tests/data/st/reference.safetensors" "$@"
echo "refs_safetensors: reference unchanged"
