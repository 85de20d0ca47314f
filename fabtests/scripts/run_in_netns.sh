#!/usr/bin/env bash
# Runs one fabtests command with its ranks in two network namespaces joined by
# a veth pair (netns.sh), optionally with real frame loss, and always removes
# the namespaces again.
#
#   run_in_netns.sh <prefix> <loss%> <mtu> -- <command...>
#
# Rank 0 runs in <prefix>a on <prefix>va, ranks 1.. in <prefix>b on <prefix>vb
# (FT_NETNS / FT_IFACE, see common/ft_proc.h). With <loss%> > 0, nftables drops
# that share of the EtherType 0x88b5 frames arriving on each veth; the counts
# are printed at the end, and the run fails if plenty of frames were seen but
# none dropped (the rule would not be doing its job).
# The veths also get IPv4 addresses (192.0.2.1/24 on <prefix>va, .2 on
# <prefix>vb; FT_ADDRS lists them per rank) for tests that address a peer by
# host (fi_getinfo's node).
# With PM_NETNS_RAILS=n the ranks get n rails each (FT_IFACE entries a+b+..,
# pmeth's trunk domain), with PM_NETNS_RATE=<tc rate> every rail a tbf qdisc.
# With PM_NETNS_SWITCH=1 the veths meet at a bridge in a third namespace
# (netns.sh), where the loss rule then sits.
# The command is bounded by PM_NETNS_TIMEOUT seconds (default 80), so that
# the clean-up runs before a ctest TIMEOUT could kill this script.
# Exit: the command's status; 77 (skip) if namespaces cannot be created here.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
netns="$here/netns.sh"

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
(($# >= 5)) && [[ $4 == -- ]] || usage
prefix=$1 loss=$2 mtu=$3
shift 4
[[ $loss =~ ^[0-9]+$ && $mtu =~ ^[0-9]+$ ]] || usage
limit=${PM_NETNS_TIMEOUT:-80}

cleanup() {
    "$netns" down "$prefix" || echo "run_in_netns.sh: WARNING: could not remove namespaces $prefix{a,b}" >&2
}
# On a signal, stop the command (timeout passes the signal on and kills it
# 5 s later if it is still there), then remove the namespaces (EXIT).
child=
on_signal() {
    [[ -n $child ]] && kill -TERM "$child" 2>/dev/null && wait "$child"
    exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM HUP

PM_NETNS_MTU=$mtu "$netns" up "$prefix"
rc=$?
if ((rc == 77)); then
    trap - EXIT  # nothing was created
    exit 77
fi
((rc == 0)) || { echo "run_in_netns.sh: cannot set up namespaces $prefix{a,b}" >&2; exit 1; }
if ((loss > 0)); then
    "$netns" loss "$prefix" "$loss" || exit 1
fi

if [[ -n ${PM_NETNS_RATE:-} ]]; then
    "$netns" rate "$prefix" "$PM_NETNS_RATE" || exit 1
fi
"$netns" addr "$prefix" || exit 1
read -r rails_a rails_b < <("$netns" rails "$prefix") || exit 1
export FT_NETNS="${prefix}a,${prefix}b" FT_IFACE="$rails_a,$rails_b" FT_ADDRS="192.0.2.1,192.0.2.2"
echo "run_in_netns.sh: FT_NETNS=$FT_NETNS FT_IFACE=$FT_IFACE mtu=$mtu loss=$loss% rate=${PM_NETNS_RATE:-none}" \
     "switch=${PM_NETNS_SWITCH:-0}"
# In the background so that a signal to this script is handled at once.
timeout -k 5 "$limit" "$@" &
child=$!
wait "$child"
rc=$?
child=
((rc == 124 || rc == 137)) && echo "run_in_netns.sh: command stopped after ${limit}s" >&2

if ((loss > 0)); then
    counts=$("$netns" counters "$prefix")
    echo "run_in_netns.sh: nftables loss rule: ${counts//$'\n'/; }"
    seen=0 dropped=0
    while read -r _ _ s d; do
        s=${s#seen=} d=${d#dropped=}
        [[ $s =~ ^[0-9]+$ && $d =~ ^[0-9]+$ ]] || { echo "run_in_netns.sh: no loss counters" >&2; rc=1; continue; }
        seen=$((seen + s)) dropped=$((dropped + d))
    done <<<"$counts"
    # P(no drop among 2000/loss frames) = (1 - loss/100)^(2000/loss) < e^-20.
    if ((rc == 0 && seen >= 2000 / loss && dropped == 0)); then
        echo "run_in_netns.sh: FAIL: $seen frames seen, none dropped: the loss rule is not effective" >&2
        rc=1
    fi
    # With another wire than AF_PACKET (the AF_XDP suites, whose exclude
    # list leaves out the cases that move no frame), a rule that saw no
    # frame was bypassed (an XDP program on the veth takes frames before the
    # ingress hook: PM_NETNS_SWITCH=1 puts the rule on a switch instead).
    # Some AF_PACKET cases move no frame between the namespaces (cntr.basic,
    # bench.floor).
    if ((rc == 0 && seen == 0)) && [[ ${FI_PMETH_WIRE:-af_packet} != af_packet ]]; then
        echo "run_in_netns.sh: FAIL: the loss rule saw no frame: it was bypassed" >&2
        rc=1
    fi
fi
exit $rc
