#!/usr/bin/env bash
# Builds libfabric's own test suite, fabtests 1.17.0 (unmodified, from the
# tarball in shared/thirdparty), against the system libfabric into DIR:
#   scripts/build_upstream_fabtests.sh TARBALL DIR
# DIR/src is the unpacked tree, DIR/install the installed programs and
# runfabtests.sh. A finished build (DIR/install/.built naming the tarball's
# checksum) is reused. Needs autoconf, automake, libtool, make, a C compiler.
set -euo pipefail
tarball=$1
dir=$2
[[ -f $tarball ]] || { echo "no fabtests tarball at $tarball" >&2; exit 1; }
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
stamp=$dir/install/.built
if [[ -f $stamp && $(cat "$stamp") == "$sum" ]]; then
  echo "fabtests already built in $dir/install"
  exit 0
fi
rm -rf "$dir/src" "$dir/install"
mkdir -p "$dir/src"
tar xzf "$tarball" -C "$dir/src" --strip-components=1
cd "$dir/src"
log=$dir/build.log
echo "building fabtests in $dir (log: $log)"
{
  ./autogen.sh
  ./configure --with-libfabric=/usr --prefix="$dir/install"
  make -j"$(nproc)"
  make install
} >"$log" 2>&1 || { tail -40 "$log" >&2; echo "fabtests build failed (see $log)" >&2; exit 1; }
echo "$sum" >"$stamp"
echo "fabtests built in $dir/install"
