#!/usr/bin/env bash
# refs_gpt_oss.sh: the tiny gpt_oss model and its PyTorch (float64) logits, losses (with the
# load-balancing loss) and gradients (scripts/ref_gpt_oss.py).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_gpt_oss.py tests/data/models
