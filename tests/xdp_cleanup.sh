#!/usr/bin/env bash
# The AF_XDP wire's XDP program: attached while an endpoint holds the
# interface, gone when the endpoint closes AND when its process is killed
# (the BPF link dies with the process), never in the way of other traffic.
#   xdp_cleanup.sh <ep_hold> <prefix> <native|skb>
# In namespace <prefix>a (netns.sh): endpoint 1 on af_xdp attaches the
# program; IPv4 ping still crosses the veth; endpoint 2 under auto falls back
# to af_packet and says why at info level; endpoint 3 asking for af_xdp is
# refused with the reason; SIGKILL of endpoint 1 detaches the program; a new
# endpoint attaches it again and detaches it at a clean close (exit 0).
# Exit 77 where namespaces cannot be created.
set -u
hold=$1 p=$2 mode=$3
netns="$(cd "$(dirname "$0")/../fabtests/scripts" && pwd)/netns.sh"
tmp=$(mktemp -d)
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    rm -rf "$tmp"
    "$netns" down "$p"
}
"$netns" up "$p"
rc=$?
((rc == 77)) && exit 77
((rc == 0)) || { echo "cannot set up namespaces" >&2; exit 1; }
trap cleanup EXIT
"$netns" addr "$p" || exit 1
dev=${p}va
fails=0
check() {  # check <description> <command...>
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what" >&2; fails=$((fails + 1)); fi
}
attached() { ip -n "${p}a" -d link show dev "$dev" | grep -q 'prog/xdp'; }
detached_soon() {  # within 3 s
    local i
    for ((i = 0; i < 60; i++)); do attached || return 0; sleep 0.05; done
    return 1
}
# start <name> <wire>: endpoint <name> in namespace a; its pid in $last.
start() {
    FI_PMETH_WIRE=$2 FI_PMETH_XDP_MODE=$mode FI_PMETH_IFACE=$dev FI_PMETH_HOST_ID=a1 FI_LOG_LEVEL=info \
        ip netns exec "${p}a" "$hold" >"$tmp/$1.out" 2>"$tmp/$1.err" &
    last=$!
    pids+=("$last")
}
ready() {  # ready <name> <pid>: prints ready within 10 s
    local i
    for ((i = 0; i < 200; i++)); do
        grep -q '^ready' "$tmp/$1.out" 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
logged() { grep -q "$2" "$tmp/$1.err"; }
# A TCP echo from namespace a to a server in b: the replies come in through
# the program on a's veth.
tcp_echo() {
    ip netns exec "${p}b" timeout 10 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("192.0.2.2", 47611)); s.listen(1); c, _ = s.accept(); c.sendall(c.recv(64))' &
    local srv=$! out
    # The server may take a while to listen on a loaded machine: the client
    # tries again while the connection is refused, for up to 5 s.
    out=$(ip netns exec "${p}a" timeout 8 python3 -c '
import socket, time
end = time.monotonic() + 5
while True:
    try:
        c = socket.create_connection(("192.0.2.2", 47611), timeout=3)
        break
    except ConnectionRefusedError:
        if time.monotonic() > end:
            raise
        time.sleep(0.05)
c.sendall(b"pmeth-xdp"); print(c.recv(64).decode())')
    wait "$srv"
    [[ $out == pmeth-xdp ]]
}

start e1 af_xdp
e1=$last
check "endpoint 1 (af_xdp) opens" ready e1 "$e1"
check "endpoint 1 reports an AF_XDP socket in $mode mode" logged e1 "XDP program in $mode mode"
check "the XDP program is attached to $dev" attached
check "TCP over IPv4 crosses the veth past the program" tcp_echo

start e2 auto
e2=$last
check "endpoint 2 (auto) opens beside it" ready e2 "$e2"
check "endpoint 2 says at info level why not af_xdp" logged e2 "af_xdp not used: an XDP program is already attached"
check "endpoint 2 uses af_packet" logged e2 "wire af_packet"

start e3 af_xdp
e3=$last
wait "$e3"
rc3=$?
check "endpoint 3 (af_xdp, interface taken) is refused (exit $rc3)" test "$rc3" -eq 1
check "endpoint 3's refusal names the reason" logged e3 "XDP program is already attached"

kill -KILL "$e1"
wait "$e1" 2>/dev/null
check "SIGKILL of endpoint 1 detaches the program" detached_soon

start e4 af_xdp
e4=$last
check "a new endpoint attaches AF_XDP again" ready e4 "$e4"
check "its program is attached" attached
kill -TERM "$e4" "$e2"
wait "$e4"
rc4=$?
wait "$e2"
rc2=$?
check "clean close of the new endpoint (exit $rc4) and of endpoint 2 (exit $rc2)" test "$rc4" -eq 0 -a "$rc2" -eq 0
check "a clean close detaches the program" detached_soon
if ((fails)); then
    for f in "$tmp"/*.err; do echo "--- $f"; grep -v "fi_getinfo\|core:core" "$f" | tail -20; done
    exit 1
fi
echo "all checks passed"
