#!/usr/bin/env bash
# refs_dpo.sh: two-step DPO references (every loss type, f-divergences, LD-DPO, WPO, keep_end) for
# tests/model/test_dpo_parity.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_dpo.py tests/data/dpo
