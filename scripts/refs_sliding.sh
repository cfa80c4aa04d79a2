#!/usr/bin/env bash
# refs_sliding.sh: the sliding-window families' tiny checkpoints (mistral, gemma2, gemma3_text)
# and their PyTorch (float64) logits, loss, gradients and greedy tokens (scripts/ref_sliding.py).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_sliding.py tests/data/models
