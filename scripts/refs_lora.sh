#!/usr/bin/env bash
# refs_lora.sh: PEFT-format adapters, their logits and gradients, and one LoRA SFT step, applied as
# PEFT does in float64 PyTorch (tests/model/test_lora_parity.c).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_lora.py tests/data/lora
/usr/bin/python3 scripts/ref_lora_moe.py tests/data/lora
