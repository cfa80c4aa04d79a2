#!/usr/bin/env bash
# refs_sft_moe.sh: one SFT step of the tiny mixtral and gpt_oss models with the load-balancing loss
# (scripts/ref_sft_moe.py).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_sft_moe.py tests/data/sft_moe
