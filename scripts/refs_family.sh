#!/usr/bin/env bash
# refs_family.sh: tiny olmo2 / phi3 checkpoints with their PyTorch (float64) logits, loss, gradients
# and one SFT step (scripts/ref_family.py).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_family.py tests/data/models
