#!/usr/bin/env bash
# Runs a fabtests command and checks, in the statistics its pmeth endpoints
# print at close (FI_PMETH_STATS=1, FI_LOG_LEVEL=warn), that frames went over
# the wire through the expected backend.
#
#   check_wire.sh <kind> -- <command...>
#
# <kind>: the beginning of the wire= field (e.g. af_xdp/native). Passes when
# the command passes and at least one endpoint of that wire sent and
# received frames on its rail 0; prints how many endpoints used which wire
# (under FI_PMETH_WIRE=auto a second endpoint on an interface whose AF_XDP
# socket is taken uses AF_PACKET). <kind>$ wants the whole field (af_packet$:
# not af_packet+gso). <kind>:<counter> (e.g.
# af_packet+gso:gso_packets) also wants that counter of rail 0 above 0 on
# some endpoint; <kind>:<counter>=0 wants it 0 on every one.
set -u
(($# >= 3)) && [[ $2 == -- ]] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
want=${1%%:*}
counter=""
[[ $1 == *:* ]] && counter=${1#*:}
shift 2
log=$(mktemp /tmp/check_wire.XXXXXX) || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
((rc == 0)) || exit "$rc"
summary=$(grep -o 'wire=[^ ]* rail0: [a-z]* tx_frames=[0-9]* tx_bytes=[0-9]* rx_frames=[0-9]*' "$log" |
          awk -v want="wire=${want%\$}" -v exact="$([[ $want == *\$ ]] && echo 1 || echo 0)" '
            { kinds[$1]++ }
            (exact ? $1 == want : index($1, want) == 1) { split($4, t, "="); split($6, r, "="); if (t[2] > 0 && r[2] > 0) good++ }
            END { for (k in kinds) printf "%s x%d ", k, kinds[k]; printf "| with traffic: %d\n", good + 0 }')
echo "check_wire.sh: endpoints: $summary"
if [[ $summary != *"with traffic: "[1-9]* ]]; then
    echo "check_wire.sh: FAIL: no endpoint on wire $want sent and received frames" >&2
    exit 1
fi
if [[ -n $counter ]]; then
    zero=0
    [[ $counter == *=0 ]] && zero=1 counter=${counter%=0}
    best=$(grep -o "wire=${want%\$}[^;]*;" "$log" | grep -o " $counter=[0-9]*" | sed 's/.*=//' | sort -n | tail -1)
    echo "check_wire.sh: largest $counter: ${best:-none}"
    if ((zero)) && [[ ${best:-x} != 0 ]]; then
        echo "check_wire.sh: FAIL: an endpoint on wire $want counted $counter (or none counted at all)" >&2
        exit 1
    fi
    if ((!zero && ${best:-0} == 0)); then
        echo "check_wire.sh: FAIL: no endpoint on wire $want counted $counter" >&2
        exit 1
    fi
fi
exit 0
