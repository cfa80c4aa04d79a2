#!/usr/bin/env bash
# npm_clients.sh: install the npm packages of package-lock.json (the `openai` client the still serve
# tests drive, the reference tokenizers) with `npm ci` into $STILL_NPM_CACHE (default
# ~/.cache/still/npm, shared with scripts/refs_tokenizer.sh), only when package-lock.json changed.
# `make test` runs it first, so the tests themselves never reach the network.
#   scripts/npm_clients.sh                 install when needed
#   scripts/npm_clients.sh --node-modules  install when needed; print the node_modules directory
# Without node / npm it says so and exits 0 (the serve tests then skip, naming the reason); a
# failing npm ci (registry unreachable) exits 1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${STILL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/still/npm}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "npm_clients: node / npm not installed: the still serve client tests will skip" >&2
  exit 0
fi
mkdir -p "$cache"
if ! cmp -s "$root/package-lock.json" "$cache/package-lock.json" || [ ! -d "$cache/node_modules/openai" ]; then
  cp "$root/package.json" "$root/package-lock.json" "$cache/"
  echo "npm_clients: npm ci in $cache" >&2
  if ! (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error >&2); then
    rm -f "$cache/package-lock.json"
    echo "npm_clients: npm ci failed: the npm registry is unreachable (or package-lock.json is broken)" >&2
    exit 1
  fi
fi
[ "${1:-}" = --node-modules ] && echo "$cache/node_modules"
exit 0
