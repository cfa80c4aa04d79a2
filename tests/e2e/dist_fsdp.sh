#!/usr/bin/env bash
# dist_fsdp.sh: the mesh (--tp_size / --fsdp_size, TP_SIZE / FSDP_SIZE) and FSDP / ZeRO-3.
# FSDP=2 (2 ranks x B rows) ends 5 SFT steps with the losses and weights of 1 rank x 2B rows
# (fp32 reduction tolerance, <= 1e-5 relative), and so do ZeRO-3 on one process, DPO and GRPO
# (the same rollouts, generated through the per-layer gathers); each rank of
# FSDP=2 holds half of the parameters, gradients and moments; checkpoints are the plain HF layout
# with complete moments: a run resumes bit for bit on the same mesh and on one process from the
# same checkpoint; invalid meshes are usage errors at start; a stopped rank makes the other fail
# within --ddp_timeout. Prefetch on (the default) and off give the same bits, and the logged
# overlap counters show collectives in flight during compute only with it on.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
DIFF="$BUILD/tests/tools/st_diff --norm"
M=tests/data/models/qwen3_tied
IDS=tests/data/sft/ids.jsonl
C="--model $M --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 5 --logging_steps 1 --threads 1 \
   --gradient_accumulation_steps 2 --max_grad_norm 1.0 --save_strategy no"
# Weights norm-wise per tensor (st_diff --norm, why not max-abs: dist_sft.sh): the same sums in
# another order differ by fp32 rounding (observed 2e-6 after 5 steps); a wrong shard, a layer
# gathered stale or a gradient reduced twice moves every weight by ~1e-3.
TOL=1e-5

# per-step loss and grad_norm of two metrics.jsonl files agree to a relative 1e-5
same_curves() { curves_agree "$1" "$2" loss grad_norm num_tokens mean_token_accuracy; }
# the per-rank bytes of the ZeRO-3 log line
state_bytes() { grep -o "sharded parameters, gradients and AdamW moments.*" "$1" | grep -o '[0-9]* bytes' | cut -d' ' -f1 | head -n -1; }

$BIN sft $C --per_device_train_batch_size 4 --output_dir "$tmp/one" >/dev/null 2>"$tmp/err1" \
  || fail one_rank "$(tail -3 "$tmp/err1")"
# ZeRO-3 on one process: the same machinery (gather, reduce-scatter, sharded AdamW) over 1 rank
$BIN sft $C --per_device_train_batch_size 4 --zero_stage 3 --output_dir "$tmp/z3" >/dev/null 2>"$tmp/errz3"; rc=$?
d=$($DIFF "$tmp/one/model.safetensors" "$tmp/z3/model.safetensors" $TOL 2>&1); drc=$?
cur=$(same_curves "$tmp/one/metrics.jsonl" "$tmp/z3/metrics.jsonl" 2>&1); crc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ]; then ok "zero3_one_process_matches_zero0 ($d)"
else fail zero3_one_process_matches_zero0 "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(tail -3 "$tmp/errz3")"; fi

# invalid meshes: usage errors (exit 2) naming what does not fit, before any work
expect_rc mesh_world_mismatch 2 "--tp_size 2 x --fsdp_size 1 does not divide the 1 ranks" \
  $BIN sft $C --per_device_train_batch_size 4 --tp_size 2 --output_dir "$tmp/bad"
expect_rc mesh_from_env 2 "--tp_size 1 x --fsdp_size 2 does not divide the 1 ranks" \
  env FSDP_SIZE=2 $BIN sft $C --per_device_train_batch_size 4 --output_dir "$tmp/bad"
expect_rc fsdp_with_zero1 2 "--fsdp_size 2 shards parameters (ZeRO-3); it does not go with --zero_stage 1" \
  $BIN sft $C --per_device_train_batch_size 4 --fsdp_size 2 --zero_stage 1 --output_dir "$tmp/bad"

if ! mpi_available "$BIN"; then skip dist_fsdp_mpi "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"

out=$($MPI $BIN sft $C --per_device_train_batch_size 2 --fsdp_size 2 --output_dir "$tmp/f2" 2>&1 >/dev/null); rc=$?
d=$($DIFF "$tmp/one/model.safetensors" "$tmp/f2/model.safetensors" $TOL 2>&1); drc=$?
cur=$(same_curves "$tmp/one/metrics.jsonl" "$tmp/f2/metrics.jsonl" 2>&1); crc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ]; then ok "fsdp2_matches_one_rank ($d)"
else fail fsdp2_matches_one_rank "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(tail -3 <<<"$out")"; fi

# each of 2 ranks holds half of what one process holds (blocks round up: a float per unit)
one=($(state_bytes "$tmp/errz3")); two=($(state_bytes <(echo "$out")))
if [ ${#one[@]} -eq 1 ] && [ ${#two[@]} -eq 2 ] && [ "${one[0]}" -gt 0 ] \
   && awk -v a="${one[0]}" -v b="${two[0]}" -v c="${two[1]}" 'BEGIN{exit !(b <= a/2 + 256 && c <= a/2 + 256 && b + c >= a)}'; then
  ok "fsdp2_halves_state (${one[0]} -> ${two[*]} bytes)"
else fail fsdp2_halves_state "one process: ${one[*]:-none}; two ranks: ${two[*]:-none}"; fi

# Prefetch (--fsdp_forward_prefetch, --fsdp_backward_prefetch): on (the default) and off end 5
# SFT steps with the same bits (weights and every logged number), at FSDP=2 on the 2-layer model
# and on a 5-layer one (slots reused: a layer evicted in the forward is gathered again in the
# backward), and at TP=2 x FSDP=2; both are within TOL of one process (5 layers: of ZeRO-0 on 2
# ranks, below). The overlap counters of the
# log line prove the collectives were in flight across a layer's compute (started before it,
# completed after it; most still incomplete when it began) with prefetch on, and that none were
# with it off.
OFF="--fsdp_forward_prefetch false --fsdp_backward_prefetch no_prefetch"
python3 - "$M/config.json" "$tmp/c5.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = 5
c.pop("layer_types", None)
json.dump(c, open(sys.argv[2], "w"))
PY
$BIN init --model_config "$tmp/c5.json" --output_dir "$tmp/m5" --tokenizer tests/data/sft/tok 2>/dev/null
C5=${C/--model $M/--model $tmp/m5}
# its reference: 2 ranks of ZeRO-0 (the same rows per rank; one process x 4 rows differs from
# both by 2e-5 on 5 layers of a fresh init, where AdamW's first steps normalise gradients near 0)
timeout -s KILL 120 mpirun $MPI_FLAGS -np 2 $BIN sft $C5 --per_device_train_batch_size 2 --output_dir "$tmp/ddp5" \
  >/dev/null 2>&1
# the same bits: weights (cmp) and every metric but the throughput
same_bits() {
  cmp -s "$1/model.safetensors" "$2/model.safetensors" && python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 5, (len(a), len(b))
for x, y in zip(a, b):
    x.pop("tokens_per_second"), y.pop("tokens_per_second")
    assert x == y, (x, y)
PY
}
# "started incomplete" of the FSDP overlap line
overlap() { grep -o "FSDP overlap: [0-9]* collectives left in flight across a layer's compute, [0-9]* of them" "$1" \
  | grep -o '[0-9]*' | tr '\n' ' '; }
prefetch_pair() {  # name np "config" flags...: on and off, same bits; on overlaps, off does not
  local name=$1 np=$2 cfg=$3; shift 3
  timeout -s KILL 120 mpirun $MPI_FLAGS -np $np $BIN sft $cfg "$@" --output_dir "$tmp/$name.on" >/dev/null \
    2>"$tmp/$name.on.log"
  local rc1=$?
  timeout -s KILL 120 mpirun $MPI_FLAGS -np $np $BIN sft $cfg "$@" $OFF --output_dir "$tmp/$name.off" >/dev/null \
    2>"$tmp/$name.off.log"
  local rc2=$? on off bits brc
  on=($(overlap "$tmp/$name.on.log")) off=($(overlap "$tmp/$name.off.log"))
  bits=$(same_bits "$tmp/$name.on" "$tmp/$name.off" 2>&1); brc=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $brc -eq 0 ] && [ ${#on[@]} -eq 2 ] && [ "${on[0]}" -gt 0 ] \
     && [ "${on[1]}" -gt 0 ] && [ "${off[*]:-}" = "0 0" ]; then
    ok "$name (in flight with prefetch: ${on[*]}; without: ${off[*]})"
  else fail "$name" "rc=$rc1/$rc2 same bits: $brc $(tail -1 <<<"$bits"); overlap on: ${on[*]:-none} off: \
${off[*]:-none}; $(tail -2 "$tmp/$name.on.log")"; fi
}
# name reference-run tolerance: prefetch on and off within it of the reference
prefetch_match() {
  local r d drc cur crc all=0 out=""
  for r in on off; do
    d=$($DIFF "$tmp/$2/model.safetensors" "$tmp/$1.$r/model.safetensors" $3 2>&1); drc=$?
    cur=$(same_curves "$tmp/$2/metrics.jsonl" "$tmp/$1.$r/metrics.jsonl" 2>&1); crc=$?
    [ $drc -eq 0 ] && [ $crc -eq 0 ] || all=1
    out="$out $r: $d $(tail -1 <<<"$cur");"
  done
  if [ $all -eq 0 ]; then ok "${1}_match_$2 ($out)"; else fail "${1}_match_$2" "$out"; fi
}
prefetch_pair fsdp2_prefetch 2 "$C" --per_device_train_batch_size 2 --fsdp_size 2
prefetch_match fsdp2_prefetch one $TOL
prefetch_pair fsdp2_prefetch_5_layers 2 "$C5" --per_device_train_batch_size 2 --fsdp_size 2
prefetch_match fsdp2_prefetch_5_layers ddp5 $TOL
prefetch_pair tp2_fsdp2_prefetch_5_layers 4 "$C5" --per_device_train_batch_size 2 --tp_size 2 --fsdp_size 2
expect_rc fsdp_backward_prefetch_unknown 2 "--fsdp_backward_prefetch backward_post: expected backward_pre or no_prefetch" \
  $BIN sft $C --per_device_train_batch_size 4 --fsdp_backward_prefetch backward_post --output_dir "$tmp/bad"

# resume at the same mesh: interrupted after checkpoint 4 and resumed = uninterrupted, bit for bit
R="--model $M --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 10 --save_steps 4 --logging_steps 1 \
   --threads 1 --fsdp_size 2 --per_device_train_batch_size 2"
$MPI $BIN sft $R --output_dir "$tmp/full" >/dev/null 2>&1
$MPI $BIN sft $R --output_dir "$tmp/part" --stop_after_steps 6 >/dev/null 2>&1
out=$($MPI $BIN sft $R --output_dir "$tmp/part" --resume_from_checkpoint latest 2>&1 >/dev/null)
if grep -q "checkpoint-4 at step 4" <<<"$out" && cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors" \
   && cmp -s "$tmp/full/checkpoint-8/optimizer.safetensors" "$tmp/part/checkpoint-8/optimizer.safetensors"; then
  ok resume_fsdp2_bit_identical
else fail resume_fsdp2_bit_identical "$(tail -3 <<<"$out")"; fi
# the FSDP checkpoint is the plain layout with complete moments: one process (ZeRO-0, 1 x 4 rows)
# resumes it and ends where the FSDP run ended
out=$($BIN sft ${R/--fsdp_size 2 --per_device_train_batch_size 2/--per_device_train_batch_size 4} --output_dir "$tmp/re" \
  --resume_from_checkpoint "$tmp/full/checkpoint-4" 2>&1 >/dev/null)
d=$($DIFF "$tmp/full/model.safetensors" "$tmp/re/model.safetensors" 1e-4 2>&1)
if [ $? -eq 0 ] && grep -q "re-sharded over 1" <<<"$out"; then ok "fsdp_checkpoint_resumes_on_one_process ($d)"
else fail fsdp_checkpoint_resumes_on_one_process "$d; $(tail -2 <<<"$out")"; fi

# DPO and GRPO on FSDP=2: 2 ranks x B pairs / completions = 1 process x 2B (GRPO: the same rollouts,
# generated through the per-layer gathers)
DP="--model $M --dataset tests/data/dpo/pairs.jsonl --threads 1 --max_steps 2 --logging_steps 1 --save_strategy no \
    --learning_rate 1e-3"
$BIN dpo $DP --per_device_train_batch_size 4 --output_dir "$tmp/dpo1" >/dev/null 2>&1
out=$($MPI $BIN dpo $DP --per_device_train_batch_size 2 --fsdp_size 2 --output_dir "$tmp/dpo2" 2>&1 >/dev/null); rc=$?
d=$($DIFF "$tmp/dpo1/model.safetensors" "$tmp/dpo2/model.safetensors" $TOL 2>&1); drc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ]; then
  ok "dpo_fsdp2_matches_one_rank ($d)"
else fail dpo_fsdp2_matches_one_rank "rc=$rc $d; $(tail -2 <<<"$out")"; fi
$BIN init --model_config $M/config.json --output_dir "$tmp/gm" --tokenizer tests/data/sft/tok 2>/dev/null
for i in 0 1 2 3 4 5 6 7; do echo "{\"prompt\": \"Q$i: what is $i + 1?\", \"answer\": $((i + 1))}"; done >"$tmp/p.jsonl"
RL="--model $tmp/gm --dataset $tmp/p.jsonl --max_completion_length 6 --num_generations 4 --gradient_accumulation_steps 2
    --max_steps 1 --logging_steps 1 --threads 1 --pad_to_multiple_of 16 --save_strategy no --learning_rate 1e-3
    --log_completions --reward length:4 --reward regex:[0-9]"
$BIN grpo $RL --per_device_train_batch_size 8 --output_dir "$tmp/grpo1" >/dev/null 2>&1
out=$($MPI $BIN grpo $RL --per_device_train_batch_size 4 --fsdp_size 2 --output_dir "$tmp/grpo2" 2>&1 >/dev/null); rc=$?
d=$($DIFF "$tmp/grpo1/model.safetensors" "$tmp/grpo2/model.safetensors" $TOL 2>&1); drc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ -s "$tmp/grpo1/completions.jsonl" ] \
   && cmp -s "$tmp/grpo1/completions.jsonl" "$tmp/grpo2/completions.jsonl"; then ok "grpo_fsdp2_same_rollouts ($d)"
else fail grpo_fsdp2_same_rollouts "rc=$rc $d; $(tail -2 <<<"$out")"; fi

# tensor-parallel divisibility: 4 heads over --tp_size 3 is a usage error on every rank
out=$(timeout -s KILL 60 mpirun $MPI_FLAGS -np 3 $BIN sft $C --per_device_train_batch_size 2 --tp_size 3 \
  --output_dir "$tmp/bad" 2>&1 >/dev/null); rc=$?
if [ $rc -eq 2 ] && grep -q -- "--tp_size 3: num_attention_heads 4 of $M is not divisible by it" <<<"$out"; then
  ok mesh_tp_heads_not_divisible
else fail mesh_tp_heads_not_divisible "rc=$rc $(grep 'still sft' <<<"$out" | head -2)"; fi

# rank 1 stopped (SIGSTOP) in a ZeRO-3 run (prefetch on, the default: collectives in flight):
# rank 0 fails in a per-layer collective within --ddp_timeout 2 s; the harness kill at 10x that
# is a failure (a hang)
timeout -s KILL 20 mpirun $MPI_FLAGS -np 2 $BIN sft --model $M --dataset $IDS --pad_to_multiple_of 16 --threads 1 \
  --per_device_train_batch_size 2 --max_steps 1000000 --logging_steps 1 --save_strategy no --ddp_timeout 2 \
  --fsdp_size 2 --output_dir "$tmp/stall" >/dev/null 2>"$tmp/stall.log" &
job=$!
r1=""
for i in $(seq 300); do
  if [ -z "$r1" ]; then
    for p in $(pgrep -P "$(pgrep -P $job -x mpirun || echo $job)" 2>/dev/null); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && r1=$p
    done
  fi
  [ -n "$r1" ] && [ -f "$tmp/stall/metrics.jsonl" ] && [ "$(wc -l <"$tmp/stall/metrics.jsonl")" -ge 3 ] && break
  sleep 0.05
done
[ -n "$r1" ] && kill -STOP "$r1"
wait $job; rc=$?
[ -n "$r1" ] && kill -KILL "$r1" 2>/dev/null
if [ -z "$r1" ]; then fail fsdp_stopped_rank_times_out "rank 1 not found: $(tail -3 "$tmp/stall.log")"
elif [ $rc -eq 137 ]; then fail fsdp_stopped_rank_times_out "hang: killed by the harness after 20 s"
elif [ $rc -ne 0 ] && grep -q "rank 0: .* did not complete within --ddp_timeout 2 s" "$tmp/stall.log"; then
  ok "fsdp_stopped_rank_times_out (rc=$rc)"
else fail fsdp_stopped_rank_times_out "rc=$rc: $(grep -v '^\[rank 0\] step' "$tmp/stall.log" | tail -4)"; fi
