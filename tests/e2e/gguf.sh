#!/usr/bin/env bash
# gguf.sh: --model FILE.gguf on the commands (docs/gguf.md). The numpy-written GGUF of every test
# model (tests/data/gguf, scripts/ref_gguf.py) gives the logits and the generation of the Hugging
# Face checkpoint it came from, exactly; broken files fail with a message naming the file.
# asan: yes
set -u
BIN=${STILL_BIN:-./still}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {  # name, condition-result (0 ok), detail
  if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi
}

for m in qwen3_tied qwen3_untied qwen2 llama; do
  "$BIN" logits --model "tests/data/models/$m" --ids "1 5 9 33 7 2" --all >"$tmp/hf.txt" 2>&1
  "$BIN" logits --model "tests/data/gguf/$m.gguf" --ids "1 5 9 33 7 2" --all >"$tmp/gguf.txt" 2>&1
  cmp -s "$tmp/hf.txt" "$tmp/gguf.txt"; check "logits_$m" $? "$(head -c 300 "$tmp/gguf.txt")"
done

"$BIN" generate --model tests/data/models/llama --ids "1 5 9" --max_new_tokens 6 >"$tmp/hf.txt" 2>/dev/null
"$BIN" generate --model tests/data/gguf/llama.gguf --ids "1 5 9" --max_new_tokens 6 >"$tmp/gguf.txt" 2>/dev/null
check generate_llama $([ -s "$tmp/hf.txt" ] && cmp -s "$tmp/hf.txt" "$tmp/gguf.txt"; echo $?) "$(cat "$tmp/hf.txt") vs $(cat "$tmp/gguf.txt")"

# Errors: truncated, not GGUF (but named .gguf), missing.
head -c 300 tests/data/gguf/qwen2.gguf >"$tmp/cut.gguf"
out=$("$BIN" logits --model "$tmp/cut.gguf" --ids "1 2" 2>&1); rc=$?
check error_truncated_header $([ $rc -eq 1 ] && [[ "$out" == *cut.gguf* ]] && [[ "$out" == *"truncated"* ]]; echo $?) "rc $rc: $out"
head -c 3000 tests/data/gguf/qwen2.gguf >"$tmp/cut.gguf"
out=$("$BIN" logits --model "$tmp/cut.gguf" --ids "1 2" 2>&1); rc=$?
check error_truncated_data $([ $rc -eq 1 ] && [[ "$out" == *"lies outside the data section"* ]]; echo $?) "rc $rc: $out"
echo '{}' >"$tmp/fake.gguf"
out=$("$BIN" logits --model "$tmp/fake.gguf" --ids "1 2" 2>&1); rc=$?
check error_not_gguf $([ $rc -ne 0 ] && [[ "$out" == *fake.gguf* ]]; echo $?) "rc $rc: $out"
out=$("$BIN" logits --model "$tmp/missing.gguf" --ids "1 2" 2>&1); rc=$?
check error_missing $([ $rc -ne 0 ] && [[ "$out" == *"no such directory or .gguf file"* ]]; echo $?) "rc $rc: $out"
