#!/usr/bin/env bash
# refs_kto.sh: two-step KTO references (kto, weights, apo_zero_unpaired, unpaired pairs) for
# tests/model/test_kto_parity.c. Reads tests/data/dpo/pairs.jsonl (refs_dpo.sh runs first: "d" < "k").
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_kto.py tests/data/kto
