#!/usr/bin/env bash
# A pair of network namespaces joined by a veth pair, for running fabtests
# ranks on separate "hosts" (needs root / CAP_NET_ADMIN).
#
#   netns.sh up <prefix>             namespaces <prefix>a, <prefix>b; veth <prefix>va (in a)
#                                    <-> <prefix>vb (in b); lo and the veths up, IPv6 off.
#                                    MTU from env PM_NETNS_MTU (default 1500).
#                                    Removes leftovers of the same prefix first.
#   netns.sh loss <prefix> <pct>     drop <pct>% of the frames with EtherType 0x88b5
#                                    (pmeth) arriving on each veth (nftables netdev
#                                    ingress, counted); 0 removes the rule
#   netns.sh counters <prefix>       print what the loss rules saw and dropped
#   netns.sh addr <prefix>           give <prefix>va 192.0.2.1/24 and <prefix>vb
#                                    192.0.2.2/24 (TEST-NET-1), for IP providers
#   netns.sh down <prefix>           delete everything of <prefix> (idempotent)
#
# <prefix>: 1..13 of [a-z0-9] (interface names are limited to 15 bytes).
# Exit codes: 0 ok, 1 failure, 2 usage, 77 not permitted (no root /
# CAP_NET_ADMIN), which ctest reports as skipped.
set -u

readonly ETHERTYPE=0x88b5
readonly TABLE=pmfabric_loss
readonly SETTLE_S=5   # bound on waiting for the veth link to come up

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "netns.sh: $*" >&2; exit 1; }

check_prefix() {
    [[ $1 =~ ^[a-z0-9]{1,13}$ ]] || die "bad prefix '$1' (1..13 of [a-z0-9])"
}

ns_exists() { [[ -e /var/run/netns/$1 ]]; }

cmd_down() {
    local p=$1 rc=0 side ns pid
    for side in a b; do
        ns=$p$side
        ns_exists "$ns" || continue
        # Processes still inside are ranks of our own tests (nothing else enters
        # these namespaces); end them by PID so the namespace really goes away.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            echo "netns.sh: ending pid $pid left in $ns" >&2
            kill -KILL "$pid" 2>/dev/null
        done
        # Deleting one end of the veth deletes both.
        ip -n "$ns" link del "${p}v$side" 2>/dev/null
        ip netns del "$ns" || rc=1
    done
    ! ns_exists "${p}a" && ! ns_exists "${p}b" || rc=1
    return $rc
}

wait_link_up() {
    local ns=$1 dev=$2 deadline=$((SECONDS + SETTLE_S)) state
    while :; do
        state=$(ip netns exec "$ns" cat "/sys/class/net/$dev/operstate" 2>/dev/null)
        [[ $state == up ]] && return 0
        ((SECONDS < deadline)) || die "$dev in $ns is not up after ${SETTLE_S}s (operstate '$state')"
        sleep 0.05
    done
}

cmd_up() {
    local p=$1 mtu=${PM_NETNS_MTU:-1500} err side
    [[ $mtu =~ ^[0-9]+$ ]] && ((mtu >= 68 && mtu <= 65535)) || die "bad PM_NETNS_MTU '$mtu'"
    cmd_down "$p" || die "cannot remove leftovers of prefix $p"
    if ! err=$(ip netns add "${p}a" 2>&1); then
        if [[ $err == *"ermission denied"* || $err == *"ot permitted"* ]] || ((EUID != 0)); then
            echo "netns.sh: SKIP: creating network namespaces is not permitted here" \
                 "(needs root / CAP_NET_ADMIN): $err" >&2
            exit 77
        fi
        die "ip netns add ${p}a: $err"
    fi
    trap 'cmd_down "$p"' EXIT  # half-built: remove it again
    ip netns add "${p}b" || die "ip netns add ${p}b failed"
    # Both ends are born inside their namespaces: nothing appears in ours.
    ip link add "${p}va" mtu "$mtu" netns "${p}a" type veth \
        peer name "${p}vb" mtu "$mtu" netns "${p}b" || die "cannot create veth ${p}va/${p}vb"
    for side in a b; do
        ip netns exec "$p$side" sysctl -qw "net.ipv6.conf.${p}v$side.disable_ipv6=1" \
            || die "cannot disable IPv6 on ${p}v$side"
        ip -n "$p$side" link set lo up || die "lo up in $p$side failed"
        ip -n "$p$side" link set "${p}v$side" up || die "${p}v$side up failed"
    done
    for side in a b; do wait_link_up "$p$side" "${p}v$side"; done
    trap - EXIT
}

cmd_loss() {
    local p=$1 pct=$2 side
    [[ $pct =~ ^[0-9]+$ ]] && ((pct <= 100)) || die "bad loss percentage '$pct' (0..100)"
    command -v nft >/dev/null || die "nft not found: install nftables (scripts/install-deps.sh)"
    for side in a b; do
        ns_exists "$p$side" || die "no namespace $p$side (run 'up' first)"
        ip netns exec "$p$side" nft delete table netdev $TABLE 2>/dev/null
        ((pct == 0)) && continue
        # 'numgen random mod 100' is uniform on 0..99: '< pct' drops pct %.
        ip netns exec "$p$side" nft -f - <<EOF || die "cannot install the loss rule in $p$side"
table netdev $TABLE {
    counter seen {}
    counter dropped {}
    chain ingress {
        type filter hook ingress device "${p}v$side" priority 0; policy accept;
        meta protocol $ETHERTYPE counter name "seen"
        meta protocol $ETHERTYPE numgen random mod 100 < $pct counter name "dropped" drop
    }
}
EOF
    done
}

cmd_addr() {
    local p=$1 side i=1
    for side in a b; do
        ns_exists "$p$side" || die "no namespace $p$side (run 'up' first)"
        ip -n "$p$side" addr replace "192.0.2.$i/24" dev "${p}v$side" \
            || die "cannot set 192.0.2.$i/24 on ${p}v$side"
        i=$((i + 1))
    done
}

# Prints "<ns> <dev> seen=<frames> dropped=<frames>" per side (nothing
# where no loss rule is installed).
cmd_counters() {
    local p=$1 side out seen dropped
    for side in a b; do
        out=$(ip netns exec "$p$side" nft list counters table netdev $TABLE 2>/dev/null) || continue
        seen=$(awk '/counter seen/{f=1} f&&/packets/{print $2; exit}' <<<"$out")
        dropped=$(awk '/counter dropped/{f=1} f&&/packets/{print $2; exit}' <<<"$out")
        echo "$p$side ${p}v$side seen=${seen:-?} dropped=${dropped:-?}"
    done
}

(($# >= 2)) || usage
cmd=$1 prefix=$2
check_prefix "$prefix"
case $cmd in
    up) (($# == 2)) || usage; cmd_up "$prefix" ;;
    down) (($# == 2)) || usage; cmd_down "$prefix" || die "could not remove everything of $prefix" ;;
    loss) (($# == 3)) || usage; cmd_loss "$prefix" "$3" ;;
    counters) (($# == 2)) || usage; cmd_counters "$prefix" ;;
    addr) (($# == 2)) || usage; cmd_addr "$prefix" ;;
    *) usage ;;
esac
