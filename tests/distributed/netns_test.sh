#!/usr/bin/env bash
# Two hosts on one machine: network namespaces joined by a veth pair, one rank in each, talking
# Gloo over 10.231.x.0/24. The 2-host run must equal a 1-process run on the combined batch.
# Needs root (ip netns); exits 77 (CTest: skipped) where namespaces cannot be made.
set -euo pipefail
BIN=$1
PY=/usr/bin/python3
id=$$
ns0=ak${id}a ns1=ak${id}b v0=akv${id}a v1=akv${id}b
net=10.231.$((id % 250)).
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns0" 2>/dev/null || true
  ip netns del "$ns1" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if ! ip netns add "$ns0" 2>/dev/null; then
  echo "network namespaces are not available here (need root and iproute2): skipped"
  exit 77
fi
ip netns add "$ns1"
ip link add "$v0" type veth peer name "$v1"
ip link set "$v0" netns "$ns0"
ip link set "$v1" netns "$ns1"
ip -n "$ns0" addr add "${net}1/24" dev "$v0"
ip -n "$ns1" addr add "${net}2/24" dev "$v1"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "$v0" up
ip -n "$ns1" link set "$v1" up

"$BIN" corpus synthetic --task reverse --count 400 --symbols 6 --out "$work/train.tsv" >/dev/null
args=(train --train "$work/train.tsv" --source-tokenizer en --target-tokenizer en --embed 16 --hidden 32
      --dropout 0 --batch-size 16 --max-steps 8 --quiet --dist-timeout 30)
"$BIN" --threads 1 "${args[@]}" --model-dir "$work/one" >/dev/null
for rank in 0 1; do
  ns=$([ $rank = 0 ] && echo "$ns0" || echo "$ns1")
  dev=$([ $rank = 0 ] && echo "$v0" || echo "$v1")
  ip netns exec "$ns" env WORLD_SIZE=2 RANK=$rank LOCAL_RANK=0 MASTER_ADDR="${net}1" MASTER_PORT=29555 \
    GLOO_SOCKET_IFNAME="$dev" "$BIN" --threads 1 "${args[@]}" --model-dir "$work/host$rank" \
    >"$work/rank$rank.out" 2>"$work/rank$rank.err" &
done
status=0
wait %1 || status=1
wait %2 || status=1
if [ $status != 0 ]; then
  echo "a rank failed:"; cat "$work"/rank*.err
  echo "0 passed, 1 failed"
  exit 1
fi
"$BIN" export --model "$work/one" --from-checkpoint --out "$work/one.pt" >/dev/null
"$BIN" export --model "$work/host0" --from-checkpoint --out "$work/two.pt" >/dev/null
"$PY" - "$work/one.pt" "$work/two.pt" <<'PYEOF'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
worst = max((a[k] - b[k]).abs().max().item() for k in a)
print(f"two hosts vs one process: max |difference| = {worst:.2e}")
ok = a.keys() == b.keys() and worst < 1e-5
print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
sys.exit(0 if ok else 1)
PYEOF
