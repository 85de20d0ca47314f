#!/usr/bin/env bash
# Debian's fi_pingpong over pmeth between two network namespaces joined by a
# veth pair (fabtests/scripts/netns.sh): server in <prefix>a, client in
# <prefix>b. fi_pingpong exchanges addresses over TCP, so the veth ends get
# 192.0.2.1 and 192.0.2.2. Always removes the namespaces.
#   run_fi_pingpong_netns.sh <fi_pingpong> <prefix> <rdm|dgram> [max]
# With `max`: one size only, the endpoint type's max_msg_size as fi_info
# gives it on that interface, data checked (-c): the largest message
# fi_info promises must go.
set -u
pp=$1 p=$2 ep=$3 size=${4:-}
netns="$(cd "$(dirname "$0")/../fabtests/scripts" && pwd)/netns.sh"
"$netns" up "$p"
rc=$?
((rc == 0)) || exit $rc
trap '"$netns" down "$p"' EXIT
ip -n "${p}a" addr add 192.0.2.1/24 dev "${p}va" && ip -n "${p}b" addr add 192.0.2.2/24 dev "${p}vb" || exit 1
opts=(-p pmeth -e "$ep" -I 200)
if [[ $size == max ]]; then
    m=$(FI_PMETH_IFACE="${p}va" ip netns exec "${p}a" fi_info -p pmeth -t "FI_EP_${ep^^}" -v 2>/dev/null |
        awk '/max_msg_size:/ { print $2; exit }')
    [[ $m =~ ^[0-9]+$ ]] || { echo "no max_msg_size from fi_info for $ep"; exit 1; }
    echo "max_msg_size $m"
    opts+=(-S "$m" -c)
fi
log=$(mktemp)
FI_PMETH_HOST_ID=a1 FI_PMETH_IFACE="${p}va" timeout 60 ip netns exec "${p}a" "$pp" "${opts[@]}" >"$log" 2>&1 &
srv=$!
sleep 0.5
FI_PMETH_HOST_ID=b2 FI_PMETH_IFACE="${p}vb" timeout 60 ip netns exec "${p}b" "$pp" "${opts[@]}" 192.0.2.1
cli=$?
wait "$srv"
s=$?
echo "--- server"; cat "$log"; rm -f "$log"
[ "$cli" -eq 0 ] && [ "$s" -eq 0 ]
