#!/usr/bin/env bash
# refs_gen_config.sh: greedy generations under generation_config.json's length and ban fields
# (transformers' logits processors and stopping criteria) for tests/model/test_gen_config.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_gen_config.py tests/data/sampler
