#!/usr/bin/env bash
# refs_reward.sh: a tiny reward model, preference pairs and the PyTorch (float64) rewards, loss,
# metrics and AdamW steps for tests/model/test_reward_parity.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_reward.py tests/data/reward
