#!/usr/bin/env bash
# gguf_export.sh: `still export-gguf` (docs/gguf.md). A checkpoint exported as f32 runs to the same
# logits and tokens as the checkpoint; a model with the Qwen3 tokenizer exported and read back
# tokenizes, renders its chat template and generates exactly as its directory; the file is written
# atomically; bad flags fail with a message.
# asan: yes
set -u
BIN=${STILL_BIN:-./still}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {  # name, condition-result (0 ok), detail
  if [ "$2" -eq 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi
}

for m in qwen3_untied llama; do
  "$BIN" export-gguf --model "tests/data/models/$m" --outfile "$tmp/$m.gguf" --log_level error 2>"$tmp/err.txt"
  check "export_$m" $? "$(cat "$tmp/err.txt")"
  "$BIN" logits --model "tests/data/models/$m" --ids "1 5 9 33 7 2" --all >"$tmp/hf.txt" 2>&1
  "$BIN" logits --model "$tmp/$m.gguf" --ids "1 5 9 33 7 2" --all >"$tmp/gguf.txt" 2>&1
  cmp -s "$tmp/hf.txt" "$tmp/gguf.txt"; check "logits_f32_$m" $? "$(head -c 300 "$tmp/gguf.txt")"
done
ls "$tmp" | grep -q '\.tmp\.' ; check no_temp_files $([ $? -ne 0 ]; echo $?) "$(ls "$tmp")"

# q8_0: runs, and its greedy tokens are a real generation (same length as the checkpoint's).
"$BIN" export-gguf --model tests/data/models/qwen2 --outfile "$tmp/q.gguf" --outtype q8_0 --log_level error
"$BIN" generate --model "$tmp/q.gguf" --ids "1 5 9" --max_new_tokens 5 >"$tmp/q.txt" 2>/dev/null
check generate_q8_0 $([ "$(wc -w <"$tmp/q.txt")" -eq 5 ]; echo $?) "$(cat "$tmp/q.txt")"

out=$("$BIN" export-gguf --model tests/data/models/qwen2 --outfile "$tmp/x.gguf" --outtype q4_k 2>&1); rc=$?
check bad_outtype $([ $rc -ne 0 ] && [[ "$out" == *"expected f32, f16, bf16 or q8_0"* ]] && [ ! -e "$tmp/x.gguf" ]; echo $?) "rc $rc: $out"

# A model with the Qwen3 tokenizer and chat template.
tok=$tmp/tok
mkdir -p "$tok"
gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >"$tok/tokenizer.json"
cp tests/data/tokenizer/qwen3/tokenizer_config.json "$tok/"
cat >"$tmp/cfg.json" <<'CFG'
{"model_type": "qwen3", "vocab_size": 151669, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 512,
 "eos_token_id": 151645, "tie_word_embeddings": true, "torch_dtype": "float32"}
CFG
"$BIN" init --model_config "$tmp/cfg.json" --output_dir "$tmp/m" --tokenizer "$tok" --log_level error
"$BIN" export-gguf --model "$tmp/m" --outfile "$tmp/m.gguf" --log_level error
check export_with_tokenizer $? "export failed"
printf 'Hello, world! <|im_start|>user\n  naïve café 12345 <think>x</think>' >"$tmp/t.txt"
a=$("$BIN" tokenize --model "$tmp/m" --add_special_tokens <"$tmp/t.txt"); b=$("$BIN" tokenize --model "$tmp/m.gguf" --add_special_tokens <"$tmp/t.txt")
check tokenize_same $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) "'$a' vs '$b'"
msgs='[{"role":"user","content":"Hi"}]'
a=$(echo "$msgs" | "$BIN" chat-template --model "$tmp/m" --add_generation_prompt); b=$(echo "$msgs" | "$BIN" chat-template --model "$tmp/m.gguf" --add_generation_prompt)
check chat_template_same $([ -n "$a" ] && [ "$a" = "$b" ]; echo $?) "'$a' vs '$b'"
a=$("$BIN" generate --model "$tmp/m" --prompt "Hi" --chat --max_new_tokens 4 2>/dev/null); b=$("$BIN" generate --model "$tmp/m.gguf" --prompt "Hi" --chat --max_new_tokens 4 2>/dev/null)
check generate_text_same $([ "$a" = "$b" ]; echo $?) "'$a' vs '$b'"

# A GGUF of quantized types (Q4_K, Q6_K, Q4_0, Q8_0) exported again as f32 runs to the same logits.
"$BIN" export-gguf --model tests/data/gguf/mixed.gguf --outfile "$tmp/mixed_f32.gguf" --log_level error
"$BIN" logits --model tests/data/gguf/mixed.gguf --ids "1 5 9 33" --all >"$tmp/a.txt" 2>&1
"$BIN" logits --model "$tmp/mixed_f32.gguf" --ids "1 5 9 33" --all >"$tmp/b.txt" 2>&1
check reexport_mixed $([ -s "$tmp/a.txt" ] && cmp -s "$tmp/a.txt" "$tmp/b.txt"; echo $?) "$(head -c 200 "$tmp/b.txt")"

# An independent reader: Hugging Face's @huggingface/gguf (package-lock.json, installed by
# scripts/npm_clients.sh) parses the exports of every test model in every --outtype, and
# tests/e2e/gguf_npm.mjs checks what it read against the checkpoint (metadata, tensor infos,
# layout, f32 bytes, the tokenizer keys).
if ! command -v node >/dev/null; then echo "skip gguf_npm: node is not installed"
else
  nm=$(scripts/npm_clients.sh --node-modules 2>/dev/null)
  if [ -z "$nm" ] || [ ! -d "$nm/@huggingface/gguf" ]; then
    echo "FAIL gguf_npm: the @huggingface/gguf npm package is not installed (scripts/npm_clients.sh failed)"
  else
    for m in qwen3_untied llama qwen2; do
      for o in f32 f16 bf16 q8_0; do
        "$BIN" export-gguf --model "tests/data/models/$m" --outfile "$tmp/n.gguf" --outtype $o --log_level error
        node tests/e2e/gguf_npm.mjs "$nm" "tests/data/models/$m" "$tmp/n.gguf" $o
      done
    done
    node tests/e2e/gguf_npm.mjs "$nm" "$tmp/m" "$tmp/m.gguf" f32
  fi
fi
