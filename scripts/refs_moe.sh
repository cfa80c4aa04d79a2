#!/usr/bin/env bash
# refs_moe.sh: tiny qwen3_moe and mixtral models and their PyTorch (float64) logits, losses (with
# the load-balancing loss) and gradients (scripts/ref_moe.py).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_moe.py tests/data/models
