#!/usr/bin/env bash
# tokenize_fuzz.sh: seeded differential fuzzing of `still tokenize` against the transformers.js
# references on random strings (STILL_FUZZ_SEED, default 20240601; STILL_FUZZ_N cases per tokenizer).
set -u
BUILD=${STILL_BUILD:-build}
STILL_BIN=${STILL_BIN:-./still}
seed=${STILL_FUZZ_SEED:-20240601}
n=${STILL_FUZZ_N:-3000}
nm=$(scripts/refs_tokenizer.sh --node-modules 2>"$BUILD/tokenize_fuzz.npm.log") || {
  echo "FAIL tokenize_fuzz: npm install failed: $(tail -1 "$BUILD/tokenize_fuzz.npm.log")"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in qwen3 llama3 llama2; do
  dir="$BUILD/tokdata/$name"
  mkdir -p "$dir"
  gzip -dc "tests/data/tokenizer/$name/tokenizer.json.gz" >"$dir/tokenizer.json"
  cp "tests/data/tokenizer/$name/tokenizer_config.json" "$dir/"
  if ! node scripts/ref_tokenizer.mjs "$nm" --fuzz "$name" "$seed" "$n" >"$tmp/ref.jsonl" 2>"$tmp/err"; then
    echo "FAIL fuzz_$name: reference failed: $(tail -1 "$tmp/err")"; continue
  fi
  node -e 'const fs=require("fs");const L=fs.readFileSync(process.argv[1],"utf8").trim().split("\n");
    fs.writeFileSync(process.argv[2], L.map(l=>JSON.stringify(JSON.parse(l).text)).join("\n")+"\n");' "$tmp/ref.jsonl" "$tmp/in.jsonl"
  if ! "$STILL_BIN" tokenize --model "$dir" --jsonl <"$tmp/in.jsonl" >"$tmp/out.jsonl" 2>"$tmp/err"; then
    echo "FAIL fuzz_$name: still tokenize failed: $(tail -1 "$tmp/err")"; continue
  fi
  node -e 'const fs=require("fs");const R=fs.readFileSync(process.argv[1],"utf8").trim().split("\n").map(JSON.parse);
    const O=fs.readFileSync(process.argv[2],"utf8").trim().split("\n");let bad=[];
    for(let i=0;i<R.length;i++){const got=JSON.parse(O[i]||"null");if(JSON.stringify(got)!==JSON.stringify(R[i].ids))bad.push(i);}
    if(bad.length){const i=bad[0];console.log(`FAIL fuzz_${process.argv[3]}: ${bad.length} of ${R.length} differ (seed ${process.argv[4]}); first: text ${JSON.stringify(R[i].text)} want ${JSON.stringify(R[i].ids)} got ${O[i]}`);}
    else console.log(`ok fuzz_${process.argv[3]} (${R.length} cases, seed ${process.argv[4]})`);' "$tmp/ref.jsonl" "$tmp/out.jsonl" "$name" "$seed"
done
