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
source "$here/bench_lib.sh"
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
ncpu="$(nproc)"
IFS=, read -r c0 c1 _ <<<"$cpus"
if [[ -z "${c1:-}" || "$c0" -ge "$ncpu" || "$c1" -ge "$ncpu" ]]; then
    echo "warning: --cpus $cpus not usable on $ncpu cpus; not pinning" >&2
    pin=()
else
    pin=(-c "$cpus")
fi
echo "binaries: $bin_dir   FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-<unset>}   out: $out_dir   pin: ${pin[*]:-none}"

bench_init "$out_dir" "$reps"

pp_sizes="8 64 512 4096 65536 1048576"
extra=()
if [[ $quick -eq 1 ]]; then extra=(--short); fi

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
if [[ $# -ge 2 ]]; then ratio_table "$1" "$2"; fi
echo
echo "floor (same machine, no libfabric):"
grep '^floor,' "$med" | awk -F, '{ printf "  %-20s %8s %-10s %s\n", $2, $3, $4, $5 }'
echo
echo "CSV: $raw $med"
