#!/usr/bin/env bash
# Regenerate tests/data/heads/heads_ref.bin (PyTorch references for the distillation and RL heads
# and the host-side RL math) with Debian's PyTorch; `make refs` then shows any difference from
# the committed fixture.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/tests/data/heads"
/usr/bin/python3 "$root/scripts/ref_heads.py" "$root/tests/data/heads/heads_ref.bin"
echo "refs_heads: wrote tests/data/heads/heads_ref.bin"
