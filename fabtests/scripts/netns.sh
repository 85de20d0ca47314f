#!/usr/bin/env bash
# A pair of network namespaces joined by a veth pair, for running fabtests
# ranks on separate "hosts" (needs root / CAP_NET_ADMIN).
#
#   netns.sh up <prefix>             namespaces <prefix>a, <prefix>b; veth <prefix>va (in a)
#                                    <-> <prefix>vb (in b); lo and the veths up, IPv6 off.
#                                    MTU from env PM_NETNS_MTU (default 1500).
#                                    With PM_NETNS_RAILS=n (1..4) also veths
#                                    <prefix>va<i> <-> <prefix>vb<i>, i = 1..n-1
#                                    (trunking rails; prefix then 1..12 long).
#                                    Removes leftovers of the same prefix first.
#                                    With PM_NETNS_SWITCH=1 (one rail only) the veths
#                                    go to a third namespace <prefix>s instead, where
#                                    their peers <prefix>sa, <prefix>sb are ports of a
#                                    bridge <prefix>br (a switch between the hosts).
#   netns.sh rails <prefix>          print the rails' interface names per side:
#                                    "<a-side joined by +> <b-side joined by +>"
#   netns.sh rate <prefix> <rate>    tbf qdisc of <rate> (tc syntax, e.g. 500mbit)
#                                    on every veth, both sides ("none" removes it)
#   netns.sh link <prefix> <i> up|down   rail i's link (a side; the b side loses carrier)
#   netns.sh loss <prefix> <pct>     drop <pct>% of the frames with EtherType 0x88b5
#                                    (pmeth), and of the UDP packets to port 34997
#                                    (pmeth's with FI_PMETH_GSO: a GSO packet on veth
#                                    carries several frames and goes or drops whole),
#                                    arriving on each veth (nftables netdev
#                                    ingress, counted); 0 removes the rule. With the
#                                    switch, on the switch's ports instead: an XDP
#                                    program on a host's veth (pmeth's AF_XDP wire)
#                                    takes its frames before the ingress hook would.
#   netns.sh counters <prefix>       print what the loss rules saw and dropped
#   netns.sh addr <prefix>           give <prefix>va 192.0.2.1/24 and <prefix>vb
#                                    192.0.2.2/24 (TEST-NET-1), for IP providers
#   netns.sh rps <prefix> <cpuA> <cpuB>  receive steering: frames arriving on
#                                    <prefix>va are processed on cpu A, on <prefix>vb
#                                    on cpu B (the cpus of the ranks there, 0..31), not
#                                    on the sending cpu (a veth's default), as on two
#                                    hosts; the first rail only
#   netns.sh down <prefix>           delete everything of <prefix> (idempotent)
#
# <prefix>: 1..13 of [a-z0-9] (interface names are limited to 15 bytes).
# Exit codes: 0 ok, 1 failure, 2 usage, 77 not permitted (no root /
# CAP_NET_ADMIN), which ctest reports as skipped.
set -u

readonly ETHERTYPE=0x88b5
readonly TABLE=pmfabric_loss
readonly SETTLE_S=5   # bound on waiting for the veth link to come up

usage() { sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "netns.sh: $*" >&2; exit 1; }

check_prefix() {
    [[ $1 =~ ^[a-z0-9]{1,13}$ ]] || die "bad prefix '$1' (1..13 of [a-z0-9])"
}

ns_exists() { [[ -e /var/run/netns/$1 ]]; }

cmd_down() {
    local p=$1 rc=0 side ns pid
    for side in a b s; do
        ns=$p$side
        ns_exists "$ns" || continue
        # The rails' veths go with the namespace.
        # Processes still inside are ranks of our own tests (nothing else enters
        # these namespaces); end them by PID so the namespace really goes away.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            echo "netns.sh: ending pid $pid left in $ns" >&2
            kill -KILL "$pid" 2>/dev/null
        done
        # Deleting one end of the veth deletes both.
        [[ $side == s ]] || ip -n "$ns" link del "${p}v$side" 2>/dev/null
        ip netns del "$ns" || rc=1
    done
    ! ns_exists "${p}a" && ! ns_exists "${p}b" && ! ns_exists "${p}s" || rc=1
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

# Rail i's interface on a side: rail 0 is <prefix>v<side>.
rail_dev() { if (($3 == 0)); then echo "$1v$2"; else echo "$1v$2$3"; fi; }

# The interface index of rail i's end on a side (a, b, or the switch's ports
# sa, sb). The two ends of a veth must differ: left to the kernel, both
# would be 2 (each the first device after lo in a new namespace), and a
# veth whose peer has its own index counts as an ordinary device to the
# kernel's link watch, which then brings its carrier up as much as a second
# late (rate-limited) instead of at once: about 0.9 s of every test's
# set-up. High numbers: a new namespace may hold devices of its own at low
# ones (the fallback tunnels of loaded ipip, gre, sit, vti... modules).
rail_index() {
    case $1 in a) echo $((1000 + $2)) ;; b) echo $((2000 + $2)) ;; sa) echo 3000 ;; sb) echo 3001 ;; esac
}

nrails() {
    local n=${PM_NETNS_RAILS:-1}
    [[ $n =~ ^[1-4]$ ]] || die "bad PM_NETNS_RAILS '$n' (1..4)"
    echo "$n"
}

cmd_up() {
    local p=$1 mtu=${PM_NETNS_MTU:-1500} err side rails i dev
    [[ $mtu =~ ^[0-9]+$ ]] && ((mtu >= 68 && mtu <= 65535)) || die "bad PM_NETNS_MTU '$mtu'"
    rails=$(nrails) || exit 1
    ((rails == 1 || ${#p} <= 12)) || die "prefix '$p' too long for rails (12 at most)"
    local sw=${PM_NETNS_SWITCH:-0}
    ((sw == 0 || rails == 1)) || die "PM_NETNS_SWITCH=1 takes one rail only"
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
    if ((sw)); then
        ip netns add "${p}s" || die "ip netns add ${p}s failed"
        ip -n "${p}s" link add "${p}br" type bridge || die "cannot create bridge ${p}br"
        for side in a b; do
            ip link add "${p}v$side" index "$(rail_index "$side" 0)" mtu "$mtu" netns "$p$side" type veth \
                peer name "${p}s$side" index "$(rail_index "s$side" 0)" mtu "$mtu" netns "${p}s" \
                || die "cannot create veth ${p}v$side/${p}s$side"
            ip netns exec "${p}s" sysctl -qw "net.ipv6.conf.${p}s$side.disable_ipv6=1"
            ip -n "${p}s" link set "${p}s$side" master "${p}br" up || die "cannot make ${p}s$side a port of ${p}br"
        done
        ip netns exec "${p}s" sysctl -qw "net.ipv6.conf.${p}br.disable_ipv6=1"
        ip -n "${p}s" link set "${p}br" mtu "$mtu" up || die "${p}br up failed"
        rails=0  # the hosts' veths exist already
    fi
    # Both ends are born inside their namespaces: nothing appears in ours.
    for ((i = 0; i < rails; i++)); do
        ip link add "$(rail_dev "$p" a $i)" index "$(rail_index a $i)" mtu "$mtu" netns "${p}a" type veth \
            peer name "$(rail_dev "$p" b $i)" index "$(rail_index b $i)" mtu "$mtu" netns "${p}b" \
            || die "cannot create veth $(rail_dev "$p" a $i)/$(rail_dev "$p" b $i)"
    done
    ((sw)) && rails=1
    for side in a b; do
        ip -n "$p$side" link set lo up || die "lo up in $p$side failed"
        for ((i = 0; i < rails; i++)); do
            dev=$(rail_dev "$p" $side $i)
            ip netns exec "$p$side" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1" \
                || die "cannot disable IPv6 on $dev"
            ip -n "$p$side" link set "$dev" up || die "$dev up failed"
        done
    done
    for side in a b; do
        for ((i = 0; i < rails; i++)); do wait_link_up "$p$side" "$(rail_dev "$p" $side $i)"; done
    done
    trap - EXIT
}

# Every veth of a side (rail 0 first).
side_devs() {
    ip -n "$1$2" -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' |
        grep -E "^$1v$2[0-9]*\$" | sort
}

cmd_rails() {
    local p=$1 a b
    a=$(side_devs "$p" a | paste -sd+) b=$(side_devs "$p" b | paste -sd+)
    [[ -n $a && -n $b ]] || die "no rails for prefix $p (run 'up' first)"
    echo "$a $b"
}

cmd_rate() {
    local p=$1 rate=$2 side dev burst mtu
    for side in a b; do
        ns_exists "$p$side" || die "no namespace $p$side (run 'up' first)"
        for dev in $(side_devs "$p" $side); do
            if [[ $rate == none ]]; then
                ip netns exec "$p$side" tc qdisc del dev "$dev" root 2>/dev/null
                continue
            fi
            mtu=$(ip netns exec "$p$side" cat "/sys/class/net/$dev/mtu")
            burst=$((4 * mtu > 32768 ? 4 * mtu : 32768))
            ip netns exec "$p$side" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" \
                latency 100ms || die "tbf $rate on $dev failed"
        done
    done
}

cmd_link() {
    local p=$1 i=$2 state=$3 dev
    [[ $i =~ ^[0-3]$ && $state =~ ^(up|down)$ ]] || usage
    dev=$(rail_dev "$p" a "$i")
    ip -n "${p}a" link set "$dev" "$state" || die "cannot set $dev $state"
}

# Where the loss rule of a side goes: "<namespace> <device>" (the host's
# veth, or with the switch the switch port that the side's frames enter).
loss_at() {
    if ns_exists "${1}s"; then echo "${1}s ${1}s$2"; else echo "$1$2 ${1}v$2"; fi
}

cmd_loss() {
    local p=$1 pct=$2 side ns dev
    [[ $pct =~ ^[0-9]+$ ]] && ((pct <= 100)) || die "bad loss percentage '$pct' (0..100)"
    command -v nft >/dev/null || die "nft not found: install nftables (scripts/install-deps.sh)"
    for side in a b; do
        ns_exists "$p$side" || die "no namespace $p$side (run 'up' first)"
        read -r ns dev < <(loss_at "$p" $side)
        ip netns exec "$ns" nft delete table netdev "$TABLE$side" 2>/dev/null
        ((pct == 0)) && continue
        # 'numgen random mod 100' is uniform on 0..99: '< pct' drops pct %.
        ip netns exec "$ns" nft -f - <<EOF || die "cannot install the loss rule in $ns"
table netdev $TABLE$side {
    counter seen {}
    counter dropped {}
    chain ingress {
        type filter hook ingress device "$dev" priority 0; policy accept;
        meta protocol $ETHERTYPE counter name "seen"
        meta protocol $ETHERTYPE numgen random mod 100 < $pct counter name "dropped" drop
        ip protocol udp udp dport $((ETHERTYPE)) counter name "seen"
        ip protocol udp udp dport $((ETHERTYPE)) numgen random mod 100 < $pct counter name "dropped" drop
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

cmd_rps() {
    local p=$1 side cpu q
    for side in a b; do
        ns_exists "$p$side" || die "no namespace $p$side (run 'up' first)"
        [[ $side == a ]] && cpu=$2 || cpu=$3
        [[ $cpu =~ ^[0-9]+$ ]] && ((cpu < 32)) || die "bad cpu '$cpu' (0..31)"
        local n=0
        for q in $(ip netns exec "$p$side" sh -c "ls -d /sys/class/net/${p}v$side/queues/rx-* 2>/dev/null"); do
            ip netns exec "$p$side" sh -c "printf '%x' $((1 << cpu)) > $q/rps_cpus" \
                || die "cannot steer $q to cpu $cpu"
            n=$((n + 1))
        done
        ((n > 0)) || die "no receive queue of ${p}v$side to steer"
    done
}

# Prints "<ns> <dev> seen=<frames> dropped=<frames>" per side (nothing
# where no loss rule is installed).
cmd_counters() {
    local p=$1 side out seen dropped ns dev
    for side in a b; do
        read -r ns dev < <(loss_at "$p" $side)
        out=$(ip netns exec "$ns" nft list counters table netdev "$TABLE$side" 2>/dev/null) || continue
        seen=$(awk '/counter seen/{f=1} f&&/packets/{print $2; exit}' <<<"$out")
        dropped=$(awk '/counter dropped/{f=1} f&&/packets/{print $2; exit}' <<<"$out")
        echo "$ns $dev seen=${seen:-?} dropped=${dropped:-?}"
    done
}

(($# >= 2)) || usage
cmd=$1 prefix=$2
check_prefix "$prefix"
case $cmd in
    up) (($# == 2)) || usage; cmd_up "$prefix" ;;
    rails) (($# == 2)) || usage; cmd_rails "$prefix" ;;
    rate) (($# == 3)) || usage; cmd_rate "$prefix" "$3" ;;
    link) (($# == 4)) || usage; cmd_link "$prefix" "$3" "$4" ;;
    down) (($# == 2)) || usage; cmd_down "$prefix" || die "could not remove everything of $prefix" ;;
    loss) (($# == 3)) || usage; cmd_loss "$prefix" "$3" ;;
    counters) (($# == 2)) || usage; cmd_counters "$prefix" ;;
    addr) (($# == 2)) || usage; cmd_addr "$prefix" ;;
    rps) (($# == 4)) || usage; cmd_rps "$prefix" "$3" "$4" ;;
    *) usage ;;
esac
