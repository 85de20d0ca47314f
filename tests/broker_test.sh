#!/usr/bin/env bash
# pmethd end to end (root): two namespaces joined by a veth, a broker in
# each, and the ranks running as user nobody with no capabilities.
#
#   broker_test.sh <build dir> <case>
#
# cases:
#   xfer    ft_tagged and ft_msg (sizes) between the namespaces as nobody
#           through the brokers; the statistics must show wire=af_packet/broker
#           with frames both ways (check_wire.sh)
#   forge   broker_forge: frames that forge the EtherType, the source address,
#           the source endpoint id, a VLAN tag (also with PACKET_QDISC_BYPASS)
#           or leave by another interface never reach the other side (a capture
#           there as root), the issued ones do; the drop counter of the
#           broker's rule counts them; the mark and the filter cannot be changed;
#           the socket receives only its endpoint's frames, also rebound
#   refuse  nobody where the broker does not allow it, or with no broker:
#           fi_getinfo says -FI_ENODATA and the reason at info level; the
#           broker's rules are gone when it stops
# Exit 0 pass, 1 fail, 77 skip (no namespaces / nft).
set -u
build=$(cd "$1" && pwd) || exit 1
case=$2
here=$(cd "$(dirname "$0")" && pwd)
netns=$here/../fabtests/scripts/netns.sh
check_wire=$here/../fabtests/scripts/check_wire.sh
prefix=pb$(printf '%04x' $((RANDOM % 65536)))$$
prefix=${prefix:0:10}
command -v nft >/dev/null || { echo "SKIP: no nft"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: no user nobody"; exit 77; }

tmp=$(mktemp -d /tmp/broker_test.XXXXXX) || exit 1
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    "$netns" down "$prefix" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The programs and the provider where nobody can read them (the build
# directory may sit under a private home).
mkdir -p "$tmp/bin" "$tmp/lib"
cp "$build"/fabtests/ft_tagged "$build"/fabtests/ft_msg "$build"/tests/broker_forge "$tmp/bin/" || exit 1
cp "$build"/lib/*.so "$tmp/lib/" || exit 1
chmod -R a+rX "$tmp"

"$netns" up "$prefix" >/dev/null
rc=$?
((rc == 0)) || exit "$rc"
a=${prefix}a b=${prefix}b va=${prefix}va vb=${prefix}vb
sock=@pmethd-$prefix
printf 'allow %s user:nobody\nallow %s user:nobody\n' "$va" "$vb" >"$tmp/allow.conf"
printf 'allow %s user:root\n' "$va" >"$tmp/deny.conf"

start_broker() {  # <ns> <conf> <socket> <log>
    ip netns exec "$1" "$build/prov/pmeth/pmethd" -c "$2" -s "$3" >"$4" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do
        grep -q listening "$4" && return 0
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    echo "FAIL: the broker in $1 did not start:"; cat "$4"
    exit 1
}
as_nobody() {  # <ns> <command...>
    local ns=$1
    shift
    ip netns exec "$ns" setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
        --bounding-set=-all env FI_PROVIDER_PATH="$tmp/lib" "$@"
}
refused_count() {  # <ns>
    ip netns exec "$1" nft list chain netdev pmethd check 2>/dev/null |
        sed -n 's/.*counter packets \([0-9]*\) .*pmethd-refused.*/\1/p'
}
fail=0
expect() {  # <description> <condition...>
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

case $case in
xfer)
    start_broker "$a" "$tmp/allow.conf" "$sock" "$tmp/a.log"
    start_broker "$b" "$tmp/allow.conf" "$sock" "$tmp/b.log"
    for t in ft_tagged ft_msg; do
        FT_USER=nobody FT_NETNS=$a,$b FT_IFACE=$va,$vb FT_HOSTID=a1,b2 FI_PMETH_BROKER=$sock \
            FI_PMETH_STATS=1 FI_LOG_LEVEL=warn FI_PROVIDER_PATH=$tmp/lib \
            timeout -k 5 60 "$check_wire" af_packet/broker -- "$tmp/bin/$t" -p pmeth -t sizes >"$tmp/$t.out" 2>&1
        r=$?
        tail -3 "$tmp/$t.out"
        expect "$t -t sizes as nobody through the brokers (exit $r)" test "$r" -eq 0
    done
    uid=$(id -u nobody)
    expect "both brokers gave their sockets to uid $uid (nobody)" \
        test "$(grep -c "uid $uid: socket on" "$tmp/a.log")" -ge 2 -a "$(grep -c "uid $uid: socket on" "$tmp/b.log")" -ge 2
    expect "the brokers granted sockets and saw them released" \
        grep -q "released" "$tmp/a.log"
    expect "no frame of the transfers was refused (a: $(refused_count "$a"), b: $(refused_count "$b"))" \
        test "$(refused_count "$a")" = 0 -a "$(refused_count "$b")" = 0
    ;;
forge)
    start_broker "$a" "$tmp/allow.conf" "$sock" "$tmp/a.log"
    ep=0x7e57ab1e
    ip netns exec "$b" "$tmp/bin/broker_forge" capture "$vb" 4 "$ep" >"$tmp/capture.out" 2>&1 &
    cap=$!
    pids+=($cap)
    sleep 0.5
    as_nobody "$a" "$tmp/bin/broker_forge" send "$sock" "$va" "$ep" >"$tmp/send.out" 2>&1
    r=$?
    wait "$cap"
    rc_cap=$?
    cat "$tmp/send.out" "$tmp/capture.out"
    expect "the unprivileged sender's checks (exit $r)" test "$r" -eq 0
    expect "the capture ran (exit $rc_cap)" test "$rc_cap" -eq 0
    seen=$(sed -n 's/^seen: *//p' "$tmp/capture.out")
    # Through PACKET_QDISC_BYPASS the frames reach the egress hook without
    # their link-layer header set, so the rule cannot see them as issued and
    # drops even the well-formed ones: fail-safe (pmeth does not use it).
    expect "only issued frames reached the other side (seen: '$seen')" \
        test "$seen" = "valid" -o "$seen" = "bypass_valid valid"
    n=$(refused_count "$a")
    # 3 rounds x (ethertype, srcmac, srcep, vlan) + 3 x (bypass_ethertype,
    # bypass_srcmac) + other_iface = 19 forged frames refused.
    expect "the broker's rule dropped and counted the forged frames ($n >= 19)" test "${n:-0}" -ge 19
    ;;
refuse)
    start_broker "$a" "$tmp/deny.conf" "$sock" "$tmp/a.log"
    out=$(as_nobody "$a" env FI_PMETH_BROKER=$sock FI_LOG_LEVEL=info fi_info -p pmeth 2>&1)
    r=$?
    echo "$out" | grep -E "pmeth unavailable|fi_getinfo" | head -3
    expect "fi_info -p pmeth as nobody, not allowed by the broker, fails (exit $r)" test "$r" -ne 0
    expect "... with -FI_ENODATA" grep -q -- "-61" <<<"$out"
    expect "... and the reason at info level" grep -q "uid [0-9]* may use no interface here" <<<"$out"
    out=$(as_nobody "$a" env FI_PMETH_BROKER=@pmethd-none-$prefix FI_LOG_LEVEL=info fi_info -p pmeth 2>&1)
    r=$?
    expect "with no broker: fails (exit $r), -FI_ENODATA, says why" \
        test "$r" -ne 0 -a -n "$(grep -- '-61' <<<"$out")" -a -n "$(grep 'no pmethd broker at' <<<"$out")"
    out=$(as_nobody "$a" env FI_PMETH_BROKER= FI_LOG_LEVEL=info fi_info -p pmeth 2>&1)
    expect "with FI_PMETH_BROKER empty: says CAP_NET_RAW is needed" grep -q "need CAP_NET_RAW" <<<"$out"
    kill "${pids[0]}"
    wait "${pids[0]}"
    expect "a stopped broker removes its table" test -z "$(ip netns exec "$a" nft list tables | grep -w pmethd)"
    # The same user allowed: it works (the refusal above is the configuration's).
    start_broker "$a" "$tmp/allow.conf" "$sock" "$tmp/a2.log"
    out=$(as_nobody "$a" env FI_PMETH_BROKER=$sock fi_info -p pmeth 2>&1)
    expect "allowed by a broker, nobody sees pmeth on $va" grep -q "domain: $va" <<<"$out"
    ip netns exec "$a" "$build/prov/pmeth/pmethd" -c "$tmp/allow.conf" -s "$sock-2" >"$tmp/a3.log" 2>&1
    r=$?
    expect "a second broker in the namespace refuses to start (exit $r)" \
        test "$r" -ne 0 -a -n "$(grep 'another pmethd serves' "$tmp/a3.log")"
    ;;
*)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
((fail == 0)) && echo "all checks passed"
exit $fail
