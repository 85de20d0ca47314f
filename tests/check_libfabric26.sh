#!/usr/bin/env bash
# The providers and libfabric 2.6 (built by scripts/thirdparty.sh libfabric):
#
#   check_libfabric26.sh build SRC BUILD PREFIX
#       configures the project in BUILD against PREFIX's headers and library
#       (pkg-config), with -Werror on the project's sources, and builds the
#       two provider DSOs; they must link PREFIX's library and reference no
#       symbol version newer than FABRIC_1.4 (abi/symver.h)
#   check_libfabric26.sh fi_info PREFIX PROV
#       PREFIX's fi_info (asking for API 2.6) lists PROV from FI_PROVIDER_PATH,
#       and the core logs no "fi_version ... < requested" for it
#   check_libfabric26.sh pingpong PREFIX PROV [HOSTID_SERVER HOSTID_CLIENT]
#       PREFIX's fi_pingpong (RDM, every default size) between two processes
#       over PROV; with host ids, each side gets its FI_<PROV>_HOST_ID (pmeth:
#       different ids make the traffic go through Ethernet frames)
#   check_libfabric26.sh old_core DSO_DIR PROV
#       a DSO built against 2.6 (DSO_DIR) offered to the system's libfabric
#       1.17: it loads, refuses to register and says why on stderr, whatever
#       FI_LOG_LEVEL; fi_info does not list it
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-}
shift || true

case $mode in
  build)
    src=$1 bld=$2 prefix=$3
    export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
    # (Outputs are captured before grep -q: with pipefail, a writer killed by
    # SIGPIPE when grep -q stops reading would fail the pipeline.)
    ver=$(pkg-config --modversion libfabric)
    [[ $ver == 2.6* ]] || { echo "FAIL: no libfabric 2.6 in $prefix (found '$ver')"; exit 1; }
    timeout 900 cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPM_BUILD_TESTS=OFF -DPM_BUILD_MPI=OFF -DCMAKE_CXX_FLAGS=-Werror -DCMAKE_C_FLAGS=-Werror >"$bld.configure.log" 2>&1 ||
      { tail -n 30 "$bld.configure.log"; echo "FAIL: configure against $prefix"; exit 1; }
    timeout 1500 cmake --build "$bld" -j"${PM_JOBS:-$(nproc)}" --target pmshm-fi pmeth-fi || { echo "FAIL: build against $prefix"; exit 1; }
    grep -q '^LIBFABRIC_VERSION:INTERNAL=2\.6' "$bld/CMakeCache.txt" || { echo "FAIL: $bld did not find libfabric 2.6"; exit 1; }
    for p in pmshm pmeth; do
      dso=$bld/lib/lib$p-fi.so
      [[ -f "$dso" ]] || { echo "FAIL: $dso not built"; exit 1; }
      deps=$(ldd "$dso")
      grep -q "$prefix/lib/libfabric.so.1" <<<"$deps" || { echo "FAIL: $dso does not link $prefix's libfabric"; exit 1; }
      vers=$(objdump -T "$dso" | grep -o 'FABRIC_1\.[0-9]*' | sort -u | tr '\n' ' ')
      echo "lib$p-fi.so references: $vers"
      if grep -q 'FABRIC_1\.\([5-9]\|[1-9][0-9]\)' <<<"$vers"; then
        echo "FAIL: $dso references a symbol version libfabric 1.17 lacks"; exit 1
      fi
    done
    echo ok
    ;;
  fi_info)
    prefix=$1 prov=$2
    export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    ver=$("$prefix/bin/fi_info" --version)
    echo "$ver"
    grep -q '^libfabric: 2\.6' <<<"$ver" || { echo "FAIL: $prefix/bin/fi_info does not run libfabric 2.6"; exit 1; }
    out=$(FI_LOG_LEVEL=warn timeout 60 "$prefix/bin/fi_info" -p "$prov" 2>&1)
    rc=$?
    echo "$out" | head -n 40
    if grep -q "Provider $prov fi_version" <<<"$out"; then
      echo "FAIL: libfabric 2.6 skips $prov for its API version"; exit 1
    fi
    ((rc == 0)) && grep -q "provider: $prov" <<<"$out" || { echo "FAIL: fi_info (2.6) does not list $prov"; exit 1; }
    echo ok
    ;;
  pingpong)
    prefix=$1 prov=$2 hs=${3:-} hc=${4:-}
    export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    pp=$prefix/bin/fi_pingpong
    up=$(tr a-z A-Z <<<"$prov")
    port=$((20000 + RANDOM % 20000))
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    env ${hs:+FI_${up}_HOST_ID=$hs} timeout 90 "$pp" -p "$prov" -e rdm -B "$port" -I 200 >"$log" 2>&1 &
    srv=$!
    sleep 0.3
    env ${hc:+FI_${up}_HOST_ID=$hc} timeout 90 "$pp" -p "$prov" -e rdm -P "$port" -I 200 127.0.0.1
    cli=$?
    wait "$srv"
    rc=$?
    echo "--- server"; cat "$log"
    ((cli == 0 && rc == 0)) || { echo "FAIL: fi_pingpong (2.6) over $prov: client $cli, server $rc"; exit 1; }
    echo ok
    ;;
  old_core)
    dir=$1 prov=$2
    [[ -f "$dir/lib$prov-fi.so" ]] || { echo "FAIL: no $dir/lib$prov-fi.so"; exit 1; }
    sysver=$(fi_info --version | sed -n 's/^libfabric: //p')
    out=$(FI_PROVIDER_PATH=$dir timeout 60 fi_info -l 2>&1)
    echo "libfabric $sysver, FI_PROVIDER_PATH=$dir: fi_info -l said:"
    echo "$out" | grep -v '^    \|^[a-z0-9_]*:$'
    if grep -q "^$prov:$" <<<"$out"; then
      echo "FAIL: libfabric $sysver lists a $prov built against 2.6"; exit 1
    fi
    grep -q "^$prov: built against libfabric 2\.6 headers, cannot run in libfabric ${sysver%.*}" <<<"$out" ||
      { echo "FAIL: $prov did not say why it refused"; exit 1; }
    # Refused cleanly: its knobs are gone and libfabric still works.
    knobs=$(FI_PROVIDER_PATH=$dir timeout 60 fi_info -e 2>/dev/null)
    if grep -q "FI_$(tr a-z A-Z <<<"$prov")_" <<<"$knobs"; then
      echo "FAIL: the refused provider's knobs are still listed"; exit 1
    fi
    echo "ok: refused loudly"
    ;;
  *)
    sed -n '2,21p' "$0" >&2; exit 2 ;;
esac
