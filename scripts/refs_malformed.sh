#!/usr/bin/env bash
# Regenerate the malformed-checkpoint corpus and compare it with tests/data/malformed/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$root/scripts/make_malformed.py" "$tmp/malformed" >/dev/null
diff -r "$root/tests/data/malformed" "$tmp/malformed" && echo "refs_malformed: corpus unchanged"
