#!/usr/bin/env bash
# serve_reuse.sh: prefix reuse through the server: a conversation's next turn joins the slot that
# still holds the earlier turn and prefills only what is new (usage.prompt_tokens_details.
# cached_tokens, still_prefill_tokens_total), and answers what the same request answers with
# nothing cached (after another prompt took the one slot).
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/lib/serve.sh
tmp=$(mktemp -d); trap 'kill $SERVE_PID 2>/dev/null; rm -rf "$tmp"' EXIT
if ! command -v curl >/dev/null; then echo "skip serve_reuse: curl is not installed"; exit 0; fi
PY=/usr/bin/python3
serve_model "$tmp"
serve_start "$tmp" --model "$tmp/m" --max_batch 1 --max_cache_len 512 || exit 1
chat() { curl -s "$SERVE_URL/v1/chat/completions" -d "$1"; }
field() { $PY -c "import json, sys; d = json.load(open('$1')); print($2)"; }
prefilled() { curl -s "$SERVE_URL/metrics" | awk '$1 == "still_prefill_tokens_total" {print $2}'; }
chat '{"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6, "temperature": 0, "ignore_eos": true}' >"$tmp/t1"
a1=$(field "$tmp/t1" 'json.dumps(d["choices"][0]["message"]["content"])')
turn2="{\"messages\": [{\"role\": \"user\", \"content\": \"hello there\"}, {\"role\": \"assistant\", \"content\": $a1},
  {\"role\": \"user\", \"content\": \"and then what happened next\"}], \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}"
p0=$(prefilled)
chat "$turn2" >"$tmp/t2"
p1=$(prefilled)
read -r n2 c2 <<<"$(field "$tmp/t2" 'd["usage"]["prompt_tokens"], d["usage"]["prompt_tokens_details"]["cached_tokens"]')"
if [ "${c2:-0}" -gt 10 ] && [ $((p1 - p0)) -eq $((n2 - c2)) ]; then
  ok serve_reuse_prefills_only_the_new_turn "($c2 of $n2 prompt tokens reused, $((p1 - p0)) prefilled)"
else fail serve_reuse_prefills_only_the_new_turn "cached ${c2:-?} of ${n2:-?}, prefilled $((p1 - p0)): $(head -c 300 "$tmp/t2")"; fi
# another prompt takes the one slot; the same turn again is prefilled whole and answers the same
curl -s "$SERVE_URL/v1/completions" -d '{"prompt": "zebra crossing", "max_tokens": 2}' >/dev/null
p2=$(prefilled)
chat "$turn2" >"$tmp/t3"
p3=$(prefilled)
read -r n3 c3 <<<"$(field "$tmp/t3" 'd["usage"]["prompt_tokens"], d["usage"]["prompt_tokens_details"]["cached_tokens"]')"
same=$(field "$tmp/t2" "d['choices'][0]['message']['content'] == json.load(open('$tmp/t3'))['choices'][0]['message']['content']")
if [ "$c3" = 0 ] && [ $((p3 - p2)) -eq "$n3" ] && [ "$same" = True ]; then ok serve_reuse_same_answer_as_afresh
else fail serve_reuse_same_answer_as_afresh "cached $c3, prefilled $((p3 - p2)) of $n3, same $same: $(head -c 200 "$tmp/t2") / $(head -c 200 "$tmp/t3")"; fi
serve_stop >/dev/null
