#!/usr/bin/env bash
# An emulated cluster on one machine (root): N network namespaces ("nodes"),
# each with a veth whose other end is a port of one Linux bridge in a switch
# namespace, and R ranks of tests/cluster_xfer spread over the nodes (R/N
# per node). Each node has its own pmeth host id: ranks on different nodes
# talk through Ethernet frames across the bridge, ranks of one node through
# shared memory (pmeth's composite path; endpoints on one interface cannot
# reach each other by Ethernet: the bridge does not send a frame back out of
# the port it came from, as no switch does).
#
#   cluster.sh <build dir> <nodes> <ranks> <providers> [patterns] [size] [iterations]
#
# providers: comma-separated, run one after the other on the same cluster,
# e.g. "pmeth,tcp;ofi_rxm" (tcp gets 198.51.100.<node+1>/24 on each veth).
# patterns: default alltoall,incast,ring; size default 65536; iterations 4.
# Prints each rank-0 result line ("pattern ... time_s ..."), then with two
# or more providers the ratio of completion times (first ÷ each other), and
# for pmeth the frames, retransmissions and drops summed from every rank's
# statistics. Exit 0 only if every rank of every run exits 0 and pmeth's
# frames went over the wire. Everything created is removed on exit.
# Exit 77 (skip) without namespaces. PM_CLUSTER_LOGS=DIR keeps every rank's
# output (with its statistics) under DIR/<provider>/.
set -u
build=$(cd "$1" && pwd) || exit 1
nodes=$2 ranks=$3 provs=$4
patterns=${5:-alltoall,incast,ring} size=${6:-65536} iters=${7:-4}
((nodes >= 2 && nodes <= 64 && ranks >= nodes && ranks <= 256)) || { echo "bad nodes/ranks" >&2; exit 2; }
P=pc$(printf '%04x' $(($$ % 65536)))
work=$(mktemp -d /tmp/cluster.XXXXXX) || exit 1
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    for ((i = 0; i < nodes; i++)); do ip netns del "${P}h$i" 2>/dev/null; done
    ip netns del "${P}s" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "${P}s" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit 77; }
ip -n "${P}s" link add "${P}br" type bridge || exit 1
ip -n "${P}s" link set "${P}br" up
for ((i = 0; i < nodes; i++)); do
    ns=${P}h$i
    ip netns add "$ns" || exit 1
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip link add "${P}e$i" netns "$ns" type veth peer name "${P}p$i" netns "${P}s" || exit 1
    ip -n "${P}s" link set "${P}p$i" master "${P}br" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "${P}e$i" up
    ip -n "$ns" addr add "198.51.100.$((i + 1))/24" dev "${P}e$i"
done
for ((i = 0; i < nodes; i++)); do  # carrier on every port
    for _ in $(seq 50); do
        ip -n "${P}h$i" link show "${P}e$i" | grep -q "LOWER_UP" && break
        sleep 0.1
    done
done
echo "cluster.sh: $nodes nodes on bridge ${P}br, $ranks ranks ($((ranks / nodes)) per node), patterns $patterns, $size bytes x $iters, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

declare -A result
fail=0
IFS=, read -r -a provlist <<<"$provs"
for prov in "${provlist[@]}"; do
    dir=$work/run.${prov//[^a-z]/_}
    mkdir -p "$dir"
    pids=()
    for ((r = 0; r < ranks; r++)); do
        i=$((r * nodes / ranks))
        ip netns exec "${P}h$i" env FI_PROVIDER_PATH="$build/lib" FI_PMETH_IFACE="${P}e$i" \
            FI_PMETH_HOST_ID="$(printf '%x' $((0x1000 + i)))" FI_TCP_IFACE="${P}e$i" \
            FI_PMETH_STATS=1 FI_LOG_LEVEL=warn \
            "$build/tests/cluster_xfer" -p "$prov" -r "$r" -n "$ranks" -d "$dir" -t "$patterns" \
            -s "$size" -i "$iters" -T 150 >"$dir/rank$r.log" 2>&1 &
        pids+=($!)
    done
    bad=0
    for ((r = 0; r < ranks; r++)); do
        wait "${pids[$r]}"
        rc=$?
        if ((rc != 0)); then
            bad=$((bad + 1))
            echo "cluster.sh: $prov rank $r exit $rc:"
            grep -v "^ \|statistics\|endpoint:" "$dir/rank$r.log" | tail -3
        fi
    done
    pids=()
    if ((bad)); then
        echo "cluster.sh: FAIL: $prov: $bad of $ranks ranks failed"
        fail=1
        continue
    fi
    echo "== $prov"
    if [[ -n ${PM_CLUSTER_LOGS:-} ]]; then  # keep every rank's output (statistics) there
        mkdir -p "$PM_CLUSTER_LOGS/${prov//[^a-z]/_}" && cp "$dir"/rank*.log "$PM_CLUSTER_LOGS/${prov//[^a-z]/_}/"
    fi
    grep '^pattern' "$dir/rank0.log" | sed 's/^/  /'
    while read -r _ name _ _ _ _ _ _ _ t; do result["$prov/$name"]=$t; done < <(grep '^pattern' "$dir/rank0.log")
    if [[ $prov == pmeth ]]; then
        cat "$dir"/rank*.log | awk '
            / eth: / { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "tx_frames" && !seen) { tx += kv[2]; seen = 1 } }
                       if (match($0, /tx_ring_full=[0-9]+/)) full += substr($0, RSTART + 13, RLENGTH - 13)
                       if (match($0, /rx_ring_drops=[0-9]+/)) rd += substr($0, RSTART + 14, RLENGTH - 14)
                       if (match($0, / recoveries=[0-9]+/)) rc += substr($0, RSTART + 12, RLENGTH - 12)
                       if (match($0, /recovery_resends=[0-9]+/)) rr += substr($0, RSTART + 17, RLENGTH - 17)
                       if (match($0, /spurious_rto=[0-9]+/)) sp += substr($0, RSTART + 13, RLENGTH - 13)
                       seen = 0; eps++ }
            /statistics:   peer / { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "retrans") rt += kv[2];
                                                     if (kv[1] == "window_stalls") ws += kv[2] } }
            /composite:/ { if (match($0, /[0-9]+ peers through shared memory/)) shm += substr($0, RSTART, RLENGTH) + 0 }
            END { want_shm += 0; printf "  pmeth statistics, all %d endpoints: tx_frames %d, retransmissions %d, window stalls %d, tx_ring_full %d, peers through shared memory %d\n", eps, tx, rt, ws, full, shm
                  printf "  receive rings: %d frames dropped by the kernel (full ring); tail recoveries %d (%d frames resent by them), spurious RTOs %d\n", rd, rc, rr, sp
                  if (eps == 0 || tx == 0 || shm != want_shm) exit 1 }' want_shm=$((ranks * (ranks / nodes - 1))) || { echo "cluster.sh: FAIL: pmeth frames did not all go over the wire"; fail=1; }
        r0=$(grep -m1 ' eth: ' "$dir/rank0.log" | grep -o 'rx_frames=[0-9]*\|rx_ring_drops=[0-9]*' | head -2 | tr '\n' ' ')
        echo "  rank 0 (the incast receiver): $r0; retransmissions to it from all ranks:" \
             "$(awk '/statistics:   peer .*@0*1000[;$ ]/ { for (i=1;i<=NF;i++) { split($i,kv,"="); if (kv[1]=="retrans") s+=kv[2] } } END { print s+0 }' "$dir"/rank*.log)"
    fi
done
if ((${#provlist[@]} >= 2)); then
    first=${provlist[0]}
    for prov in "${provlist[@]:1}"; do
        for name in ${patterns//,/ }; do
            a=${result["$first/$name"]:-} b=${result["$prov/$name"]:-}
            [[ -n $a && -n $b ]] && awk -v a="$a" -v b="$b" -v n="$name" -v f="$first" -v p="$prov" -v s="$size" \
                'BEGIN { printf "ratio %s: %s %.4f s / %s %.4f s = %.2f (size %d, MTU 1500)\n", n, f, a, p, b, a / b, s }'
        done
    done
fi
exit $fail
