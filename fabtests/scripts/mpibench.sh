#!/usr/bin/env bash
# Open MPI over pmeth (pml cm, mtl ofi) against Open MPI's own transports
# (pml ob1 with btl tcp, and with btl vader) and against libfabric's
# tcp;ofi_rxm under the same MTL, with mpi/mpi_bench: ping-pong latency and
# bandwidth, streaming bandwidth, all-to-all at NAS IS-like sizes.
#
#   sudo FI_PROVIDER_PATH=$PWD/build/lib fabtests/scripts/mpibench.sh \
#       [--bench build/mpi/mpi_bench] [--out DIR] [--reps 3] [--mtus "1500 9000"] [--quick]
#       [--no-host] [--no-veth] [--no-ns] [--root-veth] [--tcp-addrs 192.0.2.1/24,192.0.2.2/24] [--no-plot]
#
# Same host: pmeth on lo, tcp over lo, vader (shared memory).
# Two network namespaces (root only; the default Ethernet comparison), at
# each MTU: namespaces pmmpia and pmmpib joined by one veth pair (pmmpiva in
# pmmpia, pmmpivb in pmmpib; fabtests/scripts/netns.sh, prefix pmmpi) with
# 198.51.100.1/24 and 198.51.100.2/24 on the ends, inside the namespaces
# only. mpirun runs inside pmmpia with a hostfile naming the namespaces as
# hosts and fabtests/scripts/netns_rsh.sh as its rsh agent, which starts
# orted with "ip netns exec HOST"; one rank per namespace. The only way
# between the ranks is the veth, for all three transports:
#   pmeth@ns<mtu>  pml cm, mtl ofi, pmeth (FI_PMETH_IFACE = the rank's veth,
#                  FI_PMETH_HOST_ID 1 and 2, or pmeth would use shared memory)
#   tcp@ns<mtu>    pml ob1, btl tcp,self (btl_tcp_if_include 198.51.100.0/24)
#   rxm@ns<mtu>    pml cm, mtl ofi, libfabric's tcp;ofi_rxm (FI_TCP_IFACE)
# The veth's byte counters are printed for every run, and pmeth's own
# statistics (FI_PMETH_STATS) for its runs.
# --root-veth adds the older setup: a veth pair with both ends in the root
# namespace (pmeth@veth<mtu>, rank per end, MPMD); tcp there (tcp@veth<mtu>,
# 192.0.2.1/24 and 192.0.2.2/24 on the ends, only if free on this host) goes
# through lo, not the veth, as the printed counters show.
#
# Writes DIR/raw.csv (prov,test,size,metric,rep,value), DIR/median.csv
# (prov,test,size,metric,value; "prov" is the transport label),
# DIR/stderr.log and, with gnuplot, DIR/mpi_ns<mtu>_lat.png and _bw.png;
# prints ratio tables (first / second on medians). Every mpirun runs under
# timeout. Exit 77 without mpirun.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tcp_addrs=192.0.2.1/24,192.0.2.2/24 bench="" out="" reps=3 mtus="1500 9000" quick="" tmo=${PM_MPIBENCH_TIMEOUT:-240}
veth_runs=1 ns_runs=1 root_veth=0 plot=1 host_runs=1
while (($#)); do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --mtus) mtus=${2//,/ }; shift 2 ;;
    --quick) quick=--quick; reps=1; shift ;;
    --no-veth) veth_runs=0; shift ;;
    --no-ns) ns_runs=0; shift ;;
    --no-host) host_runs=0; shift ;;
    --root-veth) root_veth=1; shift ;;
    --tcp-addrs) tcp_addrs=$2; shift 2 ;;
    --no-plot) plot=0; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "mpibench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$bench" ]] || for c in "$src/build/mpi/mpi_bench" "$PWD/build/mpi/mpi_bench"; do [[ -x "$c" ]] && bench=$c && break; done
[[ -x "$bench" ]] || { echo "mpibench.sh: mpi_bench not found (build with cmake; --bench PATH)" >&2; exit 2; }
bench=$(cd "$(dirname "$bench")" && pwd)/$(basename "$bench")  # orted starts it by path
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
: "${FI_PROVIDER_PATH:=$src/build/lib}"
export FI_PROVIDER_PATH
out=${out:-$src/build/mpibench}
mkdir -p "$out"
out=$(cd "$out" && pwd)
raw=$out/raw.csv med=$out/median.csv log=$out/stderr.log
echo "prov,test,size,metric,rep,value" >"$raw"
: >"$log"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

A=pmmpi0 B=pmmpi1          # --root-veth: the pair in the root namespace
NSP=pmmpi                  # namespaces pmmpia, pmmpib; veths pmmpiva, pmmpivb
NSA=${NSP}a NSB=${NSP}b VA=${NSP}va VB=${NSP}vb
IPA=198.51.100.1/24 IPB=198.51.100.2/24   # TEST-NET-2, only inside the namespaces
ns_up=0 pair_up=0 child=""
cleanup() {
  # The run under way: timeout passes the signal on to mpirun.
  # At most 10 s, then netns.sh down ends what is left in the namespaces.
  if [[ -n "$child" ]] && kill -TERM "$child" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$child" 2>/dev/null
  fi
  child=""
  ((pair_up)) && ip link del "$A" 2>/dev/null
  pair_up=0
  # netns.sh down also ends processes left inside the namespaces (an orted
  # or a rank of ours after a timeout), by PID.
  if ((ns_up)); then "$here/netns.sh" down "$NSP" >>"$log" 2>&1 || echo "mpibench.sh: WARNING: could not remove $NSA/$NSB" >&2; ns_up=0; fi
  rm -rf "$out/rsh-tmp"   # the orteds' TMPDIRs (netns_rsh.sh)
  true
}
trap 'cleanup' EXIT
trap 'exit 130' INT TERM HUP

common=(--oversubscribe --bind-to none -x FI_PROVIDER_PATH)
pmeth=(--mca pml cm --mca mtl ofi --mca opal_common_ofi_provider_include pmeth --mca mtl_ofi_tag_mode ofi_tag_full --mca btl self)
rxm=(--mca pml cm --mca mtl ofi --mca opal_common_ofi_provider_include "tcp;ofi_rxm" --mca mtl_ofi_tag_mode ofi_tag_full --mca btl self -x "FI_PROVIDER=tcp;ofi_rxm")
tcp=(--mca pml ob1 --mca btl tcp,self)
vader=(--mca pml ob1 --mca btl vader,self)

# Why ADDR (a.b.c.d/len) must not be assigned here; empty if it is free.
addr_conflict() {
  local ip=${1%/*} r
  if ip -o addr show | grep -q " inet $ip/"; then echo "$ip is already an address of this host"; return; fi
  if ip -o route show | grep -q "via $ip "; then echo "$ip is a gateway of this host ($(ip -o route show | grep "via $ip " | head -1))"; return; fi
  r=$(ip -o route show to match "$ip" | grep -v "^default" | head -1)
  if [[ -n "$r" ]]; then echo "$ip is on a network this host already uses ($r)"; return; fi
}

# Byte counter of the veth being measured: cnt_dev (in namespace cnt_ns, or
# in ours if empty); 0 if there is none.
cnt_ns="" cnt_dev=""
cnt() {
  [[ -n "$cnt_dev" ]] || { echo 0; return; }
  if [[ -n "$cnt_ns" ]]; then ip netns exec "$cnt_ns" cat "/sys/class/net/$cnt_dev/statistics/$1" 2>/dev/null || echo 0
  else cat "/sys/class/net/$cnt_dev/statistics/$1" 2>/dev/null || echo 0; fi
}
launch=()   # prefix of mpirun (ip netns exec NSA in the namespace setting)

# run LABEL -- mpirun arguments (without mpirun): repetition $rep, appended
# to raw.csv. The callers loop over the repetitions outside and over the
# transports inside, so that a burst of load from elsewhere falls on every
# transport of a setting alike rather than on all repetitions of one.
rep=1
run() {
  local label=$1; shift 2
  local r=$rep t0 r0 st tag
  tag="  [$(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $label rep $r"
  t0=$(cnt tx_bytes) r0=$(cnt rx_bytes)
  echo "== $tag: ${launch[*]} mpirun ${common[*]} $*" >>"$log"
  # In the background, so that a signal interrupts the wait and the EXIT
  # trap cleans up at once instead of after the run.
  timeout -k 5 "$tmo" "${launch[@]}" mpirun "${common[@]}" "$@" >"$out/run.out" 2>"$out/run.err" &
  child=$!
  wait $child
  st=$? child=""
  ((st == 0)) || echo "$tag: FAILED (exit $st$( ((st == 124 || st == 137)) && echo ", timed out after ${tmo}s")); see $log"
  grep -E "^$label,[a-z0-9_]+,[0-9]+,[a-zA-Z_]+,[0-9.]+$" "$out/run.out" |
    awk -F, -v r="$r" 'BEGIN{OFS=","} {print $1,$2,$3,$4,r,$5}' >>"$raw"
  cat "$out/run.out" "$out/run.err" >>"$log"
  if [[ -n "$cnt_dev" ]]; then
    echo "$tag: veth $cnt_dev${cnt_ns:+ (in $cnt_ns)} carried tx $(( $(cnt tx_bytes) - t0 )) B, rx $(( $(cnt rx_bytes) - r0 )) B"
  else
    echo "$tag: $(grep -c "^$label," "$out/run.out") values"
  fi
  # pmeth's own account (FI_PMETH_STATS): bytes on rail 0 per rank, and
  # whether any peer went through shared memory.
  grep -hoE "composite: [0-9]+ peers through shared memory, [0-9]+ through Ethernet|rail0: up tx_frames=[0-9]+ tx_bytes=[0-9]+ rx_frames=[0-9]+ rx_bytes=[0-9]+" \
    "$out/run.err" | sed "s/^/$tag: pmeth stats: /"
}
# values LABEL...: how many figures each label has in raw.csv
values() { local l; for l; do echo "  $l: $(grep -c "^$l," "$raw") values"; done; }

echo "mpi_bench: $bench; output in $out; $reps repetition(s); load: $(uptime | sed 's/.*load/load/')"
if ((host_runs)); then
  echo "-- same host"
  for ((rep = 1; rep <= reps; rep++)); do
    run pmeth@lo -- "${pmeth[@]}" -x FI_PMETH_IFACE=lo -np 2 "$bench" $quick --label pmeth@lo
    run tcp@lo -- "${tcp[@]}" --mca btl_tcp_if_include lo -np 2 "$bench" $quick --label tcp@lo
    run vader -- "${vader[@]}" -np 2 "$bench" $quick --label vader
  done
  values pmeth@lo tcp@lo vader
fi

can_net=0
((veth_runs)) && [[ $(id -u) == 0 ]] && command -v ip >/dev/null && can_net=1
((veth_runs && !can_net)) && echo "-- veth runs skipped (need root and iproute2)"

if ((can_net && ns_runs)); then
  # Fixed names: a second instance must not share them.
  mkdir -p /run/lock
  exec 9>"/run/lock/mpibench-$NSP.lock"
  flock -n 9 || { echo "mpibench.sh: another mpibench.sh uses the namespaces $NSA/$NSB" >&2; exit 2; }
  # The hostfile names the namespaces; netns_rsh.sh starts orted in them.
  printf '%s slots=1\n%s slots=1\n' "$NSA" "$NSB" >"$out/hostfile"
  export PM_NETNS_RSH_HOSTS="$NSA $NSB" PM_NETNS_RSH_TMP=$out/rsh-tmp
  nsargs=(--hostfile "$out/hostfile" --mca plm_rsh_agent "$here/netns_rsh.sh")
  stats=(-x FI_PMETH_STATS=1 -x FI_LOG_LEVEL=warn)
  for mtu in $mtus; do
    echo "-- namespaces $NSA, $NSB joined by veth $VA/$VB, MTU $mtu; mpirun in $NSA"
    ns_up=1
    if ! PM_NETNS_MTU=$mtu "$here/netns.sh" up "$NSP" >>"$log" 2>&1 ||
       ! ip -n "$NSA" addr add "$IPA" dev "$VA" || ! ip -n "$NSB" addr add "$IPB" dev "$VB"; then
      echo "  cannot set up the namespaces (see $log); skipped"
      cleanup
      continue
    fi
    echo "  $NSA: $(ip -n "$NSA" -br addr show dev "$VA")"
    echo "  $NSB: $(ip -n "$NSB" -br addr show dev "$VB")"
    launch=(ip netns exec "$NSA") cnt_ns=$NSA cnt_dev=$VA
    # What the runtime alone (orted's TCP back-channel to mpirun, PMIx
    # exchange) puts on the veth: a job that starts and ends without traffic.
    t0=$(cnt tx_bytes) r0=$(cnt rx_bytes)
    timeout -k 5 60 "${launch[@]}" mpirun "${common[@]}" "${nsargs[@]}" --map-by node -np 2 true >>"$log" 2>&1 ||
      echo "  launching through $here/netns_rsh.sh failed (see $log)"
    echo "  runtime only (mpirun true): veth $VA carried tx $(( $(cnt tx_bytes) - t0 )) B, rx $(( $(cnt rx_bytes) - r0 )) B"
    for ((rep = 1; rep <= reps; rep++)); do
      run pmeth@ns$mtu -- "${nsargs[@]}" "${pmeth[@]}" "${stats[@]}" \
          -np 1 -H "$NSA" -x FI_PMETH_IFACE=$VA -x FI_PMETH_HOST_ID=1 "$bench" $quick --label pmeth@ns$mtu : \
          -np 1 -H "$NSB" -x FI_PMETH_IFACE=$VB -x FI_PMETH_HOST_ID=2 "$bench" $quick --label pmeth@ns$mtu
      run tcp@ns$mtu -- "${nsargs[@]}" "${tcp[@]}" --mca btl_tcp_if_include 198.51.100.0/24 \
          --map-by node -np 2 "$bench" $quick --label tcp@ns$mtu
      run rxm@ns$mtu -- "${nsargs[@]}" "${rxm[@]}" \
          -np 1 -H "$NSA" -x FI_TCP_IFACE=$VA "$bench" $quick --label rxm@ns$mtu : \
          -np 1 -H "$NSB" -x FI_TCP_IFACE=$VB "$bench" $quick --label rxm@ns$mtu
    done
    values pmeth@ns$mtu tcp@ns$mtu rxm@ns$mtu
    launch=() cnt_ns="" cnt_dev=""
    cleanup
  done
fi

if ((can_net && root_veth)); then
  cnt_dev=$A
  for mtu in $mtus; do
    echo "-- veth pair $A/$B in the root namespace, MTU $mtu"
    cleanup
    pair_up=1
    ip link add $A mtu "$mtu" type veth peer name $B mtu "$mtu" || { echo "cannot create the veth pair"; continue; }
    for i in $A $B; do sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1" 2>/dev/null; ip link set $i up; done
    for _ in $(seq 50); do [[ $(cat /sys/class/net/$A/operstate) == up && $(cat /sys/class/net/$B/operstate) == up ]] && break; sleep 0.1; done
    for ((rep = 1; rep <= reps; rep++)); do
      run pmeth@veth$mtu -- "${pmeth[@]}" -np 1 -x FI_PMETH_IFACE=$A -x FI_PMETH_HOST_ID=1 "$bench" $quick --label pmeth@veth$mtu : \
          -np 1 -x FI_PMETH_IFACE=$B -x FI_PMETH_HOST_ID=2 "$bench" $quick --label pmeth@veth$mtu
    done
    values pmeth@veth$mtu
    ta=${tcp_addrs%%,*} tb=${tcp_addrs#*,} why=""
    for x in "$ta" "$tb"; do [[ -z "$why" ]] && why=$(addr_conflict "$x"); done
    if [[ -n "$why" ]]; then
      echo "  tcp@veth$mtu skipped: $why; assigning it to a veth end would disturb the host's own"
      echo "  networking (choose free addresses with --tcp-addrs). Between two addresses of one"
      echo "  namespace TCP goes through lo anyway: pmeth@veth$mtu is compared with tcp@lo below."
    else
      ip addr add "$ta" dev $A && ip addr add "$tb" dev $B
      echo "  route ${ta%/*} -> ${tb%/*}: $(ip route get "${tb%/*}" from "${ta%/*}" | head -1)"
      for ((rep = 1; rep <= reps; rep++)); do
        run tcp@veth$mtu -- "${tcp[@]}" --mca btl_tcp_if_include $A,$B -np 2 "$bench" $quick --label tcp@veth$mtu
      done
      values tcp@veth$mtu
    fi
    cleanup
  done
  cnt_dev=""
fi
rm -f "$out/run.out" "$out/run.err"

# medians
echo "prov,test,size,metric,value" >"$med"
awk -F, 'NR > 1 { k = $1 "," $2 "," $3 "," $4; if (!(k in n)) order[++m] = k; v[k, ++n[k]] = $6 }
  END { for (i = 1; i <= m; i++) { k = order[i]; c = n[k];
          for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++) if (v[k, b] + 0 < v[k, a] + 0) { t = v[k, a]; v[k, a] = v[k, b]; v[k, b] = t }
          med = (c % 2) ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2;
          print k "," med } }' "$raw" >>"$med"

ratio() {
  local num=$1 den=$2
  grep -q "^$num," "$med" && grep -q "^$den," "$med" || return 0
  echo
  echo "ratio $num / $den   (lat_us, us_per_exchange: lower is better; bw_MBps, MBps_per_rank: higher is better)"
  printf '%-9s %8s %-16s %12s %12s %8s\n' test size metric "$num" "$den" ratio
  awk -F, -v a="$num" -v b="$den" '
    NR > 1 { k = $2 "," $3 "," $4; if ($1 == a) va[k] = $5; if ($1 == b) vb[k] = $5; if (!(k in s)) { s[k] = 1; o[++n] = k } }
    END { for (i = 1; i <= n; i++) { k = o[i]; if (!(k in va) || !(k in vb)) continue; split(k, f, ",");
            r = (vb[k] + 0 != 0) ? sprintf("%.2f", va[k] / vb[k]) : "NA";
            printf "%-9s %8s %-16s %12s %12s %8s\n", f[1], f[2], f[3], va[k], vb[k], r } }' "$med"
}
ratio pmeth@lo tcp@lo
ratio pmeth@lo vader
for mtu in $mtus; do
  ratio pmeth@ns$mtu tcp@ns$mtu
  ratio pmeth@ns$mtu rxm@ns$mtu
done
if ((root_veth)); then
  for mtu in $mtus; do
    if grep -q "^tcp@veth$mtu," "$med"; then ratio pmeth@veth$mtu tcp@veth$mtu; else ratio pmeth@veth$mtu tcp@lo; fi
    ratio pmeth@veth$mtu vader
  done
fi

# Plots of the namespace settings: ping-pong latency, and ping-pong and
# streaming bandwidth, against size, one line per transport.
plot_ns() {
  local mtu=$1 labels=() l i lc kind png dat plots t
  for l in pmeth tcp rxm; do grep -q "^$l@ns$mtu,pingpong," "$med" && labels+=("$l"); done
  ((${#labels[@]})) || return 0
  mkdir -p "$out/plot"
  for kind in lat bw; do
    png=$out/mpi_ns${mtu}_$kind.png plots=""
    for i in "${!labels[@]}"; do
      l=${labels[$i]} lc="linecolor $((i + 1))"
      if [[ $kind == lat ]]; then
        dat=$out/plot/ns${mtu}_${l}_pingpong_lat.dat
        awk -F, -v p="$l@ns$mtu" '$1 == p && $2 == "pingpong" && $4 == "lat_us" { print $3, $5 }' "$med" >"$dat"
        plots+="${plots:+, }\"$dat\" using 1:2 with linespoints $lc title \"$l ping-pong\""
      else
        for t in pingpong stream; do
          dat=$out/plot/ns${mtu}_${l}_${t}_bw.dat
          awk -F, -v p="$l@ns$mtu" -v t="$t" '$1 == p && $2 == t && $4 == "bw_MBps" { print $3, $5 }' "$med" >"$dat"
          plots+="${plots:+, }\"$dat\" using 1:2 with linespoints $lc $([[ $t == stream ]] && echo "dashtype 2") title \"$l $t\""
        done
      fi
    done
    gnuplot <<EOF 2>>"$log" || { echo "plot $png: gnuplot failed (see $log)"; continue; }
set terminal pngcairo noenhanced size 900,600
set output "$png"
set title "Open MPI, one rank in each of two namespaces joined by one veth, MTU $mtu\npmeth: pml cm + mtl ofi + pmeth; tcp: pml ob1 + btl tcp; rxm: pml cm + mtl ofi + tcp;ofi_rxm" font ",10"
set logscale xy
set xlabel "message size (bytes)"
set ylabel "$([[ $kind == lat ]] && echo "half round trip (us)" || echo "MB/s (10^6 B/s)")"
set key left top
set grid
plot $plots
EOF
    [[ -s "$png" ]] && echo "plot: $png"
  done
}
if ((plot)); then
  if command -v gnuplot >/dev/null; then
    echo
    for mtu in $mtus; do plot_ns "$mtu"; done
  else
    echo "plots skipped: gnuplot not found (apt-get install gnuplot-nox)"
  fi
fi
echo
echo "load at the end: $(uptime | sed 's/.*load/load/')"
echo "CSV: $med (medians), $raw (every repetition)"
