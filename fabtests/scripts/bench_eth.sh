#!/usr/bin/env bash
# pmeth against tcp;ofi_rxm, udp;ofi_rxd, net and the raw AF_PACKET floor
# across two network namespaces joined by a veth pair, per MTU, plus RMA
# write bandwidth, atomic latency and pmeth's bandwidth under injected loss:
# a thin wrapper around pmbench (docs/benchmarks.md). Needs root (exit 77
# without it).
#
#   bench_eth.sh [--bin-dir DIR] [--out DIR] [--reps N] [--mtus "1500 9000"]
#                [--loss PCT] [--quick] [other pmbench options]
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
((EUID == 0)) || { echo "bench_eth.sh: needs root (network namespaces)" >&2; exit 77; }
exec "$here/pmbench" --only-netns --sizes 8,64,1k,4k,64k,1m --tests pingpong,bw,rma_write,atomic --loss 1 "$@"
