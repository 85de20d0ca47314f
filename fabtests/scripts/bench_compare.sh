#!/usr/bin/env bash
# pmshm against libfabric's shm on this machine: a thin wrapper around
# pmbench (docs/benchmarks.md) with the shm setting only.
#
#   bench_compare.sh [--providers "pmshm shm"] [--provider-path DIR] [--bin-dir DIR]
#                    [--out DIR] [--cpus 0,1] [--reps 3] [--quick] [other pmbench options]
#
# Sizes 8 B .. 1 MiB for ft_pingpong and ft_bw, ft_msgrate -m inject at 8 B,
# and the machine's floor (ft_floor). The first provider is the base of the
# ratio table.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
args=()
while (($#)); do
    case "$1" in
        --providers) args+=(--host-provs "${2:?--providers needs a value}"); shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
exec "$here/pmbench" --settings shm --sizes 8,64,512,4k,64k,1m --msgrate-max 8 --msgrate-mode inject "${args[@]}"
