#!/usr/bin/env bash
# refs_q8.sh: a tiny Qwen3 and its logits on Q8_0-quantized weights (PyTorch, float64).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_q8.py tests/data/q8
