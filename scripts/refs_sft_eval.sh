#!/usr/bin/env bash
# refs_sft_eval.sh: SFT evaluation references (eval_loss averaged as transformers' evaluation_loop,
# TRL's eval accuracy and entropy) for tests/model/test_sft_eval.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_sft_eval.py tests/data/sft
