#!/usr/bin/env bash
# A disk that fills up during training, on a real filesystem: a 4 MiB tmpfs. A run writes its
# first checkpoints; a filler then leaves less room than a checkpoint needs; the resumed run must
# fail with a message naming the file and the cause, keep the previous checkpoint byte for byte,
# and leave no temporary behind. Needs root for the mount (CTest skips it elsewhere: exit 77).
#   tests/robustness/full_disk.sh build/attnkit
set -euo pipefail
bin=$1
if [ "$(id -u)" -ne 0 ] || ! command -v mount >/dev/null; then
  echo "full_disk: needs root to mount a tmpfs; skipped"
  exit 77
fi
work=$(mktemp -d)
disk=$work/disk
mkdir -p "$disk"
cleanup() {
  umount "$disk" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mount -t tmpfs -o size=4m tmpfs "$disk" || { echo "full_disk: cannot mount a tmpfs; skipped"; exit 77; }

for i in $(seq 1 200); do
  echo "a b c d e f $i	a b c d e f $i"
done >"$work/train.tsv"
args=(--threads 1 train --train "$work/train.tsv" --model-dir "$disk/model" --source-tokenizer en
      --target-tokenizer en --embed 16 --hidden 32 --batch-size 16 --checkpoint-every 4 --quiet)

"$bin" "${args[@]}" --max-steps 4 >/dev/null 2>&1
before=$(sha256sum "$disk/model/checkpoint.pt" | cut -d' ' -f1)
size=$(stat -c %s "$disk/model/checkpoint.pt")
# Fill the disk but for half a checkpoint.
free=$(df --output=avail -B1 "$disk" | tail -1)
head -c $((free - size / 2)) /dev/zero >"$disk/filler" 2>/dev/null || true

set +e
err=$("$bin" "${args[@]}" --max-steps 8 --resume 2>&1 >/dev/null)
rc=$?
set -e
fail() {
  echo "full_disk: $*"
  echo "$err"
  exit 1
}
[ "$rc" -eq 1 ] || fail "the run on a full disk exited $rc, not 1"
grep -q "$disk/model/checkpoint.pt" <<<"$err" || fail "the message does not name checkpoint.pt"
grep -qi "no space left" <<<"$err" || fail "the message does not say the disk is full"
[ "$(sha256sum "$disk/model/checkpoint.pt" | cut -d' ' -f1)" = "$before" ] ||
  fail "the previous checkpoint changed"
leftovers=$(find "$disk/model" -name '*.tmp')
[ -z "$leftovers" ] || fail "temporaries left: $leftovers"
# Room again: the run resumes from the checkpoint that was kept.
rm "$disk/filler"
"$bin" "${args[@]}" --max-steps 8 --resume >/dev/null 2>&1 || fail "no resume once there is room"
echo "full_disk: a clear error ($(tail -1 <<<"$err")), the previous checkpoint kept, nothing left behind"
