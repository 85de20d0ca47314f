#!/usr/bin/env bash
# Builds the third-party consumers the tests run against the providers, each
# once into a cache directory, from the unmodified release tarballs in
# shared/thirdparty (never copied into the project):
#
#   thirdparty.sh libfabric CACHE          libfabric 2.6.0 (tcp, rxm, shm) installed
#                                          into CACHE/libfabric-2.6.0/prefix
#   thirdparty.sh sos CACHE NAME [ARGS...] Sandia OpenSHMEM 1.5.3 configured with
#                                          --with-ofi=/usr --enable-pmi-simple ARGS,
#                                          built with its test programs, in
#                                          CACHE/sos-1.5.3-NAME/src (make check there)
#
# A build is redone only when the tarball, the arguments or this script's
# STAMP_REV change (CACHE/<dir>/stamp). Concurrent calls for the same
# directory wait for each other (flock, bounded). Output goes to
# CACHE/<dir>/build.log; its tail is printed on failure.
# Environment: PM_THIRDPARTY_DIR (the tarballs; default: shared/thirdparty
# beside the checkout or one level above), PM_JOBS (make -j, default nproc).
set -euo pipefail
STAMP_REV=1
here=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,12p' "$0" >&2; exit 2; }
(($# >= 2)) || usage
what=$1 cache=$2
shift 2

tpdir=${PM_THIRDPARTY_DIR:-}
if [[ -z "$tpdir" ]]; then
  for d in "$here/../shared/thirdparty" "$here/../../shared/thirdparty"; do
    [[ -d "$d" ]] && { tpdir=$(cd "$d" && pwd); break; }
  done
fi
jobs=${PM_JOBS:-$(nproc)}

case $what in
  libfabric)
    tarball=libfabric-2.6.0.tar.gz dir=libfabric-2.6.0
    ;;
  sos)
    (($# >= 1)) || usage
    tarball=sos-1.5.3.tar.gz dir=sos-1.5.3-$1
    shift
    ;;
  *) usage ;;
esac
if [[ -z "$tpdir" || ! -f "$tpdir/$tarball" ]]; then
  echo "thirdparty.sh: $tarball not found (set PM_THIRDPARTY_DIR to the directory holding it)" >&2
  exit 1
fi

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
top=$cache/$dir
mkdir -p "$top"
exec 9>"$top/lock"
if ! flock -w 3600 9; then
  echo "thirdparty.sh: $top is locked by another build for over an hour" >&2
  exit 1
fi

want="rev=$STAMP_REV sha256=$(sha256sum "$tpdir/$tarball" | cut -d' ' -f1) args=$*"
if [[ -f "$top/stamp" && "$(cat "$top/stamp")" == "$want" ]]; then
  echo "thirdparty.sh: $dir is up to date ($top)"
  exit 0
fi

rm -rf "$top/src" "$top/prefix" "$top/stamp"
log=$top/build.log
: >"$log"
fail() {
  echo "thirdparty.sh: building $dir failed; last lines of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
}
step() {
  local t0=$SECONDS
  echo "+ $*" >>"$log"
  "$@" >>"$log" 2>&1 || fail
  echo "thirdparty.sh: $1 took $((SECONDS - t0)) s" | tee -a "$log"
}

start=$SECONDS
mkdir -p "$top/src"
step tar -xzf "$tpdir/$tarball" -C "$top/src" --strip-components=1
cd "$top/src"
step ./autogen.sh
case $what in
  libfabric)
    step ./configure --prefix="$top/prefix" --enable-only --enable-tcp --enable-rxm --enable-shm
    step make -j"$jobs"
    step make install
    ;;
  sos)
    step ./configure --prefix="$top/prefix" --with-ofi=/usr --enable-pmi-simple "$@"
    step make -j"$jobs"
    # The test programs, without running them (TESTS= runs none).
    step make -j"$jobs" -C modules/tests-sos/test check TESTS=
    ;;
esac
echo "$want" >"$top/stamp"
echo "thirdparty.sh: built $dir in $((SECONDS - start)) s ($top)"
