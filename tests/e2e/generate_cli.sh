#!/usr/bin/env bash
# generate_cli.sh: still generate / still chat end to end on a `still init` model (hidden 64,
# 2 layers) with the real Qwen3 tokenizer and chat template (tests/data/tokenizer/qwen3).
# asan: yes
set -u
source tests/e2e/lib.sh

mkdir -p "$tmp/tok"
gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >"$tmp/tok/tokenizer.json"
cp tests/data/tokenizer/qwen3/tokenizer_config.json "$tmp/tok/"
cat >"$tmp/config.json" <<'EOF'
{"vocab_size": 151936, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096,
 "initializer_range": 0.5, "torch_dtype": "float32", "bos_token_id": 151643, "eos_token_id": 151645,
 "hidden_act": "silu", "model_type": "qwen3", "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
 "tie_word_embeddings": true, "attention_bias": false}
EOF
M=$tmp/m
$BIN init --model_config "$tmp/config.json" --tokenizer "$tmp/tok" --output_dir "$M" --seed 1 2>/dev/null
G="$BIN generate --model $M --threads 1"

# greedy, ids in and out: N ids on the last line, the same twice
out=$($G --ids "9707 11 1879" --max_new_tokens 12 --ignore_eos --print_ids 2>"$tmp/err")
ids=$(tail -n 1 <<<"$out")
again=$($G --ids "9707 11 1879" --max_new_tokens 12 --ignore_eos --print_ids 2>/dev/null | tail -n 1)
if [ "$(wc -w <<<"$ids")" = 12 ] && [ "$ids" = "$again" ]; then ok greedy_ids_deterministic
else fail greedy_ids_deterministic "'$ids' vs '$again'"; fi

# statistics on stderr: prefill and decode tokens/s and plans
if grep -q "prefill .* tok/s; decode 12 tokens .* tok/s" "$tmp/err" && grep -q "plans: 2 built" "$tmp/err"; then
  ok stats_on_stderr; else fail stats_on_stderr "$(cat "$tmp/err")"; fi

# --prompt: the text printed is the decode of the ids printed
out=$($G --prompt "Hello, world" --max_new_tokens 10 --ignore_eos --print_ids 2>/dev/null)
ids=$(tail -n 1 <<<"$out"); text=$(head -n -1 <<<"$out")
dec=$($BIN tokenize --model "$M" --decode <<<"$ids")
if [ "$text" = "$dec" ] && [ -n "$text" ]; then ok prompt_text_matches_ids; else fail prompt_text_matches_ids "'$text' vs '$dec'"; fi

# the same prompt as --ids gives the same tokens (text prompts are encoded like `still tokenize`)
pids=$(printf 'Hello, world' | $BIN tokenize --model "$M")
ids2=$($G --ids "$pids" --max_new_tokens 10 --ignore_eos --print_ids 2>/dev/null | tail -n 1)
if [ "$ids" = "$ids2" ]; then ok prompt_equals_ids; else fail prompt_equals_ids "'$ids' vs '$ids2'"; fi

# sampling: same seed same ids, another seed other ids
s1=$($G --ids "1 2 3" --max_new_tokens 16 --ignore_eos --do_sample true --temperature 1.5 --top_k 0 --seed 7 --print_ids 2>/dev/null | tail -n 1)
s2=$($G --ids "1 2 3" --max_new_tokens 16 --ignore_eos --do_sample true --temperature 1.5 --top_k 0 --seed 7 --print_ids 2>/dev/null | tail -n 1)
s3=$($G --ids "1 2 3" --max_new_tokens 16 --ignore_eos --do_sample true --temperature 1.5 --top_k 0 --seed 8 --print_ids 2>/dev/null | tail -n 1)
if [ "$s1" = "$s2" ] && [ "$s1" != "$s3" ]; then ok sampling_seeded; else fail sampling_seeded "$s1 | $s2 | $s3"; fi

# generation_config.json is honoured (do_sample true there), and a flag overrides it
cp -r "$M" "$tmp/ms"
echo '{"do_sample": true, "temperature": 1.5, "top_k": 0, "eos_token_id": [151645, 151643]}' >"$tmp/ms/generation_config.json"
g1=$($BIN generate --model "$tmp/ms" --threads 1 --ids "1 2 3" --max_new_tokens 16 --ignore_eos --seed 7 --print_ids 2>/dev/null | tail -n 1)
g2=$($BIN generate --model "$tmp/ms" --threads 1 --ids "1 2 3" --max_new_tokens 16 --ignore_eos --seed 7 --do_sample false --print_ids 2>/dev/null | tail -n 1)
gg=$($G --ids "1 2 3" --max_new_tokens 16 --ignore_eos --print_ids 2>/dev/null | tail -n 1)
if [ "$g1" = "$s1" ] && [ "$g2" = "$gg" ]; then ok generation_config_honoured; else fail generation_config_honoured "$g1 / $s1 / $g2 / $gg"; fi

# --prompts: strings and message lists, two sequences each -> generations.jsonl
cat >"$tmp/p.jsonl" <<'EOF'
{"prompt": "The capital of France is"}
{"prompt": [{"role": "user", "content": "Say hi"}]}
EOF
$G --prompts "$tmp/p.jsonl" --output_dir "$tmp/out" --num_return_sequences 2 --max_new_tokens 6 --do_sample true --seed 3 2>/dev/null
if [ -f "$tmp/out/generations.jsonl" ] && [ "$(wc -l <"$tmp/out/generations.jsonl")" = 4 ] \
   && python3 - "$tmp/out/generations.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    assert set(["prompt", "text", "token_ids", "logprobs", "finish_reason", "reasoning_content", "content"]) <= set(r), r
    assert len(r["token_ids"]) == len(r["logprobs"]) and r["finish_reason"] in ("eos", "length", "stop"), r
    assert all(lp is None or lp <= 0 for lp in r["logprobs"]), r
assert [r["prompt_index"] for r in rows] == [0, 0, 1, 1] and isinstance(rows[2]["prompt"], list)
EOF
then ok prompts_jsonl; else fail prompts_jsonl "$(head -c 600 "$tmp/out/generations.jsonl" 2>&1)"; fi

# stop strings: stop at a piece of the greedy text; finish_reason stop and fewer tokens
full=$($G --ids "9707 11 1879" --max_new_tokens 12 --ignore_eos 2>/dev/null)
stop=$(python3 -c 'import sys; t=sys.argv[1]; print(t[len(t)//2:len(t)//2+2])' "$full")
$G --ids "9707 11 1879" --max_new_tokens 12 --ignore_eos --print_ids --stop_strings "$stop" >"$tmp/stop.txt" 2>/dev/null
n=$(tail -n 1 "$tmp/stop.txt" | wc -w)
if [ -n "$stop" ] && [ "$n" -lt 12 ] && [ "$n" -ge 1 ] && grep -qF -- "$stop" "$tmp/stop.txt"; then ok stop_strings
else fail stop_strings "stop '$stop' n=$n full='$full'"; fi

# plan limit
expect_err max_plans_trips "max_plans is 1" $G --ids "1 2 3" --max_new_tokens 4 --max_plans 1

# chat: piped stdin, two turns, /reset, /exit
printf 'hello\n/stats\n/reset\nhi there\n/stats\n/exit\nnever read\n' | $BIN chat --model "$M" --threads 1 --max_new_tokens 5 --ignore_eos >"$tmp/chat.out" 2>"$tmp/chat.err"
rc=$?
if [ $rc = 0 ] && [ "$(wc -l <"$tmp/chat.out")" -ge 2 ] && grep -q "conversation reset" "$tmp/chat.err" \
   && [ "$(grep -c 'still chat: prefill' "$tmp/chat.err")" = 2 ]; then ok chat_piped
else fail chat_piped "rc=$rc $(cat "$tmp/chat.err")"; fi

# errors name what is wrong
expect_err needs_prompt "exactly one of --prompt" $G --max_new_tokens 3
expect_err chunk_multiple "multiple of pad_to_multiple_of 64" $G --ids "1 2" --prefill_chunk_size 100 --pad_to_multiple_of 64
expect_err ids_vocab "outside the vocabulary" $G --ids "1 999999"
expect_err bad_jsonl "p.bad:2: no \"prompt\" field" bash -c "printf '{\"prompt\":\"a\"}\n{\"x\":1}\n' >$tmp/p.bad; $G --prompts $tmp/p.bad"
mkdir -p "$tmp/notok"; cp "$M/config.json" "$M/model.safetensors" "$tmp/notok/"
expect_err text_needs_tokenizer "has no tokenizer.json" $BIN generate --model "$tmp/notok" --prompt "hi"
ids=$($BIN generate --model "$tmp/notok" --ids "1 2" --max_new_tokens 3 --ignore_eos 2>/dev/null)
if [ "$(wc -w <<<"$ids")" = 3 ]; then ok ids_without_tokenizer; else fail ids_without_tokenizer "'$ids'"; fi

# q8_0 weights (quantized at load): as many tokens as asked, the same on ref and cpu; trainers refuse them
q8=$($G --ids "9707 11 1879" --max_new_tokens 8 --ignore_eos --print_ids --dtype q8_0 2>"$tmp/q8.err" | tail -n 1)
q8r=$($G --ids "9707 11 1879" --max_new_tokens 8 --ignore_eos --print_ids --dtype q8_0 --device ref 2>/dev/null | tail -n 1)
if [ "$(wc -w <<<"$q8")" = 8 ] && [ "$q8" = "$q8r" ]; then ok q8_0_generate; else fail q8_0_generate "'$q8' vs ref '$q8r': $(cat "$tmp/q8.err")"; fi
expect_err q8_0_not_trained "8-bit weights cannot be trained" $BIN sft --model "$M" --dataset tests/data/sft/ids.jsonl \
  --output_dir "$tmp/q8sft" --dtype q8_0 --max_steps 1
expect_err q8_0_not_saved "checkpoints are written as float32 or bfloat16" $BIN sft --model "$M" \
  --dataset tests/data/sft/ids.jsonl --output_dir "$tmp/q8sft" --save_dtype q8_0 --max_steps 1

# A big batch works or fails with a message, never overflows the stack: no buffer sized by the
# batch lives there (50000 rows' sampler parameters were a 1.6 MB array on a 1 MB stack).
cat >"$tmp/nano.json" <<'JSON'
{"vocab_size": 16, "hidden_size": 4, "intermediate_size": 4, "num_hidden_layers": 1, "num_attention_heads": 1,
 "num_key_value_heads": 1, "head_dim": 2, "model_type": "qwen3", "eos_token_id": 2, "torch_dtype": "float32"}
JSON
$BIN init --model_config "$tmp/nano.json" --output_dir "$tmp/nano" 2>/dev/null
out=$( (ulimit -s 1024; $BIN generate --model "$tmp/nano" --ids "1 3" --max_new_tokens 1 --do_sample true \
  --num_return_sequences 50000 --batch_size 50000 --threads 1 2>&1 >"$tmp/big.out") ); rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c . "$tmp/big.out")" -ge 1 ]; then ok big_batch_no_stack_overflow
elif [ $rc -eq 1 ] && grep -q "needs .* but" <<<"$out"; then ok "big_batch_no_stack_overflow (refused: $(tail -1 <<<"$out"))"
else fail big_batch_no_stack_overflow "rc=$rc $(tail -2 <<<"$out")"; fi
