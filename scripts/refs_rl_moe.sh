#!/usr/bin/env bash
# refs_rl_moe.sh: one distillation step and one GRPO step of the tiny qwen3_moe, mixtral and gpt_oss
# models with the load-balancing loss (scripts/ref_rl_moe.py) for tests/model/test_rl_moe.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_rl_moe.py tests/data/rl_moe
