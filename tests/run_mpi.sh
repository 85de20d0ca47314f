#!/usr/bin/env bash
# Runs one MPI program with Open MPI over pmeth (pml cm, mtl ofi, full tag
# mode) on lo, or across a veth pair whose two ends stay in the root
# namespace (rank 0 on the first end, rank 1 on the second, distinct
# FI_PMETH_HOST_ID). The veth is created here and always deleted (trap).
# Only 2 ranks with --veth: a frame sent on one end leaves through the pair,
# so two ranks on the same end do not hear each other.
#
#   run_mpi.sh [options] -- program [args]
#     --np N            ranks (default 2)
#     --veth NAME       use the veth pair NAME0/NAME1 (root only; 2 ranks), else lo
#     --mtu M           MTU of the veth pair (default 9000)
#     --timeout S       bound of the mpirun (default 100 s; killed 5 s later)
#     --mca KEY VALUE   extra Open MPI parameter (repeatable)
#     --expect REGEX    the output must match this extended regex
#     --min-bytes B     veth: each direction must carry at least B bytes (default 65536)
# Environment: MPIRUN (default: mpirun from PATH), FI_PROVIDER_PATH (the build's lib/).
# Exit 77 (skipped) when mpirun is missing, or for --veth without root.
set -u
np=2 veth= mtu=9000 tmo=100 expect= min_bytes=65536
mca=()
while (($#)); do
  case "$1" in
    --np) np=$2; shift 2 ;;
    --veth) veth=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --timeout) tmo=$2; shift 2 ;;
    --mca) mca+=(--mca "$2" "$3"); shift 3 ;;
    --expect) expect=$2; shift 2 ;;
    --min-bytes) min_bytes=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run_mpi.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "run_mpi.sh: no program given" >&2; exit 2; }

mpirun=${MPIRUN:-$(command -v mpirun || true)}
if [[ -z "$mpirun" || ! -x "$mpirun" ]]; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77
fi
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
: "${FI_PROVIDER_PATH:?FI_PROVIDER_PATH must name the directory of libpmeth-fi.so}"
export FI_PROVIDER_PATH

# pml cm + mtl ofi restricted to pmeth (opal_common_ofi_provider_include also
# restricts btl ofi, which osc rdma may use); ofi_tag_full makes MPI_Init fail
# if pmeth could not give FI_DIRECTED_RECV + 4 bytes of remote CQ data.
base=(--oversubscribe --bind-to none
      --mca pml cm --mca mtl ofi --mca opal_common_ofi_provider_include pmeth
      --mca mtl_ofi_tag_mode ofi_tag_full
      -x FI_PROVIDER_PATH)
# btl: only self (no vader, no tcp) unless the caller names the btls (osc rdma
# needs --mca btl ofi,self); parameters are not given twice.
[[ " ${mca[*]} " == *" --mca btl "* ]] || base+=(--mca btl self)
out=$(mktemp /tmp/run_mpi.XXXXXX)
cleanup() {
  local rc=$?
  if [[ -n "$veth" ]]; then ip link del "${veth}0" 2>/dev/null; fi
  rm -f "$out"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

stat() { cat "/sys/class/net/$1/statistics/$2" 2>/dev/null || echo 0; }

if [[ -z "$veth" ]]; then
  cmd=("$mpirun" "${base[@]}" "${mca[@]}" -x FI_PMETH_IFACE=lo -np "$np" "$@")
else
  if [[ $(id -u) != 0 ]]; then echo "SKIP: the veth pair needs root"; exit 77; fi
  command -v ip >/dev/null || { echo "SKIP: ip (iproute2) not found"; exit 77; }
  ((np == 2)) || { echo "run_mpi.sh: --veth runs exactly 2 ranks (one per end)" >&2; exit 2; }
  a=${veth}0 b=${veth}1
  ip link del "$a" 2>/dev/null   # leftovers of an earlier run of this test
  ip link add "$a" mtu "$mtu" type veth peer name "$b" mtu "$mtu" || { echo "FAIL: cannot create veth $a/$b"; exit 1; }
  for i in "$a" "$b"; do
    sysctl -qw "net.ipv6.conf.$i.disable_ipv6=1" 2>/dev/null
    ip link set "$i" up
  done
  for _ in $(seq 50); do
    [[ $(cat /sys/class/net/$a/operstate) == up && $(cat /sys/class/net/$b/operstate) == up ]] && break
    sleep 0.1
  done
  tx0=$(stat "$a" tx_bytes) rx0=$(stat "$a" rx_bytes)
  # MPMD: rank 0 on one end, rank 1 on the other; frames sent on one end
  # arrive on the other. Distinct host ids, as on two machines.
  cmd=("$mpirun" "${base[@]}" "${mca[@]}"
       -np 1 -x FI_PMETH_IFACE="$a" -x FI_PMETH_HOST_ID=1 "$@" :
       -np 1 -x FI_PMETH_IFACE="$b" -x FI_PMETH_HOST_ID=2 "$@")
fi

echo "+ ${cmd[*]}"
timeout -k 5 "$tmo" "${cmd[@]}" >"$out" 2>&1
rc=$?
cat "$out"
if ((rc == 124 || rc == 137)); then echo "FAIL: mpirun did not finish within ${tmo} s"; fi
if ((rc == 0)) && [[ -n "$expect" ]] && ! grep -Eq -- "$expect" "$out"; then
  echo "FAIL: the output does not match /$expect/"; rc=1
fi
if ((rc == 0)) && [[ -n "$veth" ]]; then
  tx=$(($(stat "$a" tx_bytes) - tx0)) rx=$(($(stat "$a" rx_bytes) - rx0))
  echo "veth $a (mtu $mtu): tx ${tx} bytes, rx ${rx} bytes during the run"
  if ((tx < min_bytes || rx < min_bytes)); then
    echo "FAIL: less than $min_bytes bytes crossed the veth in a direction: the ranks did not talk over it"; rc=1
  fi
fi
exit "$rc"
