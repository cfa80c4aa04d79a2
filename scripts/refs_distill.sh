#!/usr/bin/env bash
# refs_distill.sh: one-step distillation references (loss, kl_student_teacher, grad norm per loss mode) for
# tests/model/test_distill_parity.c.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 scripts/ref_distill.py tests/data/distill
