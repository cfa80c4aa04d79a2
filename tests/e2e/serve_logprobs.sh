#!/usr/bin/env bash
# serve_logprobs.sh: logprobs with top_logprobs (chat) and the legacy logprobs N (completions)
# against an independent computation: `still logits` of the prompt and the tokens generated so
# far (no cache, no serve), log_softmax in float64 by scripts/check_top_logprobs.py, the top ids
# decoded by `still tokenize --decode`; values within 1e-4, the same tokens in the same order.
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/lib/serve.sh
tmp=$(mktemp -d); trap 'kill $SERVE_PID 2>/dev/null; rm -rf "$tmp"' EXIT
PY=/usr/bin/python3
serve_model "$tmp"
M=$tmp/m
serve_start "$tmp" --model "$M" --max_batch 2 --max_cache_len 256 || exit 1
curl -s "$SERVE_URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 4,
  "temperature": 0, "logprobs": true, "top_logprobs": 5, "ignore_eos": true}' >"$tmp/chat.json"
curl -s "$SERVE_URL/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0.7,
  "seed": 5, "logprobs": 3, "ignore_eos": true}' >"$tmp/compl.json"
# streamed: the same alternatives chunk by chunk
curl -sN "$SERVE_URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 4,
  "temperature": 0, "logprobs": true, "top_logprobs": 5, "ignore_eos": true, "stream": true}' >"$tmp/chat.sse"
echo '[{"role": "user", "content": "hi there"}]' | $BIN chat-template --model "$M" --add_generation_prompt true \
  >"$tmp/chat_prompt.txt" 2>"$tmp/err" || fail chat_template "$(tail -2 "$tmp/err")"
serve_stop >/dev/null
$PY scripts/check_top_logprobs.py "$BIN" "$M" "$tmp" 2>&1
