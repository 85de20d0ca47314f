#!/usr/bin/env bash
# Compare providers with the fabtests benchmarks.
#
#   bench_compare.sh [--providers "pmshm shm"] [--provider-path DIR] [--bin-dir DIR]
#                    [--out DIR] [--cpus 0,1] [--reps 3] [--quick]
#
# Runs, for each provider: ft_pingpong (8 B .. 1 MiB, lat_us), ft_bw at 1 MiB
# (bw_MBps) and ft_msgrate at 8 B (mrate_Mps), each REPS times with server
# and client pinned to different cores, and keeps the median. Also runs
# ft_floor (cache-line ping-pong, memcpy at 1 MiB). Writes raw.csv and
# median.csv to the output dir and prints a ratio table first/second
# provider per metric. FI_PROVIDER_PATH comes from the environment or
# --provider-path (where the pmshm DSO lives).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
providers="pmshm shm"
bin_dir="${FT_BIN_DIR:-}"
out_dir=""
cpus="0,1"
reps=3
quick=0

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --providers) providers="$2"; shift 2 ;;
        --provider-path) export FI_PROVIDER_PATH="$2"; shift 2 ;;
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --out) out_dir="$2"; shift 2 ;;
        --cpus) cpus="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --quick) quick=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "unknown option $1" >&2; usage 2 ;;
    esac
done

if [[ -z "$bin_dir" ]]; then
    root="$(cd "$here/../.." && pwd)"
    for d in "$root/build/fabtests" "$root/build/bin" "$root/build" /tmp/ftb; do
        if [[ -x "$d/ft_pingpong" ]]; then bin_dir="$d"; break; fi
    done
fi
[[ -n "$bin_dir" && -x "$bin_dir/ft_pingpong" ]] || { echo "cannot find ft_pingpong: use --bin-dir" >&2; exit 2; }
[[ -n "$out_dir" ]] || out_dir="$(mktemp -d /tmp/bench_compare.XXXXXX)"
mkdir -p "$out_dir"
ncpu="$(nproc)"
IFS=, read -r c0 c1 _ <<<"$cpus"
if [[ -z "${c1:-}" || "$c0" -ge "$ncpu" || "$c1" -ge "$ncpu" ]]; then
    echo "warning: --cpus $cpus not usable on $ncpu cpus; not pinning" >&2
    pin=()
else
    pin=(-c "$cpus")
fi
echo "binaries: $bin_dir   FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-<unset>}   out: $out_dir   pin: ${pin[*]:-none}"

raw="$out_dir/raw.csv"
med="$out_dir/median.csv"
echo "prov,test,size,metric,rep,value" >"$raw"
echo "prov,test,size,metric,value" >"$med"

pp_sizes="8 64 512 4096 65536 1048576"
extra=()
if [[ $quick -eq 1 ]]; then extra=(--short); fi

# field NAME from a result line on stdin
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -1; }

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "NA"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# run PROV TEST SIZE METRIC -- command...
measure() {
    local prov="$1" test="$2" size="$3" metric="$4"; shift 5
    local vals=() v line
    for ((r = 1; r <= reps; r++)); do
        if line="$("$@" 2>>"$out_dir/stderr.log" | grep "^prov=" | grep " size=$size " | tail -1)" && [[ -n "$line" ]]; then
            v="$(field "$metric" <<<"$line")"
        else
            v="NA"
        fi
        echo "$prov,$test,$size,$metric,$r,$v" >>"$raw"
        [[ "$v" != NA ]] && vals+=("$v")
    done
    if [[ ${#vals[@]} -gt 0 ]]; then v="$(printf '%s\n' "${vals[@]}" | median)"; else v=NA; fi
    echo "$prov,$test,$size,$metric,$v" >>"$med"
    printf '  %-8s %-16s %8s  %-10s %s\n' "$prov" "$test" "$size" "$metric" "$v"
}

for prov in $providers; do
    echo "== $prov"
    for s in $pp_sizes; do
        measure "$prov" pingpong_tagged "$s" lat_us -- "$bin_dir/ft_pingpong" -p "$prov" -m tagged -S "$s" "${pin[@]}" "${extra[@]}"
    done
    measure "$prov" bw 1048576 bw_MBps -- "$bin_dir/ft_bw" -p "$prov" -S 1M "${pin[@]}" "${extra[@]}"
    measure "$prov" msgrate_inject 8 mrate_Mps -- "$bin_dir/ft_msgrate" -p "$prov" -m inject -S 8 "${pin[@]}" "${extra[@]}"
done
echo "== floor"
measure floor cacheline_pingpong 64 lat_us -- "$bin_dir/ft_floor" "${pin[@]}" "${extra[@]}"
measure floor memcpy 1048576 bw_MBps -- "$bin_dir/ft_floor" -S 1M "${pin[@]}" "${extra[@]}"

set -- $providers
if [[ $# -ge 2 ]]; then
    num="$1" den="$2"
    echo
    echo "ratio $num/$den (lat_us: lower is better; bw_MBps, mrate_Mps: higher is better)"
    printf '%-16s %8s %-10s %12s %12s %8s\n' test size metric "$num" "$den" ratio
    awk -F, -v a="$num" -v b="$den" '
        NR > 1 { key = $2 "," $3 "," $4; if ($1 == a) va[key] = $5; if ($1 == b) vb[key] = $5;
                 if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
        END { for (i = 1; i <= n; i++) { k = order[i]; if (!(k in va) || !(k in vb)) continue;
                  split(k, f, ",");
                  r = (va[k] != "NA" && vb[k] != "NA" && vb[k] + 0 != 0) ? sprintf("%.3f", va[k] / vb[k]) : "NA";
                  printf "%-16s %8s %-10s %12s %12s %8s\n", f[1], f[2], f[3], va[k], vb[k], r } }' "$med"
fi
echo
echo "floor (same machine, no libfabric):"
grep '^floor,' "$med" | awk -F, '{ printf "  %-20s %8s %-10s %s\n", $2, $3, $4, $5 }'
echo
echo "CSV: $raw $med"
