#!/usr/bin/env bash
# refs_sft.sh: one-step SFT references (loss, grad norm, AdamW weights) for tests/model/test_sft_parity.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_sft.py tests/data/sft
