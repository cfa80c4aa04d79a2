#!/usr/bin/env bash
# disk_full.sh: training and saving on a small tmpfs. A checkpoint that does not fit is refused
# before writing, naming the bytes needed and free; a write that fails says why (No space left on
# device, Read-only file system); a checkpoint that cannot be completed is removed; no temp file
# and no empty metrics.jsonl stay behind. Needs a tmpfs mount: as root, or in a user namespace
# (unshare -rm); skipped with the reason otherwise.
set -u
M=tests/data/models/qwen3_untied
if [ "${DISK_FULL_INNER:-}" != 1 ]; then
  probe=$(mktemp -d)
  if unshare -rm sh -c "mount -t tmpfs -o size=64k tmpfs '$probe'" 2>/dev/null; then
    rmdir "$probe"; exec env DISK_FULL_INNER=1 unshare -rm bash "$0"
  fi
  if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=64k tmpfs "$probe" 2>/dev/null; then
    umount "$probe"; rmdir "$probe"; DISK_FULL_INNER=1 exec bash "$0"
  fi
  rmdir "$probe"
  source tests/e2e/lib.sh
  skip disk_full "cannot mount a tmpfs here (needs root or unprivileged user namespaces)"; exit 0
fi
# from here on in a mount namespace of our own (or as root): mounts are ours to make and remove
# (the temp directory is made here, inside, so that the exec above leaves nothing behind)
source tests/e2e/lib.sh
d="$tmp/fs"; mkdir -p "$d"
on_exit 'umount "$d" 2>/dev/null'
S="--model $M --dataset tests/data/sft/ids.jsonl --max_steps 3 --save_steps 1 --per_device_train_batch_size 4
   --threads 1 --pad_to_multiple_of 16 --logging_steps 1"
leftovers() { find "$d" -name '*.tmp.*'; find "$d" -name metrics.jsonl -empty; }

# 1. too little space for a checkpoint: refused before anything is written, with both numbers
mount -t tmpfs -o size=1200k tmpfs "$d"
out=$($BIN sft $S --output_dir "$d/o" 2>&1); rc=$?
if [ $rc = 1 ] && grep -qE "not enough disk space for a checkpoint: it needs [0-9]+ bytes \(.*\), [0-9]+ bytes \(.*\) are free" <<<"$out" \
   && [ ! -e "$d/o/checkpoint-1" ] && [ -z "$(leftovers)" ]; then ok checkpoint_space_checked_first
else fail checkpoint_space_checked_first "rc=$rc $(tail -2 <<<"$out"); $(ls -R "$d")"; fi
umount "$d"

# 2. the filesystem runs out while writing (inodes here): the half checkpoint is removed, the
#    message says why
mount -t tmpfs -o size=20m,nr_inodes=7 tmpfs "$d"
out=$($BIN sft $S --output_dir "$d/o" 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "No space left on device" <<<"$out" && grep -q "removed the incomplete" <<<"$out" \
   && [ -z "$(ls -d "$d"/o/checkpoint-* 2>/dev/null)" ] && [ -z "$(leftovers)" ]; then ok half_checkpoint_removed
else fail half_checkpoint_removed "rc=$rc $(tail -2 <<<"$out"); $(find "$d")"; fi
umount "$d"

# 3. a model that does not fit: the write error says why and leaves no temp file
mount -t tmpfs -o size=100k tmpfs "$d"
out=$($BIN init --model_config $M/config.json --output_dir "$d/m" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "write failed: No space left on device" <<<"$out" && [ -z "$(leftovers)" ]; then
  ok write_error_says_why
else fail write_error_says_why "rc=$rc $(tail -2 <<<"$out")"; fi
umount "$d"

# 4. a read-only output_dir is reported before the model loads
mount -t tmpfs -o size=1m,ro tmpfs "$d"
out=$($BIN sft $S --output_dir "$d/o" 2>&1); rc=$?
if [ $rc = 1 ] && grep -q "Read-only file system" <<<"$out" && ! grep -q "plan 1 built" <<<"$out"; then
  ok readonly_output_dir_before_load
else fail readonly_output_dir_before_load "rc=$rc $(tail -2 <<<"$out")"; fi
umount "$d"

# 5. enough space: the same run completes and the final model is the last checkpoint's, one copy
mount -t tmpfs -o size=8m tmpfs "$d"
out=$($BIN sft $S --save_total_limit 1 --output_dir "$d/o" 2>&1); rc=$?
links=$(stat -c %h "$d/o/model.safetensors" 2>/dev/null)
if [ $rc = 0 ] && [ "$links" = 2 ] && cmp -s "$d/o/model.safetensors" "$d/o/checkpoint-3/model.safetensors" \
   && [ -z "$(leftovers)" ]; then ok final_model_written_once
else fail final_model_written_once "rc=$rc links=$links $(tail -2 <<<"$out")"; fi
