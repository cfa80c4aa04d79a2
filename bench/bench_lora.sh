# bench_lora.sh: LoRA SFT at the Qwen3-0.6B shape (bench/configs/qwen3_0.6b.json, random bf16
# weights from `still init`): r=16 on every linear layer, batch 4 x 2048 packed, gradient
# checkpointing: peak RSS and tokens/s. Then at a shape full fine-tuning also fits (B x T =
# 1 x 512 by default, checkpointing as SCK for both, off by default): LoRA vs full fine-tuning
# tokens/s, beside a PyTorch LoRA step (bench/torch_lora_bench.py, fp32, the same checkpointing)
# in the same run; and the adapter's checkpoint size against the full model's.
set -euo pipefail
source bench/common.sh
THREADS=${THREADS:-2} STEPS=${STEPS:-1} B=${B:-4} T=${T:-2048} SB=${SB:-1} ST=${ST:-512} SSTEPS=${SSTEPS:-2}
SCK=${SCK:-false}  # gradient checkpointing in the LoRA vs full fine-tuning comparison (and torch's)
CFG=${CFG:-bench/configs/qwen3_0.6b.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s still >&2
[ -f "$tmp/m/model.safetensors" ] || ./still init --model_config $CFG --output_dir "$tmp/m" --dtype bfloat16 2>/dev/null
# pre-tokenised documents of 200..1500 tokens, enough for every packed row of the runs
/usr/bin/python3 - "$tmp/data.jsonl" $(( (STEPS + 1) * B * T + (SSTEPS + 1) * SB * ST )) $CFG <<'PY'
import json, random, sys
random.seed(0)
need, n = int(sys.argv[2]) * 2, 0
V = json.load(open(sys.argv[3]))["vocab_size"]
with open(sys.argv[1], "w") as f:
    while n < need:
        k = random.randint(200, 1500)
        f.write(json.dumps({"input_ids": [random.randrange(3, V) for _ in range(k)]}) + "\n")
        n += k
PY
run() {  # name, flags... -> prints "tok_s peak_rss_mib"
  local name=$1; shift
  OMP_NUM_THREADS=$THREADS /usr/bin/time -v ./still sft --model "$tmp/m" --dataset "$tmp/data.jsonl" --packing \
    --shuffle false --save_strategy no --logging_steps 1 --threads "$THREADS" --output_dir "$tmp/$name" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  local tok rss
  tok=$(grep -o '"tokens_per_second": *[0-9.e+]*' "$tmp/$name.out" | sed 's/.*: *//')
  rss=$(awk '/Maximum resident set size/ {printf "%.0f", $6 / 1024}' "$tmp/$name.err")
  echo "$tok $rss"
}
LORA="--use_peft --lora_r 16 --lora_alpha 32 --lora_target_modules all-linear --learning_rate 2e-4"
# Checkpoint sizes: one step of each (T=64) saving its checkpoint: the LoRA one holds the adapter and its AdamW
# state, the full one the fp32 weights and theirs. Sizes do not depend on the machine's load.
sizes() {
  run size_lora $LORA --max_length 64 --max_steps 1 --save_strategy steps --save_steps 1 >/dev/null
  run size_full --max_length 64 --max_steps 1 --save_strategy steps --save_steps 1 >/dev/null
  local a la fu
  a=$(stat -c %s "$tmp/size_lora/adapter_model.safetensors")
  la=$(du -sb "$tmp/size_lora/checkpoint-1" | cut -f1)
  fu=$(du -sb "$tmp/size_full/checkpoint-1" | cut -f1)
  local row="| $(date -u +%Y-%m-%d) | \`bench/bench_lora.sh\` (ONLY=sizes) | $(awk -v a="$a" 'BEGIN{printf "%.1f", a/1048576}') | $(awk -v a="$la" 'BEGIN{printf "%.1f", a/1048576}') | $(awk -v a="$fu" 'BEGIN{printf "%.1f", a/1048576}') | $(awk -v a="$a" -v b="$fu" 'BEGIN{printf "%.2f%%", 100*a/b}') | $(awk -v a="$la" -v b="$fu" 'BEGIN{printf "%.2f%%", 100*a/b}') |"
  append_row "lora: checkpoint sizes, 0.6B shape, r=16 all-linear" "| date | command | adapter_model.safetensors MiB | LoRA checkpoint dir MiB | full fine-tuning checkpoint dir MiB | adapter / full checkpoint | LoRA checkpoint / full checkpoint |
|---|---|---|---|---|---|---|" "$row"
  echo "$row"
}
if [ "${ONLY:-}" = sizes ]; then sizes; exit 0; fi
read -r big_tok big_rss <<<"$(run lora_big $LORA --gradient_checkpointing true --max_length $T \
  --per_device_train_batch_size $B --max_steps $STEPS)"
read -r lora_tok lora_rss <<<"$(run lora_small $LORA --gradient_checkpointing $SCK --max_length $ST \
  --per_device_train_batch_size $SB --max_steps $SSTEPS)"
read -r full_tok full_rss <<<"$(run full_small --gradient_checkpointing $SCK --max_length $ST \
  --per_device_train_batch_size $SB --max_steps $SSTEPS)"
torch=$(OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/torch_lora_bench.py $CFG $SB $ST $THREADS 1 16 $([ "$SCK" = true ] && echo 1 || echo 0))
j() { echo "$1" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
adapter=$(stat -c %s "$tmp/lora_small/adapter_model.safetensors")
model=$(stat -c %s "$tmp/m/model.safetensors")
row="| $(date -u +%Y-%m-%d) | $(machine), $THREADS threads | \`bench/bench_lora.sh\` | $big_tok | $big_rss | $lora_tok | $full_tok | $(awk -v a="$lora_tok" -v b="$full_tok" 'BEGIN{printf "%.2f", a/b}') | $(j "$torch" tok_s) | $(awk -v a="$lora_tok" -v b="$(j "$torch" tok_s)" 'BEGIN{printf "%.2f", a/b}') | $lora_rss / $full_rss / $(j "$torch" peak_rss_mib) | $(awk -v a="$adapter" 'BEGIN{printf "%.1f", a/1048576}') MiB vs $(awk -v a="$model" 'BEGIN{printf "%.1f", a/1048576}') MiB ($(awk -v a="$adapter" -v b="$model" 'BEGIN{printf "%.2f%%", 100*a/b}')) | still: OpenBLAS-openmp; torch $(j "$torch" torch): $(torch_blas) |"
header="| date | machine | command | LoRA B=$B T=$T ckpt tok/s | its peak RSS MiB | LoRA B=$SB T=$ST (ckpt $SCK) tok/s | full FT tok/s | LoRA / full | torch LoRA tok/s | still LoRA / torch | peak RSS MiB LoRA / full / torch | adapter vs bf16 model | BLAS |
|---|---|---|---|---|---|---|---|---|---|---|---|---|"
append_row "lora: 0.6B shape, r=16 all-linear, gradient checkpointing" "$header" "$row"
echo "$row"
sizes
