#!/usr/bin/env bash
# Sandia OpenSHMEM 1.5.3's test suite over the providers, in every
# configuration: SOS's default build (asks for FI_PROGRESS_AUTO) and its
# --enable-ofi-manual-progress build, each over pmeth (both PEs with one host
# id: shared memory), pmeth_eth (host ids 1 and 2: Ethernet frames on lo) and
# pmshm; 2 PEs under Hydra (tests/run_sos.sh). ctest runs only the default
# build over pmeth (sos.default.pmeth) unless configured with -DPM_SOS_ALL=ON.
#
#   scripts/sos.sh [--build DIR] [--builds "default manual"] [--settings "pmeth pmeth_eth pmshm"]
#
# DIR is a configured and built tree (default: build). SOS is built (once) into
# its PM_THIRDPARTY_CACHE. Logs: DIR/sos-results/<build>.<setting>/; the
# summary is printed and written to DIR/sos-results/summary.txt.
# Exit status: 0 if every run passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bld=$root/build builds="default manual" settings="pmeth pmeth_eth pmshm"
while (($#)); do
  case $1 in
    --build) bld=$2; shift 2 ;;
    --builds) builds=$2; shift 2 ;;
    --settings) settings=$2; shift 2 ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
  esac
done
bld=$(cd "$bld" && pwd) || exit 2
cached() { sed -n "s/^$1:[A-Z]*=//p" "$bld/CMakeCache.txt"; }
cache=$(cached PM_THIRDPARTY_CACHE)
provdir=$(cached PM_PROVIDER_DIR)
tpdir=$(cached PM_THIRDPARTY_DIR)
[[ -n "$cache" && -n "$provdir" ]] || { echo "sos.sh: $bld is not a configured build tree of this project"; exit 2; }
export FI_PROVIDER_PATH=$provdir
[[ -n "$tpdir" ]] && export PM_THIRDPARTY_DIR=$tpdir

results=$bld/sos-results
mkdir -p "$results"
summary=()
rc=0
for b in $builds; do
  case $b in
    default) args=() ;;
    manual) args=(--enable-ofi-manual-progress) ;;
    *) echo "sos.sh: unknown build $b"; exit 2 ;;
  esac
  if ! "$root/scripts/thirdparty.sh" sos "$cache" "$b" "${args[@]}"; then
    summary+=("$b: SOS build failed"); rc=1; continue
  fi
  for s in $settings; do
    out=$results/$b.$s
    rm -rf "$out"
    SOS_RESULTS=$out "$root/tests/run_sos.sh" "$cache/sos-1.5.3-$b/src" "$s" 2>&1 | tee "$results/$b.$s.txt"
    ((PIPESTATUS[0] == 0)) || rc=1
    line=$(grep "^SOS $s: " "$results/$b.$s.txt" | tail -n1)
    fails=$(sed -n 's/^failing tests: //p' "$results/$b.$s.txt")
    nofab=$(sed -n 's/^no fabric: \([0-9]*\) tests.*: /\1 without a fabric: /p' "$results/$b.$s.txt")
    summary+=("$b $line${fails:+ (failing: $fails)}${nofab:+ ($nofab)}")
  done
done
printf '%s\n' "${summary[@]}" | tee "$results/summary.txt"
exit $rc
