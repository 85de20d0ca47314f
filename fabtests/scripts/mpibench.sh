#!/usr/bin/env bash
# Open MPI over pmeth (pml cm, mtl ofi) against Open MPI's own transports
# (pml ob1 with btl tcp, and with btl vader), with mpi/mpi_bench: ping-pong
# latency and bandwidth, streaming bandwidth, all-to-all at NAS IS-like sizes.
#
#   sudo FI_PROVIDER_PATH=$PWD/build/lib fabtests/scripts/mpibench.sh \
#       [--bench build/mpi/mpi_bench] [--out DIR] [--reps 3] [--mtus "1500 9000"] [--quick] [--no-veth]
#       [--tcp-addrs 192.0.2.1/24,192.0.2.2/24]
#
# Same host: pmeth on lo, tcp over lo, vader (shared memory).
# Across a veth pair whose two ends stay in the root namespace (root only),
# at each MTU: pmeth with rank 0 on one end and rank 1 on the other (MPMD,
# distinct FI_PMETH_HOST_ID); tcp with 192.0.2.1/24 and 192.0.2.2/24 on the
# ends and btl_tcp_if_include on them. Both ends are local addresses of one
# namespace, so the kernel delivers that TCP traffic through lo, not through
# the veth: the script prints the veth's byte counters for each run to show
# what really crossed it. The addresses are only assigned if nothing on the
# host uses them or their network (on a host whose own network is
# 192.0.2.0/24, 192.0.2.1 may be its gateway: taking it over would cut the
# host off); otherwise the tcp@veth runs are skipped with the reason, and
# pmeth@veth is compared with tcp@lo, which is where that TCP traffic goes.
#
# Writes DIR/raw.csv (prov,test,size,metric,rep,value), DIR/median.csv
# (prov,test,size,metric,value; "prov" is the transport label) and
# DIR/stderr.log, and prints ratio tables pmeth / tcp and pmeth / vader.
# Every mpirun runs under timeout. Exit 77 without mpirun.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tcp_addrs=192.0.2.1/24,192.0.2.2/24 bench="" out="" reps=3 mtus="1500 9000" quick="" veth_runs=1 tmo=${PM_MPIBENCH_TIMEOUT:-240}
while (($#)); do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --mtus) mtus=$2; shift 2 ;;
    --quick) quick=--quick; reps=1; shift ;;
    --no-veth) veth_runs=0; shift ;;
    --tcp-addrs) tcp_addrs=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "mpibench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$bench" ]] || for c in "$src/build/mpi/mpi_bench" "$PWD/build/mpi/mpi_bench"; do [[ -x "$c" ]] && bench=$c && break; done
[[ -x "$bench" ]] || { echo "mpibench.sh: mpi_bench not found (build with cmake; --bench PATH)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
: "${FI_PROVIDER_PATH:=$src/build/lib}"
export FI_PROVIDER_PATH
out=${out:-$src/build/mpibench}
mkdir -p "$out"
raw=$out/raw.csv med=$out/median.csv log=$out/stderr.log
echo "prov,test,size,metric,rep,value" >"$raw"
: >"$log"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

A=pmmpi0 B=pmmpi1
cleanup() { ip link del "$A" 2>/dev/null; true; }
trap 'cleanup' EXIT
trap 'exit 130' INT TERM HUP

common=(--oversubscribe --bind-to none -x FI_PROVIDER_PATH)
pmeth=(--mca pml cm --mca mtl ofi --mca opal_common_ofi_provider_include pmeth --mca mtl_ofi_tag_mode ofi_tag_full --mca btl self)
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

cnt() { cat "/sys/class/net/$1/statistics/$2" 2>/dev/null || echo 0; }

# run LABEL -- mpirun arguments (without mpirun): reps runs, each appends to raw.csv
run() {
  local label=$1; shift 2
  local r line
  for ((r = 1; r <= reps; r++)); do
    local t0=$(cnt $A tx_bytes) r0=$(cnt $A rx_bytes)
    echo "== $label rep $r: mpirun $*" >>"$log"
    if ! timeout -k 5 "$tmo" mpirun "${common[@]}" "$@" >"$out/run.out" 2>>"$log"; then
      echo "  $label rep $r: FAILED or timed out (see $log)"
    fi
    grep -E "^$label,[a-z0-9_]+,[0-9]+,[a-zA-Z_]+,[0-9.]+$" "$out/run.out" |
      awk -F, -v r="$r" 'BEGIN{OFS=","} {print $1,$2,$3,$4,r,$5}' >>"$raw"
    cat "$out/run.out" >>"$log"
    if [[ -e /sys/class/net/$A ]]; then
      echo "  $label rep $r: veth $A carried tx $(( $(cnt $A tx_bytes) - t0 )) B, rx $(( $(cnt $A rx_bytes) - r0 )) B"
    fi
  done
  echo "  $label: $(grep -c "^$label," "$raw") values"
}

echo "mpi_bench: $bench; output in $out; $reps repetition(s)"
echo "-- same host"
run pmeth@lo -- "${pmeth[@]}" -x FI_PMETH_IFACE=lo -np 2 "$bench" $quick --label pmeth@lo
run tcp@lo -- "${tcp[@]}" --mca btl_tcp_if_include lo -np 2 "$bench" $quick --label tcp@lo
run vader -- "${vader[@]}" -np 2 "$bench" $quick --label vader

if ((veth_runs)) && [[ $(id -u) == 0 ]] && command -v ip >/dev/null; then
  for mtu in $mtus; do
    echo "-- veth pair $A/$B in the root namespace, MTU $mtu"
    cleanup
    ip link add $A mtu "$mtu" type veth peer name $B mtu "$mtu" || { echo "cannot create the veth pair"; continue; }
    for i in $A $B; do sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1" 2>/dev/null; ip link set $i up; done
    for _ in $(seq 50); do [[ $(cat /sys/class/net/$A/operstate) == up && $(cat /sys/class/net/$B/operstate) == up ]] && break; sleep 0.1; done
    run pmeth@veth$mtu -- "${pmeth[@]}" -np 1 -x FI_PMETH_IFACE=$A -x FI_PMETH_HOST_ID=1 "$bench" $quick --label pmeth@veth$mtu : \
        -np 1 -x FI_PMETH_IFACE=$B -x FI_PMETH_HOST_ID=2 "$bench" $quick --label pmeth@veth$mtu
    ta=${tcp_addrs%%,*} tb=${tcp_addrs#*,} why=""
    for x in "$ta" "$tb"; do [[ -z "$why" ]] && why=$(addr_conflict "$x"); done
    if [[ -n "$why" ]]; then
      echo "  tcp@veth$mtu skipped: $why; assigning it to a veth end would disturb the host's own"
      echo "  networking (choose free addresses with --tcp-addrs). Between two addresses of one"
      echo "  namespace TCP goes through lo anyway: pmeth@veth$mtu is compared with tcp@lo below."
    else
      ip addr add "$ta" dev $A && ip addr add "$tb" dev $B
      echo "  route ${ta%/*} -> ${tb%/*}: $(ip route get "${tb%/*}" from "${ta%/*}" | head -1)"
      run tcp@veth$mtu -- "${tcp[@]}" --mca btl_tcp_if_include $A,$B -np 2 "$bench" $quick --label tcp@veth$mtu
    fi
    cleanup
  done
elif ((veth_runs)); then
  echo "-- veth runs skipped (need root and iproute2)"
fi

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
  if grep -q "^tcp@veth$mtu," "$med"; then ratio pmeth@veth$mtu tcp@veth$mtu; else ratio pmeth@veth$mtu tcp@lo; fi
  ratio pmeth@veth$mtu vader
done
echo
echo "CSV: $med (medians), $raw (every repetition)"
