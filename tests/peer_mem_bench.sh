#!/usr/bin/env bash
# What one endpoint holds for N peers after one real message to each
# (tests/peer_mem_bench.cpp, docs/scale.md): a hub and ceil(N/E) helper
# processes of E endpoints each.
#
#   peer_mem_bench.sh <peer_mem_bench> <N> [prov] [hub options, e.g. -B 24 -G 16]
#
# prov: pmeth (default) or 'tcp;ofi_rxm'. Environment: PM_PEER_EPS (E,
# default 250), PM_PEER_TIMEOUT (s, default 300, every process), PM_PEER_NET
# (pmeth: lo, default, every endpoint on lo; bridge, the hub and each helper
# on a veth of its own whose other end is a port of one bridge, so that a
# frame goes past at most one helper's packet sockets, not all N),
# PM_PEER_KEEP (keep the directory of files and logs).
#
# Runs in a network and mount namespace of its own (unshare -n -m; root,
# with sysfs mounted again so that pmeth sees the namespace's interfaces);
# lo up with MTU 1500, so that AF_PACKET ring slots are Ethernet-sized (2 KiB,
# not the 128 KiB of a 64 KiB MTU), and thousands of packet sockets do not
# slow down the host's own traffic. pmeth: FI_PMETH_SHM=0 (every frame on
# the wire), helpers with 64 KiB rings (FI_PMETH_RX_RING_KB / TX_RING_KB; the
# minimum of two 64 KiB blocks applies), no progress thread and no live
# statistics; the hub with the defaults and FI_PMETH_STATS=1, whose
# statistics must show N peers and frames both ways through af_packet.
# tcp;ofi_rxm always on lo (FI_TCP_IFACE=lo). Exit 0 only when every process
# exits 0 and the checks pass; 77 (skip) without root.
set -u
bin=$1 n=$2 prov=${3:-pmeth}
shift 2
[ $# -gt 0 ] && shift
eps=${PM_PEER_EPS:-250} limit=${PM_PEER_TIMEOUT:-300} net=${PM_PEER_NET:-lo}
case "$net" in lo | bridge) ;; *) echo "PM_PEER_NET: lo or bridge"; exit 2 ;; esac

if [ -z "${PM_PEER_MEM_NETNS:-}" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: needs root (a network namespace of its own, raw packet sockets)"
    exit 77
  fi
  PM_PEER_MEM_NETNS=1 exec unshare -n -m "$0" "$bin" "$n" "$prov" "$@"
fi
# This namespace's interfaces in /sys/class/net (pmeth reads them there);
# the mount namespace is private to this script and its children.
mount -t sysfs sysfs /sys || { echo "FAIL: cannot mount sysfs in the namespace"; exit 1; }
ip link set lo up && ip link set lo mtu 1500 || { echo "FAIL: cannot set up lo in the namespace"; exit 1; }
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null
helpers=$(((n + eps - 1) / eps))
if [ "$net" = bridge ]; then
  # The hub on pmh, helper k on pm<k>: veth pairs whose other ends are ports
  # of one bridge, which sends a unicast frame only out of the port its
  # destination MAC was learnt on.
  ip link add pmbr type bridge && ip link set pmbr up || { echo "FAIL: cannot make a bridge"; exit 1; }
  for v in h $(seq 0 $((helpers - 1))); do
    ip link add "pm$v" type veth peer name "pb$v" && ip link set "pb$v" master pmbr && ip link set "pb$v" up &&
      ip link set "pm$v" up || { echo "FAIL: cannot make veth pm$v"; exit 1; }
  done
fi
tmp=$(mktemp -d /tmp/peer_mem.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if [ -n "${PM_PEER_KEEP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"

common=(FI_LOG_LEVEL=warn)
if [ "$prov" = pmeth ]; then
  common+=(FI_PMETH_SHM=0)
  helper_env=(FI_PMETH_RX_RING_KB=64 FI_PMETH_TX_RING_KB=64 FI_PMETH_LIVE_STATS=0 FI_PMETH_STATS=0
    FI_PMETH_PROGRESS_THREAD=0)
  hub_env=(FI_PMETH_STATS=1)
else
  common+=(FI_TCP_IFACE=lo)
  # Smaller rxm queues for the helpers only (the hub keeps the defaults;
  # the eager limit, FI_OFI_RXM_BUFFER_SIZE, must be the same on both sides).
  helper_env=(FI_OFI_RXM_RX_SIZE=64 FI_OFI_RXM_TX_SIZE=64)
  hub_env=()
fi

echo "peers $n, $helpers helpers of up to $eps endpoints, prov $prov, net $net (MTU 1500) in a namespace of its own"
for ((k = 0; k < helpers; k++)); do
  first=$((k * eps)) e=$((n - k * eps))
  [ "$e" -gt "$eps" ] && e=$eps
  iface=lo
  [ "$net" = bridge ] && iface=pm$k
  env "${common[@]}" "${helper_env[@]}" FI_PMETH_IFACE="$iface" FI_PROVIDER="$prov" timeout "$limit" \
    "$bin" helper -d "$tmp" -k "$k" -b "$first" -e "$e" -p "$prov" -T "$limit" >"$tmp/helper.$k.log" 2>&1 &
  pids+=($!)
done
iface=lo
[ "$net" = bridge ] && iface=pmh
env "${common[@]}" "${hub_env[@]}" FI_PMETH_IFACE="$iface" FI_PROVIDER="$prov" timeout "$((limit + 10))" \
  "$bin" hub -d "$tmp" -n "$n" -k "$helpers" -p "$prov" -T "$limit" "$@" >"$tmp/hub.out" 2>"$tmp/hub.err"
hub_rc=$?
fail=0
for ((k = 0; k < helpers; k++)); do
  wait "${pids[$k]}"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: helper $k exited $rc"
    tail -5 "$tmp/helper.$k.log"
    fail=1
  fi
done
pids=()
cat "$tmp/hub.out"
cat "$tmp"/helper.*.log | awk '/^helper/ { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[2] > m[kv[1]]) m[kv[1]] = kv[2] } }
  END { printf "slowest helper: open_s=%s close_s=%s\n", m["open_s"], m["close_s"] }'
if [ "$hub_rc" -ne 0 ]; then
  echo "FAIL: hub exited $hub_rc"
  grep -v "statistics: *peer " "$tmp/hub.err" | tail -20 | cut -c1-300
  fail=1
fi
grep -q "^prov=" "$tmp/hub.out" || { echo "FAIL: no result line"; fail=1; }

if [ "$prov" = pmeth ] && [ "$hub_rc" -eq 0 ]; then
  # The hub's statistics (one endpoint): the Ethernet device's own line
  # (wire=af_packet; with FI_PMETH_SHM=0 there is no composite device and no
  # "composite:" line; if there is one it must say 0 peers through shared
  # memory), N peers known, at least N frames each way on rail 0. (The
  # per-peer lines are not counted: libfabric's log cuts the message after
  # about 1 KiB, a few peers.)
  stats=$(grep 'statistics: pmeth://' "$tmp/hub.err" | head -1)
  wire=$(grep -o 'wire=[a-z_/]*' <<<"$stats")
  txf=$(grep -o 'rail0: up tx_frames=[0-9]*' <<<"$stats" | sed 's/.*=//')
  rxf=$(grep -o 'rail0: up tx_frames=[0-9]* tx_bytes=[0-9]* rx_frames=[0-9]*' <<<"$stats" | sed 's/.*=//')
  peers=$(grep -o ' peers=[0-9]*' <<<"$stats" | sed 's/.*=//')
  shm=$(grep -o 'composite: [0-9]* peers through shared memory' "$tmp/hub.err" | head -1)
  drops=$(grep -o 'rx_ring_drops=[0-9]*' <<<"$stats")
  stalls=$(grep -o 'tx_ring_full=[0-9]*' <<<"$stats")
  echo "hub statistics: $wire rail0 tx_frames=${txf:-?} rx_frames=${rxf:-?} peers=${peers:-?} $drops $stalls;" \
    "${shm:-no composite line (FI_PMETH_SHM=0)}"
  if [ "$wire" != wire=af_packet ] || [ "${txf:-0}" -lt "$n" ] || [ "${rxf:-0}" -lt "$n" ] ||
    [ "${peers:-0}" -ne "$n" ]; then
    echo "FAIL: the hub's statistics do not show $n peers reached through af_packet frames"
    fail=1
  fi
  if [ -n "$shm" ] && [ "$shm" != "composite: 0 peers through shared memory" ]; then
    echo "FAIL: $shm"
    fail=1
  fi
fi
[ "$fail" -eq 0 ] && echo "PASS: $n peers, every process exited 0"
exit "$fail"
