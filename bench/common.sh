# bench/common.sh: shared helpers for bench_*.sh (sourced).
BUILD=${STILL_BUILD:-build}
# Both engines' OpenMP threads wait sleeping (./still's default, src/cli/main.c; PyTorch's libgomp
# reads the same variable), so a busy neighbour does not turn waiting into spinning for either.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# The CPU, the OpenMP wait policy both engines ran with and the load average when the row is written
# (the machines are often shared; a row says how busy it was).
machine() {
  printf '%s, OMP_WAIT_POLICY=%s, load %s' "$(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')" \
    "$OMP_WAIT_POLICY" "$(cut -d' ' -f1 /proc/loadavg)"
  [ -n "${OPENBLAS_CORETYPE:-}" ] && printf ', OpenBLAS %s kernels' "$OPENBLAS_CORETYPE"
}
# Both use the same OpenBLAS kernels: the ones ./still asks for where the library's detection fell
# back to pre-AVX2 kernels (src/backend/cpu/blas_core.c), else the library's own choice.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x ./still ]; then
  OPENBLAS_CORETYPE=$(./still --version | sed -n 's/^build: openblas-openmp (\([A-Za-z0-9_]*\) kernels).*/\1/p')
  [ -n "$OPENBLAS_CORETYPE" ] && export OPENBLAS_CORETYPE || unset OPENBLAS_CORETYPE
fi
ncpu() { nproc; }
torch_blas() {  # what Debian's PyTorch multiplies with: the target of libblas.so.3
  readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || echo unknown
}
# append_row SECTION HEADER ROW: add a row under "## SECTION" (creating the section with HEADER).
append_row() {
  local section=$1 header=$2 row=$3 f=bench/RESULTS.md
  [ -f "$f" ] || printf '# Benchmark results\n\nAppend-only: one section per benchmark, one row per run.\n' >"$f"
  if ! grep -q "^## $section\$" "$f"; then
    printf '\n## %s\n\n%s\n' "$section" "$header" >>"$f"
  fi
  # insert after the last line of the section
  awk -v sec="## $section" -v row="$row" '
    { lines[NR] = $0 }
    $0 == sec { insec = 1; start = NR; next }
    insec && /^## / { insec = 0 }
    insec && NF { last = NR }
    END {
      for (i = 1; i <= NR; i++) { print lines[i]; if (i == last) print row }
    }' "$f" >"$f.tmp" && mv "$f.tmp" "$f"
}
