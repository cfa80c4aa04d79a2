#!/usr/bin/env bash
# dist_ep_rl.sh: the generating trainers under expert parallelism (`mpirun -np 2 still grpo|rloo|
# distill --ep_size 2`, docs/distributed.md): the policy's (student's) experts split over the 2
# ranks, whose generation runs in lockstep: every batch prefilled as the group's longest prompt,
# and a rank whose rows are all done keeps stepping (no tokens recorded) until no rank has a live
# row. The prompts differ in length and 15 EOS ids end rows at different steps on the two ranks
# (a rank alone would stop decoding first and leave the other in the exchange: the job fails).
# Each run gives one process's rollouts (the same tokens: draws are keyed by a row's place in the
# global round) and its weights at the same global batch: GRPO (with and without a reference),
# RLOO, distillation from a separate MoE teacher, GKD with teacher rollouts, self-distillation
# with a live teacher (the student itself, so its forward passes run in lockstep too) and with a
# fixed copy; 4 ranks as 2 expert-parallel groups x 2 replicas; the EMA teacher refused by name.
set -u
source tests/e2e/lib.sh
source tests/mpi_env.sh
if ! mpi_available "$BIN"; then skip dist_ep_rl "this build has no MPI (install libopenmpi-dev openmpi-bin)"; exit 0; fi
MPI="timeout -s KILL 120 mpirun $MPI_FLAGS -np 2"
DIFF="$BUILD/tests/tools/st_diff --norm"
# weights of equal rollouts differ by fp32 rounding: the expert GEMMs group other rows, and every
# rank's scoring batch is padded to the longest prompt (observed up to 1.2e-7 norm-wise per tensor;
# --adam_epsilon 1e-4 as dist_ep.sh: with 1e-8 AdamW turns that rounding into 7e-6 near zero gradients)
TOL=1e-5
M=tests/data/models
$BIN init --model_config $M/qwen3_moe/config.json --output_dir "$tmp/m" --tokenizer tests/data/sft/tok 2>/dev/null
$BIN init --model_config $M/mixtral/config.json --output_dir "$tmp/tea" --tokenizer tests/data/sft/tok --seed 7 2>/dev/null
python3 - "$tmp/m" <<'PY'
import json, os, shutil, sys
m = sys.argv[1]
p = os.path.join(m, "generation_config.json")
g = json.load(open(p))
g["eos_token_id"] = [2] + list(range(300, 314))  # rows end at different steps
json.dump(g, open(p, "w"))
# the same model without the load-balancing loss: one batch of 2B rows is then two of B
shutil.copytree(m, m + "_noaux")
p = os.path.join(m + "_noaux", "config.json")
c = json.load(open(p))
c["output_router_logits"] = False
json.dump(c, open(p, "w"))
PY
for i in 0 1 2 3 4 5 6 7; do
  long=""; [ $((i % 2)) = 1 ] && long=" and then a much longer question"
  echo "{\"prompt\": \"Q$i: what is $i + 1?$long\", \"problem\": \"$i + 1\", \"solution\": \"$((i + 1))\", \"answer\": $((i + 1))}"
done >"$tmp/p.jsonl"
for i in 0 1 2 3 4 5 6 7; do
  long=""; [ $((i % 2)) = 1 ] && long=" and then a much longer question"
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Q$i: $i + 1?$long\"}, {\"role\": \"assistant\", \"content\": \"$((i + 1))\"}]}"
done >"$tmp/kd.jsonl"

# The rollout files (FILE, and distill's FILE.rank1) hold the same rows: every token exactly, the
# numbers to 1e-6 (RLOO's rewards hold a KL term, from the whole reference's log-probs and the
# split policy's, which differ by fp32 rounding).
same_rows() {  # FILES1 -- FILES2: the same rows, tokens and text exactly, numbers to 1e-6
  python3 - "$@" <<'PY'
import json, sys
a = sys.argv[1:sys.argv.index("--")]; b = sys.argv[sys.argv.index("--") + 1:]
def load(fs):
    rows = [json.loads(l) for f in fs for l in open(f)]
    for r in rows: r.pop("kl_student_teacher", None)  # scored in other batch shapes
    return sorted(rows, key=lambda r: json.dumps({k: v for k, v in r.items() if not isinstance(v, float)}, sort_keys=True))
x, y = load(a), load(b)
assert len(x) == len(y) > 0, (len(x), len(y))
for p, q in zip(x, y):
    assert p.keys() == q.keys(), (p, q)
    for k in p:
        if isinstance(p[k], float) or isinstance(q[k], float): assert abs(p[k] - q[k]) <= 1e-6, (k, p, q)
        else: assert p[k] == q[k], (k, p, q)
print(len(x))
PY
}
# name, one-process flags, expert-parallel flags, np (2 or 4), command + common flags: the same
# rollouts and the weights within TOL
same() {
  local name=$1 one=$2 ep=$3 np=$4; shift 4
  local mpi="timeout -s KILL 180 mpirun $MPI_FLAGS -np $np" r rrc rc1 rc2 d drc out
  if [ "$1" = distill ]; then
    "$BIN" "$@" $one --output_dir "$tmp/$name.1" --log_rollouts "$tmp/$name.1.jsonl" >/dev/null 2>"$tmp/err1"; rc1=$?
    out=$($mpi "$BIN" "$@" $ep --output_dir "$tmp/$name.2" --log_rollouts "$tmp/$name.2.jsonl" 2>&1 >/dev/null); rc2=$?
    r=$(same_rows "$tmp/$name.1.jsonl" -- "$tmp/$name.2.jsonl"* 2>&1); rrc=$?
  else
    "$BIN" "$@" $one --output_dir "$tmp/$name.1" >/dev/null 2>"$tmp/err1"; rc1=$?
    out=$($mpi "$BIN" "$@" $ep --output_dir "$tmp/$name.2" 2>&1 >/dev/null); rc2=$?
    r=$(same_rows "$tmp/$name.1/completions.jsonl" -- "$tmp/$name.2/completions.jsonl" 2>&1); rrc=$?
  fi
  d=$($DIFF "$tmp/$name.1/model.safetensors" "$tmp/$name.2/model.safetensors" $TOL 2>&1); drc=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rrc -eq 0 ] && [ $drc -eq 0 ] && grep -q "expert parallel over 2 ranks" <<<"$out"
  then
    ok "$name ($r rollouts; $d)"
  else
    fail "$name" "rc $rc1/$rc2, rollouts: $(tail -1 <<<"$r"), $d; $(tail -2 <<<"$out")"
  fi
}

# GRPO: 2 prompts x 2 generations a round; one process takes the round as 2 micro-batches of 2
# (the load-balancing loss is one per micro-batch), each rank one of them
RL="grpo --model $tmp/m --dataset $tmp/p.jsonl --max_completion_length 32 --num_generations 2 --max_steps 4
    --logging_steps 1 --threads 1 --pad_to_multiple_of 16 --save_strategy no --learning_rate 1e-3 --log_completions
    --reward length:4 --reward regex:[0-9] --per_device_train_batch_size 2 --adam_epsilon 1e-4"
same grpo_ep2_same_rollouts "--gradient_accumulation_steps 2" "--ep_size 2" 2 $RL
same grpo_beta_ep2_same_rollouts "--gradient_accumulation_steps 2" "--ep_size 2" 2 $RL --beta 0.1 --loss_type grpo
same rloo_ep2_same_rollouts "--gradient_accumulation_steps 2" "--ep_size 2" 2 ${RL/grpo/rloo} --beta 0.05
same grpo_ep2x2_same_rollouts "--gradient_accumulation_steps 4" "--ep_size 2" 4 $RL

# distillation: 4 rows a step; one process as 2 micro-batches of 2 with the load-balancing loss,
# as one batch of 4 without it (GKD's coin is one per micro-batch: the same micro-batches)
KD="distill --teacher $tmp/tea --dataset $tmp/kd.jsonl --threads 1 --pad_to_multiple_of 16 --max_completion_length 24
    --save_strategy no --logging_steps 1 --learning_rate 1e-3 --max_steps 3 --adam_epsilon 1e-4"
same distill_ep2_same_rollouts "--per_device_train_batch_size 2 --gradient_accumulation_steps 2" \
  "--per_device_train_batch_size 2 --ep_size 2" 2 $KD --model "$tmp/m"
same gkd_seq_kd_ep2_same_rollouts "--per_device_train_batch_size 4" "--per_device_train_batch_size 2 --ep_size 2" 2 \
  $KD --model "$tmp/m_noaux" --gkd --lmbda 0.5 --seq_kd --gradient_accumulation_steps 2
SD="${KD/--teacher $tmp\/tea --dataset $tmp\/kd.jsonl/--teacher self --dataset $tmp/p.jsonl} --model $tmp/m_noaux"
same self_distill_live_ep2_same_rollouts "--per_device_train_batch_size 4" "--per_device_train_batch_size 2 --ep_size 2" 2 \
  $SD --teacher_mode live
same self_distill_fixed_ep2_same_rollouts "--per_device_train_batch_size 4" "--per_device_train_batch_size 2 --ep_size 2" 2 \
  $SD --teacher_mode fixed

out=$($MPI $BIN $SD --teacher_mode ema --per_device_train_batch_size 2 --ep_size 2 --output_dir "$tmp/r1" 2>&1); rc=$?
[ $rc -eq 3 ] && grep -q -- "--ep_size 2 with --teacher_mode ema" <<<"$out"
check ep_ema_teacher_refused $? "rc=$rc $(tail -2 <<<"$out")"
