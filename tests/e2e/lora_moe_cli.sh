#!/usr/bin/env bash
# lora_moe_cli.sh: LoRA on mixture-of-experts models from the command line (docs/lora.md): `still
# sft --use_peft` on Mixtral's experts (w1 w2 w3) and router (gate) with dropout writes PEFT's
# files, a pair per expert; the trained adapter loads as PEFT would load it (scripts/ref_lora_moe.py
# check: the logits of the PyTorch port); gradient checkpointing gives the same adapter bit for bit;
# all-linear on qwen3_moe adapts the dense layer, every expert and the router; on gpt_oss (experts
# as one tensor per projection) attention only, as PEFT does.
# asan: yes
set -u
source tests/e2e/lib.sh
IDS=tests/data/sft/ids.jsonl
X=tests/data/models/mixtral
L="--use_peft --lora_r 2 --lora_alpha 4 --threads 2 --pad_to_multiple_of 16 --learning_rate 1e-2 \
   --per_device_train_batch_size 2 --logging_steps 1 --save_strategy no --max_steps 3"
header() { python3 -c 'import json,struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; print(json.dumps(json.loads(f.read(n))))' "$1"; }

# 1. experts and router of Mixtral, dropout on: PEFT's names, one pair per expert
$BIN sft --model $X --dataset $IDS --output_dir "$tmp/a" $L --lora_target_modules "w1,w2,w3,gate" \
  --lora_dropout 0.1 >/dev/null 2>"$tmp/err"
if [ -f "$tmp/a/adapter_model.safetensors" ]; then
  chk=$(python3 - "$tmp/a/adapter_config.json" "$(header "$tmp/a/adapter_model.safetensors")" <<'PY'
import json, sys
c, h = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
assert sorted(c["target_modules"]) == ["gate", "w1", "w2", "w3"], c["target_modules"]
names = [k for k in h if k != "__metadata__"]
p = "base_model.model.model.layers.1.block_sparse_moe."
assert h[p + "experts.7.w1.lora_A.weight"]["shape"] == [2, 48], h[p + "experts.7.w1.lora_A.weight"]
assert h[p + "experts.7.w2.lora_B.weight"]["shape"] == [48, 2]
assert h[p + "gate.lora_B.weight"]["shape"] == [8, 2]
assert len(names) == 2 * 2 * (3 * 8 + 1), len(names)
print("ok")
PY
)
  [ "$chk" = ok ]; check mixtral_experts_peft_files $? "$chk"
else fail mixtral_experts_peft_files "$(tail -3 "$tmp/err")"; fi

# 2. the trained adapter moves the logits, and PyTorch applying it as PEFT does agrees
Q="5 17 300 42 7 250"
$BIN logits --model $X --ids "$Q" --all --pad_to_multiple_of 1 2>/dev/null >"$tmp/base.txt"
$BIN logits --model $X --adapter "$tmp/a" --ids "$Q" --all --pad_to_multiple_of 1 2>"$tmp/err" >"$tmp/a.txt"
if [ -s "$tmp/a.txt" ] && ! cmp -s "$tmp/a.txt" "$tmp/base.txt"; then ok adapter_moves_logits
else fail adapter_moves_logits "$(tail -2 "$tmp/err")"; fi
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  out=$(/usr/bin/python3 scripts/ref_lora_moe.py check $X "$tmp/a" "$Q" "$tmp/a.txt" 2>&1)
  check "trained_adapter_loads_as_peft ($(sed 's/.*: //' <<<"$out"))" $? "$(tail -2 <<<"$out")"
else skip trained_adapter_loads_as_peft "Debian's python3-torch is not installed"; fi

# 3. gradient checkpointing recomputes the experts' adapters: the same adapter bit for bit
$BIN sft --model $X --dataset $IDS --output_dir "$tmp/c" $L --lora_target_modules "w1,w2,w3,gate" \
  --lora_dropout 0.1 --gradient_checkpointing true >/dev/null 2>"$tmp/err"
cmp -s "$tmp/a/adapter_model.safetensors" "$tmp/c/adapter_model.safetensors"
check checkpointing_same_adapter $? "$(tail -2 "$tmp/err")"

# 4. all-linear on qwen3_moe: attention, the dense MLP of layer 1, every expert, the router
Q3=tests/data/models/qwen3_moe
$BIN sft --model $Q3 --dataset $IDS --output_dir "$tmp/q" $L --lora_target_modules all-linear >/dev/null 2>"$tmp/err"
if [ -f "$tmp/q/adapter_model.safetensors" ]; then
  chk=$(python3 - "$(header "$tmp/q/adapter_model.safetensors")" <<'PY'
import json, sys
h = json.loads(sys.argv[1])
p = "base_model.model.model.layers."
need = [p + "1.mlp.gate_proj.lora_A.weight", p + "0.mlp.experts.5.down_proj.lora_B.weight", p + "2.mlp.gate.lora_A.weight",
        p + "2.self_attn.o_proj.lora_B.weight"]
missing = [k for k in need if k not in h]
assert not missing and not any(k.startswith(p + "1.mlp.experts") for k in h), missing
print("ok")
PY
)
  [ "$chk" = ok ]; check qwen3_moe_all_linear $? "$chk"
else fail qwen3_moe_all_linear "$(tail -3 "$tmp/err")"; fi

# 5. gpt_oss keeps its experts as parameters of one module and its router is no nn.Linear: as in
# PEFT, all-linear adapts attention only, and an expert tensor's name is no target
G=tests/data/models/gpt_oss
$BIN sft --model $G --dataset $IDS --output_dir "$tmp/g" $L --lora_target_modules all-linear >/dev/null 2>"$tmp/err"
if [ -f "$tmp/g/adapter_model.safetensors" ]; then
  chk=$(python3 - "$tmp/g/adapter_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert sorted(c["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"], c["target_modules"]
print("ok")
PY
)
  [ "$chk" = ok ]; check gpt_oss_all_linear_attention $? "$chk"
else fail gpt_oss_all_linear_attention "$(tail -2 "$tmp/err")"; fi
expect_err gpt_oss_expert_name_refused "'gate_up_proj' is no linear layer" $BIN sft --model $G --dataset $IDS \
  --output_dir "$tmp/g2" $L --lora_target_modules gate_up_proj
