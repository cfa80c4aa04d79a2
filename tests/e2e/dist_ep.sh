#!/usr/bin/env bash
# dist_ep.sh: `mpirun -np 2 still sft --ep_size 2` (expert parallel, docs/distributed.md): each rank
# holds half the experts of every sparse layer and its own batches, routed slots go to their
# expert's rank and back. The run ends with the weights of one rank training on both ranks' rows
# as two accumulated micro-batches (the load-balancing loss is one per micro-batch, as
# transformers computes it per forward call, so a single batch of 4 rows is another loss), and of
# plain data parallelism on 2 ranks, with the same per-step loss and grad_norm, for
# Mixtral, Qwen3-MoE (whose layer 1 is dense) and gpt_oss (one tensor per projection of all experts,
# with biases), with and without gradient checkpointing; the
# saved model holds every expert under its global name; checkpoints resume bit for bit (and
# without expert parallelism); 4 ranks as 2 expert-parallel groups x 2 replicas; refusals by name.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_ep "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
DIFF="$BUILD/tests/tools/st_diff --norm"
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
IDS=tests/data/sft/ids.jsonl
TOL=1e-6  # equivalent batchings differ by fp32 rounding (observed up to 5e-8 norm-wise per tensor)
# --adam_epsilon 1e-4: AdamW's update m / (sqrt(v) + eps) is ill-conditioned where a gradient element
# is near 0 (with 1e-8, one element of a rarely routed qwen3_moe expert moved by a tenth of its
# update between two sgemm kernels); with 1e-4 it stays a smooth function of the gradient there

same_curves() { curves_agree "$1" "$2" loss grad_norm num_tokens; }  # per-step loss and grad_norm of two metrics.jsonl files agree to a relative 1e-5

for m in mixtral qwen3_moe gpt_oss; do
  # gpt_oss 3 steps: its step-1 gradients under the other grouping of the expert GEMMs differ from
  # one rank's by fp32 rounding (up to 3e-6 per tensor, the router bias's sum of cancelling terms;
  # mixtral 1e-6), which by step 4 has moved its gradient norm by 1.2e-5
  n=4; [ $m = gpt_oss ] && n=3
  C="--model tests/data/models/$m --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps $n \
     --logging_steps 1 --threads 1 --max_grad_norm 1.0 --adam_epsilon 1e-4 --save_strategy no"
  $BIN sft $C --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --output_dir "$tmp/one_$m" >/dev/null \
    2>"$tmp/err" \
    || fail "one_rank_$m" "$(tail -3 "$tmp/err")"
  half="4 of the 8"
  [ $m = gpt_oss ] && half="3 of the 6"  # its experts in one tensor per projection, split by expert blocks
  for ck in true false; do
    out=$($MPI $BIN sft $C --per_device_train_batch_size 2 --ep_size 2 --gradient_checkpointing $ck \
          --output_dir "$tmp/ep_${m}_$ck" 2>&1 >/dev/null); rc=$?
    d=$($DIFF "$tmp/one_$m/model.safetensors" "$tmp/ep_${m}_$ck/model.safetensors" $TOL 2>&1); drc=$?
    cur=$(same_curves "$tmp/one_$m/metrics.jsonl" "$tmp/ep_${m}_$ck/metrics.jsonl" 2>&1); crc=$?
    if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ] && grep -q "each holds $half experts" <<<"$out"; then
      ok "ep2_matches_one_rank_${m}_ckpt_$ck ($d)"
    else fail "ep2_matches_one_rank_${m}_ckpt_$ck" "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(tail -3 <<<"$out")"; fi
  done
done
# expert parallelism with data-parallel replicas: 4 ranks = 2 groups of --ep_size 2 (the experts'
# gradients all-reduced over the 2 replicas of their shard, the rest over all 4) equal one rank
# running the same 4 micro-batches as gradient accumulation; the model written by world rank 0
MPI4="timeout -s KILL 180 mpirun $MPI_FLAGS -np 4"
for m in mixtral qwen3_moe gpt_oss; do
  C="--model tests/data/models/$m --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 3 \
     --logging_steps 1 --threads 1 --max_grad_norm 1.0 --adam_epsilon 1e-4 --save_strategy no"
  $BIN sft $C --per_device_train_batch_size 2 --gradient_accumulation_steps 4 --output_dir "$tmp/one4_$m" >/dev/null \
    2>"$tmp/err" || fail "one_rank_ga4_$m" "$(tail -3 "$tmp/err")"
  out=$($MPI4 $BIN sft $C --per_device_train_batch_size 2 --ep_size 2 --output_dir "$tmp/ep2x2_$m" 2>&1 >/dev/null); rc=$?
  d=$($DIFF "$tmp/one4_$m/model.safetensors" "$tmp/ep2x2_$m/model.safetensors" $TOL 2>&1); drc=$?
  cur=$(same_curves "$tmp/one4_$m/metrics.jsonl" "$tmp/ep2x2_$m/metrics.jsonl" 2>&1); crc=$?
  if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ] && grep -q "x 2 data-parallel replicas" <<<"$out"; then
    ok "ep2x2_matches_one_rank_$m ($d)"
  else fail "ep2x2_matches_one_rank_$m" "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(tail -3 <<<"$out")"; fi
done

# and plain data parallelism on the same 2 ranks
C="--model tests/data/models/mixtral --dataset $IDS --pad_to_multiple_of 16 --learning_rate 1e-3 --max_steps 4 \
   --logging_steps 1 --threads 1 --max_grad_norm 1.0 --adam_epsilon 1e-4 --save_strategy no --per_device_train_batch_size 2"
$MPI $BIN sft $C --output_dir "$tmp/dp" >/dev/null 2>&1
d=$($DIFF "$tmp/dp/model.safetensors" "$tmp/ep_mixtral_true/model.safetensors" $TOL 2>&1)
check "ep2_matches_data_parallel ($d)" $? "$d"

# checkpoints during training hold every expert and their moments (gathered); an interrupted run
# resumed from one (each rank reading it and keeping its experts) ends bit for bit as the whole run
R="${C/--save_strategy no/} --max_steps 6 --save_steps 2 --ep_size 2"
$MPI $BIN sft $R --output_dir "$tmp/full" >/dev/null 2>&1
$MPI $BIN sft $R --output_dir "$tmp/part" --stop_after_steps 3 >/dev/null 2>&1
out=$($MPI $BIN sft $R --output_dir "$tmp/part" --resume_from_checkpoint latest 2>&1 >/dev/null)
if grep -q "checkpoint-2 at step 2" <<<"$out" && cmp -s "$tmp/full/model.safetensors" "$tmp/part/model.safetensors" \
   && cmp -s "$tmp/full/checkpoint-6/optimizer.safetensors" "$tmp/part/checkpoint-6/optimizer.safetensors"; then
  ok ep_resume_bit_identical
else fail ep_resume_bit_identical "$(tail -3 <<<"$out")"; fi
# a checkpoint of the 2-rank run is the plain layout: data parallelism resumes from it too
out=$($MPI $BIN sft ${R/--ep_size 2/} --output_dir "$tmp/dp2" --resume_from_checkpoint "$tmp/full/checkpoint-4" 2>&1 >/dev/null)
d=$($DIFF "$tmp/full/model.safetensors" "$tmp/dp2/model.safetensors" $TOL 2>&1)
check "ep_checkpoint_resumes_without_ep ($d)" $? "$d; $(tail -2 <<<"$out")"

# with replicas too: 4 ranks (2 x 2) checkpoint and resume bit for bit
R4="${R/--max_steps 6/--max_steps 4}"
$MPI4 $BIN sft $R4 --output_dir "$tmp/full4" >/dev/null 2>&1
$MPI4 $BIN sft $R4 --output_dir "$tmp/part4" --stop_after_steps 3 >/dev/null 2>&1
out=$($MPI4 $BIN sft $R4 --output_dir "$tmp/part4" --resume_from_checkpoint latest 2>&1 >/dev/null)
if grep -q "checkpoint-2 at step 2" <<<"$out" && cmp -s "$tmp/full4/model.safetensors" "$tmp/part4/model.safetensors" \
   && cmp -s "$tmp/full4/checkpoint-4/optimizer.safetensors" "$tmp/part4/checkpoint-4/optimizer.safetensors"; then
  ok ep2x2_resume_bit_identical
else fail ep2x2_resume_bit_identical "$(tail -3 <<<"$out")"; fi

# gpt_oss: its expert tensors (and biases) sliced by expert blocks on resume, gathered on save
G="${R/mixtral/gpt_oss}"
$MPI $BIN sft $G --output_dir "$tmp/gfull" >/dev/null 2>&1
$MPI $BIN sft $G --output_dir "$tmp/gpart" --stop_after_steps 3 >/dev/null 2>&1
out=$($MPI $BIN sft $G --output_dir "$tmp/gpart" --resume_from_checkpoint latest 2>&1 >/dev/null)
if grep -q "checkpoint-2 at step 2" <<<"$out" && cmp -s "$tmp/gfull/model.safetensors" "$tmp/gpart/model.safetensors" \
   && cmp -s "$tmp/gfull/checkpoint-6/optimizer.safetensors" "$tmp/gpart/checkpoint-6/optimizer.safetensors"; then
  ok ep_gpt_oss_resume_bit_identical
else fail ep_gpt_oss_resume_bit_identical "$(tail -3 <<<"$out")"; fi

# rows of 4 and 40 tokens, one per rank and unpadded: a rank would receive more routed slots than
# its own batch's shape has room for, so every rank runs at the global micro-batch's shape; the
# eval set's 3 rows leave rank 1 no row in its second batch, whose forward it runs all the same
python3 -c "
import random
r = random.Random(5)
for i in range(8): print('{\"input_ids\": %s}' % [r.randrange(3, 380) for _ in range(4 if i % 2 == 0 else 40)])
" >"$tmp/uneven.jsonl"
head -3 "$tmp/uneven.jsonl" >"$tmp/uneven_eval.jsonl"
U="--model tests/data/models/qwen3_moe --dataset $tmp/uneven.jsonl --pad_to_multiple_of 1 --learning_rate 1e-3 \
   --max_steps 3 --logging_steps 1 --threads 1 --max_grad_norm 1.0 --adam_epsilon 1e-4 --save_strategy no \
   --shuffle false --eval_dataset $tmp/uneven_eval.jsonl --per_device_eval_batch_size 1 --eval_strategy steps --eval_steps 3"
$BIN sft $U --per_device_train_batch_size 1 --gradient_accumulation_steps 2 --output_dir "$tmp/u1" >/dev/null 2>"$tmp/err" \
  || fail one_rank_uneven "$(tail -3 "$tmp/err")"
out=$($MPI $BIN sft $U --per_device_train_batch_size 1 --ep_size 2 --output_dir "$tmp/u2" 2>&1 >/dev/null); rc=$?
d=$($DIFF "$tmp/u1/model.safetensors" "$tmp/u2/model.safetensors" $TOL 2>&1); drc=$?
ev=$(python3 - "$tmp/u1/metrics.jsonl" "$tmp/u2/metrics.jsonl" <<'PY' 2>&1
import json, sys
e = [[json.loads(l)["eval_loss"] for l in open(f) if "eval_loss" in l] for f in sys.argv[1:]]
assert len(e[0]) == len(e[1]) == 1 and abs(e[0][0] - e[1][0]) <= 1e-5 * abs(e[0][0]), e
PY
); erc=$?
if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $erc -eq 0 ]; then ok "ep2_uneven_rows_and_eval_match_one_rank ($d)"
else fail ep2_uneven_rows_and_eval_match_one_rank "rc=$rc diff: $d; eval: $ev; $(tail -3 <<<"$out")"; fi

# refusals
expect_err ep_needs_its_ranks "expert parallelism runs on a multiple of that many ranks" $BIN sft $C --ep_size 2 \
  --output_dir "$tmp/r1"
out=$($MPI $BIN sft ${C/mixtral/qwen3_moe} --ep_size 2 --moe_capacity_factor 1 --output_dir "$tmp/r3" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "routes capacity-free" <<<"$out"; check ep_capacity_refused $? "rc=$rc $(tail -2 <<<"$out")"
out=$($MPI $BIN sft ${C/mixtral/qwen3_tied} --ep_size 2 --output_dir "$tmp/r4" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "has no experts to split" <<<"$out"; check ep_dense_refused $? "rc=$rc $(tail -2 <<<"$out")"
