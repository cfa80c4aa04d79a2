#!/usr/bin/env bash
# serve_load.sh: a bounded load test (at most ~30 s, loopback): 16 `openai` clients at once
# against `still serve --max_batch 8`, every answer checked against the same request sent alone
# (tests/e2e/serve_load.mjs): continuous batching changes no token, greedy or seeded sampling
# (prefix reuse off: a reused cache matches a fresh prefill to roundings, not to the bit).
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/lib/serve.sh
tmp=$(mktemp -d); trap 'kill $SERVE_PID 2>/dev/null; rm -rf "$tmp"' EXIT
if ! command -v node >/dev/null; then echo "skip serve_load: node is not installed"; exit 0; fi
nm=$(scripts/npm_clients.sh --node-modules 2>/dev/null)
if [ -z "$nm" ] || [ ! -d "$nm/openai" ]; then
  echo "FAIL serve_load: the openai npm package is not installed (scripts/npm_clients.sh failed)"; exit 1
fi
serve_model "$tmp"
serve_start "$tmp" --model "$tmp/m" --served_model_name tiny --max_batch 8 --max_cache_len 512 --max_queue 64 --prefix_reuse false || exit 1
# one request alone decodes one row per step, not --max_batch rows
curl -s "$SERVE_URL/v1/completions" -d '{"prompt": "alpha beta", "max_tokens": 9, "ignore_eos": true}' >"$tmp/one" 2>&1
m1=$(curl -s "$SERVE_URL/metrics" 2>/dev/null)
steps1=$(awk '$1 == "still_decode_steps_total" {print $2}' <<<"$m1")
rows1=$(awk '$1 == "still_decode_rows_computed_total" {print $2}' <<<"$m1")
if [ "${steps1:-0}" -eq 8 ] && [ "${rows1:-0}" -eq 8 ]; then ok serve_one_client_decodes_one_row "(8 steps, 8 rows)"
else fail serve_one_client_decodes_one_row "steps $steps1, rows computed $rows1: $(head -c 300 "$tmp/one")"; fi
node tests/e2e/serve_load.mjs "$nm" "$SERVE_URL/v1" 16 2 20 || fail serve_load "node exited with status $?"
metrics=$(curl -s "$SERVE_URL/metrics" 2>/dev/null)
mean=$(awk '$1 == "still_decode_steps_total" {s = $2} $1 == "still_decode_rows_total" {r = $2} END {if (s) printf "%.2f", r / s}' <<<"$metrics")
computed=$(awk '$1 == "still_decode_steps_total" {s = $2} $1 == "still_decode_rows_computed_total" {r = $2} END {if (s) printf "%.2f", r / s}' <<<"$metrics")
# rows computed per step: at least the busy ones, at most their bucket (< 2x), below the 8 slots
if awk -v m="${mean:-0}" -v c="${computed:-0}" 'BEGIN{exit !(c >= m && c < 2 * m && c < 8)}'; then
  ok serve_load_rows_follow_busy "($computed rows computed per step for $mean busy)"
else fail serve_load_rows_follow_busy "$computed rows computed per step for $mean busy"; fi
# 16 clients on 8 slots: most steps decode several sequences at once
if awk -v m="${mean:-0}" 'BEGIN{exit !(m > 3)}'; then ok serve_load_batches "(mean $mean sequences per decode step)"
else fail serve_load_batches "mean $mean sequences per decode step"; fi
serve_stop; rc=$?
[ $rc -eq 0 ] && ok serve_load_clean_exit || fail serve_load_clean_exit "rc=$rc: $(tail -3 "$tmp/serve.log")"
