#!/usr/bin/env bash
# The shared single copy (cma_share_min, fi_pmshm(7)): a rendezvous of at
# least that size sent by CMA is copied by both sides at once. Runs
# ft_msg -t sizes (a ladder of sizes up to 8 MiB, both directions, payloads
# verified byte for byte) on one host with CMA forced on and the statistics
# on, and checks that it passed and that the endpoints' statistics say how
# many messages were shared:
#
#   check_shared_copy.sh <ft_msg> <prov> on|off|write_fault|read_fault
#
# on: each of the two endpoints received exactly 2 messages by a shared
# copy (the ladder's 1 MiB and 8 MiB; the 64 KiB one is below the 256 KiB
# threshold), so a shared copy that failed and fell back is found; off (the
# knob at 0): none. The fallbacks, with the cma_fault knob: write_fault
# (no sender can write its part): each receiver is refused once, reads the
# rest itself and asks that sender no more, nothing is shared; read_fault
# (no receiver can read): every large message goes the copy path after its
# shared copy failed (4 of them), nothing is shared. Exit 77 (skipped) where
# the kernel refuses CMA between the two processes (the messages then go by
# the bounce pipeline).
set -u
(($# == 3)) || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ft=$1 prov=$2 mode=$3
up=${prov^^}
export FI_LOG_LEVEL=warn "FI_${up}_STATS=1"
[[ $prov == pmshm ]] && export FI_PMSHM_CMA=on
case $mode in
on) ;;
off) export "FI_${up}_CMA_SHARE_MIN=0" ;;
write_fault | read_fault) export FI_LOG_LEVEL=info "FI_${up}_CMA_FAULT=${mode%_fault}" ;;
*) echo "check_shared_copy.sh: unknown mode $mode" >&2; exit 2 ;;
esac
log=$(mktemp /tmp/check_shared_copy.XXXXXX) || exit 1
trap 'rm -f "$log"' EXIT
"$ft" -p "$prov" -t sizes 2>&1 | tee "$log" | grep -v '^libfabric' | tail -3
rc=${PIPESTATUS[0]}
((rc == 0)) || { echo "check_shared_copy.sh: FAIL: ft_msg exited with $rc"; exit 1; }
refused='CMA) is not permitted\|single copy (CMA) to .* not possible'
[[ $mode == on || $mode == off ]] && refused+='\|single copy from .* failed'
if grep -a -q "$refused" "$log"; then
    echo "check_shared_copy.sh: SKIP: CMA between the processes is refused here"; exit 77
fi
counts=$(grep -a -o 'shared_copies=[0-9]*' "$log" | cut -d= -f2 | tr '\n' ' ')
echo "check_shared_copy.sh: shared_copies per endpoint: ${counts:-none}"
[[ -n $counts ]] || { echo "check_shared_copy.sh: FAIL: no statistics line"; exit 1; }
sum=0 n=0
for c in $counts; do sum=$((sum + c)); n=$((n + 1)); done
((n == 2)) || { echo "check_shared_copy.sh: FAIL: $n statistics lines, expected 2"; exit 1; }
if [[ $mode == on ]]; then
    [[ $counts == "2 2 " ]] || { echo "check_shared_copy.sh: FAIL: expected 2 shared copies per endpoint"; exit 1; }
else
    ((sum == 0)) || { echo "check_shared_copy.sh: FAIL: $sum shared copies ($mode)"; exit 1; }
fi
# How each fallback was taken (info-level lines, one per event).
refusals=$(grep -a -c 'could not write its part of a shared single copy' "$log")
failed=$(grep -a -c 'shared single copy with .* failed; using the copy path' "$log")
case $mode in
write_fault) want="2 0" ;;
read_fault) want="0 4" ;;
*) want="0 0" ;;
esac
[[ "$refusals $failed" == "$want" ]] ||
    { echo "check_shared_copy.sh: FAIL: refused/failed shared copies $refusals/$failed, expected ${want/ //}"; exit 1; }
echo "check_shared_copy.sh: PASS ($mode, $sum shared)"
