#!/usr/bin/env bash
# tokenize.sh: `still tokenize` modes and error messages, on the committed Qwen3 and Llama 2
# tokenizers (ids from tests/data/tokenizer/*/expected.jsonl, the transformers.js references).
# asan: yes
set -u
source tests/e2e/lib.sh
for name in qwen3 llama2; do
  mkdir -p "$tmp/$name"
  gzip -dc "tests/data/tokenizer/$name/tokenizer.json.gz" >"$tmp/$name/tokenizer.json"
  cp "tests/data/tokenizer/$name/tokenizer_config.json" "$tmp/$name/"
done
Q=$tmp/qwen3 L=$tmp/llama2

# Plain: all of stdin is one text; ids on one line. Hello, world! -> 9707 11 1879 0 (reference).
out=$(printf 'Hello, world!' | "$BIN" tokenize --model "$Q")
check plain_encode $([ "$out" = "9707 11 1879 0" ]; echo $?) "got '$out'"

# Plain decode round-trips the text byte for byte (no newline added).
printf 'Zürich\r\n  tabs\t\t<|im_end|> 😀' >"$tmp/t.txt"
"$BIN" tokenize --model "$Q" <"$tmp/t.txt" | "$BIN" tokenize --model "$Q" --decode >"$tmp/back.txt"
cmp -s "$tmp/t.txt" "$tmp/back.txt"; check plain_roundtrip $? "decode(encode(x)) != x"

# --jsonl: every reference case of Llama 2 with add_special_tokens, compared with the fixture.
field() {  # one field of every expected.jsonl line, as JSON
  python3 -c 'import json,sys
for l in open(sys.argv[1]): print(json.dumps(json.loads(l)[sys.argv[2]], ensure_ascii=False, separators=(", ", ": ")))' "$1" "$2"
}
if command -v python3 >/dev/null; then
  field tests/data/tokenizer/llama2/expected.jsonl text >"$tmp/in.jsonl"
  field tests/data/tokenizer/llama2/expected.jsonl ids_special >"$tmp/want.jsonl"
  "$BIN" tokenize --model "$L" --jsonl --add_special_tokens <"$tmp/in.jsonl" >"$tmp/got.jsonl"
  cmp -s "$tmp/want.jsonl" "$tmp/got.jsonl"; check jsonl_encode $? "$(diff "$tmp/want.jsonl" "$tmp/got.jsonl" | head -3)"
  field tests/data/tokenizer/llama2/expected.jsonl decoded_skip >"$tmp/want_dec.jsonl"
  "$BIN" tokenize --model "$L" --jsonl --decode --skip_special_tokens <"$tmp/want.jsonl" >"$tmp/got_dec.jsonl"
  python3 -c 'import json,sys
a=[json.loads(l) for l in open(sys.argv[1])]; b=[json.loads(l) for l in open(sys.argv[2])]
sys.exit(0 if a==b else 1)' "$tmp/want_dec.jsonl" "$tmp/got_dec.jsonl"
  check jsonl_decode $? "decoded texts differ from the reference"
else
  skip jsonl_encode "python3 not installed"
fi

# Errors name the line and the value, and exit non-zero.
printf '"ok"\n{"not": "a string"}\n' | "$BIN" tokenize --model "$L" --jsonl >/dev/null 2>"$tmp/err"; rc=$?
check error_bad_json_line $([ $rc -ne 0 ] && grep -q 'line 2: expected a JSON string' "$tmp/err"; echo $?) "rc=$rc $(cat "$tmp/err")"
printf '[1, 2]\n[3, 999999]\n' | "$BIN" tokenize --model "$L" --jsonl --decode >/dev/null 2>"$tmp/err"; rc=$?
check error_id_out_of_vocab $([ $rc -ne 0 ] && grep -q 'line 2: id 999999 is outside the vocabulary' "$tmp/err"; echo $?) "rc=$rc $(cat "$tmp/err")"
printf '12 13\n14 x7\n' | "$BIN" tokenize --model "$L" --decode >/dev/null 2>"$tmp/err"; rc=$?
check error_not_an_id $([ $rc -ne 0 ] && grep -q 'line 2: "x7" is not an integer id' "$tmp/err"; echo $?) "rc=$rc $(cat "$tmp/err")"
printf 'bad \xff byte' | "$BIN" tokenize --model "$L" >/dev/null 2>"$tmp/err"; rc=$?
check error_invalid_utf8 $([ $rc -ne 0 ] && grep -q 'not valid UTF-8 (byte 4' "$tmp/err"; echo $?) "rc=$rc $(cat "$tmp/err")"
"$BIN" tokenize --model "$tmp/none" </dev/null >/dev/null 2>"$tmp/err"; rc=$?
check error_missing_model $([ $rc -ne 0 ] && grep -q 'no such directory' "$tmp/err"; echo $?) "rc=$rc $(cat "$tmp/err")"
mkdir -p "$tmp/bad" && echo '{"model": {"type": "Unigram", "vocab": []}}' >"$tmp/bad/tokenizer.json"
"$BIN" tokenize --model "$tmp/bad" </dev/null >/dev/null 2>"$tmp/err"; rc=$?
check error_unsupported_model $([ $rc -ne 0 ] && grep -q 'model type "Unigram" is not supported' "$tmp/err"; echo $?) "rc=$rc $(cat "$tmp/err")"

# A hub id already in the local cache is resolved like a model directory (the cache's layout:
# models--ORG--NAME/refs/main names the snapshot).
hub=$tmp/hub/models--acme--tiny commit=0123456789abcdef0123456789abcdef01234567
mkdir -p "$hub/refs" "$hub/snapshots/$commit" && printf '%s' $commit >"$hub/refs/main" && cp "$Q"/* "$hub/snapshots/$commit/"
out=$(printf 'Hello, world!' | HF_HUB_CACHE=$tmp/hub $BIN tokenize --model acme/tiny 2>&1)
check tokenize_hub_id "$([ "$out" = "9707 11 1879 0" ]; echo $?)" "$out"
