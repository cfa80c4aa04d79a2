# lib.sh: what every end-to-end script shares; source it first (`source tests/e2e/lib.sh`, from
# the repository root, where tests/run.sh runs them). It sets BIN (STILL_BIN, default ./still) and
# BUILD (STILL_BUILD, default build), makes one temp directory $tmp removed on exit, and prints
# the result lines tests/run.sh counts:
#   ok NAME [DETAIL]               "ok NAME[ (DETAIL)]"
#   fail NAME DETAIL               "FAIL NAME: DETAIL"
#   skip NAME REASON               "skip NAME: REASON"
#   check NAME STATUS DETAIL       ok NAME when STATUS is 0, else fail NAME DETAIL
#   expect_err NAME NEEDLE CMD...  CMD fails with an error (exit status 1-125: not a success, a
#                                  signal, a sanitizer abort or a missing program) and its stderr
#                                  contains NEEDLE
#   expect_rc NAME RC NEEDLE CMD...  CMD exits with status RC exactly and its stderr contains NEEDLE
#                                  ("" accepts any message)
#   expect_keys NAME FILE KEY...   every "KEY" (a JSON key, quoted) occurs in FILE: one ok, or one
#                                  FAIL naming every missing key
#   on_exit 'CMD'                  run CMD (evaluated then) before $tmp is removed: stop a tmux
#                                  server, kill a child, unmount
set -u
BIN=${STILL_BIN:-./still}
BUILD=${STILL_BUILD:-build}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/still-e2e-XXXXXX")
_lib_on_exit=()
_lib_cleanup() {
  local c
  for c in "${_lib_on_exit[@]+"${_lib_on_exit[@]}"}"; do eval "$c"; done
  rm -rf "$tmp"
}
trap _lib_cleanup EXIT
on_exit() { _lib_on_exit+=("$1"); }

ok() { if [ $# -gt 1 ]; then echo "ok $1 ($2)"; else echo "ok $1"; fi; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "skip $1: $2"; }
check() { if [ "$2" -eq 0 ]; then ok "$1"; else fail "$1" "$3"; fi; }

expect_err() {  # name, expected substring of stderr, command...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ge 1 ] && [ $rc -le 125 ] && grep -qF -- "$want" <<<"$out"; then ok "$name"
  else fail "$name" "rc=$rc (expected an error exit, 1-125, naming '$want'), stderr: $(tail -3 <<<"$out")"; fi
}

expect_rc() {  # name, exit status, expected substring of stderr ("" = any), command...
  local name=$1 want_rc=$2 want=$3; shift 3
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq "$want_rc" ] && { [ -z "$want" ] || grep -qF -- "$want" <<<"$out"; }; then ok "$name"
  else fail "$name" "rc=$rc (expected $want_rc${want:+ naming '$want'}), stderr: $(tail -3 <<<"$out")"; fi
}

expect_keys() {  # name, file, keys...
  local name=$1 file=$2 k missing=""; shift 2
  for k in "$@"; do grep -qF -- "\"$k\"" "$file" 2>/dev/null || missing="$missing $k"; done
  if [ -z "$missing" ]; then ok "$name"; else fail "$name" "no$missing in $file"; fi
}
# curves_agree METRICS1 METRICS2 KEY[:TOL]...: the two metrics.jsonl files have the same steps, and
# each KEY of every step agrees to a relative TOL (default 1e-5; relative to max(1, |value|))
curves_agree() {
  python3 - "$@" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
keys = [(k.split(":")[0], float(k.split(":")[1]) if ":" in k else 1e-5) for k in sys.argv[3:]]
for x, y in zip(a, b):
    for k, tol in keys:
        assert abs(x[k] - y[k]) <= tol * max(1.0, abs(x[k])), (x["step"], k, x[k], y[k])
PY
}
