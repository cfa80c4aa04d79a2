#!/usr/bin/env bash
# serve_faults.sh: still serve under bad input and faults (curl on 127.0.0.1): malformed JSON and
# bad fields -> 400 naming the field, an oversized prompt -> 400 with the limit, a wrong API key
# -> 401, a full queue -> 429 with Retry-After, a client that goes away frees the scheduler at
# once, --request_timeout -> 504, and SIGTERM answers the request in flight, then exits 0.
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/lib/serve.sh
tmp=$(mktemp -d); trap 'kill $SERVE_PID 2>/dev/null; rm -rf "$tmp"' EXIT
if ! command -v curl >/dev/null; then echo "skip serve_faults: curl is not installed"; exit 0; fi
serve_model "$tmp"
M=$tmp/m
# post PATH BODY [curl args...]: prints "STATUS BODY"
post() {
  local path=$1 body=$2; shift 2
  local out=$tmp/body.$BASHPID
  curl -s -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' "$@" --data-binary "$body" "$SERVE_URL$path"
  printf ' %s' "$(cat "$out")"
}
expect() {  # name, "STATUS BODY", status, body substring
  if [ "${2%% *}" = "$3" ] && grep -qF -- "$4" <<<"$2"; then ok "$1"; else fail "$1" "want $3 with '$4', got: $2"; fi
}
CHAT=/v1/chat/completions
msgs='"messages": [{"role": "user", "content": "hi"}]'

serve_start "$tmp" --model "$M" --api_key sekret --max_batch 2 --max_cache_len 256 --max_queue 1 || exit 1
A=(-H 'Authorization: Bearer sekret')
expect wrong_key_401 "$(post $CHAT "{$msgs}" -H 'Authorization: Bearer nope')" 401 "API key"
expect no_key_401 "$(post $CHAT "{$msgs}")" 401 "API key"
expect health_needs_no_key "$(curl -s -w ' %{http_code}' "$SERVE_URL/health")" '{"status":"ok"}' ""
expect malformed_json_400 "$(post $CHAT "{$msgs," "${A[@]}")" 400 '"param":"body"'
expect bad_field_400 "$(post $CHAT "{$msgs, \"top_p\": \"high\"}" "${A[@]}")" 400 '"message":"top_p: expected a number'
expect bad_message_400 "$(post $CHAT '{"messages": [{"role": 1}]}' "${A[@]}")" 400 'messages[0].role'
expect n_over_batch_400 "$(post $CHAT "{$msgs, \"n\": 3}" "${A[@]}")" 400 "--max_batch 2"
long=$(printf 'word %.0s' $(seq 1 400))
expect long_prompt_400 "$(post /v1/completions "{\"prompt\": \"$long\"}" "${A[@]}")" 400 "the limit is 240 prompt tokens"
expect max_tokens_400 "$(post /v1/completions '{"prompt": "hi", "max_tokens": 300}' "${A[@]}")" 400 "max_tokens: 300 tokens do not fit"
expect unknown_path_404 "$(post /v1/embeddings '{}' "${A[@]}")" 404 "no such endpoint"
st=$(curl -s -o /dev/null -w '%{http_code}' "${A[@]}" "$SERVE_URL$CHAT")
[ "$st" = 405 ] && ok get_chat_405 || fail get_chat_405 "status $st"

# a full queue: one request running, one waiting, the third is refused with Retry-After
serve_stop >/dev/null
serve_start "$tmp" --model "$M" --max_batch 1 --max_cache_len 2048 --max_queue 1 || exit 1
slow='{"prompt": "hi", "max_tokens": 400, "ignore_eos": true}'
pids=()
wait_metric() {  # name, value: poll /metrics until the gauge reads value (10 s at most: a loaded machine is slow to connect)
  for _ in $(seq 1 100); do
    [ "$(curl -s "$SERVE_URL/metrics" | awk -v k="$1" '$1 == k {print $2}')" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
post /v1/completions "$slow" >"$tmp/slow1" & pids+=($!)
wait_metric still_requests_running 1 || fail queue_full_429 "the first request never started running"
post /v1/completions "$slow" >"$tmp/slow2" & pids+=($!)
wait_metric still_queue_depth 1 || fail queue_full_429 "the second request never queued"
curl -s -D "$tmp/h429" -o "$tmp/b429" -H 'Content-Type: application/json' --data-binary "$slow" "$SERVE_URL/v1/completions"
if head -1 "$tmp/h429" | grep -q " 429" && grep -qi '^retry-after: 1' "$tmp/h429"; then ok queue_full_429
else fail queue_full_429 "$(cat "$tmp/h429" "$tmp/b429")"; fi
wait "${pids[@]}"
if grep -q '^200 .*"completion_tokens":400' "$tmp/slow1" && grep -q '^200 .*"completion_tokens":400' "$tmp/slow2"; then
  ok queued_requests_answered; else fail queued_requests_answered "$(cut -c1-200 "$tmp/slow1" "$tmp/slow2")"; fi
metrics=$(curl -s "$SERVE_URL/metrics")
if grep -q '^still_requests_rejected_total 1$' <<<"$metrics" && grep -q '^still_generation_tokens_total 800$' <<<"$metrics" \
  && grep -q '^still_queue_depth 0$' <<<"$metrics" && grep -q '^still_batch_slots 1$' <<<"$metrics"; then ok metrics
else fail metrics "$metrics"; fi

# a client that goes away: the scheduler stops its request and takes the next one at once
huge='{"prompt": "hi", "max_tokens": 2000, "ignore_eos": true, "stream": true}'
curl -s -m 1 -H 'Content-Type: application/json' --data-binary "$huge" "$SERVE_URL/v1/completions" >/dev/null
curl -s -m 1 -H 'Content-Type: application/json' --data-binary "${huge/\"stream\": true/\"stream\": false}" "$SERVE_URL/v1/completions" >/dev/null
t0=$(date +%s.%N)
r=$(post /v1/completions '{"prompt": "hi", "max_tokens": 4}')
t1=$(date +%s.%N)
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
cancelled=$(curl -s "$SERVE_URL/metrics" | awk '$1 == "still_requests_cancelled_total" {print $2}')
if [ "${r%% *}" = 200 ] && [ "$cancelled" = 2 ] && awk -v t="$took" 'BEGIN{exit !(t < 3)}'; then ok disconnect_frees_slot
else fail disconnect_frees_slot "status ${r%% *}, cancelled $cancelled, next request took ${took}s"; fi
gen=$(curl -s "$SERVE_URL/metrics" | awk '$1 == "still_generation_tokens_total" {print $2}')
if [ "$gen" -lt 2800 ]; then ok disconnect_stops_generation; else fail disconnect_stops_generation "$gen tokens generated"; fi

# SIGTERM while a request runs: it is answered in full, then the server exits 0
post /v1/completions '{"prompt": "hi", "max_tokens": 600, "ignore_eos": true}' >"$tmp/drain" &
cpid=$!
sleep 0.5
kill -TERM $SERVE_PID
sleep 0.3
late=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$SERVE_URL/health")
wait $cpid
wait $SERVE_PID; rc=$?
if grep -q '^200 .*"completion_tokens":600' "$tmp/drain" && [ $rc = 0 ]; then ok sigterm_drains
else fail sigterm_drains "rc=$rc, answer: $(cut -c1-200 "$tmp/drain"), log: $(tail -3 "$tmp/serve.log")"; fi
if [ "$late" != 200 ]; then ok sigterm_refuses_new; else fail sigterm_refuses_new "health answered 200 while draining"; fi

# --request_timeout: a request that would run longer is stopped with 504
serve_start "$tmp" --model "$M" --max_cache_len 2048 --request_timeout 1 || exit 1
expect timeout_504 "$(post /v1/completions '{"prompt": "hi", "max_tokens": 2000, "ignore_eos": true}')" 504 "timeout"
serve_stop >/dev/null
