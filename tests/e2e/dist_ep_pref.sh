#!/usr/bin/env bash
# dist_ep_pref.sh: `mpirun -np 2 still dpo|kto --ep_size 2` (expert parallel, docs/distributed.md):
# the policy's experts split over the 2 ranks as in still sft, the frozen reference whole on every
# rank. The ranks' rows differ in length, so every micro-batch runs at its global batch's shape. DPO ends with one process's weights at the same
# global batch (4 pairs per step) for Mixtral, Qwen3-MoE and gpt_oss, also with the reference's
# log-probs precomputed and with --ref_model; KTO's apo_zero_unpaired loss (each row's loss its
# own) ends as one process's, its kto loss (a KL estimate per global batch, which one process at
# another batch size pairs differently) as plain data parallelism on the same 2 ranks.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_ep_pref "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
DIFF="$BUILD/tests/tools/st_diff --norm"
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
TOL=1e-5  # equivalent batchings differ by fp32 rounding (observed up to 5e-8 norm-wise per tensor)
# --adam_epsilon 1e-4: as dist_ep.sh (AdamW's update is ill-conditioned where a gradient element is near 0)
COMMON="--pad_to_multiple_of 8 --learning_rate 1e-3 --max_steps 4 --logging_steps 1 --threads 1 --max_grad_norm 1.0 \
  --adam_epsilon 1e-4 --save_strategy no --dataloader_drop_last true"

same_curves() { curves_agree "$1" "$2" loss grad_norm num_tokens; }  # per-step loss and grad_norm of two metrics.jsonl files agree to a relative 1e-5

# name, reference output dir, command... : the run ends with the reference's weights and curves
ep_run() {
  local name=$1 ref=$2; shift 2
  local out rc d drc cur crc
  out=$($MPI "$@" --output_dir "$tmp/$name" 2>&1 >/dev/null); rc=$?
  d=$($DIFF "$ref/model.safetensors" "$tmp/$name/model.safetensors" $TOL 2>&1); drc=$?
  cur=$(same_curves "$ref/metrics.jsonl" "$tmp/$name/metrics.jsonl" 2>&1); crc=$?
  if [ $rc -eq 0 ] && [ $drc -eq 0 ] && [ $crc -eq 0 ] && grep -q "expert parallel over 2 ranks" <<<"$out"; then
    ok "$name ($d)"
  else fail "$name" "rc=$rc diff: $d; curves: $(tail -1 <<<"$cur"); $(tail -3 <<<"$out")"; fi
}

for m in mixtral qwen3_moe gpt_oss; do
  C="--model tests/data/models/$m --dataset tests/data/dpo/pairs.jsonl $COMMON"
  $BIN dpo $C --per_device_train_batch_size 4 --output_dir "$tmp/dpo_one_$m" >/dev/null 2>"$tmp/err" \
    || fail "dpo_one_rank_$m" "$(tail -3 "$tmp/err")"
  ep_run "dpo_ep2_matches_one_rank_$m" "$tmp/dpo_one_$m" $BIN dpo $C --per_device_train_batch_size 2 --ep_size 2
done
C="--model tests/data/models/qwen3_moe --dataset tests/data/dpo/pairs.jsonl $COMMON"
$BIN dpo $C --per_device_train_batch_size 4 --precompute_ref_log_probs true --output_dir "$tmp/dpo_pre" >/dev/null \
  2>"$tmp/err" || fail dpo_one_rank_precompute "$(tail -3 "$tmp/err")"
ep_run dpo_ep2_precompute_ref_matches_one_rank "$tmp/dpo_pre" $BIN dpo $C --per_device_train_batch_size 2 --ep_size 2 \
  --precompute_ref_log_probs true
# another model as the reference (qwen3_moe_step2: 6 experts, every other layer sparse): loaded whole
R="--ref_model tests/data/models/qwen3_moe_step2"
$BIN dpo $C $R --per_device_train_batch_size 4 --output_dir "$tmp/dpo_ref" >/dev/null 2>"$tmp/err" \
  || fail dpo_one_rank_ref_model "$(tail -3 "$tmp/err")"
ep_run dpo_ep2_ref_model_matches_one_rank "$tmp/dpo_ref" $BIN dpo $C $R --per_device_train_batch_size 2 --ep_size 2

K="--model tests/data/models/mixtral --dataset tests/data/kto/rows.jsonl $COMMON"
$BIN kto $K --loss_type apo_zero_unpaired --per_device_train_batch_size 4 --output_dir "$tmp/kto_one" >/dev/null \
  2>"$tmp/err" || fail kto_one_rank "$(tail -3 "$tmp/err")"
ep_run kto_apo_ep2_matches_one_rank "$tmp/kto_one" $BIN kto $K --loss_type apo_zero_unpaired \
  --per_device_train_batch_size 2 --ep_size 2
# one row per rank, unpadded: a rank's row can be 4x the other's, more routed slots than its own
# batch's shape has room for unless both run at the global batch's shape
U="${K/mixtral/qwen3_moe} --loss_type apo_zero_unpaired"
U="${U/--pad_to_multiple_of 8/--pad_to_multiple_of 1}"
$BIN kto $U --per_device_train_batch_size 2 --output_dir "$tmp/kto_one_u" >/dev/null 2>"$tmp/err" \
  || fail kto_one_rank_uneven "$(tail -3 "$tmp/err")"
ep_run kto_apo_ep2_uneven_rows_matches_one_rank "$tmp/kto_one_u" $BIN kto $U --per_device_train_batch_size 1 --ep_size 2
K="${K/mixtral/qwen3_moe}"
$MPI $BIN kto $K --per_device_train_batch_size 2 --output_dir "$tmp/kto_dp" >/dev/null 2>"$tmp/err" \
  || fail kto_data_parallel "$(tail -3 "$tmp/err")"
ep_run kto_ep2_matches_data_parallel "$tmp/kto_dp" $BIN kto $K --per_device_train_batch_size 2 --ep_size 2

# refusals by name
expect_err ep_dpo_needs_its_ranks "expert parallelism runs on a multiple of that many ranks" $BIN dpo $C --ep_size 2 \
  --output_dir "$tmp/r1"
out=$($MPI $BIN dpo $C --ep_size 2 --zero_stage 1 --output_dir "$tmp/r2" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "without --tp_size, --fsdp_size or --zero_stage" <<<"$out"
check ep_dpo_zero_refused $? "rc=$rc $(tail -2 <<<"$out")"
expect_rc ep_reward_refused 2 "no family with experts (qwen3_moe, mixtral, gpt_oss) has one" $BIN reward --ep_size 2 \
  --model tests/data/reward/rm --dataset tests/data/reward/pairs.jsonl --output_dir "$tmp/r3"
