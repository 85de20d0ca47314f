#!/usr/bin/env bash
# PM/Composite and network trunking, measured (issue figures):
#  - composite overhead: 8-byte round trip (and 1 MiB bandwidth) of pmeth to
#    a peer with the same host id (through the composite device's shared
#    memory) against pmshm directly, on this host, interleaved repetitions;
#  - trunking: two namespaces joined by 4 veth pairs, each limited by a tbf
#    qdisc to --rate; 1 MiB bandwidth over 1, 2 and 4 rails (pmeth's trunk
#    domains) and the 8-byte round trip over 1 and 4 rails.
# Prints the ratio tables; CSV under --out. Needs root for the trunk part.
#
#   bench_trunk.sh [--bin-dir DIR] [--out DIR] [--reps N] [--rate 100mbit]
#                  [--mtu 1500] [--quick] [--only composite|trunk]
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_lib.sh"
bin_dir="" out="" nreps=5 rate=100mbit mtu=1500 quick=0 only=""
while (($#)); do
    case "$1" in
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --reps) nreps="$2"; shift 2 ;;
        --rate) rate="$2"; shift 2 ;;
        --mtu) mtu="$2"; shift 2 ;;
        --quick) quick=1; nreps=3; shift ;;
        --only) only="$2"; shift 2 ;;
        *) sed -n '2,13p' "$0"; exit 2 ;;
    esac
done
[[ -n "$bin_dir" ]] || bin_dir="$(cd "$here/../.." && pwd)/build/fabtests"
[[ -n "$out" ]] || out="$(mktemp -d /tmp/bench_trunk.XXXXXX)"
export FI_PROVIDER_PATH="${FI_PROVIDER_PATH:-$(cd "$here/../.." && pwd)/build/lib}"
# Interleaved: each repetition measures every contender once (measure with
# one repetition), so a change of the machine's speed hits all alike; the
# median over the repetitions is taken at the end.
bench_init "$out" 1 120
per_rep=0
[[ -z $only || $only == composite ]] && per_rep=$((per_rep + 4))
[[ -z $only || $only == trunk ]] && per_rep=$((per_rep + 5))
bench_total=$((nreps * per_rep))
pin=(-c 0,1)
extra=()
((quick)) && extra=(--short)

if [[ -z $only || $only == composite ]]; then
    echo "== composite: pmeth to a same-host peer (shared memory) vs pmshm, $nreps interleaved repetitions"
    for ((rep_i = 1; rep_i <= nreps; rep_i++)); do
        for prov in pmshm pmeth; do
            FI_PMETH_IFACE=lo measure composite "$prov" "$prov" pingpong 8 lat_us " size=8 " -- "$bin_dir/ft_pingpong" -p "$prov" -m tagged -S 8 "${pin[@]}" "${extra[@]}"
            FI_PMETH_IFACE=lo measure composite "$prov" "$prov" bw 1048576 bw_MBps " size=1048576 " -- "$bin_dir/ft_bw" -p "$prov" -S 1M "${pin[@]}" "${extra[@]}"
        done
    done
fi

if [[ -z $only || $only == trunk ]]; then
    p=pmbt
    cleanup() { "$here/netns.sh" down "$p" >/dev/null 2>&1; }
    trap cleanup EXIT
    PM_NETNS_RAILS=4 PM_NETNS_MTU=$mtu "$here/netns.sh" up "$p" || { echo "bench_trunk.sh: trunk part needs root" >&2; exit 77; }
    "$here/netns.sh" rate "$p" "$rate" || exit 1
    export FT_NETNS="${p}a,${p}b" FT_HOSTID=1,2
    rails_of() {  # first n rails of each side, as FT_IFACE
        local n=$1 a="" b="" i
        for ((i = 0; i < n; i++)); do
            local sa="${p}va" sb="${p}vb"
            ((i > 0)) && sa+=$i && sb+=$i
            a+="${a:+"+"}$sa" b+="${b:+"+"}$sb"
        done
        echo "$a,$b"
    }
    echo "== trunk: $rate per rail (tbf), MTU $mtu, $nreps interleaved repetitions"
    for ((rep_i = 1; rep_i <= nreps; rep_i++)); do
        for n in 1 2 4; do
            FT_IFACE=$(rails_of $n) measure trunk "rails$n" pmeth bw 1048576 bw_MBps " size=1048576 " -- "$bin_dir/ft_bw" -p pmeth -S 1M -n 6 -W 8 "${pin[@]}"
        done
        for n in 1 4; do
            FT_IFACE=$(rails_of $n) measure trunk "rails$n" pmeth pingpong 8 lat_us " size=8 " -- "$bin_dir/ft_pingpong" -p pmeth -m tagged -S 8 "${pin[@]}" "${extra[@]}"
        done
    done
    cleanup
fi

# Medians over the interleaved repetitions (raw.csv: setting,label,provider,
# test,size,metric,rep,value,...), then the ratios.
summary="$out/summary.csv"
echo "setting,label,test,size,metric,median,n" >"$summary"
tail -n +2 "$raw" | cut -d, -f1,2,4,5,6 | awk '!seen[$0]++' | while IFS= read -r key; do
    vals=$(tail -n +2 "$raw" | awk -F, -v k="$key" '$1 "," $2 "," $4 "," $5 "," $6 == k && $8 != "NA" { print $8 }')
    n=$(grep -c . <<<"$vals")
    echo "$key,$(stats <<<"$vals" | cut -d" " -f1),$n" >>"$summary"
done
# NUM / DEN per repetition (the i-th of each, measured back to back), and
# the median of those ratios: robust to this machine's changes of speed
# between repetitions, which the ratio of the two medians is not.
ratio() {  # setting test size metric num den
    local r
    r=$(awk -F, -v s="$1" -v t="$2" -v z="$3" -v m="$4" -v a="$5" -v b="$6" '
        NR > 1 && $1 == s && $4 == t && $5 == z && $6 == m {
            if ($2 == a) va[++na] = $8; else if ($2 == b) vb[++nb] = $8 }
        END { for (i = 1; i <= na && i <= nb; i++)
                  if (va[i] != "NA" && vb[i] != "NA" && vb[i] + 0 != 0) print va[i] / vb[i] }' "$raw" | stats)
    awk -F, -v s="$1" -v t="$2" -v z="$3" -v m="$4" -v a="$5" -v b="$6" -v r="$r" '
        $1 == s && $3 == t && $4 == z && $5 == m { v[$2] = $6 }
        END { split(r, q, " ")
              printf "%-9s %-9s %8s %-8s %-7s %10s / %-7s %10s   ratio per repetition: median %s (min %s, max %s)\n",
                     s, t, z, m, a, v[a], b, v[b], q[1], q[2], q[3] }' "$summary"
}
echo
echo "medians of $nreps interleaved repetitions (lat_us: lower is better; bw_MBps: higher is better)"
echo "and the median of the per-repetition ratios"
if [[ -z $only || $only == composite ]]; then
    ratio composite pingpong 8 lat_us pmeth pmshm
    ratio composite bw 1048576 bw_MBps pmeth pmshm
    echo "(composite overhead: the pingpong ratio - 1; target <= 3 %)"
fi
if [[ -z $only || $only == trunk ]]; then
    ratio trunk bw 1048576 bw_MBps rails2 rails1
    ratio trunk bw 1048576 bw_MBps rails4 rails1
    ratio trunk pingpong 8 lat_us rails4 rails1
    echo "(targets: bw 2 rails >= 1.9, 4 rails >= 3.6; pingpong 4 rails <= 1.05; rails limited to $rate each)"
fi
echo
echo "CSV: $raw $summary"
