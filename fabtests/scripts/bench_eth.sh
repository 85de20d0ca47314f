#!/usr/bin/env bash
# pmeth against its peers across two network namespaces joined by a veth
# pair (the two "hosts" of one machine): tcp;ofi_rxm, udp;ofi_rxd and the
# raw AF_PACKET floor (ft_rawpp), at each MTU asked, plus pmeth's 1 MiB
# bandwidth under injected loss. Needs root. Everything it creates is removed.
#
#   bench_eth.sh [--bin-dir DIR] [--out DIR] [--reps N] [--mtus "1500 9000"]
#                [--loss PCT] [--quick]
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_lib.sh"
bin_dir="" out="" nreps=3 mtus="1500 9000" loss=1 quick=0
while (($#)); do
    case "$1" in
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --reps) nreps="$2"; shift 2 ;;
        --mtus) mtus="$2"; shift 2 ;;
        --loss) loss="$2"; shift 2 ;;
        --quick) quick=1; nreps=1; shift ;;
        *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
[[ -n "$bin_dir" ]] || bin_dir="$(cd "$here/../.." && pwd)/build/fabtests"
[[ -n "$out" ]] || out="$(mktemp -d /tmp/bench_eth.XXXXXX)"
bench_init "$out" "$nreps"

# Both ends are called pmb0 inside their own namespace, so one interface
# name serves every provider and both ranks; addresses from 192.0.2.0/24.
ns=(pmbencha pmbenchb)
cleanup() {
    for n in "${ns[@]}"; do
        for pid in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "$n" 2>/dev/null
    done
}
trap cleanup EXIT
setup() {
    local mtu=$1
    cleanup
    ip netns add "${ns[0]}" && ip netns add "${ns[1]}" || { echo "bench_eth.sh: needs root (ip netns)" >&2; exit 77; }
    ip link add pmb0 mtu "$mtu" netns "${ns[0]}" type veth peer name pmb0 mtu "$mtu" netns "${ns[1]}"
    local i=1
    for n in "${ns[@]}"; do
        ip -n "$n" link set lo up
        ip -n "$n" addr add "192.0.2.$i/24" dev pmb0
        ip -n "$n" link set pmb0 up
        i=$((i + 1))
    done
    sleep 1
}
add_loss() {  # percent of pmeth frames dropped on each side's ingress
    for n in "${ns[@]}"; do
        ip netns exec "$n" nft -f - <<NFT
table netdev pmbench {
  chain in { type filter hook ingress device pmb0 priority 0; ether type 0x88b5 numgen random mod 100 < $1 drop; }
}
NFT
    done
}

export FT_NETNS="${ns[0]},${ns[1]}" FT_HOSTID=a1,b2  # two "hosts": Ethernet, not shared memory
export FI_PMETH_IFACE=pmb0 FI_TCP_IFACE=pmb0 FI_UDP_IFACE=pmb0
export FI_PROVIDER_PATH="${FI_PROVIDER_PATH:-$(cd "$here/../.." && pwd)/build/lib}"
extra=()
((quick)) && extra=(--short)
pin=(-c 0,1)
sizes="8 64 1024 4096 65536 1048576"
for mtu in $mtus; do
    setup "$mtu"
    echo "== MTU $mtu  (namespaces ${ns[*]}, veth pmb0)"
    for prov in pmeth "tcp;ofi_rxm" "udp;ofi_rxd"; do
        tag="${prov%%;*}@$mtu"
        for s in $sizes; do
            measure "$tag" pingpong "$s" lat_us -- "$bin_dir/ft_pingpong" -p "$prov" -m tagged -S "$s" "${pin[@]}" "${extra[@]}"
        done
        measure "$tag" bw 1048576 bw_MBps -- "$bin_dir/ft_bw" -p "$prov" -S 1M "${pin[@]}" "${extra[@]}"
        [[ $prov == udp* ]] || measure "$tag" rma_write 1048576 bw_MBps -- "$bin_dir/ft_rma_bw" -p "$prov" -m write -S 1M "${pin[@]}" "${extra[@]}"
    done
    measure "pmeth_atomic@$mtu" pingpong 8 lat_us -- "$bin_dir/ft_pingpong" -p pmeth -m atomic -S 8 "${pin[@]}" "${extra[@]}"
    for s in 8 1024; do
        measure "raw@$mtu" pingpong "$s" lat_us -- "$bin_dir/ft_rawpp" -S "$s" "${pin[@]}" "${extra[@]}"
    done
    if ((loss > 0)); then
        add_loss "$loss"
        measure "pmeth_loss$loss@$mtu" bw 1048576 bw_MBps -- "$bin_dir/ft_bw" -p pmeth -S 1M "${pin[@]}" "${extra[@]}"
    fi
done
cleanup
for mtu in $mtus; do
    ratio_table "pmeth@$mtu" "tcp@$mtu"
    ratio_table "pmeth@$mtu" "udp@$mtu"
    ratio_table "pmeth@$mtu" "raw@$mtu"
    ratio_table "pmeth_atomic@$mtu" "pmeth@$mtu"
    ((loss > 0)) && ratio_table "pmeth_loss$loss@$mtu" "pmeth@$mtu"
done
echo
echo "CSV: $raw $med"
