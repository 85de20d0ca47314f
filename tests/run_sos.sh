#!/usr/bin/env bash
# Runs Sandia OpenSHMEM's own test suite (make check in
# modules/tests-sos/test of a build made by scripts/thirdparty.sh) with 2 PEs
# started by Hydra over one of the providers, and prints the pass/fail counts
# and every failing test with the last lines of its log.
#
#   run_sos.sh SOS_SRC SETTING [make check arguments, e.g. TESTS='hello ping']
#
# SETTING:
#   pmeth      pmeth on lo, both PEs with this machine's host id: the
#              composite device's shared memory carries the traffic
#   pmeth_eth  pmeth on lo, PE 0 with host id 1 and PE 1 with host id 2:
#              every transfer goes through Ethernet frames on lo
#   pmshm      pmshm
# Environment: FI_PROVIDER_PATH (the providers), SOS_TEST_TIMEOUT (seconds per
# test, default 120), SOS_NP (PEs, default 2), SOS_RESULTS (a directory to copy
# the logs to). Every test is bounded: each PE by sos_pe.sh, Hydra by
# MPIEXEC_TIMEOUT and by timeout(1).
# Exit status: 0 if at least one test ran and none failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
(($# >= 2)) || { sed -n '2,20p' "$0" >&2; exit 2; }
src=$1 setting=$2
shift 2
testdir=$src/modules/tests-sos/test
[[ -f "$testdir/Makefile" ]] || { echo "FAIL: no SOS build in $src (scripts/thirdparty.sh sos ...)"; exit 1; }
: "${FI_PROVIDER_PATH:?FI_PROVIDER_PATH must name the providers directory}"
hydra=$(command -v mpiexec.hydra) || { echo "FAIL: mpiexec.hydra not found (apt-get install mpich)"; exit 1; }
tmo=${SOS_TEST_TIMEOUT:-120}
np=${SOS_NP:-2}

unset SOS_PE_HOST_IDS FI_PMETH_HOST_ID
case $setting in
  pmeth)     export SHMEM_OFI_PROVIDER=pmeth FI_PMETH_IFACE=lo ;;
  pmeth_eth) export SHMEM_OFI_PROVIDER=pmeth FI_PMETH_IFACE=lo SOS_PE_HOST_IDS=1,2 ;;
  pmshm)     export SHMEM_OFI_PROVIDER=pmshm ;;
  *) echo "run_sos.sh: unknown setting $setting"; exit 2 ;;
esac
export SOS_PE_TIMEOUT=$tmo MPIEXEC_TIMEOUT=$((tmo + 10)) FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn}
runner="timeout -k 5 $((tmo + 20)) $hydra -np $np $here/sos_pe.sh"

echo "SOS tests in $testdir, setting $setting ($SHMEM_OFI_PROVIDER${SOS_PE_HOST_IDS:+, host ids $SOS_PE_HOST_IDS}), $tmo s per test"
start=$SECONDS
# Remove the results of an earlier run, so that only this run's are counted.
find "$testdir" -name '*.trs' -delete
make -k -C "$testdir" check TEST_RUNNER="$runner" "$@" >"$testdir/check.out" 2>&1
make_rc=$?
elapsed=$((SECONDS - start))

pass=0 fail=0 skip=0 failed=()
while IFS= read -r trs; do
  res=$(sed -n 's/^:test-result: //p' "$trs" | head -n1)
  name=${trs#"$testdir"/}
  name=${name%.trs}
  case $res in
    PASS|XFAIL) pass=$((pass + 1)) ;;
    SKIP) skip=$((skip + 1)) ;;
    *) fail=$((fail + 1)); failed+=("$name") ;;
  esac
done < <(find "$testdir" -name '*.trs' | sort)

# Tests that found no fabric (the provider refused SOS's hints) are listed
# together with the provider's reason; the others one by one with SOS's error
# lines, the provider's warnings and how the PEs ended.
nofab=() other=()
for t in "${failed[@]}"; do
  if grep -q -s "did not find any valid fabric" "$testdir/$t.log"; then nofab+=("$t"); else other+=("$t"); fi
done
for t in "${other[@]}"; do
  echo "--- FAIL $t ($testdir/$t.log):"
  grep -a -E '^\[[0-9]+\] +|<warn> .*pm(eth|shm)|terminated with signal|exit status|Terminated|Killed|FAIL|ERROR' \
    "$testdir/$t.log" | grep -v 'fi_getinfo: provider .* returned -61' | head -n 8 | cut -c1-300
done
((${#other[@]})) && echo "failing tests: ${other[*]}"
if ((${#nofab[@]})); then
  # The provider's own info-level line saying why, from one rerun.
  why=$(cd "$(dirname "$testdir/${nofab[0]}")" && FI_LOG_LEVEL=info SOS_PE_TIMEOUT=20 \
        timeout -k 5 40 "$hydra" -np 1 "$here/sos_pe.sh" "./$(basename "${nofab[0]}")" 2>&1 |
        grep -a -m1 "$SHMEM_OFI_PROVIDER.*\(does not fit the hints\|unavailable\)")
  echo "no fabric: ${#nofab[@]} tests failed in shmem_init, OFI transport did not find any valid fabric services: ${why#*<info> }"
  echo "  (${nofab[*]:0:5} ...)"
fi
if [[ -n "${SOS_RESULTS:-}" ]]; then
  mkdir -p "$SOS_RESULTS"
  (cd "$testdir" && find . \( -name '*.log' -o -name '*.trs' \) -print0 | tar --null -cf - -T -) |
    tar -xf - -C "$SOS_RESULTS"
  cp "$testdir/check.out" "$SOS_RESULTS/"
fi
echo "SOS $setting: $pass passed, $fail failed, $skip skipped in ${elapsed} s"
if ((pass + fail == 0)); then
  echo "FAIL: no test ran (make check exit $make_rc); last lines of its output:"
  tail -n 20 "$testdir/check.out"
  exit 1
fi
((fail == 0))
