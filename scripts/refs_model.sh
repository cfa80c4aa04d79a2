#!/usr/bin/env bash
# refs_model.sh: tiny reference models and their PyTorch (float64) logits, loss and gradients.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_model.py tests/data/models
