#!/usr/bin/env bash
# refs_grpo.sh: two-step GRPO / RLOO references (TRL's GRPOTrainer / RLOOTrainer on fixed completions:
# advantages, gradients, AdamW moments and weights) for tests/model/test_grpo_torch.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_grpo.py tests/data/grpo
