# lib/serve.sh: what the still serve tests share (sourced): a tiny `still init` model with the real
# Qwen3 tokenizer and chat template, starting a server on a free loopback port, stopping it.
BIN=${STILL_BIN:-./still}
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# serve_model DIR: a hidden-64, 2-layer Qwen3 with the real tokenizer (fast on any machine).
serve_model() {
  local d=$1
  mkdir -p "$d/tok"
  gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >"$d/tok/tokenizer.json"
  cp tests/data/tokenizer/qwen3/tokenizer_config.json "$d/tok/"
  cat >"$d/config.json" <<'JSON'
{"vocab_size": 151936, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096,
 "initializer_range": 0.5, "torch_dtype": "float32", "bos_token_id": 151643, "eos_token_id": 151645,
 "hidden_act": "silu", "model_type": "qwen3", "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
 "tie_word_embeddings": true, "attention_bias": false}
JSON
  $BIN init --model_config "$d/config.json" --tokenizer "$d/tok" --output_dir "$d/m" --seed 1 2>/dev/null
}

# serve_start TMPDIR ARGS...: start `still serve` on a free port; sets SERVE_PID, SERVE_URL.
serve_start() {
  local t=$1; shift
  rm -f "$t/port"
  $BIN serve --port 0 --port_file "$t/port" --threads 1 "$@" >"$t/serve.log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 1 300); do
    [ -s "$t/port" ] && break
    kill -0 $SERVE_PID 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s "$t/port" ]; then
    echo "FAIL serve_start: the server did not come up: $(tail -5 "$t/serve.log")"
    return 1
  fi
  SERVE_URL="http://127.0.0.1:$(cat "$t/port")"
}

# serve_stop: SIGTERM, wait; returns the server's exit status.
serve_stop() {
  kill -TERM $SERVE_PID 2>/dev/null
  wait $SERVE_PID
}
