#!/usr/bin/env bash
# serve_openai.sh: the official `openai` npm client (package-lock.json, installed by
# scripts/npm_clients.sh before `make test`) drives chat, streaming, n, seeds, stop strings,
# logprobs, tools and completions against `still serve` on 127.0.0.1 (tests/e2e/serve_client.mjs).
# Greedy answers must equal what `still generate` produces for the same prompt.
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/lib/serve.sh
tmp=$(mktemp -d); trap 'kill $SERVE_PID 2>/dev/null; rm -rf "$tmp"' EXIT
if ! command -v node >/dev/null; then echo "skip serve_openai: node is not installed"; exit 0; fi
nm=$(scripts/npm_clients.sh --node-modules 2>/dev/null)
if [ -z "$nm" ] || [ ! -d "$nm/openai" ]; then
  echo "FAIL serve_openai: the openai npm package is not installed (scripts/npm_clients.sh failed)"; exit 1
fi
serve_model "$tmp"
M=$tmp/m
# what the engine answers directly (text on stdout, one line per sequence)
$BIN generate --model "$M" --threads 1 --prompt hi --chat --max_new_tokens 8 --do_sample false 2>/dev/null \
  | head -c -1 >"$tmp/chat_greedy.txt"
$BIN generate --model "$M" --threads 1 --prompt Hello --max_new_tokens 6 --do_sample false 2>/dev/null \
  | head -c -1 >"$tmp/completion_greedy.txt"
serve_start "$tmp" --model "$M" --served_model_name tiny --api_key k3y --max_batch 4 --max_cache_len 1024 || exit 1
node tests/e2e/serve_client.mjs "$nm" "$SERVE_URL/v1" k3y "$tmp" || fail serve_client "node exited with status $?"
serve_stop; rc=$?
if [ $rc -eq 0 ] && grep -q "stopped" "$tmp/serve.log"; then ok serve_sigterm_exit_0; else fail serve_sigterm_exit_0 "rc=$rc: $(tail -3 "$tmp/serve.log")"; fi
