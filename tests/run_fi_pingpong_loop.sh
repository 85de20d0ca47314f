#!/usr/bin/env bash
# Debian's fi_pingpong over pmeth through real Ethernet frames, N times in a
# row: each run fails the test unless both the server's and the client's
# exit status are 0 (the last message of an exchange must be acknowledged
# before either side's fi_close lets its endpoint go), and unless both sides'
# statistics show frames on the wire.
#   run_fi_pingpong_loop.sh <fi_pingpong> lo    <rdm|dgram> <runs>
#       both on lo, FI_PMETH_SHM=0 (no shared-memory path between them)
#   run_fi_pingpong_loop.sh <fi_pingpong> netns <rdm|dgram> <runs> <prefix>
#       server and client in two namespaces joined by a veth pair, with
#       different FI_PMETH_HOST_ID (a1, b2), so frames cross the veth
set -u
pp=$1 mode=$2 ep=$3 runs=$4 p=${5:-}
tmp=$(mktemp -d)
netns="$(cd "$(dirname "$0")/../fabtests/scripts" && pwd)/netns.sh"
cleanup() {
  rm -rf "$tmp"
  [ "$mode" = netns ] && "$netns" down "$p"
}
trap cleanup EXIT
export FI_PMETH_STATS=1 FI_LOG_LEVEL=warn
if [ "$mode" = netns ]; then
  "$netns" up "$p" || exit $?
  ip -n "${p}a" addr add 192.0.2.1/24 dev "${p}va" && ip -n "${p}b" addr add 192.0.2.2/24 dev "${p}vb" || exit 1
fi
wire_frames() {  # the smallest tx_frames of rail0 in a side's statistics (0 if none)
  local n
  n=$(grep -o 'rail0: up tx_frames=[0-9]*' "$1" | head -1 | sed 's/.*=//')
  echo "${n:-0}"
}
fail=0
for ((i = 1; i <= runs; i++)); do
  port=$((20000 + RANDOM % 20000))
  if [ "$mode" = lo ]; then
    FI_PMETH_IFACE=lo FI_PMETH_SHM=0 timeout 60 "$pp" -p pmeth -e "$ep" -B "$port" -S 1024 -I 100 \
      >"$tmp/srv" 2>&1 &
    srv=$!
    sleep 0.3
    FI_PMETH_IFACE=lo FI_PMETH_SHM=0 timeout 60 "$pp" -p pmeth -e "$ep" -P "$port" -S 1024 -I 100 127.0.0.1 \
      >"$tmp/cli" 2>&1
    cli=$?
  else
    FI_PMETH_HOST_ID=a1 FI_PMETH_IFACE="${p}va" timeout 60 ip netns exec "${p}a" \
      "$pp" -p pmeth -e "$ep" -B "$port" -S 1024 -I 100 >"$tmp/srv" 2>&1 &
    srv=$!
    sleep 0.3
    FI_PMETH_HOST_ID=b2 FI_PMETH_IFACE="${p}vb" timeout 60 ip netns exec "${p}b" \
      "$pp" -p pmeth -e "$ep" -P "$port" -S 1024 -I 100 192.0.2.1 >"$tmp/cli" 2>&1
    cli=$?
  fi
  wait "$srv"
  s=$?
  fs=$(wire_frames "$tmp/srv") fc=$(wire_frames "$tmp/cli")
  if [ "$cli" -ne 0 ] || [ "$s" -ne 0 ] || [ "$fs" -eq 0 ] || [ "$fc" -eq 0 ]; then
    echo "run $i: server exit $s, client exit $cli, wire frames server $fs client $fc"
    echo "--- server"; cat "$tmp/srv"; echo "--- client"; cat "$tmp/cli"
    fail=$((fail + 1))
  else
    echo "run $i: both sides exit 0; frames on the wire: server $fs, client $fc"
  fi
done
echo "$((runs - fail)) of $runs runs passed"
[ "$fail" -eq 0 ]
