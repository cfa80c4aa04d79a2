#!/usr/bin/env bash
# gpu_check.sh: build and check the CUDA backend on a GPU machine that has no package registry,
# then benchmark it. Prepare once where apt works: scripts/gpu_pack.sh (downloads the Debian
# packages into gpu_pack/debs). On the GPU machine (the device tool of this workplace):
#   run(command="scripts/gpu_check.sh", carry=["gpu_pack"], timeout_s=540)
# Stages, each logged under $OUT (or gpu_out/): unpack the packages into gpu_pack/prefix (dpkg -x,
# nothing installed), `make CUDA=1 NO_DEPS=1 DEPS_PREFIX=...`, stop with status 3 when no GPU is
# present, op parity against the reference (tests/ops/test_backend_parity: every op forward and
# backward, fp32 and bf16 GEMMs, the sampling ops; test_kv and test_heads_parity: the KV cache
# ops and the distillation / RL heads; FULL_TESTS=1 adds the whole suite on the CUDA build), the
# NCCL collectives against MPI's (tests/gpu/test_nccl under mpirun, one rank per GPU: only with
# two or more GPUs and an MPI on the machine, else a line says why not), a small model on cpu and
# cuda (logits, 8 AdamW steps' losses, 3 of them replayed from a captured graph; the CLI's
# logits; 5 steps of still sft), greedy generation, and benchmarks: Qwen3-0.6B-shaped training
# step at 4 x 1024 (MFU) with the tensor-core attention (the default) and with the fp32 one
# (STILL_CUDA_ATTN=fp32), and decode through the generation engine at batch 1 and 64 (bandwidth;
# the captured decode step against the eager one). The parity stage holds both attention kernels
# to ref (the fp32 ones in the fp32-GEMM run, the tensor-core ones at 3e-2 in the bf16 run) and the
# bf16 weight copies after every kind of write. A table goes to stdout and rows are appended to
# bench/RESULTS.md (copied to $OUT: bring it back into the repository).
# Budget: about 7 minutes of GPU time. SKIP_BENCH=1 skips the benchmarks. Exit status: 0 all passed, 1 a check failed, 2 build failed, 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
pack=${GPU_PACK:-gpu_pack}
prefix=$root/$pack/prefix
out=${OUT:-$root/gpu_out}
mkdir -p "$out"
t_start=$(date +%s)
log() { echo "gpu_check [$(($(date +%s) - t_start))s]: $*" >&2; }
fail=0
summary=()
note() { summary+=("$1"); }

# ---- 1. unpack the packages (never into /: a local prefix) -----------------------------------
if ! ls "$pack"/debs/*.deb >/dev/null 2>&1; then
  log "no packages in $pack/debs: run scripts/gpu_pack.sh where apt works, and carry $pack"
  exit 2
fi
rm -rf "$prefix"
mkdir -p "$prefix"
for f in "$pack"/debs/*.deb; do
  if command -v dpkg >/dev/null 2>&1; then
    dpkg -x "$f" "$prefix" || { log "dpkg -x $f failed"; exit 2; }
  else  # a .deb is an ar archive holding data.tar.*
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$root/$f" && tar -xf data.tar.* -C "$prefix") || { log "unpacking $f failed"; exit 2; }
    rm -rf "$tmp"
  fi
done
multi=$prefix/usr/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
# OpenBLAS needs libgfortran at run time: a transitive dependency, which RUNPATH does not cover
export LD_LIBRARY_PATH=$multi:$multi/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MAKE=make
command -v make >/dev/null 2>&1 || MAKE=$prefix/usr/bin/make
log "unpacked $(ls "$pack"/debs/*.deb | wc -l) packages into $prefix"

# ---- 2. build ---------------------------------------------------------------------------------
jobs=$(nproc 2>/dev/null || echo 4)
if ! $MAKE CUDA=1 NO_DEPS=1 MPI=0 DEPS_PREFIX="$prefix" -j"$jobs" still tests build-cuda/bench/cuda_bench \
     >"$out/build.log" 2>&1; then
  grep -v '^  \(CC\|TEST\|BENCH\)' "$out/build.log" | tail -30 >&2
  log "build failed (log: $out/build.log)"
  exit 2
fi
log "built ./still, the tests and build-cuda/bench/cuda_bench with CUDA"
ldd ./still | grep -E "not found" && { log "unresolved libraries"; exit 2; }

# ---- 3. is there a GPU? -------------------------------------------------------------------------
if ! nvidia-smi -L >/dev/null 2>&1; then
  log "no GPU: nvidia-smi finds no device; stopping after the build (everything above passed)"
  exit 3
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
log "GPU: $gpu"

# ---- 4. op parity -----------------------------------------------------------------------------
OPS_VERBOSE=1 timeout 240 build-cuda/tests/ops/test_backend_parity >"$out/parity.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || grep -q '^FAIL' "$out/parity.log" || ! grep -q '^# backend cuda gemm fp32' "$out/parity.log" \
   || ! grep -q '^# backend cuda gemm bf16' "$out/parity.log"; then
  grep -E '^(FAIL|skip|#)' "$out/parity.log" | head -30 >&2
  log "op parity FAILED (status $rc; log: $out/parity.log)"
  fail=1
  note "op parity: FAILED"
else
  note "op parity: $(grep -c '^ok' "$out/parity.log") ok (cuda fp32 and bf16 GEMMs, sampling)"
fi
# both attention kernels and the weight copies ran (and passed: no FAIL above)
natt=$(grep -c '^ok test_attention' "$out/parity.log"); ncopy=$(grep -c '^ok test_weight_copies' "$out/parity.log")
attn_err=$(awk '/^# backend cuda gemm bf16/ { on = 1 } on && /attention .* rel err/ { for (i = 1; i < NF; i++) if ($i == "err") { e = $(i + 1) + 0; if (e > m) m = e } }
  END { printf "%.2e", m }' "$out/parity.log")
if [ "$natt" -ge 3 ] && [ "$ncopy" -ge 1 ]; then
  note "attention parity: fp32 kernels and tensor cores (bf16 mma) ok, worst tensor-core rel err $attn_err (tol 3e-2); bf16 weight copies ok"
else
  note "attention parity: FAILED or missing (ok test_attention x$natt of 3, test_weight_copies x$ncopy of 1)"
  fail=1
fi
grep -E 'rel err|^#|adamw' "$out/parity.log" | grep -A200 '^# backend cuda' >"$out/parity_cuda_errors.txt" || true

# ---- 5. the other tests that hold cuda to ref (KV cache ops, distillation / RL heads) ----------
for t in ops/test_kv ops/test_heads_parity; do
  OMP_WAIT_POLICY=passive timeout 120 build-cuda/tests/$t >"$out/$(basename $t).log" 2>&1
  rc=$?
  nok=$(grep -c '^ok' "$out/$(basename $t).log"); nfail=$(grep -c '^FAIL' "$out/$(basename $t).log")
  cudaskip=$(grep -c '^skip.*cuda' "$out/$(basename $t).log")
  note "$t: $nok ok, $nfail failed, $cudaskip cuda skips (status $rc)"
  [ $rc -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$cudaskip" -eq 0 ] || { fail=1; grep -E '^(FAIL|skip)' "$out/$(basename $t).log" | head -5 >&2; }
done
# the whole CPU suite on the CUDA build: FULL_TESTS=1 (CI runs it without a GPU; minutes here)
if [ "${FULL_TESTS:-0}" = 1 ]; then
  STILL_BUILD=build-cuda timeout 300 tests/run.sh all >"$out/tests.log" 2>&1
  last=$(tail -1 "$out/tests.log")
  note "test suite (CUDA build): $last"
  case "$last" in *" 0 failed"*) ;; *) fail=1; grep -E 'FAIL' "$out/tests.log" | head -10 >&2 ;; esac
fi

# ---- 5b. NCCL collectives against MPI's (more than one GPU) -------------------------------------
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpu" -lt 2 ]; then
  note "NCCL vs MPI collectives: not run: $ngpu GPU on this machine (needs 2 or more)"
elif ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  note "NCCL vs MPI collectives: not run: no mpicc / mpirun on this machine ($ngpu GPUs)"
elif ! $MAKE CUDA=1 NO_DEPS=1 MPI=1 BUILD=build-cuda-mpi DEPS_PREFIX="$prefix" -j"$jobs" build-cuda-mpi/tests/gpu/test_nccl \
       >"$out/build_nccl.log" 2>&1; then
  grep -E 'error|nccl|mpi' "$out/build_nccl.log" | head -5 >&2
  note "NCCL vs MPI collectives: FAILED to build with MPI=1 (log: $out/build_nccl.log)"
  fail=1
else
  root_flag=$([ "$(id -u)" = 0 ] && echo --allow-run-as-root)
  timeout 180 mpirun $root_flag --oversubscribe -np "$ngpu" build-cuda-mpi/tests/gpu/test_nccl >"$out/nccl.log" 2>&1
  rc=$?
  nok=$(grep -c '^ok test_collectives' "$out/nccl.log"); nfail=$(grep -c '^FAIL' "$out/nccl.log")
  if [ $rc -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$nok" -eq "$ngpu" ]; then
    note "NCCL vs MPI collectives ($ngpu ranks): all-reduce, reduce-scatter, all-gather ok on every rank"
  else
    grep -E '^(FAIL|skip)' "$out/nccl.log" | head -5 >&2
    note "NCCL vs MPI collectives ($ngpu ranks): FAILED ($nok of $ngpu ranks ok, status $rc; log: $out/nccl.log)"
    fail=1
  fi
fi

# ---- 6. a small model end to end ----------------------------------------------------------------
timeout 120 build-cuda/bench/cuda_bench check tests/data/models/qwen3_tied/config.json >"$out/model.log" 2>&1
rc=$?
cat "$out/model.log" >&2
[ $rc -eq 0 ] || fail=1
note "model check (logits, 8 train steps (3 graph replays), fp32 and bf16 GEMMs): $(grep -c '^ok' "$out/model.log") ok, $(grep -c '^FAIL' "$out/model.log") failed"
ids="1 5 9 200 17 3 3 3 44 45 46 301 12"
./still logits --device cpu --model tests/data/models/qwen3_tied --ids "$ids" --all >"$out/logits_cpu.txt" 2>&1
./still logits --device cuda --model tests/data/models/qwen3_tied --ids "$ids" --all >"$out/logits_cuda.txt" 2>&1
# bf16 GEMMs through 2 layers: max |diff| within 3e-2 of max |logit|
cli=$(paste -d'\n' "$out/logits_cpu.txt" "$out/logits_cuda.txt" | awk '
  NR % 2 == 1 { n = split($0, a, " "); next }
  { m = split($0, b, " "); if (m != n) bad = 1
    for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > e) e = d
      x = a[i] < 0 ? -a[i] : a[i]; if (x > mx) mx = x } }
  END { if (bad || NR == 0 || mx == 0) { print "FAIL shapes"; exit } printf "%s %.3g %.3g\n", (e <= 3e-2 * mx ? "ok" : "FAIL"), e, mx }')
note "CLI logits --device cuda vs cpu: $cli (max err, max |logit|)"
case "$cli" in ok*) ;; *) fail=1 ;; esac
# a few SFT steps through the command line (trainer, data, AdamW, clipping): losses within 2e-2
# relative (bf16 GEMM operands on cuda)
for d in cpu cuda; do
  ./still sft --device $d --model tests/data/models/qwen3_tied --dataset tests/data/sft/ids.jsonl \
    --output_dir "$out/sft_$d" --max_steps 5 --logging_steps 1 --pad_to_multiple_of 16 --learning_rate 1e-3 \
    --save_strategy no >"$out/sft_$d.log" 2>&1 || { fail=1; tail -3 "$out/sft_$d.log" >&2; }
done
sft=$(python3 - "$out/sft_cpu/metrics.jsonl" "$out/sft_cuda/metrics.jsonl" <<'PY'
import json, sys
def losses(p):
    try:
        return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
    except Exception:
        return []
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) < 5 or len(a) != len(b):
    print(f"FAIL steps: cpu {len(a)}, cuda {len(b)}")
else:
    e = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print(f"{'ok' if e <= 2e-2 else 'FAIL'} {len(a)} steps, max rel diff {e:.3g}, last loss cpu {a[-1]:.4f} cuda {b[-1]:.4f}")
PY
)
note "still sft --device cuda vs cpu: $sft"
case "$sft" in ok*) ;; *) fail=1 ;; esac
if ./still generate --help >/dev/null 2>&1; then
  gen_args=(--model tests/data/models/qwen3_tied --ids "$ids" --max_new_tokens 32 --do_sample false)
  # ids on stdout; the timing line on stderr differs from run to run
  ./still generate --device cpu "${gen_args[@]}" >"$out/gen_cpu.txt" 2>"$out/gen_cpu.err"
  ./still generate --device cuda "${gen_args[@]}" >"$out/gen_cuda.txt" 2>"$out/gen_cuda.err"
  if cmp -s "$out/gen_cpu.txt" "$out/gen_cuda.txt"; then note "greedy generation, 32 tokens: cuda == cpu"
  else note "greedy generation, 32 tokens: cuda != cpu (see gen_*.txt)"; fail=1; fi
else
  note "greedy generation: skipped (still generate is not in this build yet)"
fi

# ---- 7. benchmarks ------------------------------------------------------------------------------
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  cfg=bench/configs/qwen3_0.6b.json
  timeout 200 build-cuda/bench/cuda_bench train $cfg 4 1024 5 >"$out/bench_train.json" 2>"$out/bench_train.err"
  [ $? -eq 0 ] || { fail=1; tail -5 "$out/bench_train.err" >&2; }
  # the same step with the fp32 CUDA-core attention: what the tensor cores bring
  STILL_CUDA_ATTN=fp32 timeout 200 build-cuda/bench/cuda_bench train $cfg 4 1024 5 >"$out/bench_train_attn_fp32.json" \
    2>"$out/bench_train_attn_fp32.err"
  [ $? -eq 0 ] || { fail=1; tail -5 "$out/bench_train_attn_fp32.err" >&2; }
  for b in 1 64; do
    timeout 150 build-cuda/bench/cuda_bench decode $cfg $b 128 >"$out/bench_decode_$b.json" 2>"$out/bench_decode_$b.err"
    [ $? -eq 0 ] || { fail=1; tail -5 "$out/bench_decode_$b.err" >&2; }
  done
  python3 - "$out" "$gpu" <<'PY' >"$out/bench_table.txt"
import json, sys, os, datetime
out, gpu = sys.argv[1], sys.argv[2]
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception:
        return None
rows, res = [], "bench/RESULTS.md"
def append(section, header, row):
    text = open(res).read() if os.path.exists(res) else "# Benchmark results\n\nAppend-only: one section per benchmark, one row per run.\n"
    lines = text.rstrip("\n").split("\n")
    sec = "## " + section
    if sec not in lines:
        lines += ["", sec, "", header]
        lines.append(row)
    else:
        i = lines.index(sec) + 1
        last = i
        while i < len(lines) and not lines[i].startswith("## "):
            if lines[i].strip(): last = i
            i += 1
        lines.insert(last + 1, row)
    open(res, "w").write("\n".join(lines) + "\n")
for name, env, attn in (("bench_train.json", "", "tensor-core (bf16 mma)"),
                        ("bench_train_attn_fp32.json", "STILL_CUDA_ATTN=fp32 ", "fp32 CUDA-core")):
    t = load(name)
    if not t: continue
    row = (f"| {date} | {gpu} | `{env}cuda_bench train qwen3_0.6b.json 4 1024` | {t['step_s']*1e3:.1f} ms | {t['tok_s']:.0f} | "
           f"{t['model_tflops']:.1f} | MFU {t['mfu_pct']:.1f}% | {t['of_gemm_pct']:.1f}% of {t['gemm_tflops_8192']:.0f} "
           f"(mlp shape {t['gemm_tflops_mlp_shape']:.0f}) | gemm {t['gemm_dtype']}, {attn} attention, graphs {t['graphs']}, fwd {t['forward_s']*1e3:.1f} ms |")
    append("cuda: SFT step, Qwen3-0.6B shape (hidden 1024, 28 layers, 16/8 heads, HD 128, MLP 3072, V 151936 tied)",
           "| date | GPU | command | step | tok/s | model TFLOP/s | MFU (of 989 dense bf16) | of cuBLAS bf16 GEMM TFLOP/s | notes |\n|---|---|---|---|---|---|---|---|---|", row)
    rows.append(f"train 4x1024 {'mma ' if not env else 'fp32'}  step {t['step_s']*1e3:8.1f} ms  {t['tok_s']:9.0f} tok/s  {t['model_tflops']:6.1f} TFLOP/s  MFU {t['mfu_pct']:.1f}%  ({t['of_gemm_pct']:.1f}% of cuBLAS {t['gemm_tflops_8192']:.0f}; {attn} attention)")
for b in (1, 64):
    d = load(f"bench_decode_{b}.json")
    if not d: continue
    row = (f"| {date} | {gpu} | `cuda_bench decode qwen3_0.6b.json {b} 128` | {b} | {d['step_s']*1e3:.3f} ms | {d['tok_s']:.0f} | "
           f"{d['gb_s']:.0f} GB/s | bandwidth {d['bandwidth_pct_of_copy']:.1f}% | {d['copy_gb_s']:.0f} GB/s | "
           f"eager {d['step_eager_s']*1e3:.3f} ms ({d['tok_s_eager']:.0f} tok/s); graphs {d['graphs']}; tokens graph == eager: {'yes' if d['graph_equals_eager'] else 'NO'} |")
    append("cuda: decode, Qwen3-0.6B shape (generation engine, 128-token prompts, 128 greedy tokens, bf16 weights, fp32 KV cache)",
           "| date | GPU | command | batch | step (graph) | tok/s | weights + KV bytes/s | bandwidth (of measured copy) | copy GB/s | notes |\n|---|---|---|---|---|---|---|---|---|---|", row)
    rows.append(f"decode B={b:<3}       step {d['step_s']*1e3:8.3f} ms  {d['tok_s']:9.0f} tok/s  {d['gb_s']:6.0f} GB/s  bandwidth {d['bandwidth_pct_of_copy']:.1f}% of copy {d['copy_gb_s']:.0f} GB/s  (eager {d['step_eager_s']*1e3:.3f} ms)")
print("\n".join(rows))
PY
  cp bench/RESULTS.md "$out/RESULTS.md" 2>/dev/null || true
fi

# ---- table ---------------------------------------------------------------------------------------
echo
echo "== gpu_check on $gpu ($(($(date +%s) - t_start)) s)"
for s in "${summary[@]}"; do echo "  $s"; done
[ -f "$out/bench_table.txt" ] && sed 's/^/  /' "$out/bench_table.txt"
echo "  targets: SFT MFU >= 50%, decode B=1 >= 60% of bandwidth"
[ $fail -eq 0 ] && echo "== all checks passed" || echo "== some checks FAILED (logs in $out)"
exit $fail
