#!/usr/bin/env bash
# fuzz.sh [TARGET...]: build the libFuzzer targets (fuzz/fuzz_*.c) with clang + ASan + UBSan in
# build-fuzz/ and run each for FUZZ_SECONDS (default 60), one at a time. Seeds come from the test
# fixtures (scripts/fuzz_seeds.py, regenerated every run) plus the committed regression inputs;
# what libFuzzer finds new stays in build-fuzz/corpus/TARGET between runs. A crash leaves its
# input in build-fuzz/artifacts/TARGET/; once fixed, copy it to tests/data/fuzz-regressions/TARGET/
# so `make test` replays it. Exits non-zero when any target crashed.
#   FUZZ_SECONDS  seconds per target (60)       FUZZ_TIMEOUT  seconds for one input (10)
#   FUZZ_RSS_MB   memory limit in MB (2048)     FUZZ_JOBS     make -j for the build (2)
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-fuzz
secs=${FUZZ_SECONDS:-60}
# -Wno-unknown-warning-option: the Makefile's gcc-only warning flags; -Wno-pass-failed: the
# sanitizers keep `omp simd` loops from vectorising, which clang reports as a warning.
FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Wno-unknown-warning-option -Wno-pass-failed"
# OPT=-O1 and MPI off: the parsers do not need MPI, and the sanitizers want frame pointers.
make --no-print-directory -j"${FUZZ_JOBS:-2}" BUILD=$B CC=clang MPI=0 OPT=-O1 \
  EXTRA_CFLAGS="$FLAGS" EXTRA_LDLIBS="-fsanitize=fuzzer,address,undefined" fuzz-targets >&2

# The real Qwen3 tokenizer for fuzz_tokenizer_encode.
tokdir=$B/tokdata/qwen3
if [ ! -s $tokdir/tokenizer.json ] || [ tests/data/tokenizer/qwen3/tokenizer.json.gz -nt $tokdir/tokenizer.json ]; then
  mkdir -p $tokdir
  gzip -dc tests/data/tokenizer/qwen3/tokenizer.json.gz >$tokdir/tokenizer.json.tmp
  mv $tokdir/tokenizer.json.tmp $tokdir/tokenizer.json
  cp tests/data/tokenizer/qwen3/tokenizer_config.json $tokdir/
fi
export STILL_FUZZ_TOKENIZER=$PWD/$tokdir STILL_FUZZ_ROOT=$PWD

rm -rf $B/seeds
echo "fuzz: seeds from tests/data" >&2
python3 scripts/fuzz_seeds.py $B/seeds >&2

dict_of() {
  case "$1" in
    chat_template) echo fuzz/dict/jinja.dict ;;
    args|args_config) echo fuzz/dict/args.dict ;;
    tokenizer_encode) echo "" ;;
    *) echo fuzz/dict/json.dict ;;
  esac
}
maxlen_of() {
  case "$1" in
    safetensors|tokenizer_load|gguf) echo 65536 ;;
    *) echo 16384 ;;
  esac
}

if [ $# -gt 0 ]; then targets=("$@"); else
  targets=(); for f in fuzz/fuzz_*.c; do t=${f#fuzz/fuzz_}; targets+=("${t%.c}"); done
fi
crashed=()
for t in "${targets[@]}"; do
  bin=$B/fuzz/bin/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz: no target $t" >&2; exit 2; }
  corpus=$B/corpus/$t art=$B/artifacts/$t
  mkdir -p "$corpus" "$art" $B/logs
  seeds=("$B/seeds/$t")
  [ -d "tests/data/fuzz-regressions/$t" ] && seeds+=("tests/data/fuzz-regressions/$t")
  dict=$(dict_of "$t")
  before=$(ls "$art" | wc -l)
  echo "fuzz: $t for ${secs}s" >&2
  set +e
  "$bin" "$corpus" "${seeds[@]}" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -max_len="$(maxlen_of "$t")" ${dict:+-dict=$dict} \
    -artifact_prefix="$art/" -print_final_stats=1 >$B/logs/$t.log 2>&1
  rc=$?
  set -e
  after=$(ls "$art" | wc -l)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' $B/logs/$t.log | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' $B/logs/$t.log | tail -1 | grep -o '[0-9]*' || echo "?")
  if [ $rc -ne 0 ] || [ "$after" -gt "$before" ]; then
    crashed+=("$t")
    echo "fuzz: $t FAILED (exit $rc); artifacts in $art/, log $B/logs/$t.log:" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz_|.*runtime error)' $B/logs/$t.log | head -5 | sed 's/^/    /' >&2
  fi
  printf "fuzz %-18s %8s runs  cov %6s  corpus %5d  %s\n" "$t" "$runs" "$cov" "$(ls "$corpus" | wc -l)" \
    "$([ $rc -eq 0 ] && echo ok || echo CRASH)"
done
if [ ${#crashed[@]} -gt 0 ]; then echo "fuzz: crashes in: ${crashed[*]}"; exit 1; fi
echo "fuzz: ${#targets[@]} targets, no crash"
