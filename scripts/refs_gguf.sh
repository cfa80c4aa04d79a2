#!/usr/bin/env bash
# Regenerate tests/data/gguf (scripts/ref_gguf.py: numpy-written GGUF files and the values numpy
# dequantizes them to) with Debian's interpreter.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
/usr/bin/python3 "$root/scripts/ref_gguf.py" "$root/tests/data/gguf"
echo "refs_gguf: tests/data/gguf regenerated"
